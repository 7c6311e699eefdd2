#!/usr/bin/env bash
# Builds the local control plane's binaries from Go modules at the versions pinned in
# hack/versions.env, into a cache outside git, and prints the directory that holds them.
# A second run with the same pins returns at once. Progress goes to stderr.
#
#   hack/build.sh            # build if needed, print the bin directory
#   POLSCHED_CACHE_DIR=...   # where the cache lives (default ~/.cache/polsched)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"

cache_root=${POLSCHED_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/polsched}
key=$(cat "$here/versions.env" "$here"/kube/go.mod "$here"/kube/go.sum \
      "$here"/etcd/go.mod "$here"/etcd/go.sum "$here"/etcd/main.go | sha256sum | cut -c1-16)
bin="$cache_root/bin-$key"

log() { printf '[hack/build %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# kwok's stage files (node initialize + lease heartbeat, pod ready/complete/delete) ship
# inside its module; collect them into one config file next to the binary.
kwok_stages() {
  local out=$1 src
  src="$(go env GOMODCACHE)/sigs.k8s.io/kwok@$KWOK_VERSION/kustomize/stage"
  [[ -d "$src" ]] || (cd "$here/etcd" && GOFLAGS=-mod=mod go mod download "sigs.k8s.io/kwok@$KWOK_VERSION" >&2)
  : > "$out.tmp"
  for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
           pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
    { echo "---"; cat "$src/$f"; } >> "$out.tmp"
  done
  mv "$out.tmp" "$out"
}

if [[ -x "$bin/kube-apiserver" && -x "$bin/kube-scheduler" && -x "$bin/kube-controller-manager" \
      && -x "$bin/etcd" && -x "$bin/kwok" ]]; then
  [[ -f "$bin/kwok-stages.yaml" ]] || kwok_stages "$bin/kwok-stages.yaml"
  echo "$bin"
  exit 0
fi

command -v go >/dev/null || { log "go is not installed; install Go >= 1.26 first"; exit 1; }
# One build per cache key at a time: test sessions started side by side (each e2e session
# calls this script) wait for the build under way instead of racing it into $bin.tmp.
mkdir -p "$cache_root"
exec 9>"$bin.lock"
if ! flock -n 9; then
  log "another build of $bin is under way; waiting for it"
  flock 9
  if [[ -x "$bin/kube-apiserver" && -x "$bin/kube-scheduler" && -x "$bin/kube-controller-manager" \
        && -x "$bin/etcd" && -x "$bin/kwok" ]]; then
    echo "$bin"
    exit 0
  fi
fi
mkdir -p "$bin.tmp"
start=$(date +%s)

# go build -v names each package as it compiles it; turn that into one line per 100.
progress() {
  local what=$1 n=0
  while IFS= read -r line; do
    case "$line" in
      *" "*|*:*) printf '%s\n' "$line" >&2 ;;  # errors and warnings pass through
      *) n=$((n + 1)); (( n % 100 == 0 )) && log "$what: $n packages compiled ($(( $(date +%s) - start ))s)";;
    esac
  done
  log "$what: $n packages compiled"
}

minor=${KUBE_VERSION#v1.}; minor=${minor%%.*}
build_date=$(date -u -d "@${SOURCE_DATE_EPOCH:-0}" +%Y-%m-%dT%H:%M:%SZ)
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$build_date"
done

log "building kube-apiserver, kube-controller-manager and kube-scheduler $KUBE_VERSION into $bin (a cold build downloads modules and takes 10-25 minutes on 2 cores)"
( cd "$here/kube" && go mod download 2>&1 | sed 's/^/  /' >&2 )
log "modules downloaded ($(( $(date +%s) - start ))s); compiling"
( cd "$here/kube" && CGO_ENABLED=0 go build -v -trimpath -ldflags "$ldflags" -o "$bin.tmp/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kube-controller-manager 2>&1 ) | progress kube
[[ -x "$bin.tmp/kube-apiserver" && -x "$bin.tmp/kube-scheduler" && -x "$bin.tmp/kube-controller-manager" ]] || { log "kube build failed"; exit 1; }

log "building etcd $ETCD_VERSION"
( cd "$here/etcd" && CGO_ENABLED=0 go build -v -trimpath -ldflags "-s -w" -o "$bin.tmp/etcd" . 2>&1 ) | progress etcd
[[ -x "$bin.tmp/etcd" ]] || { log "etcd build failed"; exit 1; }

log "building kwok $KWOK_VERSION"
( CGO_ENABLED=0 GOBIN="$bin.tmp" go install -v -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" 2>&1 ) | progress kwok
[[ -x "$bin.tmp/kwok" ]] || { log "kwok build failed"; exit 1; }
kwok_stages "$bin.tmp/kwok-stages.yaml"

rm -rf "$bin" && mv "$bin.tmp" "$bin"
log "done in $(( $(date +%s) - start ))s: $bin"
echo "$bin"
