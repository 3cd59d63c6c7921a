#!/usr/bin/env bash
# Measures the healer at fleet scale on the test control plane and writes the tables into
# docs/performance.md (between the bench-healer markers), with the machine, the date and
# the command. A measurement, not a timed test: nothing here passes or fails on time.
#
#   scripts/bench-healer.sh              # 50, 200 and 1000 fleets of 3 members
#   scripts/bench-healer.sh 50,200       # these counts
#
# For each count (ascending, in one cluster, fleets added between counts) the
# `healer_scale` end-to-end test measures, with the healer the image ships (the static
# musl binary of the `image` profile, built by scripts/build-image.sh): the time
# until every fleet is Ready, then one steady minute: API requests, CPU seconds and
# resident memory (and checks that the steady state makes no request but the lease
# renewals and watches); at the largest count, a restart of the healer: the new
# process's time to /readyz, to the Lease and to every fleet reconciled
# (celld_healer_fleets_reconciled), with the API requests it cost; then a burst:
# BURST_NODES nodes (default 20) stopped at once and their members deleted, each
# force-delete timed from its deadline; then the burst's floor: FLOOR_NODES nodes (default
# BURST_NODES; 0 for none) the same way with the healer stopped, each Pod force-deleted
# by the test at its deadline with nothing else sent (a healer sends at least that delete:
# about the best one could do on this cluster). With BASELINE_BIN naming another healer
# binary, each burst is also made by it, between two made by the healer measured (the
# burst table's `healer` column). After the last
# count it heals one fleet while GROWING (default 100) new fleets grow. It starts its
# own control plane on the ports of
# tests/controlplane/env.sh (override the CP_*_PORT variables to run beside another) and
# stops it at the end. Needs what scripts/test-all.sh needs; builds what is missing.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
COUNTS="${1:-50,200,1000}"
[[ $COUNTS =~ ^[0-9]+(,[0-9]+)*$ ]] || { echo "usage: $0 [COUNT[,COUNT...]]" >&2; exit 2; }
BURST_NODES="${BURST_NODES:-20}"
FLOOR_NODES="${FLOOR_NODES:-$BURST_NODES}"
GROWING="${GROWING:-100}"
[[ $BURST_NODES =~ ^[0-9]+$ && $FLOOR_NODES =~ ^[0-9]+$ && $GROWING =~ ^[0-9]+$ ]] \
  || { echo "BURST_NODES, FLOOR_NODES and GROWING are whole numbers" >&2; exit 2; }
# The test runs from tests/e2e: a baseline binary is named by its absolute path.
BASELINE_BIN="${BASELINE_BIN:-}"
if [[ -n $BASELINE_BIN ]]; then
  BASELINE_BIN="$(realpath -- "$BASELINE_BIN")" && [[ -x $BASELINE_BIN ]] \
    || { echo "BASELINE_BIN is not an executable healer binary" >&2; exit 2; }
fi
DOC="$ROOT/docs/performance.md"
BEGIN='<!-- bench-healer:begin -->'
END='<!-- bench-healer:end -->'
grep -qx -- "$BEGIN" "$DOC" && grep -qx -- "$END" "$DOC" \
  || { echo "$DOC has no $BEGIN ... $END section" >&2; exit 1; }

