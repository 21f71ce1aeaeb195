#!/usr/bin/env bash
# Builds the Python client (clients/python) as a wheel where README says it is:
#
#   target/wheels/sandboxd-<version>-py3-none-any.whl
#
# (`pip install target/wheels/sandboxd-<version>-py3-none-any.whl`; the package is not on PyPI).
# `run.sh` calls it (the test command's python-sdks.sh builds the same wheel there too). Seconds:
# pip builds it with setuptools from PyPI (pip's own cache after the first time), in a virtualenv
# of its own. Prints the wheel's path on its last line.
#
# Environment: SANDBOXD_PYTHON_CACHE (default /var/cache/sandboxd-python).
set -euo pipefail

CACHE="${SANDBOXD_PYTHON_CACHE:-/var/cache/sandboxd-python}"
repo="$(cd "$(dirname "$0")/.." && pwd)"
out="$repo/target/wheels"

say() { printf '[python-wheel] %s\n' "$*" >&2; }

venv="$CACHE/wheel-build"
if [ ! -x "$venv/bin/pip" ]; then
  say "creating $venv"
  mkdir -p "$CACHE"
  python3 -m venv "$venv"
fi
# Built from a copy: setuptools writes build/ and *.egg-info next to the sources it builds.
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp -r "$repo/clients/python" "$work/client"
rm -rf "$out"
mkdir -p "$out"
"$venv/bin/pip" wheel --quiet --disable-pip-version-check --no-deps -w "$out" "$work/client" >&2
wheel=$(ls "$out"/sandboxd-*-py3-none-any.whl)
say "built $wheel"
echo "$wheel"
