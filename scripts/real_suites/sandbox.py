"""A sandbox from `sandboxd provision --json`, torn down with `sandboxd teardown` afterwards.

The suites get exactly what an operator or CI gets: the JSON documented in README ("What an
agent gets per service"), the handed-out account's credentials and nothing of the superuser.
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass


class ProvisionError(RuntimeError):
    pass


@dataclass
class Service:
    """One entry of `services` in provision's JSON."""

    engine: str
    host: str
    port: int
    user: str
    password: str
    database: str
    url: str
    features: list[str]


class Sandbox:
    """`with Sandbox(...) as sandbox:` provisions on entry and always tears down on exit."""

    def __init__(self, sandboxd: str, owner: str, engines: list[str], features: list[str],
                 backend: str, log, sizes: list[str] | None = None):
        self.sandboxd = sandboxd
        self.sizes = sizes or []
        self.owner = owner
        self.engines = engines
        self.features = features
        self.backend = backend
        self.log = log
        self.services: dict[str, Service] = {}
        self.provision_secs = 0.0
        self.teardown_secs = 0.0

    def __enter__(self) -> Sandbox:
        # A run that was killed may have left this owner's instances: they go first, so the
        # provision below starts from nothing (the owner names are this job's own).
        self.teardown()
        started = time.monotonic()
        command = [self.sandboxd, "provision", "--json", "--owner", self.owner,
                   "--engines", ",".join(self.engines), "--backend", self.backend]
        for feature in self.features:
            command += ["--features", feature]
        for size in self.sizes:
            command += ["--size", size]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=300)
            if done.returncode != 0:
                reason = (done.stderr.strip().splitlines() or ["(no message)"])[-1]
                raise ProvisionError(
                    f"`sandboxd {' '.join(command[1:])}` exited {done.returncode}: {reason}"
                )
            for entry in json.loads(done.stdout)["services"]:
                self.services[entry["service"]] = Service(
                    engine=entry["service"], host=entry["host"], port=int(entry["port"]),
                    user=entry["user"], password=entry["password"],
                    database=entry["database"], url=entry["url"],
                    features=list(entry.get("features", [])),
                )
        except BaseException:
            # Provision is all or nothing, but a timeout or an answer we cannot read is not.
            self.teardown()
            raise
        finally:
            self.provision_secs = time.monotonic() - started
        return self

    def __exit__(self, *exc) -> None:
        started = time.monotonic()
        self.teardown()
        self.teardown_secs = time.monotonic() - started

    def teardown(self) -> None:
        done = subprocess.run(
            [self.sandboxd, "teardown", "--owner", self.owner],
            capture_output=True, text=True, timeout=300,
        )
        if done.returncode != 0:
            # Said, not raised: the leak check after this job names whatever stayed.
            self.log(f"teardown --owner {self.owner} exited {done.returncode}: "
                     f"{done.stderr.strip()}")

    def secrets(self) -> list[str]:
        """Every password this sandbox handed out: redacted from everything printed or kept."""
        return [s.password for s in self.services.values() if s.password]
