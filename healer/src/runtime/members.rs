//! Reading what the members say about the application (`status.application`,
//! `status.runtimeVersions`): the I/O around the pure [`crate::application`].
//!
//! Each member Pod is asked `GET http://<exact Pod IP>:8081/state?view=application`
//! directly (never through a Service), one request per member, concurrently, with a 1 s
//! connect and 2 s overall timeout and a 1 MiB body limit, on the connection kept open
//! since the fleet's last observation when there is one ([`Connections`]). A member that
//! is not ready, has no IP or does not answer counts as unavailable.
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
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
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
                    t.target = target;
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
        let mut connections = Connections::default();
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
            let view = observe(&target.members, target.expected, &mut connections).await;
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
/// asks for. `connections` are those kept from the fleet's last observation; it ends
/// holding those to keep for the next.
pub(crate) async fn observe(
    members: &[Member],
    expected: usize,
    connections: &mut Connections,
) -> View {
    let mut kept = std::mem::take(&mut connections.0);
    let asks = members.iter().map(|m| {
        let key = m.ip.clone().map(|ip| (m.name.clone(), ip));
        let conn = key.as_ref().and_then(|k| kept.remove(k));
        async move {
            let (answer, conn) = match &m.ip {
                _ if m.terminating => (Answer::Failed("terminating".into()), None),
                _ if !m.ready => (Answer::Failed("not ready".into()), None),
                None => (Answer::Failed("no Pod IP".into()), None),
                Some(ip) => fetch_on(conn, ip, MEMBER_PORT, "/state?view=application").await,
            };
            let reading = application::read(&Observation {
                member: m.name.clone(),
                received: now(),
                container_started: m.started,
                answer,
            });
            (reading, key.zip(conn))
        }
    });
    let asked: Vec<_> = futures::future::join_all(asks.collect::<Vec<_>>()).await;
    // What is left in `kept` belongs to members no longer asked: closed here.
    drop(kept);
    let mut readings: Vec<Reading> = Vec::with_capacity(asked.len());
    for (reading, conn) in asked {
        readings.push(reading);
        if let Some((key, conn)) = conn {
            connections.0.insert(key, conn);
        }
    }
    let (status, versions) = application::aggregate(&readings, expected);
    View {
        at: Instant::now(),
        status,
        versions,
    }
}

/// The port members answer `/state` on.
pub(crate) const MEMBER_PORT: u16 = 8081;

/// The connections one fleet's observer keeps open to its members between observations,
/// by member name and IP. Opening a TCP connection costs the healer more than the
/// request on it (most of an observation's CPU was connecting and closing), so a member
/// asked once a minute is asked on the connection of the minute before, as an HTTP/1.1
/// client pool does. A connection is kept only after a complete `200` answer that did not
/// say `Connection: close`; one found closed, or failing before any answer, is replaced
/// by a new one at once (a GET of a read-only view, so asking again is harmless). A
/// member that left the fleet, or changed IP, has its connection closed at the next
/// observation. Dropped with its observer.
#[derive(Default)]
pub(crate) struct Connections(HashMap<(String, String), Kept>);

/// An open connection kept for the next request, holding one of the process's
/// [`Slot`]s.
pub(crate) struct Kept {
    stream: TcpStream,
    slot: Slot,
}

/// One of the file descriptors the kept connections may use: at most half of the
/// process's open-file limit, so the API connections, the watches and the metrics
/// server never run short; past it a member is asked on a connection of its own, closed
/// after the answer, as before.
struct Slot;

static SLOTS_USED: AtomicUsize = AtomicUsize::new(0);

