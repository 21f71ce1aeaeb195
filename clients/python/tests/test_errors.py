"""A call that never reaches a verb (a refused token, no daemon at the address) is one line that
says what to do, not the SDK's tangle of transport errors."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from sandboxd import Agent, DaemonUnreachable, Operator, TokenRefused


def free_port() -> int:
    """A port nothing listens on (bound, then let go)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def uncaught(script: str, env: dict[str, str]) -> list[str]:
    """The stderr lines of a script that lets the error escape, as a user's script would."""
    ran = subprocess.run([sys.executable, "-c", script], env={**os.environ, **env}, capture_output=True, text=True)
    assert ran.returncode == 1, ran
    return ran.stderr.strip().splitlines()


def test_a_wrong_agent_token_is_one_line_naming_the_fix(operator: Operator) -> None:
    with pytest.raises(TokenRefused) as refused:
        Agent(token="sbx_" + "0" * 32).give_me_work()
    assert str(refused.value) == (
        f"the daemon at {operator.url} refused this agent token; spawn one with sandboxd agents spawn"
    )
    assert refused.value.code == "token_refused" and not refused.value.retryable

    shown = uncaught("import sandboxd; sandboxd.Agent().tools()", {"SANDBOXD_AGENT_TOKEN": "sbx_wrong"})
    assert shown[-1] == f"sandboxd.TokenRefused: {refused.value}", shown
    assert not any("ExceptionGroup" in line or "MCPError" in line for line in shown), shown
    assert len(shown) < 30, shown


def test_an_unreachable_daemon_is_one_line_naming_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(DaemonUnreachable) as unreachable:
        Agent(url=nowhere, token="sbx_any").request_sandbox()
    assert str(unreachable.value) == f"no daemon answers at {nowhere}; start it with sandboxd serve"
    assert unreachable.value.code == "daemon_unreachable"
    with pytest.raises(DaemonUnreachable), Operator(url=nowhere, token="any") as operator:
        operator.projects()

    shown = uncaught(
        "import sandboxd; sandboxd.Agent().give_me_work()",
        {"SANDBOXD_URL": nowhere, "SANDBOXD_AGENT_TOKEN": "sbx_any"},
    )
    assert shown[-1] == f"sandboxd.DaemonUnreachable: {unreachable.value}", shown
    assert not any("ConnectError" in line or "ExceptionGroup" in line for line in shown), shown
    assert len(shown) < 30, shown


def test_a_wrong_admin_token_names_where_the_right_one_is(operator: Operator) -> None:
    with Operator(token="not-the-admin-token-at-all") as stranger, pytest.raises(TokenRefused) as refused:
        stranger.projects()
    assert "\n" not in str(refused.value)
    assert f"the daemon at {operator.url} refused this admin token" in str(refused.value)
    assert "admin.token" in refused.value.remediate
