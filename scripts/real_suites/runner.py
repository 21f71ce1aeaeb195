"""Runs one suite's command with a deadline, its output kept in a log with the passwords out."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Ran:
    status: int | None  # None: killed at the deadline
    output: str  # redacted
    secs: float


def redact(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, "[redacted]")
    return text


def run_logged(command: list[str], *, cwd: Path, env: dict[str, str | None], log: Path,
               secrets: list[str], deadline_secs: int) -> Ran:
    """Runs `command` in a process group of its own, so the deadline ends its workers too.
    `env` adds to this process's environment; a None value removes that variable."""
    started = time.monotonic()
    full_env = dict(os.environ)
    for name, value in env.items():
        if value is None:
            full_env.pop(name, None)
        else:
            full_env[name] = value
    with subprocess.Popen(
        command, cwd=cwd, env=full_env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, errors="replace", start_new_session=True,
    ) as child:
        try:
            raw, _ = child.communicate(timeout=deadline_secs)
            status: int | None = child.returncode
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            raw, _ = child.communicate()
            raw += f"\n[real-suites] killed after {deadline_secs}s\n"
            status = None
        except BaseException:
            # Interrupted (Ctrl-C, SIGTERM): the suite's workers must not outlive us.
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            raise
    output = redact(raw, secrets)
    log.write_text(output)
    return Ran(status=status, output=output, secs=time.monotonic() - started)
