//! Cluster queries and waits: Events, conditions, members, claims, nodes.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use celld_gen::api::CelldFleet;
use celld_gen::api::labels::IDENTITY;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::api::events::v1::Event as KEvent;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use serde_json::Value;

use crate::*;

/// One Event on a fleet, reduced.
#[derive(Clone, Debug)]
pub struct FleetEvent {
    /// The fleet.
    pub fleet: String,
    /// Normal / Warning.
    pub type_: String,
    /// Reason.
    pub reason: String,
    /// Action.
    pub action: String,
    /// Note.
    pub note: String,
    /// Event time.
    pub time: Option<k8s_openapi::jiff::Timestamp>,
    /// Series count (1 when not a series).
    pub count: i32,
}

impl std::fmt::Display for FleetEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} {} {}/{} x{}: {}",
            self.time.map(|t| t.to_string()).unwrap_or_default(),
            self.fleet,
            self.type_,
            self.reason,
            self.action,
            self.count,
            self.note
        )
    }
}

/// Events regarding CelldFleets in `ns` (one fleet if named), oldest first.
pub async fn fleet_events(
    client: &Client,
    ns: &str,
    fleet: Option<&str>,
) -> Result<Vec<FleetEvent>> {
    let api: Api<KEvent> = Api::namespaced(client.clone(), ns);
    let mut out: Vec<FleetEvent> = api
        .list(&ListParams::default())
        .await?
        .into_iter()
        .filter_map(|e| {
            let r = e.regarding.as_ref()?;
            if r.kind.as_deref() != Some("CelldFleet") {
                return None;
            }
            let name = r.name.clone().unwrap_or_default();
            if fleet.is_some_and(|f| f != name) {
                return None;
            }
            Some(FleetEvent {
                fleet: name,
                type_: e.type_.clone().unwrap_or_default(),
                reason: e.reason.clone().unwrap_or_default(),
                action: e.action.clone().unwrap_or_default(),
                note: e.note.clone().unwrap_or_default(),
                time: e.event_time.as_ref().map(|t| t.0),
                count: e.series.as_ref().map_or(1, |s| s.count),
            })
        })
        .collect();
    out.sort_by_key(|e| e.time);
    Ok(out)
}

/// Waits for an Event with `reason` on `fleet`; returns it.
pub async fn wait_event(
    env: &Env,
    fleet: &str,
    reason: &str,
    timeout: Duration,
) -> Result<FleetEvent> {
    wait_for(
        &format!("Event {reason} on {fleet}"),
        timeout,
        || async move {
            Ok(fleet_events(&env.client, &env.ns, Some(fleet))
                .await?
                .into_iter()
                .find(|e| e.reason == reason))
        },
    )
    .await
}

/// The fleet's condition `type_`: (status, reason, message).
pub async fn condition(
    env: &Env,
    fleet: &str,
    type_: &str,
) -> Result<Option<(String, String, String)>> {
    let f = env.api::<CelldFleet>().get(fleet).await?;
    Ok(f.status.and_then(|s| {
        s.conditions
            .into_iter()
            .find(|c| c.type_ == type_)
            .map(|c| (c.status, c.reason, c.message))
    }))
}

/// Waits until the fleet's condition `type_` has `status` and `reason`.
pub async fn wait_condition(
    env: &Env,
    fleet: &str,
    type_: &str,
    status: &str,
    reason: Option<&str>,
    timeout: Duration,
) -> Result<(String, String, String)> {
    wait_for(
        &format!("{fleet} condition {type_}={status} reason {reason:?}"),
        timeout,
        || async move {
            Ok(condition(env, fleet, type_)
                .await?
                .filter(|(s, r, _)| s == status && reason.is_none_or(|x| x == r)))
        },
    )
    .await
}

/// spec.replicas of the workload named `name` (StatefulSet, else Deployment).
pub async fn replicas(env: &Env, name: &str) -> Result<Option<i32>> {
    if let Some(s) = env.api::<StatefulSet>().get_opt(name).await? {
        return Ok(Some(s.spec.replicas.unwrap_or(1)));
    }
    Ok(env
        .api::<Deployment>()
        .get_opt(name)
        .await?
        .map(|d| d.spec.replicas.unwrap_or(1)))
}

