"""The agent's side: its role's verbs over MCP, through the official MCP Python SDK.

Each call is one stateless MCP exchange (protocol 2026-07-28: no handshake, no session), so a
client holds no connection between calls and survives a daemon restart without noticing.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from sandboxd import _config
from sandboxd.errors import DaemonUnreachable, SandboxdError, TokenRefused

PROTOCOL = "2026-07-28"

T = TypeVar("T")


def _unreachable(failure: BaseException) -> bool:
    """Whether `failure`, or an error it groups or was caused by, is a connection that could not
    be made (nothing listens, no route, no such host)."""
    seen: set[int] = set()
    pending = [failure]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, (httpx2.ConnectError, httpx2.ConnectTimeout)):
            return True
        pending.extend(getattr(current, "exceptions", ()))
        pending.extend(e for e in (current.__cause__, current.__context__) if e is not None)
    return False


@dataclass(frozen=True)
class Service:
    """One engine of a sandbox, as `request_sandbox` hands it out. The password, the URL and the
    env carry the credential: they are left out of `repr` so a log line never shows them."""

    service: str
    host: str
    port: int
    user: str
    password: str = field(repr=False)
    url: str = field(repr=False)
    database: str | None = None
    features: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict, repr=False)

    @classmethod
    def from_evidence(cls, entry: dict[str, Any]) -> Service:
        return cls(
            service=entry["service"],
            host=entry["host"],
            port=int(entry["port"]),
            user=entry["user"],
            password=entry["password"],
            url=entry["url"],
            database=entry.get("database"),
            features=tuple(entry.get("features") or ()),
            env=dict(entry.get("env") or {}),
        )


@dataclass(frozen=True)
class Sandbox:
    """The caller's sandbox: one `Service` per engine it asked for."""

    task_id: str | None
    services: dict[str, Service]

    def __getitem__(self, engine: str) -> Service:
        try:
            return self.services[engine]
        except KeyError:
            raise KeyError(f"no {engine} in this sandbox (it has {', '.join(self.services)})") from None

    @property
    def env(self) -> dict[str, str]:
        """Every service's env vars together, to export for a test suite."""
        merged: dict[str, str] = {}
        for service in self.services.values():
            merged.update(service.env)
        return merged


