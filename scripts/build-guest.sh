#!/usr/bin/env bash
# Builds run_experiment's guest: crates/sandboxd-experiments/guest (app.py + wit/) compiled with
# componentize-py (from PyPI, pinned) into a WebAssembly component carrying CPython and the
# stdlib modules app.py imports. Cached by its inputs: a guest whose app.py, WIT and
# componentize-py version are unchanged is not built again.
#
#   $SANDBOXD_GUEST_CACHE/<key>/experiment.wasm   the guest (key: sha256 of the inputs)
#   $SANDBOXD_GUEST_CACHE/current                 -> the newest <key>
#
# The daemon compiles the component to machine code itself, once per wasmtime version and
# engine configuration, into its own cache (experiments.cache_dir). Nothing is fetched at run time.
#
# Environment: SANDBOXD_GUEST_CACHE (default /var/cache/sandboxd-guest).
# Prints the guest's path on its last line.
set -euo pipefail

COMPONENTIZE_PY=0.25.1
CACHE="${SANDBOXD_GUEST_CACHE:-/var/cache/sandboxd-guest}"
repo="$(cd "$(dirname "$0")/.." && pwd)"
guest="$repo/crates/sandboxd-experiments/guest"

say() { printf '[build-guest] %s\n' "$*" >&2; }

key="$( { echo "componentize-py $COMPONENTIZE_PY"; cat "$guest/app.py" "$guest"/wit/*.wit; } | sha256sum | cut -c1-24)"
out="$CACHE/$key/experiment.wasm"
if [ -s "$out" ]; then
  say "guest $key present"
else
  venv="$CACHE/componentize-py-$COMPONENTIZE_PY"
  if ! "$venv/bin/componentize-py" --version 2>/dev/null | grep -q "$COMPONENTIZE_PY"; then
    say "installing componentize-py $COMPONENTIZE_PY into $venv"
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "componentize-py==$COMPONENTIZE_PY"
  fi
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  cp -r "$guest/app.py" "$guest/wit" "$work/"
  say "building guest $key"
  started=$SECONDS
  # An empty environment: componentize-py snapshots the interpreter after app.py's imports, and
  # nothing of this machine's environment may be baked into it.
  (cd "$work" && env -i PATH=/usr/bin:/bin HOME="$work" \
    "$venv/bin/componentize-py" -q -d wit -w experiment componentize app -o "$work/experiment.wasm")
  mkdir -p "$CACHE/$key"
  mv "$work/experiment.wasm" "$out.tmp" && mv "$out.tmp" "$out"
  say "built $out in $((SECONDS - started)) s ($(du -h "$out" | cut -f1))"
fi
ln -sfn "$key" "$CACHE/current"
echo "$out"
