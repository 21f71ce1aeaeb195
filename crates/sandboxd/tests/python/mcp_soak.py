"""Agents working through tasks with the official MCP Python SDK 2.x while the test kills the
daemon (SIGKILL) and restarts it under them. Prints one JSON report on stdout for the Rust test
to judge.

    SANDBOXD_SOAK_TOKENS=token,token,... python mcp_soak.py URL SECONDS

Each agent loops: give_me_work, request_sandbox, sandbox_sql (every other task), i_am_done,
until SECONDS have passed (then it finishes its task) or no task is left. Agents alternate
between a 2025-11-25 session and the SDK's default (2026-07-28, stateless).

A call gets CALL_TIMEOUT seconds to answer or fail; one that does neither is hung, and counted.
A call that fails as a restart makes calls fail (the transport's errors, an answer reported
lost) is made again, as an agent would, for up to RETRY_FOR seconds; when the SDK's own
connection is broken the agent opens a new one. A call that still fails is a failure, and
counted. Every retry and reconnection is counted by its cause.
"""

import json
import os
import sys
import time
from collections import Counter

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

URL, SECONDS = sys.argv[1], float(sys.argv[2])
TOKENS = os.environ["SANDBOXD_SOAK_TOKENS"].split(",")
CALL_TIMEOUT = 30
RETRY_FOR = 45


class Broken(Exception):
    """The SDK connection cannot carry calls any more: open a new one."""


class Agent:
    def __init__(self, index, token):
        self.index = index
        self.token = token
        self.mode = "legacy" if index % 2 == 0 else "auto"
        self.steps = []
        self.cycle = 0
        self.done = False
        # Until when the current call (or reaching the daemon at all) may be retried.
        self.deadline = None
        self.cycles = []
        self.calls = 0
        self.retries = Counter()
        self.reconnects = Counter()
        self.hung = []
        self.failures = []

    def plan(self):
        steps = [("give_me_work", {}), ("request_sandbox", {"services": ["postgres"]})]
        if self.cycle % 2 == 0:
            steps.append(("sandbox_sql", {"service": "postgres", "statement": "SELECT 1"}))
        steps.append(("i_am_done", {"summary": "soak"}))
        return steps

    def retry(self, cause):
        """Counts a retry of the current call, or gives it up as a failure past its deadline."""
        if self.deadline is None:
            self.deadline = time.monotonic() + RETRY_FOR
        if time.monotonic() <= self.deadline:
            self.retries[cause] += 1
            return
        verb = self.steps[0][0] if self.steps else "connect"
        self.failures.append({"verb": verb, "mode": self.mode, "cause": cause, "at": time.time()})
        self.deadline = None
        if self.steps:
            self.steps.pop(0)
        else:
            self.done = True

    async def run(self, stop_at):
        headers = {"Authorization": f"Bearer {self.token}"}
        while not self.done:
            try:
                async with httpx2.AsyncClient(headers=headers, timeout=CALL_TIMEOUT) as http:
                    async with Client(streamable_http_client(f"{URL}/mcp", http_client=http), mode=self.mode) as client:
                        await self.work(client, stop_at)
            except Exception as error:  # noqa: BLE001 - whatever the broken connection raised
                cause = str(error) if isinstance(error, Broken) else f"transport {type(error).__name__}"
                self.reconnects[cause] += 1
                self.retry(cause)
                await anyio.sleep(0.5)

    async def work(self, client, stop_at):
        while True:
            if not self.steps:
                if time.monotonic() >= stop_at:
                    self.done = True
                    return
                self.steps = self.plan()
            verb, args = self.steps[0]
            self.calls += 1
            try:
                with anyio.fail_after(CALL_TIMEOUT):
                    result = await client.call_tool(verb, args)
            except TimeoutError:
                self.hung.append({"verb": verb, "mode": self.mode, "at": time.time()})
                raise Broken("hung") from None
            except MCPError as error:
                if "answer is lost" not in error.message:
                    raise Broken(f"mcp error {error.code}") from error
                self.retry("lost answer")
                await anyio.sleep(0.5)
                continue
            envelope = result.structured_content or {}
            # `no_work` is retryable (later), but here it means every task is done.
            if result.is_error and envelope.get("retryable") and envelope.get("error") != "no_work":
                self.retry(f"retryable {envelope.get('error')}")
                await anyio.sleep(0.5)
                continue
            self.deadline = None
            self.steps.pop(0)
            self.judge(verb, envelope)
            if self.done:
                return

    def judge(self, verb, envelope):
        error = envelope.get("error")
        if verb == "give_me_work" and error == "no_work":
            self.steps, self.done = [], True
        elif verb == "give_me_work" and error == "out_of_order" and "already hold" in envelope.get("message", ""):
            pass  # its claim went through; the answer was lost
        elif error:
            self.failures.append({"verb": verb, "mode": self.mode, "answer": envelope, "at": time.time()})
        elif verb == "i_am_done":
            self.cycles.append(time.time())
            self.cycle += 1

    def report(self):
        return {
            "agent": self.index,
            "mode": self.mode,
            "cycles": self.cycles,
            "calls": self.calls,
            "retries": dict(self.retries),
            "reconnects": dict(self.reconnects),
            "hung": self.hung,
            "failures": self.failures,
        }


async def main():
    agents = [Agent(i, token) for i, token in enumerate(TOKENS)]
    stop_at = time.monotonic() + SECONDS
    async with anyio.create_task_group() as tasks:
        for agent in agents:
            tasks.start_soon(agent.run, stop_at)
    print(json.dumps({"agents": [agent.report() for agent in agents]}), flush=True)


anyio.run(main)
