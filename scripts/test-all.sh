#!/usr/bin/env bash
# Runs every test of the project: what CI runs (.ci/run), and what to run before a
# commit. Each step is announced; the first failure stops the run.
#
# To add a step, append a `step "<what>"` line followed by its command(s).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

step() { printf '\n==> [%s] %s\n' "$(date +%H:%M:%S)" "$*"; }

step "formatting (cargo fmt --check)"
cargo fmt --all -- --check

step "lints (cargo clippy, warnings are errors)"
cargo clippy --workspace --all-targets -- -D warnings

step "unit, golden and integration tests (cargo test --workspace)"
cargo test --workspace

step "golden manifests against independent schema validators"
scripts/validate-golden.sh golden

step "all tests passed"