class AsyncAgent:
    """An agent's verbs. `url` defaults to `SANDBOXD_URL`, `token` to `SANDBOXD_AGENT_TOKEN`."""

    def __init__(self, url: str | None = None, token: str | None = None, *, timeout: float = _config.DEFAULT_TIMEOUT):
        self.base_url = _config.base_url(url)
        self.mcp_url = self.base_url + "/mcp"
        self._token = _config.token(token, "SANDBOXD_AGENT_TOKEN", "agent token")
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"AsyncAgent({self.mcp_url!r})"

    async def call(self, verb: str, **arguments: Any) -> dict[str, Any]:
        """Calls one verb; returns its ok envelope or raises `SandboxdError` with the error
        envelope's code, message and remediation (`TokenRefused`, `DaemonUnreachable` when the
        call never reached a verb)."""
        arguments = {k: v for k, v in arguments.items() if v is not None}
        result = await self._exchange(lambda client: client.call_tool(verb, arguments))
        envelope = result.structured_content
        if envelope is None:
            texts = [block.text for block in result.content if getattr(block, "type", None) == "text"]
            envelope = json.loads(texts[0]) if texts else {}
        if result.is_error or "error" in envelope:
            raise SandboxdError.from_envelope(envelope)
        return envelope

    async def tools(self) -> list[str]:
        """The names of the verbs this agent's role may call."""
        listed = await self._exchange(lambda client: client.list_tools())
        return [tool.name for tool in listed.tools]

    async def _exchange(self, use: Callable[[Client], Awaitable[T]]) -> T:
        """One MCP exchange. A refused token or a daemon that does not answer surfaces from the
        SDK as a task group's tangle of transport errors; it is told as one line instead."""
        refused: list[int] = []

        async def note_refusal(response: httpx2.Response) -> None:
            if response.status_code == 401:
                refused.append(response.status_code)

        headers = {"Authorization": f"Bearer {self._token}"}
        try:
            async with httpx2.AsyncClient(
                headers=headers, timeout=self.timeout, event_hooks={"response": [note_refusal]}
            ) as http:
                async with Client(streamable_http_client(self.mcp_url, http_client=http), mode=PROTOCOL) as client:
                    return await use(client)
        except Exception as failure:
            if refused:
                raise TokenRefused(self.base_url) from None
            if _unreachable(failure):
                raise DaemonUnreachable(self.base_url) from None
            raise

    async def give_me_work(self) -> dict[str, Any]:
        return await self.call("give_me_work")

    async def request_sandbox(
        self, services: list[str] | None = None, extensions: dict[str, list[str]] | None = None
    ) -> Sandbox:
        """The caller's sandbox (the same credentials on every call until it is released)."""
        envelope = await self.call("request_sandbox", services=services, extensions=extensions)
        entries = envelope.get("evidence") or []
        return Sandbox(
            task_id=envelope.get("task_id"),
            services={entry["service"]: Service.from_evidence(entry) for entry in entries},
        )

    async def release_sandbox(self) -> dict[str, Any]:
        return await self.call("release_sandbox")

    async def reset_sandbox(self, services: list[str] | None = None) -> dict[str, float]:
        """Empties the sandbox in place (same credentials); each service's reset time in ms."""
        envelope = await self.call("reset_sandbox", services=services)
        return {entry["service"]: entry["reset_ms"] for entry in envelope.get("evidence") or []}

    async def sandbox_info(self) -> dict[str, dict[str, Any]]:
        """Each service's engine, version, endpoint (no password), and what ends the sandbox."""
        envelope = await self.call("sandbox_info")
        return {entry["service"]: entry for entry in envelope.get("evidence") or []}

    async def sandbox_sql(self, service: str, statement: str, max_rows: int | None = None) -> dict[str, Any]:
        """One statement (or Redis command) as the sandbox's own account: `columns`, `rows`,
        `affected`, `truncated` and the `limits` it ran under."""
        envelope = await self.call("sandbox_sql", service=service, statement=statement, max_rows=max_rows)
        return envelope["evidence"]


class Agent:
    """The same verbs, blocking (for scripts and pytest fixtures)."""

    def __init__(self, url: str | None = None, token: str | None = None, *, timeout: float = _config.DEFAULT_TIMEOUT):
        self._agent = AsyncAgent(url, token, timeout=timeout)

    def __repr__(self) -> str:
        return f"Agent({self._agent.mcp_url!r})"

    def call(self, verb: str, **arguments: Any) -> dict[str, Any]:
        return asyncio.run(self._agent.call(verb, **arguments))

    def tools(self) -> list[str]:
        return asyncio.run(self._agent.tools())

    def give_me_work(self) -> dict[str, Any]:
        return asyncio.run(self._agent.give_me_work())

    def request_sandbox(
        self, services: list[str] | None = None, extensions: dict[str, list[str]] | None = None
    ) -> Sandbox:
        return asyncio.run(self._agent.request_sandbox(services, extensions))

    def release_sandbox(self) -> dict[str, Any]:
        return asyncio.run(self._agent.release_sandbox())

    def reset_sandbox(self, services: list[str] | None = None) -> dict[str, float]:
        return asyncio.run(self._agent.reset_sandbox(services))

    def sandbox_info(self) -> dict[str, dict[str, Any]]:
        return asyncio.run(self._agent.sandbox_info())

    def sandbox_sql(self, service: str, statement: str, max_rows: int | None = None) -> dict[str, Any]:
        return asyncio.run(self._agent.sandbox_sql(service, statement, max_rows))
