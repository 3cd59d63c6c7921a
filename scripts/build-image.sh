#!/usr/bin/env bash
# Builds the healer image without a Docker daemon and pushes it to a registry:
#   1. crane (github.com/google/go-containerregistry, version pinned in
#      scripts/image/crane/go.mod) from the Go module proxy, into
#      tests/.cluster/image/bin/crane; rebuilt only when its inputs change;
#   2. a static, stripped celld-healer: cargo build --profile image (or
#      $CELLD_IMAGE_PROFILE) --target x86_64-unknown-linux-musl
#      (ring, the TLS crypto provider, compiles its C and assembly with the system cc);
#   3. one layer holding /usr/local/bin/celld-healer and an /etc/passwd and /etc/group
#      naming the non-root user 65532 (no shell, no package manager, nothing else);
#   4. crane appends the layer to the empty image and pushes it to REF, then sets the
#      entrypoint, the user, the platform and the OCI labels, and pushes again to REF.
#
# Usage: scripts/build-image.sh [--build-only] REF
#   REF: where to push, e.g. ghcr.io/you/celld-healer:v0.1.0 (log in first with
#        `crane auth login`); 127.0.0.1:PORT/... is plain http.
#   --build-only: build crane and the binary, push nothing (what scripts/test-all.sh runs).
# Prints the pushed reference with its digest (REF@sha256:...) on stdout.
# Env: CRANE (a crane to use instead of building one), CARGO_TARGET_DIR,
#      CELLD_IMAGE_PROFILE (image, the default and what to publish: release optimised for
#      size, see Cargo.toml; release; or dev, which scripts/test-all.sh sets: the same
#      static binary unoptimized, so that CI compiles the healer's dependencies for musl
#      in about half the time). Each is stripped.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CRANE_MOD="$ROOT/scripts/image/crane"
CRANE_OUT="$ROOT/tests/.cluster/image/bin/crane"
TARGET=x86_64-unknown-linux-musl
UID_GID=65532

log() { printf '[image %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
# shellcheck source=../tests/cache.sh
source "$ROOT/tests/cache.sh"

BUILD_ONLY=0
REF=""
for a in "$@"; do
  case "$a" in
    --build-only) BUILD_ONLY=1 ;;
    -*) echo "usage: $0 [--build-only] REF" >&2; exit 2 ;;
    *) [[ -z $REF ]] || { echo "usage: $0 [--build-only] REF" >&2; exit 2; }; REF="$a" ;;
  esac
done
[[ $BUILD_ONLY == 1 || -n $REF ]] || { echo "usage: $0 [--build-only] REF" >&2; exit 2; }

# crane, built from the pinned module unless $CRANE names one.
build_crane() {
  local hash start=$SECONDS
  export GOWORK=off
  command -v go >/dev/null || { echo "go not found on PATH" >&2; exit 1; }
  hash="$( (cd "$CRANE_MOD" && cat go.mod go.sum && go env GOVERSION) | sha256sum | cut -c1-16)"
  if [[ "$(cat "$CRANE_OUT.inputs" 2>/dev/null)" != "$hash" ]] \
    && cache_restore "crane/$hash" "$CRANE_OUT"; then
    echo "$hash" >"$CRANE_OUT.inputs"
  fi
  if [[ -x $CRANE_OUT && "$(cat "$CRANE_OUT.inputs" 2>/dev/null)" == "$hash" ]]; then
    cache_keep "crane/$hash" "$CRANE_OUT"
    return 0
  fi
  log "building crane ($(cd "$CRANE_MOD" && go list -m -f '{{.Version}}' github.com/google/go-containerregistry))"
  mkdir -p "$(dirname "$CRANE_OUT")"
  (cd "$CRANE_MOD" && go build -trimpath -buildvcs=false -ldflags '-s -w' -o "$CRANE_OUT.tmp" \
    github.com/google/go-containerregistry/cmd/crane)
  mv -f "$CRANE_OUT.tmp" "$CRANE_OUT"
  echo "$hash" >"$CRANE_OUT.inputs"
  cache_save "crane/$hash" "$CRANE_OUT"
  log "built crane in $((SECONDS - start))s"
}
if [[ -z ${CRANE:-} ]]; then
  build_crane
  CRANE="$CRANE_OUT"
