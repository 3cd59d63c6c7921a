#!/usr/bin/env bash
# Smoke test of the test control plane: starts its OWN cluster (separate state dir and
# ports, so it never touches a cluster a developer is using), checks that every component
# really works, and stops it again. About 60 s when the binaries are built.
#
#   tests/controlplane/smoke.sh            # prints "smoke: N passed, N failed"
#   CP_SMOKE_KEEP=1 tests/controlplane/smoke.sh   # leave the cluster running afterwards
#
# Checks: apiserver /readyz and /version; Gateway API CRDs Established; the StatefulSet
# controller creates a Pod and the scheduler reports it unschedulable without nodes; with
# simulated nodes (Node + Lease written here, like kubesim does) the PV controller hands a
# WaitForFirstConsumer claim to the external provisioner, and binding a PV lets the pod be
# scheduled; when a node stops renewing its Lease the node lifecycle controller taints it
# unreachable:NoExecute within seconds and the taint-eviction controller marks the pod for
# deletion after the 5 s toleration.
set -euo pipefail

export CP_RUN_DIR="${CP_RUN_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.cluster/run-smoke}"
export CP_ETCD_PORT="${CP_ETCD_PORT:-23890}" CP_ETCD_PEER_PORT="${CP_ETCD_PEER_PORT:-23900}"
export CP_APISERVER_PORT="${CP_APISERVER_PORT:-16543}" CP_KCM_PORT="${CP_KCM_PORT:-20357}"
export CP_SCHEDULER_PORT="${CP_SCHEDULER_PORT:-20359}"
CP_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

PASSED=0
FAILED=0
RENEWERS=()
cleanup() {
  local pid
  for pid in "${RENEWERS[@]}"; do kill "$pid" 2>/dev/null || true; done
  if [[ "${CP_SMOKE_KEEP:-0}" != 1 ]]; then "$CP_DIR/stop.sh" || true; fi
}
trap cleanup EXIT

"$CP_DIR/start.sh"
# shellcheck source=env.sh
source "$CP_DIR/env.sh"
kc() { "$CP_BIN_DIR/kubectl" "$@"; }
apply() { kc apply --server-side --force-conflicts --field-manager="$1" -f - >/dev/null; }

check() { # check NAME COMMAND...: runs COMMAND, counts and reports the result
  local name="$1"; shift
  if "$@"; then
    PASSED=$((PASSED + 1)); echo "ok    $name"
  else
    FAILED=$((FAILED + 1)); echo "FAIL  $name"
  fi
}

# eventually SECONDS COMMAND...: COMMAND succeeds within SECONDS (polling every 0.25 s).
eventually() {
  local until=$((SECONDS + $1)); shift
  while ! "$@" >/dev/null 2>&1; do
    ((SECONDS < until)) || return 1
    sleep 0.25
  done
}

jp() { kc "$@" 2>/dev/null; } # kubectl get ... -o jsonpath, quiet
field_is() { [[ "$(jp "${@:2}")" == "$1" ]]; } # field_is WANT kubectl-args...
field_has() { [[ "$(jp "${@:2}")" == *"$1"* ]]; }
field_set() { [[ -n "$(jp "$@")" ]]; }

readyz_ok() { kc get --raw '/readyz?verbose' | grep -q 'readyz check passed'; }
version_ok() { kc get --raw /version | grep -q "\"gitVersion\": \"$CP_SERVER_VERSION\""; }
crds_ok() { kc wait --for=condition=Established --timeout=30s -f "$CP_CRD_DIR" >/dev/null; }
check "apiserver /readyz" readyz_ok
check "apiserver /version is $CP_SERVER_VERSION" version_ok
check "Gateway API $GATEWAY_API_VERSION CRDs Established" crds_ok

NS=cp-smoke
kc create namespace "$NS" >/dev/null
apply argocd-controller <<EOF
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: cp-smoke-wffc}
provisioner: smoke.celld.test/disks
volumeBindingMode: WaitForFirstConsumer
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: $NS}
spec:
  replicas: 1
  serviceName: db
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      containers: [{name: c, image: example.invalid/none:1}]
  volumeClaimTemplates:
  - metadata: {name: data}
    spec:
      accessModes: [ReadWriteOnce]
      storageClassName: cp-smoke-wffc
      resources: {requests: {storage: 1Gi}}
EOF
check "statefulset controller creates pod db-0" \
  eventually 30 field_set -n "$NS" get pod db-0 -o jsonpath='{.metadata.uid}'
check "scheduler reports db-0 unschedulable (no nodes)" \
  eventually 30 field_is Unschedulable -n "$NS" get pod db-0 \
  -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].reason}'

