"""What a suite's run came to: its counts and its failures, each with its cause.

Two readers, one per kind of runner: `from_unittest` reads the text `unittest` prints (Django's
`runtests.py`), `from_junit` the JUnit XML pytest writes (SQLAlchemy, redis-py). A failure's
*cause* is the first line of the exception it ended with (`django.db.utils.OperationalError: …`),
so failures that broke for one reason group together however many tests they are.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass, field

# A cause longer than this is cut: it names the error, the log has the rest.
CAUSE_CHARS = 240


@dataclass
class Failure:
    test: str
    kind: str  # "failed" or "error"
    cause: str


@dataclass
class Result:
    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    deselected: int = 0
    failures: list[Failure] = field(default_factory=list)
    # Set when the runner stopped before reporting (a database it could not create, say).
    crashed: str | None = None


def clean_cause(line: str) -> str:
    """One line, no addresses that differ from run to run, at most CAUSE_CHARS."""
    line = " ".join(line.split())
    line = re.sub(r"0x[0-9a-fA-F]{6,}", "0x…", line)
    if len(line) > CAUSE_CHARS:
        line = line[: CAUSE_CHARS - 1] + "…"
    return line or "(no message)"


def exception_line(traceback: str) -> str:
    """The first line of the exception a Python traceback ends with.

    The last `  File "…"` frame belongs to the last exception of a chain; its exception line is
    the first line after it that is not indented (frames' source lines and carets are).
    """
    lines = traceback.splitlines()
    last_frame = max((i for i, l in enumerate(lines) if l.startswith('  File "')), default=-1)
    for line in lines[last_frame + 1 :]:
        if line.strip() and not line.startswith((" ", "\t")):
            return clean_cause(line)
    for line in reversed(lines):
        if line.strip():
            return clean_cause(line)
    return "(no message)"


_SEPARATOR = "=" * 70
_DASHES = "-" * 70
_HEADER = re.compile(r"^(ERROR|FAIL|UNEXPECTED SUCCESS): (.+)$")
_RAN = re.compile(r"^Ran (\d+) tests? in ")
_OUTCOME = re.compile(r"^(OK|FAILED)(?: \((.*)\))?$")
_FIXTURE = re.compile(r"^(setUpClass|tearDownClass|setUpModule|tearDownModule) ")


def _base_test(test: str) -> str:
    """`test_x (app.tests.T.test_x)` of a subtest's `test_x (app.tests.T.test_x) (i=1)`."""
    m = re.match(r"^\S+ \([^)]*\)", test)
    return m.group(0) if m else test


def from_unittest(output: str) -> Result:
    """Reads unittest's report: the `ERROR:` / `FAIL:` blocks, `Ran N tests`, `FAILED (…)`."""
    result = Result()
    lines = output.splitlines()
    ran = None
    counts: dict[str, int] = {}
    i = 0
    while i < len(lines):
        line = lines[i]
        if line == _SEPARATOR and i + 1 < len(lines) and _HEADER.match(lines[i + 1]):
            kind, test = _HEADER.match(lines[i + 1]).groups()
            body = []
            j = i + 3  # past the header and its dashes
            while j < len(lines) and lines[j] != _SEPARATOR and not (
                lines[j] == _DASHES and j + 1 < len(lines) and _RAN.match(lines[j + 1])
            ):
                body.append(lines[j])
                j += 1
            cause = (
                "unexpected success"
                if kind == "UNEXPECTED SUCCESS"
                else exception_line("\n".join(body))
            )
            result.failures.append(
                Failure(test=test, kind="error" if kind == "ERROR" else "failed", cause=cause)
            )
            i = j
            continue
        if m := _RAN.match(line):
            ran = int(m.group(1))
        elif ran is not None and (m := _OUTCOME.match(line)):
            for part in (m.group(2) or "").split(","):
                if "=" in part:
                    name, value = part.split("=", 1)
                    counts[name.strip()] = int(value)
        i += 1
    if ran is None:
        result.crashed = exception_line(output) if "Traceback" in output else _last_line(output)
        return result
    result.failed = counts.get("failures", 0) + counts.get("unexpected successes", 0)
    result.errors = counts.get("errors", 0)
    result.skipped = counts.get("skipped", 0) + counts.get("expected failures", 0)
    # A test's subtests can fail several times over: `Ran` counts tests, not failures; and a
    # class or module whose set-up failed ran none of its tests.
    failed_tests = len(
        {_base_test(f.test) for f in result.failures if not _FIXTURE.match(f.test)}
    )
    result.passed = max(ran - failed_tests - result.skipped, 0)
    return result


def from_junit(xml_text: str, deselected: int = 0) -> Result:
    """Reads pytest's `--junitxml`: one `testcase` per test (and per setup or teardown error)."""
    result = Result(deselected=deselected)
    root = ET.fromstring(xml_text)
    for case in root.iter("testcase"):
        test = "::".join(p for p in (case.get("classname", ""), case.get("name", "")) if p)
        outcomes = {child.tag: child for child in case}
        if "error" in outcomes or "failure" in outcomes:
            for tag, kind in (("failure", "failed"), ("error", "error")):
                if tag in outcomes:
                    node = outcomes[tag]
                    cause = _junit_cause(node.get("message", ""), node.text or "")
                    result.failures.append(Failure(test=test, kind=kind, cause=cause))
            if "failure" in outcomes:
                result.failed += 1
            else:
                result.errors += 1
        elif "skipped" in outcomes:
            result.skipped += 1
        else:
            result.passed += 1
    # A test that failed and then errored in teardown is one failed test with two causes.
    return result


def _junit_cause(message: str, text: str) -> str:
    # pytest writes `failed on setup with "<exception line>"` for a fixture's error.
    wrapped = re.match(r'^failed on (?:setup|teardown) with "(.*)"$', message, re.S)
    if wrapped:
        message = wrapped.group(1)
    first = message.strip().splitlines()[0] if message.strip() else ""
    if first:
        return clean_cause(first)
    return exception_line(text) if text.strip() else "(no message)"


def _last_line(output: str) -> str:
    for line in reversed(output.splitlines()):
        if line.strip():
            return clean_cause(line)
    return "(no output)"


def by_cause(failures: list[Failure]) -> list[tuple[str, list[Failure]]]:
    """Failures grouped by cause, the largest group first."""
    groups: dict[str, list[Failure]] = {}
    for failure in failures:
        groups.setdefault(failure.cause, []).append(failure)
    order = Counter({cause: len(group) for cause, group in groups.items()})
    return [(cause, groups[cause]) for cause, _ in order.most_common()]
