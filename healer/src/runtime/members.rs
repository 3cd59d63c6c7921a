//! Reading what the members say about the application (`status.application`,
//! `status.runtimeVersions`): the I/O around the pure [`crate::application`].
//!
//! Each member Pod is asked `GET http://<exact Pod IP>:8081/state?view=application`
//! directly (never through a Service), one request per member, concurrently, with a 1 s
//! connect and 2 s overall timeout and a 1 MiB body limit. A member that is not ready, has
//! no IP or does not answer counts as unavailable.
//!
//! Observations run on their own clock, apart from the reconciles, so a fleet where
//! nothing changes costs one observation per `--application-interval` (5 s at most while
//! the view is not `Converged`) and no reconcile at all:
//! - each reconcile hands the fleet's members, as its caches show them, to
//!   [`ApplicationViews::track`]; the first one starts the fleet's observer, a task that
//!   observes at once and then once per interval, always the latest members handed over;
//! - an observation whose view changed asks for a reconcile of its fleet (so the status
//!   picks it up); one whose view is the same asks for nothing;
//! - an observer stops when its fleet is forgotten (deleted, swept, being deleted, not
//!   served) or when this replica may not write (a standby observes nothing: becoming
//!   leader reconciles every fleet, which starts them again).
//!
//! This never delays a write: the reconcile only hands over a list. These are requests
//! to the members, not to the API server; the status is patched only when the view
//! changed. The view never gates anything (rule A4).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use celld_api::ApplicationStatus;
use celld_api::CelldFleet;
use http_body_util::{BodyExt, Empty, LengthLimitError, Limited};
use hyper::body::Bytes;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::ObjectRef;
use prometheus_client::metrics::counter::Counter;
use tokio::net::TcpStream;

use crate::application::{self, Answer, Observation, Reading};
use crate::time::Timestamp;

type Fleet = ObjectRef<CelldFleet>;

/// While a fleet's view is not `Converged`, it is observed at least this often.
const UNSETTLED_EVERY: Duration = Duration::from_secs(5);

/// The latest view of one fleet.
#[derive(Clone, Debug)]
pub struct View {
    /// When the observation finished.
    pub at: Instant,
    /// The fleet view.
    pub status: ApplicationStatus,
    /// Distinct deployments (`version@prefix`) the members run.
    pub versions: Vec<String>,
}

#[cfg(test)]
impl View {
    /// A view of no members.
    fn of_nothing() -> View {
        let (status, versions) = application::aggregate(&[], 0);
        View {
            at: Instant::now(),
            status,
            versions,
        }
    }
}

/// One member as an observation needs it: what the Pod cache said at the last
/// reconcile, not the whole Pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// The Pod's name.
    pub name: String,
    /// Its IP, if it has one.
    pub ip: Option<String>,
    /// Its Ready condition is True.
    pub ready: bool,
    /// It has a deletionTimestamp.
    pub terminating: bool,
    /// When its running `celld` container started.
    pub started: Option<Timestamp>,
}

impl Member {
    /// What an observation needs of a member Pod.
    pub fn of(p: &Pod) -> Member {
        Member {
            name: p.metadata.name.clone().unwrap_or_default(),
            ip: p.status.as_ref().and_then(|s| s.pod_ip.clone()),
            ready: ready(p),
            terminating: p.metadata.deletion_timestamp.is_some(),
            started: started(p),
        }
    }
}

/// What a fleet's observer asks: the fleet's members at its latest reconcile, and the
/// number of members its workload asks for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Target {
    /// The fleet's own members.
    pub members: Vec<Member>,
    /// Members the workload asks for.
    pub expected: usize,
}

/// How the observers run: shared by every fleet's.
#[derive(Clone)]
pub struct Observing {
    /// `--application-interval` (never zero here: zero turns observation off, and
    /// nothing is tracked).
    pub interval: Duration,
    /// Whether this replica may write now (the leader gate): a standby observes nothing.
    pub may_observe: Arc<dyn Fn() -> bool + Send + Sync>,
    /// Asks for a reconcile of a fleet (its view changed).
    pub poke: tokio::sync::mpsc::UnboundedSender<Fleet>,
    /// Counts observations made (`celld_healer_application_observations`).
    pub observed: Counter,
}

/// A fleet whose observer runs.
struct Tracked {
    /// The members its next observation asks.
    target: Target,
    /// Which observer serves it: an observer whose fleet was forgotten and tracked again
    /// finds a new number here and stops, so a fleet never has two.
    observer: u64,
}

