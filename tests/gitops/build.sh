#!/usr/bin/env bash
# Builds the real Argo CD and Flux code the GitOps end-to-end tests run
# (tests/e2e/tests/gitops_*.rs), from the Go module proxy:
#   tests/gitops/argocd (github.com/argoproj/argo-cd/v3)      -> tests/.cluster/gitops/bin/celld-argocd
#   tests/gitops/flux   (github.com/fluxcd/pkg/ssa and
#                        github.com/fluxcd/kustomize-controller/api) -> tests/.cluster/gitops/bin/celld-flux
# and copies the files the tests read from the same module versions:
#   tests/.cluster/gitops/argocd/: application-crd.yaml, appproject-crd.yaml, argocd-cm.yaml,
#                                  argocd-repo-server-deployment.yaml (as Argo CD ships them)
#   tests/.cluster/gitops/flux/:   kustomize.toolkit.fluxcd.io_kustomizations.yaml
#   tests/.cluster/gitops/prometheus/: monitoring.coreos.com_servicemonitors.yaml (the
#                                  Prometheus Operator's CRD, for `install --service-monitor`)
# Versions are those of each module's go.mod (the one place they are pinned), except the
# modules the control plane is built from too: both build in the workspace they share
# with the control plane (tests/go-workspace.sh), where those are pinned at the control
# plane's versions, so the packages the control plane compiled are not compiled again.
# The workspace's toolchain ($GO_WORKSPACE_TOOLCHAIN, both modules declare go 1.27) is
# fetched from the module proxy. A binary whose inputs (go.mod, go.sum, *.go, the
# workspace, toolchain) have not changed since it was built is not rebuilt.
#
# Usage: tests/gitops/build.sh [--force]
set -euo pipefail

GITOPS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TESTS_DIR="$(dirname "$GITOPS_DIR")"
OUT_DIR="$TESTS_DIR/.cluster/gitops"
BIN_DIR="$OUT_DIR/bin"
# The Prometheus Operator whose ServiceMonitor CRD `install --service-monitor` is checked
# against (only its CRD file is read; nothing of it is built).
PROMETHEUS_OPERATOR_VERSION="v0.86.1"

FORCE=0
case "${1:-}" in
  --force) FORCE=1 ;;
  "") ;;
  *) echo "usage: $0 [--force]" >&2; exit 2 ;;
esac

command -v go >/dev/null || { echo "go not found on PATH" >&2; exit 1; }
# shellcheck source=../go-workspace.sh
source "$TESTS_DIR/go-workspace.sh"
GOWORK="$(GOWORK=off go_workspace)"
export GOWORK GOTOOLCHAIN="$GO_WORKSPACE_TOOLCHAIN"

log() { printf '[gitops %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

# Hash of everything a binary is built from.
inputs_hash() {
  (cd "$1" && cat go.mod go.sum ./*.go "$GOWORK" && echo "$GO_WORKSPACE_TOOLCHAIN") | sha256sum | cut -c1-16
}

# Directory of module "$2"@"$3", downloaded by Go in module dir "$1".
module_dir() {
  (cd "$1" && go mod download -json "$2@$3") \
    | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p'
}

# Version of module "$2" required by module dir "$1".
module_version() {
  (cd "$1" && go list -m -f '{{.Version}}' "$2")
}

# build NAME: builds tests/gitops/NAME into $BIN_DIR/celld-NAME unless up to date.
build() {
  local name="$1" moddir="$GITOPS_DIR/$1" out="$BIN_DIR/celld-$1" hash start=$SECONDS
  hash="$(inputs_hash "$moddir")"
  if [[ $FORCE == 0 && "$(cat "$out.inputs" 2>/dev/null)" != "$hash" ]] \
    && cache_restore "gitops/celld-$name-$hash" "$out"; then
    echo "$hash" >"$out.inputs"
  fi
  if [[ $FORCE == 0 && -x "$out" && "$(cat "$out.inputs" 2>/dev/null)" == "$hash" ]]; then
    log "celld-$name is up to date ($out)"
    cache_keep "gitops/celld-$name-$hash" "$out"
    return 0
  fi
  log "building celld-$name with $GO_WORKSPACE_TOOLCHAIN in the shared workspace (cold: minutes, less after the control plane's build)"
  (cd "$moddir" && go build -trimpath -buildvcs=false -ldflags '-s -w' -o "$out.tmp" .)
  mv -f "$out.tmp" "$out"
  echo "$hash" >"$out.inputs"
  cache_save "gitops/celld-$name-$hash" "$out"
  log "built celld-$name in $((SECONDS - start))s"
}

# copy SRC DST: installs one file atomically.
copy() {
  [[ -f "$1" ]] || { echo "missing $1" >&2; exit 1; }
  install -m 0644 "$1" "$2.tmp"
  mv -f "$2.tmp" "$2"
}

# shellcheck source=../cache.sh
source "$TESTS_DIR/cache.sh"
mkdir -p "$BIN_DIR" "$OUT_DIR/argocd" "$OUT_DIR/flux"
build argocd
build flux

argo_version="$(module_version "$GITOPS_DIR/argocd" github.com/argoproj/argo-cd/v3)"
argo_dir="$(module_dir "$GITOPS_DIR/argocd" github.com/argoproj/argo-cd/v3 "$argo_version")"
copy "$argo_dir/manifests/crds/application-crd.yaml" "$OUT_DIR/argocd/application-crd.yaml"
copy "$argo_dir/manifests/crds/appproject-crd.yaml" "$OUT_DIR/argocd/appproject-crd.yaml"
copy "$argo_dir/manifests/base/config/argocd-cm.yaml" "$OUT_DIR/argocd/argocd-cm.yaml"
copy "$argo_dir/manifests/base/repo-server/argocd-repo-server-deployment.yaml" \
  "$OUT_DIR/argocd/argocd-repo-server-deployment.yaml"
echo "$argo_version" >"$OUT_DIR/argocd/VERSION"

# The CRD ships in the controller's module, released together with its api module.
kc_version="$(module_version "$GITOPS_DIR/flux" github.com/fluxcd/kustomize-controller/api)"
kc_dir="$(module_dir "$GITOPS_DIR/flux" github.com/fluxcd/kustomize-controller "$kc_version")"
copy "$kc_dir/config/crd/bases/kustomize.toolkit.fluxcd.io_kustomizations.yaml" \
  "$OUT_DIR/flux/kustomize.toolkit.fluxcd.io_kustomizations.yaml"
ssa_version="$(module_version "$GITOPS_DIR/flux" github.com/fluxcd/pkg/ssa)"
echo "ssa $ssa_version kustomize-controller $kc_version" >"$OUT_DIR/flux/VERSION"
mkdir -p "$OUT_DIR/prometheus"
if [[ "$(cat "$OUT_DIR/prometheus/VERSION" 2>/dev/null)" != "$PROMETHEUS_OPERATOR_VERSION" ]]; then
  # Outside any module: `go mod download` of one module version, read from its directory.
  po_dir="$(cd "$(mktemp -d)" && GOFLAGS=-mod=mod go mod download -json \
    "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION" \
    | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')"
  copy "$po_dir/example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml" \
    "$OUT_DIR/prometheus/monitoring.coreos.com_servicemonitors.yaml"
  echo "$PROMETHEUS_OPERATOR_VERSION" >"$OUT_DIR/prometheus/VERSION"
fi
log "Argo CD $argo_version, Flux ssa $ssa_version / kustomize-controller $kc_version, Prometheus Operator CRDs $PROMETHEUS_OPERATOR_VERSION ready in $OUT_DIR"
