#!/usr/bin/env bash
# The Metrics API (metrics.k8s.io) for the local control plane: `make cluster METRICS=1`.
# The chain, every part real: a pod's usage annotation (kwok.x-k8s.io/usage-cpu, ...) ->
# kwok's ClusterResourceUsage + Metric -> kwok's emulated kubelet /metrics/resource ->
# metrics-server -> APIService v1beta1.metrics.k8s.io -> `kubectl top`, polsched.
#
#   hack/metrics.sh build                  # metrics-server (cached) + kwok's metric CRDs; print the dir
#   hack/metrics.sh pki DIR                # front-proxy CA + client, metrics-server and kwok certs
#   hack/metrics.sh apiserver-args DIR     # kube-apiserver's aggregation flags
#   hack/metrics.sh kwok-stages SRC OUT    # kwok's stages with the node metrics-path annotation
#   hack/metrics.sh kwok-crds DIR          # kwok's Metric/ClusterResourceUsage CRDs and objects
#   hack/metrics.sh up DIR                 # start metrics-server, register the APIService, wait
#   hack/metrics.sh down DIR               # stop metrics-server
#
# hack/cluster.sh calls these when POLSCHED_METRICS=1; it also gives kube-apiserver the
# aggregation flags (the front-proxy files below) and starts kwok with the metric CRDs,
# TLS and a free node port. The version is pinned in hack/metrics/go.mod, a module of its
# own with its own cache key (metrics-KEY), so adding it never changes the key of the
# kube/etcd/kwok build.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
# shellcheck source=procs.sh
source "$here/procs.sh"
cmd=${1:-}

log() { printf '[hack/metrics %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "$*"; exit 1; }

cache_root=${POLSCHED_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/polsched}
key=$(cat "$here/versions.env" "$here"/metrics/go.mod "$here"/metrics/go.sum \
      | sha256sum | cut -c1-16)
bin="$cache_root/metrics-$key"
METRICS_SERVER_VERSION=$(awk '$1 == "require" && $2 == "sigs.k8s.io/metrics-server" {print $3}' "$here/metrics/go.mod")

# go build -v names each package as it compiles it; one line per 100 (as hack/build.sh).
progress() {
  local n=0 line
  while IFS= read -r line; do
    case "$line" in
      *" "*|*:*) printf '%s\n' "$line" >&2 ;;  # errors and warnings pass through
      *) n=$((n + 1)); (( n % 100 == 0 )) && log "metrics-server: $n packages compiled ($(( $(date +%s) - start ))s)";;
    esac
  done
  log "metrics-server: $n packages compiled"
}

build() {
  if [[ -x "$bin/metrics-server" && -f "$bin/kwok-metrics-crds.yaml" ]]; then echo "$bin"; return 0; fi
  command -v go >/dev/null || die "go is not installed; install Go >= 1.26 first"
  mkdir -p "$cache_root"
  exec 8>"$bin.lock"
  if ! flock -n 8; then
    log "another build of $bin is under way; waiting for it"
    flock 8
    if [[ -x "$bin/metrics-server" && -f "$bin/kwok-metrics-crds.yaml" ]]; then echo "$bin"; return 0; fi
  fi
  local mod
  start=$(date +%s)  # global: progress() reads it
  rm -rf "$bin.tmp" && mkdir -p "$bin.tmp"
  log "building metrics-server $METRICS_SERVER_VERSION into $bin (a cold build downloads modules and takes 3-10 minutes on 2 cores)"
  ( cd "$here/metrics" && go mod download 2>&1 | sed 's/^/  /' >&2 )
  log "modules downloaded ($(( $(date +%s) - start ))s); compiling"
  ( cd "$here/metrics" && CGO_ENABLED=0 go build -v -trimpath -ldflags "-s -w" -o "$bin.tmp/metrics-server" \
      sigs.k8s.io/metrics-server/cmd/metrics-server 2>&1 ) | progress
  [[ -x "$bin.tmp/metrics-server" ]] || die "metrics-server build failed"
  # kwok's metric CRDs ship in its module (kustomize/crd/bases); collect them into one file.
  mod="$(go env GOMODCACHE)/sigs.k8s.io/kwok@$KWOK_VERSION"
  [[ -d "$mod/kustomize" ]] || (cd "$here/etcd" && GOFLAGS=-mod=mod go mod download "sigs.k8s.io/kwok@$KWOK_VERSION" >&2)
  : > "$bin.tmp/kwok-metrics-crds.yaml"
  for f in kwok.x-k8s.io_metrics.yaml kwok.x-k8s.io_clusterresourceusages.yaml; do
    [[ -f "$mod/kustomize/crd/bases/$f" ]] || die "kwok $KWOK_VERSION has no kustomize/crd/bases/$f"
    { echo "---"; cat "$mod/kustomize/crd/bases/$f"; } >> "$bin.tmp/kwok-metrics-crds.yaml"
  done
  rm -rf "$bin" && mv "$bin.tmp" "$bin"
  log "done in $(( $(date +%s) - start ))s: $bin"
  echo "$bin"
}

