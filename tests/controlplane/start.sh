#!/usr/bin/env bash
# Starts a throw-away Kubernetes control plane on 127.0.0.1 for end-to-end tests:
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler (no kubelet, no nodes),
# then installs the Gateway API CRDs and starts the real metrics-server (metrics.k8s.io,
# scraping kubesim's simulated kubelets). Works from any cwd. No sudo, docker or network.
#
#   tests/controlplane/start.sh        # builds first if binaries are missing (build.sh)
#   export KUBECONFIG=$PWD/tests/.cluster/run/kubeconfig   # or: source tests/controlplane/env.sh
#   tests/controlplane/stop.sh
#
# State lives in tests/.cluster/run/ and is wiped at every start (a running cluster
# started from this checkout is stopped first). Ports: see env.sh.
# Env knobs:
#   CP_LINE              newest (default) or oldest: the Kubernetes line of the API server,
#                        controller manager and scheduler (tests/k8s-version.env)
#   CP_START_TIMEOUT     seconds to wait for all components to be healthy (default 180)
#   CP_VERBOSITY         klog -v for the kube components (default 2)
#   CP_APISERVER_EXTRA_ARGS, CP_KCM_EXTRA_ARGS, CP_SCHEDULER_EXTRA_ARGS, CP_ETCD_EXTRA_ARGS
#                        extra flags (word-split), e.g. CP_KCM_EXTRA_ARGS="--node-eviction-rate=1"
set -euo pipefail

CP_IGNORE_RECORDED_PORTS=1
# shellcheck source=env.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/env.sh"
unset CP_IGNORE_RECORDED_PORTS

START_TIMEOUT="${CP_START_TIMEOUT:-180}"
VERBOSITY="${CP_VERBOSITY:-2}"
SERVICE_CIDR="10.96.0.0/16"
SERVICE_IP="10.96.0.1" # first address of SERVICE_CIDR: the kubernetes.default Service
read -r -a APISERVER_EXTRA <<<"${CP_APISERVER_EXTRA_ARGS:-}"
read -r -a KCM_EXTRA <<<"${CP_KCM_EXTRA_ARGS:-}"
read -r -a SCHEDULER_EXTRA <<<"${CP_SCHEDULER_EXTRA_ARGS:-}"
read -r -a ETCD_EXTRA <<<"${CP_ETCD_EXTRA_ARGS:-}"

log() { printf '[start %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
die() { printf '[start] ERROR: %s\n' "$*" >&2; exit 1; }

for tool in openssl curl base64; do
  command -v "$tool" >/dev/null || die "$tool not found on PATH (Debian: apt-get install $tool)"
done

T0=$SECONDS

# --- binaries (build.sh is a no-op when they are present) -------------------------------
"$CP_DIR/build.sh"
[[ $CP_LINE == newest ]] || "$CP_DIR/build.sh" --oldest
"$CP_DIR/build-metrics-server.sh"
[[ -x "$CP_METRICS_SERVER_BIN" ]] || die "missing $CP_METRICS_SERVER_BIN"
# bin_dir NAME: where NAME comes from (the servers from the chosen line).
bin_dir() {
  case "$1" in
    kube-apiserver | kube-controller-manager | kube-scheduler) echo "$CP_SERVER_BIN_DIR" ;;
    *) echo "$CP_BIN_DIR" ;;
  esac
}
for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubectl; do
  [[ -x "$(bin_dir "$b")/$b" ]] || die "missing $(bin_dir "$b")/$b"
done
T_BUILT=$SECONDS

# --- fresh state ------------------------------------------------------------------------
"$CP_DIR/stop.sh" --quiet
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for p in "$CP_ETCD_PORT" "$CP_ETCD_PEER_PORT" "$CP_APISERVER_PORT" "$CP_KCM_PORT" "$CP_SCHEDULER_PORT" "$CP_METRICS_SERVER_PORT"; do
  port_busy "$p" && die "127.0.0.1:$p is already in use (another cluster? override the CP_*_PORT variables, see env.sh)"
