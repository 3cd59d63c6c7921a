//! What the members say about the application: each member's
//! `GET :8081/state?view=application` reduced to one verdict per member, then to the
//! fleet's `ApplicationConverged` view and its observed versions. Pure: the runtime
//! fetches (exact Pod IP, short timeouts, small bodies) and passes the answers in.
//!
//! Rules, in our words (reference: anchor-operator-healing.md §8.3-§8.4):
//! - A1: an answer counts only if it is one JSON object of schema 1 with every field we
//!   read; anything else is `Unsupported` (404/501, other schema) or `Unavailable`.
//! - A2: a sample or target older than 90 s, taken before the container started, a target
//!   newer than its sample, an invalid snapshot or a pointer not observed is
//!   `StaleOrIncomplete`: it says nothing about now.
//! - A3: the fleet is `Unknown` unless every expected member gave a fresh answer;
//!   `False/MixedVersions` if members run different (version, prefix); `False/Converging`
//!   while any member adopts or moves cells; `True/Converged` otherwise.
//! - A4: this view never gates Ready, scaling, healing or deletion.

use celld_api::ApplicationStatus;
use serde::Deserialize;

use crate::time::Timestamp;

/// How old a sample may be and still describe the present.
pub const MAX_SAMPLE_AGE_MS: i64 = 90_000;
/// Largest body the runtime should accept.
pub const MAX_BODY_BYTES: usize = 1 << 20;

/// What celld's internal port answers (HTTP 503) to everything but the log-seal and
/// log-tail calls while it recovers its predecessor's log at start.
pub const RECOVERY_IN_PROGRESS: &str = "predecessor recovery in progress";
/// Most of a 503 body read to look for [`RECOVERY_IN_PROGRESS`].
pub const MAX_UNAVAILABLE_BODY_BYTES: usize = 4 << 10;

/// What the runtime got back from one member.
#[derive(Clone, Debug, PartialEq)]
pub enum Answer {
    /// HTTP 200 with this body.
    Body(Vec<u8>),
    /// Another HTTP status.
    Status(u16),
    /// HTTP 503 saying that the member is recovering its predecessor's log
    /// ([`RECOVERY_IN_PROGRESS`]; rule R9).
    Recovering,
    /// No answer (connection refused, reset).
    Failed(String),
    /// No answer in time (connect or whole call).
    Slow,
    /// A body over [`MAX_BODY_BYTES`].
    TooLarge,
}

/// One member's observation.
#[derive(Clone, Debug, PartialEq)]
pub struct Observation {
    /// Pod name.
    pub member: String,
    /// When the answer arrived.
    pub received: Timestamp,
    /// When the member's container started (samples before it are stale).
    pub container_started: Option<Timestamp>,
    /// The answer.
    pub answer: Answer,
}

/// The wire shape of `/state?view=application` (schema 1); every field required.
#[derive(Deserialize, Debug)]
struct View {
    schema_version: u32,
    runtime_generation: String,
    sampled_at_ms: i64,
    snapshot_valid: bool,
    loaded: Option<Deployment>,
    target: Option<Target>,
    pointer_status: String,
    adoption_status: String,
    pending_cells: u64,
    swapping_cells: u64,
    resident_cells: u64,
}

#[derive(Deserialize, Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Deployment {
    version: String,
    prefix: String,
}

#[derive(Deserialize, Debug)]
struct Target {
    observed_at_ms: i64,
}

/// A member's verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// No usable answer.
    Unavailable(String),
    /// The runtime has no application view.
    Unsupported(String),
    /// The answer does not describe the present.
    StaleOrIncomplete(String),
    /// Adoption of a new deployment failed on this member.
    AdoptionFailed,
    /// Adopting, or cells moving between deployments.
    Transitioning,
    /// Settled on this deployment.
    Converged,
}

