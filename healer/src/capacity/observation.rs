//! What the collector hands the evaluator: one sample per member Pod, taken at one moment.
//! A sample missing a source carries why, so a decision that waits can name the member.

use crate::time::Timestamp;

/// One collection over the fleet's members.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Observation {
    /// When the collection started (zero: nothing was collected).
    pub at: Timestamp,
    /// Every listed member was asked (false when the Pod list failed or was too long).
    pub complete: bool,
    /// One per member Pod, sorted by Pod name.
    pub samples: Vec<Sample>,
}

/// One member.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sample {
    /// Pod name (for messages, and to find the member a contraction removes).
    pub member: String,
    /// `<pod uid>/<container id>/<restart count>` of the running `celld` container;
    /// empty when the Pod is terminating or the container is not running.
    pub identity: String,
    /// The Pod's Ready condition.
    pub ready: bool,
    /// What the member said on `/state`.
    pub runtime: Option<RuntimeSample>,
    /// What `metrics.k8s.io` said about the member's `celld` container.
    pub metrics: Option<MetricsSample>,
    /// Why a source is missing (first problem only), for the decision's message.
    pub problem: Option<Problem>,
}

/// Where a sample comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The member's own `/state`.
    State,
    /// `metrics.k8s.io`.
    Metrics,
    /// The re-read of the fleet's Pods after sampling.
    Pods,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Source::State => "/state",
            Source::Metrics => "metrics.k8s.io",
            Source::Pods => "the Pod re-read",
        })
    }
}

/// Why a member's sample cannot be used: what the waiting message says of the member.
/// The words depend only on the cause (and, for an answer that says what is wrong, on
/// that answer), never on times or sizes, so a lasting cause keeps the status still.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    /// Nothing for the member: no answer, an HTTP error, no PodMetrics, no running
    /// container with a Pod IP.
    Missing(Source, String),
    /// Older than maxAgeSeconds, than the running container, or from the future.
    Stale(Source),
    /// Not strict JSON, a field missing or out of range, an averaging window outside
    /// the policy's bounds.
    Malformed(Source, String),
    /// Over the 1 MiB limit.
    TooLarge(Source),
    /// No answer in time (2 s per call, one deadline per observation).
    Slow(Source),
    /// The member changed (container, IP, readiness or fleet label) while it was sampled.
    Changed,
    /// The Pod is not Ready.
    NotReady,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Problem::Missing(s, why) => write!(f, "no {s} sample ({why})"),
            Problem::Stale(s) => write!(f, "its {s} sample is stale"),
            Problem::Malformed(s, why) => write!(f, "its {s} answer is malformed ({why})"),
            Problem::TooLarge(s) => write!(f, "its {s} answer is over 1 MiB"),
            Problem::Slow(s) => write!(f, "{s} did not answer in time"),
            Problem::Changed => f.write_str("it changed while it was sampled"),
            Problem::NotReady => f.write_str("not ready"),
        }
    }
}

/// The member's own view of its load.
#[derive(Clone, Debug, PartialEq)]
pub struct RuntimeSample {
    /// When the member took the sample (`node_load.sampled_ms`).
    pub sampled: Timestamp,
    /// When the answer arrived.
    pub received: Timestamp,
    /// max(rss, in use), in MiB rounded up.
    pub memory_mib: i64,
    /// The member reports pressure or no memory headroom.
    pub pressured: bool,
    /// The member is draining, paused or has work waiting.
    pub backlog: bool,
}

/// The resource-metrics view of the member's `celld` container.
#[derive(Clone, Debug, PartialEq)]
pub struct MetricsSample {
    /// End of the averaging window.
    pub at: Timestamp,
    /// When the answer arrived.
    pub received: Timestamp,
    /// Length of the averaging window, milliseconds.
    pub window_ms: i64,
    /// CPU, millicores.
    pub cpu_millicores: i64,
    /// Working set, MiB rounded up.
    pub memory_mib: i64,
}

impl Observation {
    /// Nothing could be collected at `at` (no policy input: every member is pending).
    pub fn empty(at: Timestamp) -> Observation {
        Observation {
            at,
            complete: false,
            samples: Vec::new(),
        }
    }
}
