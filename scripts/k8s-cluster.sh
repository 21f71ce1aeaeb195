#!/usr/bin/env bash
# A real single-node Kubernetes cluster on this Debian bookworm machine, for the Kubernetes
# backend's tests (SPEC §7, issue 11). No Kubernetes binary can be downloaded here, so `up` builds
# one from Debian's *source* package `kubernetes` (1.20.2, with vendor/) using Debian's golang-go,
# and runs Debian's etcd-server. Everything listens on loopback, the kubelet on the Docker bridge
# address, and Pods run as containers on the local Docker Engine through the kubelet's built-in
# dockershim, from local images only (Pods use `imagePullPolicy: Never`).
#
#   scripts/k8s-cluster.sh up          build or reuse the binaries, start etcd, kube-apiserver,
#                                      kube-controller-manager, kube-scheduler and a kubelet; wait
#                                      for the node to be Ready and a smoke Pod to run; idempotent
#   scripts/k8s-cluster.sh down        stop all of it and leave the machine as `up` found it
#   scripts/k8s-cluster.sh kubeconfig  print the admin kubeconfig's path (fails when down)
#   scripts/k8s-cluster.sh status      up / down / partial (exit 0 / 3 / 1)
#   scripts/k8s-cluster.sh kubectl ARGS...  the built kubectl against the cluster
#
# Where things live:
#   /var/cache/sandboxd-k8s   kept across runs: private apt state for the deb-src entry, the
#                             source package, the build tree (with Go's build cache), and the
#                             binaries under bin/<source version>-<hash of patch and recipe>/
#   /run/sandboxd-k8s         this cluster: PKI, kubeconfigs, pid files, logs/<component>.log
#   /var/lib/sandboxd-k8s     this cluster: etcd data, kubelet root dir, dockershim checkpoints
# `down` removes the last two (mounts below them first), every container the kubelet made (k8s_*,
# with their anonymous volumes), the kubepods cgroups, /var/log/pods, /var/log/containers and the
# other HOST_PATHS below (when `up` found them absent), and restores the sysctls the kubelet
# rewrites. It stops only processes it started (pid file + start time, by process group).
# The pause image sandboxd-local/pause:3.2 (a static build of the tree's pause.c) stays, like the
# cache. The kubelet carries one patch, scripts/k8s/kubelet-oom.patch (no negative oom_score_adj:
# these machines' capability bounding set lacks CAP_SYS_RESOURCE).
# The kubelet is told to keep its hands off the host: no iptables chains, no image garbage
# collection nor eviction (it would delete the project's local images), no device plugins (their
# socket dir is fixed at /var/lib/kubelet), no hairpin changes, oom_score_adj 0.
# Measured on 2 cores: the cold build ~14 min, a warm `up` ~25 s, `down` ~3 s.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PATCH_FILE=$SCRIPT_DIR/k8s/kubelet-oom.patch

CACHE=${SANDBOXD_K8S_CACHE:-/var/cache/sandboxd-k8s}
RUN=/run/sandboxd-k8s
STATE=/var/lib/sandboxd-k8s
LOGS=$RUN/logs
PKI=$RUN/pki
PIDS=$RUN/pids
NODE_NAME=${SANDBOXD_K8S_NODE_NAME:-sandboxd-node}
PAUSE_IMAGE=${SANDBOXD_K8S_PAUSE_IMAGE:-sandboxd-local/pause:3.2}
APISERVER_PORT=6443
ETCD_CLIENT_PORT=2379
ETCD_PEER_PORT=2380
SERVICE_CIDR=10.0.0.0/24
SERVICE_IP=10.0.0.1
KUBECONFIG_PATH=$RUN/admin.kubeconfig
# Start order; `down` stops them in reverse.
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler kubelet)
BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)
# Paths the components create outside their own directories whatever their flags say (the
# kubelet's logs, its device-plugin socket dir, flex-volume dirs): removed at `down` unless `up`
# found them there.
HOST_PATHS=(/var/log/pods /var/log/containers /var/lib/kubelet /var/lib/dockershim
            /usr/libexec/kubernetes /etc/kubernetes)
# Sysctls the kubelet rewrites at start (setupKernelTunables) or its no-op network plugin sets.
SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
         kernel.keys.root_maxkeys kernel.keys.root_maxbytes
         net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables)
