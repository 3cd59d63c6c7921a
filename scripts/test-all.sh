#!/usr/bin/env bash
# Runs every test of the project: what CI runs (.ci/run), and what to run before a
# commit. Works on a fresh machine with only the toolchains (Rust, Go, Python 3): it
# builds the Kubernetes control plane, Argo CD, Flux, metrics-server and crane from Go
# modules (each cached per version: tests/cache.sh), starts the control plane on
# loopback, runs every test against it, and stops it.
#
# The order is chosen for two cores (CONTRIBUTING.md has the figures):
#   1. formatting;
#   2. the control plane's Go build in the background, while Rust builds every target
#      once, linted by clippy as it compiles (one compilation serves clippy and tests);
#   3. the golden files against independent validators, and the doc tests;
#   4. the control plane starts; Argo CD, Flux, crane and the static healer build in the
#      background while the tests run (scripts/run-tests.py, end-to-end tests several
#      at a time); the tests that need those builds wait for them;
#   5. the oldest supported Kubernetes line: its control plane builds from the start at
#      the lowest priority (cached per version), taking only what the other steps leave;
#      beside the tests it starts on ports of its own and the end-to-end subset runs
#      against it (scripts/test-oldest.sh).
# Each step is announced; a table of every step's time is printed at the end, on
# success and on failure. The first failing step stops the run.
#
# To add a step, add a `step "<what>" <command>` line (or `background`/`finish`).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

STEPS="$ROOT/target/ci-steps"
rm -rf "$STEPS"
mkdir -p "$STEPS"
T0=$SECONDS
N=0

# step NAME COMMAND...: runs COMMAND in the foreground, timed.
step() {
  local name="$1" rc=0 start=$SECONDS id
  shift
  N=$((N + 1))
  id=$(printf '%02d' "$N")
  printf '\n==> [%s] %s\n' "$(date +%H:%M:%S)" "$name"
  printf '%s\t\trunning\t%s\n' "$name" "$((start - T0))" >"$STEPS/$id.time"
  "$@" || rc=$?
  printf '%s\t%s\t%s\t%s\n' "$name" "$((SECONDS - start))" \
    "$([[ $rc == 0 ]] && echo ok || echo "FAILED (exit $rc)")" "$((start - T0))" >"$STEPS/$id.time"
  return "$rc"
}

# background KEY NAME COMMAND...: runs COMMAND as a timed step in the background, its
# output in target/ci-steps/KEY.log; `finish KEY` waits for it. target/ci-steps/KEY.done
# holds "ok" or the failure once it ended (scripts/run-tests.py --gate waits on it).
declare -A BG_PID=()
background() {
  local key="$1" name="$2"
  shift 2
  printf '\n==> [%s] %s (in the background: target/ci-steps/%s.log)\n' "$(date +%H:%M:%S)" "$name" "$key"
  (
    rc=0
    step "$name" "$@" >"$STEPS/$key.log" 2>&1 || rc=$?
    if [[ $rc == 0 ]]; then echo ok >"$STEPS/$key.done"; else echo "$name failed (exit $rc)" >"$STEPS/$key.done"; fi
    exit "$rc"
  ) &
  BG_PID[$key]=$!
  N=$((N + 1))
}

finish() {
  local key="$1" rc=0
  wait "${BG_PID[$key]}" || rc=$?
  unset "BG_PID[$key]"
  printf '\n==> [%s] background step %s ended (exit %s); its output:\n' "$(date +%H:%M:%S)" "$key" "$rc"
  cat "$STEPS/$key.log"
  return "$rc"
}

