#!/usr/bin/env bash
# Builds helm (v4, from Go modules through the Go module proxy) at the version pinned in
# hack/helm.env (HELM_VERSION), into the cache outside git that hack/build.sh uses,
# and prints the binary's path. A second run with the same pin returns at once. Progress
# goes to stderr. The chart's tests (tests/unit/test_chart.py) and `make release` use it.
#
#   hack/helm.sh             # build if needed, print the path of helm
#   POLSCHED_CACHE_DIR=...   # where the cache lives (default ~/.cache/polsched)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# HELM_VERSION: the newest helm v4 that the Go module proxy served when pinned
# (`go list -m -versions helm.sh/helm/v4`).
HELM_VERSION=$(sed -n 's/^HELM_VERSION=//p' "$here/helm.env")
[[ -n "$HELM_VERSION" ]] || { echo "hack/helm.sh: no HELM_VERSION in hack/helm.env" >&2; exit 1; }

cache_root=${POLSCHED_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/polsched}
# Keyed by the pin alone: helm's own go.mod/go.sum (in its module zip, checked against the
# checksum database) fix every dependency, so nothing else here changes the binary.
dir="$cache_root/helm-$HELM_VERSION"
helm="$dir/helm"

log() { printf '[hack/helm %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

[[ -x "$helm" ]] && { echo "$helm"; exit 0; }

command -v go >/dev/null || { log "go is not installed; install Go >= 1.26 first"; exit 1; }
mkdir -p "$cache_root"
# One build per pin at a time: a test session and `make release` started side by side
# wait for the build under way instead of racing it into $dir.tmp.
exec 9>"$dir.lock"
if ! flock -n 9; then
  log "another build of helm $HELM_VERSION is under way; waiting for it"
  flock 9
  [[ -x "$helm" ]] && { echo "$helm"; exit 0; }
fi
rm -rf "$dir.tmp" && mkdir -p "$dir.tmp"
start=$(date +%s)

# go build -v names each package as it compiles it; one line per 100 of them.
progress() {
  local n=0
  while IFS= read -r line; do
    case "$line" in
      *" "*|*:*) printf '%s\n' "$line" >&2 ;;  # errors, warnings and downloads pass through
      *) n=$((n + 1)); (( n % 100 == 0 )) && log "helm: $n packages compiled ($(( $(date +%s) - start ))s)";;
    esac
  done
  log "helm: $n packages compiled"
}

log "building helm $HELM_VERSION into $dir (a cold build downloads modules and takes 3-8 minutes on 2 cores)"
# `go install pkg@version` resolves with helm's own go.mod, outside any module here (the
# repo has none at its root), and works with an empty module cache. The version ldflags
# are what helm's Makefile sets for a tagged build, so `helm version` names the pin.
ldflags="-s -w -X helm.sh/helm/v4/internal/version.version=$HELM_VERSION"
ldflags+=" -X helm.sh/helm/v4/internal/version.gitTreeState=clean"
( cd "$dir.tmp" && GOFLAGS=-mod=mod CGO_ENABLED=0 GOBIN="$dir.tmp" \
    go install -v -trimpath -ldflags "$ldflags" "helm.sh/helm/v4/cmd/helm@$HELM_VERSION" 2>&1 ) | progress
[[ -x "$dir.tmp/helm" ]] || { log "helm build failed"; exit 1; }
"$dir.tmp/helm" version --short >&2
rm -rf "$dir" && mv "$dir.tmp" "$dir"
log "done in $(( $(date +%s) - start ))s: $helm"
echo "$helm"