impl Slot {
    fn take() -> Option<Slot> {
        static LIMIT: OnceLock<usize> = OnceLock::new();
        let limit = *LIMIT.get_or_init(|| {
            rustix::process::getrlimit(rustix::process::Resource::Nofile)
                .current
                .map_or(usize::MAX, |n| usize::try_from(n / 2).unwrap_or(usize::MAX))
        });
        let used = SLOTS_USED.fetch_add(1, Ordering::Relaxed);
        if used < limit {
            Some(Slot)
        } else {
            SLOTS_USED.fetch_sub(1, Ordering::Relaxed);
            None
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        SLOTS_USED.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Kept {
    /// The connection, if the member has not closed it meanwhile (a closed one reads
    /// end-of-file at once, an open and idle one would block; anything else, such as
    /// bytes nobody asked for, makes it unusable).
    fn open(self) -> Option<(TcpStream, Slot)> {
        let mut probe = [0u8; 1];
        match self.stream.try_read(&mut probe) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Some((self.stream, self.slot)),
            _ => None,
        }
    }
}

/// `GET http://<ip>:<port><path>`: one connection, GET only, no redirects followed (a
/// redirect is the answer), 1 s to connect, 2 s in all, the body limited to 1 MiB.
pub(crate) async fn fetch(ip: &str, port: u16, path: &str) -> Answer {
    fetch_on(None, ip, port, path).await.0
}

/// [`fetch`] on `kept` if it is still open, else on a new connection (within the same
/// 2 s); returns the connection to keep for the next request, if the answer allows it.
async fn fetch_on(kept: Option<Kept>, ip: &str, port: u16, path: &str) -> (Answer, Option<Kept>) {
    let addr = format!("{ip}:{port}");
    let call = async {
        if let Some((stream, slot)) = kept.and_then(Kept::open) {
            // Closed under us before answering (`Unanswered`): ask on a new connection.
            if let Ok((answer, stream)) = exchange(stream, &addr, path).await {
                return Ok((answer, keep(stream, Some(slot))));
            }
        }
        let Ok(stream) =
            tokio::time::timeout(Duration::from_secs(1), TcpStream::connect(&addr)).await
        else {
            return Ok((Answer::Slow, None));
        };
        let stream = stream.map_err(|e| format!("connect: {e}"))?;
        let (answer, stream) = exchange(stream, &addr, path).await.map_err(|e| e.0)?;
        Ok::<_, String>((answer, keep(stream, None)))
    };
    match tokio::time::timeout(Duration::from_secs(2), call).await {
        Ok(Ok(a)) => a,
        Ok(Err(e)) => (Answer::Failed(e), None),
        Err(_) => (Answer::Slow, None),
    }
}

fn keep(stream: Option<TcpStream>, slot: Option<Slot>) -> Option<Kept> {
    let stream = stream?;
    let slot = slot.or_else(Slot::take)?;
    Some(Kept { stream, slot })
}

/// A request that got no answer at all (the connection failed or closed before the
/// response's status line).
struct Unanswered(String);

/// One request and its answer on `stream`, and the stream back when it may carry the
/// next request (the answer was a complete `200` over HTTP/1.1 without
/// `Connection: close`, and nothing followed it).
async fn exchange(
    stream: TcpStream,
    addr: &str,
    path: &str,
) -> Result<(Answer, Option<TcpStream>), Unanswered> {
    let (mut sender, mut conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(|e| Unanswered(format!("handshake: {e}")))?;
    let req = hyper::Request::get(path)
        .header(hyper::header::HOST, addr)
        .body(Empty::<Bytes>::new())
        .map_err(|e| Unanswered(e.to_string()))?;
    // The sender moves in, so it is dropped once the answer is read: the connection
    // then ends, idle, and hands its stream back.
    let ask = async move {
        let resp = sender
            .send_request(req)
            .await
            .map_err(|e| Unanswered(format!("request: {e}")))?;
        let status = resp.status().as_u16();
        if status == 503 {
            // Rule R9: a member recovering its predecessor's log says so in the body.
            let body = Limited::new(resp.into_body(), application::MAX_UNAVAILABLE_BODY_BYTES)
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            let recovering =
                String::from_utf8_lossy(&body).contains(application::RECOVERY_IN_PROGRESS);
            return Ok((
                if recovering {
                    Answer::Recovering
                } else {
                    Answer::Status(status)
                },
                false,
            ));
        }
        if status != 200 {
            return Ok((Answer::Status(status), false));
        }
        let reusable = resp.version() == hyper::Version::HTTP_11
            && !resp
                .headers()
                .get_all(hyper::header::CONNECTION)
                .iter()
                .any(|v| {
                    v.to_str()
                        .is_ok_and(|v| v.to_ascii_lowercase().contains("close"))
                });
        let answer = match Limited::new(resp.into_body(), application::MAX_BODY_BYTES)
            .collect()
            .await
        {
            Ok(b) => Answer::Body(b.to_bytes().to_vec()),
            Err(e) if e.is::<LengthLimitError>() => return Ok((Answer::TooLarge, false)),
            Err(e) => return Ok((Answer::Failed(format!("body: {e}")), false)),
        };
        Ok((answer, reusable))
    };
    tokio::pin!(ask);
    // Drive the connection while the answer is read. It ends early only on an error,
    // which the answer then reports.
    let mut ended = None;
    let (answer, reusable) = loop {
        tokio::select! {
            r = &mut ask => break r?,
            e = std::future::poll_fn(|cx| conn.poll_without_shutdown(cx)), if ended.is_none() => {
                ended = Some(e.is_ok());
            }
        }
    };
    if !reusable {
        return Ok((answer, None));
    }
    let idle = match ended {
        Some(ok) => ok,
        None => std::future::poll_fn(|cx| conn.poll_without_shutdown(cx))
            .await
            .is_ok(),
    };
    let parts = conn.into_parts();
    let stream = (idle && parts.read_buf.is_empty()).then(|| parts.io.into_inner());
    Ok((answer, stream))
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

    /// How a test member answers on each connection it accepts.
    #[derive(Clone, Copy)]
    enum Serves {
        /// Every request, keeping the connection open.
        KeepingOpen,
        /// One request, then closes the connection (without saying so).
        OnceThenCloses,
        /// One request, saying `Connection: close`.
        SayingClose,
        /// The first request; closes the connection on the second without answering.
        OnceThenDropsTheNext,
    }

    /// A member listening on `addr`: the connections it accepted and the requests it
    /// answered, and its port.
    async fn member_on(addr: &str, serves: Serves) -> (Arc<AtomicUsize>, Arc<AtomicUsize>, u16) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let Ok(listener) = tokio::net::TcpListener::bind(addr).await else {
            panic!("cannot bind {addr}");
        };
        let port = listener.local_addr().expect("addr").port();
        let (accepted, answered) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (a, n) = (accepted.clone(), answered.clone());
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                a.fetch_add(1, Ordering::SeqCst);
                let n = n.clone();
                tokio::spawn(async move {
                    let mut asked = 0;
                    let mut buf = Vec::new();
                    loop {
                        let mut chunk = [0u8; 1024];
                        let Ok(got) = s.read(&mut chunk).await else {
                            return;
                        };
                        if got == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..got]);
                        if !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                            continue;
                        }
                        buf.clear();
                        asked += 1;
                        let close = match serves {
                            Serves::KeepingOpen => false,
                            Serves::OnceThenCloses | Serves::SayingClose => true,
                            Serves::OnceThenDropsTheNext if asked > 1 => return,
                            Serves::OnceThenDropsTheNext => false,
                        };
                        let header = if matches!(serves, Serves::SayingClose) {
                            "Connection: close\r\n"
                        } else {
                            ""
                        };
                        let reply = format!(
                            "HTTP/1.1 200 OK\r\n{header}Content-Length: 7\r\n\r\nanswer{asked}"
                        );
                        if s.write_all(reply.as_bytes()).await.is_err() {
                            return;
                        }
                        n.fetch_add(1, Ordering::SeqCst);
                        if close {
                            return;
                        }
                    }
                });
            }
        });
        (accepted, answered, port)
    }

    /// A member on a free port of 127.0.0.1.
    async fn member(serves: Serves) -> (Arc<AtomicUsize>, Arc<AtomicUsize>, u16) {
        member_on("127.0.0.1:0", serves).await
    }

    async fn ask(kept: Option<Kept>, port: u16) -> (Answer, Option<Kept>) {
        fetch_on(kept, "127.0.0.1", port, "/state?view=application").await
    }

    fn body(a: &Answer) -> &[u8] {
        match a {
            Answer::Body(b) => b,
            other => panic!("no body: {other:?}"),
        }
    }

    /// A member asked again is asked on the connection kept from the last time.
    #[tokio::test]
    async fn a_member_is_asked_again_on_the_kept_connection() {
        let (accepted, answered, port) = member(Serves::KeepingOpen).await;
        let (a, kept) = ask(None, port).await;
        assert_eq!(body(&a), b"answer1");
        let (a, kept) = ask(Some(kept.expect("kept")), port).await;
        assert_eq!(
            body(&a),
            b"answer2",
            "the second request on the same connection"
        );
        assert!(kept.is_some());
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
        assert_eq!(answered.load(Ordering::SeqCst), 2);
    }

    /// A kept connection the member closed meanwhile is replaced by a new one, and the
    /// member is answered all the same.
    #[tokio::test]
    async fn a_connection_closed_by_the_member_is_replaced() {
        let (accepted, _, port) = member(Serves::OnceThenCloses).await;
        let (_, kept) = ask(None, port).await;
        let kept = kept.expect("nothing said it would close");
        tokio::time::sleep(Duration::from_millis(50)).await;
        let (a, _) = ask(Some(kept), port).await;
        assert_eq!(body(&a), b"answer1", "answered on a new connection");
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    }

    /// A request that a kept connection drops unanswered is asked again on a new one.
    #[tokio::test]
    async fn a_request_dropped_unanswered_is_asked_again_on_a_new_connection() {
        let (accepted, answered, port) = member(Serves::OnceThenDropsTheNext).await;
        let (_, kept) = ask(None, port).await;
        let (a, kept) = ask(kept, port).await;
        assert_eq!(body(&a), b"answer1", "the new connection's first answer");
        assert!(kept.is_some());
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
        assert_eq!(answered.load(Ordering::SeqCst), 2);
    }

    /// An answer saying `Connection: close`, or one that is not a `200`, leaves nothing
    /// kept.
    #[tokio::test]
    async fn a_connection_the_member_will_close_is_not_kept() {
        let (_, _, port) = member(Serves::SayingClose).await;
        let (a, kept) = ask(None, port).await;
        assert_eq!(body(&a), b"answer1");
        assert!(kept.is_none());
    }

    /// The observer's connections follow its members: one per member asked, and a
    /// member gone (or no longer ready) has its connection closed.
    #[tokio::test]
    async fn a_fleet_keeps_connections_only_to_its_current_members() {
        // Members answer on MEMBER_PORT, each on a loopback address of its own.
        let mut accepted = Vec::new();
        let mut members = Vec::new();
        for i in 1..=2 {
            let ip = format!("127.93.0.{i}");
            let (a, _, _) = member_on(&format!("{ip}:{MEMBER_PORT}"), Serves::KeepingOpen).await;
            accepted.push(a);
            members.push(Member {
                name: format!("m-{i}"),
                ip: Some(ip),
                ready: true,
                terminating: false,
                started: None,
            });
        }
        let accepted = || -> usize { accepted.iter().map(|a| a.load(Ordering::SeqCst)).sum() };
        let mut connections = Connections::default();
        observe(&members, 2, &mut connections).await;
        assert_eq!(connections.0.len(), 2);
        observe(&members, 2, &mut connections).await;
        assert_eq!(connections.0.len(), 2);
        assert_eq!(accepted(), 2, "asked again on the same two");
        members[1].ready = false;
        observe(&members, 2, &mut connections).await;
        assert_eq!(connections.0.len(), 1, "only the member still asked");
        observe(&members[..0], 2, &mut connections).await;
        assert!(connections.0.is_empty());
    }
}
