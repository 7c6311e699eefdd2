#!/usr/bin/env bash
# One real node for the local control plane (`make cluster REAL_NODE=1`): containerd +
# runc + the CNI bridge plugin from Debian, a kubelet built from k8s.io/kubernetes at
# KUBE_VERSION (hack/node/go.mod), a pause image and a busybox test image built here.
# Nothing is pulled from a registry: every image is made by buildah and imported into
# containerd, under its normalised name (docker.io/local/x:1, as the CRI looks it up).
#
#   hack/node.sh build              # kubelet + pause (cached), print the bin directory
#   hack/node.sh up DIR             # start containerd + kubelet against DIR's control plane
#   hack/node.sh down DIR           # stop them, remove the pods, mounts, bridge and rules
#   hack/node.sh load DIR ARCHIVE NAME   # import an OCI archive into the node's containerd
#
# DIR is the control plane's directory (hack/cluster.sh); the node keeps its state in
# DIR/node. Root only (containerd and the kubelet are). The node is named `real-node` and
# labelled polsched.io/real-node=true. Settings that this sandbox needs, each with why:
#   - failCgroupV1: false        the kernel runs a hybrid cgroup v1 hierarchy
#   - failSwapOn: false, cgroupDriver: cgroupfs (no systemd here)
#   - restrict_oom_score_adj     the sandbox denies lowering oom_score_adj; without it runc
#                                fails with "can't get final child's PID from pipe"
#   - CNI bin_dir /usr/lib/cni   where Debian's containernetworking-plugins puts them
# Pods reach the API server as in any cluster, through the `kubernetes` Service's
# ClusterIP: with no kube-proxy here, one DNAT rule sends 10.0.0.1:443 from the bridge to
# the API server on 127.0.0.1 (route_localnet on the bridge only).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
# shellcheck source=procs.sh
source "$here/procs.sh"
cmd=${1:-}
NODE_NAME=real-node
BRIDGE=polsched0
POD_CIDR=10.88.0.0/16
BRIDGE_IP=10.88.0.1
SERVICE_IP=10.0.0.1