fi

start=$SECONDS
# ring compiles a little C and assembly with no libc headers, so the system cc serves
# the musl target (no musl-gcc needed).
export CC_x86_64_unknown_linux_musl="${CC_x86_64_unknown_linux_musl:-cc}"
rustup target list --installed 2>/dev/null | grep -qx "$TARGET" || rustup target add "$TARGET" >&2
PROFILE="${CELLD_IMAGE_PROFILE:-image}"
case "$PROFILE" in
  image | release) PROFILE_DIR=$PROFILE ;;
  dev) PROFILE_DIR=debug; export CARGO_PROFILE_DEV_DEBUG=0 ;;
  *) echo "CELLD_IMAGE_PROFILE must be image, release or dev, not $PROFILE" >&2; exit 2 ;;
esac
# No symbols or debug information in the image (this target only).
PROFILE_UPPER="$(echo "$PROFILE" | tr '[:lower:]' '[:upper:]')"
export "CARGO_PROFILE_${PROFILE_UPPER}_STRIP=symbols"
cargo build --profile "$PROFILE" --locked --target "$TARGET" -p celld-healer --bin celld-healer >&2
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
BIN="$TARGET_DIR/$TARGET/$PROFILE_DIR/celld-healer"
# Static: no program interpreter, so it runs on an image with nothing else.
if readelf -lW "$BIN" | grep -q 'Requesting program interpreter'; then
  echo "$BIN is dynamically linked" >&2
  exit 1
fi
log "static celld-healer ($PROFILE profile, $(($(stat -c %s "$BIN") / 1048576)) MiB) ready in $((SECONDS - start))s ($BIN)"
[[ $BUILD_ONLY == 0 ]] || exit 0

VERSION="$(sed -n 's/^version = "\(.*\)"$/\1/p' "$ROOT/Cargo.toml" | head -1)"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/root/usr/local/bin" "$WORK/root/etc"
install -m 0755 "$BIN" "$WORK/root/usr/local/bin/celld-healer"
printf 'nonroot:x:%s:%s:nonroot:/nonexistent:/sbin/nologin\n' "$UID_GID" "$UID_GID" >"$WORK/root/etc/passwd"
printf 'nonroot:x:%s:\n' "$UID_GID" >"$WORK/root/etc/group"
chmod 0644 "$WORK/root/etc/passwd" "$WORK/root/etc/group"
# A reproducible layer: sorted, owned by root, no timestamps.
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 --format=gnu \
  -C "$WORK/root" -cf "$WORK/layer.tar" etc usr

insecure=()
[[ $REF == 127.0.0.1:* || $REF == localhost:* ]] && insecure=(--insecure)
"$CRANE" append "${insecure[@]}" --oci-empty-base -f "$WORK/layer.tar" -t "$REF" >/dev/null
"$CRANE" mutate "${insecure[@]}" "$REF" -t "$REF" \
  --entrypoint /usr/local/bin/celld-healer \
  --user "$UID_GID:$UID_GID" \
  --set-platform linux/amd64 \
  -l org.opencontainers.image.title=celld-healer \
  -l "org.opencontainers.image.version=$VERSION" >/dev/null
digest="$("$CRANE" digest "${insecure[@]}" "$REF")"
# The repository without the tag (a registry's :port is not a tag).
repo="$REF"
[[ ${REF##*/} == *:* ]] && repo="${REF%:*}"
log "pushed $repo@$digest"
log "install it with: celld-gen install --image $repo@$digest; or make it a celld-gen build's default: CELLD_GEN_HEALER_IMAGE=$repo@$digest cargo build --release -p celld-gen"
echo "$repo@$digest"
