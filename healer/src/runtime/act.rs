//! Executing one [`Action`]: exactly the write its documentation names, with its
//! preconditions, and nothing else.
//!
//! | action | request | preconditions |
//! | --- | --- | --- |
//! | `AddFleetFinalizer`, `RemoveFleetFinalizer` | JSON patch of the CelldFleet's `metadata.finalizers` | `test` ops on `metadata.uid` and `metadata.resourceVersion` |
//! | `InitializeMembers` | JSON patch adding the CelldFleet's `spec.members`, field manager `celld-healer` | `test` ops on `metadata.uid` and `metadata.resourceVersion` (the version without the field) |
//! | `SetReplicas` | server-side apply `{apiVersion, kind, metadata: {name, namespace, uid, resourceVersion}, spec: {replicas}}`, field manager `celld-healer`; forced only after a field-manager conflict with GitOps engines alone | uid and resourceVersion in the applied object (both attempts) |
//! | `ForceDeletePod` | delete, `gracePeriodSeconds: 0` | uid |
//! | `DeletePod` | delete, the Pod's own grace | uid, resourceVersion |
//! | `StartHandoff` | 1. JSON patch adding the replacement finalizer, index label and uncommitted record; 2. delete (own grace); 3. JSON patch setting `committed: true` | 1: uid, resourceVersion; 2: uid and the resourceVersion returned by 1; 3: uid, and a `test` that the record is still the uncommitted one written in 1 |
//! | `DeleteClaim` | delete | uid, resourceVersion |
//! | `ReleaseHandoff`, `AbortHandoff` | JSON patch removing the healer's finalizer, label and annotation (others kept) | uid, resourceVersion |
//! | `DeleteWorkload` | delete, `propagationPolicy: Foreground` | uid, resourceVersion |
//!
//! **Why `SetReplicas` is forced after a conflict, and why that is safe.** The healer is
//! the only writer of `spec.replicas` that changes it; others may co-own the field at its
//! live value: Argo CD's `RespectIgnoreDifferences=true` copies the live value of every
//! ignored field into what it applies (server-side, as `argocd-controller`), Flux adopts
//! it the same way, and before Kubernetes 1.36 Git creates the StatefulSet with
//! `replicas: 0` and so owns that 0. An unforced apply of a new value conflicts with
//! every such co-owner, so after a sync no fleet could grow or shrink. The healer
//! therefore applies unforced first and, on a field-manager conflict with GitOps engines
//! only ([`celld_api::labels::GITOPS_FIELD_MANAGERS`]), again with `force`, carrying the
//! same uid and resourceVersion: the forced apply succeeds only on
//! the very object the decision was made from, whose value every co-owner holds (a write
//! that changed the value would have changed the resourceVersion), so it takes over a
//! value nobody disputes, never one someone else just wrote. An engine that would write
//! another value (one without ignore rules, or one applying a live value it read before
//! the healer changed it) is refused by the install bundle's replicas policy. The
//! take-over is logged with the managers named and counted as outcome `taken_over`. Any
//! other co-owner (`kubectl scale` used to stop a fleet, a person's own apply) is a
//! deliberate act: the healer changes nothing, reports it as a Warning Event
//! (`ReplicasOwnedElsewhere`) naming the manager, and retries with back-off until that
//! writer lets go.
//!
//! **JSON patch `test` ops, uid in an apply body.** A failed `test`, and a `metadata.uid`
//! in an apply body that is not the object's, are answered 422 (not 409) by the API
//! server; those, 409 and 404 are treated as "the object changed since the decision": the
//! reconcile ends and runs again from the watch caches. (A stale resourceVersion in the
//! apply body is a 409; both checked in the end-to-end tests.) A JSON patch that cannot
//! be applied, a failed `test` among them, is answered with a bare 422: reason `Invalid`,
//! the generic message and no causes, where a real validation error names its fields.
//! Read as an error, it sent the fleet into the error back-off (up to minutes) while the
//! caches caught up; at 1,000 fleets that held handoffs for minutes. Only the answer to
//! our own JSON patches is read so ([`ActError::from_json_patch`]).
//!
//! Every step first checks the leader [`Gate`]: a replica that lost the lease, or is
//! shutting down, stops between two steps of a handoff rather than after it. An
//! interrupted handoff is resolved by the next `decide` (a prepared one is aborted, a
//! committed one finished).

use std::collections::BTreeMap;
use std::sync::Arc;