# Certificates, under DIR/pki, signed by the cluster CA except the front proxy's own CA:
#   front-proxy-ca, front-proxy-client (CN front-proxy-client): kube-apiserver's
#     aggregation layer proves to metrics-server who the user is (requestheader flags);
#   metrics-server: its serving certificate (SAN metrics-server.kube-system.svc, 127.0.0.1);
#     the APIService's caBundle is the cluster CA;
#   kwok-serving: kwok's emulated kubelet endpoint, which metrics-server verifies with
#     the cluster CA (--kubelet-certificate-authority).
pki() {
  local p="$dir/pki"
  [[ -f "$p/kwok-serving.crt" ]] && return 0
  [[ -f "$p/ca.crt" ]] || die "no cluster CA in $p: hack/cluster.sh makes it first"
  log "generating the aggregation layer's, metrics-server's and kwok's certificates in $p"
  (
    cd "$p"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout front-proxy-ca.key -out front-proxy-ca.crt \
      -days 3650 -subj "/CN=polsched-front-proxy-ca" 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -keyout front-proxy-client.key -out front-proxy-client.csr \
      -subj "/CN=front-proxy-client" 2>/dev/null
    openssl x509 -req -in front-proxy-client.csr -CA front-proxy-ca.crt -CAkey front-proxy-ca.key \
      -CAcreateserial -out front-proxy-client.crt -days 3650 2>/dev/null
    printf 'subjectAltName=DNS:metrics-server.kube-system.svc,DNS:metrics-server.kube-system,IP:127.0.0.1\n' > ms.ext
    openssl req -newkey rsa:2048 -nodes -keyout metrics-server.key -out metrics-server.csr \
      -subj "/CN=metrics-server.kube-system.svc" 2>/dev/null
    openssl x509 -req -in metrics-server.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
      -out metrics-server.crt -days 3650 -extfile ms.ext 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' > kwok.ext
    openssl req -newkey rsa:2048 -nodes -keyout kwok-serving.key -out kwok-serving.csr \
      -subj "/CN=kwok" 2>/dev/null
    openssl x509 -req -in kwok-serving.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
      -out kwok-serving.crt -days 3650 -extfile kwok.ext 2>/dev/null
    rm -f ./*.csr ms.ext kwok.ext
  )
}

# kube-apiserver's aggregation-layer flags, on one line for cluster.sh to append.
apiserver_args() {
  local p="$dir/pki"
  echo "--requestheader-client-ca-file $p/front-proxy-ca.crt" \
       "--requestheader-allowed-names front-proxy-client" \
       "--requestheader-username-headers X-Remote-User" \
       "--requestheader-group-headers X-Remote-Group" \
       "--requestheader-extra-headers-prefix X-Remote-Extra-" \
       "--proxy-client-cert-file $p/front-proxy-client.crt" \
       "--proxy-client-key-file $p/front-proxy-client.key"
}

kubectl_() { kubectl --kubeconfig "$dir/kubeconfig" "$@"; }

# kwok's stages for METRICS=1: the default ones (BIN/kwok-stages.yaml) with node-initialize
# also annotating each node with its own resource-metrics path. Every fake node shares
# kwok's one address, so metrics-server must ask for /metrics/nodes/NAME/metrics/resource
# (it honours the annotation metrics.k8s.io/resource-metrics-path); a node created by hand
# as in the README gets it without knowing. kwok's status template moves, unchanged, into
# a second step (a stage's statusTemplate and patches cannot be combined).
kwok_stages() {
  local src=$1 out=$2
  awk '
    /^---/ { in_init = 0; in_tmpl = 0 }
    /^  name: node-initialize$/ { in_init = 1 }
    in_init && /^  next:$/ { next }
    in_init && /^    statusTemplate: \|$/ {
      print "  steps:"
      print "  - patch:"
      print "      root: metadata"
      print "      type: merge"
      print "      template: |"
      print "        annotations:"
      print "          metrics.k8s.io/resource-metrics-path: \"/metrics/nodes/{{ .metadata.name }}/metrics/resource\""
      print "  - patch:"
      print "      subresource: status"
      print "      root: status"
      print "      template: |"
      in_tmpl = 1; next
    }
    in_tmpl && /^      / { print "  " $0; next }
    in_tmpl && /^$/ { print; next }
    { in_tmpl = 0; print }
  ' "$src" > "$out.tmp"
  grep -q 'resource-metrics-path' "$out.tmp" || die "node-initialize not found in $src"
  mv "$out.tmp" "$out"
}

# Before kwok starts (it reads them once): kwok's Metric and ClusterResourceUsage CRDs,
# the usage-from-annotation ClusterResourceUsage (kwok.x-k8s.io/usage-cpu and -memory, per
# container), and the /metrics/resource Metric with a small baseline on every node (1m cpu,
# 1Mi memory): metrics-server drops a node whose counter reads 0, so an empty node would
# have no metrics at all.
kwok_crds() {
  local b=$1 mod
  mod="$(go env GOMODCACHE)/sigs.k8s.io/kwok@$KWOK_VERSION/kustomize/metrics"
  [[ -d "$mod" ]] || die "kwok $KWOK_VERSION's module is not in the Go module cache ($mod): run hack/metrics.sh build"
  kubectl_ apply -f "$b/kwok-metrics-crds.yaml" >/dev/null
  kubectl_ wait --for=condition=Established --timeout=60s \
    crd/metrics.kwok.x-k8s.io crd/clusterresourceusages.kwok.x-k8s.io >/dev/null
  kubectl_ apply -f "$mod/usage/usage-from-annotation.yaml" >/dev/null
  sed -e "s|value: 'node.CumulativeUsage(\"cpu\")'|value: 'node.CumulativeUsage(\"cpu\") + node.SinceSecond() * 0.001'|" \
      -e "s|value: 'node.Usage(\"memory\")'|value: 'node.Usage(\"memory\") + 1048576.0'|" \
      "$mod/resource/metrics-resource.yaml" > "$dir/kwok-metric.yaml"
  grep -q 'SinceSecond() \* 0.001' "$dir/kwok-metric.yaml" || die "kwok's node cpu metric changed; update hack/metrics.sh"
  kubectl_ apply -f "$dir/kwok-metric.yaml" >/dev/null
}

readyz_ms() {
  curl -sf --max-time 2 --cacert "$dir/pki/ca.crt" "https://127.0.0.1:$1/livez" >/dev/null 2>&1
}

up() {
  local b port start
  b=$(build)
  start=$(date +%s)
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')
  log "starting metrics-server $METRICS_SERVER_VERSION on https://127.0.0.1:$port"
  setsid "$b/metrics-server" --secure-port "$port" --bind-address 127.0.0.1 \
    --tls-cert-file "$dir/pki/metrics-server.crt" --tls-private-key-file "$dir/pki/metrics-server.key" \
    --kubeconfig "$dir/kubeconfig" --authentication-kubeconfig "$dir/kubeconfig" \
    --authorization-kubeconfig "$dir/kubeconfig" \
    --kubelet-preferred-address-types InternalIP --kubelet-use-node-status-port \
    --kubelet-certificate-authority "$dir/pki/ca.crt" \
    --metric-resolution 10s --kubelet-request-timeout 5s \
    >"$dir/metrics-server.log" 2>&1 < /dev/null &
  echo $! > "$dir/metrics-server.pid"
  echo "$port" > "$dir/metrics-server.port"
  local i
  for i in $(seq 1 300); do
    readyz_ms "$port" && break
    pid_alive "$dir" metrics-server || { log "metrics-server exited; last lines of $dir/metrics-server.log:"; tail -5 "$dir/metrics-server.log" >&2; exit 1; }
    (( i % 50 == 0 )) && log "waiting for metrics-server /livez ($((i / 10))s)"
    sleep 0.1
  done
  readyz_ms "$port" || { log "metrics-server not live after 30s; see $dir/metrics-server.log"; exit 1; }
  # The API server reaches it through an ExternalName Service (no cluster network here):
  # the aggregator's resolver turns it into https://127.0.0.1:PORT, the APIService's port.
  kubectl_ apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Service
metadata: {name: metrics-server, namespace: kube-system}
spec: {type: ExternalName, externalName: 127.0.0.1}
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1beta1.metrics.k8s.io}
spec:
  group: metrics.k8s.io
  version: v1beta1
  service: {name: metrics-server, namespace: kube-system, port: $port}
  caBundle: $(base64 -w0 < "$dir/pki/ca.crt")
  groupPriorityMinimum: 100
  versionPriority: 100
YAML
  kubectl_ wait --for=condition=Available --timeout=60s apiservice/v1beta1.metrics.k8s.io >/dev/null \
    || { log "APIService v1beta1.metrics.k8s.io not Available; see $dir/metrics-server.log"; exit 1; }
  log "metrics.k8s.io served in $(( $(date +%s) - start ))s (a new node's usage shows ~20s after it is created)"
}

dir_arg() {
  [[ -n "${1:-}" ]] || { echo "usage: $0 $cmd DIR" >&2; exit 2; }
  mkdir -p "$1"
  dir=$(cd "$1" && pwd)
}

case "$cmd" in
  build) build ;;
  pki) dir_arg "${2:-}"; pki ;;
  apiserver-args) dir_arg "${2:-}"; apiserver_args ;;
  kwok-stages) kwok_stages "$2" "$3" ;;
  kwok-crds) dir_arg "${2:-}"; kwok_crds "$(build)" ;;
  up) dir_arg "${2:-}"; up ;;
  down) dir_arg "${2:-}"; pid_stop "$dir" metrics-server 5; rm -f "$dir/metrics-server.port" ;;
  *) echo "usage: $0 build | pki DIR | apiserver-args DIR | kwok-stages SRC OUT | kwok-crds DIR | up DIR | down DIR" >&2; exit 2 ;;
esac
