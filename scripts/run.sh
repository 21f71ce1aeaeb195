#!/usr/bin/env bash
# The main job: installs what is missing, builds sandboxd and the Python client's wheel, and runs
# the daemon (`sandboxd serve`). Arguments are passed to `sandboxd` instead
# (e.g. `./scripts/run.sh demo`).
#
# What it leaves, where README's tour and Python section use it:
#   target/release/sandboxd                          the binary (`alias sandboxd=./target/release/sandboxd`)
#   target/wheels/sandboxd-<version>-py3-none-any.whl  the Python client (`pip install` it)
# (under $CARGO_TARGET_DIR instead of target/ for the binary when that is set).
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-deps.sh
if docker info >/dev/null 2>&1; then
  ./scripts/build-images.sh
fi
./scripts/build-guest.sh >/dev/null
cargo build --release -p sandboxd
sandboxd="${CARGO_TARGET_DIR:-target}/release/sandboxd"
./scripts/python-wheel.sh >/dev/null
# run_experiment's guest compiled now (seconds), not by the first agent's run.
"$sandboxd" experiments prepare
if [ $# -eq 0 ]; then set -- serve; fi
exec "$sandboxd" "$@"
