#!/usr/bin/env bash
# The local control plane: etcd, kube-apiserver (RBAC, client-certificate auth),
# kube-controller-manager (namespace, garbage-collector, service-account, statefulset,
# ephemeral-volume, persistent-volume binder and resourceclaim controllers only) and kwok, on free 127.0.0.1 ports, with an admin kubeconfig. There is no kubelet:
# kwok plays the nodes. Pods need no ServiceAccount (the ServiceAccount admission plugin
# is off), so a test may create pods right after creating their namespace. New nodes get
# no node.kubernetes.io/not-ready taint (TaintNodesByCondition is off): without a node
# lifecycle controller nothing would ever lift it.
#
#   hack/cluster.sh up   [DIR]   # start (idempotent); DIR defaults to .dev
#   hack/cluster.sh down [DIR]   # stop everything started for DIR, leave no process behind
#   hack/cluster.sh status [DIR]
#
# DIR/kubeconfig is the admin kubeconfig (user polsched-admin in group system:masters).
# kube-apiserver presents DIR/pki/webhook-client.crt to admission webhooks (signed by
# DIR/pki/webhook-client-ca.crt; DIR/admission.yaml), as an admin configures it for
# polsched's --webhook-client-ca.
# Environment: POLSCHED_NO_KWOK=1 skips kwok; POLSCHED_APISERVER_ARGS and
# POLSCHED_KCM_ARGS add flags to kube-apiserver and kube-controller-manager.
# POLSCHED_FEATURE_GATES (`make cluster FEATURE_GATES=GenericWorkload=true`), a
# comma-separated list of Name=true|false, goes as --feature-gates to kube-apiserver,
# kube-controller-manager and kube-scheduler; with GenericWorkload=true kube-apiserver
# also gets --runtime-config=scheduling.k8s.io/v1beta1=true, because v1.37 serves
# Workload and PodGroup only there and keeps that beta version off by default
# (pkg/controlplane/instance.go betaAPIGroupVersionsDisabledByDefault;
# pkg/registry/scheduling/rest/storage_scheduling.go also wants the gate); with
# CompositePodGroup=true also scheduling.k8s.io/v1alpha3=true, the only (alpha, off by
# default) version that serves CompositePodGroup. Unset, every
# command line is exactly upstream's defaults. The gates are kept in DIR/feature-gates:
# `up` with other gates than the running cluster's restarts it.
# POLSCHED_REAL_NODE=1 (`make cluster REAL_NODE=1`) adds a real node (hack/node.sh: a
# kubelet, containerd, runc, the CNI bridge; root only) next to the kwok ones, and what
# real pods need: ServiceAccount tokens (admission + root CA publisher), Deployments and
# ReplicaSets, Endpoints and EndpointSlices, and --enable-aggregator-routing so that the
# API server calls webhook Services through their endpoints (there is no kube-proxy).
# POLSCHED_METRICS=1 (`make cluster METRICS=1`) adds the Metrics API (hack/metrics.sh):
# kube-apiserver's aggregation flags, kwok with its Metric/ClusterResourceUsage CRDs and a
# TLS kubelet endpoint on a free port, metrics-server and the APIService
# v1beta1.metrics.k8s.io. Not with POLSCHED_REAL_NODE=1: its --enable-aggregator-routing
# sends the APIService to Service endpoints, which may not be loopback addresses, and
# ExternalName Services are then unsupported (see docs/load-aware.md).
# POLSCHED_E2E_UPSTREAM=1 (hack/e2e-upstream.sh) adds what Kubernetes' own e2e tests need
# of the cluster: the replicaset, replicationcontroller, deployment and
# root-ca-cert-publisher controllers (the framework waits for each test namespace's
# kube-root-ca.crt), kube-apiserver's --allow-privileged=true (the GenericWorkload specs
# create privileged pods), and kwok stages that act as a kubelet does where the tests
# look (hack/e2e/kwok-stages.yaml: PodScheduled on nodeName-bound pods, deleted pods
# held for their grace period while a preStop hook runs, finalizers kept).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
cmd=${1:-up}
dir=${2:-$root/.dev}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
# shellcheck source=procs.sh
source "$here/procs.sh"

