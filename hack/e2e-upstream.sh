#!/usr/bin/env bash
# Kubernetes' own [sig-scheduling] e2e tests, run against polsched as the only scheduler
# and against the real kube-scheduler on identical local clusters (kwok nodes), printed
# side by side, test by test (`make e2e-upstream`; docs/e2e-upstream.md).
#
#   hack/e2e-upstream.sh build        # build (or reuse) e2e.test; print its path
#   hack/e2e-upstream.sh run [DIR]    # the comparison; DIR (default /tmp/polsched-e2e-upstream)
#                                     # holds each run's cluster, logs and reports
#   hack/e2e-upstream.sh table DIR    # print the table of a finished run again
#   hack/e2e-upstream.sh kwok-stages IN OUT   # (hack/cluster.sh) IN's stages + ours
#
# e2e.test is built from k8s.io/kubernetes at the release pinned in hack/kube/go.mod,
# through the scratch module hack/e2e (go.mod, go.sum, tools.go), into the cache outside
# git (POLSCHED_CACHE_DIR, default ~/.cache/polsched) under a key hashed from the pins:
# built once (~10 minutes on 2 cores with the Go build cache hack/build.sh filled), then
# reused. Progress goes to stderr.
#
# `run` exits 1 when polsched fails a spec that kube-scheduler passes on the same cluster,
# 0 otherwise. Environment:
#   E2E_SUITES="default generic-workload"   which suites (below)
#   E2E_SCHEDULERS="polsched kube-scheduler"
#   E2E_JOBS=2       runs at a time, each on its own cluster (2: the two schedulers of a
#                    suite side by side; 1: one by one)
#   E2E_NODES=3      kwok nodes per cluster
#   E2E_SHORT=1      the short version (CI): the specs listed in short_focus below
#   E2E_FOCUS/E2E_SKIP  override a suite's ginkgo focus / skip (regular expressions)
# Suites:
#   default           focus \[sig-scheduling\], the specs on by default (28 in v1.37.1),
#                     upstream's default feature gates on every component
#   generic-workload  focus \[sig-scheduling\].*\[FeatureGate:GenericWorkload\] (7), with
#                     GenericWorkload=true on every component; the \[sig-scheduling\]
#                     prefix keeps out other SIGs' specs that share the gate (DRA kubelet
#                     plugins, Jobs with WorkloadWithJob), which need a kubelet.
# Skipped, because kwok cannot run them (no kubelet, no container runtime) or they are
# off by default: [Feature:OffByDefault] in the default suite (specs of gates that are off;
# the generic-workload suite runs the GenericWorkload ones with the gate on), [Flaky],
# [Disruptive] (they restart or break nodes). Nothing else is skipped: the cluster gives
# the suite what it looks for (hack/cluster.sh POLSCHED_E2E_UPSTREAM=1 and nodes() below).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
# shellcheck source=versions.env
source "$here/versions.env"
cache_root=${POLSCHED_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/polsched}

