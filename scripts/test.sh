#!/usr/bin/env bash
# The whole test suite, on a fresh machine of this kind: installs what the tests need (database
# servers, browser, local images), runs every test against real components, then checks that
# nothing was left behind. CI runs this through .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '[test] %s\n' "$*"; }

./scripts/install-deps.sh
if docker info >/dev/null 2>&1; then
  ./scripts/build-images.sh
else
  say "no Docker engine answers: Docker tests will skip (unless SANDBOXD_REQUIRE_DOCKER=1)"
fi

if ! cargo nextest --version >/dev/null 2>&1; then
  say "installing cargo-nextest"
  cargo install --locked cargo-nextest
fi

say "running the test suite"
status=0
cargo nextest run --workspace --profile ci "$@" || status=$?

./scripts/check-leaks.sh || status=$?
exit $status
