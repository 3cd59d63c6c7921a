//! Rules K1-K6: the member count the healer steers toward, the capacity status, and the
//! first `spec.members` of an External fleet.
//!
//! The recommendation itself (sampling members, stabilization windows, cooldowns, the
//! history kept on the bucket reservation) is the runtime's capacity evaluator; `decide`
//! receives its conclusion in [`crate::snapshot::CapacitySignal`] and applies one executor
//! with the same safety checks to every mode.

use crate::rule::Rule;
use celld_api::{CapacityMode, CapacityStatus};

use super::{Ctx, Outcome};
use crate::plan::Action;

/// The target and how it came about.
#[derive(Clone, Debug)]
pub(crate) struct Target {
    /// Members to steer toward.
    pub members: i32,
    /// A decrease toward this target needs evidence that the survivors can take the
    /// load (Automatic and External modes).
    pub needs_evidence: bool,
    /// What to report in `status.capacity`.
    pub status: Option<CapacityStatus>,
    /// The fewest ready members the policy requires: `spec.members` by hand (K1-K3),
    /// `minMembers` in Automatic and External (K4, K5), the edited count after a manual
    /// edit below it. Below it the fleet is never Ready (rule S4).
    pub floor: i32,
}

/// Computes the target once and keeps it in the context.
pub(crate) fn compute(cx: &mut Ctx) -> Target {
    if let Some(t) = &cx.target {
        return t.clone();
    }
    let mut t = target(cx);
    // Belt and braces behind validation and the CRD bounds: the target never leaves
    // [0, the member limit], whatever a spec or a `/scale` writer says.
    t.members = t.members.clamp(0, celld_api::defaults::MAX_MEMBERS);
    // The floor never exceeds the target: a fleet at its target is never held unready.
    t.floor = t.floor.clamp(0, t.members);
    cx.target = Some(t.clone());
    t
}

