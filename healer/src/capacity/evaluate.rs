//! One evaluation: policy + history + observation + applied count -> history + decision.
//!
//! Rules, in order (each named where it is applied):
//! - E1 valid input: an unusable policy, applied count or observation time restarts the
//!   windows (`InvalidObservation`).
//! - E2 fingerprints: a policy or membership change restarts the windows (`PolicyChanged`
//!   when that is all there is to say).
//! - E3 intervals: an observation sooner than sampleIntervalSeconds after the last counted
//!   one is intermediate: it may invalidate a window, never count toward one; otherwise
//!   the last counted decision stands as it was (an unexecuted intent included), so the
//!   status does not change while the evidence does not.
//! - E4 gaps: no counted observation for longer than maxAgeSeconds restarts the windows.
//! - E5 pending: an applied member without a fresh runtime sample while Ready makes the
//!   fleet wait (`PendingCapacity`, `IneffectiveCapacity` after the provisioning timeout).
//! - E6 complete: every applied member needs fresh runtime and metrics samples
//!   (`IncompleteMetrics`, naming the first member without).
//! - E7 floor: below minMembers counts as high load (still through a stable window).
//! - E8 advancing: a counted observation needs every member's both sources to have moved
//!   since the last one (`RepeatedSamples`).
//! - E9 stabilization: minSamples samples spanning the stabilization period
//!   (`StabilizingOut` / `StabilizingIn`).
//! - E10 cooldown: from the last durable member-count change, manual ones included
//!   (`RateLimited`).
//! - E11 bounds: a policy step stays within [minMembers, maxMembers] (`AtMaximum`,
//!   `AtMinimum`).
//! - E12 manual edit: a change of spec.members wins one intent, in every mode but
//!   External, and may leave the bounds (`ManualOverride`).
//! - E13 durable actions: a change of the applied count since the last evaluation is
//!   recorded as an action (cooldowns, redistribution baseline, pending window).
//! - E14 external: External mode evaluates nothing (`ExternalOwner`).
//!
//! Over 500 lines on purpose: the rules above are one ordered pass over one history
//! (evidence, redistribution, policy and reasons are already their own modules), and
//! the order is what makes them right, so it stays readable in one file.

use celld_api::CapacityMode;

use super::evidence;
use super::history::{History, Load, Remembered, Stamp};
use super::observation::{Observation, Problem, Source};
use super::policy::{self, Policy};
use super::reasons::Reason;
use super::redistribution;
use crate::snapshot::{CapacitySignal, Recommendation, SurvivorEvidence};
use crate::time::Timestamp;

/// The member counts the evaluator is told about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    /// metadata.uid of the fleet (a history of another fleet is dropped).
    pub fleet_uid: String,
    /// spec.members as it stands (the manual intent; the `/scale` writer's in External).
    pub declared: i32,
    /// The workload's replicas (0 when there is no workload yet).
    pub members: i32,
    /// The Pod a contraction would remove (the highest ordinal of a StatefulSet); `None`
    /// when Kubernetes chooses (Deployment).
    pub victim: Option<String>,
}

/// What the evaluator concluded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// The policy mode.
    pub mode: CapacityMode,
    /// Why.
    pub reason: Reason,
    /// For `status.capacity.message`.
    pub message: String,
    /// Members wanted.
    pub desired: i32,
    /// The policy may act on `desired` now (a policy step, not a repeat or a wait).
    pub actionable: bool,
    /// `desired` comes from a manual edit (bounds do not apply; no survivor evidence).
    pub manual: bool,
    /// Whether survivors could absorb a removed member now.
    pub survivors: SurvivorEvidence,
    /// The stabilization window under way, for metrics: the message leaves its moving
    /// counts out, so the status changes only when the decision does.
    pub window: Option<Window>,
}

/// A stabilization window under way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    /// Samples counted so far.
    pub samples: i32,
    /// Seconds since it began.
    pub seconds: i64,
}

impl Decision {
    /// What rules K1-K5 consume. Shadow shows the recommendation as it is; ScaleOut and
    /// Automatic see a change only when it may be acted on, and the applied count
    /// otherwise, so a repeated or waiting decision never moves the fleet.
    pub fn signal(&self, applied: i32) -> CapacitySignal {
        let members = match self.mode {
            CapacityMode::Shadow => self.desired,
            _ if self.actionable || self.manual => self.desired,
            _ => applied,
        };
        let recommendation = (self.mode != CapacityMode::External).then(|| Recommendation {
            members,
            reason: self.reason.as_str().to_string(),
            message: self.message.clone(),
            manual: self.manual,
        });
        CapacitySignal {
            recommendation,
            survivors: self.survivors.clone(),
        }
    }
}

