//! Whether the survivors of a contraction can absorb the removed member's load. Rules
//! S1-S3; the whole donor load is assumed to land on any single survivor.

use super::observation::{Observation, Sample};
use super::policy::Policy;
use crate::snapshot::SurvivorEvidence;
use crate::time::Timestamp;

fn fresh(t: Timestamp, now: Timestamp, max_age_ms: i64) -> bool {
    t.0 > 0 && t <= now && now.0 - t.0 <= max_age_ms
}

/// The sample is ready, quiet, low and fresh (rule S1 for one member).
fn low_and_fresh(p: &Policy, s: &Sample, now: Timestamp) -> bool {
    let age = i64::from(p.max_age_seconds) * 1000;
    let (Some(r), Some(m)) = (&s.runtime, &s.metrics) else {
        return false;
    };
    let window =
        (i64::from(p.min_window_seconds) * 1000)..=(i64::from(p.max_window_seconds) * 1000);
    s.ready
        && !s.identity.is_empty()
        && !r.pressured
        && !r.backlog
        && (0..i64::from(p.cpu_low_millicores)).contains(&m.cpu_millicores)
        && (0..i64::from(p.memory_low_mib)).contains(&m.memory_mib)
        && window.contains(&m.window_ms)
        && [r.sampled, r.received, m.at, m.received]
            .iter()
            .all(|t| fresh(*t, now, age))
        && r.sampled <= r.received
        && m.at <= m.received
}

fn memory(s: &Sample) -> i64 {
    let rt = s.runtime.as_ref().map_or(0, |r| r.memory_mib);
    let m = s.metrics.as_ref().map_or(0, |m| m.memory_mib);
    rt.max(m)
}

/// Evidence for removing `victim` (a Pod name; `None`: any member, as a Deployment lets
/// Kubernetes choose) from `applied` members.
pub fn survivors(
    p: &Policy,
    o: &Observation,
    applied: i32,
    victim: Option<&str>,
    now: Timestamp,
) -> SurvivorEvidence {
    let age = i64::from(p.max_age_seconds) * 1000;
    if o.samples.is_empty() || o.at.0 == 0 {
        return SurvivorEvidence::Unavailable;
    }
    // Rule S1 (low demand): a complete, fresh observation of exactly the applied members,
    // each ready, unpressured and below both low thresholds.
    let mut ids: Vec<&str> = o.samples.iter().map(|s| s.identity.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    let complete =
        o.complete && o.samples.len() == applied as usize && ids.len() == o.samples.len();
    if !complete || !fresh(o.at, now, age) {
        return SurvivorEvidence::Insufficient(
            "survivor health or capacity evidence incomplete".to_string(),
        );
    }
    if let Some(s) = o.samples.iter().find(|s| !low_and_fresh(p, s, now)) {
        return SurvivorEvidence::Insufficient(format!(
            "survivor health or capacity evidence incomplete: member {} is not ready, quiet, low and fresh",
            s.member
        ));
    }
    // Rule S2 (someone survives): at least two members, and the victim is one of them.
    if o.samples.len() < 2 {
        return SurvivorEvidence::Insufficient("no survivor capacity".to_string());
    }
    let donors: Vec<&Sample> = match victim {
        Some(v) => match o.samples.iter().find(|s| s.member == v) {
            Some(s) => vec![s],
            None => {
                return SurvivorEvidence::Insufficient(format!(
                    "member {v} was not observed (container generation changed)"
                ));
            }
        },
        None => o.samples.iter().collect(),
    };
    // Rule S3 (projected load): each donor's load fits on every other member under the
    // high thresholds.
    for d in donors {
        let (Some(dm), dmem) = (&d.metrics, memory(d)) else {
            continue;
        };
        for s in o.samples.iter().filter(|s| s.member != d.member) {
            let Some(sm) = &s.metrics else { continue };
            let cpu_fits = dm.cpu_millicores < i64::from(p.cpu_high_millicores) - sm.cpu_millicores;
            let mem_fits = dmem < i64::from(p.memory_high_mib) - memory(s);
            if !cpu_fits || !mem_fits {
                return SurvivorEvidence::Insufficient(format!(
                    "projected capacity exceeded on member {} if {} is removed",
                    s.member, d.member
                ));
            }
        }
    }
    SurvivorEvidence::Sufficient
}
