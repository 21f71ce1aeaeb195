"""The pytest plugin, in an inner pytest session (pytester) against the real daemon."""

from __future__ import annotations

import pytest

from sandboxd import Agent, Operator

from conftest import unique

INNER = """
import psycopg, redis

def test_postgres(sandboxd_postgres):
    with psycopg.connect(sandboxd_postgres, autocommit=True) as db:
        db.execute("CREATE DATABASE test_inner")

def test_redis(sandboxd_redis):
    r = redis.Redis.from_url(sandboxd_redis)
    r.set("k", "v")
    assert r.flushdb()

def test_the_same_sandbox(sandboxd_sandbox, sandboxd_postgres):
    assert sandboxd_sandbox["postgres"].url == sandboxd_postgres
"""


def test_without_a_daemon_the_fixtures_skip_saying_why(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SANDBOXD_URL", raising=False)
    monkeypatch.delenv("SANDBOXD_AGENT_TOKEN", raising=False)
    pytester.makepyfile(INNER)
    result = pytester.runpytest("-rs")
    result.assert_outcomes(skipped=3)
    result.stdout.fnmatch_lines(["*no sandboxd daemon is configured*SANDBOXD_URL*"])


def task_of(operator: Operator, project: str, task_id: str) -> dict:
    return next(t for t in operator.tasks(project=project) if t["id"] == task_id)


def test_the_fixtures_hand_out_one_sandbox_and_release_it(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, operator: Operator, developer: tuple[str, Agent]
) -> None:
    slug, agent = developer
    monkeypatch.setenv("SANDBOXD_AGENT_TOKEN", agent._agent._token)
    pytester.makepyfile(INNER)
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(passed=3)
    assert slug not in [s["owner"] for s in operator.sandboxes()], "released at the end of the session"
    held = [t for t in operator.tasks() if t.get("claimed_by") == slug]
    assert [t["state"] for t in held] == ["in_progress"], "a task the agent held before the session stays held"


def test_an_agent_holding_no_task_claims_one_and_gives_it_back(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, operator: Operator, project: str
) -> None:
    slug = unique("dev")
    spawned = operator.spawn_agent(slug, "developer", project)
    task = operator.add_task(project, unique("task"), "run the suite")
    monkeypatch.setenv("SANDBOXD_AGENT_TOKEN", spawned["token"])
    pytester.makepyfile(
        INNER
        + f"""
def test_the_session_holds_the_task(sandboxd_agent, sandboxd_sandbox):
    assert sandboxd_sandbox.task_id == {task["id"]!r}
"""
    )
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(passed=4)
    after = task_of(operator, project, task["id"])
    assert after["state"] == "open" and not after.get("claimed_by"), after
    assert slug not in [s["owner"] for s in operator.sandboxes()], "released with the task"


def test_no_task_to_claim_fails_the_tests_saying_how_to_add_one(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, operator: Operator, project: str
) -> None:
    spawned = operator.spawn_agent("idle-" + project, "developer", project)
    monkeypatch.setenv("SANDBOXD_AGENT_TOKEN", spawned["token"])
    pytester.makepyfile(INNER)
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(errors=3)
    result.stdout.fnmatch_lines(["*holds no task and could not claim one (no_work:*sandboxd tasks add --project*"])


def test_a_wrong_token_fails_the_tests_in_one_line(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDBOXD_AGENT_TOKEN", "sbx_" + "1" * 32)
    pytester.makepyfile(INNER)
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(errors=3)
    result.stdout.fnmatch_lines(["*sandboxd: the daemon at * refused this agent token; spawn one with sandboxd agents spawn"])
    assert "ExceptionGroup" not in result.stdout.str()
