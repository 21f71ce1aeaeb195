"""Runs the real suites on each backend and says what they came to (scripts/real-suites.sh).

For each backend, for each suite: one sandbox from `sandboxd provision --json` (torn down
after, whatever happened), the suite's parts against it, then a table of counts and times and
the failures grouped by cause. Exits 1 when a part could not run or has a failure that
`expected.py` does not explain.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections import Counter
from pathlib import Path

from .expected import classify, denied_command, expected_list, redis_denied
from .results import by_cause
from .sandbox import ProvisionError, Sandbox
from .suites import Context, Part, Suite

# What each suite's sandbox is made of. Django's Postgres carries `postgis` for gis_tests: the
# feature must reach the test database Django makes from template1.
SANDBOXES = {
    "django": (["postgres", "mariadb"], ["postgres=postgis"]),
    "sqlalchemy": (["postgres", "mariadb"], []),
    "redis-py": (["redis"], []),
}
SHOWN_PER_CAUSE = 5
# A --full run's data space per engine that keeps its data on disk (`sandboxd provision --size`).
FULL_RUN_SIZE = "2G"
DISK_ENGINES = ("postgres", "mariadb")


def say(message: str = "") -> None:
    print(f"[real-suites] {message}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(prog="real-suites")
    parser.add_argument("--sandboxd", required=True, help="the sandboxd binary")
    parser.add_argument("--repo", required=True, type=Path)
    parser.add_argument("--src", action="append", default=[],
                        help="NAME=DIR: a suite's unpacked sdist (DIR ends in -<version>)")
    parser.add_argument("--backends", default="process,docker")
    parser.add_argument("--suites", default="django,sqlalchemy,redis-py")
    parser.add_argument("--logs", required=True, type=Path)
    parser.add_argument("--full", action="store_true",
                        help="Django's whole suite instead of the six apps")
    args = parser.parse_args()

    # A SIGTERM (CI's timeout, a killed phase) unwinds like Ctrl-C, so every sandbox is torn
    # down by its `with` block.
    signal.signal(signal.SIGTERM, _interrupted)

    sources = dict(item.split("=", 1) for item in args.src)
    args.logs.mkdir(parents=True, exist_ok=True)
    expected = expected_list(args.repo)
    suites = []
    for name in args.suites.split(","):
        engines, features = SANDBOXES[name]
        src = Path(sources[name])
        suites.append(Suite(name, src.name.rsplit("-", 1)[1], src, engines, features))

    parts: list[Part] = []
    provisions: list[str] = []
    problems: list[str] = []
    started = time.monotonic()
    for backend in args.backends.split(","):
        ctx = Context(python=sys.executable, logs=args.logs, backend=backend, full=args.full)
        for suite in suites:
            owner = f"suites-{suite.name}-{backend}"
            say(f"{backend}: {suite.name} {suite.version} on {','.join(suite.engines)} "
                f"({owner})")
            # Django's whole suite with --parallel 2 makes six databases of every app's tables:
            # more than the default data space holds, so a --full run asks for what it needs.
            sizes = ([f"{e}={FULL_RUN_SIZE}" for e in suite.engines if e in DISK_ENGINES]
                     if args.full else [])
            sandbox = Sandbox(args.sandboxd, owner, suite.engines, suite.features, backend, say,
                              sizes=sizes)
            try:
                with sandbox:
                    for part in suite.run(sandbox, ctx):
                        parts.append(part)
                        say(f"  {line(part)}")
            except ProvisionError as err:
                problems.append(f"{backend}: {suite.name}: {err}")
                say(f"  {err}")
            provisions.append(f"{suite.name}/{backend} {sandbox.provision_secs:.1f}s + "
                              f"{sandbox.teardown_secs:.1f}s")

    say()
    say(f"{'suite':<11} {'part':<9} {'backend':<8} {'passed':>7} {'failed':>7} "
        f"{'errors':>7} {'skipped':>8} {'desel.':>7} {'time':>7}")
    for part in parts:
        r = part.result
        say(f"{part.suite:<11} {part.name:<9} {part.backend:<8} {r.passed:>7} {r.failed:>7} "
            f"{r.errors:>7} {r.skipped:>8} {r.deselected:>7} {part.secs:>6.0f}s")
    say(f"provision + teardown: {'; '.join(provisions)}")

    report: list[str] = []
    for part in parts:
        explained, unexplained = classify(part.suite, part.backend, part.result.failures, expected)
        where = f"{part.suite} {part.name} on {part.backend}"
        if part.result.crashed:
            problems.append(f"{where}: did not finish: {part.result.crashed}")
        for label, failures in explained.items():
            entry = next(e for e in expected if e.label == label and e.suite == part.suite)
            report.append(f"{where}: {len(failures)} expected, {label}: {entry.reason}")
            if part.suite == "redis-py" and label == "denied by design":
                denied, allowed = redis_denied(args.repo)
                per_command = Counter(
                    (denied_command(f, denied, allowed) or "teardown after it").split("|", 1)[0]
                    for f in failures)
                kinds = Counter(f.kind for f in failures)
                report.append(
                    f"    {kinds['failed']} failed + {kinds['error']} errors; by command: "
                    + ", ".join(f"{c.upper()} {n}" for c, n in per_command.most_common()))
        if unexplained:
            problems.append(f"{where}: {len(unexplained)} unexpected failure(s)")
        for cause, failures in by_cause(unexplained):
            report.append(f"{where}: {len(failures)} × {cause}")
            shown = [f.test for f in failures[:SHOWN_PER_CAUSE]]
            more = len(failures) - len(shown)
            report.append("    " + ", ".join(shown) + (f" (+{more} more)" if more else ""))
    if report:
        say()
        say("failures by cause:")
        for entry in report:
            say(f"  {entry}")
    (args.logs / "failures.txt").write_text(full_listing(parts, expected))
    say()
    say(f"logs: {args.logs} (failures.txt lists every failing test by cause)")
    say(f"total {time.monotonic() - started:.0f}s")
    if problems:
        say("FAILED:")
        for problem in problems:
            say(f"  {problem}")
        return 1
    say("every failure is on the expected list")
    return 0


def _interrupted(signum, frame):
    raise KeyboardInterrupt


def line(part: Part) -> str:
    r = part.result
    text = (f"{part.suite} {part.name}: {r.passed} passed, {r.failed} failed, {r.errors} "
            f"errors, {r.skipped} skipped")
    if r.deselected:
        text += f", {r.deselected} deselected"
    text += f" in {part.secs:.1f}s ({part.selection})"
    if r.crashed:
        text += f"; did not finish: {r.crashed}"
    return text


def full_listing(parts: list[Part], expected) -> str:
    out = []
    for part in parts:
        explained, unexplained = classify(part.suite, part.backend, part.result.failures, expected)
        out.append(f"## {part.suite} {part.name} on {part.backend}: {line(part)}")
        for label, failures in explained.items():
            out.append(f"### expected: {label} ({len(failures)})")
            out += [f"{f.kind}: {f.test}: {f.cause}" for f in failures]
        for cause, failures in by_cause(unexplained):
            out.append(f"### {len(failures)} × {cause}")
            out += [f"{f.kind}: {f.test}" for f in failures]
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        say("interrupted")
        sys.exit(130)
