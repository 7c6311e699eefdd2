#!/usr/bin/env bash
# make demo: on the local control plane, fake nodes, the operator, every example policy in
# policies/ (the extender one with the example extender running), pods for each, and a
# table of where each pod went and which scorer decided.
#
#   hack/demo.sh up     # after `make cluster`; idempotent; leaves everything running
#   hack/demo.sh down   # stop the operator and the extender this script started
#
# Environment:
#   POLSCHED_DEV_DIR               the cluster's directory (default .dev): kubeconfig, and
#                                  here the operator's and extender's pid and log files
#   POLSCHED_DEMO_EXTENDER_PORT    the example extender's port (default 8888)
#   POLSCHED_DEMO_METRICS_PORT     the operator's /metrics port (default 8080, or a free
#                                  port when 8080 is taken)
#
# With the Metrics API served (`make demo` starts the control plane with METRICS=1), the
# load-aware example too: three nodes get real usage (pods annotated with the usage kwok
# reports for them), and policies/load-aware.yaml places its pods on the least used.
#
# "Decided by" is the scorer whose weighted score put the chosen node furthest ahead of
# the runner-up, as the engine computed it for the real decision: the operator runs with
# --annotate-decisions, so each Binding carries it onto the pod as the annotation
# polsched.io/deciding-scorer (and polsched.io/feasible-nodes). Nothing is recomputed here.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
dev=${POLSCHED_DEV_DIR:-$root/.dev}
[[ "$dev" = /* ]] || dev=$root/$dev
export KUBECONFIG=$dev/kubeconfig
polsched=$root/.venv/bin/polsched
python=$root/.venv/bin/python
ns=polsched-demo
operator_ns=polsched-system
policies=(label-priority cel-rules bin-packing zone-spread gpu-isolation extender-example)

say() { printf '\n== %s\n' "$*"; }
die() { printf 'hack/demo.sh: %s\n' "$*" >&2; exit 1; }
k() { kubectl "$@" 2> >(grep -v '^WARNING: version difference' >&2); }

# A pid file's process, if it is alive and still the command we started (pids get reused).
running() {
  local pidfile=$1 what=$2 pid
  [[ -f "$pidfile" ]] || return 1
  pid=$(cat "$pidfile")
  kill -0 "$pid" 2>/dev/null && tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$what"
}

stop() {
  local pidfile=$1 what=$2 name=$3 pid
  if running "$pidfile" "$what"; then
    pid=$(cat "$pidfile")
    kill "$pid"
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    echo "stopped $name (pid $pid)"
  fi
  rm -f "$pidfile"
}

port_free() {
  "$python" -c 'import socket, sys; s=socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1])))' "$1" 2>/dev/null
}

free_port() {
  "$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

node() {  # name zone cpu [extra label lines...]
  local name=$1 zone=$2 cpu=$3; shift 3
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
    topology.kubernetes.io/zone: $zone
    type: kwok
$(for l in "$@"; do echo "    $l"; done)
status:
  allocatable: {cpu: "$cpu", memory: 16Gi, pods: "110"}
  capacity: {cpu: "$cpu", memory: 16Gi, pods: "110"}
NODE
}

pod() {  # name schedulerName cpu [extra YAML under spec, one line]
  local name=$1 sched=$2 cpu=$3 labels=${4:-} spec=${5:-}
  cat <<POD
---
apiVersion: v1
kind: Pod
metadata:
  name: $name
  namespace: $ns
  labels: {demo.polsched.io/policy: $sched${labels:+, $labels}}
spec:
  schedulerName: $sched
  terminationGracePeriodSeconds: 0
  containers:
    - name: app
      image: registry.k8s.io/pause:3.10
      resources: {requests: {cpu: $cpu, memory: 128Mi}}
${spec}
POD
}

# Wait until every named pod is bound, or (for names prefixed with "!") reported
# Unschedulable by the scheduler.
wait_pods() {
  local deadline=$((SECONDS + 60)) p name done_
  while :; do
    done_=1
    for p in "$@"; do
      name=${p#!}
      if [[ $p == !* ]]; then
        [[ $(k get pod -n "$ns" "$name" -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].reason}') == Unschedulable ]] || done_=
      else
        [[ -n $(k get pod -n "$ns" "$name" -o jsonpath='{.spec.nodeName}') ]] || done_=
      fi
      [[ -n $done_ ]] || break
    done
    [[ -n $done_ ]] && return 0
    ((SECONDS < deadline)) || die "pods not scheduled after 60s: $*; see $dev/operator.log"
    sleep 0.2
  done
}

# `kubectl wait --for=condition=Established` fails at once (".status.conditions accessor
# error: <nil>") on a CRD the API server still stores with status.conditions null, right
# after it is created; poll the condition instead.
wait_established() {
  local deadline=$((SECONDS + 60))
  until [[ $(k get crd "$1" -o jsonpath='{.status.conditions[?(@.type=="Established")].status}' 2>/dev/null) == True ]]; do
    ((SECONDS < deadline)) || die "CustomResourceDefinition $1 not Established after 60s"
    sleep 0.2
  done
}

up() {
  [[ -f "$KUBECONFIG" ]] || die "no cluster at $dev (run: make cluster, or make demo)"
  [[ -x "$polsched" ]] || die "no $polsched (run: make venv, or make demo)"

  say "CRD"
  k apply --server-side --force-conflicts -f "$root/crds/schedulingpolicy.yaml" >/dev/null
  wait_established schedulingpolicies.polsched.io
  echo "schedulingpolicies.polsched.io established"

  say "fake nodes (kwok keeps them Ready)"
  {
    node n-a1 zone-a 8 "priority.lixueduan.com: \"10\""
    node node-a2 zone-a 8 "priority.lixueduan.com: \"5\""
    node node-a3 zone-a 16
    node node-b1 zone-b 8 "priority.lixueduan.com: \"1\""
    node node-b2 zone-b 16
    node 10-9-101-66 zone-b 8          # the extender tutorial's node
    node gpu-1 zone-b 8 "nvidia.com/gpu.present: \"true\""
  } | k apply -f - >/dev/null
  k taint node gpu-1 nvidia.com/gpu=present:NoSchedule --overwrite >/dev/null
  k wait --for=condition=Ready node -l type=kwok --timeout=60s >/dev/null
  k get nodes -L topology.kubernetes.io/zone,priority.lixueduan.com,nvidia.com/gpu.present

  say "the operator and the example extender"
  k create namespace "$operator_ns" --dry-run=client -o yaml | k apply -f - >/dev/null
  local port
  if running "$dev/extender.pid" example_extender.py; then
    port=$(cat "$dev/extender.port")
    echo "example extender already running (pid $(cat "$dev/extender.pid"), port $port)"
  else
    port=${POLSCHED_DEMO_EXTENDER_PORT:-8888}
    setsid "$python" "$root/policies/extender/example_extender.py" --host 127.0.0.1 \
      --port "$port" >"$dev/extender.log" 2>&1 </dev/null &
    echo $! >"$dev/extender.pid"
    echo "$port" >"$dev/extender.port"
    for _ in $(seq 1 50); do
      curl -s -o /dev/null "http://127.0.0.1:$port/" && break  # any HTTP answer
      running "$dev/extender.pid" example_extender.py \
        || die "the example extender exited: $(tail -3 "$dev/extender.log")"
      sleep 0.1
    done
    echo "example extender on http://127.0.0.1:$port (pid $(cat "$dev/extender.pid"), log $dev/extender.log)"
  fi
  if running "$dev/operator.pid" "polsched run"; then
    echo "operator already running (pid $(cat "$dev/operator.pid"))"
  else
    # Metrics on 8080 unless something else has it (another operator, say).
    local metrics_port=${POLSCHED_DEMO_METRICS_PORT:-}
    if [[ -z $metrics_port ]]; then
      metrics_port=8080
      port_free 8080 || metrics_port=$(free_port)
    fi
    # A fixed identity: a restarted operator takes its lease back at once.
    setsid "$polsched" run --kubeconfig "$KUBECONFIG" --namespace "$operator_ns" \
      --identity polsched-demo --annotate-decisions --metrics-listen "127.0.0.1:$metrics_port" \
      >"$dev/operator.log" 2>&1 </dev/null &
    echo $! >"$dev/operator.pid"
    echo "operator started (pid $(cat "$dev/operator.pid"), log $dev/operator.log)"
  fi

  # Load-aware only where the Metrics API is served (make cluster METRICS=1).
  local load_aware=
  if k get apiservice v1beta1.metrics.k8s.io >/dev/null 2>&1; then
    load_aware=1
    policies+=(load-aware)
  fi

  say "example policies"
  local p
  for p in label-priority cel-rules bin-packing zone-spread gpu-isolation ${load_aware:+load-aware}; do
    k apply -f "$root/policies/$p.yaml" >/dev/null
  done
  sed "s#http://127.0.0.1:8888/#http://127.0.0.1:$port/#" "$root/policies/extender/policy.yaml" \
    | k apply -f - >/dev/null
  for p in "${policies[@]}"; do
    k wait --for=condition=Ready "schedulingpolicy/$p" --timeout=60s >/dev/null \
      || die "SchedulingPolicy $p not Ready; see kubectl describe spol $p and $dev/operator.log"
  done
  echo "all ${#policies[@]} Ready"

  say "pods (one group per policy, each waited for, so that later groups see earlier ones)"
  k create namespace "$ns" --dry-run=client -o yaml | k apply -f - >/dev/null
  local tolerate="  tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]"
  local spread="  topologySpreadConstraints: [{maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway, labelSelector: {matchLabels: {app: web}}}]"
  # Pods are immutable once bound: create the missing ones only.
  apply_pods() { k create -f - 2>&1 | grep -v -e AlreadyExists -e ' created$' >&2 || true; }
  { pod prio-1 label-priority 100m; pod prio-2 label-priority 100m; } | apply_pods
  wait_pods prio-1 prio-2
  { pod short cel-rules 100m "cel-rule: short-name"
    pod much-too-long cel-rules 100m "cel-rule: short-name"
    pod cel-any-name cel-rules 100m; } | apply_pods
  wait_pods short cel-any-name '!much-too-long'
  { pod pack-1 bin-packing 1; pod pack-2 bin-packing 1; pod pack-3 bin-packing 1; } | apply_pods
  wait_pods pack-1 pack-2 pack-3
  { for i in 1 2 3 4; do pod "web-$i" zone-spread 100m "app: web" "$spread"; done; } | apply_pods
  wait_pods web-1 web-2 web-3 web-4
  { pod gpu-train gpu-isolation 500m "workload: gpu" "$tolerate"
    pod cpu-batch gpu-isolation 500m; } | apply_pods
  wait_pods gpu-train cpu-batch
  { pod want-you extender-example 100m "want: you"; pod anyone extender-example 100m; } | apply_pods
  wait_pods want-you anyone
  [[ -z $load_aware ]] || load_aware_pods

  say "where each pod went, and which scorer decided"
  table
  say "kubectl get spol"
  wait_status
  k get spol
  cat <<EOF

The demo keeps running. Explore:
  export KUBECONFIG=$KUBECONFIG
  kubectl get spol                                   # policies, Ready, binds
  kubectl get pods -n $ns -o wide
  .venv/bin/polsched explain much-too-long -n $ns    # why a pod is Pending
  .venv/bin/polsched explain pack-2 -n $ns           # every node's filters and scores
  .venv/bin/polsched explain spread-1 -n $ns         # with METRICS: node usage, sample age
  kubectl edit spol label-priority                   # e.g. weight, or key: hot reload;
                                                     # then create a pod with schedulerName: label-priority
  tail -f $dev/operator.log
EOF
  if grep -q 'serving /metrics' "$dev/operator.log" 2>/dev/null; then
    echo "  curl -s $(grep -o 'on http://[^ ]*' "$dev/operator.log" | tail -1 | cut -c4-)/metrics | grep ^scheduler_"
  fi
  echo "Stop it all (operator, extender, control plane): make demo-down"
}

# Real usage on three nodes: a pod each (outside the demo's namespace, no requests) that
# kwok reports as using 6, 4 and 2 cpu; the Metrics API serves a new pod's usage after
# ~40 s. Then three load-aware pods go to the least used nodes.
load_aware_pods() {
  local load_ns=polsched-demo-load n cpu deadline=$((SECONDS + 120))
  k create namespace "$load_ns" --dry-run=client -o yaml | k apply -f - >/dev/null
  for n in node-a3:6 node-b2:4 node-a2:2; do
    cpu=${n#*:}; n=${n%%:*}
    cat <<POD
---
apiVersion: v1
kind: Pod
metadata:
  name: busy-$n
  namespace: $load_ns
  annotations: {kwok.x-k8s.io/usage-cpu: "$cpu", kwok.x-k8s.io/usage-memory: 4Gi}
spec:
  nodeName: $n
  terminationGracePeriodSeconds: 0
  containers: [{name: app, image: registry.k8s.io/pause:3.10}]
POD
  done | k create -f - 2>&1 | grep -v -e AlreadyExists -e ' created$' >&2 || true
  echo "node usage from the Metrics API (a new pod's usage shows after ~40 s):"
  until [[ $(k get --raw /apis/metrics.k8s.io/v1beta1/nodes/node-a2 2>/dev/null \
             | "$python" -c 'import json,sys; from polsched.framework.resources import parse_quantity as q; print(int(q(json.load(sys.stdin)["usage"]["cpu"]) >= 1.9))' 2>/dev/null) == 1 ]]; do
    ((SECONDS < deadline)) || die "the Metrics API does not serve the demo's usage after 120s; see $dev/metrics-server.log"
    sleep 2
  done
  k top nodes 2>/dev/null | sed 's/^/  /'
  # The scorers see usage only once the operator has polled it for every node: until the
  # policy's MetricsAvailable is True they give every node the same neutral score, and the
  # pods would tie (and could land on the busiest node).
  k wait --for=condition=MetricsAvailable spol/load-aware --timeout=120s >/dev/null \
    || die "SchedulingPolicy load-aware: MetricsAvailable not True after 120s; see kubectl describe spol load-aware and $dev/operator.log"
  # The condition may have been True before the usage above was served: wait for one more
  # successful poll of the operator's, which then reads it.
  local url polls
  url=$(grep -o 'serving /metrics.* on http://[^ ]*' "$dev/operator.log" | tail -1 | grep -o 'http://.*')
  if [[ -n $url ]]; then
    node_metrics_polls() { curl -s "$url/metrics" | awk '/^polsched_node_metrics_requests_total\{result="success"\}/ {print int($2)}'; }
    polls=$(node_metrics_polls)
    until [[ $(node_metrics_polls) -gt ${polls:-0} ]]; do
      ((SECONDS < deadline + 60)) || die "the operator did not poll the Metrics API again; see $dev/operator.log"
      sleep 1
    done
  fi
  { pod spread-1 load-aware 500m; pod spread-2 load-aware 500m; pod spread-3 load-aware 500m; } | apply_pods
  wait_pods spread-1 spread-2 spread-3
}

# Until each policy's status counts the demo's pods as they are: the operator writes
# status in batches (with six policies, up to about a second after the last bind), and
# the table of policies must agree with the table of pods above it. Not fatal: after
# 15 s the policies are shown as they are, with a note.
wait_status() {
  local deadline=$((SECONDS + 15)) pods spols
  while :; do
    pods=$(k get pods -n "$ns" -l demo.polsched.io/policy -o json)
    spols=$(k get spol -o json)
    PODS=$pods SPOLS=$spols "$python" -c '
import json, os, sys
want = {}
for p in json.loads(os.environ["PODS"])["items"]:
    counts = want.setdefault(p["spec"].get("schedulerName"), [0, 0])
    counts[0 if p["spec"].get("nodeName") else 1] += 1
for s in json.loads(os.environ["SPOLS"])["items"]:
    st = s.get("status") or {}
    if [st.get("boundPods", 0), st.get("pendingPods", 0)] != want.get(st.get("schedulerName"), [0, 0]):
        sys.exit(1)
' && return 0
    ((SECONDS < deadline)) || { echo "(the policies' status is not current after 15 s: shown as it is)"; return 0; }
    sleep 0.3
  done
}

table() {
  local zones
  zones=$(k get nodes -o jsonpath='{range .items[*]}{.metadata.name}={.metadata.labels.topology\.kubernetes\.io/zone}{" "}{end}')
  k get pods -n "$ns" -l demo.polsched.io/policy -o json \
    | ZONES=$zones POLICIES="${policies[*]}" "$python" -c '
import json, os, sys
zone = dict(kv.partition("=")[::2] for kv in os.environ["ZONES"].split())
order = {p: i for i, p in enumerate(os.environ["POLICIES"].split())}
rows = [("POD", "NODE (ZONE)", "POLICY", "FEASIBLE", "DECIDED BY")]
for p in sorted(json.load(sys.stdin)["items"],
                key=lambda p: (order.get(p["spec"].get("schedulerName"), 99), p["metadata"]["name"])):
    meta, spec = p["metadata"], p["spec"]
    ann = meta.get("annotations") or {}
    node = spec.get("nodeName")
    decided, feasible = ann.get("polsched.io/deciding-scorer"), ann.get("polsched.io/feasible-nodes", "")
    if not node:
        cond = {c["type"]: c for c in (p.get("status") or {}).get("conditions") or ()}
        msg = cond.get("PodScheduled", {}).get("message", "")
        node, decided = "<pending>", msg or "(not attempted yet)"
    elif decided is None:
        decided = "(not recorded: bound by an extender or before --annotate-decisions)"
    elif decided == "":
        decided = "(only feasible node)" if feasible.startswith("1/") else "(tie: picked at random)"
    if zone.get(node):
        node = f"{node} ({zone[node]})"
    rows.append((meta["name"], node, spec.get("schedulerName", ""), feasible, decided))
widths = [max(len(r[i]) for r in rows) for i in range(4)]
for r in rows:
    print("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[4])
'
}

down() {
  stop "$dev/operator.pid" "polsched run" operator
  stop "$dev/extender.pid" example_extender.py "example extender"
  rm -f "$dev/extender.port"
}

case "${1:-up}" in
  up) up ;;
  down) down ;;
  table) table ;;
  *) echo "usage: $0 up|down|table" >&2; exit 2 ;;
esac
