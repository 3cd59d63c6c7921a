#!/usr/bin/env python3
"""Runs the workspace's compiled test binaries concurrently, one process per job.

`cargo test` runs test binaries one after another, so the end-to-end files, which spend
most of their time waiting on the cluster (grace periods, lease renewals, windows), used
to run strictly in series. This runner takes what `cargo test --no-run` built and runs:

- one job per test of the end-to-end crates (celld-e2e, and kubesim's e2e test), so
  that the long files spread over the pool;
- one job per binary for everything else (unit, golden, CLI, guide and simulation tests),
  run with libtest's own threads, as `cargo test` would.

Sharing the cluster is the tests' business, not the runner's: every end-to-end test takes
the cluster lock through `Env::start` (shared, or exclusive for the few tests that must
be alone; see `kubesim::testing::Cluster`), and gets a slot of its own (node names, IP
ranges, zones). So a test run by hand, by `cargo test` or by this runner is isolated the
same way.

Every job's output goes to target/test-logs/<job>.log; a failed job's output is printed
in full at the end. Durations are kept in the user cache (survives fresh clones on the
same machine) and the next run starts the longest jobs first.

Usage: scripts/run-tests.py [--jobs N] [--filter TEXT]... [--list] [--binaries FILE]
                            [--gate TEXT=FILE]... [--logs DIR] [--timings FILE]
                            [-- CARGO TEST ARGS...]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Packages whose tests run one per process: they use the cluster and mostly wait.
PER_TEST_PACKAGES = {"celld-e2e"}
PER_TEST_TARGETS = {("kubesim", "e2e_kubesim")}
# A job printing this line holds the cluster alone (kubesim::testing::ALONE_MARKER).
ALONE_MARKER = "[e2e-lock] alone:"
# How a test says in code that it must be alone (tests/e2e/src/env.rs, kubesim::testing).
ALONE_IN_CODE = re.compile(r"EnvOptions::alone\(|Sharing::Alone\(")


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "celld-fleet"


@dataclass
class Binary:
    package: str
    target: str
    kind: str
    exe: str
    manifest_dir: str


@dataclass
class Job:
    name: str
    binary: Binary
    args: list[str]
    expected: float = 0.0
    alone: bool = False
    # Uses the cluster (a per-test job of an end-to-end crate).
    cluster: bool = False
    status: str = "pending"
    seconds: float = 0.0
    log: Path | None = None
    started: float = 0.0
    tests: int = 0


def now() -> str:
    return time.strftime("%H:%M:%S")


PRINT = threading.Lock()


def say(msg: str) -> None:
    with PRINT:
        print(f"[tests {now()}] {msg}", flush=True)


def build(cargo_args: list[str]) -> list[Binary]:
    """`cargo test --no-run`: the test binaries, with their package and target."""
    cargo = os.environ.get("CARGO", "cargo")
    cmd = [cargo, "test", "--workspace", "--no-run", "--message-format=json-render-diagnostics", *cargo_args]
    say("building the test binaries: " + " ".join(cmd))
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    bins = parse_artifacts(proc.stdout)
    if proc.wait() != 0:
        sys.exit(f"cargo test --no-run failed (exit {proc.returncode})")
    return bins


def parse_artifacts(lines) -> list[Binary]:
    """Test executables from cargo's JSON messages (benchmarks left out, as `cargo test`
    leaves them out)."""
    bins: list[Binary] = []
    seen: set[str] = set()
    for line in lines:
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            continue
        if msg.get("reason") != "compiler-artifact" or not msg.get("executable"):
            continue
        if not msg.get("profile", {}).get("test") or msg["executable"] in seen:
            continue
        tgt = msg["target"]
        if tgt["kind"][0] == "bench":
            continue
        seen.add(msg["executable"])
        pkg = msg["package_id"]
        # package_id: "path+file:///work/main/api#celld-api@0.1.0" (or "... #0.1.0" when
        # the folder is the package's name).
        manifest = Path(msg["manifest_path"]).parent if "manifest_path" in msg else ROOT
        name = pkg.split("#", 1)[-1].split("@", 1)[0]
        if not name or name[0].isdigit():
            name = Path(pkg.split("#", 1)[0]).name
        bins.append(Binary(name, tgt["name"], tgt["kind"][0], msg["executable"], str(manifest)))
    return bins


def test_env(b: Binary) -> dict[str, str]:
    """The environment `cargo test` gives a test process."""
    env = dict(os.environ)
    env["CARGO"] = os.environ.get("CARGO", shutil.which("cargo") or "cargo")
    env["CARGO_MANIFEST_DIR"] = b.manifest_dir
    env["CARGO_PKG_NAME"] = b.package
    env["CARGO_CRATE_NAME"] = b.target.replace("-", "_")
    tmp = ROOT / "target" / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    env["CARGO_TARGET_TMPDIR"] = str(tmp)
    return env


def list_tests(b: Binary) -> list[str]:
    out = subprocess.run(
        [b.exe, "--list", "--format", "terse"],
        cwd=b.manifest_dir,
        env=test_env(b),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [l[: -len(": test")] for l in out.splitlines() if l.endswith(": test")]


def plan(bins: list[Binary], filt: list[str] | None, history: dict) -> list[Job]:
    jobs: list[Job] = []
    for b in bins:
        tests = list_tests(b)
        if not tests:
            continue
        label = f"{b.package}/{b.target}" if b.kind != "lib" else f"{b.package}/lib"
        if b.kind == "bin":
            label = f"{b.package}/bin-{b.target}"
        if b.package in PER_TEST_PACKAGES or (b.package, b.target) in PER_TEST_TARGETS:
            alone = alone_in_source(Path(b.manifest_dir) / "tests" / f"{b.target}.rs")
            for t in tests:
                # Its output whole in its log (one test: nothing interleaves), with the
                # lock's line that says it held the cluster alone.
                j = Job(f"{label}::{t}", b, [t, "--exact", "--nocapture"], tests=1, cluster=True)
                j.alone = t in alone
                jobs.append(j)
        else:
            jobs.append(Job(label, b, [], tests=len(tests)))
    if filt:
        jobs = [j for j in jobs if any(f in j.name for f in filt)]
    for j in jobs:
        h = history.get(j.name, {})
        j.expected = float(h.get("seconds", 0.0))
        j.alone = j.alone or bool(h.get("alone", False))
    # The jobs that hold the cluster alone first, one after another (none has to wait
    # for running tests to drain), with the jobs that need no cluster beside them; then
    # the rest, longest first, so that the pool ends with short jobs.
    jobs.sort(key=lambda j: (not j.alone, j.cluster, -j.expected, j.name))
    return jobs


def alone_in_source(path: Path) -> set[str]:
    """The tests of an end-to-end file that say in code they must be alone."""
    try:
        text = path.read_text()
    except OSError:
        return set()
    out = set()
    # Each test function's body: from `fn name()` to the first line that closes it.
    for m in re.finditer(r"\nasync fn (\w+)\(\)[^{]*\{(.*?)\n\}", text, re.S):
        if ALONE_IN_CODE.search(m.group(2)):
            out.add(m.group(1))
    return out


def run_job(j: Job, logs: Path) -> None:
    safe = j.name.replace("/", "_").replace("::", "__")
    j.log = logs / f"{safe}.log"
    j.started = time.monotonic()
    with open(j.log, "w") as f:
        rc = subprocess.run(
            [j.binary.exe, *j.args],
            cwd=j.binary.manifest_dir,
            env=test_env(j.binary),
            stdout=f,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        ).returncode
    j.seconds = time.monotonic() - j.started
    text = j.log.read_text(errors="replace")
    j.alone = ALONE_MARKER in text
    # A filter matching no test is "0 passed"; only a job that ran its tests passes.
    ran = "test result: ok." in text and " 0 passed; 0 failed; 0 ignored" not in text
    j.status = "PASS" if rc == 0 and ran else "FAIL"


def table(jobs: list[Job]) -> str:
    done = [j for j in jobs if j.status in ("PASS", "FAIL")]
    done.sort(key=lambda j: -j.seconds)
    w = max([len(j.name) for j in done] + [4])
    lines = [f"{'job':<{w}}  result  seconds  alone"]
    for j in done:
        lines.append(f"{j.name:<{w}}  {j.status:<6}  {j.seconds:7.1f}  {'yes' if j.alone else ''}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--jobs",
        type=int,
        default=int(os.environ.get("CELLD_TEST_JOBS", "0")) or None,
        help="jobs at once (default: CELLD_TEST_JOBS, else 4 per core)",
    )
    ap.add_argument(
        "--filter",
        action="append",
        help="only jobs whose name contains this text (repeat: any of them)",
    )
    ap.add_argument(
        "--binaries",
        help="cargo's JSON messages of a `cargo test --no-run` already done (no build here)",
    )
    ap.add_argument(
        "--gate",
        action="append",
        default=[],
        metavar="TEXT=FILE",
        help="jobs whose name contains TEXT start once FILE exists; they fail unless it says ok "
        "(scripts/test-all.sh builds what they need meanwhile)",
    )
    ap.add_argument(
        "--logs",
        default=str(ROOT / "target" / "test-logs"),
        help="directory for the jobs' output, emptied first (default: target/test-logs)",
    )
    ap.add_argument(
        "--timings",
        default=str(cache_dir() / "test-timings.json"),
        help="file of the jobs' last durations, read to start the longest first and "
        "written after (default: test-timings.json in the user cache)",
    )
    ap.add_argument("--list", action="store_true", help="print the jobs in their order and exit")
    ap.add_argument("cargo_args", nargs="*", help="more `cargo test` arguments (after --)")
    a = ap.parse_args()
    # Four jobs per core: an end-to-end test spends most of its wall time waiting on the
    # cluster's clocks (grace periods, node leases, the healer's delays and capacity
    # windows). With four at once on two cores the load average stayed between 0.4 and
    # 2.8 (the capacity tests wait; the GitOps engines compute), so twice that keeps the
    # cores busy without a long queue in front of the API server every test shares.
    jobs_n = a.jobs or 4 * (os.cpu_count() or 2)

    hist_path = Path(a.timings)
    try:
        history = json.loads(hist_path.read_text())
    except (OSError, ValueError):
        history = {}

    if a.binaries:
        with open(a.binaries) as f:
            bins = parse_artifacts(f)
    else:
        bins = build(a.cargo_args)
    gates: list[tuple[str, Path]] = []
    for g in a.gate:
        text, sep, file = g.partition("=")
        if not sep or not text or not file:
            ap.error(f"--gate wants TEXT=FILE, not {g!r}")
        gates.append((text, Path(file)))
    jobs = plan(bins, a.filter, history)
    if a.list:
        for j in jobs:
            print(f"{j.name}\t{j.expected:.0f}s{'  alone' if j.alone else ''}")
        return 0
    if not jobs:
        say("no test matched")
        return 1
    logs = Path(a.logs)
    shutil.rmtree(logs, ignore_errors=True)
    logs.mkdir(parents=True)
    say(f"{len(jobs)} jobs ({sum(j.tests for j in jobs)} tests), {jobs_n} at a time; logs in {logs}")

    lock = threading.Condition()
    pending = list(jobs)
    running: list[Job] = []
    t0 = time.monotonic()

    def gate_of(j: Job) -> Path | None:
        for text, file in gates:
            if text in j.name and not file.exists():
                return file
        return None

    def gate_failure(j: Job) -> str | None:
        for text, file in gates:
            if text in j.name and file.read_text().strip() != "ok":
                return f"{file}: {file.read_text().strip()}"
        return None

    def pick() -> Job | None:
        """The next job to start (under the lock): a job holding the cluster alone only
        when no other cluster job runs, and no other cluster job while one is left; jobs
        that need no cluster at any time."""
        ready = [p for p in pending if gate_of(p) is None]
        # An alone job still waiting for its build does not hold the others back: it
        # runs when its build is done, after the tests running then.
        alone_left = any(p.alone for p in ready) or any(r.alone for r in running)
        for p in ready:
            if not p.cluster:
                return p
            if p.alone and not any(r.cluster for r in running):
                return p
            if not p.alone and not alone_left:
                return p
        return None

    def worker() -> None:
        while True:
            with lock:
                if not pending:
                    return
                j = pick()
                if j is None:
                    # Waiting for a build to end, or for the cluster to be free.
                    lock.wait(timeout=2)
                    continue
                pending.remove(j)
                running.append(j)
            failure = gate_failure(j)
            if failure:
                j.status = "FAIL"
                j.log = logs / (j.name.replace("/", "_").replace("::", "__") + ".log")
                j.log.write_text(f"not run: what it needs failed to build ({failure})\n")
            else:
                say(f"start {j.name}")
                try:
                    run_job(j, logs)
                except OSError as e:
                    j.status = "FAIL"
                    if j.log:
                        with open(j.log, "a") as f:
                            f.write(f"\nrunner: {e}\n")
            with lock:
                running.remove(j)
                left = len(pending) + len(running)
                lock.notify_all()
            say(f"{j.status} {j.seconds:6.1f}s {j.name} ({left} left)")

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(jobs_n)]
    for t in threads:
        t.start()
    try:
        # A line a minute of what runs, so a long quiet stretch is never a mystery.
        while any(t.is_alive() for t in threads):
            until = time.monotonic() + 60
            while time.monotonic() < until and any(t.is_alive() for t in threads):
                time.sleep(1)
            if not any(t.is_alive() for t in threads):
                break
            with lock:
                names = ", ".join(f"{r.name} ({time.monotonic() - r.started:.0f}s)" for r in running)
                waiting = [str(g) for p in pending if (g := gate_of(p)) is not None]
            if names or waiting:
                extra = f"; waiting for {', '.join(sorted(set(waiting)))}" if waiting else ""
                say(f"running: {names or 'nothing'}{extra}")
    except KeyboardInterrupt:
        return 130
    wall = time.monotonic() - t0

    failed = [j for j in jobs if j.status != "PASS"]
    for j in failed:
        print(f"\n===== FAILED {j.name} ({j.log}) =====", flush=True)
        if j.log and j.log.exists():
            sys.stdout.write(j.log.read_text(errors="replace"))
    print("\n" + table(jobs))
    busy = sum(j.seconds for j in jobs)
    say(f"{len(jobs) - len(failed)} of {len(jobs)} jobs passed in {wall:.0f}s (job time {busy:.0f}s)")

    for j in jobs:
        if j.status in ("PASS", "FAIL"):
            history[j.name] = {"seconds": round(j.seconds, 1), "alone": j.alone}
    try:
        hist_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = hist_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(history, indent=1, sort_keys=True))
        tmp.replace(hist_path)
    except OSError as e:
        say(f"could not keep timings in {hist_path}: {e}")
    if failed:
        say("failed: " + ", ".join(j.name for j in failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
