"""What sandboxd refused, as an exception a caller can branch on."""

from __future__ import annotations

from typing import Any


class SandboxdError(Exception):
    """An error envelope (agent verbs) or an admin API refusal.

    `code` is the stable error code (`no_active_task`, `service_not_allowed`, …, or the HTTP
    status for the admin API), `remediate` says how to fix the call, `retryable` whether the same
    call may succeed later.
    """

    def __init__(self, code: str, message: str, remediate: str = "", retryable: bool = False) -> None:
        super().__init__(f"{code}: {message}" + (f" ({remediate})" if remediate else ""))
        self.code = code
        self.message = message
        self.remediate = remediate
        self.retryable = retryable

    @classmethod
    def from_envelope(cls, envelope: dict[str, Any]) -> SandboxdError:
        return cls(
            str(envelope.get("error", "unknown")),
            str(envelope.get("message", "")),
            str(envelope.get("remediate", "")),
            bool(envelope.get("retryable", False)),
        )


class NotConfigured(SandboxdError):
    """No daemon is configured: `SANDBOXD_URL` or `SANDBOXD_AGENT_TOKEN` is unset."""


class NotDelivered(SandboxdError):
    """The call never reached a verb (the token was refused, no daemon answered): its text is the
    whole story in one line, and a traceback names it `sandboxd.<Class>`, the name to catch."""

    def __str__(self) -> str:
        return f"{self.message}; {self.remediate}"


class TokenRefused(NotDelivered):
    """The daemon answered 401: the token is unknown, revoked, or another daemon's."""

    __module__ = "sandboxd"

    def __init__(self, url: str, kind: str = "agent") -> None:
        fix = (
            "spawn one with sandboxd agents spawn"
            if kind == "agent"
            else "it is the daemon's <state_dir>/admin.token (SANDBOXD_ADMIN_TOKEN)"
        )
        super().__init__("token_refused", f"the daemon at {url} refused this {kind} token", fix)
        self.url = url


class DaemonUnreachable(NotDelivered):
    """Nothing answers at the daemon's address (not started, another port, no route)."""

    __module__ = "sandboxd"

    def __init__(self, url: str) -> None:
        super().__init__(
            "daemon_unreachable", f"no daemon answers at {url}", "start it with sandboxd serve", retryable=True
        )
        self.url = url
