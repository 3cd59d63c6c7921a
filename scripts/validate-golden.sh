#!/usr/bin/env bash
# Validates every rendered file in a directory (default: golden/) with schema validators
# that share no code with celld-gen:
#   - core kinds: kubernetes-validate --strict for the pinned Kubernetes minor;
#   - CelldFleet and CelldBucketReservation: our CRDs' openAPIV3Schema (`celld-gen crds`);
#   - HTTPRoute: the Gateway API CRD of the pinned Gateway API version;
#   - kustomization.yaml files: sorted resources that exist;
#   - and for every supported minor (celld-gen version --format json), the install bundle
#     (`install --stdout --kubernetes-version`) and the examples rendered for it, against
#     that minor's API schemas, with a negative control (the newest bundle refused by the
#     oldest minor's schemas: it has no MutatingAdmissionPolicy v1).
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

# split_stream DIR: the `---` stream on stdin, one file per object in DIR.
split_stream() {
  mkdir -p "$1"
  awk -v dir="$1" 'BEGIN { n = 0; f = sprintf("%s/%03d.yaml", dir, n) }
    /^---$/ { n++; f = sprintf("%s/%03d.yaml", dir, n); next }
    { print > f }'
  # A leading `---` leaves an empty first file; comments alone are not an object.
  for f in "$1"/*.yaml; do
    grep -qv '^\s*\(#.*\)\?$' "$f" || rm -f "$f"
  done
}

versions="$(cargo run --quiet -p celld-gen -- version --format json \
  | "$VENV/bin/python" -c 'import json,sys; print(" ".join(json.load(sys.stdin)["kubernetes"]["supported"]))')"
for m in $versions; do
  log "Kubernetes $m: the install bundle and the examples rendered for it"
  cargo run --quiet -p celld-gen -- install --stdout --kubernetes-version "$m" \
    | split_stream "$neg/install-$m"
  "$VENV/bin/python" scripts/validate-manifests.py "$neg/install-$m" --crds "$CRDS" \
    --gateway-crds "$GATEWAY" -k "$m.0" --install | tail -n 1
  cargo run --quiet -p celld-gen -- render examples/ -o "$neg/examples-$m" \
    --kubernetes-version "$m" 2>/dev/null
  "$VENV/bin/python" scripts/validate-manifests.py "$neg/examples-$m" --crds "$CRDS" \
    --gateway-crds "$GATEWAY" -k "$m.0" | tail -n 1
done
oldest="${versions%% *}" newest="${versions##* }"
log "negative control: the Kubernetes $newest bundle against the $oldest schemas is refused"
if out="$("$VENV/bin/python" scripts/validate-manifests.py "$neg/install-$newest" --crds "$CRDS" \
  --gateway-crds "$GATEWAY" -k "$oldest.0" --install)"; then
  echo "$out"
  echo "the $oldest schemas accepted a bundle with a MutatingAdmissionPolicy v1" >&2
  exit 1
fi
grep -q 'FAIL .*MutatingAdmissionPolicy\|kubernetes-validate' <<<"$out" \
  || { echo "$out"; echo "refused for another reason than the policy" >&2; exit 1; }
