"""sandboxd's Python client: throwaway databases for agents and test suites.

- `Agent` / `AsyncAgent`: an agent's verbs over MCP (token in `SANDBOXD_AGENT_TOKEN`).
- `Operator`: the admin API (token in `SANDBOXD_ADMIN_TOKEN`).
- the pytest plugin (`sandboxd_postgres`, `sandboxd_redis`, `sandboxd_mariadb` fixtures) is
  registered on install.

`SANDBOXD_URL` says where the daemon is (`http://127.0.0.1:7878`). A refusal raises
`SandboxdError`; a refused token `TokenRefused`, a daemon that does not answer
`DaemonUnreachable`, each in one line that says what to do.
"""

from sandboxd.agent import Agent, AsyncAgent, Sandbox, Service
from sandboxd.errors import DaemonUnreachable, NotConfigured, SandboxdError, TokenRefused
from sandboxd.operator import Operator

__all__ = [
    "Agent",
    "AsyncAgent",
    "DaemonUnreachable",
    "NotConfigured",
    "Operator",
    "Sandbox",
    "SandboxdError",
    "Service",
    "TokenRefused",
]
