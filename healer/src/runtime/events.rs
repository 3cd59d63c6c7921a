//! Kubernetes Events (`events.k8s.io/v1`) on the CelldFleet: one for every write the
//! healer makes, and one for every change of the Blocked condition (Warning when it
//! becomes True, Normal when it clears), with the condition's reason.
//!
//! An Event that cannot be recorded is logged and counted; it never fails a reconcile.

use std::sync::Arc;

use celld_gen::api::CelldFleet;
use kube::Resource;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use tracing::warn;

use super::metrics::Metrics;

/// Records Events on fleets.
#[derive(Clone)]
pub struct Events {
    recorder: Recorder,
    metrics: Arc<Metrics>,
}

impl Events {
    /// A recorder reporting as `celld-healer`, instance `identity`.
    pub fn new(client: kube::Client, identity: &str, metrics: Arc<Metrics>) -> Events {
        Events {
            recorder: Recorder::new(
                client,
                Reporter {
                    controller: celld_gen::api::labels::HEALER_FIELD_MANAGER.into(),
                    instance: Some(identity.to_string()),
                },
            ),
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
        let ev = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: truncate(reason, 128),
            note: Some(truncate(&note, 1000)),
            action: truncate(action, 128),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&ev, &fleet.object_ref(&())).await {
            self.metrics.error("event");
            warn!(error = %e, reason, "could not record an Event");
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
