# shellcheck shell=bash
# Source this file (bash) to use the test control plane:
#   source tests/controlplane/env.sh
# It sets KUBECONFIG, puts the pinned kubectl/etcd/kube-* binaries first on PATH, and
# exports the paths and ports below. It changes no shell options and starts nothing.
# start.sh and stop.sh source it too, so the defaults live here only.
#
# Ports (override by exporting them before start.sh; start.sh records the values it used
# in $CP_RUN_DIR/ports.env, and this file reads that record back while the cluster runs,
# so a shell that sources it later finds the running cluster):
#   CP_ETCD_PORT       etcd client      (default 23790, http, loopback)
#   CP_ETCD_PEER_PORT  etcd peer        (default 23800, http, loopback)
#   CP_APISERVER_PORT  kube-apiserver   (default 16443, https, loopback)
#   CP_KCM_PORT        kube-controller-manager /healthz (default 20257, https, loopback)
#   CP_SCHEDULER_PORT  kube-scheduler  /healthz          (default 20259, https, loopback)
#   CP_METRICS_SERVER_PORT  metrics-server (metrics.k8s.io) (default 21443, https, loopback)

CP_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CP_TESTS_DIR="$(dirname "$CP_DIR")"
# shellcheck source=../k8s-version.env
source "$CP_TESTS_DIR/k8s-version.env"

CP_CLUSTER_DIR="$CP_TESTS_DIR/.cluster"
CP_BIN_DIR="$CP_CLUSTER_DIR/bin/$K8S_VERSION"
# Which supported line the API server, controller manager and scheduler come from:
# CP_LINE=newest (default, $K8S_VERSION) or oldest ($K8S_OLDEST_VERSION, built by
# `build.sh --oldest`). etcd and kubectl are always the newest line's ($CP_BIN_DIR).
CP_LINE="${CP_LINE:-newest}"
case "$CP_LINE" in
  newest) CP_SERVER_VERSION="$K8S_VERSION" ;;
  oldest) CP_SERVER_VERSION="$K8S_OLDEST_VERSION" ;;
  *) echo "CP_LINE must be newest or oldest, not '$CP_LINE'" >&2; return 1 2>/dev/null || exit 1 ;;
esac
CP_SERVER_BIN_DIR="$CP_CLUSTER_DIR/bin/$CP_SERVER_VERSION"
CP_CRD_DIR="$CP_CLUSTER_DIR/gateway-api/$GATEWAY_API_VERSION"
CP_METRICS_SERVER_BIN="$CP_CLUSTER_DIR/bin/metrics-server/$METRICS_SERVER_VERSION/metrics-server"
# State of a running cluster (wiped by start.sh). Override CP_RUN_DIR (an absolute path)
# together with the ports to run a second, independent cluster from the same checkout.
CP_RUN_DIR="${CP_RUN_DIR:-$CP_CLUSTER_DIR/run}"
CP_PKI_DIR="$CP_RUN_DIR/pki"
CP_LOG_DIR="$CP_RUN_DIR/logs"
CP_PID_DIR="$CP_RUN_DIR/pids"

# Values exported by the caller win over the record, and the record over the defaults.
# start.sh sets CP_IGNORE_RECORDED_PORTS=1: a new cluster uses the caller's ports or defaults.
if [[ -f "$CP_RUN_DIR/ports.env" && "${CP_IGNORE_RECORDED_PORTS:-0}" != 1 ]]; then
  # shellcheck source=/dev/null
  source "$CP_RUN_DIR/ports.env"
fi
CP_ETCD_PORT="${CP_ETCD_PORT:-23790}"
CP_ETCD_PEER_PORT="${CP_ETCD_PEER_PORT:-23800}"
CP_APISERVER_PORT="${CP_APISERVER_PORT:-16443}"
CP_KCM_PORT="${CP_KCM_PORT:-20257}"
CP_SCHEDULER_PORT="${CP_SCHEDULER_PORT:-20259}"
CP_METRICS_SERVER_PORT="${CP_METRICS_SERVER_PORT:-21443}"

CP_APISERVER_URL="https://127.0.0.1:$CP_APISERVER_PORT"
CP_CA_CERT="$CP_PKI_DIR/ca.crt"
KUBECONFIG="$CP_RUN_DIR/kubeconfig"

case ":$PATH:" in
  *":$CP_BIN_DIR:"*) ;;
  *) PATH="$CP_BIN_DIR:$PATH" ;;
esac

export K8S_VERSION K8S_STAGING_VERSION ETCD_VERSION GATEWAY_API_VERSION METRICS_SERVER_VERSION
export K8S_OLDEST_VERSION K8S_OLDEST_STAGING_VERSION CP_LINE CP_SERVER_VERSION CP_SERVER_BIN_DIR
export CP_DIR CP_TESTS_DIR CP_CLUSTER_DIR CP_BIN_DIR CP_CRD_DIR CP_RUN_DIR CP_PKI_DIR \
  CP_LOG_DIR CP_PID_DIR CP_ETCD_PORT CP_ETCD_PEER_PORT CP_APISERVER_PORT CP_KCM_PORT \
  CP_SCHEDULER_PORT CP_METRICS_SERVER_PORT CP_METRICS_SERVER_BIN CP_APISERVER_URL CP_CA_CERT \
  KUBECONFIG PATH
