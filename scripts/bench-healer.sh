#!/usr/bin/env bash
# Measures the healer at fleet scale on the test control plane and writes the table into
# docs/performance.md (between the bench-healer markers), with the machine, the date and
# the command. A measurement, not a timed test: nothing here passes or fails on time.
#
#   scripts/bench-healer.sh              # 50, 200 and 1000 fleets of 3 members
#   scripts/bench-healer.sh 50,200       # these counts
#
# For each count (ascending, in one cluster, fleets added between counts) the
# `healer_scale` end-to-end test measures, with a release build of the healer: the time
# until every fleet is Ready, then one steady minute: API requests, CPU seconds and
# resident memory (and checks that the steady state makes no request but the lease
# renewals and watches). It starts its own control plane on the ports of
# tests/controlplane/env.sh (override the CP_*_PORT variables to run beside another) and
# stops it at the end. Needs what scripts/test-all.sh needs; builds what is missing.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
COUNTS="${1:-50,200,1000}"
[[ $COUNTS =~ ^[0-9]+(,[0-9]+)*$ ]] || { echo "usage: $0 [COUNT[,COUNT...]]" >&2; exit 2; }
DOC="$ROOT/docs/performance.md"
BEGIN='<!-- bench-healer:begin -->'
END='<!-- bench-healer:end -->'
grep -qx -- "$BEGIN" "$DOC" && grep -qx -- "$END" "$DOC" \
  || { echo "$DOC has no $BEGIN ... $END section" >&2; exit 1; }

step() { printf '\n==> [%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

step "control plane binaries (cached per version)"
tests/controlplane/build.sh >&2
step "a release build of celld-healer, and the test binaries"
cargo build --release -p celld-healer >&2
cargo build --workspace --bins >&2
step "starting the control plane"
tests/controlplane/start.sh >&2
trap 'step "stopping the control plane"; tests/controlplane/stop.sh >&2' EXIT

LOG="$(mktemp)"
step "healer_scale with $COUNTS fleets (log: $LOG)"
CELLD_E2E=1 CELLD_SCALE_FLEETS="$COUNTS" CELLD_HEALER_BIN="$ROOT/target/release/celld-healer" \
  cargo test -p celld-e2e --test healer_scale -- --nocapture >"$LOG" 2>&1 \
  || { tail -40 "$LOG" >&2; echo "healer_scale failed; full log: $LOG" >&2; exit 1; }

# `[scale-row] key=value ...` lines -> one Markdown row each.
TABLE="$(grep -o '\[scale-row\].*' "$LOG" | sed 's/^\[scale-row\] //' | awk '
  BEGIN {
    print "| fleets (Pods) | all Ready after | resident memory | per fleet | CPU per steady minute | API requests per steady minute | of which writes | reconciles per minute |"
    print "| --- | --- | --- | --- | --- | --- | --- | --- |"
  }
  {
    for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
    printf "| %s (%s) | %s s | %s MiB | %s KiB | %s s | %s | %s | %s |\n",
      v["fleets"], v["pods"], v["ready_s"], v["rss_mib"], v["rss_per_fleet_kib"],
      v["cpu_s_per_min"], v["requests_per_min"], v["writes_per_min"], v["reconciles_per_min"]
  }')"
[[ $(grep -c '^| [0-9]' <<<"$TABLE") -ge 1 ]] || { echo "no [scale-row] in $LOG" >&2; exit 1; }

MACHINE="$(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), load average $(cut -d' ' -f1-3 /proc/loadavg) at the end"
SECTION="$(printf '%s\n\nMeasured %s on %s with `scripts/bench-healer.sh %s` (release build).\n\n%s\n%s' \
  "$BEGIN" "$(date -u +%Y-%m-%d)" "$MACHINE" "$COUNTS" "$TABLE" "$END")"
python3 - "$DOC" "$BEGIN" "$END" "$SECTION" <<'EOF'
import sys
path, begin, end, section = sys.argv[1:]
text = open(path).read()
head, rest = text.split(begin, 1)
_, tail = rest.split(end, 1)
open(path, "w").write(head + section + tail)
EOF
printf '%s\n' "$TABLE"
step "written to $DOC"
