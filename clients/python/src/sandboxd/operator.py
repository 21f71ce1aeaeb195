"""The operator's side: the admin API (`/v1`, described by `/v1/openapi.json`) with the admin
token. Answers are the API's JSON; a refusal raises `SandboxdError` with the API's reason."""

from __future__ import annotations

from typing import Any

import httpx2

from sandboxd import _config
from sandboxd.errors import DaemonUnreachable, SandboxdError, TokenRefused

ROUTES: frozenset[tuple[str, str]] = frozenset(
    {
        ("GET", "/v1/settings"),
        ("PUT", "/v1/settings"),
        ("POST", "/v1/restart"),
        ("GET", "/v1/projects"),
        ("GET", "/v1/projects/{slug}"),
        ("PUT", "/v1/projects/{slug}"),
        ("GET", "/v1/agents"),
        ("POST", "/v1/agents"),
        ("GET", "/v1/agents/{slug}"),
        ("DELETE", "/v1/agents/{slug}"),
        ("GET", "/v1/tasks"),
        ("POST", "/v1/tasks"),
        ("GET", "/v1/sandboxes"),
        ("DELETE", "/v1/sandboxes/{owner}"),
        ("GET", "/v1/audit"),
        ("POST", "/v1/janitor/run"),
        ("GET", "/v1/pools"),
        ("PUT", "/v1/pools/{pool}"),
        ("GET", "/v1/sources"),
        ("GET", "/v1/sources/{name}"),
        ("PUT", "/v1/sources/{name}"),
        ("DELETE", "/v1/sources/{name}"),
        ("POST", "/v1/sources/{name}/snapshot"),
    }
)
"""Every route this client calls; the tests check each against the daemon's OpenAPI document."""


