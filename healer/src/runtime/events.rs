//! Kubernetes Events (`events.k8s.io/v1`) on the CelldFleet: one for every write the
//! healer makes, and one for every change of the Blocked condition (Warning when it
//! becomes True, Normal when it clears), with the condition's reason.
//!
//! Every Event is created anew (no client-side aggregation into a series): the healer
//! writes at most one object per reconcile, so Events are rare, and aggregation would keep
//! the first note of a series (two contraction steps would both read "5 -> 4"). The one
//! report that could repeat, an unreadable object, is de-duplicated by the caller.
//!
//! An Event that cannot be recorded is logged and counted; it never fails a reconcile.

use std::sync::Arc;

use celld_api::CelldFleet;
use celld_api::labels::HEALER_FIELD_MANAGER;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::PostParams;
use kube::{Api, Resource};
use tracing::warn;

use super::metrics::Metrics;
use crate::plan::{Action, Plan};

/// Records Events on fleets.
#[derive(Clone)]
pub struct Events {
    client: kube::Client,
    instance: String,
    metrics: Arc<Metrics>,
}

impl Events {
    /// A recorder reporting as `celld-healer`, instance `identity`.
    pub fn new(client: kube::Client, identity: &str, metrics: Arc<Metrics>) -> Events {
        Events {
            client,
            instance: identity.to_string(),
            metrics,
        }
    }

    /// Publishes one Event regarding `fleet`. `warning` selects the type; `action` is a
    /// short CamelCase name of what the healer did (or `Report`).
    pub async fn publish(
        &self,
        fleet: &CelldFleet,
        warning: bool,
        reason: &str,
        action: &str,
        note: String,
    ) {
        self.publish_regarding(fleet.object_ref(&()), warning, reason, action, note)
            .await;
    }

    /// Publishes one Event regarding any object (a CelldFleet that does not read, say).
    pub async fn publish_regarding(
        &self,
        regarding: ObjectReference,
        warning: bool,
        reason: &str,
        action: &str,
        note: String,
    ) {
        let ns = regarding.namespace.clone().unwrap_or_default();
        let now = Timestamp::now();
        let ev = Event {
            metadata: serde_json::from_value(serde_json::json!({
                "name": format!(
                    "{}.{:x}",
                    regarding.name.as_deref().unwrap_or("celldfleet"),
                    now.as_nanosecond()
                ),
                "namespace": ns,
            }))
            .expect("valid metadata"),
            event_time: Some(MicroTime(now)),
            type_: Some(if warning { "Warning" } else { "Normal" }.into()),
            reason: Some(truncate(reason, 128)),
            action: Some(truncate(action, 128)),
            note: Some(truncate(&note, 1000)),
            regarding: Some(regarding),
            reporting_controller: Some(HEALER_FIELD_MANAGER.into()),
            reporting_instance: Some(truncate(&self.instance, 128)),
            ..Event::default()
        };
        let api: Api<Event> = Api::namespaced(self.client.clone(), &ns);
        if let Err(e) = api.create(&PostParams::default(), &ev).await {
            self.metrics.error("event");
            warn!(error = %e, reason, "could not record an Event");
        }
    }

    /// The Event of a write the healer made: the plan's own when it has one, else one
    /// named after the action, with the status message.
    pub async fn record_action(&self, fleet: &CelldFleet, plan: &Plan, action: &Action) {
        let kind = action.kind();
        // The decision's own message: Progressing carries it as decided (Ready's may
        // start with the gap to the fleet's floor, rule S4).
        let message = plan
            .status
            .conditions
            .iter()
            .find(|c| c.type_ == "Progressing")
            .map(|c| c.message.clone())
            .unwrap_or_default();
        match &plan.event {
            Some(e) => {
                self.publish(
                    fleet,
                    e.type_ == "Warning",
                    e.reason,
                    kind,
                    e.message.clone(),
                )
                .await
            }
            None => {
                let (warning, reason) = match action {
                    Action::AddFleetFinalizer { .. } => (false, "FinalizerAdded"),
                    Action::RemoveFleetFinalizer { .. } => (false, "FleetReleased"),
                    Action::InitializeMembers { .. } => (false, "MembersInitialized"),
                    Action::SetReplicas { from, replicas, .. } if replicas > from => {
                        (false, "MembersAdded")
                    }
                    Action::SetReplicas { .. } => (false, "MemberRemoved"),
                    Action::ForceDeletePod { .. } => (true, "MemberForceDeleted"),
                    Action::DeletePod { .. } => (false, "MemberPodDeleted"),
                    Action::StartHandoff(_) => (true, "DiskHandoffStarted"),
                    Action::DeleteClaim { .. } => (true, "DiskDeleted"),
                    Action::ReleaseHandoff { .. } => (false, "DiskHandoffFinished"),
                    Action::AbortHandoff { .. } => (true, "DiskHandoffAborted"),
                    Action::DeleteWorkload { .. } => (false, "WorkloadDeleted"),
                };
                let detail = match action {
                    Action::SetReplicas {
                        kind,
                        name,
                        from,
                        replicas,
                        ..
                    } => format!(
                        "{} {name}: spec.replicas {from} -> {replicas}. {message}",
                        kind.as_str()
                    ),
                    _ => message,
                };
                self.publish(fleet, warning, reason, kind, detail).await
            }
        }
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max.saturating_sub(3);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}
