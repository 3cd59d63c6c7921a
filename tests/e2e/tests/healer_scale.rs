//! Healer end-to-end measurements (issue 5 "Measure and report", issue 14 "at fleet
//! scale"):
//!
//! - for each fleet count of `CELLD_SCALE_FLEETS` (comma-separated; default `20,50`,
//!   what CI runs as a test of correctness): the time until every fleet of 3 members is
//!   Ready, then a steady minute: API requests by verb (the healer counts its own
//!   requests: `celld_healer_api_requests_total`), the healer's CPU seconds, its resident
//!   memory, and reconciles. Goal, checked at every count: no writes and no reads beyond
//!   the watches, apart from the leader's lease renewals.
//! - Resident memory with 50 fleets of 3 members. Goal: under 30 MiB (release build).
//!
//! The healer runs with the default lease duration (15 s) here. Each count prints one
//! `[scale-row]` line that `scripts/bench-healer.sh` turns into the table of
//! docs/performance.md. `CELLD_HEALER_BIN` can point at a release build to measure it
//! instead of the debug one. Nodes per zone grow with the largest count (110 Pods each).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use celld_e2e::*;

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

/// The fleet counts to measure, ascending.
fn counts() -> Result<Vec<usize>> {
    let text = std::env::var("CELLD_SCALE_FLEETS").unwrap_or_else(|_| "20,50".into());
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steady_state_requests_and_memory() -> Result<()> {
    let counts = counts()?;
    let largest = counts.last().copied().unwrap_or(50);
    let opts = EnvOptions {
        nodes_per_zone: 2.max((largest as u32).div_ceil(110) + 1),
        ..EnvOptions::default()
    };
    let Some(mut env) = Env::start_with("scale", opts).await? else {
        return Ok(());
    };
    let r = scale(&mut env, &counts).await;
    env.finish(r).await
}

async fn scale(env: &mut Env, counts: &[usize]) -> Result<()> {
    let mut fleets: Vec<FleetFile> = Vec::new();
    let mut h = None;
    for &n in counts {
        let more: Vec<FleetFile> = (fleets.len()..n)
            .map(|i| FleetFile::persistent(&env.ns, &format!("f{i:04}"), 3))
            .collect();
        for f in &more {
            env.apply_fleet(&f.yaml()).await?;
        }
        let added = more.len();
        fleets.extend(more);
        let h = match h {
            Some(h) => h,
            None => {
                let mut o = env.healer_options();
                o.lease_duration = "15s".into();
                *h.insert(env.healer(o)?)
            }
        };
        let t0 = Instant::now();
        all_ready(env, &fleets, Duration::from_secs(240.max(3 * added as u64))).await?;
        let ready = t0.elapsed();
        eprintln!("[scale] {n} fleets x 3 members ready ({ready:?} for the last {added})");
        tokio::time::sleep(Duration::from_secs(10)).await;
        steady_minute(env, h, n, ready).await?;
    }
    Ok(())
}

/// One steady minute at `n` fleets: requests by verb (only the lease and watches),
/// CPU, memory; prints the `[scale-row]` line.
async fn steady_minute(env: &Env, h: usize, n: usize, ready: Duration) -> Result<()> {
    let pid = env.h(h).pid().context("the healer runs")?;
    let cpu_now = || env.h(h).cpu_seconds().context("the healer's CPU time");
    let window = Duration::from_secs(60);
    let m0 = api_requests(&env.h(h).metrics_text().await?);
    let r0 = env.h(h).metric("celld_healer_reconciles_total").await?;
    let c0 = cpu_now()?;
    tokio::time::sleep(window).await;
    let m1 = api_requests(&env.h(h).metrics_text().await?);
    let r1 = env.h(h).metric("celld_healer_reconciles_total").await?;
    let cpu = cpu_now()? - c0;
    let mut diff: BTreeMap<String, f64> = BTreeMap::new();
    for (k, v) in &m1 {
        let d = v - m0.get(k).copied().unwrap_or(0.0);
        if d > 0.0 {
            diff.insert(format!("{} {}", k.0, k.1), d);
        }
    }
    let total: f64 = diff.values().sum();
    eprintln!(
        "[scale] steady state, {n} fleets, {window:?}: {total} requests ({diff:?}); {} reconciles (application observations); {cpu:.2} CPU s",
        r1 - r0
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
    // The only reconciles in steady state are the application observations (one per
    // fleet per --application-interval, 60 s by default); they wrote nothing.
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
        "[scale-row] fleets={n} pods={} ready_s={:.1} rss_mib={:.1} rss_per_fleet_kib={:.0} cpu_s_per_min={cpu:.2} requests_per_min={total} writes_per_min={writes} reconciles_per_min={}",
        3 * n,
        ready.as_secs_f64(),
        rss as f64 / 1024.0,
        rss as f64 / n as f64,
        r1 - r0
    );
    Ok(())
}
