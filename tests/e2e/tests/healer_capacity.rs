//! The capacity policy on the real control plane (issue 13): the real metrics-server
//! (started by `tests/controlplane/start.sh`) scrapes kubesim's kubelets, whose loads the
//! test sets; the healer collects each member's `/state` and its Pod metrics, evaluates,
//! keeps its history on the reservation and acts through the same rules as a manual edit.
//!
//! Windows are kept short with the fleet's own policy fields (metrics-server resolves
//! every 10 s, so samples are taken every 15 s: each one sees a newer scrape).

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use celld_e2e::*;
use celld_gen::api::labels::CAPACITY_HISTORY;
use celld_gen::api::{CelldBucketReservation, CelldFleet, reservation_name};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

/// Load above the policy's high watermark (cpuHighMillicores 200).
const HIGH_CPU: u64 = 500;
/// Load below the low watermark (cpuLowMillicores 80).
const LOW_CPU: u64 = 10;

/// A short policy for `mode` between `min` and `max` members.
fn policy(mode: &str, min: i32, max: i32) -> String {
    format!(
        "  capacity:
    mode: {mode}
    minMembers: {min}
    maxMembers: {max}
    sampleIntervalSeconds: 15
    maxAgeSeconds: 60
    minWindowSeconds: 5
    maxWindowSeconds: 60
    minSamples: 2
    scaleOutStabilizationSeconds: 10
    scaleInStabilizationSeconds: 60
    scaleOutCooldownSeconds: 30
    scaleInCooldownSeconds: 60
    provisioningTimeoutSeconds: 120
    redistributionObservationSeconds: 30
    cpuHighMillicores: 200
    cpuLowMillicores: 80
    memoryHighMiB: 768
    memoryLowMiB: 384
"
    )
}

fn with_policy(f: &FleetFile, mode: &str, min: i32, max: i32) -> String {
    format!("{}{}", f.yaml(), policy(mode, min, max))
}

async fn fleet(env: &Env, name: &str) -> Result<CelldFleet> {
    Ok(env.api::<CelldFleet>().get(name).await?)
}

/// (reason, message, desiredMembers) of `status.capacity`.
async fn capacity(env: &Env, name: &str) -> Result<Option<(String, String, Option<i32>)>> {
    Ok(fleet(env, name)
        .await?
        .status
        .and_then(|s| s.capacity)
        .map(|c| (c.reason, c.message, c.desired_members)))
}

/// Waits for one of `reasons` in `status.capacity`; prints every decision seen on the
/// way (so a failure shows where the evaluation stood).
async fn wait_reason(
    env: &Env,
    name: &str,
    reasons: &[&str],
    secs: u64,
) -> Result<(String, String, Option<i32>)> {
    let last = std::sync::Mutex::new(None);
    let r = wait_for(
        &format!("{name}: status.capacity.reason in {reasons:?}"),
        Duration::from_secs(secs),
        || async {
            let c = capacity(env, name).await?;
            let mut l = last.lock().expect("last");
            if *l != c {
                eprintln!("[{}] {name}: capacity {c:?}", env.test);
                *l = c.clone();
            }
            Ok(c.filter(|(r, _, _)| reasons.contains(&r.as_str())))
        },
    )
    .await;
    r.with_context(|| format!("last status.capacity: {:?}", last.lock().expect("last")))
}

fn reservations(env: &Env) -> Api<CelldBucketReservation> {
    Api::all(env.client.clone())
}

fn reservation_of(f: &FleetFile) -> String {
    reservation_name(&format!("e2e-{}-{}", f.namespace, f.name), None)
}

async fn history(env: &Env, f: &FleetFile) -> Result<Option<String>> {
    let r = reservations(env).get(&reservation_of(f)).await?;
    Ok(r.metadata
        .annotations
        .and_then(|a| a.get(CAPACITY_HISTORY).cloned()))
}

async fn set_load(env: &Env, f: &FleetFile, cpu: u64) -> Result<()> {
    env.sim
        .control
        .set_load(&f.namespace, &format!("{}-*", f.name), cpu, 64)
        .await?;
    Ok(())
}

/// Shadow: high load gives a growth recommendation; replicas never change. The history
/// lives on the reservation, and re-applying the rendered reservation the way Argo CD
/// does (server-side apply, another field manager) leaves it there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_recommends_and_never_changes_replicas() -> Result<()> {
    let Some(mut env) = Env::start("capacity_shadow").await? else {
        return Ok(());
    };
    let r = shadow(&mut env).await;
    env.finish(r).await
}

