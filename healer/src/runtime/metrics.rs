//! Prometheus metrics (served as text on `/metrics`).
//!
//! | metric | type | labels |
//! | --- | --- | --- |
//! | `celld_healer_reconciles_total` | counter | `result`: acted, idle, conflict, error, standby, unobservable, unsynced |
//! | `celld_healer_actions_total` | counter | `kind` (the Action variant), `outcome`: ok, conflict, error |
//! | `celld_healer_blocked_fleets` | gauge | |
//! | `celld_healer_errors_total` | counter | `kind`: api, observe, status, event, watch, lease |
//! | `celld_healer_decide_duration_seconds` | histogram | |
//! | `celld_healer_deadline_lag_seconds` | histogram | time from a wake-up `decide` asked for to the write it led to |
//! | `celld_healer_api_requests_total` | counter | `verb` (get, list, watch, create, update, patch, delete), `resource` |
//! | `celld_healer_api_request_duration_seconds` | histogram | `verb`, `resource` (watches excepted): from sending a request to its response's headers |
//! | `celld_healer_leader` | gauge | 1 while this replica holds its shard's lease and its shard count's lease, and may write |
//! | `celld_healer_watch_healthy` | gauge | `resource`: 1 once listed and while the watch works |
//! | `celld_healer_capacity_collect_duration_seconds` | histogram | one observation of a fleet's members |
//! | `celld_healer_capacity_history_writes_total` | counter | patches of the capacity history annotation |
//! | `celld_fleet_capacity_desired_members` | gauge | `namespace`, `fleet`: what the capacity evaluator wants |
//! | `celld_fleet_capacity_applied_members` | gauge | `namespace`, `fleet`: the workload's replicas |
//! | `celld_fleet_capacity_window_samples` | gauge | `namespace`, `fleet`: samples in the stabilization window under way (0: none) |
//! | `celld_fleet_capacity_window_seconds` | gauge | `namespace`, `fleet`: how long that window has run |
//! | `celld_fleet_capacity_decision` | gauge | `namespace`, `fleet`, `mode`, `reason`: 1 for the latest decision |

use std::collections::HashMap;
use std::sync::Mutex;

use celld_api::CelldFleet;
use kube::runtime::reflector::ObjectRef;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Label set `result`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    /// Outcome of the reconcile.
    pub result: &'static str,
}

/// Label set `kind`, `outcome`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ActionLabels {
    /// Action variant.
    pub kind: &'static str,
    /// ok, conflict or error.
    pub outcome: &'static str,
}

/// Label set `kind`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    /// Error kind.
    pub kind: &'static str,
}

/// 1 ms to 16 s.
fn api_request_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

/// Label set `verb`, `resource`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// Kubernetes verb.
    pub verb: &'static str,
    /// Resource (plural, with `/subresource`).
    pub resource: String,
}

/// Label set `resource`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabel {
    /// Watched resource.
    pub resource: &'static str,
}

/// Label set `namespace`, `fleet`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FleetLabels {
    /// The fleet's namespace.
    pub namespace: String,
    /// The fleet's name.
    pub fleet: String,
}

/// Label set `namespace`, `fleet`, `mode`, `reason`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
    /// The fleet's namespace.
    pub namespace: String,
    /// The fleet's name.
    pub fleet: String,
    /// Capacity mode.
    pub mode: &'static str,
    /// Reason of the latest decision.
    pub reason: &'static str,
}