fn at_ms(t: Option<i64>) -> Timestamp {
    Timestamp(t.unwrap_or(0))
}

/// Rule E13: records a durable change of the applied count from `from` to `to` at `at`.
/// `policy_step` is false for manual edits, which get no redistribution baseline.
pub fn record_action(h: &mut History, at: Timestamp, from: i32, to: i32, policy_step: bool) {
    h.actionable = false;
    h.last_action = Some(at.0);
    if !policy_step {
        h.load.clear();
    }
    if to > from {
        if policy_step && h.load.len() == from as usize {
            h.addition = Some(super::history::Addition {
                outcome: super::history::Outcome::Unknown,
                before: h.load.clone(),
                target: to,
                since: at.0,
                samples: 0,
                judged: false,
            });
        }
        h.reset_windows();
        h.pending_since = Some(at.0);
    } else {
        // A contraction keeps the low window: the next step may follow after its cooldown.
        h.reset_high();
    }
}

/// Evaluates one observation. `history` is what the annotation held (`None`: nothing, or
/// nothing usable); the returned history is what it should hold now.
pub fn evaluate(
    p: &Policy,
    history: Option<History>,
    o: &Observation,
    applied: &Applied,
    now: Timestamp,
) -> (History, Decision) {
    let mut h = history
        .filter(|h| h.fleet_uid == applied.fleet_uid)
        .unwrap_or_else(|| History::new(&applied.fleet_uid, applied.declared));
    let current = applied.members;
    let survivors = evidence::survivors(p, o, current, applied.victim.as_deref(), now);
    let decision = |reason: Reason, message: String, desired: i32| Decision {
        mode: p.mode,
        reason,
        message,
        desired,
        actionable: false,
        manual: false,
        survivors: survivors.clone(),
        window: None,
    };

    // Rule E13 (durable actions): the applied count moved since the last evaluation.
    if let Some(last) = h.last_applied
        && last != current
        && current > 0
    {
        let policy_step = h.manual_target == 0
            && h.decision.as_ref().is_some_and(|d| d.desired == current)
            && p.mode != CapacityMode::External;
        let at = if o.at.0 > 0 { o.at.min(now) } else { now };
        let at = at.max(at_ms(h.last_observation));
        record_action(&mut h, at, last, current, policy_step);
    }
    h.last_applied = Some(current);

    // Rule E14 (external): the `/scale` writer owns spec.members; nothing is evaluated,
    // and a later switch to a policy starts from its value.
    if p.mode == CapacityMode::External {
        h.last_manual = applied.declared;
        h.manual_target = 0;
        h.config.clear();
        let d = decision(
            Reason::ExternalOwner,
            format!(
                "spec.members belongs to the /scale writer: desired {}, applied {current}",
                applied.declared
            ),
            applied.declared,
        );
        return finish(h, d);
    }

    // Rule E12 (manual edit): a changed spec.members wins one intent; rewriting the same
    // value is not a command. Clearing the fingerprint restarts the windows afterwards.
    if h.last_manual != applied.declared {
        h.last_manual = applied.declared;
        h.manual_target = applied.declared;
        h.config.clear();
    }
    if h.manual_target == current {
        h.manual_target = 0;
    }
    if h.manual_target != 0 {
        let mut d = decision(
            Reason::ManualOverride,
            format!(
                "The manual edit of spec.members to {} takes precedence; stabilization restarts",
                h.manual_target
            ),
            h.manual_target,
        );
        d.manual = true;
        return finish(h, d);
    }
    if current < 1 {
        // Nothing applied yet: spec.members starts the fleet; not a policy step.
        let mut d = decision(
            Reason::InvalidObservation,
            "No members are applied yet; starting from spec.members".to_string(),
            applied.declared,
        );
        d.manual = true;
        return finish(h, d);
    }
    let d = step(p, &mut h, o, current, now, &decision);
    finish(h, d)
}

