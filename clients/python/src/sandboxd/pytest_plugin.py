"""pytest fixtures that hand a test session throwaway databases from a running sandboxd.

    def test_orders(sandboxd_postgres):          # a postgresql:// URL
        with psycopg.connect(sandboxd_postgres) as db: ...

The session's agent is `SANDBOXD_AGENT_TOKEN` at `SANDBOXD_URL`; it must hold a task of a project
opted into the engines the tests use. One sandbox serves the whole session (the daemon answers
the same credentials to every request) and is released when the session ends. Without a
configured daemon the tests that use these fixtures are skipped, saying what to set.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sandboxd.agent import Agent, Sandbox
from sandboxd.errors import NotConfigured, SandboxdError


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("sandboxd")
    group.addoption(
        "--sandboxd-keep",
        action="store_true",
        help="keep the sandbox after the session (the agent's task still releases it)",
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
    try:
        sandbox = sandboxd_agent.request_sandbox()
    except SandboxdError as refused:
        pytest.fail(f"sandboxd refused the sandbox: {refused}", pytrace=False)
    yield sandbox
    if not request.config.getoption("--sandboxd-keep"):
        sandboxd_agent.release_sandbox()


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
