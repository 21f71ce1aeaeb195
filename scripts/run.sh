#!/usr/bin/env bash
# The main job: installs what is missing, builds sandboxd, and runs the daemon (`sandboxd serve`).
# Arguments are passed to `sandboxd` instead (e.g. `./scripts/run.sh demo`).
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-deps.sh
if docker info >/dev/null 2>&1; then
  ./scripts/build-images.sh
fi
./scripts/build-guest.sh >/dev/null
cargo build --release -p sandboxd
# run_experiment's guest compiled now (seconds), not by the first agent's run.
./target/release/sandboxd experiments prepare
if [ $# -eq 0 ]; then set -- serve; fi
exec ./target/release/sandboxd "$@"
