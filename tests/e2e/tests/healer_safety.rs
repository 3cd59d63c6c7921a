//! Healer end-to-end: the safety guards of "What is a fleet's own" and "Fresh facts
//! before destroying anything" (healer/README.md), on the real control plane.
//!
//! 1. D4 and D3 through the fresh read: a fleet deleted while its members are orphaned
//!    (StatefulSet deleted with `propagationPolicy: Orphan`) keeps every disk until the
//!    orphans are gone; a StatefulSet named like the fleet but without its identity label
//!    (invisible to the healer's watches, seen only by the fresh read before a claim
//!    delete) keeps every disk and `DeletionBlocked` until it is gone; then the deletion
//!    completes.
//! 2. D8 on a cluster without the fleet deletion-protection admission binding: a protected
//!    fleet's deletion is `DeletionProtected`, workload, disks and members stay; once
//!    protection is turned off the deletion runs in order.
//! 3. F1 on a Pod held by someone else's finalizer: one force delete, the Pod stays, the
//!    status names the finalizer, no further force delete; once released the member
//!    comes back on its own disk.
//! 4. What the fresh read costs during a disk handoff: requests by verb and resource,
//!    `celld_healer_fresh_reads_total`, no `get`; with
//!    `HEALER_LOG=info,kube=warn,kube_client=debug` also the time from the decision (the
//!    fresh read's first list) to the write, from the healer's own request log.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use celld_e2e::*;
use celld_gen::api::CelldFleet;
use k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicyBinding;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, PropagationPolicy};
use kube::{Api, ResourceExt};
use serde_json::json;

/// The binding (and policy) of the fleet deletion protection in the install bundle.
const FLEET_BINDING: &str = "celld-fleet-deletion-protection";
/// Members of the fleets of scenarios 1 and 2 (a fleet covers the three zones).
const MEMBERS: i32 = 3;
/// The same, as a count.
const N: usize = MEMBERS as usize;
/// Someone else's finalizer (scenario 3).
const FOREIGN_FINALIZER: &str = "example.com/hold";

/// The fleet's disks `data-<fleet>-<n>`: name -> (uid, phase, deleting).
async fn disks(env: &Env, fleet: &str) -> Result<BTreeMap<String, (String, String, bool)>> {
    let prefix = format!("data-{fleet}-");
    Ok(claims(env)
        .await?
        .into_iter()
        .filter(|(n, _)| n.starts_with(&prefix))
        .collect())
}

/// `celld_healer_actions_total` for one action kind (every outcome, or one).
async fn actions(env: &Env, h: usize, kind: &str, outcome: Option<&str>) -> Result<f64> {
    let prefix = match outcome {
        Some(o) => format!("celld_healer_actions_total{{kind=\"{kind}\",outcome=\"{o}\"}}"),
        None => format!("celld_healer_actions_total{{kind=\"{kind}\","),
    };
    // An empty sum is -0.0.
    Ok(env.h(h).metric(&prefix).await? + 0.0)
}

/// Writes recorded as Events on `fleet` (action, reason), oldest first, reports left out.
async fn writes(env: &Env, fleet: &str) -> Result<Vec<String>> {
    Ok(fleet_events(&env.client, &env.ns, Some(fleet))
        .await?
        .iter()
        .filter(|e| e.action != "Report" && e.time.is_some())
        .map(|e| format!("{}({})", e.action, e.reason))
        .collect())
}

/// Follows a fleet deletion until the CelldFleet is gone; asserts the order: no claim of
/// the fleet deleting while a member Pod or the workload remains. Returns the time to
/// the first claim delete and to the end.
async fn follow_deletion(
    env: &Env,
    fleet: &str,
    identity: &str,
    n_disks: usize,
    timeout: Duration,
) -> Result<(Option<Duration>, Duration)> {
    let t0 = Instant::now();
    let deadline = t0 + timeout;
    let sts: Api<StatefulSet> = env.api();
    let mut first_claim_delete = None;
    loop {
        ensure!(
            Instant::now() < deadline,
            "the deletion of {fleet} did not finish in {timeout:?}"
        );
        let pods_left = member_pods(env, identity).await?.len();
        let workload_left = sts.get_opt(fleet).await?.is_some();
        let d = disks(env, fleet).await?;
        let claim_deleting = d.len() < n_disks || d.values().any(|c| c.2);
        if claim_deleting && first_claim_delete.is_none() {
            first_claim_delete = Some(t0.elapsed());
            ensure!(
                pods_left == 0 && !workload_left,
                "a disk of {fleet} was deleted while {pods_left} member Pods remained (workload left: {workload_left})"
            );
        }
        if env.api::<CelldFleet>().get_opt(fleet).await?.is_none() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let d = disks(env, fleet).await?;
    ensure!(
        d.values().all(|c| c.2),
        "the CelldFleet {fleet} was released while disks remain: {d:?}"
    );
    Ok((first_claim_delete, t0.elapsed()))
}

// ---- 1. D4 (orphans) and D3 (an unlabelled namesake, seen only by the fresh read) ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphans_and_an_unlabelled_namesake_keep_the_disks() -> Result<()> {
    let Some(mut env) = Env::start("orphans").await? else {
        return Ok(());
    };
    let r = orphans(&mut env).await;
    env.finish(r).await
}