done
[[ "$CP_RUN_DIR" == /?* ]] || die "CP_RUN_DIR must be an absolute path: '$CP_RUN_DIR'"
# Refuse to wipe a directory given as CP_RUN_DIR that start.sh did not create.
if [[ "$CP_RUN_DIR" != "$CP_CLUSTER_DIR/run" && -d "$CP_RUN_DIR" ]] \
  && [[ ! -f "$CP_RUN_DIR/.celld-controlplane" && -n "$(ls -A "$CP_RUN_DIR")" ]]; then
  die "$CP_RUN_DIR exists, is not empty and was not made by start.sh; not wiping it"
fi
rm -rf "$CP_RUN_DIR"
mkdir -p "$CP_PKI_DIR" "$CP_LOG_DIR" "$CP_PID_DIR" "$CP_RUN_DIR/etcd-data"
chmod 700 "$CP_RUN_DIR" "$CP_PKI_DIR" "$CP_RUN_DIR/etcd-data"
echo "state of tests/controlplane/start.sh; wiped at every start" >"$CP_RUN_DIR/.celld-controlplane"
{
  echo "# Ports of the control plane started at $(date -u +%FT%TZ); read by env.sh."
  for v in CP_ETCD_PORT CP_ETCD_PEER_PORT CP_APISERVER_PORT CP_KCM_PORT CP_SCHEDULER_PORT CP_METRICS_SERVER_PORT; do
    echo ": \"\${$v:=${!v}}\""
  done
} >"$CP_RUN_DIR/ports.env"

# From here on, any failure stops what was started.
STARTED_OK=0
on_exit() {
  local rc=$?
  if [[ $STARTED_OK != 1 ]]; then
    echo "[start] failed (exit $rc); stopping what was started" >&2
    "$CP_DIR/stop.sh" || true
  fi
}
trap on_exit EXIT

