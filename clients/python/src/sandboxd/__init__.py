"""sandboxd's Python client: throwaway databases for agents and test suites.

- `Agent` / `AsyncAgent`: an agent's verbs over MCP (token in `SANDBOXD_AGENT_TOKEN`).
- `Operator`: the admin API (token in `SANDBOXD_ADMIN_TOKEN`).
- the pytest plugin (`sandboxd_postgres`, `sandboxd_redis`, `sandboxd_mariadb` fixtures) is
  registered on install.

`SANDBOXD_URL` says where the daemon is (`http://127.0.0.1:7878`).
"""

from sandboxd.agent import Agent, AsyncAgent, Sandbox, Service
from sandboxd.errors import NotConfigured, SandboxdError
from sandboxd.operator import Operator

__all__ = ["Agent", "AsyncAgent", "NotConfigured", "Operator", "Sandbox", "SandboxdError", "Service"]
