#!/usr/bin/env bash
# Installs the MCP Python SDKs the tests drive the daemon with (the client agents really run),
# one virtualenv per pinned version, from PyPI, and fastmcp's client in one of its own; builds
# our own Python package (clients/python) as a wheel into target/wheels and installs it with its
# test extras into the `client` virtualenv. Cached: a venv that already holds its versions is
# kept; the wheel is rebuilt every time (seconds). The tests find the venvs in the same place.
#
# Environment: SANDBOXD_PYTHON_CACHE (default /var/cache/sandboxd-python).
set -euo pipefail

CACHE="${SANDBOXD_PYTHON_CACHE:-/var/cache/sandboxd-python}"
# 2.x speaks 2026-07-28 (stateless) and 2025-11-25; 1.x only the session-based revisions.
VERSIONS=(2.3.0 1.30.0)
JSONSCHEMA=4.26.0
# The tests query the Postgres an agent gets, as its test suite would.
PSYCOPG=3.3.9
# fastmcp's client (it brings the SDK 2.x it is built on), the other client agents run.
FASTMCP=4.2.3

say() { printf '[python-sdks] %s\n' "$*"; }

mkdir -p "$CACHE"
for version in "${VERSIONS[@]}"; do
  venv="$CACHE/mcp-$version"
  if "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('mcp') != '$version' or m.version('psycopg') != '$PSYCOPG')" 2>/dev/null; then
    say "mcp $version present in $venv"
    continue
  fi
  say "installing mcp $version into $venv"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check \
    "mcp==$version" "jsonschema==$JSONSCHEMA" "psycopg[binary]==$PSYCOPG"
done
venv="$CACHE/fastmcp-$FASTMCP"
if "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('fastmcp') != '$FASTMCP' or m.version('psycopg') != '$PSYCOPG')" 2>/dev/null; then
  say "fastmcp $FASTMCP present in $venv"
else
  say "installing fastmcp $FASTMCP into $venv"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check \
    "fastmcp==$FASTMCP" "jsonschema==$JSONSCHEMA" "psycopg[binary]==$PSYCOPG"
fi
client="$CACHE/client"
if [ ! -x "$client/bin/python" ]; then
  say "creating $client"
  python3 -m venv "$client"
fi
repo="$(cd "$(dirname "$0")/.." && pwd)"
say "building the sandboxd wheel"
# Built from a copy: setuptools writes build/ and *.egg-info next to the sources it builds.
rm -rf "$repo/target/wheels" "$repo/target/python-client"
mkdir -p "$repo/target"
cp -r "$repo/clients/python" "$repo/target/python-client"
"$client/bin/pip" wheel --quiet --disable-pip-version-check --no-deps -w "$repo/target/wheels" "$repo/target/python-client"
wheel=$(ls "$repo"/target/wheels/sandboxd-*.whl)
"$client/bin/pip" install --quiet --disable-pip-version-check --force-reinstall --no-deps "$wheel"
"$client/bin/pip" install --quiet --disable-pip-version-check "${wheel}[test]"
say "installed $(basename "$wheel") into $client"
say "done"
