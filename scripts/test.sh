#!/usr/bin/env bash
# The whole test suite, on a fresh machine of this kind: installs what the tests need (database
# servers, browser, Podman, local images, a single-node Kubernetes cluster built from source),
# runs every test against real components, runs the Docker backend's tests again against
# Podman's compatible API, and checks after each that nothing was left behind. CI runs this
# through .ci/run. Prints how long each phase took.
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
K8S_STARTED=0
finish() {
  # Podman's service and the test cluster are ours: stopped whatever happened, so nothing of
  # them outlives the run.
  if [ $PODMAN_STARTED -eq 1 ]; then
    phase podman-down ./scripts/podman.sh down || true
  fi
  if [ $K8S_STARTED -eq 1 ]; then
    phase k8s-down ./scripts/k8s-cluster.sh down || true
  fi
  print_phases
}
trap finish EXIT

phase install-deps ./scripts/install-deps.sh
phase python-sdks ./scripts/python-sdks.sh
# The real-suite job's sdists and virtualenv (cached by version), fetched before the build.
if [ "${SANDBOXD_SKIP_REAL_SUITES:-0}" != 1 ]; then
  phase suites-prep ./scripts/real-suites.sh prepare
fi
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

# The Kubernetes backend's tests run on a real single-node cluster (scripts/k8s-cluster.sh:
# built from Debian's source package, ~14 min cold, cached after). It comes up in the
# background while the Rust build runs, whose single-crate stretches leave a core idle.
# SANDBOXD_SKIP_KUBERNETES=1 leaves it out (the tests then skip).
K8S_LOG=$(mktemp)
if [ "${SANDBOXD_SKIP_KUBERNETES:-0}" != 1 ] && docker info >/dev/null 2>&1; then
  K8S_STARTED=1
  K8S_START=$(date +%s)
  ./scripts/k8s-cluster.sh up >"$K8S_LOG" 2>&1 &
  K8S_PID=$!
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
if [ $K8S_STARTED -eq 1 ]; then
  k8s_status=0
  wait "$K8S_PID" || k8s_status=$?
  PHASES+=("$(printf '%-14s %4ss%s' k8s-up $(($(date +%s) - K8S_START)) \
    "$([ $k8s_status -eq 0 ] || echo "  (exit $k8s_status)")") (beside the build)")
  sed 's/^/[k8s] /' "$K8S_LOG"
  if [ $k8s_status -ne 0 ]; then
    say "the test cluster did not come up"
    exit 1
  fi
  export SANDBOXD_TEST_KUBECONFIG
  SANDBOXD_TEST_KUBECONFIG=$(./scripts/k8s-cluster.sh kubeconfig)
  # CI has a cluster: a skipped Kubernetes test is a failure there.
  [ "${SANDBOXD_REQUIRE_DOCKER:-0}" = 1 ] && export SANDBOXD_REQUIRE_KUBERNETES=1
fi
rm -f "$K8S_LOG"

say "running the test suite"
status=0
phase tests cargo nextest run --workspace --profile ci "$@" || status=$?

phase check-leaks ./scripts/check-leaks.sh --since "$LEAK_BASELINE" || status=$?
if [ $K8S_STARTED -eq 1 ]; then
  # `down` fails when it cannot leave the machine as `up` found it.
  K8S_STARTED=0
  phase k8s-down ./scripts/k8s-cluster.sh down || status=$?
fi

# Django's, SQLAlchemy's and redis-py's own suites as the handed-out accounts, on the process
# and Docker backends, from `sandboxd provision --json` (scripts/real-suites.sh: counts, times
# and failures by cause; a failure not on its expected list fails it), then the leak check
# again. SANDBOXD_SKIP_REAL_SUITES=1 leaves it out.
if [ "${SANDBOXD_SKIP_REAL_SUITES:-0}" != 1 ]; then
  SUITES_BASELINE=$(mktemp)
  ./scripts/check-leaks.sh --record "$SUITES_BASELINE"
  phase real-suites ./scripts/real-suites.sh || status=$?
  phase suites-leaks ./scripts/check-leaks.sh --since "$SUITES_BASELINE" || status=$?
  rm -f "$SUITES_BASELINE"
fi

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
