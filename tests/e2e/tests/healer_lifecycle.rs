//! Healer end-to-end, scenarios 6, 7, 10 and 11 of issue 5.
//!
//! 6. Contraction 5 -> 3, one member per rolled-out step, claims kept; growth back to 6
//!    reattaches the kept claims first (3 -> 5), then a later run adds a fresh one.
//! 7. A foreign claim at a member's name: StorageIdentityConflict, no growth, the claim
//!    untouched; once it is gone, growth proceeds.
//! 10. Deleting the CelldFleet: the workload drains first, then every claim of the fleet
//!     (a removed member's too) goes, the fleet is released, the reservation stays, a
//!     claim that is not the fleet's stays.
//! 11. A Service edited by hand: InfrastructureBlocked, no lifecycle action until Git
//!     restores it.
//!
//! And rule D4 with F1 for orphans: a member orphaned by `--cascade=orphan`, deleted
//! while its node is down, is force-deleted at the deadline, so the fleet's deletion
//! finishes instead of waiting forever.
//!
//! And rules W5 and W6: a claim retention policy edited by hand to Delete holds a
//! contraction from Git, the owners it gives the claims are reported, and nothing is
//! deleted until Git restores Retain.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use celld_e2e::*;
use celld_gen::api::{CelldBucketReservation, CelldFleet};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Service};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

