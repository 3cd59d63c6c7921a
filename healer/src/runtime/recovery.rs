//! Rule R9's question to a member that is down: is it recovering its predecessor's log?
//!
//! celld answers every call on its internal port but the log-seal and log-tail calls
//! with 503 "predecessor recovery in progress" while it recovers at start, which may
//! take far longer than the replacement delay. Such a member is not down: its disk holds
//! the copy it recovers from. So before each decision about a StatefulSet fleet, each
//! member Pod that runs its celld container but is not ready (and not terminating, and
//! not on a node known to be unreachable) is asked `GET /state` on its exact Pod IP, as
//! the application view asks (1 s connect, 2 s in all, never through a Service). An
//! answer saying recovery is recorded in [`crate::clock::Observations`], on the
//! monotonic clock, for `decide` to read as `recovering_seen`. Any other answer, or
//! none, records nothing: only the member's own word keeps it from counting as down.
//!
//! Cost: one request per down member per reconcile of its fleet, to the member, not the
//! API server; a fleet whose members are all ready asks nothing.

use k8s_openapi::api::core::v1::Pod;

use super::context::Reconciler;
use super::members::{self, MEMBER_PORT};
use crate::application::Answer;
use crate::snapshot::NodeState;
use crate::zone::ZoneLookup;

/// Asks each of `pods` that is down but running whether it is recovering, at once, and
/// records those that say so.
pub(super) async fn listen(ctx: &Reconciler, pods: &[&Pod]) {
    let asked: Vec<(String, String)> = pods
        .iter()
        .filter(|p| down_but_running(p))
        .filter(|p| {
            let node = p.spec.as_ref().and_then(|s| s.node_name.as_deref());
            // A member on a node known to be unreachable cannot answer; asking would
            // only cost the connect timeout.
            !node.is_some_and(|n| matches!(ctx.zones.node_state(n), NodeState::Unreachable { .. }))
        })
        .filter_map(|p| {
            let uid = p.metadata.uid.clone()?;
            let ip = p.status.as_ref()?.pod_ip.clone()?;
            Some((uid, ip))
        })
        .collect();
    if asked.is_empty() {
        return;
    }
    let answers = futures::future::join_all(
        asked
            .iter()
            .map(|(_, ip)| members::fetch(ip, MEMBER_PORT, "/state")),
    )
    .await;
    let at = ctx.clocks.now().mono;
    let mut observed = ctx.memory.observed.lock().expect("observations");
    for ((uid, _), answer) in asked.iter().zip(answers) {
        if answer == Answer::Recovering {
            observed.heard_recovering(uid, at);
        }
    }
}

/// Not ready, not terminating, with a running `celld` container: a member that could
/// be recovering.
fn down_but_running(p: &Pod) -> bool {
    !members::ready(p) && p.metadata.deletion_timestamp.is_none() && members::started(p).is_some()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateRunning, ContainerStatus, PodCondition, PodStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    fn pod(ready: &str, running: bool, deleting: bool) -> Pod {
        let mut p = Pod::default();
        p.metadata.uid = Some("u".into());
        if deleting {
            p.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        }
        p.status = Some(PodStatus {
            pod_ip: Some("10.0.0.1".into()),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: ready.into(),
                ..PodCondition::default()
            }]),
            container_statuses: Some(vec![ContainerStatus {
                name: "celld".into(),
                state: Some(ContainerState {
                    running: running.then_some(ContainerStateRunning {
                        started_at: Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)),
                    }),
                    ..ContainerState::default()
                }),
                ..ContainerStatus::default()
            }]),
            ..PodStatus::default()
        });
        p
    }

    #[test]
    fn only_a_running_member_that_is_not_ready_is_asked() {
        assert!(down_but_running(&pod("False", true, false)));
        assert!(!down_but_running(&pod("True", true, false)));
        assert!(!down_but_running(&pod("False", false, false)));
        assert!(!down_but_running(&pod("False", true, true)));
    }
}