/// Waits until `n` member Pods of the fleet (by identity) are Ready and not terminating.
pub async fn wait_ready_members(
    env: &Env,
    identity: &str,
    n: usize,
    timeout: Duration,
) -> Result<Vec<Pod>> {
    wait_for(&format!("{n} ready members"), timeout, || async move {
        let pods = member_pods(env, identity).await?;
        let ready: Vec<Pod> = pods
            .into_iter()
            .filter(|p| pod_ready(p) && p.metadata.deletion_timestamp.is_none())
            .collect();
        Ok((ready.len() == n).then_some(ready))
    })
    .await
}

/// Pods labelled with the fleet identity.
pub async fn member_pods(env: &Env, identity: &str) -> Result<Vec<Pod>> {
    Ok(env
        .api::<Pod>()
        .list(&ListParams::default().labels(&format!("{IDENTITY}={identity}")))
        .await?
        .items)
}

/// Claims of the namespace: name -> (uid, phase, deleting).
pub async fn claims(env: &Env) -> Result<BTreeMap<String, (String, String, bool)>> {
    Ok(env
        .api::<PersistentVolumeClaim>()
        .list(&ListParams::default())
        .await?
        .into_iter()
        .map(|c| {
            (
                c.name_any(),
                (
                    c.metadata.uid.clone().unwrap_or_default(),
                    c.status
                        .as_ref()
                        .and_then(|s| s.phase.clone())
                        .unwrap_or_default(),
                    c.metadata.deletion_timestamp.is_some(),
                ),
            )
        })
        .collect())
}

/// The API server's clock as it stamps objects ([`kubesim::testing::server_now`] in the
/// test's namespace).
pub async fn server_now(env: &Env) -> Result<Timestamp> {
    kubesim::testing::server_now(&env.client, &env.ns).await
}

/// Waits until the API server's clock ([`server_now`]) reads `t` or later: every object
/// created from then on is stamped `t` or later, and the real time is past `t`.
pub async fn wait_server_time(env: &Env, t: Timestamp, timeout: Duration) -> Result<()> {
    wait_for(
        &format!("the API server's clock at {t}"),
        timeout,
        || async move { Ok((server_now(env).await? >= t).then_some(())) },
    )
    .await
}

/// Waits until a Pod created from then on is more than `fresh_disk_age` newer than each
/// of `claims`, by the API server's timestamps: rule R4 leaves a member alone on a disk
/// made for its Pod (`claim created + --fresh-disk-age >= Pod created`). Timestamps
/// have whole seconds, so "more than" is at least 1 s more.
pub async fn wait_disks_older_than_new_pods(
    env: &Env,
    claims: &[&str],
    fresh_disk_age: Duration,
) -> Result<()> {
    let api: Api<PersistentVolumeClaim> = env.api();
    let mut made = None;
    for c in claims {
        let t = api
            .get(c)
            .await?
            .metadata
            .creation_timestamp
            .with_context(|| format!("{c} without creationTimestamp"))?
            .0;
        made = made.max(Some(t));
    }
    let made = made.context("no claims given")?;
    let at = made + SignedDuration::try_from(fresh_disk_age)? + SignedDuration::from_secs(1);
    wait_server_time(env, at, fresh_disk_age + Duration::from_secs(30)).await
}

/// Waits until each of `pods` (same namespace) has been Ready, and not terminating, for
/// `window` by the API server's clock: its Ready condition's lastTransitionTime plus
/// `window`, plus 1 s of margin, is past. Rule R3 replaces a down member only when every
/// other member has been ready for the absorb window (`--absorb-window`).
pub async fn wait_ready_for(
    env: &Env,
    pods: &[&str],
    window: Duration,
    timeout: Duration,
) -> Result<()> {
    let api: Api<Pod> = env.api();
    let window = SignedDuration::try_from(window)? + SignedDuration::from_secs(1);
    wait_for(
        &format!("{pods:?} ready for the absorb window ({window} with the margin)"),
        timeout,
        || {
            let api = api.clone();
            async move {
                let mut settled_at = None;
                for name in pods {
                    let Some(p) = api.get_opt(name).await? else {
                        return Ok(None);
                    };
                    let since = p
                        .status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .and_then(|c| c.iter().find(|c| c.type_ == "Ready" && c.status == "True"))
                        .and_then(|c| c.last_transition_time.as_ref())
                        .filter(|_| p.metadata.deletion_timestamp.is_none());
                    let Some(since) = since else {
                        return Ok(None);
                    };
                    settled_at = settled_at.max(Some(since.0 + window));
                }
                let Some(at) = settled_at else {
                    return Ok(Some(()));
                };
                Ok((server_now(env).await? >= at).then_some(()))
            }
        },
    )
    .await
}