step() { printf '\n==> [%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# BENCH_FROM_LOG=FILE: no run; the tables are written from the log an earlier run kept
# (its path is printed as it starts), for instance after a step past the test failed.
if [[ -n ${BENCH_FROM_LOG:-} ]]; then
  LOG="$BENCH_FROM_LOG"
  [[ -r $LOG ]] || { echo "BENCH_FROM_LOG: cannot read $LOG" >&2; exit 2; }
  cpu_ticks() { echo 1 0; }
  read -r TICKS0 STEAL0 < <(cpu_ticks)
else
  step "control plane binaries (cached per version)"
  tests/controlplane/build.sh >&2
  step "celld-healer as the image ships it, and the test binaries"
  CELLD_IMAGE_PROFILE=image scripts/build-image.sh --build-only >&2
  HEALER="${CARGO_TARGET_DIR:-$ROOT/target}/x86_64-unknown-linux-musl/image/celld-healer"
  cargo build --workspace --bins >&2
  # kubesim's kubelets and the celld stubs, optimised: at 1,000 fleets (about 4,000 Pods) a
  # debug kubesim fell behind the API server, and members stayed Pending long enough for
  # the healer to start replacing disks. What is measured is the healer, not kubesim. The
  # test runs the stubs inside kubesim (`--stubs in-process`; CELLD_SCALE_STUBS=process for
  # one process per Pod): 3,000 stub processes took the cores the API server needs.
  step "kubesim and celld-stub, release build"
  cargo build --release -p kubesim --bins >&2
  export KUBESIM_BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/kubesim"
  # The node lifecycle controller's grace as on a real cluster (Kubernetes' default, 40 s)
  # rather than the tests' 8 s, which exists to make the node-loss tests quick: under the
  # load of 1,000 fleets on a small machine a Lease renewal can be that late without the
  # node being lost. Each burst waits for it: the Pods are evicted once their nodes are
  # Unknown, as on a real cluster (rule F2 force-deletes only on a node seen unreachable).
  export CP_KCM_EXTRA_ARGS="${CP_KCM_EXTRA_ARGS:---node-monitor-grace-period=40s}"
  step "starting the control plane (controller-manager: $CP_KCM_EXTRA_ARGS)"
  tests/controlplane/start.sh >&2
  trap 'step "stopping the control plane"; tests/controlplane/stop.sh >&2' EXIT

  # CPU time the hypervisor gave to others meanwhile (steal), from /proc/stat: a virtual
  # machine's wall times depend on it as much as on the load average.
  cpu_ticks() { awk '/^cpu / {t = 0; for (i = 2; i <= NF; i++) t += $i; print t, $9}' /proc/stat; }
  read -r TICKS0 STEAL0 < <(cpu_ticks)
  LOG="$(mktemp "${TMPDIR:-/tmp}/bench-healer.XXXXXX")"
  step "healer_scale with $COUNTS fleets, bursts of $BURST_NODES nodes (floor: $FLOOR_NODES), $GROWING growing (log: $LOG)"
  CELLD_E2E=1 CELLD_SCALE_FLEETS="$COUNTS" CELLD_HEALER_BIN="$HEALER" \
    CELLD_SCALE_BURST_NODES="$BURST_NODES" CELLD_SCALE_FLOOR_NODES="$FLOOR_NODES" \
    CELLD_SCALE_GROWING="$GROWING" CELLD_SCALE_BASELINE_BIN="$BASELINE_BIN" \
    cargo test -p celld-e2e --test healer_scale -- --nocapture >"$LOG" 2>&1 \
    || { tail -40 "$LOG" >&2; echo "healer_scale failed; full log: $LOG" >&2; exit 1; }
fi

# table TAG HEADER ROW: a Markdown table, one row per `[TAG] key=value ...` line of the
# log. HEADER: the column names separated by `|`; ROW: the row with `{key}` for each value.
table() {
  { grep -o "\\[$1\\].*" "$LOG" || true; } | sed "s/^\\[$1\\] //" | awk -v header="$2" -v row="$3" '
    BEGIN {
      n = split(header, h, "|")
      line = "|"; rule = "|"
      for (i = 1; i <= n; i++) { line = line " " h[i] " |"; rule = rule " --- |" }
      print line; print rule
    }
    {
      out = row
      for (i = 1; i <= NF; i++) { split($i, kv, "="); gsub("{" kv[1] "}", kv[2], out) }
      print out
    }'
}

TABLE="$(table scale-row \
  'fleets (Pods)|all Ready after|resident memory|per fleet|CPU per steady minute|API requests per steady minute|of which writes|reconciles per minute|application observations per minute|watch events per minute' \
  '| {fleets} ({pods}) | {ready_s} s | {rss_mib} MiB | {rss_per_fleet_kib} KiB | {cpu_s_per_min} s | {requests_per_min} | {writes_per_min} | {reconciles_per_min} | {observations_per_min} | {watch_events_per_min} |')"
[[ $(grep -c '^| [0-9]' <<<"$TABLE") -ge 1 ]] || { echo "no [scale-row] in $LOG" >&2; exit 1; }
# The bursts, one row per count.
BURSTS="$(table burst-row \
  'healer|fleets|nodes stopped|force-deletes (fleets)|deadlines spread over|deadline to write, p50|p99|max|over 1 s|healer requests: whole burst, from the first deadline (per force delete)' \
  '| {healer} | {fleets} | {nodes} | {actions} ({fleets_hit}) | {spread_s} s | {p50_s} s | {p99_s} s | {max_s} s | {over_1s} | {requests}, {requests_due} ({per_delete}) |')"
# The bursts' floor: the healer stopped, each Pod force-deleted blind at its deadline.
FLOORS="$(table floor-row \
  'fleets|nodes stopped|force-deletes (fleets)|deadlines spread over|deadline to write, p50|p99|max|over 1 s' \
  '| {fleets} | {nodes} | {actions} ({fleets_hit}) | {spread_s} s | {p50_s} s | {p99_s} s | {max_s} s | {over_1s} |')"
# Healing one fleet while others grow.
HEALS="$(table heal-row \
  'Ready fleets|fleets created and growing|deadline to force-delete|deadline to the fleet Ready again|growing fleets all Ready after' \
  '| {fleets} | {growing} | {action_s} s | {ready_s} s | {growing_ready_s} s |')"
# The healer against the floor, per count (issue 34's goals): p99 within 1.5x the floor's
# (2x at 1,000 fleets and more), and at most 2 healer requests per force delete.
RATIOS="$(python3 - "$LOG" <<'PYEOF'
import re, sys
rows = {"burst-row": {}, "floor-row": {}}
for line in open(sys.argv[1], errors="replace"):
    m = re.search(r"\[(burst-row|floor-row)\] (.*)", line)
    if not m:
        continue
    kv = dict(f.split("=", 1) for f in m.group(2).split() if "=" in f)
    if m.group(1) == "burst-row" and kv.get("healer") != "measured":
        continue
    rows[m.group(1)].setdefault(int(kv["fleets"]), []).append(kv)
print("| fleets | healer p99 | floor p99 | healer / floor | goal | healer requests per force delete (goal: at most 2) |")
print("| --- | --- | --- | --- | --- | --- |")
for n in sorted(rows["burst-row"]):
    goal = 2.0 if n >= 1000 else 1.5
    floor = rows["floor-row"].get(n)
    for b in rows["burst-row"][n]:
        if floor:
            ratio = float(b["p99_s"]) / max(float(floor[0]["p99_s"]), 0.001)
            verdict = "met" if ratio <= goal else "missed"
            cells = f"{floor[0]['p99_s']} s | {ratio:.2f} | {goal}x: {verdict}"
        else:
            cells = f"not measured | | {goal}x"
        per = b.get("per_delete")
        met = ("met" if float(per) <= 2 else "missed") if per else "not measured"
        print(f"| {n} | {b['p99_s']} s | {cells} | {per or ''} ({met}) |")
PYEOF
)"
# The restart at the largest count.
STARTS="$(table start-row \
  'fleets|/readyz ready after|Lease held after|every fleet reconciled after|API requests until then|by verb' \
  '| {fleets} | {ready_s} s | {leader_s} s | {reconciled_s} s | {requests} | {verbs} |')"