use celld_api::CelldFleet;
use celld_api::labels::{
    FLEET_FINALIZER, HEALER_FIELD_MANAGER, REPLACEMENT_FINALIZER, REPLACEMENT_INDEX,
    REPLACEMENT_RECORD,
};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions, PropagationPolicy};
use kube::{Api, Client};
use serde_json::{Value, json};
use tracing::{error, info};

use super::cli::HaltPoint;
use super::leader::Gate;
use crate::plan::{Action, ClaimDeletion, Handoff};
use crate::record::HandoffRecord;
use crate::snapshot::WorkloadKind;

/// Why a write was not made.
#[derive(Debug, thiserror::Error)]
pub enum ActError {
    /// The object changed (or went) since the decision: a precondition failed. Nothing
    /// was written by this step.
    #[error("the object changed since the decision: {0}")]
    Conflict(String),
    /// Another field manager owns `spec.replicas`.
    #[error("another field manager owns spec.replicas: {0}")]
    ManagerConflict(String),
    /// This replica may not write (lease lost, or shutting down).
    #[error("this replica may not write now (not the leader, or shutting down)")]
    NotLeader,
    /// Any other API error.
    #[error("API error: {0}")]
    Api(#[from] kube::Error),
}

impl ActError {
    fn from_kube(e: kube::Error) -> ActError {
        match e {
            kube::Error::Api(s) => {
                let manager_conflict = s.code == 409
                    && (s.details.as_ref().is_some_and(|d| {
                        d.causes.iter().any(|c| c.reason == "FieldManagerConflict")
                    }) || s.message.starts_with("Apply failed with"));
                if manager_conflict {
                    ActError::ManagerConflict(s.message)
                } else if s.code == 409
                    || s.code == 404
                    || (s.code == 422 && (s.message.contains("test") || s.message.contains("uid")))
                {
                    ActError::Conflict(format!("{} ({})", s.message, s.code))
                } else {
                    ActError::Api(kube::Error::Api(s))
                }
            }
            e => ActError::Api(e),
        }
    }

    /// The error of a JSON patch with `test` ops. The API server answers a patch it
    /// cannot apply, a failed `test` among them, with a bare 422: reason `Invalid`, its
    /// generic message, and no details. Only our JSON patches are read this way (a
    /// webhook or policy refusing another write keeps its error and its back-off).
    fn from_json_patch(e: kube::Error) -> ActError {
        match e {
            kube::Error::Api(s)
                if s.code == 422
                    && s.reason == "Invalid"
                    && s.message == UNAPPLIABLE_PATCH
                    && s.details.as_ref().is_none_or(|d| {
                        d.name.is_empty() && d.kind.is_empty() && d.causes.is_empty()
                    }) =>
            {
                ActError::Conflict(format!(
                    "the patch's tests no longer hold: the object changed since the decision ({})",
                    s.code
                ))
            }
            e => ActError::from_kube(e),
        }
    }

    /// Metric outcome label.
    pub fn outcome(&self) -> &'static str {
        match self {
            ActError::Conflict(_) => "conflict",
            ActError::ManagerConflict(_) => "manager_conflict",
            ActError::NotLeader => "not_leader",
            ActError::Api(_) => "error",
        }
    }
}

/// The field managers an apply conflicted with, as the API server names them in its
/// answer (`conflict with "argocd-controller" using apps/v1: .spec.replicas`).
fn conflicting_managers(message: &str) -> Vec<String> {
    let mut out: Vec<String> = message
        .split("conflict with \"")
        .skip(1)
        .filter_map(|rest| rest.split_once('"').map(|(name, _)| name.to_string()))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Whether every manager of a conflict is a GitOps engine
/// ([`celld_api::labels::GITOPS_FIELD_MANAGERS`]): the only co-owners the healer takes
/// `spec.replicas` over from.
fn only_gitops_engines(message: &str) -> bool {
    let managers = conflicting_managers(message);
    !managers.is_empty()
        && managers
            .iter()
            .all(|m| celld_api::labels::GITOPS_FIELD_MANAGERS.contains(&m.as_str()))
}

/// How a write went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Written {
    /// As planned.
    Plain,
    /// `SetReplicas` took `spec.replicas` over from co-owners holding its live value (the
    /// conflict's message, naming them): see the module documentation.
    TookOver(String),
}