fn target(cx: &Ctx) -> Target {
    let f = cx.fleet;
    let applied = cx.workload.map(|w| w.replicas);
    let members = f.members;
    let rec = cx.s.capacity.recommendation.as_ref();
    let Some(policy) = &f.capacity else {
        // Rule K1 (manual): spec.members decides.
        let members = members.unwrap_or(celld_api::defaults::MEMBERS);
        return Target {
            members,
            needs_evidence: false,
            status: None,
            floor: members,
        };
    };
    let declared = members.unwrap_or(celld_api::defaults::MEMBERS);
    let recommendation = |mode, reason: &str, message: &str, desired| CapacityStatus {
        mode,
        reason: reason.to_string(),
        message: message.to_string(),
        desired_members: desired,
    };
    match policy.mode {
        CapacityMode::Shadow => {
            // Rule K2 (Shadow): recommend only; spec.members decides.
            let status = match rec {
                Some(r) => recommendation(
                    CapacityMode::Shadow,
                    &r.reason,
                    &format!("Recommendation only: {}", r.message),
                    Some(r.members),
                ),
                None => recommendation(
                    CapacityMode::Shadow,
                    "NoRecommendation",
                    "The capacity evaluator has no recommendation yet",
                    None,
                ),
            };
            Target {
                members: declared,
                needs_evidence: false,
                status: Some(status),
                floor: declared,
            }
        }
        CapacityMode::ScaleOut => {
            // Rule K3 (ScaleOut): grow to the recommendation, never below spec.members.
            let wanted = rec.map_or(declared, |r| r.members.min(policy.max_members));
            let members = declared.max(wanted);
            let status = match rec {
                Some(r) => {
                    recommendation(CapacityMode::ScaleOut, &r.reason, &r.message, Some(members))
                }
                None => recommendation(
                    CapacityMode::ScaleOut,
                    "NoRecommendation",
                    "No recommendation; holding spec.members",
                    Some(members),
                ),
            };
            Target {
                members,
                needs_evidence: false,
                status: Some(status),
                floor: declared,
            }
        }
        CapacityMode::Automatic => {
            // Rule K4 (Automatic): follow the recommendation within [min, max] (a manual
            // edit may leave them); without one, hold the applied count (or start at
            // spec.members from nothing).
            let base = match (rec, applied) {
                (Some(r), _) => r.members,
                (None, Some(a)) if a >= 1 => a,
                _ => declared,
            };
            // A manual edit of spec.members wins one intent and may leave the bounds; it
            // is the operator's own decision, so it needs no survivor evidence either.
            let manual = rec.is_some_and(|r| r.manual);
            let members = if manual {
                base
            } else {
                base.clamp(
                    policy.min_members,
                    policy.max_members.max(policy.min_members),
                )
            };
            let status = match rec {
                Some(r) => recommendation(
                    CapacityMode::Automatic,
                    &r.reason,
                    &r.message,
                    Some(members),
                ),
                None => recommendation(
                    CapacityMode::Automatic,
                    "NoRecommendation",
                    "No recommendation; holding the current member count",
                    Some(members),
                ),
            };
            Target {
                members,
                needs_evidence: !manual,
                status: Some(status),
                floor: if manual { members } else { policy.min_members },
            }
        }
        CapacityMode::External => {
            // Rule K5 (External): the one `/scale` writer owns spec.members, within
            // [minMembers, maxMembers]; until it is set (rule K6 sets it first), the
            // count K6 would write.
            let (min, max) = bounds(policy);
            let start = external_start(cx, policy);
            let members_now = members.map_or(start, |m| m.clamp(min, max));
            let applied = applied.map_or("none".to_string(), |a| a.to_string());
            let message = match members {
                Some(m) if m < min => format!(
                    "spec.members belongs to the /scale writer, which asks for {m}: below minMembers {min}, so the fleet keeps {min} (applied {applied})"
                ),
                Some(m) if m > max => format!(
                    "spec.members belongs to the /scale writer, which asks for {m}: above maxMembers {max}, so the fleet stops at {max} (applied {applied})"
                ),
                Some(m) => format!(
                    "spec.members belongs to the /scale writer: desired {m}, applied {applied}"
                ),
                None => format!(
                    "spec.members belongs to the /scale writer and is not set yet; the healer sets it to {start} so that /scale can be read"
                ),
            };
            Target {
                members: members_now,
                needs_evidence: true,
                status: Some(recommendation(
                    CapacityMode::External,
                    "ExternalOwner",
                    &message,
                    Some(members_now),
                )),
                floor: min,
            }
        }
    }
}

/// `[minMembers, maxMembers]` of a policy (a max below the min reads as the min).
fn bounds(policy: &celld_api::defaults::CapacityPolicy) -> (i32, i32) {
    (
        policy.min_members,
        policy.max_members.max(policy.min_members),
    )
}

/// The first `spec.members` of an External fleet: the members it runs now, within the
/// policy's bounds (so a running fleet neither shrinks nor grows by being initialized),
/// or `minMembers` for a new one.
fn external_start(cx: &Ctx, policy: &celld_api::defaults::CapacityPolicy) -> i32 {
    let (min, max) = bounds(policy);
    cx.workload
        .filter(|w| cx.workload_is_ours(w))
        .map_or(min, |w| w.replicas.clamp(min, max))
}

/// Rule K6 (External start): an External fleet created from Git has no `spec.members`
/// (the `/scale` writer owns it), and the API server cannot serve `/scale` of an object
/// without the field its `specReplicasPath` names: no HPA or KEDA could read or drive
/// the fleet, ever. The healer writes the first value once, on the resourceVersion it
/// saw without one; Argo CD and Flux ignore the field for External fleets, so they
/// stay in sync, and the `/scale` writer owns it from its first write.
pub(crate) fn initialize_external(cx: &Ctx) -> Option<Outcome> {
    let f = cx.fleet;
    let policy = f
        .capacity
        .as_ref()
        .filter(|p| p.mode == CapacityMode::External)?;
    if f.members.is_some() {
        return None;
    }
    let members = external_start(cx, policy);
    Some(Outcome::act(
        Rule::K6,
        Action::InitializeMembers {
            uid: f.uid.clone(),
            resource_version: f.resource_version.clone(),
            members,
        },
        format!(
            "Setting spec.members to {members} (capacity mode External, none set yet) so that the /scale writer can read and drive the fleet"
        ),
    ))
}