/// One member's reading: its verdict, and the deployment and runtime it reported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reading {
    /// Pod name.
    pub member: String,
    /// Verdict.
    pub verdict: Verdict,
    /// `version@prefix` of the loaded deployment, for fresh answers.
    pub deployment: Option<String>,
    /// The runtime's generation string, for fresh answers.
    pub runtime: Option<String>,
    /// Resident cells, for fresh answers.
    pub resident_cells: Option<u64>,
}

/// Rules A1 and A2: one member's answer to its verdict.
pub fn read(o: &Observation) -> Reading {
    let mut r = Reading {
        member: o.member.clone(),
        verdict: Verdict::Unavailable(String::new()),
        deployment: None,
        runtime: None,
        resident_cells: None,
    };
    let body = match &o.answer {
        Answer::Failed(why) => {
            r.verdict = Verdict::Unavailable(why.clone());
            return r;
        }
        Answer::Slow => {
            r.verdict = Verdict::Unavailable("timed out after 2 s".into());
            return r;
        }
        Answer::TooLarge => {
            r.verdict = Verdict::Unavailable("answer larger than 1 MiB".into());
            return r;
        }
        Answer::Status(s @ (404 | 501)) => {
            r.verdict = Verdict::Unsupported(format!("HTTP {s}"));
            return r;
        }
        Answer::Status(s) => {
            r.verdict = Verdict::Unavailable(format!("HTTP {s}"));
            return r;
        }
        Answer::Recovering => {
            r.verdict = Verdict::Unavailable("recovering its predecessor's log".into());
            return r;
        }
        Answer::Body(b) if b.len() > MAX_BODY_BYTES => {
            r.verdict = Verdict::Unavailable("answer larger than 1 MiB".into());
            return r;
        }
        Answer::Body(b) => b,
    };
    // A1: one object with every field; serde_json rejects trailing content.
    let schema = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("schema_version").and_then(|s| s.as_u64()));
    if schema.is_some_and(|s| s != 1) {
        r.verdict = Verdict::Unsupported(format!("schema_version {}", schema.unwrap_or(0)));
        return r;
    }
    let view: View = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => {
            r.verdict = Verdict::Unavailable(format!("unreadable answer: {e}"));
            return r;
        }
    };
    debug_assert_eq!(view.schema_version, 1);
    // A2: freshness.
    let now = o.received.0;
    let sample = view.sampled_at_ms;
    let stale = |why: &str| Verdict::StaleOrIncomplete(why.to_string());
    let verdict =
        if !view.snapshot_valid {
            stale("the member's snapshot is not valid")
        } else if view.pointer_status != "observed" {
            stale("the member has not observed the deployment pointer")
        } else if sample <= 0 || sample > now || now - sample > MAX_SAMPLE_AGE_MS {
            stale("the sample is older than 90 s or from the future")
        } else if o.container_started.is_some_and(|s| sample < s.0) {
            stale("the sample predates the container")
        } else if view.target.as_ref().is_some_and(|t| {
            t.observed_at_ms > sample || now - t.observed_at_ms > MAX_SAMPLE_AGE_MS
        }) {
            stale("the deployment target is newer than the sample, or too old")
        } else if view.loaded.is_none() {
            stale("no deployment is loaded")
        } else if view.adoption_status == "failed" {
            Verdict::AdoptionFailed
        } else if view.adoption_status == "adopting"
            || view.pending_cells > 0
            || view.swapping_cells > 0
        {
            Verdict::Transitioning
        } else {
            Verdict::Converged
        };
    if !matches!(verdict, Verdict::StaleOrIncomplete(_)) {
        r.deployment = view.loaded.map(|d| format!("{}@{}", d.version, d.prefix));
        r.runtime = Some(view.runtime_generation);
        r.resident_cells = Some(view.resident_cells);
    }
    r.verdict = verdict;
    r
}

