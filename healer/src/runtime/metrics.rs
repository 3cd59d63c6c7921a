//! Prometheus metrics (served as text on `/metrics`).
//!
//! | metric | type | labels |
//! | --- | --- | --- |
//! | `celld_healer_reconciles_total` | counter | `result`: acted, idle, conflict, error, standby, unobservable, unreadable, unsynced |
//! | `celld_healer_actions_total` | counter | `kind` (the Action variant), `outcome`: ok, conflict, error |
//! | `celld_healer_blocked_fleets` | gauge | |
//! | `celld_healer_excess_permissions` | gauge | (group, resource, verb) grants this healer holds beyond its RBAC table, found at start (`ExcessPermissions` Event) |
//! | `celld_healer_namespaces_claimed` | gauge | namespaces where this install holds the claim Lease `celld-healer-claim`, and so acts (leader only) |
//! | `celld_healer_namespaces_claimed_elsewhere` | gauge | namespaces with served fleets whose claim another install holds: this one stays out (`NamespaceClaimedElsewhere` Event) |
//! | `celld_healer_fleets_unreadable` | gauge | CelldFleets the healer cannot read (each reported by an Event, `FleetUnreadable`) |
//! | `celld_healer_errors_total` | counter | `kind`: api, observe, status, event, watch, lease |
//! | `celld_healer_decide_duration_seconds` | histogram | |
//! | `celld_healer_deadline_lag_seconds` | histogram | time from a wake-up `decide` asked for to the write it led to |
//! | `celld_healer_api_requests_total` | counter | `verb` (get, list, watch, create, update, patch, delete), `resource` |
//! | `celld_healer_api_request_duration_seconds` | histogram | `verb`, `resource` (watches excepted): from sending a request to its response's headers |
//! | `celld_healer_clock_skew_seconds` | gauge | this process's wall clock minus the API server's, from the `Date` of its latest response (rule T1 holds destructive writes beyond `--max-clock-skew`) |
//! | `celld_healer_leader` | gauge | 1 while this replica holds its shard's lease and its shard count's lease, and may write |
//! | `celld_healer_fleets_served` | gauge | the fleets this replica serves (in its namespaces and its shard), counted at each scrape |
//! | `celld_healer_fleets_reconciled` | gauge | the distinct fleets this replica has reconciled since it last became leader (0 on a standby); equal to `celld_healer_fleets_served` once it has caught up |
//! | `celld_healer_watch_healthy` | gauge | `resource`: 1 once listed and while the watch works |
//! | `celld_healer_watch_events_total` | counter | `resource`: objects changed or deleted as the watches reported them (lists not counted); what a steady state still costs |
//! | `celld_healer_capacity_collect_duration_seconds` | histogram | one observation of a fleet's members |
//! | `celld_healer_capacity_history_writes_total` | counter | patches of the capacity history annotation |
//! | `celld_healer_status_writes_total` | counter | status patches sent |
//! | `celld_healer_fresh_reads_total` | counter | fresh reads of a fleet, each confirming a destructive write |
//! | `celld_healer_fresh_read_rounds_total` | counter | fresh reads sent to the API server, each serving the fleets of a namespace that asked before it started (`runtime/fresh/shared.rs`) |
//! | `celld_healer_force_deletes_ridden_total` | counter | force deletes sent with their fleet's first, on its fresh read |
//! | `celld_healer_application_observations_total` | counter | observations of a fleet's members' application view, each on the fleet's own clock (`runtime/members.rs`), not a reconcile |
//! | `celld_fleet_capacity_desired_members` | gauge | `namespace`, `fleet`: what the capacity evaluator wants |
//! | `celld_fleet_capacity_applied_members` | gauge | `namespace`, `fleet`: the workload's replicas |
//! | `celld_fleet_capacity_window_samples` | gauge | `namespace`, `fleet`: samples in the stabilization window under way (0: none) |
//! | `celld_fleet_capacity_window_seconds` | gauge | `namespace`, `fleet`: how long that window has run |
//! | `celld_fleet_capacity_decision` | gauge | `namespace`, `fleet`, `mode`, `reason`: 1 for the latest decision |

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, OnceLock};

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

/// Counts the fleets a replica serves, from its caches.
type ServedCount = Box<dyn Fn() -> usize + Send + Sync>;