async fn orphans(env: &mut Env) -> Result<()> {
    let f = env.persistent(&env.ns, "orph", MEMBERS).protection(false);
    env.apply_fleet(&f.yaml()).await?;
    let h = env.healer(env.healer_options())?;
    wait_ready_members(env, &f.identity, N, Duration::from_secs(120)).await?;
    wait_condition(env, "orph", "Ready", "True", None, Duration::from_secs(60)).await?;
    let before = disks(env, "orph").await?;
    ensure!(
        before.len() == N && before.values().all(|c| c.1 == "Bound" && !c.2),
        "expected {N} Bound disks: {before:?}"
    );

    // The StatefulSet goes with its Pods orphaned (`kubectl delete --cascade=orphan`).
    let sts: Api<StatefulSet> = env.api();
    sts.delete(
        "orph",
        &DeleteParams {
            propagation_policy: Some(PropagationPolicy::Orphan),
            ..DeleteParams::default()
        },
    )
    .await?;
    wait_for("StatefulSet orph gone", Duration::from_secs(60), || async {
        Ok(sts.get_opt("orph").await?.is_none().then_some(()))
    })
    .await?;
    let orphaned = member_pods(env, &f.identity).await?;
    ensure!(
        orphaned.len() == N
            && orphaned.iter().all(|p| {
                p.metadata.deletion_timestamp.is_none()
                    && p.metadata
                        .owner_references
                        .as_ref()
                        .is_none_or(|o| o.iter().all(|r| r.controller != Some(true)))
            }),
        "expected {N} orphaned member Pods: {:?}",
        orphaned
            .iter()
            .map(|p| (p.name_any(), p.metadata.owner_references.clone()))
            .collect::<Vec<_>>()
    );

    // A StatefulSet named like the fleet, without its identity label: the healer's watch
    // never sees it. Its selector does not match the orphans (no adoption).
    let decoy: StatefulSet = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "orph", "namespace": env.ns, "labels": {"app": "not-a-fleet"}},
        "spec": {
            "replicas": 0,
            "serviceName": "not-a-fleet",
            "selector": {"matchLabels": {"app": "not-a-fleet"}},
            "template": {
                "metadata": {"labels": {"app": "not-a-fleet"}},
                "spec": {"containers": [{"name": "c", "image": "example.invalid/none:1"}]},
            },
        },
    }))?;
    let decoy = sts.create(&PostParams::default(), &decoy).await?;
    let decoy_uid = decoy.metadata.uid.clone().context("decoy uid")?;
    eprintln!(
        "[orphans] StatefulSet orph deleted with its {MEMBERS} Pods orphaned; an unlabelled StatefulSet orph ({decoy_uid}) made by hand"
    );

    // The fleet is deleted (protection off on purpose).
    env.api::<CelldFleet>()
        .delete("orph", &DeleteParams::default())
        .await?;
    let (_, _, msg) = wait_condition(
        env,
        "orph",
        "Blocked",
        "False",
        Some("Deleting"),
        Duration::from_secs(30),
    )
    .await?;
    eprintln!("[orphans] fleet deleted: Deleting: {msg}");
    ensure!(
        msg.contains(&format!("{MEMBERS} member Pods")),
        "D4 does not count the orphans: {msg}"
    );
    // Rule D4: the orphans may still write to their disks. It is D4 itself that waits
    // (not the namesake, which the fresh read would also see): the reason stays
    // `Deleting`, and no claim delete is even decided on the caches (no fresh read).
    let fresh_d4 = env.h(h).metric("celld_healer_fresh_reads_total").await?;
    holds_for(
        "every disk kept while the orphans run",
        Duration::from_secs(10),
        || async {
            let now = disks(env, "orph").await?;
            ensure!(
                now.len() == N && now.iter().all(|(n, c)| !c.2 && before[n].0 == c.0),
                "a disk was deleted while orphaned members ran: {now:?}"
            );
            ensure!(
                member_pods(env, &f.identity).await?.len() == N,
                "an orphaned member went"
            );
            let (_, reason, msg) = condition(env, "orph", "Blocked")
                .await?
                .context("no Blocked condition")?;
            ensure!(
                reason == "Deleting" && msg.contains(&format!("{MEMBERS} member Pods")),
                "not waiting on the orphans (rule D4): {reason}: {msg}"
            );
            let fresh = env.h(h).metric("celld_healer_fresh_reads_total").await?;
            ensure!(
                fresh == fresh_d4,
                "a destructive write was decided while the orphans ran ({fresh_d4} -> {fresh} fresh reads)"
            );
            Ok(true)
        },
    )
    .await?;
    eprintln!(
        "[orphans] 10 s with the {MEMBERS} orphans running: every disk kept, reason Deleting (D4), no fresh read (no claim delete decided)"
    );

    // The orphans go; the caches now justify a claim delete (D5), which the fresh read
    // must refuse: it sees the unlabelled StatefulSet (D3).
    let pods: Api<Pod> = env.api();
    for p in &orphaned {
        pods.delete(&p.name_any(), &DeleteParams::default()).await?;
    }
    wait_for("orphans gone", Duration::from_secs(60), || async {
        Ok(member_pods(env, &f.identity)
            .await?
            .is_empty()
            .then_some(()))
    })
    .await?;
    let t_orphans_gone = Instant::now();
    let (_, _, msg) = wait_condition(
        env,
        "orph",
        "Blocked",
        "True",
        Some("DeletionBlocked"),
        Duration::from_secs(30),
    )
    .await?;
    eprintln!(
        "[orphans] orphans deleted; {:?} later Blocked/DeletionBlocked: {msg}",
        t_orphans_gone.elapsed()
    );
    ensure!(msg.contains("StatefulSet orph"), "{msg}");
    // The block comes from the fresh read: the cached decision was a claim delete.
    env.h(h)
        .wait_log("not confirmed on a fresh read", Duration::from_secs(10))
        .await?;
    let line = env
        .h(h)
        .log_text()
        .lines()
        .find(|l| l.contains("not confirmed on a fresh read"))
        .map(str::to_string)
        .unwrap_or_default();
    ensure!(
        line.contains("D5") && line.contains("DeleteClaim"),
        "the held write is not D5's claim delete: {line}"
    );
    let fresh0 = env.h(h).metric("celld_healer_fresh_reads_total").await?;
    let t_hold = Instant::now();
    holds_for(
        "every disk kept while the namesake exists",
        Duration::from_secs(15),
        || async {
            let now = disks(env, "orph").await?;
            ensure!(
                now.len() == N && now.iter().all(|(n, c)| !c.2 && before[n].0 == c.0),
                "a disk was deleted while a StatefulSet named orph exists: {now:?}"
            );
            ensure!(
                env.api::<CelldFleet>().get_opt("orph").await?.is_some(),
                "the CelldFleet was released"
            );
            Ok(true)
        },
    )
    .await?;
    let fresh1 = env.h(h).metric("celld_healer_fresh_reads_total").await?;
    let live = sts.get("orph").await?;
    ensure!(
        live.metadata.uid.as_deref() == Some(decoy_uid.as_str())
            && live.metadata.deletion_timestamp.is_none(),
        "the unlabelled StatefulSet was touched"
    );
    ensure!(
        actions(env, h, "DeleteClaim", Some("ok")).await? == 0.0
            && actions(env, h, "DeleteWorkload", None).await? == 0.0,
        "the healer deleted a claim or a workload: {:?}",
        writes(env, "orph").await?
    );
    eprintln!(
        "[orphans] {:?} with the namesake: every disk kept, the namesake untouched; {} fresh reads meanwhile (one per 5 s retry, 7 lists each)",
        t_hold.elapsed(),
        fresh1 - fresh0
    );

    // The namesake goes: the deletion completes.
    sts.delete("orph", &DeleteParams::default()).await?;
    let (first, done) =
        follow_deletion(env, "orph", &f.identity, N, Duration::from_secs(90)).await?;
    let order = writes(env, "orph").await?;
    eprintln!(
        "[orphans] namesake deleted: first disk deleted after {first:?}, CelldFleet gone after {done:?}; writes: {order:?}"
    );
    ensure!(
        order
            .iter()
            .filter(|w| w.starts_with("DeleteClaim"))
            .count()
            == N,
        "{order:?}"
    );
    ensure!(
        !order.iter().any(|w| w.starts_with("DeleteWorkload")),
        "the healer deleted a workload: {order:?}"
    );
    ensure!(
        order
            .last()
            .is_some_and(|w| w.starts_with("RemoveFleetFinalizer")),
        "{order:?}"
    );
    Ok(())
}