class Operator:
    """`url` defaults to `SANDBOXD_URL`, `token` to `SANDBOXD_ADMIN_TOKEN`."""

    def __init__(self, url: str | None = None, token: str | None = None, *, timeout: float = _config.DEFAULT_TIMEOUT):
        self.url = _config.base_url(url)
        self._http = httpx2.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {_config.token(token, 'SANDBOXD_ADMIN_TOKEN', 'admin token')}"},
            timeout=timeout,
        )

    def __repr__(self) -> str:
        return f"Operator({self.url!r})"

    def __enter__(self) -> Operator:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _request(self, method: str, template: str, *, path: dict[str, str] | None = None, **kwargs: Any) -> Any:
        assert (method, template) in ROUTES, f"{method} {template} is not a route this client knows"
        url = template.format(**(path or {}))
        if "params" in kwargs:
            kwargs["params"] = {k: v for k, v in kwargs["params"].items() if v is not None}
        response = self._send(method, url, **kwargs)
        body = response.json() if response.content else None
        if response.status_code == 401:
            raise TokenRefused(self.url, "admin")
        if response.status_code >= 400:
            reason = body if isinstance(body, dict) else {}
            raise SandboxdError(
                str(reason.get("error") or response.status_code),
                str(reason.get("message") or response.reason_phrase),
                str(reason.get("remediate") or ""),
                response.status_code >= 500,
            )
        return body

    def _send(self, method: str, url: str, **kwargs: Any) -> httpx2.Response:
        try:
            return self._http.request(method, url, **kwargs)
        except (httpx2.ConnectError, httpx2.ConnectTimeout):
            raise DaemonUnreachable(self.url) from None

    def openapi(self) -> dict[str, Any]:
        response = self._send("GET", "/v1/openapi.json")
        response.raise_for_status()
        return response.json()

    def settings(self) -> dict[str, Any]:
        return self._request("GET", "/v1/settings")

    def set_sandbox_db_enabled(self, enabled: bool) -> dict[str, Any]:
        """Stored at once; the daemon runs with it after its next restart."""
        return self._request("PUT", "/v1/settings", json={"sandbox_db_enabled": enabled})

    def restart(self) -> dict[str, Any]:
        """Drains the daemon and re-executes it in place (live sandboxes stay); answered before
        anything stops."""
        return self._request("POST", "/v1/restart")

    def projects(self) -> list[dict[str, Any]]:
        return self._request("GET", "/v1/projects")

    def project(self, slug: str) -> dict[str, Any]:
        return self._request("GET", "/v1/projects/{slug}", path={"slug": slug})

    def set_project(
        self,
        slug: str,
        services: list[str] | None,
        extensions: dict[str, list[str]] | None = None,
        clones: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """Opts `slug` into `services` (None or [] opts it out), with standing features; `clones`
        (`{"postgres": "<source>"}`, `{}` for none) hands engines out as clones of a source, None
        leaves them as they are."""
        body: dict[str, Any] = {"sandbox_services": services, "sandbox_extensions": extensions}
        if clones is not None:
            body["sandbox_clones"] = clones
        return self._request("PUT", "/v1/projects/{slug}", path={"slug": slug}, json=body)

    def agents(self, project: str | None = None) -> list[dict[str, Any]]:
        return self._request("GET", "/v1/agents", params={"project": project})

    def agent(self, slug: str) -> dict[str, Any]:
        return self._request("GET", "/v1/agents/{slug}", path={"slug": slug})

    def spawn_agent(self, slug: str, role: str, project: str) -> dict[str, Any]:
        """The answer carries the agent's token (shown once), manifest, env and briefing."""
        return self._request("POST", "/v1/agents", json={"slug": slug, "role": role, "project": project})

    def remove_agent(self, slug: str) -> Any:
        return self._request("DELETE", "/v1/agents/{slug}", path={"slug": slug})

    def tasks(self, project: str | None = None, state: str | None = None) -> list[dict[str, Any]]:
        return self._request("GET", "/v1/tasks", params={"project": project, "state": state})

    def add_task(self, project: str, title: str, description: str = "") -> dict[str, Any]:
        return self._request("POST", "/v1/tasks", json={"project": project, "title": title, "description": description})

    def sandboxes(self, all: bool = False) -> list[dict[str, Any]]:
        """Live sandboxes of this daemon; with `all`, other makers' (foreign) ones too."""
        return self._request("GET", "/v1/sandboxes", params={"all": "true" if all else None})

    def teardown_sandbox(self, owner: str) -> Any:
        return self._request("DELETE", "/v1/sandboxes/{owner}", path={"owner": owner})

    def audit(
        self,
        agent: str | None = None,
        project: str | None = None,
        outcome: str | None = None,
        before: int | None = None,
        limit: int | None = None,
    ) -> Any:
        params = {"agent": agent, "project": project, "outcome": outcome, "before": before, "limit": limit}
        return self._request("GET", "/v1/audit", params=params)

    def run_janitor(self) -> dict[str, Any]:
        return self._request("POST", "/v1/janitor/run")

    def pools(self) -> list[dict[str, Any]]:
        """The warm pools: sizes, idle and starting members, hand-outs, misses, backoff."""
        return self._request("GET", "/v1/pools")

    def sources(self) -> list[dict[str, Any]]:
        """Clone sources: name, privacy mode, refresh interval, last snapshot and error (never a DSN)."""
        return self._request("GET", "/v1/sources")

    def source(self, name: str) -> dict[str, Any]:
        return self._request("GET", "/v1/sources/{name}", path={"name": name})

    def put_source(
        self, name: str, dsn: str, privacy: str = "keep-values", refresh_secs: int = 0
    ) -> dict[str, Any]:
        """Registers (or replaces) a production Postgres that clones are made from; the DSN is
        sealed by the daemon and never returned."""
        body = {"dsn": dsn, "privacy": privacy, "refresh_secs": refresh_secs}
        return self._request("PUT", "/v1/sources/{name}", path={"name": name}, json=body)

    def remove_source(self, name: str) -> Any:
        return self._request("DELETE", "/v1/sources/{name}", path={"name": name})

    def snapshot_source(self, name: str) -> dict[str, Any]:
        """Takes a snapshot of the source now (schema, statistics, planner settings)."""
        return self._request("POST", "/v1/sources/{name}/snapshot", path={"name": name})

    def resize_pool(self, pool: str, min_idle: int, max_total: int) -> dict[str, Any]:
        """New sizes for one warm pool (an engine's, or ``"<engine>@<source>"`` for a pool of
        clones): stored, applied at once, kept across restarts."""
        return self._request(
            "PUT", "/v1/pools/{pool}", path={"pool": pool}, json={"min_idle": min_idle, "max_total": max_total}
        )
