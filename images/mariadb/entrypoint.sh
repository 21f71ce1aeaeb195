#!/usr/bin/env bash
# sandboxd-local/mariadb entrypoint.
#
# Honors the environment/command contract of the official `mariadb` image so
# that the same engine code can drive either image:
#   MARIADB_ROOT_PASSWORD | MARIADB_ROOT_PASSWORD_HASH |
#   MARIADB_ALLOW_EMPTY_ROOT_PASSWORD | MARIADB_RANDOM_ROOT_PASSWORD (one is
#   required for a new datadir), MARIADB_ROOT_HOST (default '%'),
#   MARIADB_DATABASE, MARIADB_USER, MARIADB_PASSWORD | MARIADB_PASSWORD_HASH,
#   MARIADB_INITDB_SKIP_TZINFO, MARIADB_MYSQL_LOCALHOST_USER(/_GRANTS),
#   the MYSQL_* aliases, the *_FILE variants, and /docker-entrypoint-initdb.d/.
# Command line: `mariadbd [args]` (default), `--opt ...` (mariadbd is
# prepended), anything else is exec'd unchanged.
#
# Baked start: the image carries a datadir installed at build time
# (/var/lib/mysql-baked.tar; root@localhost only, no password). With an empty
# datadir and no init scripts it is unpacked and the final server started at
# once; root and the users are set up over the unix socket right after, by the
# same statements the official path runs against its temporary server. Until
# then only the socket inside the container reaches root. The baked datadir
# already holds the zone tables (/var/lib/mysql-baked.tzinfo says so): they are
# not loaded again. Init scripts, an existing datadir or SANDBOXD_UNBAKED=1
# take the official path.
set -Eeo pipefail

log() { printf '%s [Note] [Entrypoint]: %s\n' "$(date -u '+%Y-%m-%d %H:%M:%S')" "$*"; }
warn() { printf '%s [Warn] [Entrypoint]: %s\n' "$(date -u '+%Y-%m-%d %H:%M:%S')" "$*" >&2; }
die() { printf '%s [ERROR] [Entrypoint]: %s\n' "$(date -u '+%Y-%m-%d %H:%M:%S')" "$*" >&2; exit 1; }