APT_PACKAGES=(golang-go etcd-server dpkg-dev make gcc libc6-dev patch xz-utils openssl curl
              python3 iproute2 iptables conntrack socat ethtool util-linux ca-certificates
              debian-archive-keyring)
# Part of the binaries' cache key: change it whenever the build recipe below changes.
BUILD_RECIPE="make WHAT=${BINARIES[*]} v2; pause gcc -Os -static"

say() { printf '[k8s-cluster] %s\n' "$*"; }
die() { printf '[k8s-cluster] ERROR: %s\n' "$*" >&2; exit 1; }
now() { date +%s.%N; }
T_PHASE=0
phase() { T_PHASE=$(now); CUR_PHASE=$1; say "phase $1 ..."; }
phase_done() { say "phase $CUR_PHASE: $(elapsed "$T_PHASE")s${1:+ ($1)}"; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
CUR_PHASE=none

[ "$(id -u)" -eq 0 ] || die "must run as root (it starts a kubelet and changes cgroups)"
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3 || true)

# ---------------------------------------------------------------------------------------------
# Processes: started in their own session; a pid file holds "pid starttime" so a reused pid is
# never mistaken for ours. Stopped by process group with os.killpg(positive pgid).

spawn() { # name cmd...
  local name=$1; shift
  "$PY" - "$PIDS/$name" "$LOGS/$name.log" "$@" <<'EOF'
import os, subprocess, sys
pidfile, log, *argv = sys.argv[1:]
with open(log, 'ab') as out:
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                         start_new_session=True, close_fds=True)
with open('/proc/%d/stat' % p.pid) as f:
    start = f.read().rsplit(')', 1)[1].split()[19]
with open(pidfile, 'w') as f:
    f.write('%d %s\n' % (p.pid, start))
EOF
}

alive() { # name → 0 when its recorded process still runs
  local f=$PIDS/$1 pid start cur
  [ -f "$f" ] || return 1
  read -r pid start <"$f" || return 1
  # Fields after "pid (comm) ": $1 the state, $20 the start time. A zombie has exited.
  cur=$(awk '{ sub(/.*\) /, ""); print $1, $20 }' "/proc/$pid/stat" 2>/dev/null) || return 1
  [ "${cur#* }" = "$start" ] && [ "${cur%% *}" != Z ]
}

stop_component() { # name timeout_seconds
  local f=$PIDS/$1
  [ -f "$f" ] || return 0
  if alive "$1"; then
    "$PY" - "$f" "$2" <<'EOF'
import os, signal, sys, time
pidfile, timeout = sys.argv[1], float(sys.argv[2])
pid, start = open(pidfile).read().split()
pid = int(pid)
assert pid > 1
def ours():
    try:
        with open('/proc/%d/stat' % pid) as f:
            st = f.read().rsplit(')', 1)[1].split()
    except OSError:
        return False
    return st[19] == start and st[0] != 'Z'
def group_alive():
    for d in os.listdir('/proc'):
        if d.isdigit():
            try:
                with open('/proc/%s/stat' % d) as f:
                    st = f.read().rsplit(')', 1)[1].split()
            except OSError:
                continue
            if int(st[2]) == pid and st[0] != 'Z':
                return True
    return False
if ours() and os.getpgid(pid) == pid:
    os.killpg(pid, signal.SIGTERM)
    deadline = time.time() + timeout
    while time.time() < deadline and group_alive():
        time.sleep(0.2)
    if group_alive():
        print('[k8s-cluster] %s did not stop in %gs: SIGKILL' % (pidfile, timeout))
        os.killpg(pid, signal.SIGKILL)
        while group_alive():
            time.sleep(0.1)
EOF
    STOPPED_PGIDS+=("$(cut -d' ' -f1 "$f")")
  fi
  rm -f "$f"
}