log() { printf '[hack/e2e-upstream %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "$*"; exit 1; }

# -- build ------------------------------------------------------------------------------

build() {
  local key out start ldflags minor pkg
  key=$(cat "$here/versions.env" "$here"/e2e/go.mod "$here"/e2e/go.sum "$here"/e2e/tools.go \
        | sha256sum | cut -c1-16)
  out="$cache_root/e2e-$key"
  if [[ -x "$out/e2e.test" ]]; then echo "$out/e2e.test"; return 0; fi
  command -v go >/dev/null || die "go is not installed; install Go >= 1.26 first"
  mkdir -p "$cache_root"
  # One build per key at a time; a second caller waits for it.
  exec 8>"$out.lock"
  if ! flock -n 8; then
    log "another build of $out is under way; waiting for it"
    flock 8
    if [[ -x "$out/e2e.test" ]]; then echo "$out/e2e.test"; return 0; fi
  fi
  # The control plane's binaries first: their build fills the Go build cache this one
  # reuses (most of test/e2e's packages are kube-apiserver's and the kubelet's).
  "$here/build.sh" >/dev/null
  start=$(date +%s)
  minor=${KUBE_VERSION#v1.}; minor=${minor%%.*}
  ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitTreeState=clean"
  done
  mkdir -p "$out.tmp"
  log "building e2e.test $KUBE_VERSION into $out (about 10 minutes on 2 cores once hack/build.sh has run; the binary is ~120 MB)"
  ( cd "$here/e2e" && go mod download 2>&1 | sed 's/^/  /' >&2 )
  # go test -c has no -v package list; a heartbeat says it is still compiling.
  ( while sleep 60; do log "still compiling e2e.test ($(( $(date +%s) - start ))s)"; done ) >&2 8>&- &
  local beat=$!
  # -vet=off: go test would vet every package of the suite first, for nothing here.
  if ! ( cd "$here/e2e" && CGO_ENABLED=0 go test -c -vet=off -trimpath -ldflags "$ldflags" \
           -o "$out.tmp/e2e.test" k8s.io/kubernetes/test/e2e ) >&2; then
    kill "$beat" 2>/dev/null || true
    die "e2e.test build failed"
  fi
  kill "$beat" 2>/dev/null || true
  rm -rf "$out" && mv "$out.tmp" "$out"
  log "built in $(( $(date +%s) - start ))s: $out/e2e.test"
  echo "$out/e2e.test"
}

# -- kwok stages ------------------------------------------------------------------------

# The stock stages hack/build.sh collected, without their pod-delete (ours replaces it),
# followed by hack/e2e/kwok-stages.yaml.
kwok_stages() {
  local in=$1 out=$2
  python3 - "$in" "$here/e2e/kwok-stages.yaml" "$out" <<'PY'
import sys, yaml
stock, ours, out = sys.argv[1:]
docs = [d for d in yaml.safe_load_all(open(stock)) if d]
mine = [d for d in yaml.safe_load_all(open(ours)) if d]
replaced = {d["metadata"]["name"] for d in mine}
keep = [d for d in docs if d["metadata"]["name"] not in replaced] + mine
with open(out + ".tmp", "w") as f:
    f.write("".join("---\n" + yaml.safe_dump(d, sort_keys=False) for d in keep))
import os; os.replace(out + ".tmp", out)
PY
}

# -- one cluster, one scheduler, one suite -----------------------------------------------

k() { kubectl --kubeconfig "$cdir/kubeconfig" "$@" 2> >(grep -v '^WARNING: version difference' >&2); }

# Nodes as a kubelet registers them: an InternalIP each (127.0.1.N: loopback-range, never
# bound; the hostPort tests only read it and need it to differ from 127.0.0.1, which one
# of them binds as a pod's hostIP), a hostname, and a kubelet's capacity. Each in a zone
# of its own (up to 3): the Multi-AZ specs skip themselves on a cluster of one zone.
nodes() {
  local i name zone
  for i in $(seq 1 "$nodes_n"); do
    name=e2e-node-$i zone=zone-$(( (i - 1) % 3 ))
    cat <<NODE
---
apiVersion: v1
kind: Node
metadata:
  name: $name
  annotations: {kwok.x-k8s.io/node: fake}
  labels:
    kubernetes.io/hostname: $name
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    topology.kubernetes.io/region: local
    topology.kubernetes.io/zone: $zone
    type: kwok
status:
  addresses:
  - {type: InternalIP, address: 127.0.1.$i}
  - {type: Hostname, address: $name}
  capacity: {cpu: "4", memory: 16Gi, pods: "110", ephemeral-storage: 100Gi}
  allocatable: {cpu: "4", memory: 16Gi, pods: "110", ephemeral-storage: 100Gi}
NODE
  done
}

# The per-node system pods the framework's WaitForTotalHealthy looks for before many
# tests (kube-proxy, fluentd-elasticsearch and node-problem-detector, as on the clusters
# the suite was written for); without them each such test first waits a minute. They
# request nothing, as DaemonSet pods of that kind on a kwok node would not matter either.
system_pods() {
  local i node what
  for i in $(seq 1 "$nodes_n"); do
    node=e2e-node-$i
    for what in kube-proxy fluentd-elasticsearch node-problem-detector; do
      cat <<POD
---
apiVersion: v1
kind: Pod
metadata:
  name: $what-$node
  namespace: kube-system
  labels: {k8s-app: $what}
spec:
  nodeName: $node
  priorityClassName: system-node-critical
  tolerations: [{operator: Exists}]
  containers:
  - {name: $what, image: registry.k8s.io/pause:3.10}
POD
    done
  done
}

wait_until() {  # seconds what command...
  local secs=$1 what=$2 deadline=$((SECONDS + $1)); shift 2
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || die "$what: not after ${secs}s (see $cdir)"
    sleep 0.5
  done
}

nodes_ready() {
  [[ $(k get nodes -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' \
       | grep -c True) -eq $nodes_n ]]
}

system_pods_running() {
  [[ $(k get pods -n kube-system -o jsonpath='{range .items[*]}{.status.phase}{"\n"}{end}' \
       | grep -c Running) -eq $((nodes_n * 3)) ]]
}

policy_ready() {
  [[ $(k get schedulingpolicy default-scheduler \
       -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}') == True ]]
}

crd_established() {
  [[ $(k get crd schedulingpolicies.polsched.io \
       -o jsonpath='{.status.conditions[?(@.type=="Established")].status}') == True ]]
}

suite_focus() {
  case $1 in
    default) echo "${E2E_FOCUS:-$default_focus}" ;;
    generic-workload) echo "${E2E_FOCUS:-$generic_focus}" ;;
  esac
}

suite_skip() {
  case $1 in
    default) echo "${E2E_SKIP:-\[Feature:OffByDefault\]|\[Flaky\]|\[Disruptive\]}" ;;
    generic-workload) echo "${E2E_SKIP:-\[Flaky\]|\[Disruptive\]}" ;;
  esac
}

# run_one SCHEDULER SUITE: its own cluster in $dir/SCHEDULER-SUITE; the ginkgo report in
# report.json there. Everything it starts is stopped before it returns.
run_one() {
  local sched=$1 suite=$2 bin out rc=0
  cdir="$dir/$sched-$suite"
  rm -rf "$cdir/report.json" "$cdir/e2e.log"
  mkdir -p "$cdir"
  if [[ $suite == generic-workload ]]; then
    export POLSCHED_FEATURE_GATES=GenericWorkload=true
  else
    unset POLSCHED_FEATURE_GATES
  fi
  trap 'stop_one' EXIT
  log "$sched/$suite: starting the cluster in $cdir"
  POLSCHED_E2E_UPSTREAM=1 "$here/cluster.sh" up "$cdir" 2>>"$cdir/setup.log"
  bin=$("$here/build.sh")
  nodes | k create -f - >/dev/null
  system_pods | k create -f - >/dev/null
  wait_until 60 "$nodes_n Ready nodes" nodes_ready
  wait_until 60 "the per-node system pods Running" system_pods_running
  if [[ $sched == polsched ]]; then
    # The admin's opt-in, all three layers: the CRD without its default-scheduler rule,
    # and the operator's flag (the webhook, when served, loads policies under it too).
    "$root/.venv/bin/python" -c 'import sys, yaml
from polsched.api.crd import crd_manifest_replacing_kube_scheduler as m
yaml.safe_dump(m(), sys.stdout)' | k apply --server-side -f - >/dev/null
    wait_until 60 "the SchedulingPolicy CRD Established" crd_established
    k create namespace polsched-system >/dev/null
    setsid "$root/.venv/bin/polsched" run --kubeconfig "$cdir/kubeconfig" \
      --namespace polsched-system --allow-default-scheduler-name --metrics-listen "" \
      >"$cdir/polsched.log" 2>&1 </dev/null &
    echo $! >"$cdir/polsched.pid"
    k apply -f - >/dev/null <<'POLICY'
apiVersion: polsched.io/v1alpha1
kind: SchedulingPolicy
metadata:
  name: default-scheduler
spec:
  schedulerName: default-scheduler
POLICY
    wait_until 120 "SchedulingPolicy default-scheduler Ready (see $cdir/polsched.log)" policy_ready
  else
    # kube-scheduler as cluster.sh starts it for a real node: upstream's defaults and the
    # cluster's feature gates. cluster.sh down stops it by its pid file.
    local gate_args=()
    [[ -z ${POLSCHED_FEATURE_GATES:-} ]] || gate_args=(--feature-gates "$POLSCHED_FEATURE_GATES")
    setsid "$bin/kube-scheduler" --kubeconfig "$cdir/kubeconfig" --leader-elect=false \
      --bind-address 127.0.0.1 --secure-port 0 --v=1 ${gate_args[@]+"${gate_args[@]}"} \
      >"$cdir/kube-scheduler.log" 2>&1 </dev/null &
    echo $! >"$cdir/kube-scheduler.pid"
  fi
  log "$sched/$suite: running e2e.test (log: $cdir/e2e.log)"
  local start=$SECONDS
  "$e2e" --kubeconfig "$cdir/kubeconfig" --provider skeleton \
    --ginkgo.focus "$(suite_focus "$suite")" --ginkgo.skip "$(suite_skip "$suite")" \
    --ginkgo.json-report "$cdir/report.json" --ginkgo.no-color --ginkgo.timeout 3h \
    --report-dir "$cdir/junit" --allowed-not-ready-nodes 0 --minStartupPods 0 \
    --dump-logs-on-failure=false \
    >"$cdir/e2e.log" 2>&1 || rc=$?
  log "$sched/$suite: e2e.test exited $rc after $((SECONDS - start))s"
  stop_one
  trap - EXIT
}

stop_one() {
  local pid
  if [[ -f "$cdir/polsched.pid" ]]; then
    pid=$(cat "$cdir/polsched.pid")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$cdir/polsched.pid"
  fi
  "$here/cluster.sh" down "$cdir" 2>>"$cdir/setup.log" || true
}

# -- the comparison ----------------------------------------------------------------------

table() {
  python3 - "$dir" "$suites" "$schedulers" <<'PY'
import json, os, sys
d, suites, scheds = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()

def outcomes(path):
    """spec name -> (state, seconds) from a ginkgo JSON report."""
    try:
        reports = json.load(open(path))
    except (OSError, ValueError):
        return None
    out = {}
    for suite in reports:
        for s in suite.get("SpecReports") or ():
            if s.get("LeafNodeType") != "It":
                continue
            name = " ".join([*(s.get("ContainerHierarchyTexts") or ()), s.get("LeafNodeText", "")])
            out[name] = (s.get("State", "?"), (s.get("RunTime") or 0) / 1e9)
    return out

regressions = 0
for suite in suites:
    res = {s: outcomes(os.path.join(d, f"{s}-{suite}", "report.json")) for s in scheds}
    ran = [r for r in res.values() if r]
    names = sorted({n for r in ran for n, (state, _) in r.items() if state != "skipped"})
    print(f"\n== {suite}: {len(names)} specs")
    print("  ".join(f"{s:>14}" for s in scheds) + "  spec")
    counts = {s: 0 for s in scheds}
    for n in names:
        cells = []
        for s in scheds:
            r = res[s]
            state, secs = (r or {}).get(n, ("no report" if r is None else "not run", 0.0))
            counts[s] += state == "passed"
            cells.append(f"{state} {secs:4.0f}s" if state in ("passed", "failed") else state)
        print("  ".join(f"{c:>14}" for c in cells) + "  " + n)
        if len(scheds) == 2 and "polsched" in scheds:
            p, o = [(res[s] or {}).get(n, ("no report",))[0] for s in scheds]
            if scheds[0] != "polsched":
                p, o = o, p
            if o == "passed" and p != "passed":
                regressions += 1
    print("  ".join(f"{str(counts[s]) + ' passed':>14}" for s in scheds))
    for s in scheds:
        if res[s] is None:
            print(f"  {s}: no report ({d}/{s}-{suite}/e2e.log)")
            regressions += s == "polsched"
if regressions:
    print(f"\npolsched failed {regressions} spec(s) that kube-scheduler passed")
sys.exit(1 if regressions else 0)
PY
}

default_focus='\[sig-scheduling\]'
generic_focus='\[sig-scheduling\].*\[FeatureGate:GenericWorkload\]'
# The short version (E2E_SHORT=1): one spec of each kind the scheduler decides (resource
# fit, hostPort, taints, node affinity, scoring, preemption), none of them one that waits
# out a 5-minute timeout to see a pod stay Pending (the 0.0.0.0 hostPort spec does).
short_focus='\[sig-scheduling\] (SchedulerPredicates validates (resource limits of pods that are allowed to run|that there is no conflict between pods with same hostPort but different hostIP|that taints-tolerations is respected if not matching|that required NodeAffinity setting is respected if matching)|SchedulerPreemption validates basic preemption works|SchedulerPriorities Pod should be preferably scheduled to nodes pod can tolerate)'

run() {
  dir=${1:-/tmp/polsched-e2e-upstream}
  mkdir -p "$dir"; dir=$(cd "$dir" && pwd)
  suites=${E2E_SUITES:-default generic-workload}
  schedulers=${E2E_SCHEDULERS:-polsched kube-scheduler}
  nodes_n=${E2E_NODES:-3}
  local max_jobs=${E2E_JOBS:-2} started=$SECONDS suite sched
  if [[ -n ${E2E_SHORT:-} ]]; then
    export E2E_FOCUS=${E2E_FOCUS:-$short_focus}
    suites=${E2E_SUITES:-default}
  fi
  [[ -x "$root/.venv/bin/polsched" ]] || die "no $root/.venv/bin/polsched (run: make venv)"
  e2e=$(build)
  # Up to E2E_JOBS runs at a time, each on its own cluster.
  for suite in $suites; do
    for sched in $schedulers; do
      while (( $(jobs -rp | wc -l) >= max_jobs )); do wait -n || true; done
      ( run_one "$sched" "$suite" ) &
    done
  done
  wait || true
  log "all runs done in $((SECONDS - started))s; reports in $dir/*/report.json"
  table
}

case ${1:-} in
  build) build ;;
  run) shift; run "$@" ;;
  table)
    dir=$(cd "${2:?usage: $0 table DIR}" && pwd)
    suites=${E2E_SUITES:-default generic-workload}
    schedulers=${E2E_SCHEDULERS:-polsched kube-scheduler}
    table ;;
  kwok-stages) kwok_stages "$2" "$3" ;;
  *) echo "usage: $0 build | run [DIR] | table DIR | kwok-stages IN OUT" >&2; exit 2 ;;
esac
