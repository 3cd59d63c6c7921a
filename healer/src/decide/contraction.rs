//! Rules C1-C3: contraction, one member per step, each after the previous change rolled
//! out. A StatefulSet drops its highest ordinal, which keeps its claim (retention Retain):
//! growing back reattaches it. Automatic and External contraction also need evidence
//! that the survivors can absorb the removed member's load.

use crate::rule::Rule;
use celld_api::labels::member_name;

use super::capacity::Target;
use super::growth::set_replicas;
use super::{Ctx, Outcome, Reason, Step};
use crate::snapshot::{SurvivorEvidence, Workload, WorkloadKind};

/// One contraction step, or why it waits.
pub(crate) fn step(cx: &mut Ctx, w: &Workload, target: &Target) -> Step {
    let applied = w.replicas;
    let victim = match w.kind {
        WorkloadKind::StatefulSet => {
            format!("member {}", member_name(&cx.fleet.name, applied as u32 - 1))
        }
        WorkloadKind::Deployment => "a member".to_string(),
    };
    // Rule W5 (claim retention): the live StatefulSet's retention policy deletes the
    // claims of removed members (or all of them with the set), unlike the rendering;
    // removing a member would delete its disk. Held until the policy is Retain again.
    if !w.claim_retention.keeps_claims() && super::mutation::on("W5") {
        return Step::Hold(Outcome::report(
            Rule::W5,
            Reason::LifecycleBlocked,
            format!(
                "Not removing {victim}: {} {} has persistentVolumeClaimRetentionPolicy {}, which deletes disks; restore Retain (the rendering's) to let it shrink",
                w.kind.as_str(),
                w.name,
                w.claim_retention.describe()
            ),
        ));
    }
    // Rule C1 (rolled out): the previous change finished, every replica updated and ready.
    if !w.rolled_out() {
        return Step::Hold(Outcome::report(
            Rule::C1,
            Reason::Provisioning,
            format!("Waiting for the previous change to roll out before removing {victim}"),
        ));
    }
    // Rule C2 (survivor evidence): Automatic and External contraction must know the
    // survivors can take the load. No metrics is not evidence: the healer reports
    // CapacityUncertain and keeps every member.
    if target.needs_evidence {
        let why = match &cx.s.capacity.survivors {
            SurvivorEvidence::Sufficient => None,
            SurvivorEvidence::Unavailable => Some("no survivor metrics are available".to_string()),
            SurvivorEvidence::Insufficient(m) => Some(m.clone()),
        };
        if let Some(why) = why {
            return Step::Hold(Outcome::report(
                Rule::C2,
                Reason::CapacityUncertain,
                format!("Not removing {victim}: {why}"),
            ));
        }
    }
    // Rule C3 (one step): remove exactly one member.
    Step::Write(set_replicas(
        cx,
        w,
        applied - 1,
        Rule::C3,
        format!(
            "Shrinking from {applied} to {} members (target {}): removing {victim}",
            applied - 1,
            target.members
        ),
    ))
}