async fn shadow(env: &mut Env) -> Result<()> {
    let f = env.bucket(&env.ns, "shadow", 3);
    let yaml = with_policy(&f, "Shadow", 3, 6);
    env.apply_fleet(&yaml).await?;
    env.healer(env.healer_options())?;
    wait_ready_members(env, &f.identity, 3, Duration::from_secs(120)).await?;
    set_load(env, &f, HIGH_CPU).await?;
    let (_, msg, desired) = wait_reason(env, &f.name, &["ScaleOutRecommended"], 150).await?;
    ensure!(
        desired == Some(4),
        "Shadow recommends 4, got {desired:?} ({msg})"
    );
    ensure!(
        msg.starts_with("Recommendation only"),
        "Shadow says it only recommends: {msg}"
    );
    let text = history(env, &f).await?.context("no history annotation")?;
    ensure!(text.contains("\"version\":1"), "history: {text}");
    // Argo CD applies the rendered reservation again: the annotation is not its field.
    env.apply_fleet(&yaml).await?;
    ensure!(
        history(env, &f).await?.is_some(),
        "re-applying the rendered reservation removed the history"
    );
    // The same with Argo CD's own code, configured as `celld-gen install` renders it.
    if let Some(argo) = gitops::Argo::for_test(
        "shadow_recommends_and_never_changes_replicas",
        &env.cluster.kubeconfig,
    )? {
        use celld_e2e::gitops::Engine;
        let objs = rendered_objects(&load_fleet(&yaml)?)?;
        // Synced by Argo CD's own server-side apply path, the history stays, and its
        // server-side diff then finds nothing out of sync.
        tokio::task::block_in_place(|| argo.sync(&objs))?;
        ensure!(
            history(env, &f).await?.is_some(),
            "an Argo CD sync of the rendered reservation removed the history"
        );
        let drift = tokio::task::block_in_place(|| argo.out_of_sync(&objs))?;
        ensure!(
            drift.is_empty(),
            "after an Argo CD sync, out of sync (the history annotation must not be drift): {drift:#?}"
        );
        eprintln!(
            "[Argo CD] synced: the history annotation stays and all {} objects are in sync",
            objs.len()
        );
    }
    holds_for(
        "Shadow keeps 3 replicas",
        Duration::from_secs(20),
        || async { Ok(replicas(env, &f.name).await? == Some(3)) },
    )
    .await?;
    let s = fleet(env, &f.name).await?.status.context("no status")?;
    ensure!(
        s.desired_members == Some(3),
        "desiredMembers follows spec.members in Shadow: {s:?}"
    );
    let m = env.h(0).metrics_text().await?;
    ensure!(
        m.contains("celld_fleet_capacity_decision{")
            && m.contains("reason=\"ScaleOutRecommended\""),
        "decision gauge: {m}"
    );
    ensure!(
        sum_metric(&m, "celld_fleet_capacity_desired_members") == 4.0,
        "desired gauge"
    );
    Ok(())
}

/// ScaleOut: sustained pressure grows one step at a time up to maxMembers; low load
/// never shrinks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_out_grows_one_step_at_a_time_within_max() -> Result<()> {
    let Some(mut env) = Env::start("capacity_scaleout").await? else {
        return Ok(());
    };
    let r = scale_out(&mut env).await;
    env.finish(r).await
}

