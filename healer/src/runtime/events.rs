//! Kubernetes Events (`events.k8s.io/v1`) on the CelldFleet: one for every write the
//! healer makes, and one for every change of the Blocked condition (Warning when it
//! becomes True, Normal when it clears), with the condition's reason.
//!
//! Every Event is created anew (no client-side aggregation into a series): the healer
//! writes at most one object per reconcile, so Events are rare, and aggregation would keep
//! the first note of a series (two contraction steps would both read "5 -> 4"). The one
//! report that could repeat, an unreadable object, is de-duplicated by the caller. The
//! exception is a lost node's or zone's force deletes of one fleet, sent together: one
//! Event names them all, a line each ([`Events::publish_joined`]), so that a burst costs
//! the API server one Event per fleet rather than one per Pod.
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
            note: Some(truncate(&note, NOTE_MAX)),
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

    /// The Event of a write the healer made: [`action_note`]'s.
    pub async fn record_action(&self, fleet: &CelldFleet, plan: &Plan, action: &Action) {
        let n = action_note(plan, action);
        self.publish(fleet, n.warning, n.reason, n.action, n.note)
            .await
    }

    /// One Event for several writes of one kind and reason made together (a lost node's
    /// force deletes of one fleet): their notes, one per line. Notes that would not fit
    /// in one Event's note go in as many more as needed, so none is cut off (a single
    /// note longer than an Event holds would be, as alone).
    pub async fn publish_joined(&self, fleet: &CelldFleet, notes: Vec<ActionNote>) {
        for (first, joined) in join_notes(notes, NOTE_MAX) {
            self.publish(fleet, first.warning, first.reason, first.action, joined)
                .await;
        }
    }
}

/// An Event's note is cut at this many bytes.
const NOTE_MAX: usize = 1000;

/// What the Event of one write says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActionNote {
    /// A Warning (else Normal).
    pub warning: bool,
    /// The Event's reason.
    pub reason: &'static str,
    /// The action's kind.
    pub action: &'static str,
    /// What happened.
    pub note: String,
}

/// `notes` joined one per line, as few Events as fit `max` bytes each (a note longer
/// than `max` alone in its own); each with the first note it holds (for its type and
/// reason: a batch is of one kind).
fn join_notes(notes: Vec<ActionNote>, max: usize) -> Vec<(ActionNote, String)> {
    let mut out: Vec<(ActionNote, String)> = Vec::new();
    for n in notes {
        match out.last_mut() {
            Some((first, joined))
                if first.reason == n.reason && joined.len() + 1 + n.note.len() <= max =>
            {
                joined.push('\n');
                joined.push_str(&n.note);
            }
            _ => {
                let note = n.note.clone();
                out.push((n, note));
            }
        }
    }
    out
}

/// The Event of a write the healer made: the plan's own when it has one, else one
/// named after the action, with the status message.
pub fn action_note(plan: &Plan, action: &Action) -> ActionNote {
    let kind = action.kind();
    if let Some(e) = &plan.event {
        return ActionNote {
            warning: e.type_ == "Warning",
            reason: e.reason,
            action: kind,
            note: e.message.clone(),
        };
    }
    // The decision's own message: Progressing carries it as decided (Ready's may start
    // with the gap to the fleet's floor, rule S4).
    let message = plan
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == "Progressing")
        .map(|c| c.message.clone())
        .unwrap_or_default();
    let (warning, reason) = match action {
        Action::AddFleetFinalizer { .. } => (false, "FinalizerAdded"),
        Action::RemoveFleetFinalizer { .. } => (false, "FleetReleased"),
        Action::InitializeMembers { .. } => (false, "MembersInitialized"),
        Action::SetReplicas { from, replicas, .. } if replicas > from => (false, "MembersAdded"),
        Action::SetReplicas { .. } => (false, "MemberRemoved"),
        Action::ForceDeletePod { .. } => (true, "MemberForceDeleted"),
        Action::DeletePod { .. } => (false, "MemberPodDeleted"),
        Action::StartHandoff(_) => (true, "DiskHandoffStarted"),
        Action::DeleteClaim { .. } => (true, "DiskDeleted"),
        Action::ReleaseHandoff { .. } => (false, "DiskHandoffFinished"),
        Action::AbortHandoff { .. } => (true, "DiskHandoffAborted"),
        Action::DeleteWorkload { .. } => (false, "WorkloadDeleted"),
    };
    let note = match action {
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
    ActionNote {
        warning,
        reason,
        action: kind,
        note,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn note(reason: &'static str, text: &str) -> ActionNote {
        ActionNote {
            warning: true,
            reason,
            action: "ForceDeletePod",
            note: text.into(),
        }
    }

    /// Notes of one reason share an Event, a line each, as many as fit; the rest go in
    /// more Events, and none is cut; another reason starts an Event of its own.
    #[test]
    fn joined_notes_fill_events_without_cutting_any() {
        let a = "a".repeat(400);
        let b = "b".repeat(400);
        let c = "c".repeat(400);
        let got = join_notes(
            vec![
                note("MemberForceDeleted", &a),
                note("MemberForceDeleted", &b),
                note("MemberForceDeleted", &c),
                note("Other", "d"),
            ],
            1000,
        );
        let texts: Vec<&str> = got.iter().map(|(_, t)| t.as_str()).collect();
        assert_eq!(texts, [format!("{a}\n{b}"), c.clone(), "d".into()]);
        assert_eq!(got[2].0.reason, "Other");
        assert!(got.iter().all(|(_, t)| t.len() <= 1000));
    }
}