# file_env VAR [DEFAULT]
file_env() {
	local var="$1" def="${2:-}" fileVar="${1}_FILE" val
	if [ -n "${!var:-}" ] && [ -n "${!fileVar:-}" ]; then
		die "Both $var and $fileVar are set (but are exclusive)"
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

# MARIADB_x falls back to MYSQL_x; afterwards both hold the same value.
maria_env() {
	local var="$1" def="${2:-}" maria="MARIADB_${1#MYSQL_}"
	file_env "$var" "$def"
	file_env "$maria" "${!var}"
	if [ -n "${!maria:-}" ]; then
		export "$var"="${!maria}"
	fi
}

# Read datadir/socket/port the same way the server will (config files +
# command-line arguments).
read_server_config() {
	local out errfile
	errfile="$(mktemp)"
	if ! out="$("$@" --verbose --help 2>"$errfile")"; then
		die "mariadbd failed while attempting to check config: $* --verbose --help: $(cat "$errfile")"
	fi
	rm -f "$errfile"
	DATADIR="$(awk '$1 == "datadir" && /^[^ \t]/ { sub(/^[^ \t]+[ \t]+/, ""); print; exit }' <<<"$out")"
	SOCKET="$(awk '$1 == "socket" && /^[^ \t]/ { sub(/^[^ \t]+[ \t]+/, ""); print; exit }' <<<"$out")"
	PORT="$(awk '$1 == "port" && /^[^ \t]/ { sub(/^[^ \t]+[ \t]+/, ""); print; exit }' <<<"$out")"
	DATADIR="${DATADIR%/}"
	: "${DATADIR:=/var/lib/mysql}" "${SOCKET:=/run/mysqld/mysqld.sock}" "${PORT:=3306}"
}

setup_env() {
	read_server_config "$@"
	maria_env MYSQL_ROOT_HOST '%'
	maria_env MYSQL_DATABASE
	maria_env MYSQL_USER
	maria_env MYSQL_PASSWORD
	maria_env MYSQL_ROOT_PASSWORD
	file_env MARIADB_PASSWORD_HASH
	file_env MARIADB_ROOT_PASSWORD_HASH
	: "${MARIADB_ALLOW_EMPTY_ROOT_PASSWORD:=${MYSQL_ALLOW_EMPTY_PASSWORD:-}}"
	export MYSQL_ALLOW_EMPTY_PASSWORD="$MARIADB_ALLOW_EMPTY_ROOT_PASSWORD" MARIADB_ALLOW_EMPTY_ROOT_PASSWORD
	: "${MARIADB_RANDOM_ROOT_PASSWORD:=${MYSQL_RANDOM_ROOT_PASSWORD:-}}"
	export MYSQL_RANDOM_ROOT_PASSWORD="$MARIADB_RANDOM_ROOT_PASSWORD" MARIADB_RANDOM_ROOT_PASSWORD
	: "${MARIADB_INITDB_SKIP_TZINFO:=${MYSQL_INITDB_SKIP_TZINFO:-}}"
	export MYSQL_INITDB_SKIP_TZINFO="$MARIADB_INITDB_SKIP_TZINFO" MARIADB_INITDB_SKIP_TZINFO
	DATABASE_ALREADY_EXISTS=
	if [ -d "$DATADIR/mysql" ]; then
		DATABASE_ALREADY_EXISTS=true
	fi
}

# The datadir may be (a subdirectory of) a root-owned mode-1777 tmpfs.
create_db_directories() {
	mkdir -p "$DATADIR"
	if [ "$(id -u)" = 0 ]; then
		find "$DATADIR" \! -user mysql -exec chown mysql: '{}' +
		mkdir -p "${SOCKET%/*}"
		find "${SOCKET%/*}" -maxdepth 0 \! -user mysql -exec chown mysql: '{}' \;
		return 0
	fi
	local d
	for d in "$DATADIR" "${SOCKET%/*}"; do
		if [ ! -w "$d" ]; then
			die "$d is not writable by uid $(id -u) (it is $(stat -c '%U:%G mode %a' "$d")). Mount it with write access for the server user, e.g. --tmpfs $d:uid=999,gid=999 (or mode=1777 where the image directory is 1777), or start the container as root with CAP_CHOWN/SETUID/SETGID."
		fi
	done
}

verify_minimum_env() {
	if [ -z "$MARIADB_ROOT_PASSWORD" ] && [ -z "$MARIADB_ROOT_PASSWORD_HASH" ] &&
		[ -z "$MARIADB_ALLOW_EMPTY_ROOT_PASSWORD" ] && [ -z "$MARIADB_RANDOM_ROOT_PASSWORD" ]; then
		die $'Database is uninitialized and password option is not specified\n\tYou need to specify one of MARIADB_ROOT_PASSWORD, MARIADB_ROOT_PASSWORD_HASH, MARIADB_ALLOW_EMPTY_ROOT_PASSWORD and MARIADB_RANDOM_ROOT_PASSWORD'
	fi
	if [ -n "$MARIADB_ROOT_PASSWORD_HASH" ] && { [ -n "$MARIADB_ROOT_PASSWORD" ] || [ -n "$MARIADB_ALLOW_EMPTY_ROOT_PASSWORD" ] || [ -n "$MARIADB_RANDOM_ROOT_PASSWORD" ]; }; then
		die "Cannot specify MARIADB_ROOT_PASSWORD_HASH and another MARIADB_ROOT_PASSWORD* option."
	fi
	if [ -n "$MARIADB_PASSWORD" ] && [ -n "$MARIADB_PASSWORD_HASH" ]; then
		die "Cannot specify MARIADB_PASSWORD_HASH and MARIADB_PASSWORD option."
	fi
}

# mariadb-install-db; root gets no password and no network access at this
# point: it is only reachable through the unix socket of the temporary server.
init_database_dir() {
	log "Initializing database files"
	local -a serverArgs=()
	local arg out
	for arg in "${@:2}"; do
		if [[ "$arg" =~ [[:space:]] ]]; then
			warn "Not passing argument '$arg' to mariadb-install-db (it does not support whitespace)."
		else
			serverArgs+=("$arg")
		fi
	done
	if ! out="$(mariadb-install-db --datadir="$DATADIR" --rpm --auth-root-authentication-method=normal \
		"${serverArgs[@]}" \
		--skip-test-db --old-mode='UTF8_IS_UTF8MB3' --default-time-zone=SYSTEM --enforce-storage-engine= \
		--skip-log-bin --expire-logs-days=0 \
		--loose-innodb_buffer_pool_load_at_startup=0 --loose-innodb_buffer_pool_dump_at_shutdown=0 2>&1)"; then
		printf '%s\n' "$out" >&2
		die "mariadb-install-db failed"
	fi
	log "Database files initialized"
}

exec_client() {
	if [ -n "$MARIADB_DATABASE" ]; then
		set -- --database="$MARIADB_DATABASE" "$@"
	fi
	mariadb --protocol=socket -uroot -hlocalhost --socket="$SOCKET" "$@"
}

# process_sql [--dont-use-mysql-root-password] [client args] <sql
process_sql() {
	if [ "$1" = --dont-use-mysql-root-password ]; then
		shift
		MYSQL_PWD='' exec_client "$@"
	else
		MYSQL_PWD="$MARIADB_ROOT_PASSWORD" exec_client "$@"
	fi
}

# Temporary server: --skip-networking, i.e. unix socket only.
temp_server_start() {
	"$@" --skip-networking --default-time-zone=SYSTEM --socket="$SOCKET" --wsrep_on=OFF \
		--expire-logs-days=0 --loose-innodb_buffer_pool_load_at_startup=0 &
	MARIADB_PID=$!
	log "Waiting for temporary server startup"
	local i
	for ((i = 0; i < 600; i++)); do
		if MYSQL_PWD='' exec_client --database=mysql -e 'SELECT 1' >/dev/null 2>&1; then
			return 0
		fi
		if ! kill -0 "$MARIADB_PID" 2>/dev/null; then
			wait "$MARIADB_PID" || :
			die "Unable to start temporary server."
		fi
		sleep 0.1
	done
	die "Unable to start temporary server (timeout)."
}

temp_server_stop() {
	kill "$MARIADB_PID"
	wait "$MARIADB_PID"
}

# SQL-escape $1 for use inside a '...' string literal.
sql_escape() {
	local s="${1//\\/\\\\}"
	s="${s//$'\n'/\\n}"
	printf '%s' "${s//\'/\\\'}"
}

random_password() {
	local p
	p="$(head -c 1024 /dev/urandom | LC_ALL=C tr -dc 'A-Za-z0-9!@%^*()_+.,:;=-')"
	printf '%s' "${p:0:32}"
}

setup_db() {
	if [ -z "$MARIADB_INITDB_SKIP_TZINFO" ] && command -v mariadb-tzinfo-to-sql >/dev/null && [ -d /usr/share/zoneinfo ]; then
		mariadb-tzinfo-to-sql --skip-write-binlog /usr/share/zoneinfo 2>/dev/null |
			process_sql --dont-use-mysql-root-password --database=mysql
	fi
	if [ -n "$MARIADB_RANDOM_ROOT_PASSWORD" ]; then
		MARIADB_ROOT_PASSWORD="$(random_password)"
		export MARIADB_ROOT_PASSWORD MYSQL_ROOT_PASSWORD="$MARIADB_ROOT_PASSWORD"
		log "GENERATED ROOT PASSWORD: $MARIADB_ROOT_PASSWORD"
	fi

	local rootPw rootHost rootCreate='' rootLocalhost='' localhostUser='' createDb='' createUser='' userGrants=''
	rootPw="$(sql_escape "$MARIADB_ROOT_PASSWORD")"
	rootHost="$(sql_escape "$MARIADB_ROOT_HOST")"
	if [ -n "$MARIADB_ROOT_HOST" ] && [ "$MARIADB_ROOT_HOST" != localhost ]; then
		if [ -n "$MARIADB_ROOT_PASSWORD_HASH" ]; then
			rootCreate="CREATE USER 'root'@'${rootHost}' IDENTIFIED BY PASSWORD '$(sql_escape "$MARIADB_ROOT_PASSWORD_HASH")';"
		else
			rootCreate="CREATE USER 'root'@'${rootHost}' IDENTIFIED BY '${rootPw}';"
		fi
		rootCreate+=" GRANT ALL ON *.* TO 'root'@'${rootHost}' WITH GRANT OPTION;"
		rootCreate+=" GRANT PROXY ON ''@'%' TO 'root'@'${rootHost}' WITH GRANT OPTION;"
	fi
	if [ -z "$MARIADB_ROOT_PASSWORD_HASH" ]; then
		rootLocalhost="SET PASSWORD FOR 'root'@'localhost' = PASSWORD('${rootPw}');"
	fi
	if [ -n "${MARIADB_MYSQL_LOCALHOST_USER:-}" ]; then
		localhostUser="CREATE USER mysql@localhost IDENTIFIED VIA unix_socket;"
		if [ -n "${MARIADB_MYSQL_LOCALHOST_GRANTS:-}" ]; then
			localhostUser+=" GRANT ${MARIADB_MYSQL_LOCALHOST_GRANTS} ON *.* TO mysql@localhost;"
		fi
	fi
	if [ -n "$MARIADB_DATABASE" ]; then
		log "Creating database ${MARIADB_DATABASE}"
		createDb="CREATE DATABASE IF NOT EXISTS \`${MARIADB_DATABASE//\`/\`\`}\`;"
	fi
	if [ -n "$MARIADB_USER" ] && { [ -n "$MARIADB_PASSWORD" ] || [ -n "$MARIADB_PASSWORD_HASH" ]; }; then
		local user
		user="$(sql_escape "$MARIADB_USER")"
		log "Creating user ${MARIADB_USER}"
		if [ -n "$MARIADB_PASSWORD_HASH" ]; then
			createUser="CREATE USER '${user}'@'%' IDENTIFIED BY PASSWORD '$(sql_escape "$MARIADB_PASSWORD_HASH")';"
		else
			createUser="CREATE USER '${user}'@'%' IDENTIFIED BY '$(sql_escape "$MARIADB_PASSWORD")';"
		fi
		if [ -n "$MARIADB_DATABASE" ]; then
			# In GRANT, '_' and '%' in a database name are wildcards: escape '_'.
			local grantDb="${MARIADB_DATABASE//\`/\`\`}"
			grantDb="${grantDb//_/\\_}"
			log "Giving user ${MARIADB_USER} access to schema ${MARIADB_DATABASE}"
			userGrants="GRANT ALL ON \`${grantDb}\`.* TO '${user}'@'%';"
		fi
	elif [ -n "$MARIADB_USER" ]; then
		warn "MARIADB_USER is set but MARIADB_PASSWORD is not: user not created"
	fi

	log "Securing system users (equivalent to running mysql_secure_installation)"
	process_sql --dont-use-mysql-root-password --database=mysql --binary-mode <<-EOSQL
		SET @orig_sql_log_bin= @@SESSION.SQL_LOG_BIN;
		SET @@SESSION.SQL_LOG_BIN=0;
		SET @@SESSION.SQL_MODE=REPLACE(@@SESSION.SQL_MODE, 'NO_BACKSLASH_ESCAPES', '');
		DROP USER IF EXISTS root@'127.0.0.1', root@'::1';
		EXECUTE IMMEDIATE CONCAT('DROP USER IF EXISTS root@\'', @@hostname, '\'');
		${rootLocalhost}
		${rootCreate}
		${localhostUser}
		SET @@SESSION.SQL_LOG_BIN=@orig_sql_log_bin;
		${createDb}
		${createUser}
		${userGrants}
	EOSQL
}

process_init_files() {
	local f
	for f; do
		case "$f" in
			*.sh)
				# shellcheck disable=SC1090
				if [ -x "$f" ]; then log "running $f"; "$f"; else log "sourcing $f"; . "$f"; fi ;;
			*.sql) log "running $f"; process_sql <"$f" ;;
			*.sql.gz) log "running $f"; gunzip -c "$f" | process_sql ;;
			*.sql.xz) log "running $f"; xzcat "$f" | process_sql ;;
			*.sql.zst) log "running $f"; zstd -dc "$f" | process_sql ;;
			*) warn "ignoring $f" ;;
		esac
	done
}

