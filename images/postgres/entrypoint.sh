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
#
# Baked start: the image carries a cluster initdb'd at build time
# (/var/lib/postgresql/baked.tar, no password). With an empty PGDATA, the default
# initdb settings (no POSTGRES_INITDB_ARGS / POSTGRES_HOST_AUTH_METHOD) and no
# init scripts, it is copied into PGDATA and the server starts at once; the
# superuser is renamed to POSTGRES_USER and given POSTGRES_PASSWORD over the
# unix socket right after. Until then no TCP login can succeed. Any other case
# (or SANDBOXD_UNBAKED=1) takes the official image's path: initdb and a
# temporary server.
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

BAKED=/var/lib/postgresql/baked.tar

# Whether this start can use the baked cluster (see the header).
can_use_baked() {
	[ -z "$DATABASE_ALREADY_EXISTS" ] && [ -s "$BAKED" ] && [ -z "${SANDBOXD_UNBAKED:-}" ] &&
		[ -z "$POSTGRES_INITDB_ARGS" ] && [ -z "$POSTGRES_HOST_AUTH_METHOD" ] || return 1
	shopt -s nullglob
	local -a initFiles=(/docker-entrypoint-initdb.d/*)
	shopt -u nullglob
	[ ${#initFiles[@]} -eq 0 ]
}

# The baked cluster into PGDATA (and its WAL into POSTGRES_INITDB_WALDIR, linked
# back as initdb --waldir would), owned by whoever runs this.
copy_baked() {
	tar -C "$PGDATA" --no-same-owner -xf "$BAKED"
	chmod 700 "$PGDATA"
	if [ -n "${POSTGRES_INITDB_WALDIR:-}" ]; then
		cp -R "$PGDATA/pg_wal/." "$POSTGRES_INITDB_WALDIR/"
		rm -rf "$PGDATA/pg_wal"
		ln -s "$POSTGRES_INITDB_WALDIR" "$PGDATA/pg_wal"
	fi
}

# psql as $1 over the unix socket (local = trust), SQL on stdin.
socket_sql() {
	PGHOST=/var/run/postgresql PGHOSTADDR='' psql -v ON_ERROR_STOP=1 --quiet --no-psqlrc \
		--no-password --port "${PGPORT:-5432}" --username "$1" --dbname postgres
}

# The superuser as the official image makes it: named POSTGRES_USER (the baked
# `postgres` renamed, through a helper role, since a session cannot rename its
# own role), with POSTGRES_PASSWORD (a SQL literal on stdin, never in argv),
# and POSTGRES_DB. One psql process: `\connect` switches the session user.
setup_baked_superuser() {
	local user="${POSTGRES_USER//\"/\"\"}" literal="'${POSTGRES_PASSWORD//\'/\'\'}'" db="${POSTGRES_DB//\'/\'\'}"
	{
		if [ "$POSTGRES_USER" != postgres ]; then
			printf 'CREATE ROLE sandboxd_baked_rename SUPERUSER LOGIN;\n'
			printf '\\connect - sandboxd_baked_rename\n'
			printf 'ALTER ROLE postgres RENAME TO "%s";\n' "$user"
			printf '\\connect - "%s"\n' "$user"
			printf 'DROP ROLE sandboxd_baked_rename;\n'
		fi
		printf 'ALTER ROLE CURRENT_USER PASSWORD %s;\n' "$literal"
		printf "SELECT format('CREATE DATABASE %%I', '%s') WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = '%s')\\gexec\n" "$db" "$db"
	} | socket_sql postgres
}

# Starts the server on the baked cluster, sets the superuser up once its socket
# answers, and stays its parent: stop signals are passed on, its exit status is
# this script's.
start_baked() {
	log "starting from the baked cluster (no initdb)"
	copy_baked
	"$@" &
	local pid=$! i status
	trap 'kill -INT "$pid" 2>/dev/null' INT
	trap 'kill -TERM "$pid" 2>/dev/null' TERM
	trap 'kill -QUIT "$pid" 2>/dev/null' QUIT
	for ((i = 0; i < 3000; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		pg_isready -q -h /var/run/postgresql -p "${PGPORT:-5432}" -U postgres -d postgres && break
		sleep 0.01
	done
	if kill -0 "$pid" 2>/dev/null && ! setup_baked_superuser; then
		log "ERROR: setting up the superuser on the baked cluster failed" >&2
		kill -INT "$pid" 2>/dev/null
	else
		log 'PostgreSQL started from the baked cluster; superuser set.'
	fi
	while :; do
		status=0
		wait "$pid" || status=$?
		kill -0 "$pid" 2>/dev/null || exit "$status"
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

		if can_use_baked; then
			verify_minimum_env
			start_baked "$@"
		elif [ -z "$DATABASE_ALREADY_EXISTS" ]; then
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
