#!/usr/bin/env bash
# Stops the test control plane started by start.sh: exactly the processes named by the PID
# files in tests/.cluster/run/pids/, each only if that PID still runs the expected binary
# from tests/.cluster/bin/. SIGTERM, then SIGKILL after CP_STOP_TIMEOUT seconds (default 20).
# Never kills by name. Idempotent: with nothing running it just says so.
# Keeps tests/.cluster/run/ (logs, certificates) for inspection; start.sh wipes it.
#
# Usage: tests/controlplane/stop.sh [--quiet]
set -euo pipefail

# shellcheck source=env.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/env.sh"

QUIET=0
[[ "${1:-}" == --quiet ]] && QUIET=1
STOP_TIMEOUT="${CP_STOP_TIMEOUT:-20}"

say() { [[ $QUIET == 1 ]] || printf '[stop] %s\n' "$*"; }

# True if PID runs (a zombie, dead but not yet reaped by its parent, does not count).
running() {
  local state
  kill -0 "$1" 2>/dev/null || return 1
  state="$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null || true)"
  [[ -n "$state" && "$state" != Z && "$state" != X ]]
}

# Prints the PID from $CP_PID_DIR/NAME.pid if that process is alive and is our NAME binary;
# removes a PID file that is stale or points at some other program.
our_pid() {
  local name="$1" file="$CP_PID_DIR/$1.pid" pid exe
  [[ -f "$file" ]] || return 1
  pid="$(tr -dc '0-9' <"$file")"
  if [[ -z "$pid" ]] || ! running "$pid"; then
    rm -f "$file"
    return 1
  fi
  exe="$(readlink "/proc/$pid/exe" 2>/dev/null || true)"
  exe="${exe% (deleted)}" # the binary may have been rebuilt while it ran
  if [[ "$(basename "$exe")" != "$name" || "$exe" != "$CP_CLUSTER_DIR/bin/"* ]]; then
    echo "[stop] $file: PID $pid is '$exe', not our $name; leaving it alone" >&2
    rm -f "$file"
    return 1
  fi
  echo "$pid"
}

# stop_group NAME...: SIGTERM all, wait, SIGKILL the ones that remain.
stop_group() {
  local name pid deadline names=() pids=()
  for name in "$@"; do
    if pid="$(our_pid "$name")"; then
      say "stopping $name (PID $pid)"
      kill -TERM "$pid" 2>/dev/null || true
      names+=("$name")
      pids+=("$pid")
    fi
  done
  [[ ${#pids[@]} -gt 0 ]] || return 0
  deadline=$((SECONDS + STOP_TIMEOUT))
  local i left
  while true; do
    left=0
    for i in "${!pids[@]}"; do
      running "${pids[$i]}" && left=1
    done
    [[ $left == 1 && $SECONDS -lt $deadline ]] || break
    sleep 0.2
  done
  for i in "${!pids[@]}"; do
    if running "${pids[$i]}"; then
      echo "[stop] ${names[$i]} (PID ${pids[$i]}) still running after ${STOP_TIMEOUT}s; SIGKILL" >&2
      kill -KILL "${pids[$i]}" 2>/dev/null || true
      while running "${pids[$i]}"; do sleep 0.1; done
    fi
    rm -f "$CP_PID_DIR/${names[$i]}.pid"
  done
  STOPPED+=("${names[@]}")
}

STOPPED=()
if [[ -d "$CP_PID_DIR" ]]; then
  # Clients first, then the apiserver, then its storage.
  stop_group metrics-server kube-scheduler kube-controller-manager
  stop_group kube-apiserver
  stop_group etcd
fi
if [[ ${#STOPPED[@]} -eq 0 ]]; then
  say "nothing running"
else
  say "stopped: ${STOPPED[*]} (logs kept in $CP_LOG_DIR)"
fi