async fn scale_out(env: &mut Env) -> Result<()> {
    let f = env.bucket(&env.ns, "grow", 3);
    env.apply_fleet(&with_policy(&f, "ScaleOut", 3, 5)).await?;
    env.healer(env.healer_options())?;
    wait_ready_members(env, &f.identity, 3, Duration::from_secs(120)).await?;
    set_load(env, &f, HIGH_CPU).await?;
    // Every replica count the workload goes through, polled faster than a step takes.
    let mut seen = vec![3];
    let deadline = std::time::Instant::now() + Duration::from_secs(360);
    while seen.last() != Some(&5) {
        ensure!(
            std::time::Instant::now() < deadline,
            "ScaleOut did not reach 5: {seen:?}"
        );
        let n = replicas(env, &f.name).await?.unwrap_or(0);
        if seen.last() != Some(&n) {
            seen.push(n);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    ensure!(seen == vec![3, 4, 5], "one step at a time: {seen:?}");
    wait_reason(env, &f.name, &["AtMaximum"], 90).await?;
    holds_for(
        "never above maxMembers",
        Duration::from_secs(20),
        || async { Ok(replicas(env, &f.name).await? == Some(5)) },
    )
    .await?;
    set_load(env, &f, LOW_CPU).await?;
    wait_reason(
        env,
        &f.name,
        &[
            "StabilizingIn",
            "ScaleInRecommended",
            "WithinThresholds",
            "RateLimited",
        ],
        90,
    )
    .await?;
    holds_for(
        "ScaleOut never shrinks",
        Duration::from_secs(45),
        || async { Ok(replicas(env, &f.name).await? == Some(5)) },
    )
    .await?;
    Ok(())
}

/// Automatic: grows under pressure, then after the low window removes one member per
/// step with survivor evidence, and never goes below minMembers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn automatic_grows_then_shrinks_one_per_step_never_below_min() -> Result<()> {
    let Some(mut env) = Env::start("capacity_automatic").await? else {
        return Ok(());
    };
    let r = automatic(&mut env).await;
    env.finish(r).await
}

async fn automatic(env: &mut Env) -> Result<()> {
    let f = env.persistent(&env.ns, "auto", 3);
    env.apply_fleet(&with_policy(&f, "Automatic", 3, 4)).await?;
    env.healer(env.healer_options())?;
    wait_ready_members(env, &f.identity, 3, Duration::from_secs(120)).await?;
    set_load(env, &f, HIGH_CPU).await?;
    wait_for("Automatic grows to 4", Duration::from_secs(240), || async {
        Ok((replicas(env, &f.name).await? == Some(4)).then_some(()))
    })
    .await?;
    wait_ready_members(env, &f.identity, 4, Duration::from_secs(120)).await?;
    set_load(env, &f, LOW_CPU).await?;
    wait_for(
        "Automatic shrinks to 3",
        Duration::from_secs(300),
        || async { Ok((replicas(env, &f.name).await? == Some(3)).then_some(())) },
    )
    .await?;
    wait_event(env, &f.name, "MemberRemoved", Duration::from_secs(30)).await?;
    wait_reason(
        env,
        &f.name,
        &["AtMinimum", "RateLimited", "StabilizingIn"],
        180,
    )
    .await?;
    holds_for(
        "never below minMembers",
        Duration::from_secs(30),
        || async { Ok(replicas(env, &f.name).await? == Some(3)) },
    )
    .await?;
    Ok(())
}

/// A constant load that is low, yet more than one survivor could take (the survivor
/// rule, C2): the contraction is recommended at every sample and held every time. The
/// status reports that once and then stands still: polled every quarter second over
/// four sample intervals, the CelldFleet's resourceVersion never moves (no status patch
/// at all), `CapacityUncertain` stands, and `desired` (3) agrees with the reason's
/// "shrink from 4 toward 3".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_contraction_reports_once_and_stands_still() -> Result<()> {
    let Some(mut env) = Env::start("capacity_standing").await? else {
        return Ok(());
    };
    let r = standing(&mut env).await;
    env.finish(r).await
}

async fn standing(env: &mut Env) -> Result<()> {
    // Low below 150m, high from 200m: 120m on every member is low, but a removed
    // member's 120m on top of a survivor's 120m passes 200m.
    let f = env.bucket(&env.ns, "steady", 4);
    let file =
        with_policy(&f, "Automatic", 3, 4).replace("cpuLowMillicores: 80", "cpuLowMillicores: 150");
    ensure!(file.contains("cpuLowMillicores: 150"), "policy: {file}");
    set_load(env, &f, 120).await?;
    env.apply_fleet(&file).await?;
    env.healer(env.healer_options())?;
    wait_ready_members(env, &f.identity, 4, Duration::from_secs(120)).await?;
    let api = env.api::<CelldFleet>();
    let held = wait_for(
        "the contraction held by the survivor rule (Ready reason CapacityUncertain)",
        Duration::from_secs(300),
        || async {
            let fl = api.get(&f.name).await?;
            let uncertain = fl.status.as_ref().is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.reason == "CapacityUncertain")
            });
            Ok(uncertain.then_some(fl))
        },
    )
    .await?;
    let st = held.status.clone().unwrap_or_default();
    let cap = st.capacity.clone().context("status.capacity")?;
    eprintln!(
        "[{}] held: {:?} {}",
        env.test, cap.desired_members, cap.message
    );
    let rv = held.metadata.resource_version.clone();
    let interval = Duration::from_secs(15);
    let t0 = std::time::Instant::now();
    let mut polls = 0;
    while t0.elapsed() < interval * 4 {
        let now = api.get(&f.name).await?;
        polls += 1;
        let s = now.status.clone().unwrap_or_default();
        ensure!(
            now.metadata.resource_version == rv,
            "poll {polls} after {:?}: the CelldFleet changed (a status patch at unchanged inputs): {:?} -> {:?}\nwas: {:?}\nnow: {:?}",
            t0.elapsed(),
            rv,
            now.metadata.resource_version,
            st,
            s
        );
        let c = s.capacity.clone().context("status.capacity")?;
        ensure!(
            c.desired_members == Some(3) && c.message.contains("toward 3"),
            "desired {:?} and the reason disagree: {}",
            c.desired_members,
            c.message
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    ensure!(
        replicas(env, &f.name).await? == Some(4),
        "a member was removed although the survivors could not take its load"
    );
    eprintln!(
        "[{}] {polls} polls over {:?}: no status write, CapacityUncertain standing at desired 3",
        env.test,
        t0.elapsed()
    );
    Ok(())
}

/// External: a `/scale` write (what `kubectl scale` and an HPA send) drives the fleet,
/// `/scale` reads back, and an autoscaling/v2 HPA targeting the CelldFleet is accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_scale_subresource_and_hpa() -> Result<()> {
    let Some(mut env) = Env::start("capacity_external").await? else {
        return Ok(());
    };
    let r = external(&mut env).await;
    env.finish(r).await
}

