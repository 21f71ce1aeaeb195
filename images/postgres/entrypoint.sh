#!/usr/bin/env bash
# sandboxd-local/postgres entrypoint.
#
# Honors the environment/command contract of the official `postgres` image so
# that the same engine code can drive either image:
#   POSTGRES_PASSWORD (required unless POSTGRES_HOST_AUTH_METHOD=trust),
#   POSTGRES_USER (default: postgres), POSTGRES_DB (default: $POSTGRES_USER),
#   PGDATA (default: /var/lib/postgresql/data), POSTGRES_INITDB_ARGS,
#   POSTGRES_INITDB_WALDIR, POSTGRES_HOST_AUTH_METHOD, the *_FILE variants of
#   POSTGRES_PASSWORD/USER/DB/INITDB_ARGS, and /docker-entrypoint-initdb.d/.
# Command line: `postgres [args]` (default), `-c ...` (postgres is prepended),
# anything else is exec'd unchanged.
set -Eeo pipefail

log() { printf '%s [entrypoint] %s\n' "$(date -u '+%Y-%m-%d %H:%M:%S UTC')" "$*"; }
die() { log "ERROR: $*" >&2; exit 1; }

# file_env VAR [DEFAULT]: VAR may also be supplied as the content of the file
# named by VAR_FILE (docker secrets). Never echoes the value.
file_env() {
	local var="$1" def="${2:-}" fileVar="${1}_FILE" val
	if [ -n "${!var:-}" ] && [ -n "${!fileVar:-}" ]; then
		die "both $var and $fileVar are set (but are exclusive)"
	fi
	val="$def"
	if [ -n "${!var:-}" ]; then
		val="${!var}"
	elif [ -n "${!fileVar:-}" ]; then
		val="$(<"${!fileVar}")"
	fi
	export "$var"="$val"
	unset "$fileVar"
}

setup_env() {
	: "${PGDATA:=/var/lib/postgresql/data}"
	export PGDATA
	file_env POSTGRES_PASSWORD
	file_env POSTGRES_USER postgres
	file_env POSTGRES_DB "$POSTGRES_USER"
	file_env POSTGRES_INITDB_ARGS
	: "${POSTGRES_HOST_AUTH_METHOD:=}"
	DATABASE_ALREADY_EXISTS=
	if [ -s "$PGDATA/PG_VERSION" ]; then
		DATABASE_ALREADY_EXISTS=true
	fi
}

# Create $PGDATA (possibly below a root-owned mode-1777 tmpfs) and the socket
# directory; when running as root, hand them to the postgres user.
create_db_directories() {
	local uid
	uid="$(id -u)"
	if ! mkdir -p "$PGDATA" 2>/dev/null; then
		die "cannot create PGDATA=$PGDATA as uid $uid (parent: $(stat -c '%U:%G mode %a' "$(dirname "$PGDATA")" 2>/dev/null || echo missing))"
	fi
	# chmod may fail when $PGDATA is a directory we do not own (e.g. the tmpfs
	# mount point itself); initdb/postgres will then report the problem.
	chmod 00700 "$PGDATA" 2>/dev/null || :
	mkdir -p /var/run/postgresql 2>/dev/null || :
	chmod 03775 /var/run/postgresql 2>/dev/null || :
	if [ -n "${POSTGRES_INITDB_WALDIR:-}" ]; then
		mkdir -p "$POSTGRES_INITDB_WALDIR"
		if [ "$uid" = 0 ]; then
			find "$POSTGRES_INITDB_WALDIR" \! -user postgres -exec chown postgres: '{}' +
		fi
		chmod 700 "$POSTGRES_INITDB_WALDIR"
	fi
	if [ "$uid" = 0 ]; then
		find "$PGDATA" \! -user postgres -exec chown postgres: '{}' +
		find /var/run/postgresql \! -user postgres -exec chown postgres: '{}' +
	elif [ ! -O "$PGDATA" ]; then
		die "PGDATA=$PGDATA is not owned by uid $uid (it is $(stat -c '%U:%G mode %a' "$PGDATA")); PostgreSQL requires owning its data directory. Point PGDATA at a subdirectory of the mount (e.g. /var/lib/postgresql/data/pgdata) or mount the tmpfs with uid=70,gid=70."
	fi
}

