#!/usr/bin/env bash
# Fails when tests left anything behind: labeled containers, networks or volumes, instance
# processes of test owners or of the instance account pool, test instance directories, sandboxd's
# tmpfs mounts, cgroups or uid leases, and on the test cluster (when it is up) test namespaces
# or sandboxd's objects.
#
# `--record FILE` writes everything of those kinds present now (before a run) and exits;
# `--since FILE` then leaves it out: what a run found already there is not its leak — the live
# sandboxes of a sandboxd in use on the machine (its instance processes, mounts, cgroups, uid
# leases, containers), or a stale engine record (Docker can keep a removed container's endpoint
# counted on its network, which then cannot be removed until the engine restarts). They are
# named, not counted. A process is there before when it, or a process it descends from, was
# recorded (by pid and start time, so a reused pid is not taken for it): an instance's server
# forks workers and connections while it runs.
set -uo pipefail

say() { printf '[check-leaks] %s\n' "$*"; }
leaks=0
mode=check
baseline=/dev/null
case "${1:-}" in
  --record) mode=record; baseline=$2; : >"$baseline" ;;
  --since) baseline=$2 ;;
esac

# The recorded items of one kind, one a line.
recorded() { awk -v kind="$1" 'index($0, kind "\t") == 1 { print substr($0, length(kind) + 2) }' "$baseline"; }

# check KIND WHAT TRIES COMMAND…: COMMAND prints the items of KIND present now, one a line.
# Recording writes them down; checking names those recorded and fails on the rest, asking up to
# TRIES times, half a second apart (what a test stopped may take a moment to go).
check() {
  local kind=$1 what=$2 tries=$3 found new before
  shift 3
  if [ $mode = record ]; then
    "$@" | grep . | sed "s/^/$kind\t/" >>"$baseline"
    return
  fi
  for ((try = 1; try <= tries; try++)); do
    found=$("$@" | grep . || true)
    new=$(printf '%s\n' "$found" | grep . | grep -vFxf <(recorded "$kind") || true)
    [ -z "$new" ] && break
    [ $try -lt "$tries" ] && sleep 0.5
  done
  before=$(printf '%s\n' "$found" | grep . | grep -Fxf <(recorded "$kind") || true)
  if [ -n "$before" ]; then
    say "note: $(printf '%s\n' "$before" | grep -c .) $what were there before this run (not counted):"
    printf '%s\n' "$before" | sed 's/^/  /'
  fi
  if [ -n "$new" ]; then say "LEAK: $what:"; printf '%s\n' "$new"; leaks=1; fi
}

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

# Every process as "pid ppid start" (start: clock ticks since boot, /proc/<pid>/stat field 22).
processes() {
  local stat line fields
  for stat in /proc/[0-9]*/stat; do
    { read -r line <"$stat"; } 2>/dev/null || continue
    read -ra fields <<<"${line##*) }"
    echo "${line%% *} ${fields[1]} ${fields[19]}"
  done
}

# The processes that sandboxd's instances or the tests run: "user pid args".
# (The test roots' pattern reaches awk through its environment: on its command line, awk would
# match itself.)
suspects() {
  ps -eo user:32=,pid=,args= | TEST_ROOTS='sandboxd-test-|sandboxd-admin-test-|sandboxd-browser-' awk \
    '$1 == "sandboxd" || $1 ~ /^sandboxd-i[0-9]+$/ || $0 ~ ENVIRON["TEST_ROOTS"] { $1 = $1; print }'
}

