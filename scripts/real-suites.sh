#!/usr/bin/env bash
# Real projects' own test suites, run as the accounts sandboxd hands out (issue 29): Django's
# runtests.py (postgres_tests, backends, migrations, model_fields, queries, transactions on
# PostgreSQL, gis_tests on PostGIS, the same five on MariaDB), SQLAlchemy's PostgreSQL and
# MySQL dialect tests, and redis-py's suite, on the process and Docker backends. Each suite gets
# one sandbox per backend from `sandboxd provision --json` and `sandboxd teardown` removes it
# after, whatever happened. Prints per suite and backend its counts and times and the failures
# grouped by cause, and exits 1 when a part did not finish or a failure is not on the expected
# list (scripts/real_suites/expected.py).
#
#   scripts/real-suites.sh            prepare, then run
#   scripts/real-suites.sh prepare    only fetch the sdists and build the virtualenv
#   scripts/real-suites.sh --full     Django's whole suite instead of its six apps
#
# Cached under SANDBOXD_SUITES_CACHE (default /var/cache/sandboxd-suites), keyed by version:
# sdists/ (from PyPI with pip), src/<name>-<version>/ (unpacked: each suite runs from its own
# sdist, library and tests alike), venv-<hash of requirements.txt and the Python>/.
# Environment: SANDBOXD_BIN (default target/debug/sandboxd), SANDBOXD_REAL_SUITES (default
# django,sqlalchemy,redis-py), SANDBOXD_REAL_SUITES_BACKENDS (default process,docker; Docker is
# left out, saying so, when no engine answers, unless SANDBOXD_REQUIRE_DOCKER=1).
set -euo pipefail

DJANGO=5.2.19
SQLALCHEMY=2.1.9
REDIS_PY=8.2.0

repo="$(cd "$(dirname "$0")/.." && pwd)"
CACHE="${SANDBOXD_SUITES_CACHE:-/var/cache/sandboxd-suites}"
say() { printf '[real-suites] %s\n' "$*"; }

mode=run
full=()
for arg in "$@"; do
  case $arg in
    prepare) mode=prepare ;;
    --full) full=(--full) ;;
    *) say "unknown argument: $arg (prepare, --full)"; exit 2 ;;
  esac
done

prepare_start=$(date +%s)

# mysqlclient (Django's MySQL driver) builds against MariaDB's client library.
if ! dpkg-query -W -f='${Status}' libmariadb-dev 2>/dev/null | grep -q "install ok installed"; then
  say "installing libmariadb-dev (mysqlclient builds against it)"
  SUDO=; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    libmariadb-dev pkg-config >/dev/null
fi

mkdir -p "$CACHE/sdists" "$CACHE/src"
# Unpacks name==version's sdist into src/<name>-<version> once; prints that directory.
sdist() {
  local name=$1 version=$2 dir="$CACHE/src/$1-$2"
  if [ ! -e "$dir/.complete" ]; then
    if [ ! -f "$CACHE/sdists/$name-$version.tar.gz" ]; then
      say "downloading the $name $version sdist" >&2
      # Straight from the index's page, checked against its sha256: `pip download
      # --no-binary` would build the sdist's build requirements (Cython) from source first.
      python3 - "$name" "$version" "$CACHE/sdists/$name-$version.tar.gz" >&2 <<'PY'
import hashlib, os, re, sys, urllib.request
name, version, target = sys.argv[1:]
index = "https://pypi.org/simple/%s/" % name
page = urllib.request.urlopen(index, timeout=60).read().decode()
wanted = "%s-%s.tar.gz" % (name, version)
for url, digest in re.findall(r'href="([^"#]+)#sha256=([0-9a-f]{64})"', page):
    if url.rsplit("/", 1)[-1].lower() == wanted.lower():
        data = urllib.request.urlopen(url, timeout=300).read()
        if hashlib.sha256(data).hexdigest() != digest:
            sys.exit("%s: sha256 does not match the index's" % url)
        with open(target + ".part", "wb") as out:
            out.write(data)
        os.rename(target + ".part", target)
        break
else:
    sys.exit("no %s on %s" % (wanted, index))
PY
    fi
    rm -rf "$dir" "$dir.tmp"
    mkdir -p "$dir.tmp"
    tar -xzf "$CACHE/sdists/$name-$version.tar.gz" --strip-components=1 -C "$dir.tmp"
    touch "$dir.tmp/.complete"
    mv "$dir.tmp" "$dir"
  fi
  echo "$dir"
}
django_src=$(sdist django "$DJANGO")
sqlalchemy_src=$(sdist sqlalchemy "$SQLALCHEMY")
redis_src=$(sdist redis "$REDIS_PY")

requirements="$repo/scripts/real_suites/requirements.txt"
key=$( (cat "$requirements"; python3 -VV) | sha256sum | cut -c1-12)
venv="$CACHE/venv-$key"
if [ ! -e "$venv/.complete" ]; then
  say "creating $venv"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$requirements"
  touch "$venv/.complete"
  # Older virtualenvs of this job are stale by construction.
  find "$CACHE" -maxdepth 1 -name 'venv-*' ! -name "venv-$key" -exec rm -rf {} +
else
  say "virtualenv present: $venv"
fi
say "prepared in $(($(date +%s) - prepare_start))s: django $DJANGO, sqlalchemy $SQLALCHEMY, redis-py $REDIS_PY"
[ $mode = prepare ] && exit 0

backends=${SANDBOXD_REAL_SUITES_BACKENDS:-process,docker}
if [[ ,$backends, == *,docker,* ]] && ! docker info >/dev/null 2>&1; then
  if [ "${SANDBOXD_REQUIRE_DOCKER:-0}" = 1 ]; then
    say "no Docker engine answers, and SANDBOXD_REQUIRE_DOCKER=1"
    exit 1
  fi
  say "no Docker engine answers: the Docker backend is left out"
  backends=$(printf '%s' ",$backends," | sed 's/,docker,/,/; s/^,//; s/,$//')
fi
[ -n "$backends" ] || { say "no backend to run on"; exit 0; }

bin="${SANDBOXD_BIN:-${CARGO_TARGET_DIR:-$repo/target}/debug/sandboxd}"
[ -x "$bin" ] || { say "no sandboxd binary at $bin (cargo build -p sandboxd, or set SANDBOXD_BIN)"; exit 1; }

# The driver checks its own parsers first: a broken reader would make every run look clean.
(cd "$repo/scripts" && "$venv/bin/python" -m unittest -q real_suites.test_real_suites 2>&1 \
  | sed 's/^/[real-suites] self-test: /')

cd "$repo/scripts"
exec "$venv/bin/python" -m real_suites \
  --sandboxd "$bin" --repo "$repo" --logs "${CARGO_TARGET_DIR:-$repo/target}/real-suites" \
  --src "django=$django_src" --src "sqlalchemy=$sqlalchemy_src" --src "redis-py=$redis_src" \
  --backends "$backends" --suites "${SANDBOXD_REAL_SUITES:-django,sqlalchemy,redis-py}" \
  "${full[@]}"