BAKED=/var/lib/mysql-baked.tar
BAKED_TZINFO=/var/lib/mysql-baked.tzinfo

# Whether this start can use the baked datadir (see the header).
can_use_baked() {
	[ -z "$DATABASE_ALREADY_EXISTS" ] && [ -s "$BAKED" ] && [ -z "${SANDBOXD_UNBAKED:-}" ] || return 1
	shopt -s nullglob
	local -a initFiles=(/docker-entrypoint-initdb.d/*)
	shopt -u nullglob
	[ ${#initFiles[@]} -eq 0 ]
}

# Unpacks the baked datadir, starts the server, sets root and the users up over
# the socket once it answers, and stays its parent: stop signals are passed on,
# its exit status is this script's.
start_baked() {
	log "Starting from the baked datadir (no mariadb-install-db)"
	tar -C "$DATADIR" --no-same-owner -xf "$BAKED"
	if [ -e "$BAKED_TZINFO" ]; then
		MARIADB_INITDB_SKIP_TZINFO=1
	fi
	"$@" &
	MARIADB_PID=$!
	local i status
	trap 'kill -TERM "$MARIADB_PID" 2>/dev/null' TERM INT QUIT
	for ((i = 0; i < 3000; i++)); do
		kill -0 "$MARIADB_PID" 2>/dev/null || break
		MYSQL_PWD='' exec_client --database=mysql -e 'SELECT 1' >/dev/null 2>&1 && break
		sleep 0.01
	done
	if kill -0 "$MARIADB_PID" 2>/dev/null && drop_build_host_root && setup_db && set_root_password_hash; then
		log "MariaDB started from the baked datadir; users set up."
	else
		warn "Setting up the baked datadir failed; stopping the server"
		kill -TERM "$MARIADB_PID" 2>/dev/null
	fi
	while :; do
		status=0
		wait "$MARIADB_PID" || status=$?
		kill -0 "$MARIADB_PID" 2>/dev/null || exit "$status"
	done
}

# The install at build time made root@<build host>; the official path drops
# root@<this container> instead. Every root but root@localhost goes, before
# setup_db makes root@MARIADB_ROOT_HOST.
drop_build_host_root() {
	process_sql --dont-use-mysql-root-password --database=mysql <<-'EOSQL'
		DELIMITER //
		BEGIN NOT ATOMIC
			FOR u IN (SELECT Host FROM mysql.global_priv WHERE User = 'root' AND Host <> 'localhost') DO
				EXECUTE IMMEDIATE CONCAT('DROP USER root@', QUOTE(u.Host));
			END FOR;
		END//
		DELIMITER ;
	EOSQL
}

# With MARIADB_ROOT_PASSWORD_HASH, root@localhost gets the hash last (the
# statements before it log in without a password).
set_root_password_hash() {
	[ -n "$MARIADB_ROOT_PASSWORD_HASH" ] || return 0
	log "Setting root@localhost password hash"
	process_sql --dont-use-mysql-root-password --binary-mode <<-EOSQL
		SET @@SESSION.SQL_LOG_BIN=0;
		SET PASSWORD FOR 'root'@'localhost' = '$(sql_escape "$MARIADB_ROOT_PASSWORD_HASH")';
	EOSQL
}

want_help() {
	local arg
	for arg; do
		case "$arg" in
			-'?' | --help | --print-defaults | -V | --version) return 0 ;;
		esac
	done
	return 1
}

main() {
	if [ "${1:0:1}" = '-' ]; then
		set -- mariadbd "$@"
	fi

	if { [ "$1" = mariadbd ] || [ "$1" = mysqld ]; } && ! want_help "$@"; then
		log "Entrypoint script for MariaDB Server ${MARIADB_VERSION:-} started."
		setup_env "$@"
		create_db_directories
		if [ "$(id -u)" = 0 ]; then
			log "Switching to dedicated user 'mysql'"
			exec setpriv --reuid=mysql --regid=mysql --init-groups "${BASH_SOURCE[0]}" "$@"
		fi

		if can_use_baked; then
			verify_minimum_env
			start_baked "$@"
		elif [ -z "$DATABASE_ALREADY_EXISTS" ]; then
			verify_minimum_env
			shopt -s nullglob
			local -a initFiles=(/docker-entrypoint-initdb.d/*)
			shopt -u nullglob
			init_database_dir "$@"
			log "Starting temporary server"
			temp_server_start "$@"
			log "Temporary server started."
			setup_db
			process_init_files "${initFiles[@]}"
			set_root_password_hash
			log "Stopping temporary server"
			temp_server_stop
			log "Temporary server stopped"
			log "MariaDB init process done. Ready for start up."
		fi
	fi

	exec "$@"
}

main "$@"