# --- PKI ----------------------------------------------------------------------------------
log "creating throw-away CA and certificates in $CP_PKI_DIR"
(
  cd "$CP_PKI_DIR"
  # ECDSA P-256 for the CA and TLS certificates (fast to make); RSA for the service-account
  # signing key (RS256 tokens, what every client expects).
  newkey() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

  newkey ca.key
  cat >ca.cnf <<'EOF'
[req]
distinguished_name = dn
prompt = no
[dn]
CN = celld-fleet-test-ca
[v3_ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign,digitalSignature
subjectKeyIdentifier = hash
EOF
  openssl req -x509 -new -key ca.key -config ca.cnf -extensions v3_ca -days 30 -sha256 \
    -out ca.crt 2>/dev/null

  # cert NAME SUBJECT EXTENDED_KEY_USAGE [SUBJECT_ALT_NAMES]
  cert() {
    local name="$1" subj="$2" eku="$3" san="${4:-}"
    newkey "$name.key"
    openssl req -new -key "$name.key" -subj "$subj" -out "$name.csr" 2>/dev/null
    {
      echo "[v3]"
      echo "basicConstraints = critical,CA:FALSE"
      echo "keyUsage = critical,digitalSignature"
      echo "extendedKeyUsage = $eku"
      echo "authorityKeyIdentifier = keyid"
      [[ -z "$san" ]] || echo "subjectAltName = $san"
    } >"$name.ext"
    openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key \
      -set_serial "0x$(openssl rand -hex 16)" -days 30 -sha256 \
      -extfile "$name.ext" -extensions v3 -out "$name.crt" 2>/dev/null
    rm -f "$name.csr" "$name.ext"
  }
  local_sans="IP:127.0.0.1,DNS:localhost"
  cert apiserver "/CN=kube-apiserver" serverAuth \
    "$local_sans,IP:$SERVICE_IP,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  cert kube-controller-manager-serving "/CN=kube-controller-manager" serverAuth "$local_sans"
  cert kube-scheduler-serving "/CN=kube-scheduler" serverAuth "$local_sans"
  cert admin "/O=system:masters/CN=admin" clientAuth
  cert kube-controller-manager "/CN=system:kube-controller-manager" clientAuth
  cert kube-scheduler "/CN=system:kube-scheduler" clientAuth
  # metrics-server: its identity, and its serving certificate for the name the
  # aggregator checks (<service>.<namespace>.svc), signed by the cluster CA (the
  # APIService's caBundle).
  cert metrics-server "/CN=system:metrics-server" clientAuth
  cert metrics-server-serving "/CN=metrics-server" serverAuth \
    "$local_sans,DNS:metrics-server.kube-system.svc"
  # The aggregation layer: a separate front-proxy CA, whose client certificate the
  # apiserver presents when it proxies to metrics-server (requestheader authentication).
  newkey front-proxy-ca.key
  sed 's/celld-fleet-test-ca/celld-fleet-test-front-proxy-ca/' ca.cnf >front-proxy-ca.cnf
  openssl req -x509 -new -key front-proxy-ca.key -config front-proxy-ca.cnf -extensions v3_ca \
    -days 30 -sha256 -out front-proxy-ca.crt 2>/dev/null
  newkey front-proxy-client.key
  openssl req -new -key front-proxy-client.key -subj "/CN=front-proxy-client" \
    -out front-proxy-client.csr 2>/dev/null
  printf '%s\n' "[v3]" "basicConstraints = critical,CA:FALSE" "keyUsage = critical,digitalSignature" \
    "extendedKeyUsage = clientAuth" "authorityKeyIdentifier = keyid" >front-proxy-client.ext
  openssl x509 -req -in front-proxy-client.csr -CA front-proxy-ca.crt -CAkey front-proxy-ca.key \
    -set_serial "0x$(openssl rand -hex 16)" -days 30 -sha256 \
    -extfile front-proxy-client.ext -extensions v3 -out front-proxy-client.crt 2>/dev/null
  rm -f front-proxy-client.csr front-proxy-client.ext
  # Service-account token signing key pair.
  openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out sa.key 2>/dev/null
  openssl pkey -in sa.key -pubout -out sa.pub 2>/dev/null
  chmod 600 ./*.key
)

# write_kubeconfig FILE USER: a self-contained kubeconfig (certificates embedded).
write_kubeconfig() {
  local file="$1" user="$2" b64="base64 -w0"
  cat >"$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: celld-test
  cluster:
    server: $CP_APISERVER_URL
    certificate-authority-data: $($b64 <"$CP_PKI_DIR/ca.crt")
users:
- name: $user
  user:
    client-certificate-data: $($b64 <"$CP_PKI_DIR/$user.crt")
    client-key-data: $($b64 <"$CP_PKI_DIR/$user.key")
contexts:
- name: celld-test
  context:
    cluster: celld-test
    user: $user
current-context: celld-test
EOF
  chmod 600 "$file"
}
write_kubeconfig "$KUBECONFIG" admin
write_kubeconfig "$CP_RUN_DIR/kube-controller-manager.kubeconfig" kube-controller-manager
write_kubeconfig "$CP_RUN_DIR/kube-scheduler.kubeconfig" kube-scheduler
write_kubeconfig "$CP_RUN_DIR/metrics-server.kubeconfig" metrics-server

# --- processes ----------------------------------------------------------------------------
# launch NAME ARGS...: runs NAME (from bin_dir) in the background, detached from our stdio
# (so a caller that captures our output is not kept waiting), log and PID in run/.
launch() {
  local name="$1"; shift
  log "starting $name (log: $CP_LOG_DIR/$name.log)"
  "$(bin_dir "$name")/$name" "$@" </dev/null >>"$CP_LOG_DIR/$name.log" 2>&1 &
  echo "$!" >"$CP_PID_DIR/$name.pid"
}

# alive NAME: its process runs (our children that died stay zombies until we exit).
alive() {
  local pid state
  pid="$(cat "$CP_PID_DIR/$1.pid")"
  state="$(awk '{ print $3 }' "/proc/$pid/stat" 2>/dev/null || true)"
  [[ -n "$state" && "$state" != Z && "$state" != X ]]
}

fail_with_log() {
  local name="$1" why="$2"
  echo "[start] $name: $why; last lines of $CP_LOG_DIR/$name.log:" >&2
  tail -n 40 "$CP_LOG_DIR/$name.log" >&2 || true
  exit 1
}

# wait_healthy NAME URL [CURL_ARGS...]: until URL answers 200 "ok"-ish, the process died,
# or the start timeout passes.
wait_healthy() {
  local name="$1" url="$2"; shift 2
  local body
  while true; do
    alive "$name" || fail_with_log "$name" "process exited"
    if body="$(curl -fsS --max-time 5 "$@" "$url" 2>/dev/null)"; then
      case "$body" in
        ok | *'"health":"true"'*) log "$name healthy after $((SECONDS - T_BUILT))s"; return 0 ;;
      esac
    fi
    ((SECONDS - T_BUILT < START_TIMEOUT)) || fail_with_log "$name" "not healthy at $url within ${START_TIMEOUT}s"
    sleep 0.5
  done
}

ETCD_URL="http://127.0.0.1:$CP_ETCD_PORT"
ETCD_PEER_URL="http://127.0.0.1:$CP_ETCD_PEER_PORT"
launch etcd \
  --name=celld-test \
  --data-dir="$CP_RUN_DIR/etcd-data" \
  --listen-client-urls="$ETCD_URL" --advertise-client-urls="$ETCD_URL" \
  --listen-peer-urls="$ETCD_PEER_URL" --initial-advertise-peer-urls="$ETCD_PEER_URL" \
  --initial-cluster="celld-test=$ETCD_PEER_URL" --initial-cluster-state=new \
  --unsafe-no-fsync=true \
  "${ETCD_EXTRA[@]}"
wait_healthy etcd "$ETCD_URL/health"

launch kube-apiserver \
  --v="$VERBOSITY" \
  --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$CP_APISERVER_PORT" \
  --etcd-servers="$ETCD_URL" \
  --tls-cert-file="$CP_PKI_DIR/apiserver.crt" --tls-private-key-file="$CP_PKI_DIR/apiserver.key" \
  --client-ca-file="$CP_PKI_DIR/ca.crt" \
  --authorization-mode=Node,RBAC \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-account-key-file="$CP_PKI_DIR/sa.pub" \
  --service-account-signing-key-file="$CP_PKI_DIR/sa.key" \
  --service-cluster-ip-range="$SERVICE_CIDR" \
  --endpoint-reconciler-type=none \
  --default-not-ready-toleration-seconds=5 \
  --default-unreachable-toleration-seconds=5 \
  --allow-privileged=true \
  --requestheader-client-ca-file="$CP_PKI_DIR/front-proxy-ca.crt" \
  --requestheader-allowed-names=front-proxy-client \
  --requestheader-username-headers=X-Remote-User \
  --requestheader-group-headers=X-Remote-Group \
  --requestheader-extra-headers-prefix=X-Remote-Extra- \
  --proxy-client-cert-file="$CP_PKI_DIR/front-proxy-client.crt" \
  --proxy-client-key-file="$CP_PKI_DIR/front-proxy-client.key" \
  "${APISERVER_EXTRA[@]}"
# The admin cert is used so that /readyz?verbose also works on a locked-down apiserver.
KUBE_CURL=(--cacert "$CP_PKI_DIR/ca.crt" --cert "$CP_PKI_DIR/admin.crt" --key "$CP_PKI_DIR/admin.key")
wait_healthy kube-apiserver "$CP_APISERVER_URL/readyz" "${KUBE_CURL[@]}"

launch kube-controller-manager \
  --v="$VERBOSITY" \
  --kubeconfig="$CP_RUN_DIR/kube-controller-manager.kubeconfig" \
  --authentication-kubeconfig="$CP_RUN_DIR/kube-controller-manager.kubeconfig" \
  --authorization-kubeconfig="$CP_RUN_DIR/kube-controller-manager.kubeconfig" \
  --bind-address=127.0.0.1 --secure-port="$CP_KCM_PORT" \
  --tls-cert-file="$CP_PKI_DIR/kube-controller-manager-serving.crt" \
  --tls-private-key-file="$CP_PKI_DIR/kube-controller-manager-serving.key" \
  --client-ca-file="$CP_PKI_DIR/ca.crt" \
  --leader-elect=false \
  --controllers='*' \
  --use-service-account-credentials=true \
  --root-ca-file="$CP_PKI_DIR/ca.crt" \
  --service-account-private-key-file="$CP_PKI_DIR/sa.key" \
  --cluster-signing-cert-file="$CP_PKI_DIR/ca.crt" --cluster-signing-key-file="$CP_PKI_DIR/ca.key" \
  --service-cluster-ip-range="$SERVICE_CIDR" \
  --node-monitor-period=1s \
  --node-monitor-grace-period=8s \
  "${KCM_EXTRA[@]}"

launch kube-scheduler \
  --v="$VERBOSITY" \
  --kubeconfig="$CP_RUN_DIR/kube-scheduler.kubeconfig" \
  --authentication-kubeconfig="$CP_RUN_DIR/kube-scheduler.kubeconfig" \
  --authorization-kubeconfig="$CP_RUN_DIR/kube-scheduler.kubeconfig" \
  --bind-address=127.0.0.1 --secure-port="$CP_SCHEDULER_PORT" \
  --tls-cert-file="$CP_PKI_DIR/kube-scheduler-serving.crt" \
  --tls-private-key-file="$CP_PKI_DIR/kube-scheduler-serving.key" \
  --client-ca-file="$CP_PKI_DIR/ca.crt" \
  --leader-elect=false \
  "${SCHEDULER_EXTRA[@]}"

wait_healthy kube-controller-manager "https://127.0.0.1:$CP_KCM_PORT/healthz" --cacert "$CP_PKI_DIR/ca.crt"
wait_healthy kube-scheduler "https://127.0.0.1:$CP_SCHEDULER_PORT/healthz" --cacert "$CP_PKI_DIR/ca.crt"
T_HEALTHY=$SECONDS

# --- cluster contents -----------------------------------------------------------------------
kubectl() { "$CP_BIN_DIR/kubectl" --kubeconfig="$KUBECONFIG" "$@"; }

log "installing Gateway API $GATEWAY_API_VERSION CRDs from $CP_CRD_DIR"
kubectl apply --server-side --field-manager=celld-test-controlplane -f "$CP_CRD_DIR" >"$CP_LOG_DIR/gateway-crds.log" 2>&1 \
  || { cat "$CP_LOG_DIR/gateway-crds.log" >&2; die "kubectl apply of the Gateway API CRDs failed"; }
kubectl wait --for=condition=Established --timeout=60s -f "$CP_CRD_DIR" >>"$CP_LOG_DIR/gateway-crds.log" 2>&1 \
  || { cat "$CP_LOG_DIR/gateway-crds.log" >&2; die "Gateway API CRDs not Established within 60s"; }

log "Gateway API CRDs Established"

# --- metrics-server (metrics.k8s.io) --------------------------------------------------------
# The real metrics-server scrapes every Node's kubelet resource-metrics endpoint, which
# kubesim's simulated kubelets serve (plain HTTP on <node InternalIP>:10250, hence
# --deprecated-kubelet-completely-insecure: no TLS, and no credentials sent to them).
# The aggregator reaches it on loopback through an ExternalName Service "localhost": the
# API server refuses loopback addresses in an EndpointSlice ("may not be in the loopback
# range"), and --enable-aggregator-routing=true routes only to EndpointSlice addresses;
# with the default routing an ExternalName Service names the host, and the APIService's
# port is the one dialled. TLS is still verified: caBundle is our CA, and the serving
# certificate names metrics-server.kube-system.svc.
log "starting metrics-server $METRICS_SERVER_VERSION (metrics.k8s.io) on 127.0.0.1:$CP_METRICS_SERVER_PORT"
kubectl apply --server-side --field-manager=celld-test-controlplane -f - >"$CP_LOG_DIR/metrics-server-objects.log" 2>&1 <<MSEOF || { cat "$CP_LOG_DIR/metrics-server-objects.log" >&2; die "installing metrics-server's objects failed"; }
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "system:metrics-server"}
rules:
- {apiGroups: [""], resources: [nodes/metrics], verbs: [get]}
- {apiGroups: [""], resources: [pods, nodes], verbs: [get, list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "system:metrics-server"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:metrics-server"}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: "system:metrics-server"}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "metrics-server:system:auth-delegator"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:auth-delegator"}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: "system:metrics-server"}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: "metrics-server-auth-reader", namespace: kube-system}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: extension-apiserver-authentication-reader}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: "system:metrics-server"}]
---
apiVersion: v1
kind: Service
metadata: {name: metrics-server, namespace: kube-system}
spec:
  type: ExternalName
  externalName: localhost
  ports: [{name: https, port: $CP_METRICS_SERVER_PORT, protocol: TCP}]
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1beta1.metrics.k8s.io}
spec:
  group: metrics.k8s.io
  version: v1beta1
  groupPriorityMinimum: 100
  versionPriority: 100
  caBundle: $(base64 -w0 <"$CP_PKI_DIR/ca.crt")
  service: {name: metrics-server, namespace: kube-system, port: $CP_METRICS_SERVER_PORT}
MSEOF
log "starting metrics-server (log: $CP_LOG_DIR/metrics-server.log)"
"$CP_METRICS_SERVER_BIN" \
  --v="$VERBOSITY" \
  --bind-address=127.0.0.1 --secure-port="$CP_METRICS_SERVER_PORT" \
  --tls-cert-file="$CP_PKI_DIR/metrics-server-serving.crt" \
  --tls-private-key-file="$CP_PKI_DIR/metrics-server-serving.key" \
  --kubeconfig="$CP_RUN_DIR/metrics-server.kubeconfig" \
  --authentication-kubeconfig="$CP_RUN_DIR/metrics-server.kubeconfig" \
  --authorization-kubeconfig="$CP_RUN_DIR/metrics-server.kubeconfig" \
  --kubelet-preferred-address-types=InternalIP \
  --kubelet-port=10250 \
  --deprecated-kubelet-completely-insecure \
  --kubelet-request-timeout=2s \
  --metric-resolution=10s \
  </dev/null >>"$CP_LOG_DIR/metrics-server.log" 2>&1 &
echo "$!" >"$CP_PID_DIR/metrics-server.pid"
wait_healthy metrics-server "https://127.0.0.1:$CP_METRICS_SERVER_PORT/livez" --cacert "$CP_PKI_DIR/ca.crt"
until [[ "$(kubectl get apiservice v1beta1.metrics.k8s.io -o jsonpath='{.status.conditions[?(@.type=="Available")].status}' 2>/dev/null)" == True ]]; do
  alive metrics-server || fail_with_log metrics-server "process exited"
  if ((SECONDS - T_BUILT >= START_TIMEOUT)); then
    kubectl get apiservice v1beta1.metrics.k8s.io -o yaml >&2 || true
    fail_with_log metrics-server "APIService v1beta1.metrics.k8s.io not Available within ${START_TIMEOUT}s"
  fi
  sleep 0.5
done
log "metrics.k8s.io Available (Pod metrics appear once kubesim's kubelets run)"

# The service-account controller creating default/default shows that the controller-manager
# really runs its controllers (and pods in "default" can be admitted from now on).
until kubectl -n default get serviceaccount default >/dev/null 2>&1; do
  alive kube-controller-manager || fail_with_log kube-controller-manager "process exited"
  ((SECONDS - T_BUILT < START_TIMEOUT)) || die "serviceaccount default/default not created within ${START_TIMEOUT}s"
  sleep 0.5
done

STARTED_OK=1
ENV_HINT=""
[[ "$CP_RUN_DIR" == "$CP_CLUSTER_DIR/run" ]] || ENV_HINT="export CP_RUN_DIR=$CP_RUN_DIR; "
log "control plane $CP_SERVER_VERSION up: healthy in $((T_HEALTHY - T_BUILT))s, ready (CRDs, default SA) in $((SECONDS - T_BUILT))s (total incl. build check $((SECONDS - T0))s)"
cat <<EOF

  apiserver:  $CP_APISERVER_URL   (etcd $ETCD_URL)
  kubeconfig: $KUBECONFIG   (admin, system:masters)
  metrics:    metrics-server on https://127.0.0.1:$CP_METRICS_SERVER_PORT (v1beta1.metrics.k8s.io)
  logs:       $CP_LOG_DIR/<component>.log
  use it:     export KUBECONFIG=$KUBECONFIG
              export PATH=$CP_BIN_DIR:\$PATH     # pinned kubectl
          or: ${ENV_HINT}source $CP_DIR/env.sh
  stop it:    $CP_DIR/stop.sh

EOF
