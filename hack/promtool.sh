#!/usr/bin/env bash
# promtool, built from Go modules at a pinned version into a cache outside git (as
# hack/build.sh builds the control plane), and the checks it runs on the shipped alerts.
#
#   hack/promtool.sh build     # build if needed (a cold build takes minutes); print the binary
#   hack/promtool.sh path      # print the binary if it is built; exit 1 otherwise
#   hack/promtool.sh test      # promtool check rules + test rules on manifests/monitoring/
#
# The rules live in manifests/monitoring/prometheusrule.yaml, a PrometheusRule whose spec
# is a plain Prometheus rule file: `test` writes that spec to a temporary rule file next
# to tests/monitoring/rules_test.yaml (which names it rules.yaml) and runs promtool there.
# Built with -tags remove_all_sd: promtool checks and tests rules without the service
# discovery plugins (the cloud SDKs), which would be most of the build.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
# The version is pinned in hack/promtool/go.mod (Prometheus's Go module version; v0.304.2
# is Prometheus 3.4.2), a module of its own with its own cache key.
PROMETHEUS_VERSION=$(awk '$1 == "require" && $2 == "github.com/prometheus/prometheus" {print $3}' "$here/promtool/go.mod")

cache_root=${POLSCHED_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/polsched}
key=$(cat "$here"/promtool/go.mod "$here"/promtool/go.sum | sha256sum | cut -c1-16)
bin="$cache_root/promtool-$key"
log() { printf '[hack/promtool %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "$*"; exit 1; }

build() {
  if [[ -x "$bin/promtool" ]]; then echo "$bin/promtool"; return 0; fi
  command -v go >/dev/null || die "go is not installed; install Go >= 1.26 first"
  mkdir -p "$cache_root"
  exec 7>"$bin.lock"
  if ! flock -n 7; then
    log "another build of $bin is under way; waiting for it"
    flock 7
    if [[ -x "$bin/promtool" ]]; then echo "$bin/promtool"; return 0; fi
  fi
  local start; start=$(date +%s)
  rm -rf "$bin.tmp" && mkdir -p "$bin.tmp"
  log "building promtool $PROMETHEUS_VERSION into $bin (a cold build downloads modules and compiles for minutes)"
  (cd "$here/promtool" && go mod download >&2)
  (cd "$here/promtool" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" \
    -tags remove_all_sd -o "$bin.tmp/promtool" github.com/prometheus/prometheus/cmd/promtool >&2) \
    || die "promtool build failed"
  [[ -x "$bin.tmp/promtool" ]] || die "promtool build failed: no binary"
  rm -rf "$bin" && mv "$bin.tmp" "$bin"
  log "done in $(( $(date +%s) - start ))s: $bin/promtool"
  echo "$bin/promtool"
}

run_tests() {
  local promtool
  promtool=$(build)
  # Global, not local: the EXIT trap runs after this function has returned (set -u).
  work=$(mktemp -d "${TMPDIR:-/tmp}/polsched-promtool-XXXXXX")
  trap 'rm -rf "$work"' EXIT
  python3 - "$root/manifests/monitoring/prometheusrule.yaml" "$work/rules.yaml" <<'PY'
import json, sys
import yaml
rule = yaml.safe_load(open(sys.argv[1]))
assert rule["kind"] == "PrometheusRule", rule["kind"]
with open(sys.argv[2], "w") as f:
    json.dump(rule["spec"], f)  # JSON is YAML: promtool reads it as a rule file
PY
  cp "$root/tests/monitoring/rules_test.yaml" "$work/"
  (cd "$work" && "$promtool" check rules rules.yaml && "$promtool" test rules rules_test.yaml)
}

case "${1:-}" in
  build) build ;;
  path) [[ -x "$bin/promtool" ]] && echo "$bin/promtool" ;;
  test) run_tests ;;
  *) echo "usage: $0 build|path|test" >&2; exit 2 ;;
esac
