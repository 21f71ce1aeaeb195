"""Where the daemon is and who is calling, from arguments or the environment the CLI reads too."""

from __future__ import annotations

import os

from sandboxd.errors import NotConfigured

DEFAULT_TIMEOUT = 120.0
"""Seconds for one call: a cold provision of a whole set takes seconds, not minutes."""


def base_url(url: str | None) -> str:
    """The daemon's base URL (`http://127.0.0.1:7878`), from `url` or `SANDBOXD_URL`; a URL
    ending in `/mcp` or `/v1` is accepted too."""
    url = url or os.environ.get("SANDBOXD_URL")
    if not url:
        raise NotConfigured(
            "not_configured",
            "no sandboxd daemon is configured",
            "set SANDBOXD_URL to the daemon's address, e.g. http://127.0.0.1:7878",
        )
    url = url.rstrip("/")
    for suffix in ("/mcp", "/v1"):
        if url.endswith(suffix):
            url = url[: -len(suffix)]
    return url


def token(value: str | None, variable: str, what: str) -> str:
    value = value or os.environ.get(variable)
    if not value:
        raise NotConfigured("not_configured", f"no {what} is configured", f"set {variable}")
    return value