// ---- 2. D8: the healer's own deletion protection ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protected_fleet_kept_without_the_admission_policy() -> Result<()> {
    let Some(mut env) = Env::start_with(
        "no-policy",
        EnvOptions::alone("deletes the fleet-protection admission binding every test relies on"),
    )
    .await?
    else {
        return Ok(());
    };
    let r = no_policy(&mut env).await;
    let restored = restore_binding(&env).await;
    if let Err(e) = &restored {
        eprintln!("[no-policy] restoring {FLEET_BINDING}: {e:#}");
    }
    env.finish(r.and(restored)).await
}

/// A dry-run DELETE of a CelldFleet: Ok(true) accepted, Ok(false) refused with 403.
async fn delete_allowed(env: &Env, fleet: &str) -> Result<bool> {
    match env
        .api::<CelldFleet>()
        .delete(fleet, &DeleteParams::default().dry_run())
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 403 => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Applies the fleet deletion-protection binding from the install bundle again and, when
/// the test's protected bare fleet `keep` exists, waits until the API server enforces it.
async fn restore_binding(env: &Env) -> Result<()> {
    let binding = install_bundle()?
        .into_iter()
        .find(|o| {
            o["kind"] == "ValidatingAdmissionPolicyBinding"
                && o["metadata"]["name"] == FLEET_BINDING
        })
        .context("no fleet deletion-protection binding in the install bundle")?;
    apply(&env.client, &binding, SETUP, false).await?;
    if env.api::<CelldFleet>().get_opt("keep").await?.is_some() {
        wait_for(
            "the restored binding to be enforced",
            Duration::from_secs(30),
            || async { Ok((!delete_allowed(env, "keep").await?).then_some(())) },
        )
        .await?;
        eprintln!("[no-policy] {FLEET_BINDING} restored and enforced again");
    }
    Ok(())
}

async fn no_policy(env: &mut Env) -> Result<()> {
    // Protection left at its default (on).
    let f = env.persistent(&env.ns, "prot", MEMBERS);
    env.apply_fleet(&f.yaml()).await?;
    // A second protected fleet, its CelldFleet only: proves the binding is back at the end.
    let keep = load_fleet(&env.persistent(&env.ns, "keep", MEMBERS).yaml())?;
    let keep_obj = rendered_objects(&keep)?
        .into_iter()
        .find(|o| o["kind"] == "CelldFleet")
        .context("no CelldFleet rendered")?;
    apply(&env.client, &keep_obj, ARGO, false).await?;
    let h = env.healer(env.healer_options())?;
    let ready = wait_ready_members(env, &f.identity, N, Duration::from_secs(120)).await?;
    wait_condition(env, "prot", "Ready", "True", None, Duration::from_secs(60)).await?;
    let pod_uids: BTreeMap<String, Option<String>> = ready
        .iter()
        .map(|p| (p.name_any(), p.metadata.uid.clone()))
        .collect();
    let before = disks(env, "prot").await?;
    ensure!(before.len() == N, "{before:?}");
    let sts: Api<StatefulSet> = env.api();
    let sts_uid = sts.get("prot").await?.metadata.uid;

    // With the binding the API server refuses the delete; without it, nothing does.
    wait_for(
        "the policy to refuse deleting prot",
        Duration::from_secs(30),
        || async { Ok((!delete_allowed(env, "prot").await?).then_some(())) },
    )
    .await?;
    Api::<ValidatingAdmissionPolicyBinding>::all(env.client.clone())
        .delete(FLEET_BINDING, &DeleteParams::default())
        .await?;
    wait_for(
        "the policy to stop refusing",
        Duration::from_secs(30),
        || async { Ok(delete_allowed(env, "prot").await?.then_some(())) },
    )
    .await?;
    eprintln!(
        "[no-policy] binding {FLEET_BINDING} deleted: the API server accepts deleting a protected fleet"
    );
    env.api::<CelldFleet>()
        .delete("prot", &DeleteParams::default())
        .await?;
    let (_, _, msg) = wait_condition(
        env,
        "prot",
        "Blocked",
        "True",
        Some("DeletionProtected"),
        Duration::from_secs(30),
    )
    .await?;
    eprintln!("[no-policy] protected fleet deleted: Blocked/DeletionProtected: {msg}");
    ensure!(msg.contains("deletionProtection"), "{msg}");
    let t_hold = Instant::now();
    holds_for(
        "workload, disks and members kept",
        Duration::from_secs(15),
        || async {
            let fl = env.api::<CelldFleet>().get("prot").await?;
            ensure!(
                fl.metadata.deletion_timestamp.is_some(),
                "the fleet is not deleting"
            );
            let s = sts
                .get_opt("prot")
                .await?
                .context("the StatefulSet is gone")?;
            ensure!(
                s.metadata.uid == sts_uid && s.metadata.deletion_timestamp.is_none(),
                "the StatefulSet is being deleted"
            );
            let now = disks(env, "prot").await?;
            ensure!(
                now.len() == N && now.iter().all(|(n, c)| !c.2 && before[n].0 == c.0),
                "a disk changed: {now:?}"
            );
            let ready: BTreeMap<String, Option<String>> = member_pods(env, &f.identity)
                .await?
                .into_iter()
                .filter(|p| pod_ready(p) && p.metadata.deletion_timestamp.is_none())
                .map(|p| (p.name_any(), p.metadata.uid.clone()))
                .collect();
            ensure!(ready == pod_uids, "members changed: {ready:?}");
            Ok(true)
        },
    )
    .await?;
    for kind in [
        "DeleteWorkload",
        "DeleteClaim",
        "DeletePod",
        "ForceDeletePod",
    ] {
        ensure!(
            actions(env, h, kind, None).await? == 0.0,
            "the healer attempted {kind} on a protected fleet"
        );
    }
    eprintln!(
        "[no-policy] {:?}: StatefulSet, every disk and every ready member kept; no destructive write attempted",
        t_hold.elapsed()
    );

    // Protection off: the deletion runs, in order.
    env.api::<CelldFleet>()
        .patch(
            "prot",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"deletionProtection": false}})),
        )
        .await?;
    let (first, done) =
        follow_deletion(env, "prot", &f.identity, N, Duration::from_secs(90)).await?;
    let order = writes(env, "prot").await?;
    let order: Vec<String> = order
        .into_iter()
        .skip_while(|w| !w.starts_with("DeleteWorkload"))
        .collect();
    eprintln!(
        "[no-policy] protection off: first disk deleted after {first:?}, CelldFleet gone after {done:?}; writes: {order:?}"
    );
    ensure!(
        order
            .first()
            .is_some_and(|w| w.starts_with("DeleteWorkload")),
        "{order:?}"
    );
    ensure!(
        order
            .iter()
            .filter(|w| w.starts_with("DeleteClaim"))
            .count()
            == N,
        "{order:?}"
    );
    ensure!(
        order
            .last()
            .is_some_and(|w| w.starts_with("RemoveFleetFinalizer")),
        "{order:?}"
    );
    ensure!(
        sts.get_opt("prot").await?.is_none(),
        "the StatefulSet remains"
    );
    Ok(())
}

