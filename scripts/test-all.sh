#!/usr/bin/env bash
# Runs every test of the project: what CI runs (.ci/run), and what to run before a
# commit. Works on a fresh machine with only the toolchains (Rust, Go, Python 3): it
# builds the Kubernetes control plane from Go modules (cached in tests/.cluster/bin/ and
# Go's build cache), starts it on loopback, runs every test against it, and stops it.
# Each step is announced; the first failure stops the run.
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

step "golden manifests against independent schema validators"
scripts/validate-golden.sh golden

step "Kubernetes control plane for the end-to-end tests (built once per version, then cached)"
tests/controlplane/build.sh

step "real Argo CD and Flux code for the GitOps tests (built once per version, then cached)"
tests/gitops/build.sh

step "metrics-server for metrics.k8s.io (built once per version, then cached)"
tests/controlplane/build-metrics-server.sh

step "crane and the static (musl) celld-healer for the image test (crane cached per version)"
# The image test builds from the dev profile (unoptimized, stripped): the same packaging
# as a release image at about half the compile time. Publish with the default, release.
export CELLD_IMAGE_PROFILE=dev
scripts/build-image.sh --build-only

step "binaries the end-to-end tests run (celld-healer, kubesim, celld-stub, celld-gen)"
cargo build --workspace --bins

step "starting the control plane on loopback"
tests/controlplane/start.sh
trap 'step "stopping the control plane"; tests/controlplane/stop.sh' EXIT
# From here on an end-to-end test that cannot reach the cluster fails instead of
# printing its not-run notice.
export CELLD_E2E=1

step "unit, golden, simulation and end-to-end tests (cargo test --workspace)"
cargo test --workspace

step "all tests passed"