fn replica_writes(evs: &[FleetEvent]) -> Vec<String> {
    evs.iter()
        .filter(|e| e.action == "SetReplicas")
        .map(|e| {
            e.note
                .split(": spec.replicas ")
                .nth(1)
                .and_then(|s| s.split('.').next())
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contraction_then_growth_back() -> Result<()> {
    let Some(mut env) = Env::start("contract-grow").await? else {
        return Ok(());
    };
    let r = contract_grow(&mut env).await;
    env.finish(r).await
}

async fn contract_grow(env: &mut Env) -> Result<()> {
    let mut f = env.persistent(&env.ns, "gamma", 5);
    env.apply_fleet(&f.yaml()).await?;
    env.healer(env.healer_options())?;
    wait_ready_members(env, &f.identity, 5, Duration::from_secs(120)).await?;
    wait_condition(env, "gamma", "Ready", "True", None, Duration::from_secs(60)).await?;
    let before = claims(env).await?;

    // 5 -> 3.
    f.members = 3;
    env.apply_fleet(&f.yaml()).await?;
    let pods: Api<Pod> = env.api();
    let t0 = Instant::now();
    let gone4 = wait_for("gamma-4 gone", Duration::from_secs(90), || {
        let pods = pods.clone();
        async move {
            Ok(pods
                .get_opt("gamma-4")
                .await?
                .is_none()
                .then(k8s_openapi::jiff::Timestamp::now))
        }
    })
    .await?;
    wait_for("StatefulSet at 3", Duration::from_secs(90), || async {
        Ok((replicas(env, "gamma").await? == Some(3)).then_some(()))
    })
    .await?;
    wait_ready_members(env, &f.identity, 3, Duration::from_secs(90)).await?;
    wait_condition(env, "gamma", "Ready", "True", None, Duration::from_secs(60)).await?;
    let evs = wait_for("the 4 -> 3 Event", Duration::from_secs(10), || async {
        let evs = fleet_events(&env.client, &env.ns, Some("gamma")).await?;
        Ok(replica_writes(&evs)
            .contains(&"4 -> 3".to_string())
            .then_some(evs))
    })
    .await?;
    let writes = replica_writes(&evs);
    eprintln!(
        "[contract-grow] 5 -> 3 in {:?}: replica writes {writes:?}",
        t0.elapsed()
    );
    ensure!(
        writes.ends_with(&["5 -> 4".to_string(), "4 -> 3".to_string()]),
        "writes {writes:?}"
    );
    let second = evs
        .iter()
        .rfind(|e| e.action == "SetReplicas")
        .and_then(|e| e.time)
        .context("no time")?;
    ensure!(
        second >= gone4,
        "4 -> 3 written at {second} before gamma-4 was gone ({gone4})"
    );
    let mid = claims(env).await?;
    for n in ["data-gamma-3", "data-gamma-4"] {
        ensure!(
            mid.get(n).map(|c| &c.0) == before.get(n).map(|c| &c.0),
            "{n} not kept"
        );
    }
    eprintln!(
        "[contract-grow] one member per rolled-out step (4 -> 3 written after gamma-4 was gone at {gone4}); claims 3 and 4 kept"
    );

    // 3 -> 6: the kept claims first (3 -> 5), then a fresh one (5 -> 6).
    f.members = 6;
    env.apply_fleet(&f.yaml()).await?;
    let t1 = Instant::now();
    wait_ready_members(env, &f.identity, 6, Duration::from_secs(120)).await?;
    let evs = wait_for("the 5 -> 6 Event", Duration::from_secs(10), || async {
        let evs = fleet_events(&env.client, &env.ns, Some("gamma")).await?;
        Ok(replica_writes(&evs)
            .contains(&"5 -> 6".to_string())
            .then_some(evs))
    })
    .await?;
    let writes = replica_writes(&evs);
    eprintln!(
        "[contract-grow] 3 -> 6 in {:?}: replica writes {writes:?}",
        t1.elapsed()
    );
    ensure!(
        writes.ends_with(&["3 -> 5".to_string(), "5 -> 6".to_string()]),
        "growth runs {writes:?}"
    );
    let after = claims(env).await?;
    for n in [
        "data-gamma-0",
        "data-gamma-1",
        "data-gamma-2",
        "data-gamma-3",
        "data-gamma-4",
    ] {
        ensure!(after[n].0 == before[n].0, "{n} changed uid");
    }
    ensure!(after.contains_key("data-gamma-5") && after["data-gamma-5"].1 == "Bound");
    for e in evs.iter().filter(|e| e.action == "SetReplicas") {
        eprintln!("[contract-grow]   {e}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_claim_blocks_growth() -> Result<()> {
    let Some(mut env) = Env::start("foreign-claim").await? else {
        return Ok(());
    };
    let r = foreign_claim(&mut env).await;
    env.finish(r).await
}

async fn foreign_claim(env: &mut Env) -> Result<()> {
    let claims_api: Api<PersistentVolumeClaim> = env.api();
    let other = new_identity();
    let make = |name: &str| -> Result<PersistentVolumeClaim> {
        Ok(serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": env.ns,
                         "labels": {"fleet.celld.dev/identity": other}},
            "spec": {"accessModes": ["ReadWriteOncePod"], "storageClassName": STORAGE_CLASS,
                     "resources": {"requests": {"storage": "1Gi"}}},
        }))?)
    };
    // Another fleet's disks at two of our member names, ordinal 0 included: before the
    // start-at-zero admission policy, the API default of 1 replica started member 0 on
    // such a disk before the healer could look.
    let foreign = claims_api
        .create(&PostParams::default(), &make("data-delta-2")?)
        .await?;
    let foreign0 = claims_api
        .create(&PostParams::default(), &make("data-delta-0")?)
        .await?;
    let f = env.persistent(&env.ns, "delta", 3);
    env.apply_fleet(&f.yaml()).await?;
    env.healer(env.healer_options())?;
    let (_, _, msg) = wait_condition(
        env,
        "delta",
        "Blocked",
        "True",
        Some("StorageIdentityConflict"),
        Duration::from_secs(60),
    )
    .await?;
    eprintln!("[foreign-claim] Blocked/StorageIdentityConflict: {msg}");
    holds_for(
        "no growth, and no member on the foreign disk at ordinal 0",
        Duration::from_secs(8),
        || async {
            let pods: Api<Pod> = env.api();
            let mounted = pods.list(&Default::default()).await?.items.iter().any(|p| {
                p.spec
                    .iter()
                    .flat_map(|s| s.volumes.iter().flatten())
                    .any(|v| {
                        v.persistent_volume_claim
                            .as_ref()
                            .is_some_and(|c| c.claim_name == "data-delta-0")
                    })
            });
            Ok(replicas(env, "delta").await? == Some(0) && !mounted)
        },
    )
    .await?;
    for (name, uid) in [
        ("data-delta-2", &foreign.metadata.uid),
        ("data-delta-0", &foreign0.metadata.uid),
    ] {
        let c = claims_api.get(name).await?;
        ensure!(&c.metadata.uid == uid && c.metadata.deletion_timestamp.is_none());
        ensure!(
            c.status.and_then(|s| s.phase).as_deref() != Some("Bound"),
            "{name} was bound: a member used it"
        );
    }
    let ev = wait_event(
        env,
        "delta",
        "StorageIdentityConflict",
        Duration::from_secs(5),
    )
    .await?;
    eprintln!("[foreign-claim] replicas held at 0 and the claims untouched; Event: {ev}");
    // Once the other fleet's claim is gone, growth proceeds. It is a fleet disk, so the
    // disk-protection policy wants the operator's mark first.
    for name in ["data-delta-2", "data-delta-0"] {
        allow_claim_deletion(&claims_api, name).await?;
        claims_api.delete(name, &DeleteParams::default()).await?;
    }
    wait_ready_members(env, &f.identity, 3, Duration::from_secs(90)).await?;
    wait_condition(
        env,
        "delta",
        "Blocked",
        "False",
        None,
        Duration::from_secs(30),
    )
    .await?;
    eprintln!("[foreign-claim] after the foreign claim was removed the fleet grew to 3");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_deletion_in_order() -> Result<()> {
    let Some(mut env) = Env::start("deletion").await? else {
        return Ok(());
    };
    let r = deletion(&mut env).await;
    env.finish(r).await
}

async fn deletion(env: &mut Env) -> Result<()> {
    // Deleted on purpose: protection off in Git (the admission policy refuses otherwise).
    let mut f = env.persistent(&env.ns, "omega", 4).protection(false);
    let fleet = env.apply_fleet(&f.yaml()).await?;
    env.healer(env.healer_options())?;
    wait_ready_members(env, &f.identity, 4, Duration::from_secs(120)).await?;
    // A removed member keeps its claim.
    f.members = 3;
    env.apply_fleet(&f.yaml()).await?;
    wait_for("omega at 3", Duration::from_secs(60), || async {
        Ok((replicas(env, "omega").await? == Some(3)).then_some(()))
    })
    .await?;
    wait_ready_members(env, &f.identity, 3, Duration::from_secs(60)).await?;
    let claims_api: Api<PersistentVolumeClaim> = env.api();
    // Not the fleet's: never touched.
    let other: PersistentVolumeClaim = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "unrelated", "namespace": env.ns},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": STORAGE_CLASS,
                 "resources": {"requests": {"storage": "1Gi"}}},
    }))?;
    claims_api.create(&PostParams::default(), &other).await?;
    let before = claims(env).await?;
    ensure!(
        before.contains_key("data-omega-3"),
        "the removed member's claim is gone: {before:?}"
    );

    let t0 = Instant::now();
    env.api::<CelldFleet>()
        .delete("omega", &DeleteParams::default())
        .await?;
    // Track when the last member Pod went and when the first claim started deleting.
    let pods: Api<Pod> = env.api();
    let mut pods_gone: Option<Instant> = None;
    let mut first_claim_delete: Option<Instant> = None;
    let mut pods_at_first_claim_delete = None;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        ensure!(Instant::now() < deadline, "fleet deletion did not finish");
        let n_pods = member_pods(env, &f.identity).await?.len();
        if n_pods == 0 && pods_gone.is_none() {
            pods_gone = Some(Instant::now());
        }
        let c = claims(env).await?;
        let deleting = c
            .iter()
            .filter(|(k, _)| k.starts_with("data-omega-"))
            .any(|(_, v)| v.2)
            || [
                "data-omega-0",
                "data-omega-1",
                "data-omega-2",
                "data-omega-3",
            ]
            .iter()
            .any(|n| !c.contains_key(*n));
        if deleting && first_claim_delete.is_none() {
            first_claim_delete = Some(Instant::now());
            pods_at_first_claim_delete = Some(n_pods);
        }
        if env.api::<CelldFleet>().get_opt("omega").await?.is_none() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let _ = pods;
    ensure!(
        pods_at_first_claim_delete == Some(0),
        "a claim was deleted while {pods_at_first_claim_delete:?} member Pods remained"
    );
    ensure!(
        env.api::<StatefulSet>().get_opt("omega").await?.is_none(),
        "StatefulSet remains"
    );
    let after = claims(env).await?;
    for n in [
        "data-omega-0",
        "data-omega-1",
        "data-omega-2",
        "data-omega-3",
    ] {
        ensure!(after.get(n).is_none_or(|c| c.2), "{n} was not deleted");
    }
    ensure!(
        after.get("unrelated").map(|c| &c.0) == before.get("unrelated").map(|c| &c.0),
        "a claim that is not the fleet's was touched"
    );
    let res = celld_gen::api::reservation_name(&fleet.spec.storage.bucket, None);
    ensure!(
        Api::<CelldBucketReservation>::all(env.client.clone())
            .get_opt(&res)
            .await?
            .is_some(),
        "the reservation {res} is gone"
    );
    let evs = fleet_events(&env.client, &env.ns, Some("omega")).await?;
    let order: Vec<String> = evs
        .iter()
        .filter(|e| e.action != "Report" && e.time.is_some())
        .skip_while(|e| e.action != "DeleteWorkload")
        .map(|e| format!("{}({})", e.action, e.reason))
        .collect();
    eprintln!(
        "[deletion] done in {:?}; member Pods gone after {:?}, first claim deleted after {:?}; writes in order: {order:?}; reservation {res} kept; unrelated claim kept",
        t0.elapsed(),
        pods_gone.map(|t| t - t0),
        first_claim_delete.map(|t| t - t0)
    );
    ensure!(
        order
            .first()
            .is_some_and(|a| a.starts_with("DeleteWorkload"))
    );
    ensure!(
        order
            .last()
            .is_some_and(|a| a.starts_with("RemoveFleetFinalizer"))
    );
    ensure!(
        order
            .iter()
            .filter(|a| a.starts_with("DeleteClaim"))
            .count()
            == 4,
        "{order:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orphan_on_a_dead_node_does_not_hold_deletion() -> Result<()> {
    let Some(mut env) = Env::start("orphan-deletion").await? else {
        return Ok(());
    };
    let r = orphan_deletion(&mut env).await;
    env.finish(r).await
}

