#!/usr/bin/env bash
# Podman's Docker-compatible API service, for running the Docker backend's tests against Podman.
# Everything is sandboxd's own: a store under $SANDBOXD_PODMAN_STATE (kept between runs, so the
# loaded images are reused), a run root, socket and network configs of its own, so the host's
# Podman setup (if any) is neither used nor changed.
#
#   scripts/podman.sh up      start the service (once) and load the local images into its store
#   scripts/podman.sh down    remove what is left in its store, stop the service, unmount
#   scripts/podman.sh socket  print the socket's URL (unix://…)
#
# Needs Debian's podman and containernetworking-plugins (scripts/install-deps.sh installs them), and
# the sandboxd-local/* images in Docker (scripts/build-images.sh): Podman gets them through
# `docker save | podman load`, skipped when its copy has the same image id.
set -euo pipefail

STATE=${SANDBOXD_PODMAN_STATE:-/var/cache/sandboxd-podman}
RUN=${SANDBOXD_PODMAN_RUN:-/run/sandboxd-podman}
SOCK=$RUN/podman.sock
PIDFILE=$RUN/service.pid
IMAGES=(sandboxd-local/postgres:17 sandboxd-local/postgres:18 sandboxd-local/redis:8 sandboxd-local/mariadb:11 sandboxd-local/never-ready:1)

say() { printf '[podman] %s\n' "$*"; }
die() { printf '[podman] ERROR: %s\n' "$*" >&2; exit 1; }

export CONTAINERS_CONF=$STATE/containers.conf
pm() { podman --root "$STATE/storage" --runroot "$RUN/runroot" "$@"; }

write_conf() {
  mkdir -p "$STATE/networks" "$RUN/tmp"
  # CNI, not netavark: sandboxd keeps Podman's tenants apart with a network per container and
  # relies on Podman isolating networks from each other. Debian's netavark 1.4.0 drops that
  # isolation for every network as soon as any one network is torn down (its teardown deletes
  # the shared FORWARD jump); the CNI firewall plugin's `ingressPolicy: same-bridge` keeps it.
  # cgroupfs and file logs: no systemd here.
  cat >"$CONTAINERS_CONF" <<EOF
[containers]
log_driver = "k8s-file"

[network]
network_backend = "cni"
network_config_dir = "$STATE/networks"
cni_plugin_dirs = ["/usr/lib/cni"]

[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "$RUN/events.log"
tmp_dir = "$RUN/tmp"
EOF
}

answers() { curl -sf --max-time 2 --unix-socket "$SOCK" http://podman/_ping >/dev/null 2>&1; }

running_pid() {
  local pid
  pid=$(cat "$PIDFILE" 2>/dev/null) || return 1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

# The service's process group, by the OS call (never by name, never `kill -- -PID`).
signal_group() {
  python3 -c 'import os, signal, sys; os.killpg(int(sys.argv[1]), getattr(signal, sys.argv[2]))' "$1" "$2" 2>/dev/null
}

load_images() {
  local image want have
  for image in "${IMAGES[@]}"; do
    want=$(docker image inspect -f '{{.Id}}' "$image" 2>/dev/null) || die "image $image is not in Docker: run scripts/build-images.sh"
    have=$(pm image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)
    if [ "sha256:${have#sha256:}" = "$want" ]; then
      continue
    fi
    say "loading $image into Podman's store"
    docker save "$image" | pm load -q >/dev/null
  done
}

up() {
  command -v podman >/dev/null || die "podman is not installed (scripts/install-deps.sh)"
  [ -x /usr/lib/cni/firewall ] || die "the CNI plugins are not installed (scripts/install-deps.sh)"
  write_conf
  if running_pid >/dev/null && answers; then
    say "service already running (pid $(running_pid))"
  else
    rm -f "$SOCK"
    # setsid: the service leads a process group of its own, which `down` signals.
    setsid podman --root "$STATE/storage" --runroot "$RUN/runroot" \
      system service --time=0 "unix://$SOCK" >"$RUN/service.log" 2>&1 &
    echo $! >"$PIDFILE"
    for _ in $(seq 1 100); do
      answers && break
      running_pid >/dev/null || die "the service exited: $(tail -n 5 "$RUN/service.log")"
      sleep 0.1
    done
    answers || die "the service does not answer on $SOCK: $(tail -n 5 "$RUN/service.log")"
    say "$(podman --version) service on unix://$SOCK (pid $(running_pid))"
  fi
  load_images
}

down() {
  [ -f "$CONTAINERS_CONF" ] || { say "nothing to stop"; return 0; }
  # The store is sandboxd's own: whatever a test left is removed (check-leaks has counted it).
  if pm ps -aq 2>/dev/null | grep -q .; then
    pm rm -af -t 0 >/dev/null 2>&1 || true
  fi
  local networks
  networks=$(pm network ls -q --filter label=sandboxd.sandbox-network=1 2>/dev/null || true)
  [ -z "$networks" ] || pm network rm -f $networks >/dev/null 2>&1 || true
  local pid
  if pid=$(running_pid); then
    signal_group "$pid" SIGTERM || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && signal_group "$pid" SIGKILL || true
    say "service stopped"
  fi
  # Exec sessions' conmon monitors outlive their container by design (`--exit-delay 300`, so an
  # exit code can still be read): ours name our store on their command line, and go with it.
  python3 - "$STATE/storage" <<'PY'
import os, signal, sys, time
store = sys.argv[1].encode()
def ours():
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        if args and args[0].endswith(b"conmon") and store in args:
            yield int(pid)
found = list(ours())
for pid in found:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
def alive(pid):
    # A monitor that has exited stays a zombie until init reaps it: gone means no /proc entry.
    return os.path.exists(f"/proc/{pid}")
for _ in range(100):
    if not any(alive(pid) for pid in found):
        break
    time.sleep(0.1)
left = [pid for pid in found if alive(pid)] + [pid for pid in ours() if pid not in found]
if found:
    print(f"[podman] stopped {len(found) - len(left)} lingering conmon monitor(s) of our store")
if left:
    sys.exit(f"[podman] ERROR: conmon monitors still running: {left}")
PY
  # CNI bridges with nothing attached (Podman's default network's `cni-podman0`, made when a
  # container joined no named network) go too; one in use by anyone is left alone.
  for link in $(ip -o link show type bridge 2>/dev/null | awk -F': ' '{print $2}' | grep '^cni-podman' || true); do
    if [ -z "$(ls "/sys/class/net/$link/brif" 2>/dev/null)" ]; then
      ip link delete "$link" 2>/dev/null || true
    fi
  done
  # The overlay driver mounts its own directory privately, and the run root holds a tmpfs-like
  # state: unmount what is under our directories, deepest first.
  awk -v s="$STATE/" -v r="$RUN/" 'index($2, s) == 1 || index($2, r) == 1 {print $2}' /proc/mounts \
    | sort -r | while read -r mnt; do umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true; done
  rm -rf "$RUN"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  socket) echo "unix://$SOCK" ;;
  *) die "usage: scripts/podman.sh up|down|socket" ;;
esac
