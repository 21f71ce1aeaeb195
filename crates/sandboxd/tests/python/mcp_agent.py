"""An agent's whole sandbox flow through the official MCP Python SDK (1.x or 2.x), as a real
client would run it. Prints one JSON report on stdout for the Rust test to judge.

    SANDBOXD_AGENT_TOKEN=... python mcp_agent.py URL MODE [SANDBOXD_BINARY]

MODE is "legacy" (the 2025-11-25 handshake, with a session), "2026-07-28" (stateless: no
initialize, no session id) or "auto" (the 2.x SDK's default: discover, else initialize). The 1.x
SDK speaks only the legacy revision. MODE "fastmcp" drives fastmcp's own `Client` (in its
default mode) instead of the SDK's, from a virtualenv that has fastmcp. With SANDBOXD_BINARY
the client launches `SANDBOXD_BINARY mcp --url <daemon>` and speaks MCP over its stdio, as MCP
clients configured with a command do; else it speaks streamable HTTP to URL.
"""

import asyncio
import json
import logging
import os
import sys

import jsonschema

URL, MODE = sys.argv[1], sys.argv[2]
BINARY = sys.argv[3] if len(sys.argv) > 3 else None
TOKEN = os.environ["SANDBOXD_AGENT_TOKEN"]
HEADERS = {"Authorization": f"Bearer {TOKEN}"}


class Warnings(logging.Handler):
    """Every warning the SDK logs (e.g. "Session termination failed: 202")."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.seen = []

    def emit(self, record):
        self.seen.append(record.getMessage())


WARNINGS = Warnings()
logging.getLogger().addHandler(WARNINGS)


def dump(model):
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


async def flow(session, protocol):
    report = {"sdk": sdk_version(), "protocol": protocol, "tools": [], "calls": []}
    listed = await session.list_tools()
    schemas = {}
    for tool in listed.tools:
        shown = dump(tool)
        schemas[tool.name] = shown.get("outputSchema")
        report["tools"].append(
            {
                "name": tool.name,
                "title": shown.get("title"),
                "annotations": shown.get("annotations"),
                "outputSchema": shown.get("outputSchema"),
                "inputSchema": shown.get("inputSchema"),
            }
        )
    for verb, args in [
        ("give_me_work", {}),
        ("request_sandbox", {"services": ["postgres"]}),
        ("request_sandbox", {"services": ["postgres"]}),
        ("request_sandbox", {"services": ["mongo"]}),
        ("release_sandbox", {}),
        ("unclaim", {}),
    ]:
        result = dump(await session.call_tool(verb, args))
        structured = result.get("structuredContent")
        texts = [c["text"] for c in result.get("content", []) if c.get("type") == "text"]
        try:
            jsonschema.validate(structured, schemas[verb])
            invalid = None
        except jsonschema.ValidationError as error:
            invalid = error.message
        call = {
            "verb": verb,
            "is_error": bool(result.get("isError")),
            "structured": structured,
            "text_is_the_json": any(json.loads(t) == structured for t in texts),
            "invalid": invalid,
        }
        if verb == "request_sandbox" and not call["is_error"]:
            call["postgres_answer"] = query_postgres(structured)
        report["calls"].append(call)
    return report


def query_postgres(envelope):
    """What the handed-out Postgres answers its own account, as a test suite would ask."""
    import psycopg

    (entry,) = [s for s in envelope["evidence"] if s["service"] == "postgres"]
    with psycopg.connect(entry["url"], connect_timeout=10) as conn:
        return conn.execute("SELECT current_user, current_database()").fetchone()


def mcp_version():
    from importlib.metadata import version

    return version("mcp")


def sdk_version():
    """The client library driving the flow: the SDK's version, or `fastmcp <version>`."""
    from importlib.metadata import version

    return f"fastmcp {version('fastmcp')}" if MODE == "fastmcp" else mcp_version()


class FastmcpSession:
    """fastmcp's `Client` with the SDK session's two calls the flow makes, answering the
    protocol's own result objects."""

    def __init__(self, client):
        self.client = client

    async def list_tools(self):
        from types import SimpleNamespace

        return SimpleNamespace(tools=await self.client.list_tools())

    async def call_tool(self, name, args):
        return await self.client.call_tool_mcp(name, args)


async def fastmcp_flow():
    from fastmcp import Client
    from fastmcp.client.transports import StdioTransport, StreamableHttpTransport

    if BINARY:
        server = stdio_server()
        transport = StdioTransport(command=server.command, args=server.args, env=server.env)
    else:
        transport = StreamableHttpTransport(URL, headers=HEADERS)
    async with Client(transport) as client:
        return await flow(FastmcpSession(client), client.protocol_version)


def stdio_server():
    """`sandboxd mcp` as a client's configuration launches it: the token in its environment."""
    from mcp.client.stdio import StdioServerParameters

    base = URL.removesuffix("/mcp")
    return StdioServerParameters(
        command=BINARY, args=["mcp", "--url", base], env={"SANDBOXD_AGENT_TOKEN": TOKEN}
    )


async def main():
    major = int(mcp_version().split(".")[0])
    if MODE == "fastmcp":
        report = await fastmcp_flow()
    elif BINARY and major >= 2:
        from mcp import Client
        from mcp.client.stdio import stdio_client

        async with Client(stdio_client(stdio_server()), mode=MODE) as client:
            report = await flow(client.session, client.protocol_version)
    elif BINARY:
        from mcp import ClientSession
        from mcp.client.stdio import stdio_client

        async with stdio_client(stdio_server()) as (read, write):
            async with ClientSession(read, write) as session:
                initialized = await session.initialize()
                report = await flow(session, initialized.protocolVersion)
    elif major >= 2:
        import httpx2
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        async with httpx2.AsyncClient(headers=HEADERS, timeout=60) as http:
            async with Client(streamable_http_client(URL, http_client=http), mode=MODE) as client:
                report = await flow(client.session, client.protocol_version)
    else:
        if MODE != "legacy":
            raise SystemExit(f"the 1.x SDK speaks only the legacy revision, not {MODE}")
        import httpx
        from mcp import ClientSession
        from mcp.client.streamable_http import streamable_http_client

        async with httpx.AsyncClient(headers=HEADERS, timeout=60) as http:
            async with streamable_http_client(URL, http_client=http) as (read, write, _):
                async with ClientSession(read, write) as session:
                    initialized = await session.initialize()
                    report = await flow(session, initialized.protocolVersion)
    # Closing (the session's DELETE) is done: whatever it warned is in the report.
    report["warnings"] = WARNINGS.seen
    print(json.dumps(report))


asyncio.run(main())