# raise KEY NICE: sets background step KEY's processes, and so the ones they start, to
# NICE. A niceness is a thread's, and a child starts with the one of the thread that
# forked it (Go's build forks its compilers from any of its threads): so every thread
# of every process of the step. Lowering a niceness needs the right to (root, or
# CAP_SYS_NICE); without it the step keeps its niceness, and only its end moves.
raise() {
  local key="$1" nice="$2" pids=() next=() tids=() p t
  [[ -n "${BG_PID[$key]:-}" ]] || return 0
  next=("${BG_PID[$key]}")
  while [[ ${#next[@]} -gt 0 ]]; do
    pids+=("${next[@]}")
    mapfile -t next < <(for p in "${next[@]}"; do ps -o pid= --ppid "$p" 2>/dev/null; done | tr -d ' ')
  done
  for p in "${pids[@]}"; do
    for t in /proc/"$p"/task/*; do [[ -e $t ]] && tids+=("${t##*/}"); done
  done
  [[ ${#tids[@]} -gt 0 ]] || return 0
  renice -n "$nice" -p "${tids[@]}" >/dev/null 2>&1 || echo "(could not raise $key to nice $nice: it keeps its niceness)"
}

# after KEY COMMAND...: waits until background step KEY ended, then runs COMMAND if it
# succeeded (in a background step, so the wait holds nothing else up).
after() {
  local key="$1"
  shift
  while [[ ! -f "$STEPS/$key.done" ]]; do sleep 2; done
  [[ "$(cat "$STEPS/$key.done")" == ok ]] || { echo "not run: $(cat "$STEPS/$key.done")" >&2; return 1; }
  "$@"
}

table() {
  local f total=$((SECONDS - T0))
  printf '\n==> step times (wall clock; background steps overlap the others)\n'
  printf '%-92s %8s  %-7s %s\n' step seconds "starts" result
  for f in "$STEPS"/*.time; do
    [[ -f $f ]] || continue
    IFS=$'\t' read -r name secs result start <"$f"
    printf '%-92s %8s  +%-6s %s\n' "$name" "${secs:--}" "$start" "$result"
  done
  printf '%-92s %8s\n' "total" "$total"
}

CLUSTER_STARTED=0
on_exit() {
  local rc=$? key
  for key in "${!BG_PID[@]}"; do
    kill -- "${BG_PID[$key]}" 2>/dev/null || true
  done
  if [[ $CLUSTER_STARTED == 1 ]]; then
    printf '\n==> [%s] stopping the control plane\n' "$(date +%H:%M:%S)"
    tests/controlplane/stop.sh || true
  fi
  table
  if [[ $rc == 0 ]]; then echo "all tests passed"; else echo "FAILED (exit $rc)"; fi
  exit "$rc"
}
trap on_exit EXIT

step "formatting (cargo fmt --check)" cargo fmt --all -- --check

background controlplane "Go: Kubernetes control plane and metrics-server (cached per version)" \
  bash -c 'tests/controlplane/build.sh && tests/controlplane/build-metrics-server.sh'

# shellcheck disable=SC1091
. tests/k8s-version.env
# At nice 19 the oldest line's build gets about 1.5% of a core the others want, and all
# of one they leave: the pauses of the Rust and control-plane builds, which the tests
# wait for. Once the tests start it is raised to nice 5 (`raise`), so that it ends while
# the main suite still runs: left at nice 19 it ended at +2,039 s of a cold run, after
# the main suite, and its subset ran alone at the end.
background oldest_build "Go: Kubernetes $K8S_OLDEST_VERSION's control plane (the oldest supported line), at the lowest priority (cached per version)" \
  nice -n 19 tests/controlplane/build.sh --oldest

# Clippy lints while the test build compiles: clippy-driver is rustc plus the lints, so
# one compilation gives both the lints (as `cargo clippy --all-targets -- -D warnings`)
# and the binaries. Exported for the whole run, so that any later cargo call agrees with
# this one and finds everything built.
RUSTC_WORKSPACE_WRAPPER="$(rustup which clippy-driver 2>/dev/null || command -v clippy-driver)"
export RUSTC_WORKSPACE_WRAPPER
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
BINARIES="$ROOT/target/ci-steps/test-binaries.json"
build_rust() {
  cargo test --workspace --all-targets --no-run --locked --message-format=json-render-diagnostics >"$BINARIES"
  # The binaries the end-to-end tests run (the test build links only those that some
  # package's integration tests name).
  cargo build --workspace --bins --locked
}
step "Rust: every target once, linted by clippy (warnings are errors)" build_rust
# The end-to-end tests find the binaries just built; none of them runs cargo.
export CELLD_E2E_NO_BUILD=1

step "golden manifests against independent schema validators" scripts/validate-golden.sh golden

step "doc tests (cargo test --doc)" cargo test --workspace --doc --locked

finish controlplane

# Argo CD, Flux, crane and the static healer: only a few tests need them, so they build
# while the others run. The image test builds from the dev profile (unoptimized,
# stripped): the same packaging as a release image at about half the compile time; the
# test runs the same build again (a no-op then). Publish with the default, image.
export CELLD_IMAGE_PROFILE=dev
# A test that uses the engines outside the gitops_* files waits for this file itself.
export CELLD_GITOPS_BUILD_DONE="$STEPS/gitops.done"
rm -f "$CELLD_GITOPS_BUILD_DONE"
background gitops "Go: real Argo CD and Flux code for the GitOps tests (cached per version)" \
  tests/gitops/build.sh
background image "crane and the static (musl) celld-healer for the image test (crane cached per version)" \
  scripts/build-image.sh --build-only

# The clock tests run the healer under libfaketime (Debian's package, fetched without
# root into target/ when the system has none).
faketime_env() { tests/faketime.sh >"$STEPS/faketime.env"; }
step "libfaketime for the clock tests (Debian package)" faketime_env
# shellcheck disable=SC1091
. "$STEPS/faketime.env"

step "starting the control plane on loopback (waits for readiness)" tests/controlplane/start.sh
CLUSTER_STARTED=1
# From here on an end-to-end test that cannot reach the cluster fails instead of
# printing its not-run notice.
export CELLD_E2E=1

raise oldest_build 5
background oldest "Kubernetes $K8S_OLDEST_VERSION (the oldest supported line): its control plane started and the end-to-end subset (scripts/test-oldest.sh)" \
  after oldest_build scripts/test-oldest.sh --binaries "$BINARIES" --gate "celld-e2e/gitops_=$STEPS/gitops.done"

step "unit, golden, guide, simulation and end-to-end tests (scripts/run-tests.py)" \
  python3 scripts/run-tests.py --binaries "$BINARIES" \
  --gate "celld-e2e/gitops_=$STEPS/gitops.done" \
  --gate "celld-e2e/healer_image=$STEPS/image.done"

finish gitops
finish image
finish oldest_build
finish oldest
