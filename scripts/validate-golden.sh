#!/usr/bin/env bash
# Validates every rendered file in a directory (default: golden/) with schema validators
# that share no code with celld-gen:
#   - core kinds: kubernetes-validate --strict for the pinned Kubernetes minor;
#   - CelldFleet and CelldBucketReservation: our CRDs' openAPIV3Schema (`celld-gen crds`);
#   - HTTPRoute: the Gateway API CRD of the pinned Gateway API version;
#   - kustomization.yaml files: sorted resources that exist.
# A negative control runs first: deliberately broken objects must be rejected, so a
# validator that silently passes everything fails this script.
#
# Usage: scripts/validate-golden.sh [DIR]
# Needs: python3 (with venv and pip; packages pinned in scripts/ci-requirements.txt are
# installed into target/ci-venv/), cargo, and Go when the Gateway API CRDs are not in
# tests/.cluster/gateway-api/ yet (they are read from the Go module cache then).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
DIR="${1:-golden}"
# shellcheck source=../tests/k8s-version.env
source tests/k8s-version.env
: "${K8S_VERSION:?} ${GATEWAY_API_VERSION:?}"
minor="${K8S_VERSION#v}"
KUBE_VALIDATE_VERSION="${minor%.*}.0" # kubernetes-validate names schema sets by minor

log() { printf '[validate] %s\n' "$*"; }

VENV="$ROOT/target/ci-venv"
REQS="$ROOT/scripts/ci-requirements.txt"
if ! cmp -s "$REQS" "$VENV/.requirements" 2>/dev/null; then
  log "installing Python validators into $VENV"
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$REQS"
  cp "$REQS" "$VENV/.requirements"
fi

log "CRD schemas of CelldFleet and CelldBucketReservation (celld-gen crds)"
CRDS="$ROOT/target/ci-crds.json"
cargo run --quiet -p celld-gen -- crds >"$CRDS"

GATEWAY="$ROOT/tests/.cluster/gateway-api/$GATEWAY_API_VERSION"
if ! compgen -G "$GATEWAY/*.yaml" >/dev/null; then
  log "Gateway API $GATEWAY_API_VERSION CRDs not in $GATEWAY; reading them from the Go module cache"
  command -v go >/dev/null || { echo "go is needed to fetch the Gateway API CRDs" >&2; exit 1; }
  moddir="$(cd "$(mktemp -d)" && GOWORK=off GOFLAGS=-mod=mod go mod download -json \
    "sigs.k8s.io/gateway-api@$GATEWAY_API_VERSION" \
    | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')"
  GATEWAY="$moddir/config/crd/standard"
  compgen -G "$GATEWAY/*.yaml" >/dev/null || { echo "no CRDs in $GATEWAY" >&2; exit 1; }
fi

validate() {
  "$VENV/bin/python" scripts/validate-manifests.py "$1" --crds "$CRDS" \
    --gateway-crds "$GATEWAY" -k "$KUBE_VALIDATE_VERSION"
}

log "negative control: broken objects must be rejected"
neg="$(mktemp -d)"
trap 'rm -rf "$neg"' EXIT
src=golden
sed 's/^      partition: 0$/      partition: 0\n      bogus: 1/' \
  "$src/ledger/persistent/statefulset.yaml" >"$neg/statefulset-unknown-field.yaml"
sed 's/port: 8080/port: "8080"/' "$src/ledger/persistent/service.yaml" >"$neg/service-string-port.yaml"
sed 's/^  members: 3$/  members: 3\n  colour: blue/' \
  "$src/ledger/persistent/celldfleet.yaml" >"$neg/celldfleet-unknown-field.yaml"
sed 's/^  labels:$/  namespace: x\n  labels:/' \
  "$src/ledger/persistent/celldbucketreservation.yaml" >"$neg/reservation-namespaced.yaml"
sed 's/^    backendRefs:$/    backendRef:/' \
  "$src/web/routing-gateway/httproute.yaml" >"$neg/httproute-misspelt.yaml"
if out="$(validate "$neg")"; then
  echo "$out"
  echo "the validators accepted broken objects" >&2
  exit 1
fi
if ! grep -qx '0 passed, 5 failed' <<<"$out"; then
  echo "$out"
  echo "the validators did not reject every broken object" >&2
  exit 1
fi
log "negative control ok: all 5 broken objects rejected"

log "validating $DIR against Kubernetes $KUBE_VALIDATE_VERSION and the CRD schemas"
validate "$DIR"