verify_minimum_env() {
	if [ -z "$POSTGRES_PASSWORD" ] && [ "$POSTGRES_HOST_AUTH_METHOD" != trust ]; then
		cat >&2 <<-'EOE'
			Error: Database is uninitialized and superuser password is not specified.
			       You must specify POSTGRES_PASSWORD to a non-empty value for the
			       superuser. For example, "-e POSTGRES_PASSWORD=password" on "docker run".

			       You may also use "POSTGRES_HOST_AUTH_METHOD=trust" to allow all
			       connections without a password. This is *not* recommended.
		EOE
		exit 1
	fi
	if [ "$POSTGRES_HOST_AUTH_METHOD" = trust ]; then
		log 'WARNING: POSTGRES_HOST_AUTH_METHOD=trust: every TCP client is accepted without a password.' >&2
	fi
}

# initdb with the superuser from POSTGRES_USER; the password is passed through
# a pipe, never through argv or the log. Authentication: unix socket = trust,
# TCP = POSTGRES_HOST_AUTH_METHOD (default: the server's password_encryption,
# i.e. scram-sha-256).
init_database_dir() {
	local uid wrapper hostAuth
	uid="$(id -u)"
	# initdb insists on a passwd entry for the current uid; fake one with
	# nss_wrapper when started with an arbitrary --user.
	if ! getent passwd "$uid" >/dev/null 2>&1; then
		for wrapper in /usr/lib/*/libnss_wrapper.so /usr/lib/libnss_wrapper.so /lib/*/libnss_wrapper.so; do
			if [ -s "$wrapper" ]; then
				NSS_WRAPPER_PASSWD="$(mktemp)"
				NSS_WRAPPER_GROUP="$(mktemp)"
				export LD_PRELOAD="$wrapper" NSS_WRAPPER_PASSWD NSS_WRAPPER_GROUP
				printf 'postgres:x:%s:%s:PostgreSQL:%s:/bin/false\n' "$uid" "$(id -g)" "$PGDATA" >"$NSS_WRAPPER_PASSWD"
				printf 'postgres:x:%s:\n' "$(id -g)" >"$NSS_WRAPPER_GROUP"
				break
			fi
		done
	fi

	hostAuth="${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}"

	# shellcheck disable=SC2034 # used inside the eval below
	local -a walArgs=(${POSTGRES_INITDB_WALDIR:+--waldir "$POSTGRES_INITDB_WALDIR"})
	# POSTGRES_INITDB_ARGS is evaluated like the official image does (so quoted
	# values work); it comes last so it can override the auth defaults.
	# --pwfile gets "password\n": initdb rejects a completely empty file.
	eval 'initdb --username="$POSTGRES_USER" --pwfile=<(printf "%s\n" "$POSTGRES_PASSWORD") --auth-local=trust --auth-host="$hostAuth" "${walArgs[@]}" '"$POSTGRES_INITDB_ARGS"

	# Like the official image, default the TCP method to the server's
	# password_encryption (command-line -c overrides included).
	if [ -z "$POSTGRES_HOST_AUTH_METHOD" ]; then
		local enc
		enc="$(postgres -C password_encryption "${@:2}" 2>/dev/null || :)"
		if [ -n "$enc" ] && [ "$enc" != "$hostAuth" ]; then
			sed -i -E "s/^(host[[:space:]].*[[:space:]])$hostAuth\$/\1$enc/" "$PGDATA/pg_hba.conf"
			hostAuth="$enc"
		fi
	fi
	HOST_AUTH="$hostAuth"

	if [[ "${LD_PRELOAD:-}" == */libnss_wrapper.so ]]; then
		rm -f "$NSS_WRAPPER_PASSWD" "$NSS_WRAPPER_GROUP"
		unset LD_PRELOAD NSS_WRAPPER_PASSWD NSS_WRAPPER_GROUP
	fi
}