async fn orphan_deletion(env: &mut Env) -> Result<()> {
    let f = env.persistent(&env.ns, "orphan", 3).protection(false);
    env.apply_fleet(&f.yaml()).await?;
    env.healer(env.healer_options())?;
    wait_ready_members(env, &f.identity, 3, Duration::from_secs(120)).await?;
    // The workload deleted with --cascade=orphan: the members run on, nobody's Pods.
    env.api::<StatefulSet>()
        .delete("orphan", &DeleteParams::orphan())
        .await?;
    let pods: Api<Pod> = env.api();
    wait_for(
        "the garbage collector orphans every member",
        Duration::from_secs(60),
        || async {
            let gone = env.api::<StatefulSet>().get_opt("orphan").await?.is_none();
            let mut orphaned = 0;
            for n in ["orphan-0", "orphan-1", "orphan-2"] {
                let p = pods.get(n).await?;
                if p.metadata
                    .owner_references
                    .as_ref()
                    .is_none_or(|o| o.is_empty())
                {
                    orphaned += 1;
                }
            }
            Ok((gone && orphaned == 3).then_some(()))
        },
    )
    .await?;
    let victim = pods.get("orphan-1").await?;
    let node = node_of(&victim);
    env.sim.control.stop_node(&node).await?;
    // Someone deletes the orphans (the healer never deletes a running one itself):
    // the others' kubelets finish; orphan-1's node never will.
    for n in ["orphan-0", "orphan-1", "orphan-2"] {
        pods.delete(n, &DeleteParams::default()).await?;
    }
    env.api::<CelldFleet>()
        .delete("orphan", &DeleteParams::default())
        .await?;
    let deleting = pods
        .get("orphan-1")
        .await?
        .metadata
        .deletion_timestamp
        .context("orphan-1 is not terminating")?;
    let deadline = force_delete_deadline(deleting.0);
    let ev = wait_event(
        env,
        "orphan",
        "MemberForceDeleted",
        Duration::from_secs(180),
    )
    .await?;
    let at = ev.time.context("event without time")?;
    ensure!(
        ev.note.contains("orphan-1"),
        "the force delete named another Pod: {}",
        ev.note
    );
    ensure!(
        at.duration_since(deadline).as_secs_f64() >= 0.0,
        "orphan-1 was force-deleted at {at}, before its deadline {deadline}"
    );
    wait_for(
        "the fleet's deletion finishes",
        Duration::from_secs(120),
        || async {
            Ok(env
                .api::<CelldFleet>()
                .get_opt("orphan")
                .await?
                .is_none()
                .then_some(()))
        },
    )
    .await?;
    let left = claims(env).await?;
    for n in ["data-orphan-0", "data-orphan-1", "data-orphan-2"] {
        ensure!(left.get(n).is_none_or(|c| c.2), "{n} was not deleted");
    }
    eprintln!(
        "[orphan-deletion] orphan-1 force-deleted at {at} (deadline {deadline}); the deletion finished"
    );
    env.sim.control.start_node(&node).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edited_service_blocks_lifecycle() -> Result<()> {
    let Some(mut env) = Env::start("service-edit").await? else {
        return Ok(());
    };
    let r = service_edit(&mut env).await;
    env.finish(r).await
}

async fn service_edit(env: &mut Env) -> Result<()> {
    let mut f = env.persistent(&env.ns, "eps", 3);
    env.apply_fleet(&f.yaml()).await?;
    env.healer(env.healer_options())?;
    wait_ready_members(env, &f.identity, 3, Duration::from_secs(120)).await?;
    wait_condition(env, "eps", "Ready", "True", None, Duration::from_secs(60)).await?;
    // Someone edits the peer Service by hand.
    let svcs: Api<Service> = env.api();
    svcs.patch(
        "eps-peers",
        &PatchParams {
            field_manager: Some("kubectl-edit".into()),
            ..PatchParams::default()
        },
        &Patch::Merge(json!({"spec": {"publishNotReadyAddresses": false}})),
    )
    .await?;
    let svc = env.api::<Service>();
    svc.patch(
        "eps",
        &PatchParams {
            field_manager: Some("kubectl-edit".into()),
            ..PatchParams::default()
        },
        &Patch::Merge(json!({"spec": {"ports": [
            {"name": "application", "port": 8080, "targetPort": 9090, "protocol": "TCP"}
        ]}})),
    )
    .await?;
    let live = svcs.get("eps-peers").await?;
    eprintln!(
        "[service-edit] eps-peers edited: publishNotReadyAddresses={:?}",
        live.spec
            .as_ref()
            .and_then(|s| s.publish_not_ready_addresses)
    );
    let (_, _, msg) = wait_condition(
        env,
        "eps",
        "Blocked",
        "True",
        Some("InfrastructureBlocked"),
        Duration::from_secs(30),
    )
    .await?;
    eprintln!("[service-edit] Blocked/InfrastructureBlocked: {msg}");
    ensure!(
        msg.contains("publishNotReadyAddresses") && msg.contains("targetPort"),
        "{msg}"
    );
    // Git asks for a fourth member: nothing happens while blocked.
    f.members = 4;
    let fleet = load_fleet(&f.yaml())?;
    apply(&env.client, &rendered_objects(&fleet)?[1], ARGO, false).await?; // the CelldFleet only
    holds_for(
        "no growth while blocked",
        Duration::from_secs(8),
        || async { Ok(replicas(env, "eps").await? == Some(3)) },
    )
    .await?;
    eprintln!("[service-edit] spec.members 3 -> 4 in Git: replicas held at 3 while blocked");
    // The next Git sync restores the Service; the fleet unblocks and grows.
    apply_rendered(&env.client, &fleet, false).await?;
    wait_condition(
        env,
        "eps",
        "Blocked",
        "False",
        None,
        Duration::from_secs(30),
    )
    .await?;
    wait_ready_members(env, &f.identity, 4, Duration::from_secs(90)).await?;
    let evs = fleet_events(&env.client, &env.ns, Some("eps")).await?;
    let blocked: Vec<String> = evs
        .iter()
        .filter(|e| e.note.starts_with("Blocked") || e.note.starts_with("No longer blocked"))
        .map(|e| e.to_string())
        .collect();
    eprintln!(
        "[service-edit] restored by Git: unblocked and grew to 4; Blocked events: {blocked:#?}"
    );
    ensure!(
        blocked.len() >= 2,
        "expected a Blocked and an unblocked Event"
    );
    Ok(())
}

/// Rules W5 and W6 with the real StatefulSet controller and garbage collector: a hand
/// edit of the claim retention policy holds a contraction from Git (no claim deleted),
/// the owners the controller then adds to the claims are reported, and Git's restored
/// policy lets the contraction go on with the removed member's disk kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retention_policy_edited_to_delete_holds_contraction() -> Result<()> {
    let Some(mut env) = Env::start("retention").await? else {
        return Ok(());
    };
    let r = retention(&mut env).await;
    env.finish(r).await
}

