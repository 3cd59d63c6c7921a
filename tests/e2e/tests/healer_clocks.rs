//! The healer under a wrong clock (rules T1 and T2): run with its wall clock shifted by
//! libfaketime, 15 minutes ahead or behind the API server's and the kubelets', it never
//! force-deletes a Pod before the real deadline and never replaces a disk before the
//! member was really down for the replacement delay; beyond `--max-clock-skew` it holds
//! both and says why.
//!
//! Before rules T1 and T2, a healer 15 minutes ahead force-deleted every evicted member
//! at once (the deletionTimestamp looked 15 minutes old) and replaced the disk of any
//! member the moment it went down (the kubelet's transition time looked 15 minutes old).

use std::time::Duration;

use anyhow::{Result, ensure};
use celld_e2e::*;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Api;

/// The tests' `--member-replacement-delay` ([`Env::healer_options`]).
const REPLACEMENT_DELAY: SignedDuration = SignedDuration::from_secs(20);
/// down_member's `--fresh-disk-age` (the replaced member's Pod is recreated below, so
/// that its disk is older than it).
const FRESH_DISK_AGE: Duration = Duration::from_secs(3);
/// The tests' `--absorb-window`.
const ABSORB_WINDOW: Duration = Duration::from_secs(10);

/// A healer whose wall clock is shifted by `offset` (libfaketime's form: `+15m`), with
/// `--max-clock-skew` at `bound`.
fn shifted_healer(env: &Env, offset: &str, bound: &str) -> Result<HealerOptions> {
    let mut o = env.healer_options();
    o.env = shifted_clock(offset)?;
    let insecure = env.dir.join("healer-no-tls-check.kubeconfig");
    without_tls_verification(&env.healer_kubeconfig, &insecure)?;
    o.kubeconfig = Some(insecure);
    o.extra = vec![
        "--max-clock-skew".into(),
        bound.into(),
        "--fresh-disk-age".into(),
        format!("{}s", FRESH_DISK_AGE.as_secs()),
    ];
    Ok(o)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healer_15_minutes_ahead_acts_on_time() -> Result<()> {
    let Some(mut env) = Env::start("clock-ahead").await? else {
        return Ok(());
    };
    let r = on_time(&mut env, "+15m").await;
    env.finish(r).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healer_15_minutes_behind_acts_on_time() -> Result<()> {
    let Some(mut env) = Env::start("clock-behind").await? else {
        return Ok(());
    };
    let r = on_time(&mut env, "-15m").await;
    env.finish(r).await
}

/// With the bound wide enough to let it act, a shifted healer's delays still end on
/// the real clock: a disk replaced no earlier than the replacement delay after the
/// member went down, a stranded Pod force-deleted no earlier than its deadline, and
/// neither much later.
async fn on_time(env: &mut Env, offset: &str) -> Result<()> {
    let f = env.persistent(&env.ns, "alpha", 3);
    env.apply_fleet(&f.yaml()).await?;
    let h = env.healer(shifted_healer(env, offset, "20m")?)?;
    wait_ready_members(env, &f.identity, 3, Duration::from_secs(120)).await?;
    let skew = wait_for(
        "the healer measured its skew",
        Duration::from_secs(30),
        || async {
            let m = env.h(h).metrics_text().await?;
            let skew = sum_metric(&m, "celld_healer_clock_skew_seconds");
            Ok((skew.abs() > 60.0).then_some(skew))
        },
    )
    .await?;
    let expected = if offset.starts_with('-') {
        -900.0
    } else {
        900.0
    };
    ensure!(
        (skew - expected).abs() < 5.0,
        "the healer measured a skew of {skew} s, its clock is shifted {offset}"
    );
    eprintln!("[{offset}] the healer measures a skew of {skew:.1} s");

    // R3: a member down for the replacement delay gets a fresh disk, not before.
    let pods: Api<Pod> = env.api();
    let first = pods.get("alpha-2").await?.metadata.uid.clone();
    wait_disks_older_than_new_pods(env, &["data-alpha-2"], FRESH_DISK_AGE).await?;
    pods.delete("alpha-2", &Default::default()).await?;
    wait_for(
        "alpha-2 recreated and ready",
        Duration::from_secs(60),
        || {
            let pods = pods.clone();
            let first = first.clone();
            async move {
                Ok(pods
                    .get_opt("alpha-2")
                    .await?
                    .filter(|p| p.metadata.uid != first && pod_ready(p))
                    .map(|_| ()))
            }
        },
    )
    .await?;
    wait_ready_for(
        env,
        &["alpha-0", "alpha-1", "alpha-2"],
        ABSORB_WINDOW,
        Duration::from_secs(60),
    )
    .await?;
    set_stub_mode(
        &pods.get("alpha-2").await?,
        serde_json::json!({"health": "unhealthy"}),
    )
    .await?;
    // When it went down, by the kubelet (whose clock is the API server's here).
    let down_since = wait_for("alpha-2 not ready", Duration::from_secs(30), || {
        let pods = pods.clone();
        async move {
            Ok(pods
                .get_opt("alpha-2")
                .await?
                .and_then(|p| not_ready_since(&p)))
        }
    })
    .await?;
    // The handoff's guarded delete: the Pod terminates, held by the healer's finalizer;
    // the API server stamps the request (deletionTimestamp minus the grace).
    let requested = wait_for("alpha-2's disk handoff", Duration::from_secs(90), || {
        let pods = pods.clone();
        async move {
            Ok(pods
                .get_opt("alpha-2")
                .await?
                .and_then(|p| delete_requested(&p)))
        }
    })
    .await?;
    let after = requested.duration_since(down_since);
    eprintln!(
        "[{offset}] alpha-2 down at {down_since}, its disk handoff requested {after:?} later"
    );
    // The kubelet's transition time has whole seconds.
    ensure!(
        after >= REPLACEMENT_DELAY - SignedDuration::from_secs(1),
        "alpha-2's disk handoff came {after:?} after it went down, before the replacement delay ({REPLACEMENT_DELAY:?})"
    );
    ensure!(
        after <= REPLACEMENT_DELAY + SignedDuration::from_secs(20),
        "alpha-2's disk handoff came {after:?} after it went down, long after the replacement delay"
    );
    wait_event(env, "alpha", "MemberReplaced", Duration::from_secs(30)).await?;
    wait_ready_members(env, &f.identity, 3, Duration::from_secs(120)).await?;
    wait_condition(env, "alpha", "Ready", "True", None, Duration::from_secs(60)).await?;

    // F1: a member whose node stops is force-deleted at its deadline, not before.
    let victim = pods.get("alpha-1").await?;
    let old_uid = victim.metadata.uid.clone().unwrap_or_default();
    let node = node_of(&victim);
    env.sim.control.stop_node(&node).await?;
    let deadline = evicted_deadline(env, "alpha-1").await?;
    let wait = deadline.duration_since(server_now(env).await?) - SignedDuration::from_secs(1);
    let early = Duration::try_from(wait).unwrap_or_default();
    eprintln!(
        "[{offset}] alpha-1 evicted; it may be force-deleted at {deadline}; watching it stay until then"
    );
    holds_for(
        "alpha-1 not force-deleted before its deadline",
        early,
        || {
            let pods = pods.clone();
            let old_uid = old_uid.clone();
            async move { still_there(&pods, "alpha-1", &old_uid).await }
        },
    )
    .await?;
    wait_for("alpha-1 force-deleted", Duration::from_secs(30), || {
        let pods = pods.clone();
        let old_uid = old_uid.clone();
        async move { Ok((!still_there(&pods, "alpha-1", &old_uid).await?).then_some(())) }
    })
    .await?;
    let lag = server_now(env).await?.duration_since(deadline);
    eprintln!("[{offset}] alpha-1 force-deleted within {lag:?} of its deadline");
    env.sim.control.start_node(&node).await?;
    Ok(())
}

/// Beyond `--max-clock-skew` (30 s by default) the healer holds the force delete and
/// reports `ClockSkewed`; a healer on time then does it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healer_beyond_the_bound_holds_and_reports() -> Result<()> {
    let Some(mut env) = Env::start("clock-bound").await? else {
        return Ok(());
    };
    let r = beyond_bound(&mut env).await;
    env.finish(r).await
}

async fn beyond_bound(env: &mut Env) -> Result<()> {
    let f = env.persistent(&env.ns, "alpha", 3);
    env.apply_fleet(&f.yaml()).await?;
    let skewed = env.healer(shifted_healer(env, "+15m", "30s")?)?;
    wait_ready_members(env, &f.identity, 3, Duration::from_secs(120)).await?;
    wait_condition(env, "alpha", "Ready", "True", None, Duration::from_secs(60)).await?;
    let pods: Api<Pod> = env.api();
    let victim = pods.get("alpha-1").await?;
    let old_uid = victim.metadata.uid.clone().unwrap_or_default();
    let node = node_of(&victim);
    env.sim.control.stop_node(&node).await?;
    let deadline = evicted_deadline(env, "alpha-1").await?;
    let (_, _, msg) = wait_condition(
        env,
        "alpha",
        "Blocked",
        "True",
        Some("ClockSkewed"),
        Duration::from_secs(60),
    )
    .await?;
    ensure!(msg.contains("ahead of"), "ClockSkewed says: {msg}");
    let ev = wait_event(env, "alpha", "ClockSkewed", Duration::from_secs(30)).await?;
    eprintln!("[bound] ClockSkewed: {}", ev.note);
    // Well past the deadline: still there.
    wait_server_time(
        env,
        deadline + SignedDuration::from_secs(10),
        Duration::from_secs(60),
    )
    .await?;
    ensure!(
        still_there(&pods, "alpha-1", &old_uid).await?,
        "alpha-1 was force-deleted by a healer 15 minutes ahead"
    );
    let m = env.h(skewed).metrics_text().await?;
    let skew = sum_metric(&m, "celld_healer_clock_skew_seconds");
    ensure!((skew - 900.0).abs() < 5.0, "skew metric {skew}");
    env.h_mut(skewed).kill();
    // A healer on time does it at once.
    env.healer(env.healer_options())?;
    wait_for("alpha-1 force-deleted", Duration::from_secs(60), || {
        let pods = pods.clone();
        let old_uid = old_uid.clone();
        async move { Ok((!still_there(&pods, "alpha-1", &old_uid).await?).then_some(())) }
    })
    .await?;
    env.sim.control.start_node(&node).await?;
    Ok(())
}

/// The Pod named `name` still exists with uid `uid`.
async fn still_there(pods: &Api<Pod>, name: &str, uid: &str) -> Result<bool> {
    Ok(pods
        .get_opt(name)
        .await?
        .is_some_and(|p| p.metadata.uid.as_deref() == Some(uid)))
}

/// Waits for `name` to be evicted; returns its force-delete deadline.
async fn evicted_deadline(env: &Env, name: &str) -> Result<Timestamp> {
    let pods: Api<Pod> = env.api();
    let deleting = wait_for(&format!("{name} evicted"), Duration::from_secs(90), || {
        let pods = pods.clone();
        async move {
            Ok(pods
                .get_opt(name)
                .await?
                .and_then(|p| p.metadata.deletion_timestamp.clone()))
        }
    })
    .await?;
    Ok(force_delete_deadline(deleting.0))
}

/// The Ready condition's transition time while it is not True.
fn not_ready_since(p: &Pod) -> Option<Timestamp> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready" && c.status != "True")?
        .last_transition_time
        .as_ref()
        .map(|t| t.0)
}

/// When the API server took a delete request for `p`: its deletionTimestamp minus its
/// grace.
fn delete_requested(p: &Pod) -> Option<Timestamp> {
    let at = p.metadata.deletion_timestamp.as_ref()?.0;
    let grace = p.metadata.deletion_grace_period_seconds.unwrap_or(0);
    at.checked_sub(SignedDuration::from_secs(grace)).ok()
}
