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
