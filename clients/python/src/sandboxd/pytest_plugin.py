"""pytest fixtures that hand a test session throwaway databases from a running sandboxd.

    def test_orders(sandboxd_postgres):          # a postgresql:// URL
        with psycopg.connect(sandboxd_postgres) as db: ...

The session's agent is `SANDBOXD_AGENT_TOKEN` at `SANDBOXD_URL`, of a project opted into the
engines the tests use. An agent that holds no task claims the next one (`give_me_work`) and gives
it back (`unclaim`) when the session ends; one that already holds a task keeps it. One sandbox
serves the whole session (the daemon answers the same credentials to every request) and is
released when the session ends. Without a configured daemon the tests that use these fixtures
are skipped, saying what to set.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sandboxd.agent import Agent, Sandbox
from sandboxd.errors import NotConfigured, NotDelivered, SandboxdError


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("sandboxd")
    group.addoption(
        "--sandboxd-keep",
        action="store_true",
        help="keep the sandbox (and a task the session claimed) after the session; the agent's "
        "task still releases it when it ends",
    )


@pytest.fixture(scope="session")
def sandboxd_agent() -> Agent:
    """The session's agent, or a skip when no daemon is configured."""
    try:
        return Agent()
    except NotConfigured as missing:
        pytest.skip(f"sandboxd: {missing.message} ({missing.remediate})")


@pytest.fixture(scope="session")
def sandboxd_sandbox(sandboxd_agent: Agent, request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    """Every engine the agent's project opted into, provisioned once for the session."""
    claimed = False
    try:
        try:
            sandbox = sandboxd_agent.request_sandbox()
        except SandboxdError as refused:
            if refused.code != "no_active_task":
                raise
            _claim_a_task(sandboxd_agent)
            claimed = True
            sandbox = sandboxd_agent.request_sandbox()
    except NotDelivered as undelivered:
        pytest.fail(f"sandboxd: {undelivered}", pytrace=False)
    except SandboxdError as refused:
        if claimed:
            sandboxd_agent.call("unclaim")
        pytest.fail(f"sandboxd refused the sandbox: {refused}", pytrace=False)
    yield sandbox
    if request.config.getoption("--sandboxd-keep"):
        return
    if claimed:
        sandboxd_agent.call("unclaim")  # gives the task back and releases its sandbox
    else:
        sandboxd_agent.release_sandbox()


def _claim_a_task(agent: Agent) -> None:
    """Claims the project's next waiting task for this session; fails the tests saying why when
    there is none to claim."""
    try:
        agent.give_me_work()
    except NotDelivered:
        raise
    except SandboxdError as refused:
        pytest.fail(
            f"sandboxd: the agent holds no task and could not claim one ({refused.code}: {refused.message}); "
            "an operator adds "
            "one with `sandboxd tasks add --project PROJECT --title …`",
            pytrace=False,
        )


def _url(sandbox: Sandbox, engine: str) -> str:
    if engine not in sandbox.services:
        pytest.fail(
            f"sandboxd: the project is not opted into {engine} (it has {', '.join(sandbox.services) or 'nothing'}); "
            f"an operator adds it with `sandboxd projects set PROJECT --services …,{engine}`",
            pytrace=False,
        )
    return sandbox[engine].url


@pytest.fixture(scope="session")
def sandboxd_postgres(sandboxd_sandbox: Sandbox) -> str:
    """A `postgresql://` URL; the account owns its database and may create databases."""
    return _url(sandboxd_sandbox, "postgres")


@pytest.fixture(scope="session")
def sandboxd_redis(sandboxd_sandbox: Sandbox) -> str:
    """A `redis://` URL of an ACL user that may FLUSHDB/FLUSHALL and SELECT any database."""
    return _url(sandboxd_sandbox, "redis")


@pytest.fixture(scope="session")
def sandboxd_mariadb(sandboxd_sandbox: Sandbox) -> str:
    """A `mysql://` URL; the account has every privilege on its database and on `test_*`."""
    return _url(sandboxd_sandbox, "mariadb")
