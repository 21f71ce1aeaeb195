"""The failures this job expects, each with the reason it is not ours to fix. Keep it short.

Anything not matched here fails the job. An entry matches on a failure's cause (the first line of
its exception), never on a test's name alone, so a test that starts failing for another reason
is caught.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .results import Failure

REDIS_ACL = "crates/sandboxd-domain/src/engines/redis.rs"


@dataclass(frozen=True)
class Expected:
    suite: str
    label: str
    reason: str
    matches: Callable[[Failure], bool]
    # Only on this backend (a server version that differs between them), else on both.
    backend: str | None = None


def redis_denied(repo: Path) -> tuple[frozenset[str], frozenset[str]]:
    """The commands the handed-out Redis user is denied, and the subcommands allowed back,
    read from the ACL rules the daemon writes (`DENIED` in `REDIS_ACL`): what this job expects
    follows the daemon's own list, not a copy of it."""
    source = (repo / REDIS_ACL).read_text()
    block = re.search(r"const DENIED: &\[&str\] = &\[(.*?)\];", source, re.S)
    if not block:
        raise RuntimeError(f"no `const DENIED` list in {REDIS_ACL}")
    rules = re.findall(r'"([+-])([a-z|-]+)"', block.group(1))
    denied = frozenset(name for sign, name in rules if sign == "-")
    allowed = frozenset(name for sign, name in rules if sign == "+")
    return denied, allowed


_NOPERM = re.compile(r"no permissions to run the '([^']+)' command")
# Redis refuses DEBUG before the ACL is consulted unless `enable-debug-command` is set.
_DEBUG_OFF = "DEBUG command not allowed"
# An unauthenticated client on a server whose `default` user is off.
_NO_CREDENTIALS = re.compile(
    r"HELLO must be called with the client already authenticated|NOAUTH Authentication required")


# Django tests (outside any database) that expect writing into a read-only directory or file to
# fail, which the kernel allows root.
_NEEDS_NON_ROOT = (
    "(template_tests.test_loaders.FileSystemLoaderTests.test_permissions_error)",
    "(file_uploads.tests.DirectoryCreationTests.test_readonly_root)",
    "(i18n.test_compilation.PoFileTests.test_no_write_access)",
)


def denied_command(failure: Failure, denied: frozenset[str], allowed: frozenset[str]) -> str | None:
    """The denied-by-design command a failure's cause names (`config|set`), else None."""
    if _DEBUG_OFF in failure.cause and "debug" in denied:
        return "debug"
    m = _NOPERM.search(failure.cause)
    if not m:
        return None
    command = m.group(1).lower()
    if command in allowed:
        return None  # allowed back on purpose: refusing it would be a bug
    if command in denied or command.split("|", 1)[0] in denied:
        return command
    return None


def expected_list(repo: Path) -> list[Expected]:
    denied, allowed = redis_denied(repo)
    return [
        Expected(
            suite="redis-py",
            label="denied by design",
            reason=(
                "redis-py tests the server's admin commands too; the handed-out user is denied "
                f"{', '.join(sorted(c.upper() for c in denied))} (README, Roles: reconfiguring "
                "the server, loading code, replication, its files), so Redis answers NOPERM"
            ),
            matches=lambda f: denied_command(f, denied, allowed) is not None,
        ),
        Expected(
            suite="redis-py",
            label="no anonymous access",
            reason=(
                "a few redis-py tests open their own connection to the server's host and port "
                "without the URL's user and password; the sandbox's `default` user is off by "
                "design (README, Roles), so the server refuses them (HELLO/NOAUTH)"
            ),
            matches=lambda f: _NO_CREDENTIALS.search(f.cause) is not None,
        ),
        Expected(
            suite="redis-py",
            label="Redis 7.0's XINFO lag",
            reason=(
                "Debian 12's Redis 7.0.15 (the process backend's) answers XINFO GROUPS with "
                "`lag` -6 for a group created with ENTRIESREAD past the stream's end; Redis 7.2 "
                "and later (the Docker image's Redis 8) answer 1, which redis-py's test expects"
            ),
            matches=lambda f: f.test.endswith("::test_xgroup_create_entriesread")
            and f.cause.startswith("AssertionError: assert [{'name': b'g"),
            backend="process",
        ),
        Expected(
            suite="django",
            label="PostGIS 3.5.2's relate",
            reason=(
                "a PostGIS bug, not the sandbox's: PostGIS 3.5.0-3.5.3 with GEOS 3.13 (the "
                "Docker image's, Debian 13's 3.5.2) answers the `relate` mask T*F**F*** for "
                "Lawrence in Kansas wrongly; Django's ticket #36009 adjusted this test for it on "
                "its main branch (not in 5.2.x), and PostGIS 3.5.4 fixes it. PostGIS 3.3 on GEOS "
                "3.11 (the process backend's) passes"
            ),
            matches=lambda f: f.test.endswith(
                "(gis_tests.geoapp.tests.GeoLookupTest.test_relate_lookup)")
            and f.cause.startswith("gis_tests.geoapp.models.City.DoesNotExist"),
            backend="docker",
        ),
        # The three below meet only Django's whole suite (`--full`), not the six apps CI runs.
        Expected(
            suite="django",
            label="file_fdw reads the server's files",
            reason=(
                "inspectdb's foreign-data-wrapper test creates `file_fdw`, which only a superuser "
                "may create: its foreign tables read any file the server's account can, so it "
                "is not on the allowlist (README, What an agent gets) and never pre-installed"
            ),
            matches=lambda f: 'permission denied to create extension "file_fdw"' in f.cause,
        ),
        Expected(
            suite="django",
            label="the runner is root",
            reason=(
                "tests of Django's file handling that expect a write into a read-only directory "
                "to fail; this job runs as root, whom the kernel lets write; no database is "
                "involved"
            ),
            matches=lambda f: os.geteuid() == 0 and f.test.endswith(_NEEDS_NON_ROOT)
            and f.cause.endswith("Error not raised"),
        ),
        Expected(
            suite="django",
            label="a timing ratio on a busy machine",
            reason=(
                "serializers' test_crafted_xml_performance times the XML deserializer on "
                "inputs of growing size in the test process (no database) and asserts the "
                "time grows at most 2x per step; with two workers and the servers on two "
                "cores the ratio it measures varies from run to run"
            ),
            matches=lambda f: ".test_crafted_xml_performance)" in f.test
            and re.fullmatch(r"AssertionError: [0-9.]+ not less than or equal to 2", f.cause)
            is not None,
        ),
    ]


def classify(suite: str, backend: str, failures: list[Failure], expected: list[Expected]
             ) -> tuple[dict[str, list[Failure]], list[Failure]]:
    """Splits failures into those an entry of `expected` explains (by label) and the rest.

    A test whose own failure is explained takes its other failures with it: the error its
    teardown then meets (cleaning up after an ACL test that never ran, say) is the same cause.
    """
    explained: dict[str, list[Failure]] = {}
    unexplained = []
    label_of_test: dict[str, str] = {}
    for failure in failures:
        entry = next((e for e in expected if e.suite == suite
                      and e.backend in (None, backend) and e.matches(failure)), None)
        if entry:
            label_of_test.setdefault(failure.test, entry.label)
    for failure in failures:
        label = label_of_test.get(failure.test)
        if label:
            explained.setdefault(label, []).append(failure)
        else:
            unexplained.append(failure)
    return explained, unexplained
