#!/usr/bin/env bash
# Runs the end-to-end subset on the oldest supported Kubernetes line
# ($K8S_OLDEST_VERSION in tests/k8s-version.env), on a second control plane of its own
# (its own state directory and ports), so it can run beside the main suite:
#
#   - start_guard: a fleet starts at zero from Git's `replicas: 0`, the healer takes the
#     field over, and the replicas policy refuses an engine without ignore rules and a
#     StatefulSet rendered for a newer minor;
#   - the install bundle for that minor, with every install option (install_matrix);
#   - a PersistentFleet and a Bucket fleet synced by the real Argo CD and Flux code,
#     grown, a lost disk replaced, a member force-deleted, an upgrade synced;
#   - a foreign claim at data-<fleet>-0 (the ordinal-0 scenario);
#   - deletion protection, then a fleet deleted on purpose, in order.
#
# Everything is rendered and installed for that minor (CELLD_GEN_KUBERNETES_VERSION,
# which the tests check against the API server's /version).
#
# Usage: scripts/test-oldest.sh [RUN-TESTS ARGS...]
#   e.g. --binaries FILE (a `cargo test --no-run` already done), --gate TEXT=FILE
# Needs what scripts/test-all.sh needs; builds the oldest control plane if it is not
# built (tests/controlplane/build.sh --oldest, cached per version).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# shellcheck source=../tests/k8s-version.env
source tests/k8s-version.env
: "${K8S_OLDEST_VERSION:?}"
minor="${K8S_OLDEST_VERSION#v}"
minor="${minor%.*}"

# The subset, by job name (scripts/run-tests.py --filter).
SUBSET=(
  "start_guard::"
  "install_matrix::every_install_option_starts_a_ready_healer"
  "gitops_argocd::argocd_keeps_fleets_in_sync_through_healer_actions"
  "gitops_flux::flux_keeps_fleets_in_sync_through_healer_actions"
  "healer_lifecycle::foreign_claim_blocks_growth"
  "healer_lifecycle::fleet_deletion_in_order"
  "protection::protected_fleet_deletion_is_refused_until_protection_is_off"
)

# A second cluster beside the main one (tests/controlplane/env.sh reads these).
export CP_LINE=oldest
export CP_RUN_DIR="$ROOT/tests/.cluster/run-oldest"
export CP_ETCD_PORT=23791 CP_ETCD_PEER_PORT=23801 CP_APISERVER_PORT=16444 \
  CP_KCM_PORT=20258 CP_SCHEDULER_PORT=20260 CP_METRICS_SERVER_PORT=21444
export CELLD_GEN_KUBERNETES_VERSION="$minor"

log() { printf '[oldest %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

log "Kubernetes $K8S_OLDEST_VERSION: building (cached per version) and starting its control plane"
# scripts/test-all.sh builds it from its start at the lowest priority, so that this finds
# it built; run alone, it builds here (niced, in case other work runs).
nice -n 10 tests/controlplane/build.sh --oldest
started=0
stop() { [[ $started == 1 ]] && tests/controlplane/stop.sh || true; }
trap stop EXIT
# A run stopped from outside (test-all.sh on another step's failure) stops this cluster too.
trap 'exit 143' TERM INT
tests/controlplane/start.sh
started=1

# The tests find their cluster by CELLD_KUBECONFIG (kubesim::testing), kubectl by
# KUBECONFIG.
export KUBECONFIG="$CP_RUN_DIR/kubeconfig" CELLD_KUBECONFIG="$CP_RUN_DIR/kubeconfig" CELLD_E2E=1
filters=()
for f in "${SUBSET[@]}"; do filters+=(--filter "$f"); done
log "running ${#SUBSET[@]} end-to-end tests rendered for Kubernetes $minor"
# Two at a time (CELLD_OLDEST_JOBS): in CI it runs beside the main suite's eight, and
# with eight of its own the two-core machine was starved enough for a main-suite test to
# time out (a healer measured its clock 32 s off the API server's).
python3 scripts/run-tests.py "${filters[@]}" --jobs "${CELLD_OLDEST_JOBS:-2}" \
  --logs "$ROOT/target/test-logs-oldest" \
  --timings "${XDG_CACHE_HOME:-$HOME/.cache}/celld-fleet/test-timings-oldest.json" \
  "$@"
