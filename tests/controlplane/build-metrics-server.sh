#!/usr/bin/env bash
# Builds the real metrics-server (sigs.k8s.io/metrics-server, version pinned in
# tests/k8s-version.env) for metrics.k8s.io on the test cluster, straight from the Go
# module proxy: `go install module@version` refuses a module with replace directives, so
# this is the published module as released. The stripped binary is cached per version:
#   tests/.cluster/bin/metrics-server/$METRICS_SERVER_VERSION/metrics-server
# and a second run does nothing.
#
# Usage: tests/controlplane/build-metrics-server.sh [--force]
set -euo pipefail

CP_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TESTS_DIR="$(dirname "$CP_DIR")"
# shellcheck source=../k8s-version.env
source "$TESTS_DIR/k8s-version.env"
: "${METRICS_SERVER_VERSION:?}"

BIN_DIR="$TESTS_DIR/.cluster/bin/metrics-server/$METRICS_SERVER_VERSION"
BIN="$BIN_DIR/metrics-server"
FORCE=0
case "${1:-}" in
  --force) FORCE=1 ;;
  "") ;;
  *) echo "usage: $0 [--force]" >&2; exit 2 ;;
esac

log() { printf '[build %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
command -v go >/dev/null || { echo "go not found on PATH" >&2; exit 1; }

# The module's go.mod asks for a Go release; if the local toolchain is older, Go's own
# toolchain switch fetches the one it names (GOTOOLCHAIN=auto) unless the caller pinned one.
export GOWORK=off
export GOTOOLCHAIN="${GOTOOLCHAIN:-auto}"
[[ "$GOTOOLCHAIN" == local ]] && export GOTOOLCHAIN=auto

# shellcheck source=../cache.sh
source "$TESTS_DIR/cache.sh"
CACHE_KEY="metrics-server/$METRICS_SERVER_VERSION"
[[ $FORCE == 1 || -x "$BIN" ]] || cache_restore "$CACHE_KEY" "$BIN" || true
if [[ $FORCE == 0 && -x "$BIN" ]] && "$BIN" --help >/dev/null 2>&1; then
  log "metrics-server $METRICS_SERVER_VERSION present in $BIN_DIR; nothing to build"
  cache_keep "$CACHE_KEY" "$BIN"
  exit 0
fi

log "building metrics-server $METRICS_SERVER_VERSION (module proxy, no replace directives)"
start=$SECONDS
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$BIN_DIR"
# -s -w: no symbol table or DWARF (about half the size); -trimpath: reproducible paths.
(cd "$tmp" && GOBIN="$tmp/bin" go install -trimpath -buildvcs=false -ldflags "-s -w" \
  "sigs.k8s.io/metrics-server/cmd/metrics-server@$METRICS_SERVER_VERSION")
mv -f "$tmp/bin/metrics-server" "$BIN"
cache_save "$CACHE_KEY" "$BIN"
log "built metrics-server in $((SECONDS - start))s: $BIN"
