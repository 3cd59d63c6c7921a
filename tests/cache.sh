# Sourced by the build scripts of tests/ and scripts/build-image.sh: a machine-wide cache
# of the Go binaries the tests run, so that a fresh clone on a machine that built them
# before copies them (about a second) instead of building or relinking them (Go's build
# cache keeps compiled packages, not linked binaries: a relink of the control plane and
# Argo CD takes minutes on two cores).
#
# Each entry is a folder named for exactly what it holds (a pinned version, or a hash of
# a module's inputs), so an entry is never stale; a changed pin makes a new entry.
#   CELLD_CACHE_DIR   default ${XDG_CACHE_HOME:-$HOME/.cache}/celld-fleet
#   CELLD_NO_CACHE=1  neither reads nor writes it (what a cold run measures)

CELLD_CACHE_DIR="${CELLD_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/celld-fleet}"

# cache_restore KEY FILE...: copies every FILE's cached copy into place, only if the
# entry holds all of them. Succeeds when it did.
cache_restore() {
  local key="$1" f
  shift
  [[ ${CELLD_NO_CACHE:-0} != 1 ]] || return 1
  for f in "$@"; do [[ -f "$CELLD_CACHE_DIR/$key/$(basename "$f")" ]] || return 1; done
  for f in "$@"; do
    mkdir -p "$(dirname "$f")"
    cp -p "$CELLD_CACHE_DIR/$key/$(basename "$f")" "$f.tmp" && mv -f "$f.tmp" "$f"
  done
  echo "[cache] restored $* from $CELLD_CACHE_DIR/$key" >&2
}

# cache_save KEY FILE...: keeps a copy of each FILE under KEY (atomically per file; a
# failure to write the cache is reported, never fatal).
cache_save() {
  local key="$1" f dir
  shift
  [[ ${CELLD_NO_CACHE:-0} != 1 ]] || return 0
  dir="$CELLD_CACHE_DIR/$key"
  mkdir -p "$dir" 2>/dev/null || { echo "[cache] cannot write $dir" >&2; return 0; }
  for f in "$@"; do
    cp -p "$f" "$dir/.$(basename "$f").tmp" 2>/dev/null \
      && mv -f "$dir/.$(basename "$f").tmp" "$dir/$(basename "$f")" \
      || echo "[cache] could not keep $f in $dir" >&2
  done
}

# cache_keep KEY FILE...: cache_save, unless the entry already holds every FILE (for
# binaries that were present already: built before the cache existed, or by hand).
cache_keep() {
  local key="$1" f
  shift
  for f in "$@"; do
    [[ -f "$CELLD_CACHE_DIR/$key/$(basename "$f")" ]] || { cache_save "$key" "$@"; return 0; }
  done
}
