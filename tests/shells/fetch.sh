#!/usr/bin/env bash
# Puts zsh and fish where the completion test (generator/tests/conventions.rs) finds
# them, without root: Debian's packages, downloaded from the distribution's mirror
# (`apt-get download`) and unpacked into target/shells. Prints KEY=VALUE lines:
#   ZSH, ZSH_MODULES, ZSH_FUNCTIONS, FISH, LIBS (for LD_LIBRARY_PATH)
# Cost: about 8 MB and two seconds the first time in a checkout, nothing after.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

dest="$PWD/target/shells"
packages=(zsh zsh-common fish fish-common libpcre2-32-0)
if [[ ! -x $dest/bin/zsh || ! -x $dest/usr/bin/fish ]]; then
  command -v apt-get >/dev/null && command -v dpkg >/dev/null \
    || { echo "shells/fetch.sh: needs apt-get and dpkg (Debian) to fetch zsh and fish" >&2; exit 1; }
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && apt-get download "${packages[@]}" >/dev/null 2>&1) \
    || { echo "shells/fetch.sh: apt-get download ${packages[*]} failed (is the Debian mirror reachable?)" >&2; exit 1; }
  mkdir -p "$dest"
  for deb in "$tmp"/*.deb; do dpkg -x "$deb" "$dest"; done
fi
modules=$(ls -d "$dest"/usr/lib/x86_64-linux-gnu/zsh/*/ | head -n 1)
echo "ZSH=$dest/bin/zsh"
echo "ZSH_MODULES=${modules%/}"
echo "ZSH_FUNCTIONS=$dest/usr/share/zsh/functions"
echo "FISH=$dest/usr/bin/fish"
echo "LIBS=$dest/usr/lib/x86_64-linux-gnu"