/// Executes actions for one fleet.
pub struct Actor<'a> {
    /// Client.
    pub client: &'a Client,
    /// The fleet (namespace, and its cached finalizers for the finalizer edits).
    pub fleet: &'a CelldFleet,
    /// The cached Pod the action names (handoff steps, release, abort), if any.
    pub pod: Option<Arc<Pod>>,
    /// Leader gate, checked before every request.
    pub gate: &'a Gate,
    /// Tests only: halt after this handoff step.
    pub halt_after: Option<HaltPoint>,
}

/// A JSON-pointer path segment (RFC 6901 escaping).
fn esc(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// The message of the API server's bare 422 for a JSON patch it cannot apply (checked
/// against kube-apiserver 1.36 with a failed `test` op).
const UNAPPLIABLE_PATCH: &str = "the server rejected our request due to an error in our request";

/// A JSON patch from `ops`, a literal of ours (never input).
pub(super) fn json_patch(ops: Value) -> Patch<()> {
    Patch::Json(serde_json::from_value::<json_patch::Patch>(ops).expect("a valid JSON patch"))
}

fn preconditions(uid: &str, rv: Option<&str>) -> Preconditions {
    Preconditions {
        uid: Some(uid.to_string()),
        resource_version: rv.map(str::to_string),
    }
}

impl Actor<'_> {
    fn ns(&self) -> &str {
        self.fleet.metadata.namespace.as_deref().unwrap_or_default()
    }

    fn check_gate(&self) -> Result<(), ActError> {
        if self.gate.may_act_in(self.ns()) {
            Ok(())
        } else {
            Err(ActError::NotLeader)
        }
    }

    async fn halt(&self, point: HaltPoint) {
        if self.halt_after == Some(point) {
            // Tests only: freeze here, as if the process had been killed at this point.
            self.gate.close();
            error!(
                ?point,
                "halting for the test (--test-halt-after): no further writes"
            );
            std::future::pending::<()>().await;
        }
    }

    /// Executes `action`.
    pub async fn execute(&self, action: &Action) -> Result<Written, ActError> {
        self.check_gate()?;
        let written: Result<(), ActError> = match action {
            Action::AddFleetFinalizer {
                uid,
                resource_version,
            } => self.fleet_finalizer(uid, resource_version, true).await,
            Action::RemoveFleetFinalizer {
                uid,
                resource_version,
            } => self.fleet_finalizer(uid, resource_version, false).await,
            Action::InitializeMembers {
                uid,
                resource_version,
                members,
            } => {
                self.initialize_members(uid, resource_version, *members)
                    .await
            }
            Action::SetReplicas {
                kind,
                name,
                uid,
                resource_version,
                replicas,
                ..
            } => {
                return Ok(
                    match self
                        .set_replicas(*kind, name, uid, resource_version, *replicas)
                        .await?
                    {
                        Some(owners) => Written::TookOver(owners),
                        None => Written::Plain,
                    },
                );
            }
            Action::ForceDeletePod { name, uid } => {
                let dp = DeleteParams {
                    grace_period_seconds: Some(0),
                    preconditions: Some(preconditions(uid, None)),
                    ..DeleteParams::default()
                };
                self.pods()
                    .delete(name, &dp)
                    .await
                    .map_err(ActError::from_kube)?;
                Ok(())
            }
            Action::DeletePod {
                name,
                uid,
                resource_version,
            } => {
                let dp = DeleteParams {
                    preconditions: Some(preconditions(uid, Some(resource_version))),
                    ..DeleteParams::default()
                };
                self.pods()
                    .delete(name, &dp)
                    .await
                    .map_err(ActError::from_kube)?;
                Ok(())
            }
            Action::StartHandoff(h) => self.handoff(h).await,
            Action::DeleteClaim {
                name,
                uid,
                resource_version,
                purpose,
            } => {
                let dp = DeleteParams {
                    preconditions: Some(preconditions(uid, Some(resource_version))),
                    ..DeleteParams::default()
                };
                Api::<PersistentVolumeClaim>::namespaced(self.client.clone(), self.ns())
                    .delete(name, &dp)
                    .await
                    .map_err(ActError::from_kube)?;
                if matches!(purpose, ClaimDeletion::Handoff { .. }) {
                    self.halt(HaltPoint::ClaimDelete).await;
                }
                Ok(())
            }
            Action::ReleaseHandoff {
                name,
                uid,
                resource_version,
            }
            | Action::AbortHandoff {
                name,
                uid,
                resource_version,
                ..
            } => self.release(name, uid, resource_version).await,
            Action::DeleteWorkload {
                kind,
                name,
                uid,
                resource_version,
            } => {
                let dp = DeleteParams {
                    propagation_policy: Some(PropagationPolicy::Foreground),
                    preconditions: Some(preconditions(uid, Some(resource_version))),
                    ..DeleteParams::default()
                };
                let r = match kind {
                    WorkloadKind::StatefulSet => {
                        Api::<StatefulSet>::namespaced(self.client.clone(), self.ns())
                            .delete(name, &dp)
                            .await
                            .map(|_| ())
                    }
                    WorkloadKind::Deployment => {
                        Api::<Deployment>::namespaced(self.client.clone(), self.ns())
                            .delete(name, &dp)
                            .await
                            .map(|_| ())
                    }
                };
                r.map_err(ActError::from_kube)
            }
        };
        written.map(|()| Written::Plain)
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), self.ns())
    }

    async fn fleet_finalizer(&self, uid: &str, rv: &str, add: bool) -> Result<(), ActError> {
        let m = &self.fleet.metadata;
        if m.uid.as_deref() != Some(uid) || m.resource_version.as_deref() != Some(rv) {
            return Err(ActError::Conflict(
                "the cached CelldFleet moved on since the decision".into(),
            ));
        }
        let mut fins: Vec<String> = m.finalizers.clone().unwrap_or_default();
        if add {
            if !fins.iter().any(|f| f == FLEET_FINALIZER) {
                fins.push(FLEET_FINALIZER.to_string());
            }
        } else {
            fins.retain(|f| f != FLEET_FINALIZER);
        }
        let patch = json_patch(json!([
            {"op": "test", "path": "/metadata/uid", "value": uid},
            {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
            {"op": "add", "path": "/metadata/finalizers", "value": fins},
        ]));
        Api::<CelldFleet>::namespaced(self.client.clone(), self.ns())
            .patch(
                m.name.as_deref().unwrap_or_default(),
                &PatchParams::default(),
                &patch,
            )
            .await
            .map_err(ActError::from_json_patch)?;
        Ok(())
    }

    async fn initialize_members(&self, uid: &str, rv: &str, members: i32) -> Result<(), ActError> {
        // `add` would replace a value another writer set since: the resourceVersion test
        // is what makes this a first write only.
        let patch = json_patch(json!([
            {"op": "test", "path": "/metadata/uid", "value": uid},
            {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
            {"op": "add", "path": "/spec/members", "value": members},
        ]));
        let pp = PatchParams {
            field_manager: Some(HEALER_FIELD_MANAGER.to_string()),
            ..PatchParams::default()
        };
        Api::<CelldFleet>::namespaced(self.client.clone(), self.ns())
            .patch(
                self.fleet.metadata.name.as_deref().unwrap_or_default(),
                &pp,
                &patch,
            )
            .await
            .map_err(ActError::from_json_patch)?;
        Ok(())
    }

    async fn set_replicas(
        &self,
        kind: WorkloadKind,
        name: &str,
        uid: &str,
        rv: &str,
        replicas: i32,
    ) -> Result<Option<String>, ActError> {
        let body = json!({
            "apiVersion": "apps/v1",
            "kind": kind.as_str(),
            "metadata": {
                "name": name,
                "namespace": self.ns(),
                "uid": uid,
                "resourceVersion": rv,
            },
            "spec": {"replicas": replicas},
        });
        let apply = |pp: PatchParams| {
            let body = &body;
            async move {
                match kind {
                    WorkloadKind::StatefulSet => {
                        Api::<StatefulSet>::namespaced(self.client.clone(), self.ns())
                            .patch(name, &pp, &Patch::Apply(body))
                            .await
                            .map(|_| ())
                    }
                    WorkloadKind::Deployment => {
                        Api::<Deployment>::namespaced(self.client.clone(), self.ns())
                            .patch(name, &pp, &Patch::Apply(body))
                            .await
                            .map(|_| ())
                    }
                }
                .map_err(ActError::from_kube)
            }
        };
        match apply(PatchParams::apply(HEALER_FIELD_MANAGER)).await {
            Err(ActError::ManagerConflict(message)) if only_gitops_engines(&message) => {
                // Co-owners hold the value the decision saw (the resourceVersion in the
                // body pins it); see the module documentation.
                self.check_gate()?;
                apply(PatchParams::apply(HEALER_FIELD_MANAGER).force()).await?;
                Ok(Some(conflicting_managers(&message).join(", ")))
            }
            r => r.map(|()| None),
        }
    }

    /// The cached Pod, checked against the identity the decision named.
    fn cached_pod(&self, name: &str, uid: &str, rv: &str) -> Result<Arc<Pod>, ActError> {
        let pod = self
            .pod
            .clone()
            .filter(|p| p.metadata.name.as_deref() == Some(name))
            .ok_or_else(|| ActError::Conflict(format!("Pod {name} is no longer in the cache")))?;
        if pod.metadata.uid.as_deref() != Some(uid)
            || pod.metadata.resource_version.as_deref() != Some(rv)
        {
            return Err(ActError::Conflict(format!(
                "the cached Pod {name} moved on since the decision"
            )));
        }
        Ok(pod)
    }

    async fn handoff(&self, h: &Handoff) -> Result<(), ActError> {
        let pods = self.pods();
        let pod = self.cached_pod(&h.pod, &h.pod_uid, &h.pod_resource_version)?;
        let m = &pod.metadata;
        let uncommitted = HandoffRecord {
            committed: false,
            ..h.record.clone()
        };
        // Step 1, prepare: finalizer, index label and uncommitted record.
        let mut fins = m.finalizers.clone().unwrap_or_default();
        if !fins.iter().any(|f| f == REPLACEMENT_FINALIZER) {
            fins.push(REPLACEMENT_FINALIZER.to_string());
        }
        let mut labels: BTreeMap<String, String> = m.labels.clone().unwrap_or_default();
        labels.insert(REPLACEMENT_INDEX.to_string(), h.record.identity.clone());
        let mut annotations: BTreeMap<String, String> = m.annotations.clone().unwrap_or_default();
        annotations.insert(REPLACEMENT_RECORD.to_string(), uncommitted.encode());
        let prepared = pods
            .patch(
                &h.pod,
                &PatchParams::default(),
                &json_patch(json!([
                    {"op": "test", "path": "/metadata/uid", "value": h.pod_uid},
                    {"op": "test", "path": "/metadata/resourceVersion", "value": h.pod_resource_version},
                    {"op": "add", "path": "/metadata/finalizers", "value": fins},
                    {"op": "add", "path": "/metadata/labels", "value": labels},
                    {"op": "add", "path": "/metadata/annotations", "value": annotations},
                ])),
            )
            .await
            .map_err(ActError::from_json_patch)?;
        let prepared_rv = prepared
            .metadata
            .resource_version
            .clone()
            .unwrap_or_default();
        info!(pod = %h.pod, claim = %h.claim, "handoff step 1 (prepare) acknowledged");
        self.halt(HaltPoint::Prepare).await;

        // Step 2, the commit point: the guarded Pod delete.
        self.check_gate()?;
        let dp = DeleteParams {
            preconditions: Some(preconditions(&h.pod_uid, Some(&prepared_rv))),
            ..DeleteParams::default()
        };
        pods.delete(&h.pod, &dp)
            .await
            .map_err(ActError::from_kube)?;
        info!(pod = %h.pod, "handoff step 2 (guarded Pod delete) acknowledged");
        self.halt(HaltPoint::Delete).await;

        // Step 3, commit: only if the record is still the uncommitted one we wrote.
        self.check_gate()?;
        let committed = HandoffRecord {
            committed: true,
            ..h.record.clone()
        };
        let path = format!("/metadata/annotations/{}", esc(REPLACEMENT_RECORD));
        pods.patch(
            &h.pod,
            &PatchParams::default(),
            &json_patch(json!([
                {"op": "test", "path": "/metadata/uid", "value": h.pod_uid},
                {"op": "test", "path": path, "value": uncommitted.encode()},
                {"op": "replace", "path": path, "value": committed.encode()},
            ])),
        )
        .await
        .map_err(ActError::from_json_patch)?;
        info!(pod = %h.pod, "handoff step 3 (commit) acknowledged");
        self.halt(HaltPoint::Commit).await;
        Ok(())
    }

    async fn release(&self, name: &str, uid: &str, rv: &str) -> Result<(), ActError> {
        let pod = self.cached_pod(name, uid, rv)?;
        let m = &pod.metadata;
        let mut ops = vec![
            json!({"op": "test", "path": "/metadata/uid", "value": uid}),
            json!({"op": "test", "path": "/metadata/resourceVersion", "value": rv}),
        ];
        if let Some(fins) = &m.finalizers
            && fins.iter().any(|f| f == REPLACEMENT_FINALIZER)
        {
            let kept: Vec<&String> = fins
                .iter()
                .filter(|f| *f != REPLACEMENT_FINALIZER)
                .collect();
            ops.push(json!({"op": "add", "path": "/metadata/finalizers", "value": kept}));
        }
        if m.labels
            .as_ref()
            .is_some_and(|l| l.contains_key(REPLACEMENT_INDEX))
        {
            ops.push(json!({"op": "remove", "path": format!("/metadata/labels/{}", esc(REPLACEMENT_INDEX))}));
        }
        if m.annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(REPLACEMENT_RECORD))
        {
            ops.push(json!({"op": "remove", "path": format!("/metadata/annotations/{}", esc(REPLACEMENT_RECORD))}));
        }
        self.pods()
            .patch(
                name,
                &PatchParams::default(),
                &json_patch(Value::Array(ops)),
            )
            .await
            .map_err(ActError::from_json_patch)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16, message: &str, details: serde_json::Value) -> kube::Error {
        kube::Error::Api(
            serde_json::from_value(json!({
                "status": "Failure", "code": code, "reason": "Invalid",
                "message": message, "details": details
            }))
            .expect("a Status"),
        )
    }

    /// What the API server answers for a JSON patch whose `test` op fails (checked
    /// against kube-apiserver 1.36): the object changed, so the fleet is looked at again,
    /// not backed off as an error. A validation error, which names its fields, stays one.
    #[test]
    fn a_failed_json_patch_test_is_a_conflict_and_a_validation_error_is_not() {
        let failed_test = || status(422, UNAPPLIABLE_PATCH, json!({}));
        assert!(matches!(
            ActError::from_json_patch(failed_test()),
            ActError::Conflict(_)
        ));
        // Any other write refused the same way (say, a webhook's bare 422) stays an error.
        assert!(matches!(
            ActError::from_kube(failed_test()),
            ActError::Api(_)
        ));
        let invalid = status(
            422,
            "Pod \"a\" is invalid: metadata.labels: Invalid value",
            json!({"name": "a", "kind": "Pod",
                   "causes": [{"reason": "FieldValueInvalid", "field": "metadata.labels"}]}),
        );
        assert!(matches!(
            ActError::from_json_patch(invalid),
            ActError::Api(_)
        ));
        let gone = status(404, "pods \"a\" not found", json!({"name": "a"}));
        assert!(matches!(ActError::from_kube(gone), ActError::Conflict(_)));
    }

    #[test]
    fn pointer_segments_are_escaped() {
        assert_eq!(
            esc("fleet.celld.dev/replacement-claim"),
            "fleet.celld.dev~1replacement-claim"
        );
        assert_eq!(esc("a~b"), "a~0b");
    }

    #[test]
    fn conflicts_are_classified() {
        let st = |code: u16, msg: &str| {
            kube::Error::Api(Box::new(kube::core::Status {
                code,
                message: msg.into(),
                ..kube::core::Status::failure(msg, "")
            }))
        };
        assert!(matches!(
            ActError::from_kube(st(409, "Operation cannot be fulfilled")),
            ActError::Conflict(_)
        ));
        assert!(matches!(
            ActError::from_kube(st(422, "the server rejected our request: test failed")),
            ActError::Conflict(_)
        ));
        assert!(matches!(
            ActError::from_kube(st(
                409,
                "Apply failed with 1 conflict: conflict with \"kubectl\""
            )),
            ActError::ManagerConflict(_)
        ));
        // Only GitOps engines are taken over from; a person's `kubectl scale` is not.
        let argo = "Apply failed with 1 conflict: conflict with \"argocd-controller\" using apps/v1: .spec.replicas";
        assert_eq!(conflicting_managers(argo), ["argocd-controller"]);
        assert!(only_gitops_engines(argo));
        let both = "Apply failed with 2 conflicts: conflict with \"kustomize-controller\" using apps/v1: .spec.replicas\nconflict with \"kubectl\" with subresource \"scale\" using apps/v1: .spec.replicas";
        assert_eq!(
            conflicting_managers(both),
            ["kubectl", "kustomize-controller"]
        );
        assert!(!only_gitops_engines(both));
        assert!(!only_gitops_engines("Apply failed with 1 conflict"));
        assert!(matches!(
            ActError::from_kube(st(403, "forbidden")),
            ActError::Api(_)
        ));
    }
}
