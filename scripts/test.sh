#!/usr/bin/env bash
# The whole test suite, on a fresh machine of this kind: installs what the tests need (database
# servers, browser, Podman, local images), runs every test against real components, runs the
# Docker backend's tests again against Podman's compatible API, and checks after each that
# nothing was left behind. CI runs this through .ci/run. Prints how long each phase took.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '[test] %s\n' "$*"; }

PHASES=()
# Runs "$@" as a named phase and records its duration; returns its exit status.
phase() {
  local name=$1 start status=0
  shift
  start=$(date +%s)
  "$@" || status=$?
  PHASES+=("$(printf '%-14s %4ss%s' "$name" $(($(date +%s) - start)) "$([ $status -eq 0 ] || echo "  (exit $status)")")")
  return $status
}

print_phases() {
  [ ${#PHASES[@]} -gt 0 ] || return 0
  say "phases:"
  printf '[test]   %s\n' "${PHASES[@]}"
}

PODMAN_STARTED=0
finish() {
  # Podman's service is ours: stopped whatever happened, so nothing of it outlives the run.
  if [ $PODMAN_STARTED -eq 1 ]; then
    phase podman-down ./scripts/podman.sh down || true
  fi
  print_phases
}
trap finish EXIT

phase install-deps ./scripts/install-deps.sh
phase python-sdks ./scripts/python-sdks.sh
if docker info >/dev/null 2>&1; then
  phase build-images ./scripts/build-images.sh
else
  say "no Docker engine answers: Docker tests will skip (unless SANDBOXD_REQUIRE_DOCKER=1)"
fi

# run_experiment's guest (componentize-py from PyPI; cached by its inputs).
phase build-guest ./scripts/build-guest.sh
export SANDBOXD_EXPERIMENT_GUEST=/var/cache/sandboxd-guest/current/experiment.wasm
export SANDBOXD_EXPERIMENT_CACHE=/var/cache/sandboxd-guest/compiled

if ! cargo nextest --version >/dev/null 2>&1; then
  say "installing cargo-nextest"
  phase nextest cargo install --locked cargo-nextest
fi

say "building the tests"
# What is labeled before the tests run is not theirs to leak (check-leaks names it).
LEAK_BASELINE=$(mktemp)
./scripts/check-leaks.sh --record "$LEAK_BASELINE"
phase build cargo nextest run --workspace --profile ci --no-run
# Compiled once here (a minute in a debug build when the cache has none), not by the first test.
phase compile-guest env SANDBOXD_EXPERIMENTS__GUEST="$SANDBOXD_EXPERIMENT_GUEST" \
  SANDBOXD_EXPERIMENTS__CACHE_DIR="$SANDBOXD_EXPERIMENT_CACHE" \
  "${CARGO_TARGET_DIR:-target}/debug/sandboxd" experiments prepare
say "running the test suite"
status=0
phase tests cargo nextest run --workspace --profile ci "$@" || status=$?

phase check-leaks ./scripts/check-leaks.sh --since "$LEAK_BASELINE" || status=$?

# The Docker backend's tests once more, against Podman's Docker-compatible API (a service of
# our own, scripts/podman.sh). SANDBOXD_SKIP_PODMAN=1 leaves it out.
if [ "${SANDBOXD_SKIP_PODMAN:-0}" != 1 ] && docker info >/dev/null 2>&1; then
  PODMAN_STARTED=1
  if phase podman-up ./scripts/podman.sh up; then
    podman_socket=$(./scripts/podman.sh socket)
    say "running the Docker backend's tests against Podman ($podman_socket)"
    # --workspace with a filter, not -p: the same features, so the build above is reused.
    phase podman-tests env SANDBOXD_TEST_DOCKER_SOCKET="$podman_socket" \
      cargo nextest run --workspace --profile ci -E 'package(sandboxd-backend) & test(/docker/)' \
      || status=$?
    # Podman's store is ours alone: anything labeled left in it is a leak, no baseline.
    phase podman-leaks env DOCKER_HOST="$podman_socket" ./scripts/check-leaks.sh || status=$?
  else
    status=1
  fi
  # `down` fails when something of the service would outlive it (a conmon monitor, say).
  PODMAN_STARTED=0
  phase podman-down ./scripts/podman.sh down || status=$?
fi
exit $status
