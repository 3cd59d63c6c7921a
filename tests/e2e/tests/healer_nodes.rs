//! Healer end-to-end, scenarios 3 and 5 of issue 5.
//!
//! 3. A node stops: its member is force-deleted once grace + margin have passed, and
//!    comes back on its own disk in its zone on the zone's other node; no claim changes
//!    uid. Measures the time from the deadline to the healer's write.
//! 5. One member down past the replacement delay with the rest ready: replaced on a
//!    fresh disk. Two members down: nothing destroyed. A member stuck on an image pull
//!    or a config error: never replaced.
//!
//! And rule F2: a member whose kubelet stays up but never finishes its deletion (a hung
//! container) is not force-deleted; it is reported, and returns once the node lets go.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use celld_e2e::*;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::DeleteParams;
use kube::{Api, ResourceExt};
use kubesim::control::FaultKind;

/// down_member's `--fresh-disk-age`.
const FRESH_DISK_AGE: Duration = Duration::from_secs(3);
/// The tests' `--absorb-window` ([`Env::healer_options`]).
const ABSORB_WINDOW: Duration = Duration::from_secs(10);

fn uids(c: &BTreeMap<String, (String, String, bool)>) -> BTreeMap<String, String> {
    c.iter().map(|(k, v)| (k.clone(), v.0.clone())).collect()
}