# Recorded: "pid start" of every suspect. Checked: the suspects that neither were recorded nor
# descend from one that was.
suspect_processes() {
  local table
  table=$(processes)
  if [ $mode = record ]; then
    suspects | awk 'NR == FNR { start[$1] = $3; next } ($2 in start) { print $2, start[$2] }' \
      <(printf '%s\n' "$table") - | sed 's/^/process\t/' >>"$baseline"
    return
  fi
  suspects | awk '
    FILENAME == ARGV[1] { was[$1 " " $2] = 1; next }
    FILENAME == ARGV[2] { parent[$1] = $2; start[$1] = $3; next }
    {
      pid = $2; old = 0
      for (hops = 0; pid != "" && pid > 1 && hops < 64; hops++) {
        if ((pid " " start[pid]) in was) { old = 1; break }
        pid = parent[pid]
      }
      print (old ? "before" : "new") "\t" $0
    }' <(recorded process) <(printf '%s\n' "$table") -
}

new_processes() { suspect_processes | awk -F'\t' '$1 == "new" { print $2 }'; }

if [ $mode = record ]; then
  suspect_processes
else
  for try in $(seq 1 10); do
    procs=$(new_processes)
    [ -z "$procs" ] && break
    sleep 0.5
  done
  before=$(suspect_processes | awk -F'\t' '$1 == "before" { print $2 }')
  if [ -n "$before" ]; then
    say "note: $(printf '%s\n' "$before" | grep -c .) instance or test processes were there before this run (not counted):"
    printf '%s\n' "$before" | sed 's/^/  /'
  fi
  # Instance processes run as the sandboxd user (when tests run as root) or one of the
  # per-instance accounts (sandboxd-i000…), or mention a test root or browser profile.
  if [ -n "$procs" ]; then say "LEAK: instance or test processes:"; printf '%s\n' "$procs"; leaks=1; fi
fi

if docker info >/dev/null 2>&1; then
  for kind in container network volume; do
    check "$kind" "sandboxd-labeled ${kind}s" 1 labeled "$kind"
  done
  if [ $mode = check ]; then
    n=$(docker volume ls -q --filter dangling=true | grep -c . || true)
    [ "$n" -gt 0 ] && say "note: $n dangling anonymous volume(s) exist (not necessarily ours)"
  fi
fi

# Size-capped instance mounts (source sandboxd-instance), cgroups under sandboxd/, uid leases.
mounts() { awk '$1 == "sandboxd-instance" {print $2}' /proc/mounts; }
check mount "instance mounts" 1 mounts
cgroups() {
  find /sys/fs/cgroup/memory/sandboxd /sys/fs/cgroup/pids/sandboxd /sys/fs/cgroup/sandboxd \
    -mindepth 1 -maxdepth 1 -type d 2>/dev/null
}
check cgroup "instance cgroups" 1 cgroups
leases() { find /run/sandboxd/uid-leases -mindepth 1 -maxdepth 1 -type f ! -name .lock 2>/dev/null; }
check lease "uid leases" 1 leases

test_dirs() {
  find /dev/shm /tmp -maxdepth 1 \( -name 'sandboxd-test-*' -o -name 'sandboxd-admin-test-*' \
    -o -name 'sandboxd-browser-*' -o -name 'sst-*' \) 2>/dev/null
}
check directory "test directories" 1 test_dirs

# The test cluster (scripts/k8s-cluster.sh), when it is up: no test namespace, and no Pod,
# Secret, ConfigMap, NetworkPolicy or Service of sandboxd in any namespace.
k8s=$(dirname "$0")/k8s-cluster.sh
if "$k8s" status >/dev/null 2>&1; then
  test_namespaces() { "$k8s" kubectl get namespaces -o name 2>/dev/null | grep '^namespace/sbx-test-'; }
  check namespace "test namespaces" 120 test_namespaces
  cluster_objects() {
    "$k8s" kubectl get pods,secrets,configmaps,networkpolicies,services --all-namespaces \
      -l sandboxd.dev/sandbox=1 -o name 2>/dev/null
  }
  check cluster-object "sandboxd objects on the cluster" 1 cluster_objects
fi

[ $mode = record ] && exit 0
if [ $leaks -eq 0 ]; then say "nothing left behind"; fi
exit $leaks