// ---- 3. F1 and a Pod held by someone else's finalizer ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_delete_does_not_starve_on_a_held_pod() -> Result<()> {
    let Some(mut env) = Env::start("held-pod").await? else {
        return Ok(());
    };
    let r = held_pod(&mut env).await;
    env.finish(r).await
}

/// Everything the fleet's status says: the condition messages and the member messages.
async fn status_text(env: &Env, fleet: &str) -> Result<String> {
    let st = env
        .api::<CelldFleet>()
        .get(fleet)
        .await?
        .status
        .unwrap_or_default();
    let mut out: Vec<String> = st
        .conditions
        .iter()
        .map(|c| format!("{}={} {}: {}", c.type_, c.status, c.reason, c.message))
        .collect();
    out.extend(st.member_states.iter().map(|m| {
        format!(
            "member {} {}: {}",
            m.name,
            m.state,
            m.message.clone().unwrap_or_default()
        )
    }));
    Ok(out.join("\n"))
}

async fn held_pod(env: &mut Env) -> Result<()> {
    let f = env.persistent(&env.ns, "hold", 3);
    env.apply_fleet(&f.yaml()).await?;
    let h = env.healer(env.healer_options())?;
    wait_ready_members(env, &f.identity, 3, Duration::from_secs(120)).await?;
    wait_condition(env, "hold", "Ready", "True", None, Duration::from_secs(60)).await?;
    let before = claims(env).await?;
    let pods: Api<Pod> = env.api();
    let victim = pods.get("hold-1").await?;
    let node = node_of(&victim);
    let zone = zone_of(env, &node).await?;
    let old_uid = victim.metadata.uid.clone().unwrap_or_default();
    eprintln!("[held-pod] stopping {node} ({zone}), running hold-1");
    env.sim.control.stop_node(&node).await?;
    // Someone else's finalizer, before the eviction (the API server refuses new finalizers
    // on an object being deleted), long before grace + margin.
    let mut fins = victim.metadata.finalizers.clone().unwrap_or_default();
    fins.push(FOREIGN_FINALIZER.into());
    pods.patch(
        "hold-1",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": fins}})),
    )
    .await?;
    let (deleting, deadline, ev) = wait_evicted_then_force_deleted(env, "hold", "hold-1").await?;
    eprintln!(
        "[held-pod] hold-1 evicted: deletionTimestamp {deleting}, force-delete deadline {deadline}"
    );
    eprintln!("[held-pod] {ev}");
    let at = ev.time.context("event without time")?;
    ensure!(
        at >= deadline,
        "force-deleted before the deadline {deadline}"
    );
    // The API server took the force delete (grace 0) and the finalizer keeps the Pod.
    let held = wait_for(
        "hold-1 force-deleted and held",
        Duration::from_secs(10),
        || {
            let pods = pods.clone();
            async move {
                Ok(pods
                    .get_opt("hold-1")
                    .await?
                    .filter(|p| p.metadata.deletion_grace_period_seconds == Some(0)))
            }
        },
    )
    .await?;
    ensure!(
        held.metadata.uid.as_deref() == Some(old_uid.as_str()),
        "hold-1 was replaced: the finalizer did not hold it"
    );
    // Every force-delete attempt from now on (any outcome) would be one too many.
    let forced = actions(env, h, "ForceDeletePod", None).await?;
    let forced_ok = actions(env, h, "ForceDeletePod", Some("ok")).await?;
    let t_hold = Instant::now();
    // Rule S2: the status names the finalizer (checked fully below, after the release).
    let named = wait_for(
        "the status to name the finalizer",
        Duration::from_secs(15),
        || async {
            let text = status_text(env, "hold").await?;
            Ok(text.contains(FOREIGN_FINALIZER).then_some(text))
        },
    )
    .await;
    let statuses_seen = std::sync::Mutex::new(std::collections::BTreeSet::new());
    holds_for(
        "no further force delete of the held Pod",
        Duration::from_secs(20),
        || async {
            let p = pods
                .get_opt("hold-1")
                .await?
                .context("hold-1 is gone while held")?;
            ensure!(
                p.metadata.uid.as_deref() == Some(old_uid.as_str()),
                "hold-1 was replaced while held"
            );
            let now = actions(env, h, "ForceDeletePod", None).await?;
            ensure!(
                now == forced,
                "ForceDeletePod attempts went {forced} -> {now} while the Pod was held"
            );
            let text = status_text(env, "hold").await?;
            statuses_seen.lock().expect("statuses").insert(text);
            Ok(true)
        },
    )
    .await?;
    let events: i32 = fleet_events(&env.client, &env.ns, Some("hold"))
        .await?
        .iter()
        .filter(|e| e.reason == "MemberForceDeleted")
        .map(|e| e.count)
        .sum();
    let unconfirmed = actions(env, h, "ForceDeletePod", Some("unconfirmed")).await?;
    eprintln!(
        "[held-pod] {:?} held: ForceDeletePod ok {forced_ok}, attempts {forced} ({unconfirmed} not confirmed on a fresh read), MemberForceDeleted events {events}",
        t_hold.elapsed()
    );
    ensure!(forced_ok == 1.0, "{forced_ok} force deletes made");
    ensure!(events == 1, "{events} MemberForceDeleted events");
    let seen = statuses_seen.into_inner().expect("statuses");
    eprintln!(
        "[held-pod] status while held:\n{}",
        seen.iter().cloned().collect::<Vec<_>>().join("\n---\n")
    );

    // Released: the member comes back on its own disk, in its zone.
    pods.patch(
        "hold-1",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await?;
    let t_release = Instant::now();
    let back = wait_for("hold-1 back and ready", Duration::from_secs(90), || {
        let pods = pods.clone();
        let old_uid = old_uid.clone();
        async move {
            Ok(pods
                .get_opt("hold-1")
                .await?
                .filter(|p| p.metadata.uid.as_deref() != Some(old_uid.as_str()) && pod_ready(p)))
        }
    })
    .await?;
    let new_node = node_of(&back);
    let new_zone = zone_of(env, &new_node).await?;
    eprintln!(
        "[held-pod] finalizer removed: hold-1 back on {new_node} ({new_zone}) after {:?}",
        t_release.elapsed()
    );
    ensure!(
        new_zone == zone,
        "hold-1 came back in {new_zone}, its disk is in {zone}"
    );
    let after = claims(env).await?;
    let uids = |c: &BTreeMap<String, (String, String, bool)>| -> BTreeMap<String, String> {
        c.iter().map(|(k, v)| (k.clone(), v.0.clone())).collect()
    };
    ensure!(
        uids(&before) == uids(&after),
        "claims changed: {before:?} -> {after:?}"
    );
    wait_condition(env, "hold", "Ready", "True", None, Duration::from_secs(60)).await?;
    ensure!(
        actions(env, h, "ForceDeletePod", None).await? == forced,
        "another force delete after the release"
    );
    env.sim.control.start_node(&node).await?;
    // Rule S2: the hold is reported, naming the finalizer, so that an operator knows
    // whom to ask; "waiting for its Pod to finish terminating" never ends by itself.
    if let Ok(text) = &named {
        eprintln!("[held-pod] the status named {FOREIGN_FINALIZER}:\n{text}");
    }
    ensure!(
        named.is_ok() || seen.iter().any(|t| t.contains(FOREIGN_FINALIZER)),
        "while hold-1 was held by {FOREIGN_FINALIZER} after its force delete, the fleet status never named the finalizer (rule F1/S2); it said:\n{}",
        seen.iter().cloned().collect::<Vec<_>>().join("\n---\n")
    );
    Ok(())
}

// ---- 4. What the fresh read costs ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fresh_read_cost_of_a_handoff() -> Result<()> {
    let Some(mut env) = Env::start("fresh-cost").await? else {
        return Ok(());
    };
    let r = fresh_cost(&mut env).await;
    env.finish(r).await
}