log() { printf '[hack/node %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "$*"; exit 1; }

cache_root=${POLSCHED_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/polsched}
key=$(cat "$here/versions.env" "$here"/node/go.mod "$here"/node/go.sum "$here"/node/pause/main.go \
      | sha256sum | cut -c1-16)
bin="$cache_root/node-$key"

build() {
  if [[ -x "$bin/kubelet" && -x "$bin/pause" ]]; then echo "$bin"; return 0; fi
  command -v go >/dev/null || die "go is not installed; install Go >= 1.26 first"
  local start minor ldflags pkg
  start=$(date +%s)
  mkdir -p "$bin.tmp"
  minor=${KUBE_VERSION#v1.}; minor=${minor%%.*}
  ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  log "building kubelet $KUBE_VERSION into $bin (shares Go's build cache with the control plane: ~1-3 min after it, 10+ min cold on 2 cores)"
  ( cd "$here/node" && go mod download 2>&1 | sed 's/^/  /' >&2 )
  ( cd "$here/node" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$bin.tmp/kubelet" \
      k8s.io/kubernetes/cmd/kubelet ) >&2 || die "kubelet build failed"
  log "kubelet built ($(( $(date +%s) - start ))s); building pause"
  ( cd "$here/node" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$bin.tmp/pause" ./pause ) >&2 \
    || die "pause build failed"
  rm -rf "$bin" && mv "$bin.tmp" "$bin"
  log "done in $(( $(date +%s) - start ))s: $bin"
  echo "$bin"
}

# buildah, vfs storage in a throwaway directory: no overlay mounts, nothing left behind.
buildah_() { buildah --storage-driver vfs --root "$BUILDAH_ROOT/storage" --runroot "$BUILDAH_ROOT/run" "$@"; }

# oci_image NAME TREE ARCHIVE ENTRYPOINT_JSON: an image from scratch holding the files of TREE.
oci_image() {
  local name=$1 tree=$2 archive=$3 entrypoint=$4 c
  c=$(buildah_ from scratch)
  buildah_ copy "$c" "$tree" / >/dev/null
  buildah_ config --entrypoint "$entrypoint" --cmd '' "$c"
  buildah_ commit --quiet "$c" "oci-archive:$archive:$name" >/dev/null
  buildah_ rm "$c" >/dev/null
}

ctr_() { ctr --address "$node/containerd/containerd.sock" --namespace k8s.io "$@"; }

# load ARCHIVE NAME: import, then tag under the name the CRI normalises NAME to.
load() {
  local archive=$1 name=$2 full
  full=$name
  [[ $name == */*/* || $name == *.*/* ]] || full="docker.io/$name"
  [[ $full == docker.io/* && ${full#docker.io/} != */* ]] && full="docker.io/library/${full#docker.io/}"
  ctr_ images import --no-unpack "$archive" >/dev/null 2>&1 \
    || ctr_ images import "$archive" >&2 || die "importing $archive failed"
  # buildah names the image in the archive's index as given (local/x:1).
  if [[ $full != "$name" ]]; then
    ctr_ images rm "$full" >/dev/null 2>&1 || true
    ctr_ images tag "$name" "$full" >/dev/null || die "tagging $name as $full failed"
  fi
  log "image $full loaded"
}

node_images() {
  local b=$1 tree
  BUILDAH_ROOT=$(mktemp -d /tmp/polsched-buildah.XXXXXX)
  tree="$BUILDAH_ROOT/pause"; mkdir -p "$tree"; cp "$b/pause" "$tree/pause"
  oci_image local/pause:1 "$tree" "$node/pause.tar" '["/pause"]'
  # The test image: busybox-static and its applets, ~1 MB.
  tree="$BUILDAH_ROOT/busybox"; mkdir -p "$tree/bin" "$tree/tmp"; cp /bin/busybox "$tree/bin/busybox"
  for a in sh sleep echo cat ls true; do ln -s busybox "$tree/bin/$a"; done
  oci_image local/busybox:1 "$tree" "$node/busybox.tar" '["/bin/sh"]'
  rm -rf "$BUILDAH_ROOT"
  load "$node/pause.tar" local/pause:1
  load "$node/busybox.tar" local/busybox:1
}

alive() { pid_alive "$node" "$1"; }
stop_one() { pid_stop "$node" "$1" 10; }

write_configs() {
  local kubelet_port=$1
  mkdir -p "$node/cni" "$node/containerd" "$node/kubelet" "$node/pods"
  cat > "$node/cni/10-polsched.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "polsched",
  "plugins": [
    {"type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": false,
     "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$BRIDGE_IP"}]],
              "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "$node/cni/ipam"}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
  cat > "$node/containerd/config.toml" <<EOF
version = 2
root = "$node/containerd/root"
state = "/run/polsched-containerd-$(basename "$dir")"
[grpc]
  address = "$node/containerd/containerd.sock"
[ttrpc]
  address = "$node/containerd/containerd.sock.ttrpc"
[debug]
  level = "warn"
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "docker.io/local/pause:1"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_selinux = false
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$node/cni"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
EOF
  cat > "$node/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This kernel runs a hybrid cgroup v1 hierarchy; kubelet v1.35+ refuses v1 unless told.
failCgroupV1: false
failSwapOn: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://$node/containerd/containerd.sock
address: 127.0.0.1
port: $kubelet_port
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 0
tlsCertFile: $node/kubelet/kubelet.crt
tlsPrivateKeyFile: $node/kubelet/kubelet.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $dir/pki/ca.crt}
authorization: {mode: AlwaysAllow}
registerNode: true
podCIDR: $POD_CIDR
resolvConf: ""
maxPods: 30
serializeImagePulls: false
imageGCHighThresholdPercent: 100
evictionHard: {}
# The sandbox's disk and memory are shared: never evict the test's pods.
evictionPressureTransitionPeriod: 0s
enableDebuggingHandlers: true
podLogsDir: $node/pods
logging: {format: text}
EOF
  if [[ ! -f "$node/kubelet/kubelet.crt" ]]; then
    openssl req -newkey rsa:2048 -nodes -keyout "$node/kubelet/kubelet.key" -out "$node/kubelet/kubelet.csr" \
      -subj "/CN=$NODE_NAME" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:%s\n' "$NODE_NAME" > "$node/kubelet/san.ext"
    openssl x509 -req -in "$node/kubelet/kubelet.csr" -CA "$dir/pki/ca.crt" -CAkey "$dir/pki/ca.key" \
      -CAcreateserial -out "$node/kubelet/kubelet.crt" -days 365 -extfile "$node/kubelet/san.ext" 2>/dev/null
    rm -f "$node/kubelet/kubelet.csr" "$node/kubelet/san.ext"
  fi
}

# The bridge exists before the first pod so that route_localnet can be set on it alone.
network_up() {
  local api_port=$1
  if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
    ip link add "$BRIDGE" type bridge
  fi
  ip addr replace "$BRIDGE_IP/16" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  sysctl -qw "net.ipv4.conf.$BRIDGE.route_localnet=1"
  sysctl -qw net.ipv4.ip_forward=1
  iptables -t nat -N POLSCHED-NODE 2>/dev/null || iptables -t nat -F POLSCHED-NODE
  iptables -t nat -C PREROUTING -i "$BRIDGE" -j POLSCHED-NODE 2>/dev/null \
    || iptables -t nat -A PREROUTING -i "$BRIDGE" -j POLSCHED-NODE
  iptables -t nat -A POLSCHED-NODE -d "$SERVICE_IP/32" -p tcp --dport 443 \
    -j DNAT --to-destination "127.0.0.1:$api_port"
}

network_down() {
  iptables -t nat -D PREROUTING -i "$BRIDGE" -j POLSCHED-NODE 2>/dev/null || true
  iptables -t nat -F POLSCHED-NODE 2>/dev/null || true
  iptables -t nat -X POLSCHED-NODE 2>/dev/null || true
  ip link del "$BRIDGE" 2>/dev/null || true
}

kubectl_() { kubectl --kubeconfig "$dir/kubeconfig" "$@"; }

node_ready() {
  [[ $(kubectl_ get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) == True ]]
}

up() {
  [[ $(id -u) -eq 0 ]] || die "a real node needs root (containerd, runc, the bridge)"
  [[ -f "$dir/kubeconfig" && -f "$dir/apiserver.port" ]] || die "no control plane in $dir (hack/cluster.sh up $dir first)"
  if alive containerd && alive kubelet; then log "already running"; return 0; fi
  local b start api_port kubelet_port i
  start=$(date +%s)
  "$here/install-deps.sh" node
  b=$(build)
  api_port=$(cat "$dir/apiserver.port")
  kubelet_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')
  mkdir -p "$node"
  write_configs "$kubelet_port"
  trap 'down >/dev/null 2>&1' ERR
  network_up "$api_port"
  log "starting containerd $(containerd --version | awk '{print $3}')"
  setsid containerd --config "$node/containerd/config.toml" >"$node/containerd.log" 2>&1 < /dev/null &
  echo $! > "$node/containerd.pid"
  for i in $(seq 1 100); do
    ctr --address "$node/containerd/containerd.sock" version >/dev/null 2>&1 && break
    alive containerd || { tail -20 "$node/containerd.log" >&2; die "containerd exited"; }
    (( i == 100 )) && die "containerd did not answer in 10s; see $node/containerd.log"
    sleep 0.1
  done
  node_images "$b"
  log "starting kubelet $KUBE_VERSION as node $NODE_NAME"
  setsid "$b/kubelet" --config "$node/kubelet/config.yaml" --kubeconfig "$dir/kubeconfig" \
    --root-dir "$node/kubelet/root" --hostname-override "$NODE_NAME" \
    --node-labels polsched.io/real-node=true --v=1 \
    >"$node/kubelet.log" 2>&1 < /dev/null &
  echo $! > "$node/kubelet.pid"
  for i in $(seq 1 1200); do
    node_ready && break
    alive kubelet || { grep -E '^[EF][0-9]{4}' "$node/kubelet.log" | tail -10 >&2; die "kubelet exited; see $node/kubelet.log"; }
    (( i % 100 == 0 )) && log "waiting for node $NODE_NAME to be Ready ($((i / 10))s)"
    (( i == 1200 )) && { grep -E '^[EF][0-9]{4}' "$node/kubelet.log" | tail -10 >&2; die "node not Ready after 120s; see $node/kubelet.log"; }
    sleep 0.1
  done
  trap - ERR
  log "node $NODE_NAME Ready in $(( $(date +%s) - start ))s (logs: $node/kubelet.log, $node/containerd.log)"
}

down() {
  [[ -d "$node" ]] || return 0
  stop_one kubelet
  # The pods' processes: kill every task of the node's containerd, then containerd.
  if alive containerd; then
    local id
    for id in $(ctr_ tasks ls -q 2>/dev/null || true); do ctr_ tasks kill -s KILL "$id" >/dev/null 2>&1 || true; done
  fi
  stop_one containerd
  # The shims outlive containerd by design; these are the node's (their -address).
  local state="/run/polsched-containerd-$(basename "$dir")" pid m
  for pid in $(pgrep -f "containerd-shim-runc-v2 .*-address $node/containerd/containerd.sock" 2>/dev/null || true); do
    kill -9 "$pid" 2>/dev/null || true
  done
  # What the kubelet and containerd mounted (the pods' network namespaces live under the
  # state dir: netns_mounts_under_state_dir).
  for m in $(awk -v a="$node" -v b="$state" 'index($2, a) == 1 || index($2, b) == 1 {print $2}' /proc/self/mounts | sort -r); do
    umount -l "$m" 2>/dev/null || true
  done
  network_down
  rm -rf "$state" "$node/kubelet/root" "$node/containerd/root" "$node/cni/ipam"
  log "node stopped"
}

case "$cmd" in
  build) build ;;
  up|down|load)
    dir=${2:?usage: $0 $cmd DIR}
    dir=$(cd "$dir" && pwd)
    node="$dir/node"
    case "$cmd" in
      up) up ;;
      down) down ;;
      load) load "${3:?archive}" "${4:?name}" ;;
    esac ;;
  *) echo "usage: $0 build | up DIR | down DIR | load DIR ARCHIVE NAME" >&2; exit 2 ;;
esac
