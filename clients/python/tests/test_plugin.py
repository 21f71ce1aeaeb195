"""The pytest plugin, in an inner pytest session (pytester) against the real daemon."""

from __future__ import annotations

import pytest

from sandboxd import Agent, Operator

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


def test_the_fixtures_hand_out_one_sandbox_and_release_it(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, operator: Operator, developer: tuple[str, Agent]
) -> None:
    slug, agent = developer
    monkeypatch.setenv("SANDBOXD_AGENT_TOKEN", agent._agent._token)
    pytester.makepyfile(INNER)
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(passed=3)
    assert slug not in [s["owner"] for s in operator.sandboxes()], "released at the end of the session"


def test_a_refused_sandbox_fails_the_tests_with_the_reason(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, operator: Operator, project: str
) -> None:
    spawned = operator.spawn_agent("idle-" + project, "developer", project)
    monkeypatch.setenv("SANDBOXD_AGENT_TOKEN", spawned["token"])
    pytester.makepyfile(INNER)
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(errors=3)
    result.stdout.fnmatch_lines(["*sandboxd refused the sandbox: no_active_task*"])
