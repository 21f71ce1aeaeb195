"""The hand-out scenario's agents, as the official MCP Python SDK (2.x) or sandboxd's own Python
client library runs them: one long-lived process the bench drives with one JSON command per
line on stdin, answering one JSON line on stdout each. Only `request_sandbox` is timed, on the
client (time.perf_counter around the SDK's call, its validation included).

    python handout_agent.py MCP_URL

Commands:
- {"op": "open", "id": ID, "token": T, "mode": M}: opens agent ID (an HTTP client and an MCP
  client; mode "2026-07-28", "legacy" for the 2025-11-25 handshake, or "library" for
  sandboxd.agent.AsyncAgent) and calls give_me_work, untimed; answers the protocol spoken.
- {"op": "request", "ids": [...]}: request_sandbox for every agent at once (asyncio.gather);
  answers each one's milliseconds, or its error.
- {"op": "done", "ids": [...]}: i_am_done for each, then closes it.
- {"op": "steady", "tokens": [...], "mode": M, "interval": S, "hold": S}: one agent per token,
  the n-th starting at n * interval: open, give_me_work, request_sandbox (timed), hold, i_am_done,
  close. Answers every request's milliseconds and the errors.
- {"op": "quit"}.
"""

import asyncio
import contextlib
import json
import sys
import time

URL = sys.argv[1]
AGENTS = {}


def sdk_version():
    from importlib.metadata import version

    return version("mcp")


async def connect(stack, token, mode):
    """An open agent: its `call(verb)` (the ok envelope or an exception) and the protocol."""
    if mode == "library":
        from sandboxd.agent import AsyncAgent

        agent = AsyncAgent(URL.removesuffix("/mcp"), token)

        async def call(verb):
            if verb == "request_sandbox":
                return await agent.request_sandbox()
            return await agent.call(verb)

        protocol = f"2026-07-28 (mcp {sdk_version()})"
    else:
        import httpx2
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        headers = {"Authorization": f"Bearer {token}"}
        http = await stack.enter_async_context(httpx2.AsyncClient(headers=headers, timeout=120))
        client = await stack.enter_async_context(
            Client(streamable_http_client(URL, http_client=http), mode=mode)
        )

        async def call(verb):
            result = await client.call_tool(verb, {})
            envelope = result.structured_content or {}
            if result.is_error or envelope.get("status") != "ok":
                raise RuntimeError(f"{verb}: {json.dumps(envelope)}")
            return envelope

        protocol = f"{client.protocol_version} (mcp {sdk_version()})"
    await call("give_me_work")
    return call, protocol


async def timed(call):
    started = time.perf_counter()
    await call("request_sandbox")
    return (time.perf_counter() - started) * 1000.0


async def agent(token, mode, opened, inbox):
    """One open agent, in a task of its own: the SDK's contexts are entered and left in the
    task that entered them (anyio's rule), in whatever order the agents are closed. Runs the
    verbs it is sent, one at a time, until it is sent None."""
    try:
        async with contextlib.AsyncExitStack() as stack:
            call, protocol = await connect(stack, token, mode)
            opened.set_result(protocol)
            while (item := await inbox.get())[0] is not None:
                verb, answer = item
                try:
                    result = await timed(call) if verb == "request_sandbox" else await call(verb)
                    answer.set_result(result)
                except Exception as error:  # noqa: BLE001 - handed to the one who asked
                    answer.set_exception(error)
    except Exception as error:  # noqa: BLE001 - an open that failed is answered as such
        if not opened.done():
            opened.set_exception(error)
            return
        raise


async def ask(i, verb):
    answer = asyncio.get_running_loop().create_future()
    await AGENTS[i][1].put((verb, answer))
    return await answer


async def open_agent(cmd):
    opened = asyncio.get_running_loop().create_future()
    inbox = asyncio.Queue()
    task = asyncio.create_task(agent(cmd["token"], cmd["mode"], opened, inbox))
    protocol = await opened
    AGENTS[cmd["id"]] = (task, inbox)
    return {"protocol": protocol}


async def close(i):
    task, inbox = AGENTS.pop(i)
    await inbox.put((None, None))
    await task


async def request(cmd):
    outcomes = await asyncio.gather(
        *(ask(i, "request_sandbox") for i in cmd["ids"]), return_exceptions=True
    )
    return {
        "ms": [o for o in outcomes if isinstance(o, float)],
        "errors": [repr(o) for o in outcomes if not isinstance(o, float)],
    }


async def done(cmd):
    errors = []
    for i in cmd["ids"]:
        try:
            await ask(i, "i_am_done")
        except Exception as error:  # noqa: BLE001 - reported, the others still close
            errors.append(repr(error))
        await close(i)
    return {"errors": errors}


async def steady(cmd):
    loop = asyncio.get_running_loop()
    start = loop.time()

    async def one(n, token):
        await asyncio.sleep(max(0.0, start + n * cmd["interval"] - loop.time()))
        async with contextlib.AsyncExitStack() as stack:
            call, _ = await connect(stack, token, cmd["mode"])
            ms = await timed(call)
            await asyncio.sleep(cmd["hold"])
            await call("i_am_done")
            return ms

    outcomes = await asyncio.gather(
        *(one(n, t) for n, t in enumerate(cmd["tokens"])), return_exceptions=True
    )
    return {
        "ms": [o for o in outcomes if isinstance(o, float)],
        "errors": [repr(o) for o in outcomes if not isinstance(o, float)],
    }


OPS = {"open": open_agent, "request": request, "done": done, "steady": steady}


async def main():
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            break
        cmd = json.loads(line)
        if cmd["op"] == "quit":
            break
        try:
            answer = {"ok": True, **(await OPS[cmd["op"]](cmd))}
        except Exception as error:  # noqa: BLE001 - answered, the bench decides
            answer = {"ok": False, "error": repr(error)}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
    for i in list(AGENTS):
        await close(i)


asyncio.run(main())