[[ $(grep -c '^| [0-9]' <<<"$STARTS") -ge 1 ]] || { echo "no [start-row] in $LOG" >&2; exit 1; }
[[ $BURST_NODES -eq 0 ]] || [[ $(grep -c '^| measured' <<<"$BURSTS") -ge 1 ]] \
  || { echo "no [burst-row] in $LOG" >&2; exit 1; }
[[ $FLOOR_NODES -eq 0 ]] || [[ $(grep -c '^| [0-9]' <<<"$FLOORS") -ge 1 ]] \
  || { echo "no [floor-row] in $LOG" >&2; exit 1; }
[[ $GROWING -eq 0 ]] || [[ $(grep -c '^| [0-9]' <<<"$HEALS") -ge 1 ]] \
  || { echo "no [heal-row] in $LOG" >&2; exit 1; }

read -r TICKS1 STEAL1 < <(cpu_ticks)
STEAL_PCT=$(( (STEAL1 - STEAL0) * 100 / (TICKS1 - TICKS0 > 0 ? TICKS1 - TICKS0 : 1) ))
MACHINE="$(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), load average $(cut -d' ' -f1-3 /proc/loadavg) at the end, ${STEAL_PCT}% of CPU time stolen by the hypervisor during the run"
[[ -z ${BENCH_FROM_LOG:-} ]] || MACHINE="$(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) (tables written afterwards from the run's log, $(basename "$LOG"); load and steal not recorded)"
BASELINE_NOTE=""
HEALING=""
[[ $GROWING -eq 0 ]] || HEALING="$(printf '\n\nOne Ready fleet'"'"'s member loses its node while %s new fleets are created and grow.\n\n%s' "$GROWING" "$HEALS")"
[[ -z $BASELINE_BIN ]] || BASELINE_NOTE=" The baseline healer of the burst table: \`$BASELINE_BIN\`."
SECTION="$(printf '%s\n\nMeasured %s on %s with `BURST_NODES=%s FLOOR_NODES=%s GROWING=%s scripts/bench-healer.sh %s` (the healer binary the image ships: static, musl, the `image` profile).%s\n\n%s\n\nThe healer restarted at the largest count (SIGTERM, then a new process): from the new process'"'"'s start.\n\n%s\n\nA burst: %s nodes stopped at once and, once all are Ready Unknown, their member Pods deleted at once; each force-delete from its deadline (deletionTimestamp + margin) to the write; the healer'"'"'s requests are all it sent (lease renewals and watches included) until its last force delete, counted from just before the burst (its reports of the evictions included) and from just before the first deadline (the force deletes'"'"' cost; per force delete).\n\n%s\n\nThe floor under it: the same burst (%s nodes) with the healer stopped, each Pod force-deleted by the test at its deadline, with no read, Event or status, every delete in flight at once: a healer sends at least that delete, so this is about the best one could do on this cluster.\n\n%s\n\nThe healer against the floor, in this run (goals: p99 within 1.5x the floor'"'"'s at 50 and 200 fleets, within 2x at 1,000; at most 2 requests per force delete).\n\n%s%s\n%s' \
  "$BEGIN" "$(date -u +%Y-%m-%d)" "$MACHINE" "$BURST_NODES" "$FLOOR_NODES" "$GROWING" "$COUNTS" "$BASELINE_NOTE" "$TABLE" "$STARTS" \
  "$BURST_NODES" "$BURSTS" "$FLOOR_NODES" "$FLOORS" "$RATIOS" "$HEALING" "$END")"
python3 - "$DOC" "$BEGIN" "$END" "$SECTION" <<'EOF'
import sys
path, begin, end, section = sys.argv[1:]
text = open(path).read()
head, rest = text.split(begin, 1)
_, tail = rest.split(end, 1)
open(path, "w").write(head + section + tail)
EOF
printf '%s\n\n%s\n\n%s\n\n%s\n\n%s\n\n%s\n' "$TABLE" "$STARTS" "$BURSTS" "$FLOORS" "$RATIOS" "$HEALS"
step "written to $DOC"