/// Asserts that `f` stays true for `dur` (checked every 500 ms).
pub async fn holds_for<F, Fut>(what: &str, dur: Duration, mut f: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<bool>>,
{
    let end = Instant::now() + dur;
    while Instant::now() < end {
        ensure!(f().await?, "{what} stopped holding");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(())
}

/// Sets a stub's answers (`PUT http://<podIP>:8081/__stub/mode`).
pub async fn set_stub_mode(pod: &Pod, mode: Value) -> Result<()> {
    let ip = pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .context("Pod has no IP")?;
    let http = kubesim::http::HttpClient::new();
    http.send_json(
        http::Method::PUT,
        &format!("http://{ip}:8081/__stub/mode"),
        &mode,
        Duration::from_secs(5),
    )
    .await?
    .ok()?;
    Ok(())
}

/// The node a Pod is bound to (empty when unscheduled).
pub fn node_of(p: &Pod) -> String {
    p.spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default()
}

/// The zone label of a node.
pub async fn zone_of(env: &Env, node: &str) -> Result<String> {
    let n = Api::<k8s_openapi::api::core::v1::Node>::all(env.client.clone())
        .get(node)
        .await?;
    n.metadata
        .labels
        .and_then(|l| l.get(celld_gen::api::labels::ZONE).cloned())
        .context("node without zone")
}

/// When the healer may force-delete a Pod whose grace ended at `grace_end` (its
/// deletionTimestamp): that plus the tests' `--force-delete-margin`
/// ([`FORCE_DELETE_MARGIN_S`]), rule F1.
pub fn force_delete_deadline(
    grace_end: k8s_openapi::jiff::Timestamp,
) -> k8s_openapi::jiff::Timestamp {
    grace_end + k8s_openapi::jiff::SignedDuration::from_secs(FORCE_DELETE_MARGIN_S)
}

/// After a member's node stopped: waits until the node lifecycle controller evicts `pod`
/// (its deletionTimestamp is set), then until the healer records `MemberForceDeleted` on
/// `fleet`. Returns the deletionTimestamp, the force-delete deadline (it plus the tests'
/// `--force-delete-margin`, [`FORCE_DELETE_MARGIN_S`]) and the Event.
pub async fn wait_evicted_then_force_deleted(
    env: &Env,
    fleet: &str,
    pod: &str,
) -> Result<(
    k8s_openapi::jiff::Timestamp,
    k8s_openapi::jiff::Timestamp,
    FleetEvent,
)> {
    let pods: Api<Pod> = env.api();
    let deleting = wait_for(
        &format!("{pod} terminating"),
        Duration::from_secs(90),
        || {
            let pods = pods.clone();
            async move {
                Ok(pods
                    .get_opt(pod)
                    .await?
                    .and_then(|p| p.metadata.deletion_timestamp.clone()))
            }
        },
    )
    .await?;
    let deadline = force_delete_deadline(deleting.0);
    let ev = wait_event(env, fleet, "MemberForceDeleted", Duration::from_secs(60)).await?;
    Ok((deleting.0, deadline, ev))
}

/// After a namespace deletion began: waits until the namespace controller reports that a
/// deletion in it was refused by `policy` (its `NamespaceDeletionContentFailure`).
pub async fn wait_namespace_deletion_refused(
    client: &kube::Client,
    namespace: &str,
    policy: &str,
) -> Result<()> {
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
        kube::Api::all(client.clone());
    wait_for(
        &format!("the namespace controller to report a deletion refused by {policy}"),
        Duration::from_secs(90),
        || async {
            let ns = namespaces.get(namespace).await?;
            Ok(ns
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .into_iter()
                .any(|c| {
                    c.type_ == "NamespaceDeletionContentFailure"
                        && c.message.is_some_and(|m| m.contains(policy))
                })
                .then_some(()))
        },
    )
    .await
}

/// Managers (and operation) owning `spec.replicas`.
pub fn replica_owners(sts: &StatefulSet) -> Vec<(String, String)> {
    sts.metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| {
            m.fields_v1.as_ref().is_some_and(|f| {
                f.0.get("f:spec")
                    .and_then(|s| s.get("f:replicas"))
                    .is_some()
            })
        })
        .map(|m| {
            (
                m.manager.clone().unwrap_or_default(),
                m.operation.clone().unwrap_or_default(),
            )
        })
        .collect()
}
