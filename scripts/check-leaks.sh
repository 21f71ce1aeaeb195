#!/usr/bin/env bash
# Fails when tests left anything behind: labeled containers, networks or volumes, instance
# processes of test owners or of the instance account pool, test instance directories, sandboxd's
# tmpfs mounts, cgroups or uid leases, and on the test cluster (when it is up) test namespaces
# or sandboxd's objects.
set -uo pipefail

#
# `--record FILE` writes the labeled Docker objects present now (before a run) and exits;
# `--since FILE` then leaves those out: what a run found already there is not its leak (a stale
# engine record, say: Docker can keep a removed container's endpoint counted on its network,
# which then cannot be removed until the engine restarts). They are named, not hidden.

say() { printf '[check-leaks] %s\n' "$*"; }
leaks=0

labeled() {
  case $1 in
    # Instances carry sandboxd.sandbox=1; a tool's throwaway container (pg_dump) sandboxd.tool.
    container) (docker ps -aq --no-trunc --filter label=sandboxd.sandbox=1;
                docker ps -aq --no-trunc --filter label=sandboxd.tool) | sort -u ;;
    # Daemon networks carry sandboxd.sandbox-network=1 (containers carry sandboxd.sandbox=1).
    network) (docker network ls -q --no-trunc --filter label=sandboxd.sandbox=1;
              docker network ls -q --no-trunc --filter label=sandboxd.sandbox-network=1) | sort -u ;;
    volume) docker volume ls -q --filter label=sandboxd.sandbox=1 ;;
  esac
}

if [ "${1:-}" = --record ]; then
  : >"$2"
  if docker info >/dev/null 2>&1; then
    for kind in container network volume; do labeled $kind >>"$2"; done
  fi
  exit 0
fi
baseline=/dev/null
[ "${1:-}" = --since ] && baseline=$2

if docker info >/dev/null 2>&1; then
  for kind in container network volume; do
    before=$(labeled $kind | grep -Fxf "$baseline" || true)
    if [ -n "$before" ]; then
      say "note: $(printf '%s\n' "$before" | grep -c .) labeled ${kind}(s) were there before this run (not counted): $(printf '%s ' $before)"
    fi
    ids=$(labeled $kind | grep -vFxf "$baseline" || true)
    n=$(printf '%s' "$ids" | grep -c . || true)
    if [ "$n" -gt 0 ]; then
      say "LEAK: $n sandboxd-labeled ${kind}(s)"; leaks=1
      [ $kind = container ] && docker ps -a --filter label=sandboxd.sandbox=1
      [ $kind = network ] && docker network ls --filter label=sandboxd.sandbox-network=1
    fi
  done
  n=$(docker volume ls -q --filter dangling=true | grep -c . || true)
  [ "$n" -gt 0 ] && say "note: $n dangling anonymous volume(s) exist (not necessarily ours)"
fi

# Instance processes run as the sandboxd user (when tests run as root) or mention a test root.
if id sandboxd >/dev/null 2>&1; then
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    procs=$(pgrep -u sandboxd -a || true)
    [ -z "$procs" ] && break
    sleep 0.5
  done
  if [ -n "$procs" ]; then say "LEAK: processes of user sandboxd:"; printf '%s\n' "$procs"; leaks=1; fi
fi
# Processes of the per-instance accounts (sandboxd-i000…).
for _ in 1 2 3 4 5 6 7 8 9 10; do
  procs=$(ps -eo user:32=,pid=,args= | awk '$1 ~ /^sandboxd-i[0-9]+$/' || true)
  [ -z "$procs" ] && break
  sleep 0.5
done
if [ -n "$procs" ]; then say "LEAK: processes of instance accounts:"; printf '%s\n' "$procs"; leaks=1; fi

# Size-capped instance mounts (source sandboxd-instance), cgroups under sandboxd/, uid leases.
mounts=$(awk '$1 == "sandboxd-instance" {print $2}' /proc/mounts)
if [ -n "$mounts" ]; then say "LEAK: instance mounts:"; printf '%s\n' "$mounts"; leaks=1; fi
groups=$(find /sys/fs/cgroup/memory/sandboxd /sys/fs/cgroup/pids/sandboxd /sys/fs/cgroup/sandboxd \
  -mindepth 1 -maxdepth 1 -type d 2>/dev/null || true)
if [ -n "$groups" ]; then say "LEAK: instance cgroups:"; printf '%s\n' "$groups"; leaks=1; fi
leases=$(find /run/sandboxd/uid-leases -mindepth 1 -maxdepth 1 -type f ! -name .lock 2>/dev/null || true)
if [ -n "$leases" ]; then say "LEAK: uid leases:"; printf '%s\n' "$leases"; leaks=1; fi

procs=$(pgrep -af 'sandboxd-test-|sandboxd-admin-test-|sandboxd-browser-' | grep -v pgrep || true)
if [ -n "$procs" ]; then say "LEAK: processes under a test root or browser profile:"; printf '%s\n' "$procs"; leaks=1; fi

dirs=$(find /dev/shm /tmp -maxdepth 1 \( -name 'sandboxd-test-*' -o -name 'sandboxd-admin-test-*' \
  -o -name 'sandboxd-browser-*' -o -name 'sst-*' \) 2>/dev/null || true)
if [ -n "$dirs" ]; then say "LEAK: test directories:"; printf '%s\n' "$dirs"; leaks=1; fi

# The test cluster (scripts/k8s-cluster.sh), when it is up: no test namespace, and no Pod,
# Secret, ConfigMap, NetworkPolicy or Service of sandboxd in any namespace.
k8s=$(dirname "$0")/k8s-cluster.sh
if "$k8s" status >/dev/null 2>&1; then
  for _ in $(seq 1 60); do
    namespaces=$("$k8s" kubectl get namespaces -o name 2>/dev/null | grep '^namespace/sbx-test-' || true)
    [ -z "$namespaces" ] && break
    sleep 1
  done
  if [ -n "$namespaces" ]; then say "LEAK: test namespaces:"; printf '%s\n' "$namespaces"; leaks=1; fi
  objects=$("$k8s" kubectl get pods,secrets,configmaps,networkpolicies,services --all-namespaces \
    -l sandboxd.dev/sandbox=1 -o name 2>/dev/null || true)
  if [ -n "$objects" ]; then say "LEAK: sandboxd objects on the cluster:"; printf '%s\n' "$objects"; leaks=1; fi
fi

if [ $leaks -eq 0 ]; then say "nothing left behind"; fi
exit $leaks