log() { printf '[hack/cluster %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

alive() { pid_alive "$dir" "$1"; }

gates=${POLSCHED_FEATURE_GATES:-}
gate_args=()
apiserver_gate_args=()
generic_workload=false
composite_pod_group=false
if [[ -n "$gates" ]]; then
  IFS=',' read -r -a _items <<< "$gates"
  for _item in "${_items[@]}"; do
    if [[ ! "$_item" =~ ^[A-Za-z][A-Za-z0-9]*=(true|false)$ ]]; then
      log "FEATURE_GATES (POLSCHED_FEATURE_GATES): '$_item' is not Name=true|false in '$gates'"
      exit 2
    fi
  done
  gate_args=(--feature-gates "$gates")
  apiserver_gate_args=(--feature-gates "$gates")
  # The last setting of a gate wins, as in component-base's flag parsing.
  for _item in "${_items[@]}"; do
    if [[ "${_item%%=*}" == GenericWorkload ]]; then generic_workload=${_item#*=}; fi
    if [[ "${_item%%=*}" == CompositePodGroup ]]; then composite_pod_group=${_item#*=}; fi
  done
  runtime_config=()
  if [[ "$generic_workload" == true ]]; then runtime_config+=(scheduling.k8s.io/v1beta1=true); fi
  # CompositePodGroup is served only as scheduling.k8s.io/v1alpha3, an alpha version
  # that kube-apiserver keeps off unless --runtime-config names it.
  if [[ "$composite_pod_group" == true ]]; then runtime_config+=(scheduling.k8s.io/v1alpha3=true); fi
  if ((${#runtime_config[@]})); then
    apiserver_gate_args+=(--runtime-config "$(IFS=,; echo "${runtime_config[*]}")")
  fi
fi
stop_one() { pid_stop "$dir" "$1" 5; }

down() {
  if [[ -d "$dir/node" ]]; then "$here/node.sh" down "$dir" || true; fi
  "$here/metrics.sh" down "$dir" 2>/dev/null || true
  stop_one kwok
  stop_one kube-scheduler
  stop_one kube-controller-manager
  stop_one kube-apiserver
  stop_one etcd
  rm -rf "$dir/etcd-data" "$dir/kubeconfig" "$dir/feature-gates"
  log "stopped (state in $dir removed)"
}

readyz() {
  local port=$1
  curl -sf --max-time 2 --cacert "$dir/pki/ca.crt" --cert "$dir/pki/admin.crt" \
    --key "$dir/pki/admin.key" "https://127.0.0.1:$port/readyz" >/dev/null 2>&1
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

pki() {
  local p="$dir/pki"
  [[ -f "$p/admin.crt" ]] && return 0
  mkdir -p "$p"
  log "generating certificates in $p"
  (
    cd "$p"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 \
      -subj "/CN=polsched-local-ca" 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr \
      -subj "/CN=kube-apiserver" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:10.0.0.1\n' > san.ext
    openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
      -out apiserver.crt -days 3650 -extfile san.ext 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -keyout admin.key -out admin.csr \
      -subj "/O=system:masters/CN=polsched-admin" 2>/dev/null
    openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
      -out admin.crt -days 3650 2>/dev/null
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    rm -f ./*.csr san.ext
  )
}

# The API server authenticates itself to admission webhooks with a client certificate
# (docs/security.md, "Who may reach the webhook"): its own CA, apart from the cluster's
# (which signs the users' certificates), so a webhook that trusts only it
# (--webhook-client-ca DIR/pki/webhook-client-ca.crt) serves the API server and no one
# else. The AdmissionConfiguration names it for every webhook ("*"); a webhook that asks
# for no client certificate is not sent one.
webhook_client() {
  local p="$dir/pki"
  if [[ ! -f "$p/webhook-client.crt" ]]; then
    (
      cd "$p"
      openssl req -x509 -newkey rsa:2048 -nodes -keyout webhook-client-ca.key \
        -out webhook-client-ca.crt -days 3650 -subj "/CN=polsched-local-webhook-client-ca" 2>/dev/null
      openssl req -newkey rsa:2048 -nodes -keyout webhook-client.key -out webhook-client.csr \
        -subj "/CN=kube-apiserver-webhook-client" 2>/dev/null
      printf 'extendedKeyUsage=clientAuth\n' > client.ext
      openssl x509 -req -in webhook-client.csr -CA webhook-client-ca.crt \
        -CAkey webhook-client-ca.key -CAcreateserial -out webhook-client.crt -days 3650 \
        -extfile client.ext 2>/dev/null
      rm -f webhook-client.csr client.ext
    )
  fi
  cat > "$dir/webhook-kubeconfig.yaml" <<KC
apiVersion: v1
kind: Config
users:
- name: "*"
  user:
    client-certificate: $p/webhook-client.crt
    client-key: $p/webhook-client.key
KC
  cat > "$dir/admission.yaml" <<AC
apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: ValidatingAdmissionWebhook
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: $dir/webhook-kubeconfig.yaml
- name: MutatingAdmissionWebhook
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: $dir/webhook-kubeconfig.yaml
AC
}

kubeconfig() {
  local port=$1 b64="base64 -w0"
  cat > "$dir/kubeconfig.tmp" <<KC
apiVersion: v1
kind: Config
clusters:
- name: polsched-local
  cluster:
    server: https://127.0.0.1:$port
    certificate-authority-data: $($b64 < "$dir/pki/ca.crt")
users:
- name: polsched-admin
  user:
    client-certificate-data: $($b64 < "$dir/pki/admin.crt")
    client-key-data: $($b64 < "$dir/pki/admin.key")
contexts:
- name: polsched-local
  context: {cluster: polsched-local, user: polsched-admin}
current-context: polsched-local
KC
  mv "$dir/kubeconfig.tmp" "$dir/kubeconfig"
}

up() {
  if alive etcd && alive kube-apiserver && alive kube-controller-manager \
      && [[ -f "$dir/apiserver.port" ]] \
      && [[ "$(cat "$dir/feature-gates" 2>/dev/null)" == "$gates" ]] \
      && readyz "$(cat "$dir/apiserver.port")"; then
    if [[ -n "${POLSCHED_NO_KWOK:-}" ]] || alive kwok; then
      if { [[ -z "${POLSCHED_REAL_NODE:-}" ]] || alive kube-scheduler; } \
          && { [[ -z "${POLSCHED_METRICS:-}" ]] || alive metrics-server; }; then
        [[ -z "${POLSCHED_REAL_NODE:-}" ]] || "$here/node.sh" up "$dir"
        log "already running: $dir/kubeconfig"
        return 0
      fi
    fi
  fi
  if [[ -n "${POLSCHED_METRICS:-}" && -n "${POLSCHED_REAL_NODE:-}" ]]; then
    log "METRICS=1 with REAL_NODE=1 is not supported: the real node's --enable-aggregator-routing resolves the metrics APIService to Service endpoints, which refuse loopback addresses; use one or the other (docs/load-aware.md)"
    exit 2
  fi
  down 2>/dev/null || true
  local bin start metrics_args="" kwok_args="" kwok_config
  start=$(date +%s)
  bin=$("$here/build.sh")
  kwok_config="$bin/kwok-stages.yaml"
  [[ -z "${POLSCHED_METRICS:-}" ]] || "$here/metrics.sh" build >/dev/null
  # A start that fails half-way leaves nothing running.
  trap 'down >/dev/null 2>&1' ERR
  pki
  webhook_client
  if [[ -n "${POLSCHED_METRICS:-}" ]]; then
    "$here/metrics.sh" pki "$dir"
    metrics_args=$("$here/metrics.sh" apiserver-args "$dir")
  fi
  local etcd_port peer_port api_port admission=ServiceAccount,TaintNodesByCondition
  local controllers=namespace,garbagecollector,serviceaccount,serviceaccount-token,statefulset,ephemeral-volume,persistentvolume-binder,pvc-protection,pv-protection
  # DRA (issue 28): the resourceclaim controller creates a pod's ResourceClaims from its
  # ResourceClaimTemplates (and records them in status.resourceClaimStatuses), and removes
  # a finished pod from a claim's reservedFor, as in a real cluster.
  controllers+=,resourceclaim-controller
  local real_args="" e2e_args="" c
  if [[ -n "${POLSCHED_E2E_UPSTREAM:-}" ]]; then
    for c in root-ca-cert-publisher deployment replicaset replicationcontroller; do
      [[ ",$controllers," == *",$c,"* ]] || controllers+=",$c"
    done
    e2e_args="--allow-privileged=true"
    "$here/e2e-upstream.sh" kwok-stages "$bin/kwok-stages.yaml" "$dir/kwok-stages.yaml"
    kwok_config="$dir/kwok-stages.yaml"
  fi
  if [[ "$generic_workload" == true ]]; then
    # kube-apiserver's PodGroupProtection admission stamps the finalizer
    # scheduling.k8s.io/podgroup-protection on every PodGroup; only this controller lifts
    # it, so without it a deleted PodGroup (and its namespace) never goes away.
    controllers+=,podgroup-protection-controller
  fi
  if [[ -n "${POLSCHED_REAL_NODE:-}" ]]; then
    admission=TaintNodesByCondition
    for c in root-ca-cert-publisher deployment replicaset endpoint endpointslice; do
      [[ ",$controllers," == *",$c,"* ]] || controllers+=",$c"
    done
    real_args="--enable-aggregator-routing=true --kubelet-client-certificate $dir/pki/admin.crt --kubelet-client-key $dir/pki/admin.key"
  fi
  etcd_port=$(free_port); peer_port=$(free_port); api_port=$(free_port)
  log "starting etcd on 127.0.0.1:$etcd_port"
  # --unsafe-no-fsync: a throwaway test store; fsync would dominate bind latency.
  setsid "$bin/etcd" --name polsched --data-dir "$dir/etcd-data" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" \
    --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$peer_port" \
    --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
    --initial-cluster "polsched=http://127.0.0.1:$peer_port" \
    --unsafe-no-fsync --quota-backend-bytes 8589934592 --log-level warn \
    >"$dir/etcd.log" 2>&1 < /dev/null &
  echo $! > "$dir/etcd.pid"
  log "starting kube-apiserver on https://127.0.0.1:$api_port"
  # shellcheck disable=SC2086
  setsid "$bin/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$etcd_port" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$api_port" \
    --tls-cert-file "$dir/pki/apiserver.crt" --tls-private-key-file "$dir/pki/apiserver.key" \
    --client-ca-file "$dir/pki/ca.crt" \
    --admission-control-config-file "$dir/admission.yaml" \
    --service-account-key-file "$dir/pki/sa.pub" \
    --service-account-signing-key-file "$dir/pki/sa.key" \
    --service-account-issuer https://kubernetes.default.svc \
    --authorization-mode RBAC --service-cluster-ip-range 10.0.0.0/24 \
    --endpoint-reconciler-type none \
    --disable-admission-plugins "$admission" $real_args $e2e_args \
    --max-requests-inflight 2000 --max-mutating-requests-inflight 1000 \
    --enable-priority-and-fairness=false \
    --profiling=false --v=0 $metrics_args ${apiserver_gate_args[@]+"${apiserver_gate_args[@]}"} \
    ${POLSCHED_APISERVER_ARGS:-} \
    >"$dir/kube-apiserver.log" 2>&1 < /dev/null &
  echo $! > "$dir/kube-apiserver.pid"
  echo "$api_port" > "$dir/apiserver.port"
  for i in $(seq 1 600); do
    if readyz "$api_port"; then break; fi
    if ! alive kube-apiserver; then
      log "kube-apiserver exited; last lines of $dir/kube-apiserver.log:"; grep -E "^[EF][0-9]{4}" "$dir/kube-apiserver.log" | tail -5 >&2; tail -5 "$dir/kube-apiserver.log" >&2; exit 1
    fi
    if ! alive etcd; then
      log "etcd exited; last lines of $dir/etcd.log:"; tail -20 "$dir/etcd.log" >&2; exit 1
    fi
    (( i % 20 == 0 )) && log "waiting for /readyz ($((i / 10))s)"
    sleep 0.1
  done
  readyz "$api_port" || { log "kube-apiserver not ready after 60s; see $dir/kube-apiserver.log"; exit 1; }
  kubeconfig "$api_port"
  printf '%s' "$gates" > "$dir/feature-gates"
  # The PV binder binds claims as in a real cluster: Immediate claims at once,
  # WaitForFirstConsumer claims once the scheduler's PreBind has set the chosen PV's
  # claimRef (or annotated the claim with volume.kubernetes.io/selected-node for a
  # provisioner). The statefulset and ephemeral-volume controllers create the claims of
  # volumeClaimTemplates and of generic ephemeral volumes.
  log "starting kube-controller-manager (namespace, garbagecollector, serviceaccount, statefulset, ephemeral-volume, persistentvolume-binder, resourceclaim)"
  # POLSCHED_KCM_ARGS: extra flags (the bench's DRA workload raises the client budget).
  # shellcheck disable=SC2086
  setsid "$bin/kube-controller-manager" --kubeconfig "$dir/kubeconfig" \
    --controllers "$controllers" \
    --service-account-private-key-file "$dir/pki/sa.key" --root-ca-file "$dir/pki/ca.crt" \
    --leader-elect=false --bind-address 127.0.0.1 --secure-port 0 --v=0 \
    ${gate_args[@]+"${gate_args[@]}"} ${POLSCHED_KCM_ARGS:-} \
    >"$dir/kube-controller-manager.log" 2>&1 < /dev/null &
  echo $! > "$dir/kube-controller-manager.pid"
  if [[ -z "${POLSCHED_NO_KWOK:-}" ]]; then
    kwok_args="--server-address=127.0.0.1:0"
    if [[ -n "${POLSCHED_METRICS:-}" ]]; then
      # kwok serves every fake node's /metrics/resource on one TLS port, a free one (other
      # clusters run beside this one); nodes advertise it as their kubelet port.
      local kwok_port
      kwok_port=$(free_port)
      "$here/metrics.sh" kwok-crds "$dir"
      "$here/metrics.sh" kwok-stages "$bin/kwok-stages.yaml" "$dir/kwok-stages.yaml"
      kwok_config="$dir/kwok-stages.yaml"
      kwok_args="--server-address=127.0.0.1:$kwok_port --node-ip=127.0.0.1 --node-port=$kwok_port"
      kwok_args+=" --tls-cert-file=$dir/pki/kwok-serving.crt --tls-private-key-file=$dir/pki/kwok-serving.key"
      kwok_args+=" --enable-crds=Metric,ClusterResourceUsage"
    fi
    log "starting kwok (keeps fake nodes Ready, moves bound pods to Running)"
    # Nodes opt in with the annotation kwok.x-k8s.io/node=fake, as kwok's docs do.
    # shellcheck disable=SC2086
    setsid "$bin/kwok" --kubeconfig "$dir/kubeconfig" --config "$kwok_config" \
      --manage-all-nodes=false \
      --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
      --node-lease-duration-seconds=40 \
      $kwok_args \
      >"$dir/kwok.log" 2>&1 < /dev/null &
    echo $! > "$dir/kwok.pid"
  fi
  [[ -z "${POLSCHED_METRICS:-}" ]] || "$here/metrics.sh" up "$dir"
  if [[ -n "${POLSCHED_REAL_NODE:-}" ]]; then
    # A real node runs ordinary pods too (polsched's own Deployment): they need the
    # default scheduler.
    log "starting kube-scheduler (default-scheduler, for the real node's ordinary pods)"
    setsid "$bin/kube-scheduler" --kubeconfig "$dir/kubeconfig" --leader-elect=false \
      --bind-address 127.0.0.1 --secure-port 0 --v=0 \
      ${gate_args[@]+"${gate_args[@]}"} \
      >"$dir/kube-scheduler.log" 2>&1 < /dev/null &
    echo $! > "$dir/kube-scheduler.pid"
    "$here/node.sh" up "$dir"
  fi
  trap - ERR
  log "ready in $(( $(date +%s) - start ))s: export KUBECONFIG=$dir/kubeconfig"
}

case "$cmd" in
  up) up ;;
  down) down ;;
  status)
    for n in etcd kube-apiserver kube-controller-manager kwok metrics-server; do
      if alive "$n"; then echo "$n: running (pid $(cat "$dir/$n.pid"))"; else echo "$n: stopped"; fi
    done ;;
  *) echo "usage: $0 up|down|status [DIR]" >&2; exit 2 ;;
esac