# The stopped processes' parent is init, which reaps them a moment later: wait for that (10 s at
# most) so nothing of ours shows in `ps`, not even as <defunct>.
STOPPED_PGIDS=()
wait_reaped() {
  [ ${#STOPPED_PGIDS[@]} -gt 0 ] || return 0
  "$PY" - "${STOPPED_PGIDS[@]}" <<'EOF'
import os, sys, time
pgids = {int(a) for a in sys.argv[1:]}
def left():
    n = 0
    for d in os.listdir('/proc'):
        if d.isdigit():
            try:
                with open('/proc/%s/stat' % d) as f:
                    if int(f.read().rsplit(')', 1)[1].split()[2]) in pgids:
                        n += 1
            except OSError:
                pass
    return n
deadline = time.time() + 10
while left() and time.time() < deadline:
    time.sleep(0.2)
if left():
    print('[k8s-cluster] note: %d exited process(es) not yet reaped by init' % left())
EOF
}

tail_logs() { # components...
  local c
  for c in "$@"; do
    [ -f "$LOGS/$c.log" ] || continue
    printf -- '----- last 40 lines of %s -----\n' "$LOGS/$c.log" >&2
    tail -n 40 "$LOGS/$c.log" >&2
  done
}

FAILED_COMPONENT=
wait_for() { # seconds description component(whose log tells why) command...
  local secs=$1 what=$2 comp=$3; shift 3
  local deadline=$(( $(date +%s) + secs ))
  FAILED_COMPONENT=$comp
  until "$@" >/dev/null 2>&1; do
    if ! alive "$comp"; then
      die "$comp exited while waiting for $what"
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
      die "timed out after ${secs}s waiting for $what"
    fi
    sleep 0.5
  done
  FAILED_COMPONENT=
}

# --cache-dir: kubectl would otherwise leave ~/.kube/cache behind.
kubectl_() { "$BIN/kubectl" --kubeconfig="$KUBECONFIG_PATH" --cache-dir="$RUN/kubectl-cache" "$@"; }

# ---------------------------------------------------------------------------------------------
# Packages and binaries

install_packages() {
  local missing=() p
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && { say "apt packages present"; return 0; }
  say "installing: ${missing[*]}"
  # Maintainer scripts must not start etcd system-wide: this script runs its own.
  local policy=/usr/sbin/policy-rc.d had=1
  [ -e $policy ] || { had=0; printf '#!/bin/sh\nexit 101\n' >$policy; chmod +x $policy; }
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
  [ $had -eq 1 ] || rm -f $policy
}

cache_key_hash() {
  { cat "$PATCH_FILE"; printf '%s\n' "$BUILD_RECIPE"; } | sha256sum | cut -c1-12
}

# Apt pointed at a deb-src entry of our own; the system's apt configuration and state are unused.
private_apt() {
  local a=$CACHE/apt
  mkdir -p "$a/sources.list.d" "$a/lists/partial" "$a/cache/archives/partial"
  cat >"$a/sources.list.d/debian-src.sources" <<'EOF'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  "$@" -o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$a/sources.list.d" \
    -o Dir::State::Lists="$a/lists" -o Dir::Cache="$a/cache" -o Dir::Cache::pkgcache= \
    -o Dir::Cache::srcpkgcache= -o APT::Sandbox::User=root
}

# The newest complete binaries for this patch and recipe, whatever source version built them.
find_cached_bin() {
  local hash=$1 d best=
  for d in "$CACHE"/bin/*-"$hash"; do
    [ -f "$d/.complete" ] && best=$d
  done
  printf '%s' "$best"
}

build_binaries() { # hash → sets BIN
  local hash=$1 t0 ver upstream tree
  t0=$(now)
  say "no cached binaries for key $hash: fetching Debian's kubernetes source"
  private_apt apt-get -qq update
  ver=$(private_apt apt-cache showsrc kubernetes | awk '/^Version:/ { print $2 }' | sort -V | tail -1)
  [ -n "$ver" ] || die "no source package kubernetes in bookworm"
  upstream=${ver%-*}; upstream=${upstream##*+really}
  mkdir -p "$CACHE/src" "$CACHE/build" "$CACHE/home"
  if ! ls "$CACHE/src/kubernetes_${ver}.dsc" >/dev/null 2>&1; then
    (cd "$CACHE/src" && private_apt apt-get -qq source --download-only "kubernetes=$ver")
  fi
  tree=$CACHE/build/kubernetes-$ver
  if [ ! -f "$tree/.sandboxd-extracted" ]; then
    rm -rf "$tree"
    dpkg-source --no-check -x "$CACHE/src/kubernetes_${ver}.dsc" "$tree" >/dev/null
    touch "$tree/.sandboxd-extracted"
  fi
  # The patch: reverse a different one applied before (keeps generated code and Go's cache).
  if ! cmp -s "$PATCH_FILE" "$tree/.sandboxd-applied.patch"; then
    if [ -f "$tree/.sandboxd-applied.patch" ]; then
      (cd "$tree" && patch -R -p1 -s <.sandboxd-applied.patch) || die "cannot reverse the old patch in $tree: remove it"
      rm -f "$tree/.sandboxd-applied.patch"
    fi
    (cd "$tree" && patch -p1 -s <"$PATCH_FILE")
    cp "$PATCH_FILE" "$tree/.sandboxd-applied.patch"
  fi
  say "source $ver (upstream v$upstream) ready in $(elapsed "$t0")s; building ${BINARIES[*]} (logs: $CACHE/build/build.log)"
  local commit
  commit=$(sed -n "s/^ *KUBE_GIT_COMMIT='\([0-9a-f]\{40\}\)'.*/\1/p" "$tree/hack/lib/version.sh" | head -1)
  cat >"$CACHE/build/version-$ver.env" <<EOF
KUBE_GIT_COMMIT='${commit}'
KUBE_GIT_TREE_STATE='clean'
KUBE_GIT_VERSION='v${upstream}'
KUBE_GIT_MAJOR='${upstream%%.*}'
KUBE_GIT_MINOR='$(echo "$upstream" | cut -d. -f2)'
EOF
  local what=() b
  for b in "${BINARIES[@]}"; do what+=("cmd/$b"); done
  t0=$(now)
  # GOCACHE is the tree's _output/local/go/cache (hack/lib/golang.sh): a rebuild is incremental.
  if ! (cd "$tree" && env HOME="$CACHE/home" GOFLAGS= KUBE_GIT_VERSION_FILE="$CACHE/build/version-$ver.env" \
        KUBE_BUILD_PLATFORMS=linux/amd64 nice -n 10 make WHAT="${what[*]}") >"$CACHE/build/build.log" 2>&1; then
    tail -n 60 "$CACHE/build/build.log" >&2
    die "build failed (full log: $CACHE/build/build.log)"
  fi
  say "go build: $(elapsed "$t0")s"
  local out=$CACHE/bin/$ver-$hash
  rm -rf "$out"; mkdir -p "$out"
  for b in "${BINARIES[@]}"; do cp "$tree/_output/local/bin/linux/amd64/$b" "$out/$b"; done
  gcc -Os -Wall -Werror -static -DVERSION=v3.2-sandboxd -o "$out/pause" "$tree/build/pause/linux/pause.c"
  strip "$out/pause"
  printf '%s\n' "$ver" >"$out/source-version"
  "$out/kube-apiserver" --version >"$out/.complete"
  BIN=$out
}

ensure_pause_image() {
  if docker image inspect "$PAUSE_IMAGE" >/dev/null 2>&1; then
    say "pause image $PAUSE_IMAGE present"; return 0
  fi
  local d; d=$(mktemp -d)
  cp "$BIN/pause" "$d/pause"
  tar -C "$d" -cf - pause | docker import -c 'ENTRYPOINT ["/pause"]' \
    -m "static build of kubernetes build/pause/linux/pause.c (scripts/k8s-cluster.sh)" - "$PAUSE_IMAGE" >/dev/null
  rm -rf "$d"
  say "imported $PAUSE_IMAGE"
}

# ---------------------------------------------------------------------------------------------
# PKI (openssl): a CA, serving certs for the API server and the kubelet, client certs.

mkcert() { # name CN O usage(client|server) [SANs]
  local name=$1 cn=$2 org=$3 usage=$4 sans=${5:-} subj ext
  subj="/CN=$cn"; [ -n "$org" ] && subj="/O=$org$subj"
  openssl ecparam -name prime256v1 -genkey -noout -out "$PKI/$name.key" 2>/dev/null
  openssl req -new -key "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr" 2>/dev/null
  ext=$PKI/$name.ext
  { echo "basicConstraints=critical,CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=${usage}Auth"
    if [ -n "$sans" ]; then echo "subjectAltName=$sans"; fi; } >"$ext"
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -set_serial "0x$(openssl rand -hex 16)" \
    -days 3650 -sha256 -extfile "$ext" -out "$PKI/$name.crt" 2>/dev/null
  rm -f "$PKI/$name.csr" "$ext"
}

mkkubeconfig() { # file name cert-name
  local b64='base64 -w0'
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: sandboxd
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority-data: $($b64 <"$PKI/ca.crt")
users:
- name: $2
  user:
    client-certificate-data: $($b64 <"$PKI/$3.crt")
    client-key-data: $($b64 <"$PKI/$3.key")
contexts:
- name: $2@sandboxd
  context:
    cluster: sandboxd
    user: $2
    namespace: default
current-context: $2@sandboxd
EOF
  chmod 600 "$1"
}

make_pki() {
  mkdir -p "$PKI"; chmod 700 "$PKI"
  openssl ecparam -name prime256v1 -genkey -noout -out "$PKI/ca.key" 2>/dev/null
  openssl req -x509 -new -key "$PKI/ca.key" -subj "/CN=sandboxd-k8s-ca" -days 3650 -sha256 \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
    -out "$PKI/ca.crt" 2>/dev/null
  mkcert apiserver kube-apiserver "" server \
    "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,IP:127.0.0.1,IP:$SERVICE_IP,IP:$NODE_IP"
  mkcert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters client
  mkcert admin sandboxd-admin system:masters client
  mkcert controller-manager system:kube-controller-manager "" client
  mkcert scheduler system:kube-scheduler "" client
  mkcert kubelet-client "system:node:$NODE_NAME" system:nodes client
  mkcert kubelet-serving "$NODE_NAME" "" server "DNS:$NODE_NAME,IP:$NODE_IP,IP:127.0.0.1"
  openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
  openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
  chmod 600 "$PKI"/*.key
  mkkubeconfig "$RUN/admin.kubeconfig.tmp" admin admin
  mkkubeconfig "$RUN/controller-manager.kubeconfig" controller-manager controller-manager
  mkkubeconfig "$RUN/scheduler.kubeconfig" scheduler scheduler
  mkkubeconfig "$RUN/kubelet.kubeconfig" "system:node:$NODE_NAME" kubelet-client
}

# ---------------------------------------------------------------------------------------------
# What `up` found, so `down` restores exactly that.

record_found() {
  [ -f "$RUN/found.env" ] && return 0 # a partial earlier run already recorded the original
  local s v f
  {
    for s in "${SYSCTLS[@]}"; do
      f=/proc/sys/${s//.//}
      if [ -r "$f" ]; then v=$(cat "$f"); printf 'sysctl %s %s\n' "$s" "$v"; fi
    done
    for f in "${HOST_PATHS[@]}"; do
      if [ -e "$f" ]; then printf 'existed %s\n' "$f"; fi
    done
    for f in /sys/fs/cgroup/*/kubepods; do
      if [ -d "$f" ]; then printf 'existed %s\n' "$f"; fi
    done
  } >"$RUN/found.env.tmp"
  mv "$RUN/found.env.tmp" "$RUN/found.env"
}

found_existed() { [ -f "$RUN/found.env" ] && grep -qxF "existed $1" "$RUN/found.env"; }

# ---------------------------------------------------------------------------------------------

node_ip() {
  ip -4 -o addr show dev docker0 2>/dev/null | awk '{ split($4, a, "/"); print a[1]; exit }'
}

cgroup_driver() { docker info --format '{{.CgroupDriver}}'; }

node_ready() {
  [ "$(kubectl_ get node "$NODE_NAME" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

pod_running() { # namespace name
  [ "$(kubectl_ -n "$1" get pod "$2" -o 'jsonpath={.status.phase}' 2>/dev/null)" = Running ]
}

cluster_state() { # → up | down | partial
  local c n=0
  for c in "${COMPONENTS[@]}"; do alive "$c" && n=$((n + 1)); done
  if [ $n -eq ${#COMPONENTS[@]} ] && [ -f "$RUN/bin-dir" ] && [ -f "$KUBECONFIG_PATH" ]; then
    BIN=$(cat "$RUN/bin-dir")
    if kubectl_ get --raw /readyz >/dev/null 2>&1 && node_ready; then echo up; return; fi
    echo partial; return
  fi
  if [ $n -eq 0 ] && [ ! -e "$RUN" ] && [ ! -e "$STATE" ]; then echo down; return; fi
  echo partial
}

cmd_up() {
  local t_total; t_total=$(now)
  local st; st=$(cluster_state)
  if [ "$st" = up ]; then
    say "already up (node $NODE_NAME Ready); kubeconfig: $KUBECONFIG_PATH"; return 0
  fi
  if [ "$st" = partial ]; then
    say "found a partial cluster: taking it down first"; cmd_down
  fi
  UP_DONE=0
  trap 'on_up_exit' EXIT

  phase packages
  install_packages
  command -v docker >/dev/null && docker info >/dev/null 2>&1 || die "the Docker Engine is not reachable"
  phase_done

  phase binaries
  local hash; hash=$(cache_key_hash)
  BIN=$(find_cached_bin "$hash")
  if [ -n "$BIN" ]; then
    phase_done "cached: $BIN"
  else
    build_binaries "$hash"
    phase_done "built: $BIN"
  fi

  phase pause-image
  ensure_pause_image
  phase_done

  phase pki
  NODE_IP=$(node_ip)
  [ -n "$NODE_IP" ] || die "no IPv4 address on docker0 (the Docker bridge)"
  local driver; driver=$(cgroup_driver)
  local c
  for c in $APISERVER_PORT $ETCD_CLIENT_PORT $ETCD_PEER_PORT 10248 10250 10257 10259; do
    ! ss -Hltn "sport = :$c" | grep -q . || die "port $c is already in use: $(ss -Hltnp "sport = :$c")"
  done
  mkdir -p "$RUN" "$LOGS" "$PIDS" "$STATE"
  chmod 700 "$RUN" "$STATE"
  record_found
  printf '%s\n' "$BIN" >"$RUN/bin-dir"
  make_pki
  phase_done "node $NODE_NAME at $NODE_IP, cgroup driver $driver, cgroup $(stat -fc %T /sys/fs/cgroup)"

  phase etcd
  mkdir -p "$STATE/etcd" "$STATE/volume-plugins"; chmod 700 "$STATE/etcd"
  spawn etcd etcd --name default --data-dir "$STATE/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "default=http://127.0.0.1:$ETCD_PEER_PORT" --initial-cluster-state new
  wait_for 60 "etcd health" etcd curl -fsS "http://127.0.0.1:$ETCD_CLIENT_PORT/health"
  phase_done

  phase kube-apiserver
  spawn kube-apiserver "$BIN/kube-apiserver" \
    --etcd-servers="http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --bind-address=127.0.0.1 --secure-port=$APISERVER_PORT --advertise-address="$NODE_IP" \
    --service-cluster-ip-range=$SERVICE_CIDR \
    --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
    --client-ca-file="$PKI/ca.crt" \
    --kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" \
    --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority="$PKI/ca.crt" \
    --kubelet-preferred-address-types=InternalIP \
    --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
    --allow-privileged=false --profiling=false --v=1
  wait_for 120 "the API server's /readyz" kube-apiserver \
    curl -fsS --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
    "https://127.0.0.1:$APISERVER_PORT/readyz"
  mv "$RUN/admin.kubeconfig.tmp" "$KUBECONFIG_PATH"
  phase_done

  phase controllers
  spawn kube-controller-manager "$BIN/kube-controller-manager" \
    --kubeconfig="$RUN/controller-manager.kubeconfig" \
    --authentication-kubeconfig="$RUN/controller-manager.kubeconfig" \
    --authorization-kubeconfig="$RUN/controller-manager.kubeconfig" \
    --bind-address=127.0.0.1 --secure-port=10257 --port=0 --leader-elect=false \
    --service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
    --use-service-account-credentials=true \
    --cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key" \
    --flex-volume-plugin-dir="$STATE/volume-plugins" \
    --cluster-name=sandboxd --controllers='*' --profiling=false --v=1
  spawn kube-scheduler "$BIN/kube-scheduler" \
    --kubeconfig="$RUN/scheduler.kubeconfig" \
    --authentication-kubeconfig="$RUN/scheduler.kubeconfig" \
    --authorization-kubeconfig="$RUN/scheduler.kubeconfig" \
    --bind-address=127.0.0.1 --secure-port=10259 --port=0 --leader-elect=false --profiling=false --v=1
  wait_for 60 "kube-controller-manager /healthz" kube-controller-manager curl -fsSk https://127.0.0.1:10257/healthz
  wait_for 60 "kube-scheduler /healthz" kube-scheduler curl -fsSk https://127.0.0.1:10259/healthz
  phase_done

  phase kubelet
  mkdir -p "$STATE/kubelet" "$STATE/dockershim" "$STATE/volume-plugins"
  spawn kubelet "$BIN/kubelet" \
    --kubeconfig="$RUN/kubelet.kubeconfig" --hostname-override="$NODE_NAME" \
    --node-ip="$NODE_IP" --address="$NODE_IP" --port=10250 --read-only-port=0 \
    --healthz-bind-address=127.0.0.1 --healthz-port=10248 \
    --tls-cert-file="$PKI/kubelet-serving.crt" --tls-private-key-file="$PKI/kubelet-serving.key" \
    --client-ca-file="$PKI/ca.crt" --anonymous-auth=false --authorization-mode=Webhook \
    --root-dir="$STATE/kubelet" --cert-dir="$STATE/kubelet/pki" \
    --experimental-dockershim-root-directory="$STATE/dockershim" \
    --volume-plugin-dir="$STATE/volume-plugins" \
    --container-runtime=docker --network-plugin= \
    --container-runtime-endpoint="unix://$RUN/dockershim.sock" --image-service-endpoint="unix://$RUN/dockershim.sock" \
    --pod-infra-container-image="$PAUSE_IMAGE" \
    --cgroup-driver="$driver" --cgroups-per-qos=true --cgroup-root=/ --enforce-node-allocatable=pods \
    --fail-swap-on=false --protect-kernel-defaults=false --oom-score-adj=0 \
    --make-iptables-util-chains=false --hairpin-mode=none \
    --resolv-conf=/etc/resolv.conf --cluster-domain=cluster.local \
    --image-gc-high-threshold=100 --image-gc-low-threshold=99 \
    --eviction-hard= --eviction-soft= \
    --feature-gates=SizeMemoryBackedVolumes=true,DevicePlugins=false \
    --register-node=true --v=1
  wait_for 120 "node $NODE_NAME Ready" kubelet node_ready
  phase_done

  phase smoke-pod
  wait_for 60 "the default ServiceAccount" kube-controller-manager kubectl_ -n default get serviceaccount default
  kubectl_ -n default delete pod sandboxd-k8s-smoke --ignore-not-found --wait=true >/dev/null
  kubectl_ apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: sandboxd-k8s-smoke
  namespace: default
spec:
  restartPolicy: Never
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 0
  containers:
  - name: pause
    image: $PAUSE_IMAGE
    imagePullPolicy: Never
EOF
  wait_for 90 "the smoke Pod Running" kubelet pod_running default sandboxd-k8s-smoke
  local pod_ip; pod_ip=$(kubectl_ -n default get pod sandboxd-k8s-smoke -o 'jsonpath={.status.podIP}')
  kubectl_ -n default delete pod sandboxd-k8s-smoke --wait=true --timeout=60s >/dev/null
  phase_done "Pod ran at $pod_ip"

  UP_DONE=1
  trap - EXIT
  say "up in $(elapsed "$t_total")s: $("$BIN/kube-apiserver" --version), node $NODE_NAME Ready"
  say "kubeconfig: $KUBECONFIG_PATH (logs: $LOGS)"
}

on_up_exit() {
  local rc=$?
  trap - EXIT
  [ "$UP_DONE" = 1 ] && exit "$rc"
  printf '[k8s-cluster] up failed in phase %s\n' "$CUR_PHASE" >&2
  if [ -n "$FAILED_COMPONENT" ]; then tail_logs "$FAILED_COMPONENT"; else tail_logs "${COMPONENTS[@]}"; fi
  if [ "${SANDBOXD_K8S_KEEP_ON_FAILURE:-0}" = 1 ]; then
    say "SANDBOXD_K8S_KEEP_ON_FAILURE=1: leaving it as it is (logs: $LOGS; run down to clean up)"
  else
    say "taking the partial cluster down (SANDBOXD_K8S_KEEP_ON_FAILURE=1 keeps it for diagnosis)"
    cmd_down || true
  fi
  exit 1
}

# ---------------------------------------------------------------------------------------------

unmount_under() { # dir: every mount at or below it, deepest first
  local dir=$1 m i
  for i in 1 2 3 4 5 6 7 8 9 10; do
    m=$(awk -v d="$dir" '{ p = $5; gsub(/\\040/, " ", p); if (p == d || index(p, d "/") == 1) print p }' /proc/self/mountinfo \
        | awk '{ print length($0) "\t" $0 }' | sort -rn | cut -f2-)
    [ -z "$m" ] && return 0
    while IFS= read -r p; do
      umount "$p" 2>/dev/null || umount -l "$p" 2>/dev/null || true
    done <<<"$m"
  done
  say "warning: mounts left under $dir"
}

remove_kubelet_containers() {
  local ids i n
  for i in 1 2 3; do
    ids=$(docker ps -a --filter label=io.kubernetes.docker.type --format '{{.ID}} {{.Names}}' \
          | awk '$2 ~ /^k8s_/ { print $1 }')
    [ -z "$ids" ] && return 0
    n=$(printf '%s\n' "$ids" | grep -c .)
    say "removing $n container(s) the kubelet made"
    # -v: an image's VOLUME gives the container an anonymous volume.
    # shellcheck disable=SC2086
    docker rm -f -v $ids >/dev/null 2>&1 || true
  done
}

remove_cgroups() {
  local root d i
  for root in /sys/fs/cgroup/*/kubepods; do
    [ -d "$root" ] || continue
    found_existed "$root" && continue
    for i in $(seq 1 20); do
      # Deepest first; a cgroup still holding tasks refuses rmdir: wait for docker to finish.
      find "$root" -depth -type d -exec rmdir {} \; 2>/dev/null || true
      [ -d "$root" ] || break
      sleep 0.5
    done
    [ -d "$root" ] && say "warning: could not remove $root"
  done
  return 0
}

restore_sysctls() {
  [ -f "$RUN/found.env" ] || return 0
  local kind name val f cur
  while read -r kind name val; do
    [ "$kind" = sysctl ] || continue
    f=/proc/sys/${name//.//}
    cur=$(cat "$f" 2>/dev/null) || continue
    if [ "$cur" != "$val" ]; then
      printf '%s\n' "$val" >"$f" && say "restored $name = $val (was $cur)"
    fi
  done <"$RUN/found.env"
}

cmd_down() {
  local t0; t0=$(now)
  if [ "$(cluster_state)" = down ] && ! docker ps -aq --filter label=io.kubernetes.docker.type | grep -q .; then
    say "already down"; return 0
  fi
  stop_component kubelet 20
  remove_kubelet_containers
  local c
  for c in kube-scheduler kube-controller-manager kube-apiserver etcd; do stop_component "$c" 20; done
  unmount_under "$STATE"
  rm -rf "$STATE"
  remove_cgroups
  restore_sysctls
  wait_reaped
  if [ -f "$RUN/found.env" ]; then
    for c in "${HOST_PATHS[@]}"; do
      if [ -e "$c" ] && ! found_existed "$c"; then unmount_under "$c"; rm -rf "$c"; fi
    done
  fi
  rm -rf "$RUN"
  say "down in $(elapsed "$t0")s"
}

cmd_status() {
  local st c; st=$(cluster_state)
  for c in "${COMPONENTS[@]}"; do
    if alive "$c"; then say "$c: running (pid $(cut -d' ' -f1 "$PIDS/$c"))"; else say "$c: not running"; fi
  done
  case $st in
    up) say "up: node $NODE_NAME Ready; kubeconfig $KUBECONFIG_PATH"; return 0 ;;
    down) say "down"; return 3 ;;
    *) say "partial (run down, or up to restart)"; return 1 ;;
  esac
}

# One invocation at a time (a lock on this script's own file: nothing left behind).
exec 9<"$0"
case ${1:-} in
  up) flock 9; cmd_up ;;
  down) flock 9; cmd_down ;;
  status) cmd_status ;;
  kubeconfig)
    [ "$(cluster_state)" = up ] || die "the cluster is not up (scripts/k8s-cluster.sh up)"
    printf '%s\n' "$KUBECONFIG_PATH" ;;
  kubectl)
    shift
    [ -f "$RUN/bin-dir" ] || die "the cluster is not up"
    BIN=$(cat "$RUN/bin-dir")
    exec "$BIN/kubectl" --kubeconfig="$KUBECONFIG_PATH" --cache-dir="$RUN/kubectl-cache" "$@" ;;
  *) echo "usage: $0 up|down|status|kubeconfig|kubectl ARGS..." >&2; exit 2 ;;
esac
