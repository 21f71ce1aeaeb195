from __future__ import annotations

import pytest

from sandboxd import Operator, SandboxdError
from sandboxd.operator import ROUTES

from conftest import unique


def test_every_route_the_client_calls_is_in_the_openapi_document(operator: Operator) -> None:
    paths = operator.openapi()["paths"]
    served = {(method.upper(), path) for path, ops in paths.items() for method in ops}
    assert ROUTES <= served, ROUTES - served
    # and the client knows every route the daemon serves
    assert served <= ROUTES, served - ROUTES


def test_projects_agents_and_tasks_round_trip(operator: Operator) -> None:
    slug = unique("proj")
    operator.set_project(slug, ["postgres"], {"postgres": ["pg_trgm"]})
    project = operator.project(slug)
    assert project["sandbox_services"] == ["postgres"]
    assert project["sandbox_extensions"] == {"postgres": ["pg_trgm"]}
    agent = unique("dev")
    spawned = operator.spawn_agent(agent, "developer", slug)
    assert spawned["token"].startswith("sbx_")
    assert "request_sandbox" in spawned["manifest"]
    assert agent in [a["slug"] for a in operator.agents(project=slug)]
    task = operator.add_task(slug, "a task", "do it")
    assert task["id"] in [t["id"] for t in operator.tasks(project=slug)]
    operator.remove_agent(agent)
    assert agent not in [a["slug"] for a in operator.agents(project=slug)]


def test_a_refused_input_raises_with_the_reason_and_changes_nothing(operator: Operator) -> None:
    slug = unique("proj")
    with pytest.raises(SandboxdError) as refused:
        operator.set_project(slug, ["oracle"])
    assert "oracle" in refused.value.message
    assert slug not in [p["slug"] for p in operator.projects()]


def test_a_pool_of_an_unknown_engine_is_refused_naming_it(operator: Operator) -> None:
    # The test daemon runs without warm pools; a pool of no engine is refused, and none is made.
    assert operator.pools() == []
    with pytest.raises(SandboxdError) as refused:
        operator.resize_pool("oracle", 1, 2)
    assert "oracle" in refused.value.message
    assert operator.pools() == []