async fn external(env: &mut Env) -> Result<()> {
    let f = env.bucket(&env.ns, "ext", 3);
    env.apply_fleet(&gitops::external_fleet_yaml(&f)?).await?;
    env.healer(env.healer_options())?;
    let fleets = env.api::<CelldFleet>();
    fleets
        .patch_scale(
            &f.name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 4}})),
        )
        .await
        .context("/scale write")?;
    wait_for(
        "the /scale write reaches the workload",
        Duration::from_secs(120),
        || async { Ok((replicas(env, &f.name).await? == Some(4)).then_some(())) },
    )
    .await?;
    wait_ready_members(env, &f.identity, 4, Duration::from_secs(120)).await?;
    let scale = wait_for(
        "/scale reads back 4 and the selector",
        Duration::from_secs(60),
        || async {
            let s = fleets.get_scale(&f.name).await?;
            let st = s.status.clone().unwrap_or_default();
            Ok((s.spec.as_ref().and_then(|s| s.replicas) == Some(4)
                && st.replicas == 4
                && st.selector.is_some())
            .then_some(s))
        },
    )
    .await?;
    let selector = scale.status.and_then(|s| s.selector).unwrap_or_default();
    ensure!(selector.contains(&f.identity), "selector {selector}");
    let (reason, _, desired) = wait_reason(env, &f.name, &["ExternalOwner"], 60).await?;
    ensure!(desired == Some(4), "{reason}: desired {desired:?}");
    // The healer writes status after it sees the Pods ready; the Pods being ready is
    // not yet its write, so wait for the counts rather than read them once.
    let s = wait_for(
        "status counts 4 ready, none joining or terminating",
        Duration::from_secs(60),
        || async {
            let s = fleet(env, &f.name).await?.status.unwrap_or_default();
            Ok((s.ready_members == Some(4)
                && s.joining_members == Some(0)
                && s.terminating_members == Some(0))
            .then_some(s))
        },
    )
    .await?;
    ensure!(
        s.reservation == Some(reservation_of(&f)),
        "status.reservation: {s:?}"
    );
    let hpa: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "ext", "namespace": env.ns},
        "spec": {
            "scaleTargetRef": {"apiVersion": "fleet.celld.dev/v1alpha1", "kind": "CelldFleet", "name": f.name},
            "minReplicas": 3,
            "maxReplicas": 6,
            "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}]
        }
    }))?;
    let ar = kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
        "autoscaling",
        "v2",
        "HorizontalPodAutoscaler",
    ));
    let hpas: Api<kube::api::DynamicObject> =
        Api::namespaced_with(env.client.clone(), &env.ns, &ar);
    hpas.create(&PostParams::default(), &hpa)
        .await
        .context("the API server refused an HPA targeting the CelldFleet")?;
    Ok(())
}

/// A member whose `/state` is malformed, slow, huge or stale makes the decision wait,
/// and the message names that member and the cause; replicas do not move meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_member_state_makes_the_decision_wait() -> Result<()> {
    let Some(mut env) = Env::start("capacity_bad_state").await? else {
        return Ok(());
    };
    let r = bad_state(&mut env).await;
    env.finish(r).await
}