/// Every metric of the healer.
pub struct Metrics {
    registry: Registry,
    /// Reconciles by result.
    pub reconciles: Family<ResultLabel, Counter>,
    /// Writes by action kind and outcome.
    pub actions: Family<ActionLabels, Counter>,
    /// Fleets whose Blocked condition is True.
    pub blocked_fleets: Gauge,
    /// Errors by kind.
    pub errors: Family<KindLabel, Counter>,
    /// Duration of `decide`.
    pub decide_seconds: Histogram,
    /// Lag between a deadline and the write it caused.
    pub deadline_lag_seconds: Histogram,
    /// Requests this process sent to the API server.
    pub api_requests: Family<RequestLabels, Counter>,
    /// Time from sending a request (not a watch) to its response's headers.
    pub api_request_seconds: Family<RequestLabels, Histogram>,
    /// 1 while leader.
    pub leader: Gauge,
    /// Watch health.
    pub watch_healthy: Family<ResourceLabel, Gauge>,
    /// Fresh reads made to confirm a destructive write.
    pub fresh_reads: Counter,
    /// Status patches sent (each with the fleet's resourceVersion as precondition).
    pub status_writes: Counter,
    /// Duration of one capacity observation of a fleet's members.
    pub capacity_collect_seconds: Histogram,
    /// Capacity history annotation patches sent.
    pub capacity_history_writes: Counter,
    /// Members the capacity evaluator wants, per fleet.
    pub capacity_desired: Family<FleetLabels, Gauge>,
    /// Members applied (the workload's replicas), per fleet with a policy.
    pub capacity_applied: Family<FleetLabels, Gauge>,
    /// Samples in the stabilization window under way, per fleet (the status message
    /// leaves this moving count out).
    pub capacity_window_samples: Family<FleetLabels, Gauge>,
    /// Seconds that window has run, per fleet.
    pub capacity_window_seconds: Family<FleetLabels, Gauge>,
    /// 1 for each fleet's latest decision (mode and reason).
    pub capacity_decision: Family<DecisionLabels, Gauge>,
    /// The decision series each fleet has now, so a new reason replaces the old one.
    decision_series: Mutex<HashMap<ObjectRef<CelldFleet>, DecisionLabels>>,
    /// Serializes encoding.
    encode_lock: Mutex<()>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Creates and registers every metric.
    pub fn new() -> Metrics {
        let mut registry = Registry::default();
        let reconciles = Family::<ResultLabel, Counter>::default();
        let actions = Family::<ActionLabels, Counter>::default();
        let blocked_fleets = Gauge::default();
        let errors = Family::<KindLabel, Counter>::default();
        let decide_seconds = Histogram::new(exponential_buckets(1e-6, 4.0, 10));
        let deadline_lag_seconds = Histogram::new(exponential_buckets(0.01, 2.0, 12));
        let api_requests = Family::<RequestLabels, Counter>::default();
        let api_request_seconds = Family::<RequestLabels, Histogram>::new_with_constructor(
            api_request_histogram as fn() -> Histogram,
        );
        let leader = Gauge::default();
        let watch_healthy = Family::<ResourceLabel, Gauge>::default();
        let fresh_reads = Counter::default();
        let status_writes = Counter::default();
        let capacity_collect_seconds = Histogram::new(exponential_buckets(0.001, 2.0, 14));
        let capacity_history_writes = Counter::default();
        let capacity_desired = Family::<FleetLabels, Gauge>::default();
        let capacity_applied = Family::<FleetLabels, Gauge>::default();
        let capacity_window_samples = Family::<FleetLabels, Gauge>::default();
        let capacity_window_seconds = Family::<FleetLabels, Gauge>::default();
        let capacity_decision = Family::<DecisionLabels, Gauge>::default();
        registry.register(
            "celld_healer_capacity_collect_duration_seconds",
            "Time one capacity observation of a fleet's members took",
            capacity_collect_seconds.clone(),
        );
        registry.register(
            "celld_healer_capacity_history_writes",
            "Patches of the capacity history annotation on bucket reservations",
            capacity_history_writes.clone(),
        );
        registry.register(
            "celld_fleet_capacity_desired_members",
            "Members the capacity evaluator wants",
            capacity_desired.clone(),
        );
        registry.register(
            "celld_fleet_capacity_applied_members",
            "Members applied (the workload's replicas) of a fleet with a capacity policy",
            capacity_applied.clone(),
        );
        registry.register(
            "celld_fleet_capacity_window_samples",
            "Samples in the capacity stabilization window under way (0: none)",
            capacity_window_samples.clone(),
        );
        registry.register(
            "celld_fleet_capacity_window_seconds",
            "Seconds the capacity stabilization window under way has run",
            capacity_window_seconds.clone(),
        );
        registry.register(
            "celld_fleet_capacity_decision",
            "1 for the reason and mode of each fleet's latest capacity decision",
            capacity_decision.clone(),
        );
        registry.register(
            "celld_healer_status_writes",
            "Status patches sent, each guarded by the resourceVersion it was computed from",
            status_writes.clone(),
        );
        registry.register(
            "celld_healer_fresh_reads",
            "Fresh reads of a fleet from the API server, each confirming one destructive write",
            fresh_reads.clone(),
        );
        registry.register(
            "celld_healer_reconciles",
            "Reconciles of a fleet, by result",
            reconciles.clone(),
        );
        registry.register(
            "celld_healer_actions",
            "Writes the healer made, by action kind and outcome",
            actions.clone(),
        );
        registry.register(
            "celld_healer_blocked_fleets",
            "Fleets whose Blocked condition is True",
            blocked_fleets.clone(),
        );
        registry.register("celld_healer_errors", "Errors, by kind", errors.clone());
        registry.register(
            "celld_healer_decide_duration_seconds",
            "Time spent in decide()",
            decide_seconds.clone(),
        );
        registry.register(
            "celld_healer_deadline_lag_seconds",
            "Time from a deadline decide() asked to be woken at to the write it led to",
            deadline_lag_seconds.clone(),
        );
        registry.register(
            "celld_healer_api_requests",
            "Requests sent to the Kubernetes API server, by verb and resource",
            api_requests.clone(),
        );
        registry.register(
            "celld_healer_api_request_duration_seconds",
            "Time from sending a request to the Kubernetes API server (watches excepted) to its response's headers",
            api_request_seconds.clone(),
        );
        registry.register(
            "celld_healer_leader",
            "1 while this replica holds the lease and may write",
            leader.clone(),
        );
        registry.register(
            "celld_healer_watch_healthy",
            "1 once a watch has listed its objects and while it works",
            watch_healthy.clone(),
        );
        Metrics {
            registry,
            reconciles,
            actions,
            blocked_fleets,
            errors,
            decide_seconds,
            deadline_lag_seconds,
            api_requests,
            api_request_seconds,
            leader,
            watch_healthy,
            fresh_reads,
            status_writes,
            capacity_collect_seconds,
            capacity_history_writes,
            capacity_desired,
            capacity_applied,
            capacity_window_samples,
            capacity_window_seconds,
            capacity_decision,
            decision_series: Mutex::new(HashMap::new()),
            encode_lock: Mutex::new(()),
        }
    }

