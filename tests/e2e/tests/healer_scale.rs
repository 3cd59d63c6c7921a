//! Healer end-to-end measurements (issue 5 "Measure and report"):
//!
//! - API requests per minute in steady state with 20 fleets (the healer counts its own
//!   requests by verb and resource: `celld_healer_api_requests_total`). Goal: no writes
//!   and no reads beyond the watches, apart from the leader's lease renewals.
//! - Resident memory of the healer with 50 fleets of 3 members. Goal: under 30 MiB.
//!
//! The healer runs with the default lease duration (15 s) here. The figures are printed
//! (`[scale] ...`) and copied into tests/README.md.
//! `CELLD_HEALER_BIN` can point at a release build to measure it instead of the debug one.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steady_state_requests_and_memory() -> Result<()> {
    let Some(mut env) = Env::start("scale").await? else {
        return Ok(());
    };
    let r = scale(&mut env).await;
    env.finish(r).await
}

async fn scale(env: &mut Env) -> Result<()> {
    let mut fleets: Vec<FleetFile> = (0..20)
        .map(|i| FleetFile::persistent(&env.ns, &format!("f{i:02}"), 3))
        .collect();
    for f in &fleets {
        env.apply_fleet(&f.yaml()).await?;
    }
    let mut o = env.healer_options();
    o.lease_duration = "15s".into();
    let h = env.healer(o)?;
    let t0 = Instant::now();
    all_ready(env, &fleets, Duration::from_secs(240)).await?;
    eprintln!("[scale] 20 fleets x 3 members ready in {:?}", t0.elapsed());
    tokio::time::sleep(Duration::from_secs(5)).await;

    let window = Duration::from_secs(60);
    let m0 = api_requests(&env.h(h).metrics_text().await?);
    let r0 = env.h(h).metric("celld_healer_reconciles_total").await?;
    tokio::time::sleep(window).await;
    let m1 = api_requests(&env.h(h).metrics_text().await?);
    let r1 = env.h(h).metric("celld_healer_reconciles_total").await?;
    let mut diff: BTreeMap<String, f64> = BTreeMap::new();
    for (k, v) in &m1 {
        let d = v - m0.get(k).copied().unwrap_or(0.0);
        if d > 0.0 {
            diff.insert(format!("{} {}", k.0, k.1), d);
        }
    }
    let total: f64 = diff.values().sum();
    eprintln!(
        "[scale] steady state, 20 fleets, {window:?}: {total} requests ({diff:?}); {} reconciles (application observations)",
        r1 - r0
    );
    for (k, v) in &diff {
        let lease = k.ends_with(" leases");
        ensure!(
            lease || k.starts_with("watch "),
            "unexpected steady-state request: {k} x{v}"
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
    ensure!(writes == 0.0, "steady-state writes: {diff:?}");
    // The only reconciles in steady state are the application observations (one per
    // fleet per --application-interval, 60 s by default); they wrote nothing.
    let rss20 = env.h(h).rss_kib().unwrap_or(0);
    eprintln!("[scale] healer RSS with 20 fleets: {} KiB", rss20);

    // 50 fleets of 3 members.
    let more: Vec<FleetFile> = (20..50)
        .map(|i| FleetFile::persistent(&env.ns, &format!("f{i:02}"), 3))
        .collect();
    for f in &more {
        env.apply_fleet(&f.yaml()).await?;
    }
    fleets.extend(more);
    let t1 = Instant::now();
    all_ready(env, &fleets, Duration::from_secs(300)).await?;
    eprintln!(
        "[scale] 50 fleets x 3 members ready ({:?} for the last 30)",
        t1.elapsed()
    );
    tokio::time::sleep(Duration::from_secs(10)).await;
    let pid = env.h(h).pid().unwrap_or(0);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |n: &str| {
        status
            .lines()
            .find(|l| l.starts_with(n))
            .map(|l| l.split_whitespace().skip(1).collect::<Vec<_>>().join(" "))
            .unwrap_or_default()
    };
    let bin = healer_bin()?;
    eprintln!(
        "[scale] healer RSS with 50 fleets x 3 members: VmRSS {} (peak VmHWM {}), binary {}",
        field("VmRSS:"),
        field("VmHWM:"),
        bin.display()
    );
    let m = env.h(h).metrics_text().await?;
    eprintln!(
        "[scale] decide: {} calls, {:.1} us mean",
        sum_metric(&m, "celld_healer_decide_duration_seconds_count"),
        1e6 * sum_metric(&m, "celld_healer_decide_duration_seconds_sum")
            / sum_metric(&m, "celld_healer_decide_duration_seconds_count").max(1.0)
    );
    Ok(())
}
