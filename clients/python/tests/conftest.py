"""The client's tests run against a real daemon: `SANDBOXD_URL` and `SANDBOXD_ADMIN_TOKEN` name
it (the Rust test harness starts one and runs these with them set)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from sandboxd import Agent, Operator

pytest_plugins = ["pytester"]


def unique(tag: str) -> str:
    return f"{tag}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def operator() -> Iterator[Operator]:
    if not os.environ.get("SANDBOXD_URL") or not os.environ.get("SANDBOXD_ADMIN_TOKEN"):
        pytest.fail("these tests need a daemon: set SANDBOXD_URL and SANDBOXD_ADMIN_TOKEN")
    with Operator() as operator:
        yield operator


@pytest.fixture
def project(operator: Operator) -> str:
    slug = unique("py")
    operator.set_project(slug, ["postgres", "redis", "mariadb"])
    return slug


@pytest.fixture
def developer(operator: Operator, project: str) -> Iterator[tuple[str, Agent]]:
    """A developer of `project` holding a task; its sandbox is released afterwards."""
    slug = unique("dev")
    spawned = operator.spawn_agent(slug, "developer", project)
    operator.add_task(project, unique("task"), "work")
    agent = Agent(token=spawned["token"])
    agent.give_me_work()
    yield slug, agent
    agent.release_sandbox()