/// Every claim of `before` but data-one-2 unchanged, and no disk replacement started in
/// fleets two and img.
async fn others_left_alone(
    env: &Env,
    before: &BTreeMap<String, (String, String, bool)>,
) -> Result<()> {
    let after = claims(env).await?;
    for (name, (uid, _, deleting)) in before {
        if name == "data-one-2" {
            continue;
        }
        let now = after.get(name).with_context(|| format!("{name} is gone"))?;
        ensure!(
            now.0 == *uid && !now.2 && !deleting,
            "{name} changed: {uid} -> {:?}",
            now
        );
    }
    for f in ["two", "img"] {
        let evs = fleet_events(&env.client, &env.ns, Some(f)).await?;
        ensure!(
            !evs.iter()
                .any(|e| e.action == "StartHandoff" || e.action == "DeleteClaim"),
            "fleet {f} started a disk replacement: {evs:?}"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_stop_force_delete_keeps_disk() -> Result<()> {
    let Some(mut env) = Env::start("node-stop").await? else {
        return Ok(());
    };
    let r = node_stop(&mut env).await;
    env.finish(r).await
}

async fn node_stop(env: &mut Env) -> Result<()> {
    let f = env.persistent(&env.ns, "alpha", 3);
    env.apply_fleet(&f.yaml()).await?;
    let h = env.healer(env.healer_options())?;
    wait_ready_members(env, &f.identity, 3, Duration::from_secs(120)).await?;
    wait_condition(env, "alpha", "Ready", "True", None, Duration::from_secs(60)).await?;
    let before = claims(env).await?;
    let pods: Api<Pod> = env.api();
    let victim = pods.get("alpha-1").await?;
    let node = node_of(&victim);
    let zone = zone_of(env, &node).await?;
    let old_uid = victim.metadata.uid.clone().unwrap_or_default();
    eprintln!("[node-stop] stopping {node} ({zone}), running alpha-1");
    env.sim.control.stop_node(&node).await?;

    // The node lifecycle controller evicts the Pod (deletionTimestamp = now + grace); its
    // kubelet never confirms.
    let (deleting, deadline, ev) = wait_evicted_then_force_deleted(env, "alpha", "alpha-1").await?;
    eprintln!("[node-stop] alpha-1 deletionTimestamp {deleting}, force-delete deadline {deadline}");
    let at = ev.time.context("event without time")?;
    let lag = at.duration_since(deadline);
    eprintln!(
        "[node-stop] MemberForceDeleted recorded at {at}: {lag:?} after the deadline ({})",
        ev.note
    );
    ensure!(
        lag.as_secs_f64() >= 0.0,
        "force-deleted before the deadline"
    );
    ensure!(
        lag.as_secs_f64() < 3.0,
        "force-delete came {lag:?} after the deadline"
    );

    // It returns on its own disk, on the zone's other node.
    let back = wait_for("alpha-1 back and ready", Duration::from_secs(90), || {
        let pods = pods.clone();
        let old_uid = old_uid.clone();
        async move {
            Ok(pods
                .get_opt("alpha-1")
                .await?
                .filter(|p| p.metadata.uid.as_deref() != Some(old_uid.as_str()) && pod_ready(p)))
        }
    })
    .await?;
    let new_node = node_of(&back);
    let new_zone = zone_of(env, &new_node).await?;
    ensure!(
        new_zone == zone,
        "alpha-1 came back in {new_zone}, its disk is in {zone}"
    );
    let after = claims(env).await?;
    ensure!(
        uids(&before) == uids(&after),
        "claims changed: {before:?} -> {after:?}"
    );
    wait_condition(env, "alpha", "Ready", "True", None, Duration::from_secs(60)).await?;
    let m = env.h(h).metrics_text().await?;
    eprintln!(
        "[node-stop] alpha-1 back on {new_node} ({new_zone}) on its own disk; claims unchanged; \
         healer deadline_lag: count {} sum {:.3}s",
        sum_metric(&m, "celld_healer_deadline_lag_seconds_count"),
        sum_metric(&m, "celld_healer_deadline_lag_seconds_sum")
    );
    env.sim.control.start_node(&node).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn down_member_replacement_rules() -> Result<()> {
    let Some(mut env) = Env::start("down-member").await? else {
        return Ok(());
    };
    let r = down_member(&mut env).await;
    env.finish(r).await
}

async fn down_member(env: &mut Env) -> Result<()> {
    // Three fleets at once: one member down (replaced), two down (left), image pull
    // (left).
    let one = env.persistent(&env.ns, "one", 3);
    let two = env.persistent(&env.ns, "two", 3);
    let img = env.persistent(&env.ns, "img", 3);
    for f in [&one, &two, &img] {
        env.apply_fleet(&f.yaml()).await?;
    }
    let mut o = env.healer_options();
    // A disk is "made for its Pod" when created less than this before the Pod; the
    // replaced member's Pod is recreated below so that its disk is older than it.
    o.extra = vec![
        "--fresh-disk-age".into(),
        format!("{}s", FRESH_DISK_AGE.as_secs()),
    ];
    env.healer(o)?;
    for f in [&one, &two, &img] {
        wait_ready_members(env, &f.identity, 3, Duration::from_secs(120)).await?;
    }
    let pods: Api<Pod> = env.api();
    let first = pods.get("one-2").await?.metadata.uid.clone();
    wait_disks_older_than_new_pods(env, &["data-one-2"], FRESH_DISK_AGE).await?;
    pods.delete("one-2", &Default::default()).await?;
    wait_for("one-2 recreated and ready", Duration::from_secs(60), || {
        let pods = pods.clone();
        let first = first.clone();
        async move {
            Ok(pods
                .get_opt("one-2")
                .await?
                .filter(|p| p.metadata.uid != first && pod_ready(p))
                .map(|_| ()))
        }
    })
    .await?;
    // Every member must have been ready for the absorb window (10 s) first: so that two
    // and img are left alone for their own reasons, not for a member ready too recently.
    let members: Vec<String> = ["one", "two", "img"]
        .iter()
        .flat_map(|f| (0..3).map(move |o| format!("{f}-{o}")))
        .collect();
    let members: Vec<&str> = members.iter().map(String::as_str).collect();
    wait_ready_for(env, &members, ABSORB_WINDOW, Duration::from_secs(60)).await?;
    let before = claims(env).await?;
    let t0 = std::time::Instant::now();
    set_stub_mode(
        &pods.get("one-2").await?,
        serde_json::json!({"health": "unhealthy"}),
    )
    .await?;
    set_stub_mode(
        &pods.get("two-0").await?,
        serde_json::json!({"health": "unhealthy"}),
    )
    .await?;
    set_stub_mode(
        &pods.get("two-2").await?,
        serde_json::json!({"health": "unhealthy"}),
    )
    .await?;
    env.sim
        .control
        .set_pod_fault(&env.ns, "img-1", FaultKind::ImagePull)
        .await?;
    // The stub's process restarts under the fault; kubesim keeps the Pod.
    let ev = wait_event(env, "one", "MemberReplaced", Duration::from_secs(90)).await?;
    eprintln!(
        "[down-member] one-2 replaced after {:?}: {ev}",
        t0.elapsed()
    );
    let one2_claim = before.get("data-one-2").context("claim")?.0.clone();
    wait_for(
        "data-one-2 replaced and one-2 ready",
        Duration::from_secs(90),
        || async {
            let c = claims(env).await?;
            let fresh = c
                .get("data-one-2")
                .is_some_and(|(uid, phase, del)| *uid != one2_claim && phase == "Bound" && !del);
            let ready = pods.get_opt("one-2").await?.is_some_and(|p| pod_ready(&p));
            Ok((fresh && ready).then_some(()))
        },
    )
    .await?;
    // Let the others sit well past their delay (20 s) and the absorb window; a disk
    // replacement of two or img fails the check at once.
    holds_for(
        "no other disk replaced",
        Duration::from_secs(35).saturating_sub(t0.elapsed()),
        || async { others_left_alone(env, &before).await.map(|()| true) },
    )
    .await?;
    others_left_alone(env, &before).await?;
    let (_, reason, msg) = condition(env, "img", "Ready")
        .await?
        .context("no condition")?;
    eprintln!(
        "[down-member] two (two members down) and img (image pull) left alone for {:?}; img reports {reason}: {msg}",
        t0.elapsed()
    );
    let st = env
        .api::<celld_gen::api::CelldFleet>()
        .get("img")
        .await?
        .status
        .context("status")?;
    let m1 = st
        .member_states
        .iter()
        .find(|m| m.name == "img-1")
        .context("img-1 state")?;
    ensure!(m1.state == "WaitingForImage", "img-1 state {m1:?}");
    let two = env
        .api::<celld_gen::api::CelldFleet>()
        .get("two")
        .await?
        .status
        .context("status")?;
    eprintln!(
        "[down-member] two: {:?}",
        two.member_states
            .iter()
            .map(|m| (m.name.clone(), m.state.clone()))
            .collect::<Vec<_>>()
    );
    let _ = pods.get("two-0").await?.name_any();
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_stuck_on_a_ready_node_is_reported_not_force_deleted() -> Result<()> {
    let Some(mut env) = Env::start("stuck-term").await? else {
        return Ok(());
    };
    let r = stuck_terminating(&mut env).await;
    env.finish(r).await
}

async fn stuck_terminating(env: &mut Env) -> Result<()> {
    let f = env.persistent(&env.ns, "stk", 3);
    env.apply_fleet(&f.yaml()).await?;
    env.healer(env.healer_options())?;
    wait_ready_members(env, &f.identity, 3, Duration::from_secs(120)).await?;
    wait_condition(env, "stk", "Ready", "True", None, Duration::from_secs(60)).await?;
    let before = claims(env).await?;
    let rule = env
        .sim
        .control
        .add_fault(Some(&env.ns), "stk-1", FaultKind::HangTermination)
        .await?;
    let pods: Api<Pod> = env.api();
    let victim = pods.get("stk-1").await?;
    let uid = victim.metadata.uid.clone().unwrap_or_default();
    let node = node_of(&victim);
    // Someone deletes the member with a short grace; its kubelet never finishes it.
    pods.delete(
        "stk-1",
        &DeleteParams {
            grace_period_seconds: Some(2),
            ..DeleteParams::default()
        },
    )
    .await?;
    let (_, _, msg) = wait_condition(
        env,
        "stk",
        "Blocked",
        "True",
        Some("MemberStuckTerminating"),
        Duration::from_secs(60),
    )
    .await?;
    eprintln!("[stuck-term] Blocked/MemberStuckTerminating: {msg}");
    ensure!(
        msg.contains("stk-1") && msg.contains(&format!("{node}, whose kubelet is up")),
        "{msg}"
    );
    let ev = wait_event(
        env,
        "stk",
        "MemberStuckTerminating",
        Duration::from_secs(10),
    )
    .await?;
    eprintln!("[stuck-term] event: {}", ev.note);
    // Well past grace and margin: still there, the same Pod, its node Ready.
    holds_for(
        "the stuck Pod is not force-deleted",
        Duration::from_secs(10),
        || async {
            let p = pods.get_opt("stk-1").await?;
            Ok(p.is_some_and(|p| p.metadata.uid.as_deref() == Some(uid.as_str())))
        },
    )
    .await?;
    let n = Api::<Node>::all(env.client.clone()).get(&node).await?;
    let ready = n
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status);
    ensure!(
        ready.as_deref() == Some("True"),
        "node {node} Ready={ready:?}"
    );
    let evs = fleet_events(&env.client, &env.ns, Some("stk")).await?;
    ensure!(
        !evs.iter().any(|e| e.action == "ForceDeletePod"),
        "force-deleted: {evs:?}"
    );
    // The node lets go: the member returns on its own disk and the fleet unblocks.
    let id = rule.rule.context("the fault rule's id")?.id;
    env.sim.control.delete_fault(id).await?;
    wait_for(
        "stk-1 replaced by its StatefulSet",
        Duration::from_secs(90),
        || {
            let pods = pods.clone();
            let uid = uid.clone();
            async move {
                Ok(pods
                    .get_opt("stk-1")
                    .await?
                    .filter(|p| p.metadata.uid.as_deref() != Some(uid.as_str()))
                    .map(|_| ()))
            }
        },
    )
    .await?;
    wait_ready_members(env, &f.identity, 3, Duration::from_secs(90)).await?;
    wait_condition(
        env,
        "stk",
        "Blocked",
        "False",
        None,
        Duration::from_secs(60),
    )
    .await?;
    let after = claims(env).await?;
    ensure!(
        uids(&before) == uids(&after),
        "a claim changed: {before:?} -> {after:?}"
    );
    eprintln!("[stuck-term] released by its node: back on its own disk, unblocked");
    Ok(())
}