async fn bad_state(env: &mut Env) -> Result<()> {
    let f = env.bucket(&env.ns, "bad", 3);
    env.apply_fleet(&with_policy(&f, "ScaleOut", 3, 5)).await?;
    env.healer(env.healer_options())?;
    let pods = wait_ready_members(env, &f.identity, 3, Duration::from_secs(120)).await?;
    wait_reason(
        env,
        &f.name,
        &["WithinThresholds", "StabilizingIn", "AtMinimum"],
        120,
    )
    .await?;
    let victim = &pods[0];
    let name = victim.metadata.name.clone().unwrap_or_default();
    // Each cause in the message's own words.
    for (mode, why) in [
        ("malformed", "/state answer is malformed"),
        ("slow", "/state did not answer in time"),
        ("huge", "/state answer is over 1 MiB"),
        ("stale", "/state sample is stale"),
    ] {
        set_stub_mode(victim, json!({"observation": mode})).await?;
        let (reason, msg, _) = wait_for(
            &format!("{mode}: the decision waits and names {name} and why"),
            Duration::from_secs(90),
            || async {
                Ok(capacity(env, &f.name).await?.filter(|(r, m, _)| {
                    matches!(r.as_str(), "IncompleteMetrics" | "PendingCapacity")
                        && m.contains(&format!("{name}: "))
                        && m.contains(why)
                }))
            },
        )
        .await?;
        eprintln!("[capacity_bad_state] {mode}: {reason}: {msg}");
        ensure!(replicas(env, &f.name).await? == Some(3), "replicas moved");
        set_stub_mode(victim, json!({"observation": "fresh"})).await?;
        wait_reason(
            env,
            &f.name,
            &[
                "WithinThresholds",
                "StabilizingIn",
                "AtMinimum",
                "RepeatedSamples",
            ],
            90,
        )
        .await?;
    }
    Ok(())
}

/// History survives a healer restart (the same decision right after), is removed when
/// spec.capacity is removed, and is written again when a policy comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_survives_restart_and_follows_the_policy() -> Result<()> {
    let Some(mut env) = Env::start("capacity_history").await? else {
        return Ok(());
    };
    let r = history_lifecycle(&mut env).await;
    env.finish(r).await
}

async fn history_lifecycle(env: &mut Env) -> Result<()> {
    let f = env.bucket(&env.ns, "hist", 3);
    let with = with_policy(&f, "Shadow", 3, 6);
    env.apply_fleet(&with).await?;
    let h = env.healer(env.healer_options())?;
    wait_ready_members(env, &f.identity, 3, Duration::from_secs(120)).await?;
    set_load(env, &f, HIGH_CPU).await?;
    wait_reason(env, &f.name, &["ScaleOutRecommended"], 150).await?;
    let before = history(env, &f).await?.context("no history")?;
    env.h_mut(h).terminate();
    let h2 = env.healer(env.healer_options())?;
    env.h(h2)
        .wait_log("acquired the lease", Duration::from_secs(30))
        .await?;
    // A new process that lost the history would restart the windows (StabilizingOut);
    // one that reads it goes on recommending.
    holds_for(
        "the same decision after a restart",
        Duration::from_secs(40),
        || async {
            Ok(capacity(env, &f.name)
                .await?
                .is_some_and(|(r, _, d)| r == "ScaleOutRecommended" && d == Some(4)))
        },
    )
    .await?;
    let after = history(env, &f)
        .await?
        .context("history gone after restart")?;
    ensure!(after != before, "the new healer continues the history");

    // No policy: the annotation goes, and status.capacity with it.
    env.apply_fleet(&f.yaml()).await?;
    wait_for("history removed", Duration::from_secs(60), || async {
        Ok(history(env, &f).await?.is_none().then_some(()))
    })
    .await?;
    wait_for(
        "status.capacity cleared",
        Duration::from_secs(30),
        || async { Ok(capacity(env, &f.name).await?.is_none().then_some(())) },
    )
    .await?;
    // A policy again: a new history.
    env.apply_fleet(&with).await?;
    wait_for("history re-created", Duration::from_secs(90), || async {
        Ok(history(env, &f).await?.map(|_| ()))
    })
    .await?;
    Ok(())
}