fn finish(mut h: History, d: Decision) -> (History, Decision) {
    h.actionable = d.actionable;
    h.decision = Some(Remembered {
        mode: d.mode,
        reason: d.reason,
        message: d.message.clone(),
        desired: d.desired,
    });
    (h, d)
}

fn loads(p: &Policy, o: &Observation) -> std::collections::BTreeMap<String, Load> {
    let _ = p;
    o.samples
        .iter()
        .filter_map(|s| {
            let (r, m) = (s.runtime.as_ref()?, s.metrics.as_ref()?);
            (!s.identity.is_empty()).then(|| {
                (
                    s.identity.clone(),
                    Load {
                        cpu: m.cpu_millicores,
                        memory_mib: m.memory_mib.max(r.memory_mib),
                        pressure: r.pressured || r.backlog,
                    },
                )
            })
        })
        .take(super::history::MAX_ENTRIES)
        .collect()
}

/// The policy part of an evaluation, for Shadow, ScaleOut and Automatic.
fn step(
    p: &Policy,
    h: &mut History,
    o: &Observation,
    current: i32,
    now: Timestamp,
    decision: &dyn Fn(Reason, String, i32) -> Decision,
) -> Decision {
    let hold = |reason: Reason, message: String| decision(reason, message, current);
    let ms = |s: i32| i64::from(s) * 1000;
    let after = |t: Option<i64>| t.is_some_and(|t| o.at.0 < t);

    // Rule E1 (valid input).
    if !policy::valid(p)
        || !(1..=celld_api::defaults::MAX_MEMBERS).contains(&current)
        || o.at.0 <= 0
        || o.at > now
        || after(h.last_observation)
        || after(h.last_action)
        || after(h.pending_since)
    {
        h.reset_windows();
        return hold(
            Reason::InvalidObservation,
            "The policy, the applied member count or the observation time cannot be evaluated"
                .to_string(),
        );
    }

    // Rule E2 (fingerprints).
    let config = policy::fingerprint(p);
    let mut ids: Vec<&str> = o.samples.iter().map(|s| s.identity.as_str()).collect();
    ids.sort_unstable();
    let membership = policy::digest(&ids);
    let changed = config != h.config || membership != h.membership;
    if changed {
        h.reset_windows();
        h.config = config;
        h.membership = membership;
    }

    // Rule E3 (intervals) and E4 (gaps).
    let intermediate = h
        .last_observation
        .is_some_and(|l| o.at.0 - l < ms(p.sample_interval_seconds));
    if h.last_observation
        .is_some_and(|l| o.at.0 - l > ms(p.max_age_seconds))
    {
        h.reset_windows();
    }
    if !intermediate {
        h.last_observation = Some(o.at.0);
    }

    // Per-member freshness, load and watermarks.
    let age = ms(p.max_age_seconds);
    let fresh = |t: Timestamp| t.0 > 0 && t <= o.at.max(now) && o.at.0 - t.0 <= age;
    let window = ms(p.min_window_seconds)..=ms(p.max_window_seconds);
    let mut complete = o.complete && o.samples.len() == current as usize;
    let mut missing: Option<String> = None;
    let mut not_useful: Vec<String> = Vec::new();
    let (mut useful, mut high, mut low, mut advancing) = (0, false, true, true);
    let mut seen = std::collections::BTreeSet::new();
    let mut stamps = std::collections::BTreeMap::new();
    for s in &o.samples {
        let unique = !s.identity.is_empty() && seen.insert(s.identity.as_str());
        // Why each source is unusable, if it is ([`Problem`]): the collector's reason when
        // it has none, this evaluation's when it is too old or out of range.
        let runtime_problem = match &s.runtime {
            None => Some(
                s.problem
                    .clone()
                    .unwrap_or_else(|| Problem::Missing(Source::State, "no answer".to_string())),
            ),
            Some(_) if !unique => Some(Problem::Missing(
                Source::State,
                "no running container identity".to_string(),
            )),
            Some(r) if !(fresh(r.sampled) && fresh(r.received) && r.sampled <= r.received) => {
                Some(Problem::Stale(Source::State))
            }
            Some(_) => None,
        };
        let metrics_problem =
            match &s.metrics {
                None => Some(s.problem.clone().unwrap_or_else(|| {
                    Problem::Missing(Source::Metrics, "no PodMetrics".to_string())
                })),
                Some(m) if !(fresh(m.at) && fresh(m.received) && m.at <= m.received) => {
                    Some(Problem::Stale(Source::Metrics))
                }
                Some(m)
                    if !(window.contains(&m.window_ms)
                        && m.cpu_millicores >= 0
                        && m.memory_mib >= 0) =>
                {
                    Some(Problem::Malformed(
                        Source::Metrics,
                        "averaging window or usage out of range".to_string(),
                    ))
                }
                Some(_) => None,
            };
        let runtime = s.runtime.as_ref().filter(|_| runtime_problem.is_none());
        let metrics = s.metrics.as_ref().filter(|_| metrics_problem.is_none());
        match (&runtime_problem, s.ready) {
            (None, true) => useful += 1,
            (_, false) => not_useful.push(format!("{}: {}", s.member, Problem::NotReady)),
            (Some(p), true) => not_useful.push(format!("{}: {p}", s.member)),
        }
        let (Some(r), Some(m)) = (runtime, metrics) else {
            complete = false;
            low = false;
            if missing.is_none() {
                let why = runtime_problem
                    .or(metrics_problem)
                    .unwrap_or(Problem::NotReady);
                missing = Some(format!("member {}: {why}", s.member));
            }
            continue;
        };
        let prev = h.stamps.get(&s.identity).copied().unwrap_or_default();
        advancing &= r.sampled.0 > prev.runtime && m.at.0 > prev.metrics;
        stamps.insert(
            s.identity.clone(),
            Stamp {
                runtime: r.sampled.0,
                metrics: m.at.0,
            },
        );
        let pressured = r.pressured
            || r.backlog
            || m.cpu_millicores >= i64::from(p.cpu_high_millicores)
            || m.memory_mib.max(r.memory_mib) >= i64::from(p.memory_high_mib);
        high |= pressured;
        low &= !pressured
            && m.cpu_millicores < i64::from(p.cpu_low_millicores)
            && m.memory_mib.max(r.memory_mib) < i64::from(p.memory_low_mib);
    }
    if !intermediate {
        h.stamps = stamps
            .into_iter()
            .take(super::history::MAX_ENTRIES)
            .collect();
    }

    // Rule E5 (pending).
    let pending = (current - useful).max(0);
    if pending > 0 {
        h.reset_windows();
        let since = *h.pending_since.get_or_insert(o.at.0);
        let who = if not_useful.is_empty() {
            format!("{pending} applied member(s) not observed")
        } else {
            not_useful.join("; ")
        };
        return if o.at.0 - since >= ms(p.provisioning_timeout_seconds) {
            hold(
                Reason::IneffectiveCapacity,
                format!(
                    "{pending} of {current} members still pending after {} s ({who})",
                    p.provisioning_timeout_seconds
                ),
            )
        } else {
            hold(
                Reason::PendingCapacity,
                format!("Waiting for {pending} of {current} members ({who})"),
            )
        };
    }
    h.pending_since = None;

    // Rule E6 (complete).
    if !complete {
        h.reset_windows();
        let why = missing.unwrap_or_else(|| {
            format!("{} samples for {current} applied members", o.samples.len())
        });
        return hold(
            Reason::IncompleteMetrics,
            format!("Waiting for complete samples ({why})"),
        );
    }

    // Rule E7 (floor).
    if current < p.min_members {
        high = true;
        low = false;
    }

    // Rule E3 (intermediate samples only invalidate).
    if intermediate {
        h.load = loads(p, o);
        redistribution::assess(p, h, o.at, current, false);
        if changed {
            return hold(
                Reason::PolicyChanged,
                "The policy or the membership changed; stabilization restarts".to_string(),
            );
        }
        let contradicted = (h.high_since.is_some() && !high) || (h.low_since.is_some() && !low);
        if contradicted {
            h.reset_windows();
            return hold(
                Reason::WindowInterrupted,
                "A sample between intervals contradicted the running window".to_string(),
            );
        }
        // The last counted decision stands, actionable as it was: re-reading the same
        // evidence between intervals neither withdraws an intent the executor has not
        // carried out yet (the status would flap between the intent and the applied
        // count at every reconcile) nor repeats one it has (rule E13 cleared it). An
        // intent carried out leaves its message behind with it: the count moved.
        return match &h.decision {
            Some(prev) if h.actionable || prev.desired == current => {
                let mut d = decision(prev.reason, prev.message.clone(), prev.desired);
                d.actionable = h.actionable;
                d
            }
            Some(_) => hold(
                Reason::RateLimited,
                format!(
                    "The member count changed to {current}; the next decision waits for the next sample"
                ),
            ),
            None => hold(
                Reason::WithinThresholds,
                "Waiting for the next sample interval".to_string(),
            ),
        };
    }

    // Rule E8 (advancing).
    if !advancing {
        h.reset_windows();
        return hold(
            Reason::RepeatedSamples,
            "Some member's runtime or metrics sample did not advance since the last one"
                .to_string(),
        );
    }
    h.load = loads(p, o);

    // Rules R1-R4 (redistribution), only against pressure-driven growth above the floor.
    if let Some(r) = redistribution::assess(p, h, o.at, current, true)
        && high
        && current >= p.min_members
    {
        h.reset_high();
        let message = match r {
            Reason::LoadNotRedistributed => {
                "Earlier additions did not relieve the incumbents; holding growth".to_string()
            }
            _ => "Watching whether load moves onto the added members".to_string(),
        };
        return hold(r, message);
    }

    if high {
        h.reset_low();
        let since = *h.high_since.get_or_insert(o.at.0);
        h.high_samples += 1;
        // Rule E9 (stabilization).
        if h.high_samples < p.min_samples || o.at.0 - since < ms(p.scale_out_stabilization_seconds)
        {
            let mut d = hold(
                Reason::StabilizingOut,
                format!(
                    "High load since {}; growth needs {} samples over {} s",
                    Timestamp(since).rfc3339(),
                    p.min_samples,
                    p.scale_out_stabilization_seconds
                ),
            );
            d.window = Some(Window {
                samples: h.high_samples,
                seconds: (o.at.0 - since) / 1000,
            });
            return d;
        }
        // Rule E10 (cooldown).
        if let Some(last) = h.last_action
            && o.at.0 - last < ms(p.scale_out_cooldown_seconds)
        {
            return hold(
                Reason::RateLimited,
                format!(
                    "Growth waits for the {} s cooldown since the last change",
                    p.scale_out_cooldown_seconds
                ),
            );
        }
        // Rule E11 (bounds).
        if current >= p.max_members {
            return hold(
                Reason::AtMaximum,
                format!("High load, but already at maxMembers {}", p.max_members),
            );
        }
        // Below the floor, one step reaches at least minMembers (rule E7).
        let desired = (current + p.scale_out_step)
            .max(p.min_members)
            .min(p.max_members);
        let mut d = decision(
            Reason::ScaleOutRecommended,
            format!("Sustained high load: grow from {current} to {desired} members"),
            desired,
        );
        d.actionable = true;
        return d;
    }
    h.reset_high();
    if low {
        let since = *h.low_since.get_or_insert(o.at.0);
        h.low_samples += 1;
        // Rule E9 (stabilization).
        if h.low_samples < p.min_samples || o.at.0 - since < ms(p.scale_in_stabilization_seconds) {
            let mut d = hold(
                Reason::StabilizingIn,
                format!(
                    "Low load since {}; contraction needs {} samples over {} s",
                    Timestamp(since).rfc3339(),
                    p.min_samples,
                    p.scale_in_stabilization_seconds
                ),
            );
            d.window = Some(Window {
                samples: h.low_samples,
                seconds: (o.at.0 - since) / 1000,
            });
            return d;
        }
        // Rule E10 (cooldown).
        if let Some(last) = h.last_action
            && o.at.0 - last < ms(p.scale_in_cooldown_seconds)
        {
            return hold(
                Reason::RateLimited,
                format!(
                    "Contraction waits for the {} s cooldown since the last change",
                    p.scale_in_cooldown_seconds
                ),
            );
        }
        // Rule E11 (bounds).
        if current <= p.min_members {
            return hold(
                Reason::AtMinimum,
                format!("Low load, but already at minMembers {}", p.min_members),
            );
        }
        // Above a lowered maxMembers the recommendation is the bound itself; the
        // executor still removes one member per step (rule C3).
        let desired = (current - 1).min(p.max_members);
        let mut d = decision(
            Reason::ScaleInRecommended,
            format!("Sustained low load: shrink from {current} toward {desired} members"),
            desired,
        );
        d.actionable = true;
        return d;
    }
    h.reset_windows();
    hold(
        Reason::WithinThresholds,
        format!("All {current} members observed; demand lies between the thresholds"),
    )
}
