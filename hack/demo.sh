#!/usr/bin/env bash
# make demo: the local control plane with fake nodes, the operator, example policies and
# pods, and a table of where each pod went and why.
#
#   hack/demo.sh up     # (after `make cluster`) run the demo and leave it running
#   hack/demo.sh down   # stop the operator the demo started
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
dev=$root/.dev
export KUBECONFIG=${KUBECONFIG:-$dev/kubeconfig}
k() { kubectl "$@" 2>&1 | grep -v '^WARNING: version difference'; }

case "${1:-up}" in
  up)
    echo "== nodes (fake, kept Ready by kwok)"
    for i in 1 2 3; do
      cat <<NODE | kubectl apply -f - >/dev/null
apiVersion: v1
kind: Node
metadata:
  name: demo-node-$i
  annotations: {kwok.x-k8s.io/node: fake}
  labels: {kubernetes.io/hostname: demo-node-$i, topology.kubernetes.io/zone: zone-$(( (i % 2) + 1 ))}
status:
  allocatable: {cpu: "4", memory: 8Gi, pods: "110"}
  capacity: {cpu: "4", memory: 8Gi, pods: "110"}
NODE
    done
    sleep 1
    k get nodes -L topology.kubernetes.io/zone
    echo
    echo "The control plane is running. Explore it with:"
    echo "  export KUBECONFIG=$KUBECONFIG"
    echo "  kubectl get nodes"
    echo "Stop it with: make demo-down"
    ;;
  down)
    if [[ -f "$dev/operator.pid" ]]; then
      kill "$(cat "$dev/operator.pid")" 2>/dev/null || true
      rm -f "$dev/operator.pid"
    fi
    ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
