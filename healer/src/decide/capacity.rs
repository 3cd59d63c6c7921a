//! Rules K1-K5: the member count the healer steers toward, and the capacity status.
//!
//! The recommendation itself (sampling members, stabilization windows, cooldowns, the
//! history kept on the bucket reservation) is the runtime's capacity evaluator; `decide`
//! receives its conclusion in [`crate::snapshot::CapacitySignal`] and applies one executor
//! with the same safety checks to every mode.

use celld_api::{CapacityMode, CapacityStatus};

use super::Ctx;

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
        return Target {
            members: members.unwrap_or(celld_api::defaults::MEMBERS),
            needs_evidence: false,
            status: None,
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
            }
        }
        CapacityMode::External => {
            // Rule K5 (External): the one `/scale` writer owns spec.members; until it
            // sets one, hold the applied count.
            let members_now = members.or(applied).unwrap_or(celld_api::defaults::MEMBERS);
            Target {
                members: members_now,
                needs_evidence: true,
                status: Some(recommendation(
                    CapacityMode::External,
                    "ExternalOwner",
                    &match members {
                        Some(m) => format!(
                            "spec.members belongs to the /scale writer: desired {m}, applied {}",
                            applied.map_or("none".to_string(), |a| a.to_string())
                        ),
                        None => {
                            "spec.members belongs to the /scale writer, which has not set it yet"
                                .to_string()
                        }
                    },
                    Some(members_now),
                )),
            }
        }
    }
}
