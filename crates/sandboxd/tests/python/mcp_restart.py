"""One agent's 2025-11-25 session through the official MCP Python SDK 2.x while the daemon is
killed (SIGKILL) and restarted under it, twice: once between two calls, once in the middle of a
slow call. Prints one JSON report on stdout for the Rust test to judge.

    SANDBOXD_AGENT_TOKEN=... python mcp_restart.py URL

Talks with the test over its standard streams: a line `kill` on stdout means "kill and restart
the daemon now"; the test answers a line on stdin once the daemon is back. Every HTTP request
the SDK sends is recorded (its JSON-RPC method and session id), so the report shows whether the
SDK kept its session or had to open a new one.
"""

import json
import os
import sys
import time

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

URL = sys.argv[1]
TOKEN = os.environ["SANDBOXD_AGENT_TOKEN"]
HEADERS = {"Authorization": f"Bearer {TOKEN}"}
# Longer than the SDK's reconnection (two tries, three seconds apart): a call still unanswered
# past this hangs.
PATIENCE = 40

SENT = []


async def record(request):
    """Every request: its JSON-RPC method (None for a GET or DELETE) and its session id."""
    method = None
    if request.method == "POST":
        try:
            method = json.loads(request.content).get("method")
        except ValueError:
            pass
    SENT.append({"http": request.method, "method": method, "session": request.headers.get("mcp-session-id")})


async def restart():
    print("kill", flush=True)
    await anyio.to_thread.run_sync(sys.stdin.readline)


async def call(client, verb, args=None):
    """The call's envelope and whether it was an error, or the MCP error that ended it."""
    started = time.monotonic()
    try:
        with anyio.fail_after(PATIENCE):
            result = await client.call_tool(verb, args or {})
    except TimeoutError:
        return {"verb": verb, "hung": True}
    except MCPError as error:
        return {"verb": verb, "mcp_error": error.message, "code": error.code}
    return {
        "verb": verb,
        "is_error": bool(result.is_error),
        "structured": result.structured_content,
        "seconds": round(time.monotonic() - started, 1),
    }


async def main():
    report = {"calls": []}
    calls = report["calls"]
    sql = {"service": "postgres", "statement": "SELECT 1"}
    async with httpx2.AsyncClient(headers=HEADERS, timeout=60, event_hooks={"request": [record]}) as http:
        async with Client(streamable_http_client(URL, http_client=http), mode="legacy") as client:
            report["protocol"] = client.protocol_version
            calls.append(await call(client, "give_me_work"))
            calls.append(await call(client, "request_sandbox", {"services": ["postgres"]}))
            # Killed between two calls: the next call simply goes on in the same session.
            await restart()
            calls.append(await call(client, "sandbox_sql", sql))
            # Killed while a call runs: its answer is lost, and the SDK must say so.
            slow = {"service": "postgres", "statement": "SELECT pg_sleep(4)"}
            async with anyio.create_task_group() as tasks:

                async def slow_call():
                    calls.append(await call(client, "sandbox_sql", slow))

                tasks.start_soon(slow_call)
                await anyio.sleep(1.5)
                await restart()
            calls.append(await call(client, "sandbox_sql", sql))
            calls.append(await call(client, "i_am_done", {"summary": "done"}))
            # The same call again, as a client whose answer was lost would make it.
            calls.append(await call(client, "i_am_done", {"summary": "done"}))
    report["sent"] = SENT
    print(json.dumps(report), flush=True)


anyio.run(main)