/// The members' latest application view of each fleet, and the fleets observed.
#[derive(Default)]
pub struct ApplicationViews {
    views: Mutex<HashMap<Fleet, View>>,
    tracked: Mutex<HashMap<Fleet, Tracked>>,
    observers: AtomicU64,
}

impl ApplicationViews {
    /// The latest view of a fleet.
    pub fn view(&self, key: &Fleet) -> Option<View> {
        self.views.lock().expect("views").get(key).cloned()
    }

    /// Hands a fleet's members to its observer, starting one (which observes at once)
    /// if the fleet has none.
    pub fn track(self: &Arc<Self>, key: &Fleet, target: Target, how: &Observing) {
        let started = {
            let mut tracked = self.tracked.lock().expect("tracked");
            match tracked.get_mut(key) {
                Some(t) => {
                    if t.target != target {
                        t.target = target;
                    }
                    None
                }
                None => {
                    let observer = self.observers.fetch_add(1, Ordering::Relaxed);
                    tracked.insert(key.clone(), Tracked { target, observer });
                    Some(observer)
                }
            }
        };
        if let Some(observer) = started {
            tokio::spawn(self.clone().observer(key.clone(), observer, how.clone()));
        }
    }

    /// Stops observing a fleet and drops its view (it is being deleted, or is not
    /// served here).
    pub fn untrack(&self, key: &Fleet) {
        self.tracked.lock().expect("tracked").remove(key);
        self.views.lock().expect("views").remove(key);
    }

    /// One fleet's observer: observes, stores the view, asks for a reconcile if it
    /// changed, waits an interval, and again, until the fleet is forgotten or this
    /// replica may not write.
    async fn observer(self: Arc<Self>, key: Fleet, observer: u64, how: Observing) {
        loop {
            let target = {
                let mut tracked = self.tracked.lock().expect("tracked");
                match tracked.get(&key) {
                    Some(t) if t.observer == observer => {
                        if !(how.may_observe)() {
                            tracked.remove(&key);
                            return;
                        }
                        t.target.clone()
                    }
                    _ => return,
                }
            };
            let view = observe(&target.members, target.expected).await;
            how.observed.inc();
            let settled = view.status.converged == "True";
            let Some(changed) = self.finish(&key, observer, view) else {
                return;
            };
            // Only a changed view needs a reconcile (to write it into the status).
            if changed {
                let _ = how.poke.send(key.clone());
            }
            let wait = if settled {
                how.interval
            } else {
                how.interval.min(UNSETTLED_EVERY)
            };
            tokio::time::sleep(wait).await;
        }
    }

    /// Stores a finished observation if its observer still serves the fleet (a
    /// forgotten fleet gets no view back); says whether the view changed.
    fn finish(&self, key: &Fleet, observer: u64, view: View) -> Option<bool> {
        let tracked = self.tracked.lock().expect("tracked");
        if tracked.get(key).is_none_or(|t| t.observer != observer) {
            return None;
        }
        let mut views = self.views.lock().expect("views");
        let changed = views
            .get(key)
            .is_none_or(|v| v.status != view.status || v.versions != view.versions);
        views.insert(key.clone(), view);
        Some(changed)
    }

    /// Keeps the views and observers of the fleets `keep` keeps (the others are gone;
    /// their observers stop at their next turn).
    pub fn retain(&self, keep: impl Fn(&Fleet) -> bool) {
        self.tracked.lock().expect("tracked").retain(|k, _| keep(k));
        self.views.lock().expect("views").retain(|k, _| keep(k));
    }

    /// How many fleets have a view or an observer.
    pub fn len(&self) -> usize {
        let tracked = self.tracked.lock().expect("tracked");
        let views = self.views.lock().expect("views");
        tracked.len() + views.keys().filter(|k| !tracked.contains_key(*k)).count()
    }

    /// Whether no fleet has a view or an observer.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stores a view as a finished observation would (tests of what reads it).
    #[cfg(test)]
    pub fn remember(&self, key: &Fleet, view: View) {
        self.views.lock().expect("views").insert(key.clone(), view);
    }
}

fn now() -> Timestamp {
    Timestamp(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64),
    )
}

/// The Pod's Ready condition is True.
pub(crate) fn ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// When the running `celld` container started.
pub(crate) fn started(p: &Pod) -> Option<Timestamp> {
    p.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == "celld")?
        .state
        .as_ref()?
        .running
        .as_ref()?
        .started_at
        .as_ref()
        .map(|t| Timestamp(t.0.as_millisecond()))
}

