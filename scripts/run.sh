#!/usr/bin/env bash
# The main job: installs what is missing, builds sandboxd, and runs it. Arguments are passed to
# `sandboxd` (default: the demo — provision postgres, redis and mariadb, query each, tear down).
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-deps.sh
if docker info >/dev/null 2>&1; then
  ./scripts/build-images.sh
fi
cargo build --release -p sandboxd
if [ $# -eq 0 ]; then set -- demo; fi
exec ./target/release/sandboxd "$@"