    /// Sets a fleet's capacity gauges from its latest decision.
    pub fn capacity(
        &self,
        key: &ObjectRef<CelldFleet>,
        d: &crate::capacity::Decision,
        applied: i32,
    ) {
        let fleet = FleetLabels {
            namespace: key.namespace.clone().unwrap_or_default(),
            fleet: key.name.clone(),
        };
        self.capacity_desired
            .get_or_create(&fleet)
            .set(i64::from(d.desired));
        self.capacity_applied
            .get_or_create(&fleet)
            .set(i64::from(applied));
        let w = d.window.unwrap_or(crate::capacity::Window {
            samples: 0,
            seconds: 0,
        });
        self.capacity_window_samples
            .get_or_create(&fleet)
            .set(i64::from(w.samples));
        self.capacity_window_seconds
            .get_or_create(&fleet)
            .set(w.seconds);
        let labels = DecisionLabels {
            namespace: fleet.namespace,
            fleet: fleet.fleet,
            mode: mode_name(d.mode),
            reason: d.reason.as_str(),
        };
        let old = self
            .decision_series
            .lock()
            .expect("decision series")
            .insert(key.clone(), labels.clone());
        if let Some(old) = old.filter(|o| *o != labels) {
            self.capacity_decision.remove(&old);
        }
        self.capacity_decision.get_or_create(&labels).set(1);
    }

    /// Removes a fleet's capacity gauges (no policy any more, or the fleet is gone).
    pub fn forget_capacity(&self, key: &ObjectRef<CelldFleet>) {
        let fleet = FleetLabels {
            namespace: key.namespace.clone().unwrap_or_default(),
            fleet: key.name.clone(),
        };
        self.capacity_desired.remove(&fleet);
        self.capacity_applied.remove(&fleet);
        self.capacity_window_samples.remove(&fleet);
        self.capacity_window_seconds.remove(&fleet);
        if let Some(old) = self
            .decision_series
            .lock()
            .expect("decision series")
            .remove(key)
        {
            self.capacity_decision.remove(&old);
        }
    }

    /// Removes the capacity gauges of fleets not in `live`.
    pub fn retain_capacity(&self, live: &std::collections::HashSet<ObjectRef<CelldFleet>>) {
        let gone: Vec<ObjectRef<CelldFleet>> = self
            .decision_series
            .lock()
            .expect("decision series")
            .keys()
            .filter(|k| !live.contains(*k))
            .cloned()
            .collect();
        for k in gone {
            self.forget_capacity(&k);
        }
    }

    /// Counts a reconcile.
    pub fn reconcile(&self, result: &'static str) {
        self.reconciles.get_or_create(&ResultLabel { result }).inc();
    }

    /// Counts an error.
    pub fn error(&self, kind: &'static str) {
        self.errors.get_or_create(&KindLabel { kind }).inc();
    }

    /// Counts a write.
    pub fn action(&self, kind: &'static str, outcome: &'static str) {
        self.actions
            .get_or_create(&ActionLabels { kind, outcome })
            .inc();
    }

    /// The text exposition.
    pub fn encode(&self) -> String {
        let _g = self.encode_lock.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }
}

fn mode_name(m: celld_api::CapacityMode) -> &'static str {
    use celld_api::CapacityMode as M;
    match m {
        M::Shadow => "Shadow",
        M::ScaleOut => "ScaleOut",
        M::Automatic => "Automatic",
        M::External => "External",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_the_named_series() {
        let m = Metrics::new();
        m.reconcile("idle");
        m.action("SetReplicas", "ok");
        m.error("api");
        m.decide_seconds.observe(0.000_02);
        let text = m.encode();
        assert!(
            text.contains("celld_healer_reconciles_total{result=\"idle\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("celld_healer_actions_total{kind=\"SetReplicas\",outcome=\"ok\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("celld_healer_decide_duration_seconds_bucket"),
            "{text}"
        );
        assert!(text.contains("celld_healer_blocked_fleets 0"), "{text}");
    }
}
