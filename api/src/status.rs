//! What the healer reports on a CelldFleet (`status`, written only by the healer).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::fleet::CapacityMode;

/// Observed state of a fleet.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CelldFleetStatus {
    /// Generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Ready, Progressing, Blocked, InfrastructureReady, ApplicationConverged.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Members the healer is steering toward.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_members: Option<i32>,
    /// Members the workload is currently asked for (its `spec.replicas`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_members: Option<i32>,
    /// Members ready, as the workload reports once it observed its spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_members: Option<i32>,
    /// Member Pods that exist and are not finished (the `/scale` status replicas).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub members: Option<i32>,
    /// Member Pods that exist, are not being deleted and are not Ready yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub joining_members: Option<i32>,
    /// Member Pods being deleted (graceful deletion in progress).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminating_members: Option<i32>,
    /// Label selector of the member Pods (for `/scale` writers such as an HPA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<String>,
    /// When Blocked last became true (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked_since: Option<String>,
    /// Name of the bucket reservation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation: Option<String>,
    /// One entry per member (StatefulSet fleets: by ordinal).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub member_states: Vec<MemberStatus>,
    /// Distinct celld versions the members report, sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runtime_versions: Vec<String>,
    /// What the members report about the application.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub application: Option<ApplicationStatus>,
    /// The capacity policy's latest decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<CapacityStatus>,
}

/// A status condition (same shape as `metav1.Condition`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Ready, Progressing, Blocked, InfrastructureReady or ApplicationConverged.
    #[serde(rename = "type")]
    pub type_: String,
    /// True, False or Unknown.
    pub status: String,
    /// CamelCase reason.
    pub reason: String,
    /// Human-readable explanation.
    pub message: String,
    /// When the status last changed (RFC 3339).
    pub last_transition_time: String,
    /// Generation this condition was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// State of one member.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemberStatus {
    /// Pod name.
    pub name: String,
    /// Ordinal (StatefulSet fleets).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ordinal: Option<i32>,
    /// Ready, Starting, Down, Unschedulable, Terminating, WaitingForImage,
    /// WaitingForConfig, CrashLooping, Missing, Replacing.
    pub state: String,
    /// Since when it has been in this state (RFC 3339), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// When the healer will give this member a fresh disk unless it returns (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replace_at: Option<String>,
    /// Zone of the node it runs on, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// Short explanation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Application view aggregated from members' `:8081/state?view=application`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationStatus {
    /// True, False or Unknown (stale or unsupported observations stay Unknown).
    pub converged: String,
    /// Why.
    pub reason: String,
    /// Members whose observation was fresh and understood.
    pub observed_members: i32,
    /// Details.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The capacity policy's latest decision.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapacityStatus {
    /// Mode.
    pub mode: CapacityMode,
    /// CamelCase reason.
    pub reason: String,
    /// Explanation.
    pub message: String,
    /// Members the policy wants.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_members: Option<i32>,
}