/// Rule A3: the fleet's view from every expected member's reading. Returns the status and
/// the distinct deployments members run (sorted), for `status.runtimeVersions`.
pub fn aggregate(readings: &[Reading], expected: usize) -> (ApplicationStatus, Vec<String>) {
    let fresh: Vec<&Reading> = readings
        .iter()
        .filter(|r| {
            !matches!(
                r.verdict,
                Verdict::Unavailable(_) | Verdict::Unsupported(_) | Verdict::StaleOrIncomplete(_)
            )
        })
        .collect();
    let mut versions: Vec<String> = fresh.iter().filter_map(|r| r.deployment.clone()).collect();
    versions.sort();
    versions.dedup();
    let observed = fresh.len() as i32;
    let status = |converged: &str, reason: &str, message: String| ApplicationStatus {
        converged: converged.to_string(),
        reason: reason.to_string(),
        observed_members: observed,
        message: Some(message),
    };
    if expected == 0 {
        return (
            status("Unknown", "NoMembers", "no member to observe".into()),
            versions,
        );
    }
    if fresh.len() < expected {
        let missing: Vec<String> = readings
            .iter()
            .filter(|r| !fresh.iter().any(|f| f.member == r.member))
            .map(|r| match &r.verdict {
                Verdict::Unavailable(w)
                | Verdict::Unsupported(w)
                | Verdict::StaleOrIncomplete(w) => {
                    format!("{}: {w}", r.member)
                }
                _ => r.member.clone(),
            })
            .collect();
        let unsupported = readings
            .iter()
            .any(|r| matches!(r.verdict, Verdict::Unsupported(_)));
        let reason = if unsupported {
            "Unsupported"
        } else {
            "IncompleteCoverage"
        };
        let mut msg = format!("{} of {expected} members gave a fresh answer", fresh.len());
        if !missing.is_empty() {
            msg.push_str(&format!(" ({})", missing.join("; ")));
        }
        return (status("Unknown", reason, msg), versions);
    }
    if versions.len() > 1 {
        return (
            status(
                "False",
                "MixedVersions",
                format!("members run {}", versions.join(", ")),
            ),
            versions,
        );
    }
    if let Some(r) = fresh.iter().find(|r| r.verdict == Verdict::AdoptionFailed) {
        return (
            status(
                "False",
                "AdoptionFailed",
                format!("{} failed to adopt the new deployment", r.member),
            ),
            versions,
        );
    }
    let moving: Vec<&str> = fresh
        .iter()
        .filter(|r| r.verdict == Verdict::Transitioning)
        .map(|r| r.member.as_str())
        .collect();
    if !moving.is_empty() {
        return (
            status(
                "False",
                "Converging",
                format!("cells still moving on {}", moving.join(", ")),
            ),
            versions,
        );
    }
    let v = versions.first().cloned().unwrap_or_default();
    (
        status(
            "True",
            "Converged",
            format!(
                "every member serves {v} (observed agreement, not a statement about the latest release)"
            ),
        ),
        versions,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NOW: i64 = 1_800_000_000_000;

    fn body(v: serde_json::Value) -> Answer {
        Answer::Body(serde_json::to_vec(&v).unwrap_or_default())
    }

    fn view(version: &str, age_ms: i64) -> serde_json::Value {
        json!({
            "schema_version": 1, "runtime_generation": "celld-v0.6.1/abc",
            "sampled_at_ms": NOW - age_ms, "snapshot_valid": true,
            "loaded": {"version": version, "prefix": "app"}, "local_generation": 3,
            "target": {"version": version, "prefix": "app", "observed_at_ms": NOW - age_ms},
            "pointer_status": "observed", "adoption_status": "adopted",
            "resident_cells": 7, "pending_cells": 0, "swapping_cells": 0,
        })
    }

    fn obs(member: &str, answer: Answer) -> Observation {
        Observation {
            member: member.into(),
            received: Timestamp(NOW),
            container_started: Some(Timestamp(NOW - 600_000)),
            answer,
        }
    }

    fn verdict(a: Answer) -> Verdict {
        read(&obs("m-0", a)).verdict
    }

    #[test]
    fn a1_only_complete_schema_1_answers_count() {
        assert_eq!(verdict(body(view("v1", 1000))), Verdict::Converged);
        assert!(matches!(
            verdict(Answer::Status(404)),
            Verdict::Unsupported(_)
        ));
        assert!(matches!(
            verdict(Answer::Status(501)),
            Verdict::Unsupported(_)
        ));
        assert!(matches!(
            verdict(Answer::Status(503)),
            Verdict::Unavailable(_)
        ));
        assert!(matches!(
            verdict(Answer::Body(b"{\"schema_version\":1".to_vec())),
            Verdict::Unavailable(_)
        ));
        let mut two = view("v1", 1000);
        two["schema_version"] = json!(2);
        assert!(matches!(verdict(body(two)), Verdict::Unsupported(_)));
        let mut missing = view("v1", 1000);
        missing.as_object_mut().map(|m| m.remove("pending_cells"));
        assert!(matches!(verdict(body(missing)), Verdict::Unavailable(_)));
        let trailing = [
            serde_json::to_vec(&view("v1", 1000)).unwrap_or_default(),
            b"{}".to_vec(),
        ]
        .concat();
        assert!(matches!(
            verdict(Answer::Body(trailing)),
            Verdict::Unavailable(_)
        ));
    }

    #[test]
    fn a2_stale_answers_say_nothing_about_now() {
        assert!(matches!(
            verdict(body(view("v1", 91_000))),
            Verdict::StaleOrIncomplete(_)
        ));
        assert!(matches!(
            verdict(body(view("v1", -5_000))),
            Verdict::StaleOrIncomplete(_)
        ));
        let mut before_start = obs("m-0", body(view("v1", 1000)));
        before_start.container_started = Some(Timestamp(NOW - 10));
        assert!(matches!(
            read(&before_start).verdict,
            Verdict::StaleOrIncomplete(_)
        ));
        let mut pointer = view("v1", 1000);
        pointer["pointer_status"] = json!("unavailable");
        assert!(matches!(
            verdict(body(pointer)),
            Verdict::StaleOrIncomplete(_)
        ));
        let mut invalid = view("v1", 1000);
        invalid["snapshot_valid"] = json!(false);
        assert!(matches!(
            verdict(body(invalid)),
            Verdict::StaleOrIncomplete(_)
        ));
    }

    #[test]
    fn a3_fleet_view() {
        let fresh = |m: &str, v: &str| read(&obs(m, body(view(v, 1000))));
        let (s, versions) = aggregate(&[fresh("m-0", "v1"), fresh("m-1", "v1")], 2);
        assert_eq!(
            (s.converged.as_str(), s.reason.as_str()),
            ("True", "Converged")
        );
        assert_eq!(versions, vec!["v1@app".to_string()]);
        let (s, _) = aggregate(&[fresh("m-0", "v1"), fresh("m-1", "v2")], 2);
        assert_eq!(
            (s.converged.as_str(), s.reason.as_str()),
            ("False", "MixedVersions")
        );
        let (s, _) = aggregate(&[fresh("m-0", "v1")], 2);
        assert_eq!(
            (s.converged.as_str(), s.reason.as_str()),
            ("Unknown", "IncompleteCoverage")
        );
        let stale = read(&obs("m-1", body(view("v1", 200_000))));
        let (s, _) = aggregate(&[fresh("m-0", "v1"), stale], 2);
        assert_eq!(s.converged, "Unknown");
        let unsupported = read(&obs("m-1", Answer::Status(404)));
        let (s, _) = aggregate(&[fresh("m-0", "v1"), unsupported], 2);
        assert_eq!(
            (s.converged.as_str(), s.reason.as_str()),
            ("Unknown", "Unsupported")
        );
        let mut moving = view("v1", 1000);
        moving["pending_cells"] = json!(3);
        let (s, _) = aggregate(&[fresh("m-0", "v1"), read(&obs("m-1", body(moving)))], 2);
        assert_eq!(
            (s.converged.as_str(), s.reason.as_str()),
            ("False", "Converging")
        );
        let (s, _) = aggregate(&[], 0);
        assert_eq!(s.converged, "Unknown");
    }
}