/// One request from the healer's log (kube_client debug lines).
#[derive(Debug)]
struct LoggedRequest {
    at: Timestamp,
    method: String,
    url: String,
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars();
    while let Some(c) = it.next() {
        if c == '\x1b' {
            for d in it.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The requests the healer logged (`kube_client=debug`): `HTTP{http.method=.. http.url=..}:
/// ... requesting`.
fn logged_requests(log: &str) -> Vec<LoggedRequest> {
    log.lines()
        .map(strip_ansi)
        .filter(|l| l.trim_end().ends_with("requesting") && l.contains("http.method="))
        .filter_map(|l| {
            let at = l.split_whitespace().next()?.parse::<Timestamp>().ok()?;
            let field = |k: &str| {
                l.split(&format!("{k}="))
                    .nth(1)
                    .and_then(|s| s.split([' ', '}']).next())
                    .map(str::to_string)
            };
            Some(LoggedRequest {
                at,
                method: field("http.method")?,
                url: field("http.url")?,
            })
        })
        .collect()
}

async fn fresh_cost(env: &mut Env) -> Result<()> {
    let f = env.persistent(&env.ns, "cost", 3);
    env.apply_fleet(&f.yaml()).await?;
    let h = env.healer(env.healer_options())?;
    wait_ready_members(env, &f.identity, 3, Duration::from_secs(120)).await?;
    wait_condition(env, "cost", "Ready", "True", None, Duration::from_secs(60)).await?;
    // Let the status settle (the members' application view): its patch is not part of
    // the handoff measured below.
    wait_for(
        "cost's status.application converged, 3 members observed",
        Duration::from_secs(30),
        || async {
            let st = env.api::<CelldFleet>().get("cost").await?.status;
            Ok(st
                .and_then(|s| s.application)
                .filter(|a| a.converged == "True" && a.observed_members == 3)
                .map(|_| ()))
        },
    )
    .await?;
    // Unlabelled claims at member names the fleet may grow into (made by hand, or by
    // someone trying): more than the healer reads one by one, so each fresh read lists
    // the namespace's claims once instead of once per claim.
    let pvcs: Api<PersistentVolumeClaim> = env.api();
    for o in 10..16 {
        let pvc: PersistentVolumeClaim = serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("data-cost-{o}")},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
        }))?;
        pvcs.create(&Default::default(), &pvc).await?;
    }
    let before = claims(env).await?;
    let m0 = env.h(h).metrics_text().await?;
    let t0 = Timestamp::now();
    let started = Instant::now();
    let gone = env
        .sim
        .control
        .delete_claim_volume(&env.ns, "data-cost-1")
        .await?;
    eprintln!("[fresh-cost] deleted {} (data-cost-1)", gone.pv);
    wait_event(env, "cost", "MemberDiskLost", Duration::from_secs(60)).await?;
    let old = before["data-cost-1"].0.clone();
    wait_for(
        "data-cost-1 replaced and cost-1 ready",
        Duration::from_secs(120),
        || async {
            let c = claims(env).await?;
            let fresh = c
                .get("data-cost-1")
                .is_some_and(|(uid, phase, del)| *uid != old && phase == "Bound" && !del);
            let ready = env.api::<Pod>().get_opt("cost-1").await?.is_some_and(|p| {
                pod_ready(&p)
                    && p.metadata.deletion_timestamp.is_none()
                    && p.metadata.finalizers.as_ref().is_none_or(|f| f.is_empty())
            });
            Ok((fresh && ready).then_some(()))
        },
    )
    .await?;
    wait_condition(env, "cost", "Ready", "True", None, Duration::from_secs(60)).await?;
    // The handoff ends with the release of the held Pod.
    wait_for("the handoff released", Duration::from_secs(30), || async {
        Ok((actions(env, h, "ReleaseHandoff", Some("ok")).await? >= 1.0).then_some(()))
    })
    .await?;
    let m1 = env.h(h).metrics_text().await?;
    let t1 = Timestamp::now();
    let elapsed = started.elapsed();

    let (a, b) = (api_requests(&m0), api_requests(&m1));
    let mut delta: BTreeMap<(String, String), f64> = BTreeMap::new();
    for (k, v) in &b {
        let d = v - a.get(k).copied().unwrap_or(0.0);
        if d > 0.0 {
            delta.insert(k.clone(), d);
        }
    }
    let fresh = sum_metric(&m1, "celld_healer_fresh_reads_total")
        - sum_metric(&m0, "celld_healer_fresh_reads_total");
    let act = |m: &str, kind: &str| {
        sum_metric(
            m,
            &format!("celld_healer_actions_total{{kind=\"{kind}\",outcome=\"ok\"}}"),
        )
    };
    let mut table = format!(
        "[fresh-cost] requests for the handoff ({elapsed:?}, volume deleted -> member ready on a fresh disk), fresh reads: {fresh}\n[fresh-cost]   {:<8} {:<32} {:>5}\n",
        "verb", "resource", "count"
    );
    for ((verb, res), n) in &delta {
        table += &format!("[fresh-cost]   {verb:<8} {res:<32} {n:>5}\n");
    }
    table += &format!(
        "[fresh-cost]   total {} requests; writes made: StartHandoff {}, DeleteClaim {}, ReleaseHandoff {}",
        delta.values().sum::<f64>(),
        act(&m1, "StartHandoff") - act(&m0, "StartHandoff"),
        act(&m1, "DeleteClaim") - act(&m0, "DeleteClaim"),
        act(&m1, "ReleaseHandoff") - act(&m0, "ReleaseHandoff"),
    );
    eprintln!("{table}");

    // Both destructive writes were confirmed on a fresh read.
    ensure!(
        fresh >= 2.0,
        "{fresh} fresh reads for a handoff (StartHandoff and DeleteClaim each need one)"
    );
    for kind in ["StartHandoff", "DeleteClaim", "ReleaseHandoff"] {
        ensure!(
            act(&m1, kind) - act(&m0, kind) == 1.0,
            "{kind} not made exactly once"
        );
    }
    // Reads are lists only (never a get), and every list in the window is a fresh read's.
    let n = |verb: &str, res: &str| {
        delta
            .get(&(verb.to_string(), res.to_string()))
            .copied()
            .unwrap_or(0.0)
    };
    for res in [
        "pods",
        "persistentvolumeclaims",
        "statefulsets",
        "deployments",
        "replicasets",
        "celldfleets",
    ] {
        ensure!(
            n("get", res) == 0.0,
            "{} get requests on {res}",
            n("get", res)
        );
    }
    for (res, per_read) in [
        ("celldfleets", 1.0),
        ("statefulsets", 1.0),
        // The fleet's StatefulSet exists, so no Deployment is read.
        ("deployments", 0.0),
        ("pods", 2.0),
        // The claim names (a Table), the claims carrying the identity, and the
        // namespace's claims once for the six unlabelled ones at member names.
        ("persistentvolumeclaims", 3.0),
        ("celldbucketreservations", 1.0),
        ("replicasets", 0.0),
    ] {
        ensure!(
            n("list", res) == fresh * per_read,
            "{} lists of {res} for {fresh} fresh reads (expected {per_read} each)",
            n("list", res)
        );
    }
    let lists: f64 = delta
        .iter()
        .filter(|((v, _), _)| v == "list")
        .map(|(_, c)| c)
        .sum();
    eprintln!(
        "[fresh-cost] {lists} lists = {fresh} fresh reads x {} lists; 0 gets",
        celld_healer::runtime::fresh::requests(true)
    );

    // From the decision (the fresh read's first list follows `decide` directly) to the
    // write, in the healer's own request log.
    let reqs: Vec<LoggedRequest> = logged_requests(&env.h(h).log_text())
        .into_iter()
        .filter(|r| r.at >= t0 && r.at <= t1)
        .collect();
    if reqs.is_empty() {
        eprintln!(
            "[fresh-cost] decision -> write: not in the log; run with HEALER_LOG=info,kube=warn,kube_client=debug to see it"
        );
        return Ok(());
    }
    let is_start = |r: &LoggedRequest| {
        r.method == "GET" && r.url.contains("/celldfleets?") && r.url.contains("fieldSelector")
    };
    let is_write = |r: &LoggedRequest| {
        matches!(r.method.as_str(), "PATCH" | "DELETE" | "POST" | "PUT")
            && !r.url.contains("/leases/")
            && !r.url.contains("/events")
            && !r.url.contains("/status")
    };
    let short = |u: &str| u.split('?').next().unwrap_or(u).to_string();
    let mut measured = 0;
    for (i, r) in reqs.iter().enumerate().filter(|(_, r)| is_start(r)) {
        let rest = &reqs[i + 1..];
        let end = rest
            .iter()
            .position(|x| is_start(x) || is_write(x))
            .unwrap_or(rest.len());
        let read = &rest[..end];
        let last_list = read
            .iter()
            .rfind(|x| x.method == "GET")
            .map_or(r.at, |x| x.at);
        let read_ms = last_list.duration_since(r.at).as_secs_f64() * 1000.0;
        match rest.get(end).filter(|x| is_write(x)) {
            Some(w) => {
                measured += 1;
                eprintln!(
                    "[fresh-cost] decision at {} -> {} {} at +{:.1} ms (fresh read: {} lists, last sent at +{read_ms:.1} ms)",
                    r.at,
                    w.method,
                    short(&w.url),
                    w.at.duration_since(r.at).as_secs_f64() * 1000.0,
                    1 + read.iter().filter(|x| x.method == "GET").count(),
                );
            }
            None => eprintln!(
                "[fresh-cost] decision at {} -> no write (fresh read: {} lists, last sent at +{read_ms:.1} ms)",
                r.at,
                1 + read.iter().filter(|x| x.method == "GET").count(),
            ),
        }
    }
    ensure!(
        measured >= 2,
        "the request log shows {measured} fresh reads followed by a write"
    );
    Ok(())
}