/// Asks every member and aggregates; `expected` is the number of members the workload
/// asks for.
pub async fn observe(members: &[Member], expected: usize) -> View {
    let asks = members.iter().map(|m| async move {
        let answer = match &m.ip {
            _ if m.terminating => Answer::Failed("terminating".into()),
            _ if !m.ready => Answer::Failed("not ready".into()),
            None => Answer::Failed("no Pod IP".into()),
            Some(ip) => fetch(ip, MEMBER_PORT, "/state?view=application").await,
        };
        application::read(&Observation {
            member: m.name.clone(),
            received: now(),
            container_started: m.started,
            answer,
        })
    });
    let readings: Vec<Reading> = futures::future::join_all(asks).await;
    let (status, versions) = application::aggregate(&readings, expected);
    View {
        at: Instant::now(),
        status,
        versions,
    }
}

/// The port members answer `/state` on.
pub(crate) const MEMBER_PORT: u16 = 8081;

/// `GET http://<ip>:<port><path>`: one connection, GET only, no redirects followed (a
/// redirect is the answer), 1 s to connect, 2 s in all, the body limited to 1 MiB.
pub(crate) async fn fetch(ip: &str, port: u16, path: &str) -> Answer {
    let addr = format!("{ip}:{port}");
    let call = async {
        let Ok(stream) =
            tokio::time::timeout(Duration::from_secs(1), TcpStream::connect(&addr)).await
        else {
            return Ok(Answer::Slow);
        };
        let stream = stream.map_err(|e| format!("connect: {e}"))?;
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .map_err(|e| format!("handshake: {e}"))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let req = hyper::Request::get(path)
            .header(hyper::header::HOST, &addr)
            .body(Empty::<Bytes>::new())
            .map_err(|e| e.to_string())?;
        let resp = sender
            .send_request(req)
            .await
            .map_err(|e| format!("request: {e}"))?;
        let status = resp.status().as_u16();
        if status != 200 {
            return Ok(Answer::Status(status));
        }
        let body = match Limited::new(resp.into_body(), application::MAX_BODY_BYTES)
            .collect()
            .await
        {
            Ok(b) => b.to_bytes(),
            Err(e) if e.is::<LengthLimitError>() => return Ok(Answer::TooLarge),
            Err(e) => return Err(format!("body: {e}")),
        };
        Ok::<_, String>(Answer::Body(body.to_vec()))
    };
    match tokio::time::timeout(Duration::from_secs(2), call).await {
        Ok(Ok(a)) => a,
        Ok(Err(e)) => Answer::Failed(e),
        Err(_) => Answer::Slow,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

    use super::*;

    fn fleet(name: &str) -> Fleet {
        ObjectRef::new(name).within("apps")
    }

    /// Members that are not ready: observed without a request, and never `Converged`.
    fn unready(names: &[&str]) -> Target {
        Target {
            members: names
                .iter()
                .map(|n| Member {
                    name: (*n).to_string(),
                    ip: Some("10.0.0.1".into()),
                    ready: false,
                    terminating: false,
                    started: None,
                })
                .collect(),
            expected: names.len(),
        }
    }

    struct Rig {
        views: Arc<ApplicationViews>,
        how: Observing,
        leader: Arc<AtomicBool>,
        pokes: UnboundedReceiver<Fleet>,
    }

    fn rig(interval: Duration) -> Rig {
        let leader = Arc::new(AtomicBool::new(true));
        let (poke, pokes) = unbounded_channel();
        let l = leader.clone();
        Rig {
            views: Arc::new(ApplicationViews::default()),
            how: Observing {
                interval,
                may_observe: Arc::new(move || l.load(Ordering::SeqCst)),
                poke,
                observed: Counter::default(),
            },
            leader,
            pokes,
        }
    }

    impl Rig {
        fn observed(&self) -> u64 {
            self.how.observed.get()
        }

        fn pokes(&mut self) -> usize {
            std::iter::from_fn(|| self.pokes.try_recv().ok()).count()
        }
    }

    async fn wait(d: Duration) {
        tokio::time::sleep(d).await;
    }

    /// A tracked fleet is observed at once and then once per interval, by one observer
    /// however often its reconciles hand over members; an observation that found the
    /// same view asks for no reconcile.
    #[tokio::test(start_paused = true)]
    async fn a_fleet_is_observed_once_per_interval_by_one_observer() {
        let mut r = rig(Duration::from_secs(2));
        let key = fleet("a");
        r.views.track(&key, unready(&["a-0"]), &r.how);
        wait(Duration::from_millis(100)).await;
        assert_eq!(r.observed(), 1, "observed at once");
        assert_eq!(r.pokes(), 1, "the first view is a change");
        for _ in 0..20 {
            r.views.track(&key, unready(&["a-0"]), &r.how);
            wait(Duration::from_millis(100)).await;
        }
        // 2.1 s in: the second observation, at 2 s; its view is the same.
        assert_eq!(r.observed(), 2);
        assert_eq!(r.pokes(), 0, "an unchanged view asks for nothing");
        wait(Duration::from_secs(10)).await;
        assert_eq!(r.observed(), 7, "one per 2 s, not one per reconcile");
    }

    /// The next observation asks the members the latest reconcile handed over, and a
    /// changed view asks for a reconcile.
    #[tokio::test(start_paused = true)]
    async fn the_latest_members_are_observed_and_a_change_is_reported() {
        let mut r = rig(Duration::from_secs(2));
        let key = fleet("a");
        r.views.track(&key, unready(&["a-0"]), &r.how);
        wait(Duration::from_millis(100)).await;
        r.pokes();
        r.views.track(&key, unready(&["a-0", "a-1"]), &r.how);
        wait(Duration::from_secs(2)).await;
        assert_eq!(r.observed(), 2);
        let view = r.views.view(&key).expect("a view");
        assert!(
            view.status
                .message
                .as_deref()
                .is_some_and(|m| m.contains("a-1")),
            "{view:?}"
        );
        assert_eq!(r.pokes(), 1, "the view changed");
    }

    /// While a fleet's view is not `Converged`, it is observed at least every 5 s,
    /// whatever the interval.
    #[tokio::test(start_paused = true)]
    async fn an_unsettled_fleet_is_observed_every_five_seconds() {
        let r = rig(Duration::from_secs(60));
        r.views.track(&fleet("a"), unready(&["a-0"]), &r.how);
        wait(Duration::from_millis(100)).await;
        wait(Duration::from_secs(20)).await;
        assert_eq!(r.observed(), 5, "at 0, 5, 10, 15 and 20 s");
    }

    /// A forgotten fleet (deleted, swept, not served) is observed no more and keeps no
    /// view, even from an observation that was under way; tracked again, it has one
    /// observer, not two.
    #[tokio::test(start_paused = true)]
    async fn a_forgotten_fleet_is_observed_no_more() {
        let r = rig(Duration::from_secs(2));
        let (a, b) = (fleet("a"), fleet("b"));
        r.views.track(&a, unready(&["a-0"]), &r.how);
        r.views.track(&b, unready(&["b-0"]), &r.how);
        wait(Duration::from_millis(100)).await;
        assert_eq!(r.observed(), 2);
        r.views.retain(|k| *k != a);
        assert!(r.views.view(&a).is_none());
        assert_eq!(r.views.len(), 1);
        wait(Duration::from_secs(10)).await;
        assert_eq!(r.observed(), 2 + 5, "only b, every 2 s");
        r.views.untrack(&b);
        assert!(r.views.is_empty());
        wait(Duration::from_secs(10)).await;
        assert_eq!(r.observed(), 7, "neither");
        // An observer whose fleet was forgotten and tracked again while it slept stops
        // at its next turn: one observation per interval after that, not two.
        r.views.track(&a, unready(&["a-0"]), &r.how);
        wait(Duration::from_millis(100)).await;
        r.views.retain(|_| false);
        r.views.track(&a, unready(&["a-0"]), &r.how);
        wait(Duration::from_secs(9)).await;
        assert_eq!(
            r.observed(),
            7 + 1 + 5,
            "the new observer's, at 0, 2, 4, 6 and 8 s"
        );
        // A finished observation does not bring a forgotten fleet's view back.
        assert_eq!(r.views.finish(&b, 0, View::of_nothing()), None);
        assert!(r.views.view(&b).is_none());
    }

    /// A replica that may not write observes nothing and keeps no observer; the
    /// reconciles that follow its becoming leader start them again.
    #[tokio::test(start_paused = true)]
    async fn a_standby_observes_nothing() {
        let r = rig(Duration::from_secs(2));
        let key = fleet("a");
        r.views.track(&key, unready(&["a-0"]), &r.how);
        wait(Duration::from_millis(100)).await;
        r.leader.store(false, Ordering::SeqCst);
        wait(Duration::from_secs(10)).await;
        assert_eq!(r.observed(), 1);
        assert!(r.views.tracked.lock().expect("tracked").is_empty());
        r.leader.store(true, Ordering::SeqCst);
        r.views.track(&key, unready(&["a-0"]), &r.how);
        wait(Duration::from_millis(100)).await;
        assert_eq!(r.observed(), 2, "observed at once");
    }
}
