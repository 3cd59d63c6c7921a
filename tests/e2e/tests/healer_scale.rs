//! Healer end-to-end measurements (issue 5 "Measure and report", issue 14 "at fleet
//! scale"):
//!
//! - for each fleet count of `CELLD_SCALE_FLEETS` (comma-separated; default `50`, what
//!   CI runs as a test of correctness; a second, smaller count repeated the same checks
//!   and cost CI about two minutes of the cluster alone): the time until every fleet of 3 members is
//!   Ready, then a steady minute: API requests by verb (the healer counts its own
//!   requests: `celld_healer_api_requests_total`), the healer's CPU seconds, its resident
//!   memory, and reconciles. Goal, checked at every count: no writes and no reads beyond
//!   the watches, apart from the leader's lease renewals.
//! - Resident memory with 50 fleets of 3 members. Goal: under 30 MiB (release build).
//!
//! The healer runs with the default lease duration (15 s) here. Each count prints one
//! `[scale-row]` line that `scripts/bench-healer.sh` turns into the table of
//! docs/performance.md. `CELLD_HEALER_BIN` can point at a release build to measure it
//! instead of the debug one.
//! - At the largest count, after the steady minute, a restart (issue 14, "time from
//!   healer start to every fleet reconciled"): the healer gets SIGTERM (it releases its
//!   Lease) and a new process, with a new identity as a new Pod would have, is timed
//!   from its start to `/readyz`, to holding the Lease, and to
//!   `celld_healer_fleets_reconciled` reaching every fleet (asserted: it must, and
//!   `celld_healer_fleets_served` must equal the fleets), with the API requests it sent
//!   until then by verb. Prints `[start-row]`; the times are never asserted. It adds
//!   about 2 s at the CI default (50 fleets, debug build).
//! - At every count, after the steady minute, a burst (issue 14): `CELLD_SCALE_BURST_NODES`
//!   nodes (default 3, one per zone; the benchmark stops 20; in each zone those holding
//!   the most member Pods) are stopped at once and, once the node lifecycle controller
//!   marked them all Ready Unknown (after its `--node-monitor-grace-period`), every
//!   member Pod on them is deleted at once, as the taint-eviction controller deletes the
//!   Pods of a lost node; their kubelets never confirm, so every one is due for a
//!   force-delete (rule F1) at its deletionTimestamp plus the margin, all within a
//!   second or two, on nodes the healer has seen unreachable (rule F2). For every
//!   force-delete: the time from that deadline (the Event names the Pod and the end of
//!   its grace) to the write (the Event's time, recorded right after the fleet's
//!   deletes). Prints `[burst-row]` (p50, p99, max, and the healer's requests: all it
//!   sent, and per force delete those from just before the first deadline), reported,
//!   never asserted. The controller-manager would spread the same evictions
//!   over a minute (it taints 0.1 node per second per zone), so the test deletes the Pods
//!   itself to make the deadlines fall together. The Events are read from one watch
//!   opened before the deletes, not by listing them again and again: the API server
//!   keeps no watch cache of Events, so each list was a read of every Event of the
//!   namespace from etcd, during the burst being measured.
//! - With `CELLD_SCALE_BASELINE_BIN` naming another healer binary, each count's burst
//!   is made three times: by the healer measured, by that baseline, and by the measured
//!   one again (each healer started afresh and given time to reconcile every fleet
//!   first). Their rows (`healer=measured` or `baseline`) come from one cluster in one
//!   run: this machine's run-to-run noise (p99 9.5 to 20 s for one binary) is larger
//!   than most changes it is asked to judge.
//! - With `CELLD_SCALE_FLOOR_NODES` above 0 (the benchmark sets it; CI does not), after
//!   the burst, its floor: the healer is stopped, the same burst is made, and the test
//!   itself force-deletes each Pod at its deadline, blind (no read, no Event, no status,
//!   every delete in flight at once), timed the same way. A healer must send at least
//!   that delete, so the two rows side by side say roughly how much of the burst's lag
//!   is the healer's own work and how much is the cluster's (a floor measured, not
//!   proven: deletes paced otherwise might do a little better). Prints `[floor-row]`; a
//!   new healer is started afterwards.
//! - After the last count, healing one fleet while `CELLD_SCALE_GROWING` others (default
//!   10; the benchmark grows 100) are created and grow: one Ready fleet's member loses
//!   its node and is deleted; the time from its force-delete deadline to the write and to
//!   the fleet Ready again. Prints `[heal-row]`.
//!
//! Nodes per zone are sized so that the zone's Pods (the largest count plus the growing
//! fleets: one member per zone each) fit on the nodes left after the burst, with one
//! node to spare.
//!
//! kubesim runs the stubs inside its own process (`--stubs in-process`; set
//! `CELLD_SCALE_STUBS=process` for one `celld-stub` process per Pod): on a real cluster
//! the members run on other machines, and thousands of stub processes on the test
//! machine's cores would take the time the API server and the healer are measured on.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use celld_e2e::*;
use k8s_openapi::api::core::v1::{Event as CoreEvent, Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{DeleteParams, ListParams, Preconditions};
use kubesim::sim::DEFAULT_NODE_PODS;

async fn all_ready(env: &Env, fleets: &[FleetFile], timeout: Duration) -> Result<()> {
    wait_for("every fleet Ready", timeout, || async {
        let list = env
            .api::<celld_gen::api::CelldFleet>()
            .list(&Default::default())
            .await?;
        let ready = list
            .iter()
            .filter(|f| {
                f.status.as_ref().is_some_and(|s| {
                    s.conditions
                        .iter()
                        .any(|c| c.type_ == "Ready" && c.status == "True")
                        && s.ready_members == Some(3)
                })
            })
            .count();
        Ok((ready == fleets.len()).then_some(()))
    })
    .await
}

/// Waits until every fleet's status shows its members' application view (converged, 3
/// observed): the healer observes each fleet's members once per application interval, so
/// a fleet Ready a moment ago may still get that first observation's status patch.
async fn all_converged(env: &Env, fleets: &[FleetFile], timeout: Duration) -> Result<()> {
    wait_for(
        "every fleet's application view converged",
        timeout,
        || async {
            let list = env
                .api::<celld_gen::api::CelldFleet>()
                .list(&Default::default())
                .await?;
            let converged = list
                .iter()
                .filter(|f| {
                    f.status
                        .as_ref()
                        .and_then(|s| s.application.as_ref())
                        .is_some_and(|a| a.converged == "True" && a.observed_members == 3)
                })
                .count();
            Ok((converged == fleets.len()).then_some(()))
        },
    )
    .await
}

/// Waits until the healer is quiet: its reconciles, and its requests other than the
/// lease's and the watches' (all the steady minute allows), unchanged for `quiet`.
async fn wait_quiet(env: &Env, h: usize, quiet: Duration, timeout: Duration) -> Result<()> {
    let activity = |m: &str| {
        let requests: f64 = api_requests(m)
            .iter()
            .filter(|((verb, res), _)| verb != "watch" && res != "leases")
            .map(|(_, n)| n)
            .sum();
        (sum_metric(m, "celld_healer_reconciles_total"), requests)
    };
    let t0 = Instant::now();
    let mut last = activity(&env.h(h).metrics_text().await?);
    let mut since = Instant::now();
    while since.elapsed() < quiet {
        ensure!(
            t0.elapsed() < timeout,
            "the healer not quiet for {quiet:?} within {timeout:?}: (reconciles, requests) {last:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
        let now = activity(&env.h(h).metrics_text().await?);
        if now != last {
            (last, since) = (now, Instant::now());
        }
    }
    Ok(())
}

/// The fleet counts to measure, ascending.
fn counts() -> Result<Vec<usize>> {
    let text = std::env::var("CELLD_SCALE_FLEETS").unwrap_or_else(|_| "50".into());
    let mut v: Vec<usize> = text
        .split(',')
        .map(|c| c.trim().parse::<usize>())
        .collect::<Result<_, _>>()
        .with_context(|| format!("CELLD_SCALE_FLEETS={text:?}: fleet counts, e.g. 50,200"))?;
    v.sort_unstable();
    v.dedup();
    ensure!(
        v.first().is_some_and(|&n| n > 0),
        "CELLD_SCALE_FLEETS={text:?}: at least one count above 0"
    );
    Ok(v)
}

/// Applies the fleets four at a time (one at a time, 1,000 fleets take a quarter of an
/// hour here).
async fn apply_all(env: &Env, fleets: &[FleetFile]) -> Result<()> {
    let part = fleets.len().div_ceil(4).max(1);
    let worker = |i: usize| async move {
        for f in fleets.iter().skip(i * part).take(part) {
            env.apply_fleet(&f.yaml()).await?;
        }
        anyhow::Ok(())
    };
    let (a, b, c, d) = tokio::join!(worker(0), worker(1), worker(2), worker(3));
    a.and(b).and(c).and(d)
}

/// A whole number from the environment, or its default.
fn env_number(name: &str, default: usize) -> Result<usize> {
    match std::env::var(name) {
        Ok(t) => t
            .trim()
            .parse()
            .with_context(|| format!("{name}={t:?}: a whole number")),
        Err(_) => Ok(default),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steady_state_requests_and_memory() -> Result<()> {
    let counts = counts()?;
    let largest = counts.last().copied().unwrap_or(50);
    let burst = env_number("CELLD_SCALE_BURST_NODES", 3)?;
    let floor = env_number("CELLD_SCALE_FLOOR_NODES", 0)?;
    let growing = env_number("CELLD_SCALE_GROWING", 10)?;
    let zones = ZONES.len();
    // Every fleet has one member per zone: the zone's Pods must fit on the nodes the
    // burst leaves running, with one node to spare.
    let pods_per_zone = (largest + growing) as u32;
    let stubs = std::env::var("CELLD_SCALE_STUBS").unwrap_or_else(|_| "in-process".into());
    let mut opts = EnvOptions {
        nodes_per_zone: 2.max(
            pods_per_zone.div_ceil(DEFAULT_NODE_PODS) + burst.max(floor).div_ceil(zones) as u32 + 1,
        ),
        ..EnvOptions::alone("measures the healer's CPU, memory, requests and latency")
    };
    if !opts.kubesim_args.iter().any(|a| a.starts_with("--stubs")) {
        opts.kubesim_args.extend(["--stubs".into(), stubs]);
    }
    let Some(mut env) = Env::start_with("scale", opts).await? else {
        return Ok(());
    };
    let r = scale(&mut env, &counts, burst, floor, growing).await;
    env.finish(r).await
}

/// The healer as this test runs it: the default lease duration (15 s) and member
/// replacement delay (10 min). The tests' short delay (20 s) let a slow start at 1,000
/// fleets (members Pending for minutes) turn into disk replacements that measured
/// nothing this test is about.
fn scale_healer(env: &Env, identity: &str) -> HealerOptions {
    let mut o = env.healer_options();
    o.lease_duration = "15s".into();
    o.replacement_delay = celld_gen::api::healer_flags::MEMBER_REPLACEMENT_DELAY
        .default
        .into();
    o.identity = identity.into();
    o
}

async fn scale(
    env: &mut Env,
    counts: &[usize],
    burst: usize,
    floor: usize,
    growing: usize,
) -> Result<()> {
    let baseline = std::env::var_os("CELLD_SCALE_BASELINE_BIN")
        .filter(|b| !b.is_empty())
        .map(std::path::PathBuf::from);
    let mut fleets: Vec<FleetFile> = Vec::new();
    let mut healer = None;
    let largest = counts.last().copied().unwrap_or(0);
    for &n in counts {
        let more: Vec<FleetFile> = (fleets.len()..n)
            .map(|i| env.persistent(&env.ns, &format!("f{i:04}"), 3))
            .collect();
        apply_all(env, &more).await?;
        let added = more.len();
        fleets.extend(more);
        let mut h = match healer {
            Some(h) => h,
            None => env.healer(scale_healer(env, "healer-a"))?,
        };
        let t0 = Instant::now();
        all_ready(env, &fleets, Duration::from_secs(240.max(3 * added as u64))).await?;
        let ready = t0.elapsed();
        eprintln!("[scale] {n} fleets x 3 members ready ({ready:?} for the last {added})");
        // The statuses settle before the steady minute: every application view reported,
        // then the healer quiet for 5 s (longer than the 3 s a status may be held back,
        // with room for the queue's debounce).
        all_converged(env, &fleets, Duration::from_secs(120.max(n as u64 / 4))).await?;
        wait_quiet(
            env,
            h,
            Duration::from_secs(5),
            Duration::from_secs(120.max(n as u64 / 4)),
        )
        .await?;
        steady_minute(env, h, n, ready).await?;
        if n == largest {
            h = restart(env, h, n).await?;
        }
        if burst > 0 {
            let settle = Duration::from_secs(240.max(3 * n as u64));
            burst_of_nodes(env, h, n, burst, "measured").await?;
            all_ready(env, &fleets, settle).await?;
            // The same burst with the baseline healer, then with the measured one again,
            // so that a drift of the cluster between bursts shows in the measured rows.
            if let Some(bin) = &baseline {
                h = switch_healer(env, h, n, Some(bin.clone()), &format!("healer-base-{n}"))
                    .await?;
                burst_of_nodes(env, h, n, burst, "baseline").await?;
                all_ready(env, &fleets, settle).await?;
                h = switch_healer(env, h, n, None, &format!("healer-again-{n}")).await?;
                burst_of_nodes(env, h, n, burst, "measured").await?;
                all_ready(env, &fleets, settle).await?;
            }
        }
        if floor > 0 {
            h = floor_burst(env, h, n, floor).await?;
            all_ready(env, &fleets, Duration::from_secs(240.max(3 * n as u64))).await?;
        }
        healer = Some(h);
    }
    if growing > 0 {
        let more = heal_while_growing(env, &fleets, growing).await?;
        fleets.extend(more);
    }
    Ok(())
}

/// One steady minute at `n` fleets: requests by verb (only the lease and watches),
/// CPU, memory; prints the `[scale-row]` line.
async fn steady_minute(env: &Env, h: usize, n: usize, ready: Duration) -> Result<()> {
    let pid = env.h(h).pid().context("the healer runs")?;
    let cpu_now = || env.h(h).cpu_seconds().context("the healer's CPU time");
    let window = Duration::from_secs(60);
    let t0 = env.h(h).metrics_text().await?;
    let (m0, w0) = (api_requests(&t0), watch_events(&t0));
    let r0 = env.h(h).metric("celld_healer_reconciles_total").await?;
    let o0 = env
        .h(h)
        .metric("celld_healer_application_observations_total")
        .await?;
    let c0 = cpu_now()?;
    tokio::time::sleep(window).await;
    let t1 = env.h(h).metrics_text().await?;
    let (m1, w1) = (api_requests(&t1), watch_events(&t1));
    let r1 = env.h(h).metric("celld_healer_reconciles_total").await?;
    let o1 = env
        .h(h)
        .metric("celld_healer_application_observations_total")
        .await?;
    let cpu = cpu_now()? - c0;
    let mut diff: BTreeMap<String, f64> = BTreeMap::new();
    for (k, v) in &m1 {
        let d = v - m0.get(k).copied().unwrap_or(0.0);
        if d > 0.0 {
            diff.insert(format!("{} {}", k.0, k.1), d);
        }
    }
    let total: f64 = diff.values().sum();
    // What the watches still deliver in a steady minute: each event is an object to
    // decode and cache, so it costs CPU even when no fleet is reconciled.
    let events: BTreeMap<&String, f64> = w1
        .iter()
        .map(|(k, v)| (k, v - w0.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, d)| *d > 0.0)
        .collect();
    // An empty f64 sum is -0.0; print it as 0.
    let events_total = events.values().sum::<f64>().abs();
    eprintln!("[scale] steady state, {n} fleets: {events_total} watch events ({events:?})");
    eprintln!(
        "[scale] steady state, {n} fleets, {window:?}: {total} requests ({diff:?}); {} reconciles; {} application observations; {cpu:.2} CPU s",
        r1 - r0,
        o1 - o0
    );
    for (k, v) in &diff {
        let lease = k.ends_with(" leases");
        ensure!(
            lease || k.starts_with("watch "),
            "unexpected steady-state request at {n} fleets: {k} x{v}"
        );
    }
    let writes: f64 = diff
        .iter()
        .filter(|(k, _)| {
            !k.ends_with(" leases")
                && !k.starts_with("watch ")
                && !k.starts_with("get ")
                && !k.starts_with("list ")
        })
        .map(|(_, v)| v)
        .sum();
    ensure!(writes == 0.0, "steady-state writes at {n} fleets: {diff:?}");
    // An empty f64 sum is -0.0; print it as 0.
    let writes = writes.abs();
    // The members' application is observed once per fleet per --application-interval
    // (60 s by default), on its own clock: a fleet is reconciled only when something
    // changed (its view included), so a steady fleet costs an observation and no
    // reconcile.
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib = |name: &str| -> u64 {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let (rss, hwm) = (kib("VmRSS:"), kib("VmHWM:"));
    // Anonymous memory (heap, stacks) apart from the mapped binary's pages.
    let (anon, file) = (kib("RssAnon:"), kib("RssFile:"));
    let m = env.h(h).metrics_text().await?;
    let decide_us = 1e6 * sum_metric(&m, "celld_healer_decide_duration_seconds_sum")
        / sum_metric(&m, "celld_healer_decide_duration_seconds_count").max(1.0);
    eprintln!(
        "[scale] healer at {n} fleets x 3 members: VmRSS {rss} kB (RssAnon {anon} kB, RssFile {file} kB; peak VmHWM {hwm} kB), binary {}; decide {decide_us:.1} us mean",
        healer_bin()?.display()
    );
    eprintln!(
        "[scale-row] fleets={n} pods={} ready_s={:.1} rss_mib={:.1} rss_per_fleet_kib={:.0} cpu_s_per_min={cpu:.2} requests_per_min={total} writes_per_min={writes} reconciles_per_min={} observations_per_min={} watch_events_per_min={events_total}",
        3 * n,
        ready.as_secs_f64(),
        rss as f64 / 1024.0,
        rss as f64 / n as f64,
        r1 - r0,
        o1 - o0
    );
    Ok(())
}

/// Stops healer `h` as a rolling update does (SIGTERM: it stops writing and releases its
/// Lease); it must exit cleanly.
fn stop_healer(env: &mut Env, h: usize) -> Result<()> {
    let status = env.h_mut(h).terminate();
    ensure!(
        status.is_some_and(|s| s.success()),
        "the healer did not stop cleanly on SIGTERM: {status:?}"
    );
    Ok(())
}

/// Restarts the healer at `n` fleets, as a rolling update does: SIGTERM (it stops
/// writing and releases its Lease), then a new process with a new identity, as a new
/// Pod. Times the new process from its start to `/readyz` (every watch listed), to
/// holding the Lease (`celld_healer_leader`), and to `celld_healer_fleets_reconciled`
/// reaching every fleet, and counts the API requests it sent until then. Prints
/// `[start-row]`; returns the new healer. Asserts only that it reaches every fleet.
async fn restart(env: &mut Env, old: usize, n: usize) -> Result<usize> {
    let stopping = Instant::now();
    stop_healer(env, old)?;
    let stopped_in = stopping.elapsed();
    let t0 = Instant::now();
    let h = env.healer(scale_healer(env, "healer-b"))?;
    let timeout = Duration::from_secs(120 + n as u64 / 5);
    let gauge = |m: &str, name: &str| sum_metric(m, &format!("{name} "));
    let (mut ready, mut leader) = (None, None);
    let (reconciled, m) = loop {
        if let Some(st) = env.h_mut(h).try_exit() {
            bail!("the restarted healer exited: {st}");
        }
        ensure!(
            t0.elapsed() < timeout,
            "the restarted healer did not reconcile all {n} fleets within {timeout:?} (ready {ready:?}, leader {leader:?})"
        );
        // Before its listener is up, both requests fail: not ready yet.
        if ready.is_none() && env.h(h).http_status("/readyz").await.ok() == Some(200) {
            ready = Some(t0.elapsed());
        }
        if let Ok(m) = env.h(h).metrics_text().await {
            if leader.is_none() && gauge(&m, "celld_healer_leader") == 1.0 {
                leader = Some(t0.elapsed());
            }
            if gauge(&m, "celld_healer_fleets_reconciled") >= n as f64 {
                break (t0.elapsed(), m);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let served = gauge(&m, "celld_healer_fleets_served");
    let done = gauge(&m, "celld_healer_fleets_reconciled");
    ensure!(
        served == n as f64 && done == n as f64,
        "after the restart the healer serves {served} and reconciled {done} fleets, not {n}"
    );
    // Both come before the last reconcile (it needs the caches and the lease); one
    // reached between two polls counts at the poll that saw the end.
    let (ready, leader) = (ready.unwrap_or(reconciled), leader.unwrap_or(reconciled));
    let mut verbs: BTreeMap<String, f64> = BTreeMap::new();
    for ((verb, _), v) in api_requests(&m) {
        *verbs.entry(verb).or_default() += v;
    }
    let total: f64 = verbs.values().sum();
    let by_verb: Vec<String> = verbs.iter().map(|(k, v)| format!("{k}:{v}")).collect();
    // The reconciles it ran until then, by result (results it had none of are left out).
    let results: Vec<String> = m
        .lines()
        .filter_map(|l| l.strip_prefix("celld_healer_reconciles_total{result=\""))
        .filter_map(|l| l.split_once("\"} "))
        .map(|(result, count)| format!("{result} {count}"))
        .collect();
    eprintln!(
        "[start] {n} fleets: old healer stopped in {stopped_in:?}; the new one ready after {ready:?}, leader after {leader:?}, every fleet reconciled after {reconciled:?}; reconciles {}; requests {:?}",
        results.join(", "),
        api_requests(&m)
    );
    eprintln!(
        "[start-row] fleets={n} ready_s={:.2} leader_s={:.2} reconciled_s={:.2} requests={total} verbs={}",
        ready.as_secs_f64(),
        leader.as_secs_f64(),
        reconciled.as_secs_f64(),
        by_verb.join(",")
    );
    Ok(h)
}

/// A `MemberForceDeleted` Event as (Pod, fleet, the deadline the healer computed: the
/// end of the Pod's grace its note names plus the margin, the Event's time), one for
/// each Pod it names (a fleet's force deletes sent together share one Event, a line
/// each); none for one without a time.
type ForceDeleted = (String, String, Timestamp, Timestamp);

fn force_deletes_of(e: &CoreEvent) -> Result<Vec<ForceDeleted>> {
    let Some(at) = e.event_time.as_ref().map(|t| t.0) else {
        return Ok(Vec::new());
    };
    let fleet = e.involved_object.name.clone().unwrap_or_default();
    let text = e.message.clone().unwrap_or_default();
    text.lines()
        .map(|note| {
            // "Force-deleted Pod <name>: its grace ended at <RFC 3339> and its node ..."
            let parsed = note
                .strip_prefix("Force-deleted Pod ")
                .and_then(|r| r.split_once(": its grace ended at "))
                .and_then(|(pod, r)| Some((pod, r.split_once(' ')?.0)));
            let Some((pod, grace_end)) = parsed else {
                bail!("a MemberForceDeleted Event with an unexpected note: {note:?}");
            };
            let grace_end: Timestamp = grace_end
                .parse()
                .with_context(|| format!("the grace end in {note:?}"))?;
            Ok((
                pod.to_string(),
                fleet.clone(),
                force_delete_deadline(grace_end),
                at,
            ))
        })
        .collect()
}

/// What a [`ForceDeletes`] watch has seen: by Pod, (fleet, deadline, the Event's time).
type Seen = BTreeMap<String, (String, Timestamp, Timestamp)>;

/// The `MemberForceDeleted` Events of the test's namespace, as they are recorded, from
/// one watch opened before the Pods are deleted. Events have no watch cache in the API
/// server: a list of them is read from etcd and decoded whole, every Event of the
/// namespace, to find the few this asks for. Listed four times a second, as a poll
/// would, that cost the API server about a sixteenth of its CPU during a burst it was
/// meant to measure (a profile of the 200-fleet burst); a watch costs it one decode per
/// Event written.
struct ForceDeletes {
    seen: std::sync::Arc<std::sync::Mutex<(Seen, Option<String>)>>,
    task: tokio::task::JoinHandle<()>,
}

impl ForceDeletes {
    /// Watches from now on (returns once the watch's first list is in, so that list is
    /// not part of what is measured next); Events older than `since` are left out.
    async fn watch(env: &Env, since: Timestamp) -> Result<ForceDeletes> {
        use futures::StreamExt;
        use kube::runtime::{WatchStreamExt, watcher};
        let api: Api<CoreEvent> = Api::namespaced(env.client.clone(), &env.ns);
        let seen = std::sync::Arc::new(std::sync::Mutex::new((Seen::new(), None)));
        let (into, (listed, mut ready)) = (seen.clone(), tokio::sync::watch::channel(false));
        let task = tokio::spawn(async move {
            let cfg = watcher::Config::default().fields("reason=MemberForceDeleted");
            let mut events = watcher(api, cfg).default_backoff().boxed();
            while let Some(e) = events.next().await {
                let e = match e {
                    Ok(watcher::Event::Apply(e) | watcher::Event::InitApply(e)) => e,
                    Ok(watcher::Event::InitDone) => {
                        let _ = listed.send(true);
                        continue;
                    }
                    Ok(_) => continue,
                    // The watcher lists again after its back-off; nothing is lost.
                    Err(e) => {
                        eprintln!("[burst] watching MemberForceDeleted Events: {e} (retried)");
                        continue;
                    }
                };
                let mut guard = into.lock().expect("not poisoned");
                match force_deletes_of(&e) {
                    Ok(found) => {
                        // The first write for a Pod counts (a retry would be a later Event).
                        for (pod, fleet, deadline, at) in found.into_iter().filter(|f| f.3 >= since)
                        {
                            guard.0.entry(pod).or_insert((fleet, deadline, at));
                        }
                    }
                    Err(e) => guard.1 = Some(format!("{e:#}")),
                }
            }
        });
        tokio::time::timeout(Duration::from_secs(60), ready.wait_for(|l| *l))
            .await
            .context("the MemberForceDeleted watch listed within 60 s")?
            .context("the MemberForceDeleted watch ended")?;
        Ok(ForceDeletes { seen, task })
    }

    /// The force deletes seen so far; an error if an Event's note could not be read.
    fn seen(&self) -> Result<Seen> {
        let guard = self.seen.lock().expect("not poisoned");
        if let Some(e) = &guard.1 {
            bail!("watching MemberForceDeleted Events: {e}");
        }
        Ok(guard.0.clone())
    }

    /// Waits until every Pod of `want` has its force delete.
    async fn wait_all(&self, want: &BTreeSet<String>, timeout: Duration) -> Result<Seen> {
        wait_for(
            "a MemberForceDeleted Event for every deleted Pod",
            timeout,
            || async {
                let got = self.seen()?;
                Ok(want.iter().all(|p| got.contains_key(p)).then_some(got))
            },
        )
        .await
    }
}

impl Drop for ForceDeletes {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Seconds from the first to the last of ascending deadlines (0 for none).
fn spread_s(sorted: &[Timestamp]) -> f64 {
    match (sorted.first(), sorted.last()) {
        (Some(a), Some(b)) => b.duration_since(*a).as_secs_f64(),
        _ => 0.0,
    }
}

/// p-th percentile (nearest rank) of ascending values.
/// The healer's `celld_healer_api_request_duration_seconds` for `verb` (all resources)
/// between two scrapes: count, mean and the bucket bounds of p50 and p99.
fn response_times(m0: &str, m1: &str, verb: &str) -> Option<String> {
    const NAME: &str = "celld_healer_api_request_duration_seconds";
    let verb_label = format!("verb=\"{verb}\"");
    // (le -> cumulative count, sum, count) summed over resources.
    let read = |text: &str| {
        let mut buckets: BTreeMap<String, f64> = BTreeMap::new();
        let (mut sum, mut count) = (0.0, 0.0);
        for line in text.lines().filter(|l| l.contains(&verb_label)) {
            let Some((key, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let Ok(v) = value.parse::<f64>() else {
                continue;
            };
            if let Some(rest) = key.strip_prefix(&format!("{NAME}_bucket{{le=\"")) {
                let le = rest.split('"').next().unwrap_or_default().to_string();
                *buckets.entry(le).or_default() += v;
            } else if key.starts_with(&format!("{NAME}_sum{{")) {
                sum += v;
            } else if key.starts_with(&format!("{NAME}_count{{")) {
                count += v;
            }
        }
        (buckets, sum, count)
    };
    let ((b0, s0, c0), (b1, s1, c1)) = (read(m0), read(m1));
    let count = c1 - c0;
    if count <= 0.0 {
        return None;
    }
    let mut bounds: Vec<(f64, f64)> = b1
        .iter()
        .map(|(le, v)| {
            let bound = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().unwrap_or(f64::INFINITY)
            };
            (bound, v - b0.get(le).copied().unwrap_or(0.0))
        })
        .collect();
    bounds.sort_by(|a, b| a.0.total_cmp(&b.0));
    let at = |q: f64| {
        bounds
            .iter()
            .find(|(_, c)| *c >= q * count)
            .map_or(f64::INFINITY, |(b, _)| *b)
    };
    Some(format!(
        "{count} requests, mean {:.0} ms, p50 <= {:.0} ms, p99 <= {:.0} ms",
        (s1 - s0) / count * 1000.0,
        at(0.5) * 1000.0,
        at(0.99) * 1000.0
    ))
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// `count` running nodes, round robin over the zones, each zone keeping at least one; in
/// each zone those with the most member Pods first. Members re-created after a burst land
/// on the nodes left running, so the nodes of the last burst may hold none by the next
/// (the same names every time left a third burst at 20 fleets with nothing to stop), and
/// bursts of one run should be alike in size.
async fn choose_nodes(env: &Env, count: usize) -> Result<Vec<String>> {
    let state = env.sim.control.state().await?;
    let mut pods_on: BTreeMap<String, usize> = BTreeMap::new();
    for p in env.api::<Pod>().list(&ListParams::default()).await? {
        if p.metadata.deletion_timestamp.is_none() {
            *pods_on.entry(node_of(&p)).or_default() += 1;
        }
    }
    let mut by_zone: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for node in state.nodes.iter().filter(|n| n.alive) {
        by_zone
            .entry(node.zone.clone())
            .or_default()
            .push(node.name.clone());
    }
    for nodes in by_zone.values_mut() {
        nodes.sort_by_key(|n| {
            (
                std::cmp::Reverse(pods_on.get(n).copied().unwrap_or(0)),
                n.clone(),
            )
        });
    }
    let mut chosen: Vec<String> = Vec::new();
    for i in 0.. {
        let before = chosen.len();
        for nodes in by_zone.values() {
            // Each zone keeps at least one node running.
            if chosen.len() < count && i + 1 < nodes.len() {
                chosen.push(nodes[i].clone());
            }
        }
        if chosen.len() == count || chosen.len() == before {
            break;
        }
    }
    ensure!(
        chosen.len() == count,
        "a burst of {count} nodes needs more nodes per zone than {by_zone:?}"
    );
    Ok(chosen)
}

/// A burst under way: the nodes stopped, and their member Pods as the deletes left them
/// (Terminating, with their deletionTimestamp).
struct Burst {
    nodes: Vec<String>,
    deleted: Vec<Pod>,
    /// The fleets hit (identities).
    hit: BTreeSet<String>,
    stopped_in: Duration,
    deleted_in: Duration,
}

/// Stops `nodes` at once, waits until they are all Ready Unknown, then deletes every
/// member Pod on them at once: what the taint-eviction controller sends for each Pod of
/// a lost node, a plain DELETE (the Pod's own grace), here with the Pod's uid as
/// precondition. Pods it evicted first are part of the burst as it left them.
async fn stop_and_evict(env: &Env, nodes: Vec<String>) -> Result<Burst> {
    let stopped: BTreeSet<&str> = nodes.iter().map(String::as_str).collect();
    let pods: Api<Pod> = env.api();
    let victims: Vec<Pod> = pods
        .list(&ListParams::default())
        .await?
        .into_iter()
        .filter(|p| {
            stopped.contains(node_of(p).as_str()) && p.metadata.deletion_timestamp.is_none()
        })
        .collect();
    ensure!(!victims.is_empty(), "no member Pod on {nodes:?}");
    let started = Instant::now();
    let mut stops = tokio::task::JoinSet::new();
    for node in nodes.clone() {
        let control = env.sim.control.clone();
        stops.spawn(async move { control.stop_node(&node).await });
    }
    while let Some(r) = stops.join_next().await {
        r??;
    }
    let stopped_in = started.elapsed();
    // The node lifecycle controller marks a stopped node's Ready Unknown after its grace
    // (`--node-monitor-grace-period`), and only then does the taint eviction controller
    // evict its Pods. Only a Pod on a node seen unreachable is stranded (rule F2), so the
    // Pods are deleted then, as the eviction would, all at once: each deadline then
    // falls after the healer could know its node lost, as it does on a real cluster.
    let nodes_api: Api<Node> = Api::all(env.client.clone());
    wait_for(
        "the stopped nodes' Ready condition Unknown",
        Duration::from_secs(180),
        || async {
            let unknown = nodes_api
                .list(&ListParams::default())
                .await?
                .items
                .iter()
                .filter(|n| {
                    n.metadata
                        .name
                        .as_deref()
                        .is_some_and(|name| stopped.contains(name))
                        && n.status
                            .as_ref()
                            .and_then(|s| s.conditions.as_ref())
                            .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
                            .is_some_and(|c| c.status == "Unknown")
                })
                .count();
            Ok((unknown == stopped.len()).then_some(()))
        },
    )
    .await?;
    // The Pods on those nodes now: any the taint eviction controller evicted meanwhile
    // (a Pod without a toleration for the unreachable taint goes at once) are part of
    // the burst as they are; the others are deleted here.
    let on_stopped: Vec<Pod> = pods
        .list(&ListParams::default())
        .await?
        .into_iter()
        .filter(|p| stopped.contains(node_of(p).as_str()) && was(&victims, p))
        .collect();
    let (evicted, victims): (Vec<Pod>, Vec<Pod>) = on_stopped
        .into_iter()
        .partition(|p| p.metadata.deletion_timestamp.is_some());
    let mut deletes = tokio::task::JoinSet::new();
    for chunk in victims.chunks(victims.len().div_ceil(32).max(1)) {
        let (pods, chunk) = (pods.clone(), chunk.to_vec());
        deletes.spawn(async move {
            let mut deleted = Vec::new();
            for p in chunk {
                let dp = DeleteParams {
                    preconditions: Some(Preconditions {
                        uid: p.metadata.uid.clone(),
                        resource_version: None,
                    }),
                    ..DeleteParams::default()
                };
                let name = p.metadata.name.clone().unwrap_or_default();
                // Graceful: the API server answers with the Pod, now Terminating. One
                // gone or replaced meanwhile (the eviction got there first, and the
                // healer already replaced it) is not part of the burst.
                match pods.delete(&name, &dp).await {
                    Ok(d) => {
                        let Some(pod) = d.left() else {
                            bail!("{name} was deleted at once, not held for its grace");
                        };
                        deleted.push(pod);
                    }
                    Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
                    Err(e) => return Err(e.into()),
                }
            }
            anyhow::Ok(deleted)
        });
    }
    let mut deleted = evicted;
    while let Some(r) = deletes.join_next().await {
        deleted.extend(r??);
    }
    ensure!(
        !deleted.is_empty(),
        "no member Pod left to evict on {nodes:?}"
    );
    let hit: BTreeSet<String> = deleted
        .iter()
        .filter_map(|p| {
            p.metadata
                .labels
                .as_ref()?
                .get(celld_gen::api::labels::IDENTITY)
                .cloned()
        })
        .collect();
    Ok(Burst {
        nodes,
        deleted,
        hit,
        stopped_in,
        deleted_in: started.elapsed(),
    })
}

/// Whether `p` is one of `before` (the same uid).
fn was(before: &[Pod], p: &Pod) -> bool {
    before.iter().any(|b| b.metadata.uid == p.metadata.uid)
}

/// Starts `nodes` again, at once.
async fn start_nodes(env: &Env, nodes: Vec<String>) -> Result<()> {
    let mut starts = tokio::task::JoinSet::new();
    for node in nodes {
        let control = env.sim.control.clone();
        starts.spawn(async move { control.start_node(&node).await });
    }
    while let Some(r) = starts.join_next().await {
        r??;
    }
    Ok(())
}

/// Stops `count` nodes (round robin over the zones) at once, deletes every member Pod on
/// them at once, and measures each force-delete from its deadline; then starts the nodes
/// again.
async fn burst_of_nodes(env: &Env, h: usize, n: usize, count: usize, label: &str) -> Result<()> {
    let chosen = choose_nodes(env, count).await?;
    let m0 = env.h(h).metrics_text().await?;
    let t0 = Timestamp::now();
    let log = ForceDeletes::watch(env, t0).await?;
    let Burst {
        nodes: chosen,
        deleted: victims,
        hit,
        stopped_in,
        deleted_in,
    } = stop_and_evict(env, chosen).await?;
    let want: BTreeSet<String> = victims
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    eprintln!(
        "[burst] {n} fleets: {} nodes stopped in {stopped_in:?} ({chosen:?}); {} member Pods of {} fleets deleted by {deleted_in:?}",
        chosen.len(),
        want.len(),
        hit.len()
    );
    // The healer's counters just before the first deadline: from there on, what it
    // sends is the force deletes' cost (before it, its reports of the evictions).
    let first_deadline = victims
        .iter()
        .filter_map(|p| p.metadata.deletion_timestamp.as_ref())
        .map(|t| force_delete_deadline(t.0))
        .min();
    if let Some(d) = first_deadline {
        let ahead = d.duration_since(Timestamp::now()).as_secs_f64() - 0.2;
        if ahead > 0.0 {
            tokio::time::sleep(Duration::from_secs_f64(ahead)).await;
        }
    }
    let m_due = env.h(h).metrics_text().await?;
    let timeout = Duration::from_secs(120 + want.len() as u64 / 2);
    let got = log.wait_all(&want, timeout).await?;
    drop(log);
    let mut per_fleet: BTreeMap<&str, Vec<(Timestamp, f64)>> = BTreeMap::new();
    let mut deadlines = Vec::new();
    for pod in &want {
        let (fleet, deadline, at) = &got[pod];
        let lag = at.duration_since(*deadline).as_secs_f64();
        per_fleet.entry(fleet).or_default().push((*at, lag));
        deadlines.push(*deadline);
    }
    // Lags by the write's place among its fleet's writes (1st, 2nd, 3rd): one write per
    // reconcile per fleet, so a fleet's later writes wait for its earlier ones.
    let mut all: Vec<f64> = Vec::new();
    let mut by_rank: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
    for writes in per_fleet.values_mut() {
        writes.sort_by_key(|w| w.0);
        for (i, (_, lag)) in writes.iter().enumerate() {
            all.push(*lag);
            by_rank.entry(i + 1).or_default().push(*lag);
        }
    }
    let sort = |v: &mut Vec<f64>| v.sort_by(f64::total_cmp);
    sort(&mut all);
    deadlines.sort();
    let spread = spread_s(&deadlines);
    for (rank, lags) in &mut by_rank {
        sort(lags);
        eprintln!(
            "[burst] {n} fleets: write {rank} of its fleet: {} writes, lag p50 {:.2} s, max {:.2} s",
            lags.len(),
            percentile(lags, 50.0),
            percentile(lags, 100.0)
        );
    }
    let over = all.iter().filter(|&&l| l > 1.0).count();
    // What the healer did meanwhile: its reconciles by result, its requests by verb.
    let m1 = env.h(h).metrics_text().await?;
    let delta = |prefix: &str| sum_metric(&m1, prefix) - sum_metric(&m0, prefix);
    let reconciles: Vec<String> = ["acted", "idle", "unconfirmed", "conflict", "error"]
        .iter()
        .map(|r| {
            let k = format!("celld_healer_reconciles_total{{result=\"{r}\"}}");
            format!("{r} {}", delta(&k))
        })
        .collect();
    let (r0, r1) = (api_requests(&m0), api_requests(&m1));
    let requests: BTreeMap<String, f64> = r1
        .iter()
        .map(|(k, v)| {
            (
                format!("{} {}", k.0, k.1),
                v - r0.get(k).copied().unwrap_or(0.0),
            )
        })
        .filter(|(_, d)| *d > 0.0)
        .collect();
    eprintln!(
        "[burst] {n} fleets: deadlines spread over {spread:.1} s; until the last write the healer reconciled {} and sent {requests:?}",
        reconciles.join(", ")
    );
    // A fleet's further due Pods go out with its first, on its fresh read
    // (`confirm::batch`).
    eprintln!(
        "[burst] {n} fleets: {} fresh reads; {} force deletes sent with their fleet's first, on its fresh read",
        delta("celld_healer_fresh_reads_total"),
        delta("celld_healer_force_deletes_ridden_total")
    );
    // How long the API server made the healer wait meanwhile (its own histogram).
    for verb in ["list", "delete", "patch", "create"] {
        if let Some(w) = response_times(&m0, &m1, verb) {
            eprintln!("[burst] {n} fleets: API server response to a {verb}: {w}");
        }
    }
    // Every request the healer sent from just before the burst until its last force
    // delete was seen (lease renewals and watches included); per force delete, those
    // from just before the first deadline on.
    let sent: f64 = requests.values().sum();
    let due: BTreeMap<String, f64> = r1
        .iter()
        .map(|(k, v)| {
            let before = api_requests(&m_due).get(k).copied().unwrap_or(0.0);
            (format!("{} {}", k.0, k.1), v - before)
        })
        .filter(|(_, d)| *d > 0.0)
        .collect();
    let since_due: f64 = due.values().sum();
    // Per force delete sent in that time (a Pod evicted early may have been
    // force-deleted before it).
    let deletes_due = due.get("delete pods").copied().unwrap_or(0.0);
    let per_delete = since_due / deletes_due.max(1.0);
    eprintln!(
        "[burst] {n} fleets: from just before the first deadline the healer sent {since_due:.0} requests ({due:?}), {per_delete:.2} per force delete"
    );
    eprintln!(
        "[burst-row] healer={label} fleets={n} nodes={} actions={} fleets_hit={} spread_s={spread:.1} p50_s={:.2} p99_s={:.2} max_s={:.2} over_1s={over} min_s={:.2} requests={sent:.0} requests_due={since_due:.0} per_delete={per_delete:.2}",
        chosen.len(),
        all.len(),
        per_fleet.len(),
        percentile(&all, 50.0),
        percentile(&all, 99.0),
        percentile(&all, 100.0),
        all.first().copied().unwrap_or(0.0)
    );
    start_nodes(env, chosen).await
}

/// Stops healer `old` (SIGTERM) and starts `bin` (None: the healer measured) in its
/// place; returns once the new one has reconciled all `n` fleets.
async fn switch_healer(
    env: &mut Env,
    old: usize,
    n: usize,
    bin: Option<std::path::PathBuf>,
    identity: &str,
) -> Result<usize> {
    stop_healer(env, old)?;
    let mut o = scale_healer(env, identity);
    o.bin = bin;
    let h = env.healer(o)?;
    let timeout = Duration::from_secs(120 + n as u64 / 5);
    let t0 = Instant::now();
    loop {
        // A baseline that refuses this command line exits: say so, not a timeout.
        if let Some(st) = env.h_mut(h).try_exit() {
            bail!("{identity} ({:?}) exited: {st}", env.h(h).log);
        }
        ensure!(
            t0.elapsed() < timeout,
            "{identity} did not reconcile all {n} fleets within {timeout:?}"
        );
        if let Ok(m) = env.h(h).metrics_text().await
            && sum_metric(&m, "celld_healer_fleets_reconciled ") >= n as f64
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(h)
}

/// The floor under the burst: the same burst (`count` nodes stopped, their member Pods
/// deleted at once) with the healer stopped, and each Pod force-deleted by this test at
/// its deadline, blind: no read, no Event, no status, every delete in flight at once.
/// A healer must send at least that delete, so what the healer's burst adds to this is
/// about the cost of its own work (its fresh read, Event and status); measured, not
/// proven to be the least possible (deletes paced otherwise might do a little better).
/// Prints `[floor-row]`; returns the healer started again afterwards.
async fn floor_burst(env: &mut Env, h: usize, n: usize, count: usize) -> Result<usize> {
    stop_healer(env, h)?;
    let chosen = choose_nodes(env, count).await?;
    let burst = stop_and_evict(env, chosen).await?;
    let measured = floor_writes(env, n, &burst).await;
    // Whatever the writes met, the cluster is left as the next step expects it.
    start_nodes(env, burst.nodes).await?;
    let h = env.healer(scale_healer(env, &format!("healer-floor-{n}")))?;
    measured?;
    Ok(h)
}

/// The floor's writes: each Pod of `burst` force-deleted at its deadline, all at once;
/// prints `[floor]` and `[floor-row]`.
async fn floor_writes(env: &Env, n: usize, burst: &Burst) -> Result<()> {
    let pods: Api<Pod> = env.api();
    let mut writes = tokio::task::JoinSet::new();
    for p in &burst.deleted {
        let name = p.metadata.name.clone().unwrap_or_default();
        let Some(grace_end) = p.metadata.deletion_timestamp.as_ref().map(|t| t.0) else {
            bail!("{name} came back from its delete without a deletionTimestamp");
        };
        let deadline = force_delete_deadline(grace_end);
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: p.metadata.uid.clone(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        let pods = pods.clone();
        writes.spawn(async move {
            let early = deadline.duration_since(Timestamp::now());
            if early.is_positive() {
                tokio::time::sleep(early.unsigned_abs()).await;
            }
            let sent = Timestamp::now();
            match pods.delete(&name, &dp).await {
                Ok(_) => {}
                // Gone before its deadline (nothing else should delete it): not timed.
                Err(kube::Error::Api(s)) if s.code == 404 => return Ok(None),
                Err(e) => return Err(e).with_context(|| format!("force-deleting {name}")),
            }
            let at = Timestamp::now();
            anyhow::Ok(Some((
                deadline,
                at.duration_since(deadline).as_secs_f64(),
                at.duration_since(sent).as_secs_f64(),
            )))
        });
    }
    let (mut lags, mut answers, mut deadlines, mut gone) = (Vec::new(), Vec::new(), Vec::new(), 0);
    while let Some(r) = writes.join_next().await {
        let Some((deadline, lag, answer)) = r?? else {
            gone += 1;
            continue;
        };
        deadlines.push(deadline);
        lags.push(lag);
        answers.push(answer);
    }
    lags.sort_by(f64::total_cmp);
    answers.sort_by(f64::total_cmp);
    deadlines.sort();
    let spread = spread_s(&deadlines);
    let over = lags.iter().filter(|&&l| l > 1.0).count();
    eprintln!(
        "[floor] {n} fleets, healer stopped: {} nodes stopped in {:?}; {} member Pods of {} fleets deleted by {:?}; each force-deleted by the test at its deadline ({gone} gone before it): the API server answered in {:.3} s on average (p99 {:.3} s)",
        burst.nodes.len(),
        burst.stopped_in,
        lags.len(),
        burst.hit.len(),
        burst.deleted_in,
        answers.iter().sum::<f64>() / answers.len().max(1) as f64,
        percentile(&answers, 99.0),
    );
    eprintln!(
        "[floor-row] fleets={n} nodes={} actions={} fleets_hit={} spread_s={spread:.1} p50_s={:.2} p99_s={:.2} max_s={:.2} over_1s={over}",
        burst.nodes.len(),
        lags.len(),
        burst.hit.len(),
        percentile(&lags, 50.0),
        percentile(&lags, 99.0),
        percentile(&lags, 100.0),
    );
    Ok(())
}

/// Creates `growing` fleets and, while they grow, takes one Ready fleet's member's node
/// away: measures its force-delete from the deadline, and the fleet Ready again.
async fn heal_while_growing(
    env: &Env,
    fleets: &[FleetFile],
    growing: usize,
) -> Result<Vec<FleetFile>> {
    let target = fleets.first().context("a Ready fleet to break")?;
    let victim = format!("{}-1", target.name);
    // The cluster's work grows with its fleets (at 1,000 a fleet took about 2 s to become
    // Ready on two cores, kubesim's stubs failing readiness probes under the load): each
    // wait for the cluster (readiness) is stretched by the fleets there will be, so a
    // large run is not cut short; the wait for the healer's force delete is not.
    let stretch = 1 + (fleets.len() + growing) as u32 / 200;
    let more: Vec<FleetFile> = (0..growing)
        .map(|i| env.persistent(&env.ns, &format!("g{i:04}"), 3))
        .collect();
    let pods: Api<Pod> = env.api();
    let t0 = Instant::now();
    let grow = async {
        for f in &more {
            env.apply_fleet(&f.yaml()).await?;
        }
        anyhow::Ok(t0.elapsed())
    };
    let heal = async {
        // Let the growth get going first: the first growing fleet has a member Pod.
        let first = more.first().context("a growing fleet")?;
        wait_for(
            &format!("{} growing", first.name),
            Duration::from_secs(60) * stretch,
            || async { Ok((!member_pods(env, &first.identity).await?.is_empty()).then_some(())) },
        )
        .await?;
        let pod = pods.get(&victim).await?;
        let node = node_of(&pod);
        let old_uid = pod.metadata.uid.clone();
        let log = ForceDeletes::watch(env, Timestamp::now()).await?;
        env.sim.control.stop_node(&node).await?;
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                uid: old_uid.clone(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        pods.delete(&victim, &dp).await?;
        let want = BTreeSet::from([victim.clone()]);
        let mut got = log.wait_all(&want, Duration::from_secs(120)).await?;
        drop(log);
        let (_, deadline, at) = got.remove(&victim).context("the victim's force delete")?;
        // The node comes back (its other members restart there).
        env.sim.control.start_node(&node).await?;
        wait_for(
            &format!("{victim} back and ready"),
            Duration::from_secs(240) * stretch,
            || async {
                Ok(pods
                    .get_opt(&victim)
                    .await?
                    .filter(|p| p.metadata.uid != old_uid && pod_ready(p))
                    .map(|_| ()))
            },
        )
        .await?;
        // The fleet's own status says Ready with every member again.
        wait_for(
            &format!("{} Ready with 3 members", target.name),
            Duration::from_secs(120) * stretch,
            || async {
                let f = env
                    .api::<celld_gen::api::CelldFleet>()
                    .get(&target.name)
                    .await?;
                Ok(f.status
                    .filter(|s| {
                        s.ready_members == Some(3)
                            && s.conditions
                                .iter()
                                .any(|c| c.type_ == "Ready" && c.status == "True")
                    })
                    .map(|_| ()))
            },
        )
        .await?;
        let ready = Timestamp::now();
        anyhow::Ok((node, deadline, at, ready))
    };
    let (grown, healed) = tokio::join!(grow, heal);
    let applied_in = grown?;
    let (node, deadline, at, ready) = healed?;
    let action_s = at.duration_since(deadline).as_secs_f64();
    let ready_s = ready.duration_since(deadline).as_secs_f64();
    let mut all = fleets.to_vec();
    all.extend(more.iter().cloned());
    all_ready(
        env,
        &all,
        Duration::from_secs(240.max(3 * growing as u64)) * stretch,
    )
    .await?;
    let grown_in = t0.elapsed();
    eprintln!(
        "[heal] {victim} (node {node}) force-deleted {action_s:.2} s after its deadline, {} Ready again {ready_s:.1} s after it, while {growing} fleets were created (applied in {applied_in:?}) and grew (all Ready after {grown_in:?})",
        target.name
    );
    eprintln!(
        "[heal-row] fleets={} growing={growing} action_s={action_s:.2} ready_s={ready_s:.1} growing_ready_s={:.1}",
        fleets.len(),
        grown_in.as_secs_f64()
    );
    Ok(more)
}
