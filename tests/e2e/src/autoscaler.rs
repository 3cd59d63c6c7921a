//! External capacity driven by the real HPA controller (issue "External capacity with a
//! real HPA"): fleets written exactly as `docs/day-2.md` shows (capacity mode `External`,
//! no `spec.members`), each with an `autoscaling/v2` HorizontalPodAutoscaler in Git
//! beside it, synced by a real GitOps engine. kube-controller-manager's HPA controller
//! reads `/scale` and metrics-server's Pod metrics (kubesim's kubelets report the loads a
//! test sets), and writes `/scale` as any autoscaler does: nothing here writes
//! `spec.members` itself.
//!
//! Checked on the way, on every status the API server shows (a watch, not polls): a
//! fleet is never `Ready` with fewer ready members than `minMembers`.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use celld_gen::api::CelldFleet;
use futures::StreamExt;
use kube::Api;
use kube::api::DynamicObject;
use kube::runtime::watcher;
use kubesim::testing::wait_for;
use serde_json::{Value, json};

use crate::gitops::{Engine, blocking, ensure_in_sync, external_fleet_yaml, settle};
use crate::{Env, FleetFile, load_fleet, rendered_objects};

/// The fleets' `minMembers` and the HPAs' `minReplicas`.
const MIN: i32 = 3;
/// The fleets' `maxMembers` (from [`external_fleet_yaml`]) and the HPAs' `maxReplicas`.
const MAX: i32 = 6;
/// Target CPU utilization of the HPAs: of the members' 250m request.
const TARGET_UTILIZATION: i32 = 50;
/// A load far above the target (320% of the request), so the HPA asks for its maximum.
const BUSY_MILLICORES: u64 = 800;

/// The HorizontalPodAutoscaler of a fleet, as a user commits it beside the fleet.
fn hpa(f: &FleetFile) -> Value {
    json!({
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": f.name, "namespace": f.namespace},
        "spec": {
            "scaleTargetRef": {"apiVersion": "fleet.celld.dev/v1alpha1", "kind": "CelldFleet", "name": f.name},
            "minReplicas": MIN,
            "maxReplicas": MAX,
            "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": TARGET_UTILIZATION}}}],
        },
    })
}

/// Every Ready=True status of the namespace's fleets with fewer ready members than the
/// floor, as the watch saw them; and the fleets seen Ready at all.
#[derive(Default)]
struct FloorLog {
    violations: Vec<String>,
    ready: BTreeSet<String>,
}

/// Watches the namespace's CelldFleets while it lives.
struct FloorWatch {
    log: Arc<Mutex<FloorLog>>,
    task: tokio::task::JoinHandle<()>,
}

impl FloorWatch {
    fn start(env: &Env, floor: i32) -> FloorWatch {
        let log = Arc::new(Mutex::new(FloorLog::default()));
        let api: Api<CelldFleet> = env.api();
        let l = log.clone();
        let task = tokio::spawn(async move {
            let mut events = watcher(api, watcher::Config::default()).boxed();
            while let Some(ev) = events.next().await {
                let f = match ev {
                    Ok(watcher::Event::Apply(f) | watcher::Event::InitApply(f)) => f,
                    _ => continue,
                };
                let name = f.metadata.name.clone().unwrap_or_default();
                let Some(st) = f.status else { continue };
                let ready = st
                    .conditions
                    .iter()
                    .find(|c| c.type_ == "Ready")
                    .filter(|c| c.status == "True");
                let Some(c) = ready else { continue };
                let n = st.ready_members.unwrap_or(0);
                let mut log = l.lock().expect("floor log");
                log.ready.insert(name.clone());
                if n < floor {
                    log.violations.push(format!(
                        "{name}: Ready=True with {n} ready members (minMembers {floor}): {}",
                        c.message
                    ));
                }
            }
        });
        FloorWatch { log, task }
    }

    /// Stops the watch; fails on any Ready status below the floor, and unless every
    /// fleet in `names` was seen Ready (so the watch saw the statuses at all).
    fn finish(self, names: &[&str]) -> Result<()> {
        self.task.abort();
        let log = self.log.lock().expect("floor log");
        ensure!(
            log.violations.is_empty(),
            "a fleet was Ready below minMembers:\n{}",
            log.violations.join("\n")
        );
        for n in names {
            ensure!(
                log.ready.contains(*n),
                "the watch never saw {n} Ready (seen: {:?})",
                log.ready
            );
        }
        Ok(())
    }
}

