//! Healer end-to-end, scenario 9 of issue 5: two healer replicas on one Lease. One
//! leads and writes; the other keeps its caches warm, reports ready and writes nothing.
//! When the leader is SIGKILLed the standby takes over once the lease expires; when a
//! leader is stopped with SIGTERM it releases the lease and the standby takes over at once.
//! A replica that leads again has forgotten what it observed in its earlier term.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use celld_e2e::*;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::jiff::SignedDuration;
use kube::Api;

async fn leader_of(env: &Env, a: usize, b: usize) -> Result<Option<(usize, usize)>> {
    let la = env.h(a).metric("celld_healer_leader").await.unwrap_or(0.0);
    let lb = env.h(b).metric("celld_healer_leader").await.unwrap_or(0.0);
    Ok(match (la == 1.0, lb == 1.0) {
        (true, false) => Some((a, b)),
        (false, true) => Some((b, a)),
        _ => None,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_one_leader() -> Result<()> {
    let Some(mut env) = Env::start("ha").await? else {
        return Ok(());
    };
    let r = ha(&mut env).await;
    env.finish(r).await
}

async fn ha(env: &mut Env) -> Result<()> {
    let mut f = env.persistent(&env.ns, "alpha", 3);
    env.apply_fleet(&f.yaml()).await?;
    let mut oa = env.healer_options();
    oa.identity = "healer-a".into();
    let mut ob = env.healer_options();
    ob.identity = "healer-b".into();
    let a = env.healer(oa.clone())?;
    let b = env.healer(ob.clone())?;
    wait_ready_members(env, &f.identity, 3, Duration::from_secs(120)).await?;
    wait_condition(env, "alpha", "Ready", "True", None, Duration::from_secs(60)).await?;
    let deadline = Instant::now() + Duration::from_secs(20);
    let (leader, standby) = loop {
        if let Some(p) = leader_of(env, a, b).await? {
            break p;
        }
        ensure!(Instant::now() < deadline, "no single leader");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let lid = env.h(leader).identity.clone();
    let sid = env.h(standby).identity.clone();
    let standby_writes = env.h(standby).metric("celld_healer_actions_total").await?;
    let leader_writes = env.h(leader).metric("celld_healer_actions_total").await?;
    ensure!(
        standby_writes == 0.0,
        "the standby wrote {standby_writes} times"
    );
    ensure!(leader_writes > 0.0);
    ensure!(
        env.h(standby).http_status("/readyz").await? == 200,
        "standby not ready"
    );
    ensure!(
        env.h(leader).http_status("/readyz").await? == 200,
        "leader not ready"
    );
    let standby_status_writes = env
        .h(standby)
        .metric("celld_healer_api_requests_total{verb=\"patch\"")
        .await?
        + env
            .h(standby)
            .metric("celld_healer_api_requests_total{verb=\"create\",resource=\"events\"")
            .await?;
    ensure!(
        standby_status_writes == 0.0,
        "the standby patched or created {standby_status_writes} objects"
    );
    eprintln!("[ha] {lid} leads ({leader_writes} writes), {sid} stands by ready with 0 writes");

    // The leader dies without releasing the lease.
    env.h_mut(leader).kill();
    let t0 = Instant::now();
    f.members = 4;
    env.apply_fleet(&f.yaml()).await?;
    wait_for("the standby to lead", Duration::from_secs(30), || async {
        Ok((env
            .h(standby)
            .metric("celld_healer_leader")
            .await
            .unwrap_or(0.0)
            == 1.0)
            .then_some(()))
    })
    .await?;
    let took_over = t0.elapsed();
    wait_ready_members(env, &f.identity, 4, Duration::from_secs(60)).await?;
    let grown = t0.elapsed();
    ensure!(
        env.h(standby)
            .metric("celld_healer_actions_total{kind=\"SetReplicas\"")
            .await?
            >= 1.0
    );
    eprintln!(
        "[ha] {lid} SIGKILLed: {sid} took over after {took_over:?} (lease 6s) and grew the fleet to 4 ({grown:?})"
    );
    ensure!(
        took_over < Duration::from_secs(15),
        "takeover took {took_over:?}"
    );

    // The old leader comes back: it stands by. Then the new leader stops cleanly and hands
    // over at once.
    let mut ob = oa.clone();
    ob.identity = lid.clone();
    let back = env.healer(ob)?;
    wait_for(
        "the restarted replica ready",
        Duration::from_secs(30),
        || async {
            Ok((env.h(back).http_status("/readyz").await.unwrap_or(0) == 200).then_some(()))
        },
    )
    .await?;
    ensure!(
        env.h(back).metric("celld_healer_leader").await? == 0.0,
        "two leaders"
    );
    let t1 = Instant::now();
    let st = env.h_mut(standby).terminate();
    ensure!(
        st.is_some_and(|s| s.success()),
        "SIGTERM exit status {st:?}"
    );
    wait_for(
        "the restarted replica to lead",
        Duration::from_secs(15),
        || async {
            Ok((env
                .h(back)
                .metric("celld_healer_leader")
                .await
                .unwrap_or(0.0)
                == 1.0)
                .then_some(()))
        },
    )
    .await?;
    let handed = t1.elapsed();
    eprintln!(
        "[ha] {sid} stopped with SIGTERM (exit 0, lease released): {lid} leads again after {handed:?}"
    );
    ensure!(
        handed < Duration::from_secs(5),
        "handover after SIGTERM took {handed:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_leading_again_forgets_what_it_saw() -> Result<()> {
    let Some(mut env) = Env::start("ha-forget").await? else {
        return Ok(());
    };
    let r = lead_again(&mut env).await;
    env.finish(r).await
}

/// The Lost window of this test: long enough that the steps in between fit in it.
const LOST_WINDOW: SignedDuration = SignedDuration::from_secs(40);

/// Rule T2 across leadership changes: replica A sees a claim Lost, is frozen (SIGSTOP)
/// while B leads and the claim comes back, then leads again (SIGCONT, B gone) just as the
/// claim is Lost a second time. What A saw before must not count: the disk is replaced
/// only a whole Lost window after the second loss.
async fn lead_again(env: &mut Env) -> Result<()> {
    let f = env.persistent(&env.ns, "alpha", 3);
    env.apply_fleet(&f.yaml()).await?;
    let opts = |id: &str| {
        let mut o = env.healer_options();
        o.identity = id.into();
        o.extra = vec![
            "--lost-claim-confirmation".into(),
            format!("{}s", LOST_WINDOW.as_secs()),
        ];
        o
    };
    let (oa, ob) = (opts("healer-a"), opts("healer-b"));
    let a = env.healer(oa)?;
    wait_ready_members(env, &f.identity, 3, Duration::from_secs(120)).await?;
    wait_condition(env, "alpha", "Ready", "True", None, Duration::from_secs(60)).await?;
    wait_for("healer-a to lead", Duration::from_secs(30), || async {
        Ok((env.h(a).metric("celld_healer_leader").await.unwrap_or(0.0) == 1.0).then_some(()))
    })
    .await?;
    let b = env.healer(ob)?;
    let pvs: Api<PersistentVolume> = Api::all(env.client.clone());
    let claim: Api<PersistentVolumeClaim> = env.api();
    let pv_name = claim
        .get("data-alpha-1")
        .await?
        .spec
        .and_then(|s| s.volume_name)
        .context("data-alpha-1 is not bound")?;
    let saved = pvs.get(&pv_name).await?;
    let before = claim.get("data-alpha-1").await?.metadata.uid;

    // A sees the claim Lost and starts its window.
    let first_loss = server_now(env).await?;
    env.sim
        .control
        .delete_claim_volume(&env.ns, "data-alpha-1")
        .await?;
    wait_for(
        "healer-a to report the lost disk",
        Duration::from_secs(30),
        || async {
            Ok(condition(env, "alpha", "Ready")
                .await?
                .filter(|(_, _, m)| m.contains("disk is reported lost"))
                .map(|_| ()))
        },
    )
    .await?;
    // A freezes; B leads; the volume comes back and B sees the claim Bound.
    env.h(a).pause();
    wait_for("healer-b to lead", Duration::from_secs(60), || async {
        Ok((env.h(b).metric("celld_healer_leader").await.unwrap_or(0.0) == 1.0).then_some(()))
    })
    .await?;
    let mut back = saved.clone();
    back.metadata = kube::api::ObjectMeta {
        name: saved.metadata.name.clone(),
        labels: saved.metadata.labels.clone(),
        annotations: saved.metadata.annotations.clone(),
        ..Default::default()
    };
    back.status = None;
    wait_for("the old volume gone", Duration::from_secs(30), || async {
        Ok(pvs.get_opt(&pv_name).await?.is_none().then_some(()))
    })
    .await?;
    pvs.create(&Default::default(), &back).await?;
    wait_for(
        "data-alpha-1 Bound again",
        Duration::from_secs(60),
        || async {
            Ok(claim
                .get("data-alpha-1")
                .await?
                .status
                .and_then(|s| s.phase)
                .filter(|p| p == "Bound")
                .map(|_| ()))
        },
    )
    .await?;
    wait_condition(env, "alpha", "Ready", "True", None, Duration::from_secs(60)).await?;
    // B goes; A comes back after the first loss is older than the window, and the
    // volume is lost again.
    env.h_mut(b).kill();
    wait_server_time(
        env,
        first_loss + LOST_WINDOW + SignedDuration::from_secs(5),
        Duration::from_secs(90),
    )
    .await?;
    env.h(a).resume();
    let second_loss = server_now(env).await?;
    env.sim
        .control
        .delete_claim_volume(&env.ns, "data-alpha-1")
        .await?;
    wait_for(
        "healer-a to lead again",
        Duration::from_secs(30),
        || async {
            Ok((env.h(a).metric("celld_healer_leader").await.unwrap_or(0.0) == 1.0).then_some(()))
        },
    )
    .await?;
    let pods: Api<Pod> = env.api();
    let requested = wait_for("alpha-1's disk handoff", Duration::from_secs(120), || {
        let pods = pods.clone();
        async move {
            Ok(pods.get_opt("alpha-1").await?.and_then(|p| {
                let at = p.metadata.deletion_timestamp.as_ref()?.0;
                let grace = p.metadata.deletion_grace_period_seconds.unwrap_or(0);
                at.checked_sub(SignedDuration::from_secs(grace)).ok()
            }))
        }
    })
    .await?;
    let after = requested.duration_since(second_loss);
    eprintln!(
        "[ha-forget] lost at {first_loss}, back, lost again at {second_loss}; the handoff came {after:?} after the second loss"
    );
    ensure!(
        after >= LOST_WINDOW,
        "healer-a replaced the disk {after:?} after the second loss, inside the Lost window: it counted what it saw before it lost the lease"
    );
    ensure!(
        claim.get("data-alpha-1").await?.metadata.uid == before,
        "the claim changed before the handoff"
    );
    Ok(())
}

/// Two installs serving one namespace: only the one holding the namespace's claim acts
/// there; the other reports the conflict, writes nothing, and takes the namespace over
/// only once the holder stopped renewing the claim for its whole duration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_install_serving_the_namespace_stays_out() -> Result<()> {
    let Some(mut env) = Env::start("claims").await? else {
        return Ok(());
    };
    let r = second_install(&mut env).await;
    env.finish(r).await
}

/// Requests of healer `h` that write an object (its Leases and its start-up permission
/// review, which stores nothing, aside).
async fn writes_but_leases(env: &Env, h: usize) -> Result<BTreeMap<(String, String), f64>> {
    let text = env.h(h).metrics_text().await?;
    Ok(api_requests(&text)
        .into_iter()
        .filter(|((verb, resource), _)| {
            !matches!(verb.as_str(), "get" | "list" | "watch")
                && !matches!(resource.as_str(), "leases" | "selfsubjectrulesreviews")
        })
        .collect())
}

/// The gauge of namespaces held (the trailing space keeps `..._claimed_elsewhere` out of
/// the prefix match).
const CLAIMED: &str = "celld_healer_namespaces_claimed ";

async fn second_install(env: &mut Env) -> Result<()> {
    let mut f = env.persistent(&env.ns, "alpha", 3);
    env.apply_fleet(&f.yaml()).await?;
    let oa = env.healer_options();
    let a = env.healer(oa.clone())?;
    wait_ready_members(env, &f.identity, 3, Duration::from_secs(120)).await?;
    wait_condition(env, "alpha", "Ready", "True", None, Duration::from_secs(60)).await?;

    // A second install (its own Lease, so its own claim holder) serving the same
    // namespace: it leads its install, finds the claim held, and stays out.
    let mut ob = env.healer_options();
    ob.lease_name = format!("{}-second", oa.lease_name);
    ob.identity = "second-install".into();
    let b = env.healer(ob)?;
    wait_for(
        "the second install to report the claim held elsewhere",
        Duration::from_secs(30),
        || async {
            Ok((env
                .h(b)
                .metric("celld_healer_namespaces_claimed_elsewhere")
                .await
                .unwrap_or(0.0)
                == 1.0)
                .then_some(()))
        },
    )
    .await?;
    ensure!(env.h(b).metric("celld_healer_leader").await? == 1.0);
    ensure!(env.h(a).metric(CLAIMED).await? == 1.0);
    let ev = wait_event(
        env,
        "alpha",
        "NamespaceClaimedElsewhere",
        Duration::from_secs(10),
    )
    .await?;
    ensure!(
        ev.type_ == "Warning" && ev.note.contains(&oa.lease_name),
        "{ev:?}"
    );

    // A change from Git: the holder grows the fleet, the second install writes nothing.
    f.members = 4;
    env.apply_fleet(&f.yaml()).await?;
    wait_ready_members(env, &f.identity, 4, Duration::from_secs(90)).await?;
    wait_condition(env, "alpha", "Ready", "True", None, Duration::from_secs(60)).await?;
    let b_writes = writes_but_leases(env, b).await?;
    // Its only writes are two Events: the conflict's, and at start the report of the
    // cluster-wide role every test healer runs with (`ExcessPermissions`).
    let events = ("create".to_string(), "events".to_string());
    ensure!(
        b_writes.keys().all(|k| *k == events)
            && b_writes.get(&events).copied().unwrap_or(0.0) <= 2.0
            && env.h(b).metric("celld_healer_actions_total").await? == 0.0,
        "the second install wrote in a namespace it does not hold: {b_writes:?}"
    );
    eprintln!("[claims] the second install stayed out while the first held the namespace");

    // The holder dies without a word: the second install takes the namespace over once
    // the claim (4 x the 6 s lease, but at least 45 s) went unrenewed, and acts.
    env.h_mut(a).kill();
    let t0 = Instant::now();
    f.members = 5;
    env.apply_fleet(&f.yaml()).await?;
    wait_for(
        "the second install to claim the namespace",
        Duration::from_secs(90),
        || async { Ok((env.h(b).metric(CLAIMED).await.unwrap_or(0.0) == 1.0).then_some(())) },
    )
    .await?;
    let took_over = t0.elapsed();
    wait_ready_members(env, &f.identity, 5, Duration::from_secs(90)).await?;
    ensure!(
        env.h(b)
            .metric("celld_healer_actions_total{kind=\"SetReplicas\"")
            .await?
            >= 1.0
    );
    ensure!(
        env.h(b)
            .metric("celld_healer_namespaces_claimed_elsewhere")
            .await?
            == 0.0
    );
    eprintln!(
        "[claims] the first install killed: the second claimed the namespace after {took_over:?} and grew the fleet"
    );
    // The claim was renewed at most a third of its 45 s before the kill, and is taken over
    // only after 45 s without a change as the second install saw it.
    ensure!(
        took_over >= Duration::from_secs(30),
        "taken over after only {took_over:?}: before the claim expired"
    );
    Ok(())
}