# Allow TCP clients from anywhere with the chosen method (unix socket stays trust).
setup_hba_conf() {
	{
		printf '\n# added by the sandboxd-local entrypoint\n'
		printf 'host all all all %s\n' "$HOST_AUTH"
	} >>"$PGDATA/pg_hba.conf"
}

# Temporary server for initialisation: unix socket only (listen_addresses=''),
# so nothing can connect over TCP before initialisation has finished.
temp_server_start() {
	shift # drop "postgres"
	set -- "$@" -c listen_addresses='' -p "${PGPORT:-5432}"
	PGUSER="${PGUSER:-$POSTGRES_USER}" \
		pg_ctl -D "$PGDATA" -o "$(printf '%q ' "$@")" -w start >/dev/null
}

temp_server_stop() {
	PGUSER="${PGUSER:-$POSTGRES_USER}" pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
}

# psql over the unix socket as the superuser.
process_sql() {
	local -a q=(psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --no-password --no-psqlrc)
	if [ -n "$POSTGRES_DB" ]; then
		q+=(--dbname "$POSTGRES_DB")
	fi
	PGHOST='' PGHOSTADDR='' "${q[@]}" "$@"
}

setup_db() {
	local db="$POSTGRES_DB" exists
	exists="$(POSTGRES_DB='' process_sql --dbname postgres --set db="$db" --tuples-only --no-align <<-'EOSQL'
		SELECT 1 FROM pg_database WHERE datname = :'db';
	EOSQL
	)"
	if [ -z "$exists" ]; then
		POSTGRES_DB='' process_sql --dbname postgres --set db="$db" --quiet <<-'EOSQL'
			CREATE DATABASE :"db";
		EOSQL
		log "created database \"$db\""
	fi
}

process_init_files() {
	local f
	for f; do
		case "$f" in
			*.sh)
				# shellcheck disable=SC1090
				if [ -x "$f" ]; then log "running $f"; "$f"; else log "sourcing $f"; . "$f"; fi ;;
			*.sql) log "running $f"; process_sql -f "$f" ;;
			*.sql.gz) log "running $f"; gunzip -c "$f" | process_sql ;;
			*.sql.xz) log "running $f"; xzcat "$f" | process_sql ;;
			*.sql.zst) log "running $f"; zstd -dc "$f" | process_sql ;;
			*) log "ignoring $f" ;;
		esac
	done
}

want_help() {
	local arg
	for arg; do
		case "$arg" in
			-'?' | --help | --describe-config | -V | --version) return 0 ;;
		esac
	done
	return 1
}

main() {
	if [ "${1:0:1}" = '-' ]; then
		set -- postgres "$@"
	fi

	if [ "$1" = postgres ] && ! want_help "$@"; then
		setup_env
		create_db_directories
		if [ "$(id -u)" = 0 ]; then
			# PostgreSQL refuses to run as root: re-exec as the postgres user.
			log "running as root: switching to user postgres"
			exec setpriv --reuid=postgres --regid=postgres --init-groups "${BASH_SOURCE[0]}" "$@"
		fi

		if [ -z "$DATABASE_ALREADY_EXISTS" ]; then
			verify_minimum_env
			shopt -s nullglob
			local -a initFiles=(/docker-entrypoint-initdb.d/*)
			shopt -u nullglob
			log "initializing database in $PGDATA"
			init_database_dir "$@"
			setup_hba_conf
			export PGPASSWORD="${PGPASSWORD:-$POSTGRES_PASSWORD}"
			temp_server_start "$@"
			setup_db
			process_init_files "${initFiles[@]}"
			temp_server_stop
			unset PGPASSWORD
			log 'PostgreSQL init process complete; ready for start up.'
		else
			log 'PostgreSQL database directory appears to contain a database; skipping initialization'
		fi
	fi

	exec "$@"
}

main "$@"
