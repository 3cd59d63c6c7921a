#!/usr/bin/env bash
# Puts Debian's libfaketime where the clock tests (tests/e2e/tests/healer_clocks.rs) find
# it, without root: the system's copy when installed, else the package downloaded from
# the distribution's mirror (`apt-get download`) and unpacked into target/faketime.
# Prints the line to eval:  eval "$(tests/faketime.sh)"
# Cost: about two seconds the first time in a checkout (one 30 kB package), nothing after.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

lib=usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1
if [[ -f /$lib ]]; then
  echo "export CELLD_FAKETIME_LIB=/$lib"
  exit 0
fi
dest="$PWD/target/faketime"
if [[ ! -f $dest/$lib ]]; then
  command -v apt-get >/dev/null && command -v dpkg >/dev/null \
    || { echo "faketime.sh: needs apt-get and dpkg (Debian) to fetch libfaketime" >&2; exit 1; }
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && apt-get download libfaketime >&2) \
    || { echo "faketime.sh: apt-get download libfaketime failed (is the Debian mirror reachable?)" >&2; exit 1; }
  mkdir -p "$dest"
  dpkg -x "$tmp"/libfaketime_*.deb "$dest"
fi
[[ -f $dest/$lib ]] || { echo "faketime.sh: the package did not hold $lib" >&2; exit 1; }
echo "export CELLD_FAKETIME_LIB=$dest/$lib"