/// Every metric of the healer.
pub struct Metrics {
    registry: Registry,
    /// Reconciles by result.
    pub reconciles: Family<ResultLabel, Counter>,
    /// Writes by action kind and outcome.
    pub actions: Family<ActionLabels, Counter>,
    /// Fleets whose Blocked condition is True.
    pub blocked_fleets: Gauge,
    /// CelldFleets that do not read ([`super::unreadable`]).
    pub fleets_unreadable: Gauge,
    /// Grants beyond the RBAC table ([`super::permissions`]).
    pub excess_permissions: Gauge,
    /// Namespaces this install's claim is held in ([`super::claims`]).
    pub namespaces_claimed: Gauge,
    /// Namespaces where another install holds the claim ([`super::claims`]).
    pub namespaces_claimed_elsewhere: Gauge,
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
    /// The healer's clock minus the API server's, in seconds (latest response).
    pub clock_skew_seconds: Gauge<f64, std::sync::atomic::AtomicU64>,
    /// 1 while leader.
    pub leader: Gauge,
    /// Watch health.
    pub watch_healthy: Family<ResourceLabel, Gauge>,
    /// Watch events (applied or deleted objects, not listings), by resource.
    pub watch_events: Family<ResourceLabel, Counter>,
    /// Fleets served (namespaces and shard), set from [`Metrics::count_served_with`] at
    /// each scrape.
    pub fleets_served: Gauge,
    /// The size of `reconciled`.
    pub fleets_reconciled: Gauge,
    /// The fleets reconciled since this replica last became leader.
    reconciled: Mutex<HashSet<ObjectRef<CelldFleet>>>,
    /// Counts the served fleets (installed once the caches exist).
    served_count: OnceLock<ServedCount>,
    /// Fresh reads made to confirm a destructive write.
    pub fresh_reads: Counter,
    /// Fresh reads sent, each serving one fleet or more of a namespace.
    pub fresh_read_rounds: Counter,
    /// Force deletes sent with the fleet's first, on its fresh read.
    pub force_deletes_ridden: Counter,
    /// Status patches sent (each with the fleet's resourceVersion as precondition).
    pub status_writes: Counter,
    /// Application observations of a fleet's members made.
    pub application_observations: Counter,
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
        let fleets_unreadable = Gauge::default();
        let excess_permissions = Gauge::default();
        let namespaces_claimed = Gauge::default();
        let namespaces_claimed_elsewhere = Gauge::default();
        let errors = Family::<KindLabel, Counter>::default();
        let decide_seconds = Histogram::new(exponential_buckets(1e-6, 4.0, 10));
        let deadline_lag_seconds = Histogram::new(exponential_buckets(0.01, 2.0, 12));
        let api_requests = Family::<RequestLabels, Counter>::default();
        let api_request_seconds = Family::<RequestLabels, Histogram>::new_with_constructor(
            api_request_histogram as fn() -> Histogram,
        );
        let leader = Gauge::default();
        let clock_skew_seconds = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        registry.register(
            "celld_healer_clock_skew_seconds",
            "This process's wall clock minus the API server's, from the Date of its latest response",
            clock_skew_seconds.clone(),
        );
        let watch_healthy = Family::<ResourceLabel, Gauge>::default();
        let watch_events = Family::<ResourceLabel, Counter>::default();
        let fleets_served = Gauge::default();
        let fleets_reconciled = Gauge::default();
        let fresh_reads = Counter::default();
        let fresh_read_rounds = Counter::default();
        let force_deletes_ridden = Counter::default();
        let status_writes = Counter::default();
        let application_observations = Counter::default();
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
            "celld_healer_application_observations",
            "Observations of a fleet's members' application view (each asks every member once)",
            application_observations.clone(),
        );
        registry.register(
            "celld_healer_fresh_reads",
            "Fresh reads of a fleet from the API server, each confirming one destructive write",
            fresh_reads.clone(),
        );
        registry.register(
            "celld_healer_fresh_read_rounds",
            "Fresh reads sent to the API server, each serving every fleet of a namespace that asked for one before it started",
            fresh_read_rounds.clone(),
        );
        registry.register(
            "celld_healer_force_deletes_ridden",
            "Force deletes sent at once with the fleet's first, on the fresh read that confirmed it (a lost node's members), the caches agreeing",
            force_deletes_ridden.clone(),
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
        registry.register(
            "celld_healer_fleets_unreadable",
            "CelldFleets the healer cannot read, and so does not act on",
            fleets_unreadable.clone(),
        );
        registry.register(
            "celld_healer_excess_permissions",
            "Grants this healer holds beyond its RBAC table, found at start",
            excess_permissions.clone(),
        );
        registry.register(
            "celld_healer_namespaces_claimed",
            "Namespaces where this install holds the claim, and so acts (leader only)",
            namespaces_claimed.clone(),
        );
        registry.register(
            "celld_healer_namespaces_claimed_elsewhere",
            "Namespaces with served fleets whose claim another healer install holds: this one does not act there",
            namespaces_claimed_elsewhere.clone(),
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
        registry.register(
            "celld_healer_watch_events",
            "Objects changed or deleted as a watch reported them (listings not counted), by resource",
            watch_events.clone(),
        );
        registry.register(
            "celld_healer_fleets_served",
            "Fleets this replica serves: in its namespaces and its shard",
            fleets_served.clone(),
        );
        registry.register(
            "celld_healer_fleets_reconciled",
            "Distinct fleets this replica reconciled since it last became leader",
            fleets_reconciled.clone(),
        );
        Metrics {
            registry,
            reconciles,
            actions,
            blocked_fleets,
            fleets_unreadable,
            excess_permissions,
            namespaces_claimed,
            namespaces_claimed_elsewhere,
            errors,
            decide_seconds,
            deadline_lag_seconds,
            api_requests,
            api_request_seconds,
            clock_skew_seconds,
            leader,
            watch_healthy,
            watch_events,
            fleets_served,
            fleets_reconciled,
            reconciled: Mutex::new(HashSet::new()),
            served_count: OnceLock::new(),
            fresh_reads,
            fresh_read_rounds,
            force_deletes_ridden,
            status_writes,
            application_observations,
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

    /// Forgets the fleets `keep` does not keep (gone from the caches): their capacity
    /// gauges, and their place among the fleets reconciled, which therefore never
    /// outgrows the fleets that exist.
    pub fn retain_fleets(&self, keep: impl Fn(&ObjectRef<CelldFleet>) -> bool) {
        self.retain_capacity(&keep);
        let mut set = self.reconciled.lock().expect("reconciled fleets");
        set.retain(|k| keep(k));
        self.fleets_reconciled.set(set.len() as i64);
    }

    /// Removes the capacity gauges of the fleets `keep` does not keep.
    fn retain_capacity(&self, keep: &impl Fn(&ObjectRef<CelldFleet>) -> bool) {
        let gone: Vec<ObjectRef<CelldFleet>> = self
            .decision_series
            .lock()
            .expect("decision series")
            .keys()
            .filter(|k| !keep(k))
            .cloned()
            .collect();
        for k in gone {
            self.forget_capacity(&k);
        }
    }

    /// Records that this replica, as leader with complete caches, reconciled `key` (went
    /// on to decide on it, or found it unobservable): `celld_healer_fleets_reconciled`
    /// counts each fleet once.
    pub fn fleet_reconciled(&self, key: &ObjectRef<CelldFleet>) {
        let mut set = self.reconciled.lock().expect("reconciled fleets");
        if !set.contains(key) {
            set.insert(key.clone());
            self.fleets_reconciled.set(set.len() as i64);
        }
    }

    /// Sets the leader gauge. Losing leadership forgets the fleets reconciled, so the
    /// count starts from zero the next time this replica leads.
    pub fn set_leader(&self, leading: bool) {
        self.leader.set(i64::from(leading));
        if !leading {
            let mut set = self.reconciled.lock().expect("reconciled fleets");
            set.clear();
            self.fleets_reconciled.set(0);
        }
    }

    /// Installs what counts the served fleets for `celld_healer_fleets_served` (called
    /// once, when the caches exist; later calls are ignored). It runs at each scrape, not
    /// on a timer, so a quiet healer does no periodic work for it.
    pub fn count_served_with(&self, count: impl Fn() -> usize + Send + Sync + 'static) {
        let _ = self.served_count.set(Box::new(count));
    }

    /// Counts a reconcile.
    pub fn reconcile(&self, result: &'static str) {
        self.reconciles.get_or_create(&ResultLabel { result }).inc();
    }

    /// Counts a watch event that changed or deleted an object (not a listing).
    pub fn watch_event<K>(
        &self,
        resource: &'static str,
        ev: &Result<kube::runtime::watcher::Event<K>, kube::runtime::watcher::Error>,
    ) {
        use kube::runtime::watcher::Event;
        if let Ok(Event::Apply(_) | Event::Delete(_)) = ev {
            self.watch_events
                .get_or_create(&ResourceLabel { resource })
                .inc();
        }
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
        if let Some(count) = self.served_count.get() {
            self.fleets_served.set(count() as i64);
        }
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

    #[test]
    fn a_watch_event_is_counted_and_a_listing_is_not() {
        use kube::runtime::watcher::{Error, Event};
        let m = Metrics::new();
        let pod = || k8s_openapi::api::core::v1::Pod::default();
        let events: [Result<Event<_>, Error>; 5] = [
            Ok(Event::Init),
            Ok(Event::InitApply(pod())),
            Ok(Event::InitDone),
            Ok(Event::Apply(pod())),
            Ok(Event::Delete(pod())),
        ];
        for ev in &events {
            m.watch_event("pods", ev);
        }
        let text = m.encode();
        assert!(
            text.contains("celld_healer_watch_events_total{resource=\"pods\"} 2"),
            "{text}"
        );
    }

    fn key(i: usize) -> ObjectRef<CelldFleet> {
        ObjectRef::new(&format!("f{i}")).within("apps")
    }

    fn sample(m: &Metrics, name: &str) -> String {
        let text = m.encode();
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} in {text}"))
            .to_string()
    }

    /// Each fleet counts once however often it is reconciled; losing leadership starts
    /// the count again, gaining it does not reset it.
    #[test]
    fn fleets_reconciled_counts_distinct_fleets_per_leadership() {
        let m = Metrics::new();
        m.set_leader(true);
        for round in 0..3 {
            for i in 0..5 {
                m.fleet_reconciled(&key(i));
            }
            assert_eq!(m.fleets_reconciled.get(), 5, "round {round}");
        }
        assert_eq!(sample(&m, "celld_healer_fleets_reconciled"), "5");
        // Renewals while leading keep the count.
        m.set_leader(true);
        assert_eq!(m.fleets_reconciled.get(), 5);
        m.set_leader(false);
        assert_eq!(m.fleets_reconciled.get(), 0);
        assert_eq!(m.leader.get(), 0);
        m.set_leader(true);
        m.fleet_reconciled(&key(3));
        assert_eq!(sample(&m, "celld_healer_fleets_reconciled"), "1");
    }

    /// Fleets come and go while one replica leads for good: the count (and the set
    /// behind it) never holds more than the fleets that exist.
    #[test]
    fn fleets_reconciled_forgets_deleted_fleets() {
        let m = Metrics::new();
        m.set_leader(true);
        let mut live = HashSet::new();
        for i in 0..300 {
            m.fleet_reconciled(&key(i));
            live.insert(key(i));
            if i >= 3 {
                live.remove(&key(i - 3));
            }
            m.retain_fleets(|k| live.contains(k));
            assert_eq!(
                m.fleets_reconciled.get(),
                live.len() as i64,
                "after fleet {i}"
            );
            assert_eq!(m.reconciled.lock().unwrap().len(), live.len());
        }
        m.retain_fleets(|_| false);
        assert_eq!(m.fleets_reconciled.get(), 0);
    }

    /// The served count is taken at each scrape from what was installed (once).
    #[test]
    fn fleets_served_is_counted_at_each_scrape() {
        let m = Metrics::new();
        assert_eq!(sample(&m, "celld_healer_fleets_served"), "0");
        let n = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(7));
        let seen = n.clone();
        m.count_served_with(move || seen.load(std::sync::atomic::Ordering::SeqCst));
        m.count_served_with(|| 1000);
        assert_eq!(sample(&m, "celld_healer_fleets_served"), "7");
        n.store(9, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(sample(&m, "celld_healer_fleets_served"), "9");
    }
}