# --- simulated nodes -----------------------------------------------------------------------
register_node() { # register_node NAME ZONE: Node with Ready=True, then a Lease renewer
  local name="$1" zone="$2" now
  now="$(date -u +%FT%TZ)"
  apply kubesim <<EOF
apiVersion: v1
kind: Node
metadata:
  name: $name
  labels: {kubernetes.io/hostname: $name, topology.kubernetes.io/zone: $zone}
EOF
  kc patch node "$name" --subresource=status --type=merge -p "{\"status\": {
    \"capacity\": {\"cpu\": \"4\", \"memory\": \"8Gi\", \"pods\": \"110\"},
    \"allocatable\": {\"cpu\": \"4\", \"memory\": \"8Gi\", \"pods\": \"110\"},
    \"conditions\": [{\"type\": \"Ready\", \"status\": \"True\", \"reason\": \"KubeletReady\",
      \"message\": \"simulated\", \"lastHeartbeatTime\": \"$now\", \"lastTransitionTime\": \"$now\"}]}}" >/dev/null
  (
    trap 'exit 0' TERM
    while true; do
      apply kubesim <<EOF || true
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata: {name: $name, namespace: kube-node-lease}
spec: {holderIdentity: $name, leaseDurationSeconds: 40, renewTime: "$(date -u +%FT%T.%6NZ)"}
EOF
      sleep 1
    done
  ) </dev/null >/dev/null 2>&1 &
  RENEWERS+=("$!")
}
register_node cp-smoke-a zone-a
register_node cp-smoke-b zone-b
check "nodes become Ready (node lifecycle controller lifts the not-ready taint)" \
  eventually 30 field_is "cp-smoke-a= cp-smoke-b= " get node cp-smoke-a cp-smoke-b \
  -o jsonpath='{range .items[*]}{.metadata.name}={.spec.taints} {end}'

check "PV controller leaves the WaitForFirstConsumer claim to the external provisioner" \
  eventually 30 field_is smoke.celld.test/disks -n "$NS" get pvc data-db-0 \
  -o jsonpath='{.metadata.annotations.volume\.kubernetes\.io/storage-provisioner}'
NODE="$(jp -n "$NS" get pvc data-db-0 -o jsonpath='{.metadata.annotations.volume\.kubernetes\.io/selected-node}' || true)"
ZONE="$(jp get node "${NODE:-none}" -o jsonpath='{.metadata.labels.topology\.kubernetes\.io/zone}' || true)"
check "scheduler selected a node for the claim ($NODE, $ZONE)" test -n "$ZONE"
# Play the external provisioner: a PV pinned to the selected node's zone, pre-bound.
apply kubesim <<EOF
apiVersion: v1
kind: PersistentVolume
metadata:
  name: cp-smoke-data-db-0
  annotations: {pv.kubernetes.io/provisioned-by: smoke.celld.test/disks}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Delete
  storageClassName: cp-smoke-wffc
  claimRef: {namespace: $NS, name: data-db-0, uid: $(jp -n "$NS" get pvc data-db-0 -o jsonpath='{.metadata.uid}')}
  csi: {driver: smoke.celld.test, volumeHandle: vol-db-0}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions: [{key: topology.kubernetes.io/zone, operator: In, values: [${ZONE:-none}]}]
EOF
check "claim binds to the provisioned PV" \
  eventually 30 field_is Bound -n "$NS" get pvc data-db-0 -o jsonpath='{.status.phase}'
check "pod db-0 is bound to $NODE" \
  eventually 30 field_is "$NODE" -n "$NS" get pod db-0 -o jsonpath='{.spec.nodeName}'

# --- node loss -----------------------------------------------------------------------------
if [[ "$NODE" == cp-smoke-a ]]; then kill "${RENEWERS[0]}"; else kill "${RENEWERS[1]}"; fi
LOST_AT=$SECONDS
check "node lifecycle: $NODE tainted unreachable:NoExecute within 20 s of its last Lease renewal" \
  eventually 20 field_has unreachable:NoExecute get node "$NODE" \
  -o jsonpath='{range .spec.taints[*]}{.key}:{.effect} {end}'
echo "      (after $((SECONDS - LOST_AT)) s)"
check "taint eviction: db-0 marked for deletion after its 5 s toleration" \
  eventually 20 field_set -n "$NS" get pod db-0 -o jsonpath='{.metadata.deletionTimestamp}'
echo "      (after $((SECONDS - LOST_AT)) s)"

echo "smoke: $PASSED passed, $FAILED failed"
[[ $FAILED == 0 ]]