/// `(desiredReplicas, AbleToScale, ScalingActive)` of an HPA's status.
async fn hpa_state(api: &Api<DynamicObject>, name: &str) -> Result<(i64, String, String)> {
    let h = api.get(name).await?;
    let st = &h.data["status"];
    let cond = |t: &str| {
        st["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == t))
            .map(|c| {
                format!(
                    "{} {} {}",
                    c["status"].as_str().unwrap_or("?"),
                    c["reason"].as_str().unwrap_or("?"),
                    c["message"].as_str().unwrap_or("")
                )
            })
            .unwrap_or_else(|| "absent".into())
    };
    Ok((
        st["desiredReplicas"].as_i64().unwrap_or(-1),
        cond("AbleToScale"),
        cond("ScalingActive"),
    ))
}

/// Waits until the HPA reads `/scale` and metrics and asks for `want` (at least `want`
/// with `at_least`); prints each state it passes through.
async fn wait_hpa(
    api: &Api<DynamicObject>,
    name: &str,
    want: i64,
    at_least: bool,
    secs: u64,
) -> Result<i64> {
    let last = Mutex::new(None);
    let r = wait_for(
        &format!("HPA {name} able to scale and asking for {want}"),
        Duration::from_secs(secs),
        || async {
            let s = hpa_state(api, name).await?;
            let mut l = last.lock().expect("last");
            if l.as_ref() != Some(&s) {
                eprintln!(
                    "[hpa] {name}: desired {}, AbleToScale {}, ScalingActive {}",
                    s.0, s.1, s.2
                );
                *l = Some(s.clone());
            }
            let asked = if at_least { s.0 >= want } else { s.0 == want };
            Ok((asked && s.1.starts_with("True") && s.2.starts_with("True")).then_some(s.0))
        },
    )
    .await;
    r.with_context(|| format!("last HPA state: {:?}", last.lock().expect("last")))
}

/// The scenario: a Bucket and a PersistentFleet in External mode with their HPAs,
/// synced by `engine` with the healer running. The healer gives each fleet its first
/// `spec.members` (minMembers), `/scale` answers, the HPA is able to scale and holds
/// `minReplicas`, the fleets reach 3 ready members and the engine reports everything in
/// sync; then load raises the HPAs to their maximum, the fleets grow to it, and the
/// engine still reports everything in sync. No fleet is Ready below minMembers at any
/// status written on the way.
pub async fn hpa_scenario(env: &mut Env, engine: &dyn Engine) -> Result<()> {
    let t0 = Instant::now();
    let ns = env.ns.clone();
    let fleets = [
        env.bucket(&ns, "web", MIN).protection(false),
        env.persistent(&ns, "store", MIN).protection(false),
    ];
    let mut objs = Vec::new();
    for f in &fleets {
        let file = external_fleet_yaml(f)?;
        ensure!(
            !file.contains("\n  members:"),
            "the External fleet file sets members:\n{file}"
        );
        objs.extend(rendered_objects(&load_fleet(&file)?)?);
        objs.push(hpa(f));
    }
    ensure!(
        objs.iter()
            .all(|o| o["kind"] != "CelldFleet" || o["spec"].get("members").is_none()),
        "a rendered External CelldFleet carries spec.members"
    );
    let watch = FloorWatch::start(env, MIN);
    env.healer(env.healer_options())?;
    blocking(|| engine.sync(&objs))?;
    let fleets_api: Api<CelldFleet> = env.api();
    let ar = kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
        "autoscaling",
        "v2",
        "HorizontalPodAutoscaler",
    ));
    let hpas: Api<DynamicObject> = Api::namespaced_with(env.client.clone(), &ns, &ar);

    for f in &fleets {
        // `/scale` as an autoscaler reads it: a GET, which the API server cannot answer
        // while spec.members is absent.
        let scale = wait_for(
            &format!("GET /scale of {} answers", f.name),
            Duration::from_secs(60),
            || async { Ok(fleets_api.get_scale(&f.name).await.ok()) },
        )
        .await?;
        let replicas = scale.spec.and_then(|s| s.replicas);
        ensure!(
            replicas == Some(MIN),
            "{}: /scale spec.replicas {replicas:?}, want minMembers {MIN}",
            f.name
        );
        crate::wait_event(env, &f.name, "MembersInitialized", Duration::from_secs(30)).await?;
        eprintln!(
            "[hpa] {}: /scale readable at {MIN} after {:?}",
            f.name,
            t0.elapsed()
        );
    }
    for f in &fleets {
        wait_hpa(&hpas, &f.name, i64::from(MIN), false, 180).await?;
        settle(env, &f.name, &f.identity, MIN).await?;
    }
    blocking(|| {
        ensure_in_sync(
            engine,
            &objs,
            "after the healer set spec.members and the HPAs held minReplicas",
        )
    })?;

    for f in &fleets {
        env.sim
            .control
            .set_load(&ns, &format!("{}-*", f.name), BUSY_MILLICORES, 64)
            .await?;
    }
    for f in &fleets {
        let asked = wait_hpa(&hpas, &f.name, i64::from(MIN) + 1, true, 240).await?;
        eprintln!("[hpa] {}: under load the HPA asks for {asked}", f.name);
        // The HPA keeps raising as new members report the same load, up to MAX.
        wait_for(
            &format!("HPA {} at maxReplicas {MAX}", f.name),
            Duration::from_secs(240),
            || async { Ok((hpa_state(&hpas, &f.name).await?.0 == i64::from(MAX)).then_some(())) },
        )
        .await?;
        let members = fleets_api.get(&f.name).await?.spec.members;
        ensure!(
            members == Some(MAX),
            "{}: spec.members {members:?} after the HPA asked for {MAX}",
            f.name
        );
        settle(env, &f.name, &f.identity, MAX).await?;
        eprintln!("[hpa] {}: grown to {MAX} after {:?}", f.name, t0.elapsed());
    }
    blocking(|| {
        ensure_in_sync(
            engine,
            &objs,
            "after the HPAs raised the fleets under load and the healer grew them",
        )
    })?;
    watch.finish(&["web", "store"])
}
