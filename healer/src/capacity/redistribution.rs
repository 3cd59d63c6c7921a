//! After a policy addition: did load move onto the newcomers? Rules R1-R4.

use std::collections::BTreeMap;

use super::history::{History, Load, Outcome};
use super::policy::Policy;
use super::reasons::Reason;
use crate::time::Timestamp;

fn hot(p: &Policy, l: &Load) -> bool {
    l.pressure
        || l.cpu >= i64::from(p.cpu_high_millicores)
        || l.memory_mib >= i64::from(p.memory_high_mib)
}

fn judge(p: &Policy, before: &BTreeMap<String, Load>, now: &BTreeMap<String, Load>) -> Outcome {
    // Rule R2 (relief): a newcomer does real work, fewer incumbents are hot, or the fleet
    // as a whole does clearly more work than before the addition.
    let newcomer_works = now
        .iter()
        .any(|(id, l)| !before.contains_key(id) && l.cpu >= i64::from(p.cpu_low_millicores));
    let hot_before = before.values().filter(|l| hot(p, l)).count();
    let hot_now = now
        .iter()
        .filter(|(id, l)| before.contains_key(*id) && hot(p, l))
        .count();
    let cpu_before: i64 = before.values().map(|l| l.cpu).sum();
    let cpu_now: i64 = now.values().map(|l| l.cpu).sum();
    let margin = (cpu_before / 10).max(i64::from(p.cpu_low_millicores));
    if newcomer_works || hot_now < hot_before || cpu_now - cpu_before > margin {
        Outcome::Improved
    } else {
        Outcome::Ineffective
    }
}

/// Judges the addition in `h` against the load just stored in `h.load`. Returns the
/// reason that holds pressure-driven growth, if any; `count` is false for a sample
/// between intervals (it may change the outcome, never count toward a judgement).
pub fn assess(
    p: &Policy,
    h: &mut History,
    at: Timestamp,
    current: i32,
    count: bool,
) -> Option<Reason> {
    let a = h.addition.as_mut()?;
    // Rule R1 (moot): the fleet is below the addition's target again, or an incumbent is
    // gone; the comparison means nothing, so the addition is forgotten.
    if current < a.target || a.before.keys().any(|id| !h.load.contains_key(id)) {
        h.addition = None;
        return None;
    }
    let outcome = judge(p, &a.before, &h.load);
    if a.outcome != outcome {
        a.outcome = outcome;
        a.since = at.0;
        a.samples = 0;
    }
    if count {
        a.samples += 1;
    }
    // Rule R3 (observe): a judgement needs minSamples samples over the observation period.
    let observed = at.0 - a.since >= i64::from(p.redistribution_observation_seconds) * 1000;
    if a.samples < p.min_samples || !observed || a.judged {
        if a.judged {
            return Some(Reason::LoadNotRedistributed);
        }
        return Some(if h.ineffective_batches >= 2 {
            Reason::LoadNotRedistributed
        } else {
            Reason::ObservingRedistribution
        });
    }
    // Rule R4 (judge): relief clears the count; the first ineffective addition is
    // forgiven, from the second pressure-driven growth is held until load moves.
    match outcome {
        Outcome::Improved | Outcome::Unknown => {
            h.ineffective_batches = 0;
            h.addition = None;
            None
        }
        Outcome::Ineffective => {
            h.ineffective_batches += 1;
            if h.ineffective_batches < 2 {
                h.addition = None;
                None
            } else {
                a.judged = true;
                Some(Reason::LoadNotRedistributed)
            }
        }
    }
}
