from __future__ import annotations

import os

import psycopg
import pymysql
import pytest
import redis

from sandboxd import Agent, NotConfigured, Operator, SandboxdError

from conftest import unique


def test_a_sandbox_of_every_engine_works_and_is_the_same_on_the_next_call(
    operator: Operator, developer: tuple[str, Agent]
) -> None:
    slug, agent = developer
    sandbox = agent.request_sandbox()
    assert set(sandbox.services) == {"postgres", "redis", "mariadb"}
    with psycopg.connect(sandbox["postgres"].url) as db:
        assert db.execute("SELECT current_user").fetchone() == (sandbox["postgres"].user,)
    assert redis.Redis.from_url(sandbox["redis"].url).ping()
    maria = sandbox["mariadb"]
    with pymysql.connect(host=maria.host, port=maria.port, user=maria.user, password=maria.password, database=maria.database) as db:
        with db.cursor() as cursor:
            cursor.execute("SELECT 1")
            assert cursor.fetchone() == (1,)
    again = agent.request_sandbox(["postgres"])
    assert again["postgres"].password == sandbox["postgres"].password
    assert slug in [s["owner"] for s in operator.sandboxes()]
    agent.release_sandbox()
    assert slug not in [s["owner"] for s in operator.sandboxes()]


def test_no_password_in_a_repr(developer: tuple[str, Agent]) -> None:
    _, agent = developer
    sandbox = agent.request_sandbox(["redis"])
    shown = repr(sandbox) + repr(agent)
    for service in sandbox.services.values():
        assert service.password not in shown


def test_a_refusal_carries_the_code_and_how_to_fix_it(operator: Operator, project: str) -> None:
    spawned = operator.spawn_agent(unique("dev"), "developer", project)
    idle = Agent(token=spawned["token"])
    with pytest.raises(SandboxdError) as refused:
        idle.request_sandbox()
    assert refused.value.code == "no_active_task"
    assert "give_me_work" in refused.value.remediate
    assert not refused.value.retryable
    with pytest.raises(SandboxdError) as unknown:
        idle.call("drop_everything")
    assert unknown.value.code == "verb_not_allowed"


def test_the_role_lists_only_its_verbs(operator: Operator, project: str) -> None:
    reviewer = Agent(token=operator.spawn_agent(unique("rev"), "pr_reviewer", project)["token"])
    assert "request_sandbox" not in reviewer.tools()
    assert "claim_review" in reviewer.tools()


def test_without_a_daemon_configured_it_says_what_to_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SANDBOXD_URL", raising=False)
    with pytest.raises(NotConfigured) as missing:
        Agent(token="sbx_x")
    assert "SANDBOXD_URL" in missing.value.remediate
    monkeypatch.setenv("SANDBOXD_URL", os.environ.get("SANDBOXD_URL", "http://127.0.0.1:1"))
    monkeypatch.delenv("SANDBOXD_AGENT_TOKEN", raising=False)
    with pytest.raises(NotConfigured) as missing:
        Agent()
    assert "SANDBOXD_AGENT_TOKEN" in missing.value.remediate


def test_reset_info_and_sql_on_the_held_sandbox(developer: tuple[str, Agent]) -> None:
    _, agent = developer
    sandbox = agent.request_sandbox(["postgres", "redis"])
    made = agent.sandbox_sql("postgres", "CREATE TABLE orders AS SELECT g AS id FROM generate_series(1, 50) g")
    assert made["affected"] == 50
    counted = agent.sandbox_sql("postgres", "SELECT count(*) FROM orders")
    assert counted["rows"] == [["50"]] and counted["columns"] == ["count"]
    assert agent.sandbox_sql("postgres", "SELECT id FROM orders", max_rows=5)["truncated"]
    with pytest.raises(SandboxdError) as two:
        agent.sandbox_sql("postgres", "SELECT 1; SELECT 2")
    assert two.value.code == "invalid_argument"

    info = agent.sandbox_info()
    assert info["postgres"]["port"] == sandbox["postgres"].port
    assert info["postgres"]["version"][0].isdigit()
    assert sandbox["postgres"].password not in repr(info)

    times = agent.reset_sandbox()
    assert set(times) >= {"postgres", "redis"}
    with psycopg.connect(sandbox["postgres"].url) as db:
        assert db.execute("SELECT count(*) FROM pg_tables WHERE tablename = 'orders'").fetchone() == (0,)
    agent.release_sandbox()