async fn retention(env: &mut Env) -> Result<()> {
    let mut f = env.persistent(&env.ns, "ret", 4);
    env.apply_fleet(&f.yaml()).await?;
    env.healer(env.healer_options())?;
    wait_ready_members(env, &f.identity, 4, Duration::from_secs(120)).await?;
    wait_condition(env, "ret", "Ready", "True", None, Duration::from_secs(60)).await?;
    let before = claims(env).await?;
    let sets: Api<StatefulSet> = env.api();
    let edit = PatchParams {
        field_manager: Some("kubectl-edit".into()),
        ..PatchParams::default()
    };
    sets.patch(
        "ret",
        &edit,
        &Patch::Merge(
            json!({"spec": {"persistentVolumeClaimRetentionPolicy": {"whenScaled": "Delete"}}}),
        ),
    )
    .await?;
    // Git asks for three members.
    f.members = 3;
    let fleet = load_fleet(&f.yaml())?;
    apply(&env.client, &rendered_objects(&fleet)?[1], ARGO, false).await?; // the CelldFleet only
    let (_, _, msg) = wait_condition(
        env,
        "ret",
        "Blocked",
        "True",
        Some("LifecycleBlocked"),
        Duration::from_secs(60),
    )
    .await?;
    eprintln!("[retention] whenScaled: Delete, members 4 -> 3 in Git: {msg}");
    ensure!(
        msg.contains("persistentVolumeClaimRetentionPolicy whenScaled: Delete")
            && msg.contains("ret-3"),
        "{msg}"
    );
    holds_for(
        "no contraction while the policy deletes claims",
        Duration::from_secs(8),
        || async { Ok(replicas(env, "ret").await? == Some(4)) },
    )
    .await?;

    // whenDeleted: Delete too: the controller makes the set every claim's owner.
    sets.patch(
        "ret",
        &edit,
        &Patch::Merge(
            json!({"spec": {"persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Delete"}}}),
        ),
    )
    .await?;
    let msg = wait_for(
        "rule W6: the claims' new owner reported",
        Duration::from_secs(60),
        || async {
            Ok(condition(env, "ret", "Blocked")
                .await?
                .filter(|(s, r, m)| {
                    s == "True" && r == "LifecycleBlocked" && m.contains("owned by StatefulSet/ret")
                })
                .map(|c| c.2))
        },
    )
    .await?;
    eprintln!("[retention] whenDeleted: Delete: {msg}");
    ensure_claims_kept(
        &before,
        &claims(env).await?,
        &["data-ret-0", "data-ret-1", "data-ret-2", "data-ret-3"],
    )?;

    // The next Git sync restores Retain: the controller drops the owners, the healer
    // shrinks, and the removed member's disk stays.
    apply_rendered(&env.client, &fleet, false).await?;
    wait_for("StatefulSet at 3", Duration::from_secs(120), || async {
        Ok((replicas(env, "ret").await? == Some(3)).then_some(()))
    })
    .await?;
    wait_condition(
        env,
        "ret",
        "Blocked",
        "False",
        None,
        Duration::from_secs(60),
    )
    .await?;
    let pods: Api<Pod> = env.api();
    wait_for("ret-3 gone", Duration::from_secs(90), || {
        let pods = pods.clone();
        async move { Ok(pods.get_opt("ret-3").await?.is_none().then_some(())) }
    })
    .await?;
    let after = claims(env).await?;
    ensure_claims_kept(
        &before,
        &after,
        &["data-ret-0", "data-ret-1", "data-ret-2", "data-ret-3"],
    )?;
    let owners = env
        .api::<PersistentVolumeClaim>()
        .get("data-ret-3")
        .await?
        .metadata
        .owner_references
        .unwrap_or_default();
    ensure!(owners.is_empty(), "data-ret-3 still owned: {owners:?}");
    eprintln!("[retention] Retain restored by Git: shrunk to 3, data-ret-3 kept without owners");
    Ok(())
}

fn ensure_claims_kept(
    before: &std::collections::BTreeMap<String, (String, String, bool)>,
    now: &std::collections::BTreeMap<String, (String, String, bool)>,
    names: &[&str],
) -> Result<()> {
    for n in names {
        ensure!(
            now.get(*n).map(|c| &c.0) == before.get(*n).map(|c| &c.0),
            "{n} was not kept: before {:?}, now {:?}",
            before.get(*n),
            now.get(*n)
        );
    }
    Ok(())
}
