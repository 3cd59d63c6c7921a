#!/usr/bin/env bash
# Renders every example fleet file in examples/ into DIR (default: golden/), replacing
# it. golden/ is what the golden tests compare with, byte for byte: after an intended
# change to the templates or examples, run this and review `git diff golden/`.
#
# Usage: scripts/render-examples.sh [DIR]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
cargo run --release --quiet -p celld-gen -- render examples -o "${1:-golden}"
