#!/usr/bin/env bash
# The main job: installs what is missing, builds sandboxd, and runs the daemon (`sandboxd serve`).
# Arguments are passed to `sandboxd` instead (e.g. `./scripts/run.sh demo`).
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-deps.sh
if docker info >/dev/null 2>&1; then
  ./scripts/build-images.sh
fi
cargo build --release -p sandboxd
if [ $# -eq 0 ]; then set -- serve; fi
exec ./target/release/sandboxd "$@"