/// The collector's cost (issue 13, "Measure"): `CELLD_CAPACITY_COST_FLEETS` (default 10,
/// what CI runs; the README's figures are from 50) PersistentFleets of 3 members in
/// Automatic mode with the default policy (one observation per fleet every 15 s), at rest
/// (low load, at minMembers). Prints API requests and healer CPU per minute; checks that
/// every fleet is observed once per interval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn collector_cost_automatic_fleets() -> Result<()> {
    let Some(mut env) = Env::start_with(
        "capacity_cost",
        EnvOptions::alone("measures the capacity collector's requests and observations per minute"),
    )
    .await?
    else {
        return Ok(());
    };
    let r = cost(&mut env).await;
    env.finish(r).await
}

async fn cost(env: &mut Env) -> Result<()> {
    let n: usize = match std::env::var("CELLD_CAPACITY_COST_FLEETS") {
        Ok(v) => v
            .parse()
            .ok()
            .filter(|&n| n > 0)
            .with_context(|| format!("CELLD_CAPACITY_COST_FLEETS={v:?}: a fleet count"))?,
        Err(_) => 10,
    };
    let fleets: Vec<FleetFile> = (0..n)
        .map(|i| env.persistent(&env.ns, &format!("c{i:02}"), 3))
        .collect();
    for f in &fleets {
        env.apply_fleet(&format!(
            "{}  capacity:\n    mode: Automatic\n    minMembers: 3\n    maxMembers: 4\n",
            f.yaml()
        ))
        .await?;
    }
    let mut o = env.healer_options();
    o.lease_duration = "15s".into();
    let h = env.healer(o)?;
    wait_for("every member ready", Duration::from_secs(480), || async {
        let pods = env
            .api::<k8s_openapi::api::core::v1::Pod>()
            .list(&Default::default())
            .await?;
        Ok((pods.iter().filter(|p| pod_ready(p)).count() == 3 * n).then_some(()))
    })
    .await?;
    // Every fleet past its first observations (metrics-server needs two scrapes).
    wait_for(
        "every fleet evaluated",
        Duration::from_secs(180),
        || async {
            let list = env.api::<CelldFleet>().list(&Default::default()).await?;
            let settled = list
                .iter()
                .filter(|f| {
                    f.status
                        .as_ref()
                        .and_then(|s| s.capacity.as_ref())
                        .is_some_and(|c| matches!(c.reason.as_str(), "StabilizingIn" | "AtMinimum"))
                })
                .count();
            Ok((settled == n).then_some(()))
        },
    )
    .await?;
    let window = Duration::from_secs(60);
    let (m0, c0) = (
        api_requests(&env.h(h).metrics_text().await?),
        env.h(h).cpu_seconds().context("the healer's CPU time")?,
    );
    let w0 = env
        .h(h)
        .metric("celld_healer_capacity_history_writes_total")
        .await?;
    let n0 = env
        .h(h)
        .metric("celld_healer_capacity_collect_duration_seconds_count")
        .await?;
    let s0 = env
        .h(h)
        .metric("celld_healer_capacity_collect_duration_seconds_sum")
        .await?;
    tokio::time::sleep(window).await;
    let (m1, c1) = (
        api_requests(&env.h(h).metrics_text().await?),
        env.h(h).cpu_seconds().context("the healer's CPU time")?,
    );
    let w1 = env
        .h(h)
        .metric("celld_healer_capacity_history_writes_total")
        .await?;
    let n1 = env
        .h(h)
        .metric("celld_healer_capacity_collect_duration_seconds_count")
        .await?;
    let s1 = env
        .h(h)
        .metric("celld_healer_capacity_collect_duration_seconds_sum")
        .await?;
    let mut diff = std::collections::BTreeMap::new();
    for (k, v) in &m1 {
        let d = v - m0.get(k).copied().unwrap_or(0.0);
        if d > 0.0 {
            diff.insert(format!("{} {}", k.0, k.1), d);
        }
    }
    let total: f64 = diff.values().sum();
    let collections = n1 - n0;
    eprintln!(
        "[capacity_cost] {n} Automatic fleets x 3 members, {window:?}: {total} API requests ({diff:?}); \
         {collections} observations ({} member /state GETs), mean {:.1} ms; {} history patches; \
         healer CPU {:.2} s ({:.1} % of one core); binary {}",
        collections * 3.0,
        1000.0 * (s1 - s0) / collections.max(1.0),
        w1 - w0,
        c1 - c0,
        100.0 * (c1 - c0) / window.as_secs_f64(),
        healer_bin()?.display()
    );
    ensure!(
        collections >= 3.0 * n as f64,
        "one observation per fleet every 15 s ({n} fleets): {collections}"
    );
    Ok(())
}
