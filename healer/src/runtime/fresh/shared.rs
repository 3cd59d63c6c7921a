//! Fresh reads shared by the fleets of a namespace that ask at the same moment.
//!
//! When a node or a zone is lost, many fleets of a namespace reach a force delete in the
//! same second, and each must confirm it on a fresh read (`crate::confirm`). Read one by
//! one, that is seven lists or more per fleet, sent to an API server that the burst
//! already loads, before each delete. Here a fleet asking for a fresh read joins the
//! namespace's line; a read serves every fleet waiting when it starts
//! ([`super::read_many`]: one request per kind for all of them).
//!
//! **When a read starts.** A deletionTimestamp has whole seconds, so the fleets of a
//! burst are due at the same instant: they wake within milliseconds of each other and
//! reach their confirmation over the next few tens of milliseconds, as the runtime's
//! threads get to them. A read therefore starts once no fleet has joined the line for
//! [`QUIET`], and at the latest [`MOST_WAIT`] after the first of its fleets asked (plus
//! any wait for a read in flight); a lone fleet waits [`QUIET`]. Up to [`IN_FLIGHT`]
//! reads of a namespace run at once, so a fleet that asks while a read is under way
//! waits for that gathering wait, not for the read under way to end.
//!
//! **Freshness is kept:** a fleet is served only by a read that *starts after it
//! asked*. A fleet that asks while a read is in flight waits for the next one, never
//! takes the answer of a read already under way, which may have been sent before what
//! the fleet decided on happened. So each fleet's facts are at least as new as those of
//! a read of its own sent at the moment it asked, and each fleet keeps exactly what that
//! read would have selected. The simulation's `sim_fails_when_a_shared_read_started_
//! before_the_request` shows what taking a read already under way would do.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use celld_api::CelldFleet;
use futures::future::BoxFuture;
use kube::Client;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};
use tokio::time::Instant;
use tracing::debug;

use super::{Gathered, read_many};

/// At most this many fleets share one read (the set-based selectors name each fleet's
/// identity; this keeps the request line short). More wait for the next read.
/// (The healer reconciles at most 48 fleets at once, `controller::CONCURRENCY`, so today
/// fewer ever wait.)
pub const MOST_SHARING: usize = 64;

/// A read starts once no fleet has joined its line for this long (see the module docs).
pub const QUIET: Duration = Duration::from_millis(10);

/// A read starts at the latest this long after the first fleet it serves asked, however
/// many keep joining (plus any wait for a read in flight, when [`IN_FLIGHT`] are).
pub const MOST_WAIT: Duration = Duration::from_millis(50);

/// Reads of one namespace in flight at once.
pub const IN_FLIGHT: usize = 2;

/// What a fleet's fresh read answered: its fresh CelldFleet and objects (`None`: gone).
pub type Answer = Result<Option<(CelldFleet, Gathered)>, Arc<kube::Error>>;

struct Waiting {
    fleet: Arc<CelldFleet>,
    /// The nodes the caches show under the fleet's terminating Pods (read with the rest).
    nodes: Vec<String>,
    reply: oneshot::Sender<Answer>,
    asked: Instant,
}

/// One namespace's line: the fleets waiting for the next read, when the first and the
/// latest of them asked, whether a task gathers them, and the namespace's reads in
/// flight (its permits).
struct Line {
    waiting: Vec<Waiting>,
    first: Instant,
    latest: Instant,
    gathering: bool,
    reads: Arc<Semaphore>,
}

impl Line {
    fn new(now: Instant) -> Line {
        Line {
            waiting: Vec::new(),
            first: now,
            latest: now,
            gathering: false,
            reads: Arc::new(Semaphore::new(IN_FLIGHT)),
        }
    }

    /// Whether nothing is left of the line: nobody waits, nobody gathers, no read runs.
    fn idle(&self) -> bool {
        self.waiting.is_empty() && !self.gathering && self.reads.available_permits() == IN_FLIGHT
    }
}

/// What one read of some fleets of a namespace answers, in their order.
type Read = Result<Vec<Option<(CelldFleet, Gathered)>>, kube::Error>;

/// Reads fleets of one namespace, and the nodes named: [`read_many`] (a test's own in
/// the unit tests).
type Reader =
    Box<dyn Fn(Vec<Arc<CelldFleet>>, Vec<String>) -> BoxFuture<'static, Read> + Send + Sync>;

/// Removes a namespace's line when its gathering task ends early (see `gather`).
struct Clear<'a> {
    reads: &'a SharedReads,
    ns: &'a str,
    armed: bool,
}

impl Drop for Clear<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.reads.lines().remove(self.ns);
        }
    }
}

/// The fresh reads of every namespace (one line each).
pub struct SharedReads {
    reader: Reader,
    lines: Mutex<HashMap<String, Line>>,
    /// Told how many fleets each read served (`celld_healer_fresh_read_rounds_total`).
    on_round: Box<dyn Fn(usize) + Send + Sync>,
}

impl SharedReads {
    /// Reads through `client`; `on_round` is told how many fleets each read served.
    pub fn new(client: Client, on_round: impl Fn(usize) + Send + Sync + 'static) -> Arc<Self> {
        let reader: Reader = Box::new(move |fleets, nodes| {
            let client = client.clone();
            Box::pin(async move { read_many(&client, &fleets, &nodes).await })
        });
        Self::with_reader(reader, on_round)
    }

    fn with_reader(reader: Reader, on_round: impl Fn(usize) + Send + Sync + 'static) -> Arc<Self> {
        Arc::new(SharedReads {
            reader,
            lines: Mutex::new(HashMap::new()),
            on_round: Box::new(on_round),
        })
    }

    fn lines(&self) -> std::sync::MutexGuard<'_, HashMap<String, Line>> {
        self.lines
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Reads `fleet` fresh, with whichever fleets of its namespace ask before the read
    /// starts (see the module docs). `nodes`: the nodes the caches show under its
    /// terminating Pods, read in the same round trip as the rest (a node found under a
    /// terminating Pod only on the fresh read is read after it).
    pub async fn read(self: &Arc<Self>, fleet: Arc<CelldFleet>, nodes: Vec<String>) -> Answer {
        let ns = fleet.metadata.namespace.clone().unwrap_or_default();
        let (reply, answer) = oneshot::channel();
        let start = {
            let now = Instant::now();
            let mut lines = self.lines();
            let line = lines.entry(ns.clone()).or_insert_with(|| Line::new(now));
            if line.waiting.is_empty() {
                line.first = now;
            }
            line.latest = now;
            line.waiting.push(Waiting {
                fleet,
                nodes,
                reply,
                asked: now,
            });
            !std::mem::replace(&mut line.gathering, true)
        };
        if start {
            tokio::spawn(self.clone().gather(ns));
        }
        answer.await.unwrap_or_else(|_| {
            Err(Arc::new(kube::Error::Service(
                "the shared fresh read ended without an answer".into(),
            )))
        })
    }

    /// Gathers namespace `ns`'s line into reads until nobody waits: each round waits for
    /// the line to be quiet ([`QUIET`], [`MOST_WAIT`]) and for a read in flight to end if
    /// [`IN_FLIGHT`] are, then takes every fleet waiting at that moment (at most
    /// [`MOST_SHARING`]) into a read of their own.
    async fn gather(self: Arc<Self>, ns: String) {
        // Should this task end any other way than below (a panic, the runtime dropping
        // it), the line goes with it: its waiters are answered with an error instead of
        // waiting for ever, and the next fleet to ask starts a line afresh.
        let mut clear = Clear {
            reads: &self,
            ns: &ns,
            armed: true,
        };
        loop {
            // The gathering wait, from the first and the latest fleet waiting; then the
            // namespace's permits.
            let slots = loop {
                let (until, slots) = {
                    let lines = self.lines();
                    let Some(line) = lines.get(&ns) else {
                        clear.armed = false;
                        return;
                    };
                    let until = (line.latest + QUIET).min(line.first + MOST_WAIT);
                    (until, line.reads.clone())
                };
                if Instant::now() >= until {
                    break slots;
                }
                tokio::time::sleep_until(until).await;
            };
            // Never closed: the line owns it.
            let Ok(permit) = slots.acquire_owned().await else {
                return;
            };
            let round: Vec<Waiting> = {
                let mut lines = self.lines();
                let Some(line) = lines.get_mut(&ns) else {
                    clear.armed = false;
                    return;
                };
                let n = line.waiting.len().min(MOST_SHARING);
                let round: Vec<Waiting> = line.waiting.drain(..n).collect();
                // Those left (past MOST_SHARING) keep the time the first of them asked.
                line.first = line.waiting.first().map_or_else(Instant::now, |w| w.asked);
                if line.waiting.is_empty() {
                    line.gathering = false;
                    clear.armed = false;
                }
                round
            };
            if !round.is_empty() {
                tokio::spawn(self.clone().serve(ns.clone(), round, permit));
            }
            if !clear.armed {
                return;
            }
        }
    }

    /// Reads the fleets of `round` (all of them asked before this moment) and answers
    /// each; the line goes once nothing is left of it.
    async fn serve(self: Arc<Self>, ns: String, round: Vec<Waiting>, permit: OwnedSemaphorePermit) {
        (self.on_round)(round.len());
        let fleets: Vec<Arc<CelldFleet>> = round.iter().map(|w| w.fleet.clone()).collect();
        let nodes: Vec<String> = round.iter().flat_map(|w| w.nodes.clone()).collect();
        let sent = Instant::now();
        let waited = round
            .iter()
            .map(|w| sent - w.asked)
            .max()
            .unwrap_or_default();
        let read = (self.reader)(fleets, nodes).await;
        drop(permit);
        debug!(
            namespace = %ns,
            fleets = round.len(),
            waited_ms = waited.as_millis() as u64,
            read_ms = sent.elapsed().as_millis() as u64,
            ok = read.is_ok(),
            "shared fresh read"
        );
        {
            let mut lines = self.lines();
            if lines.get(&ns).is_some_and(Line::idle) {
                lines.remove(&ns);
            }
        }
        match read {
            Ok(answers) => {
                for (w, a) in round.into_iter().zip(answers) {
                    // A fleet no longer waiting (its reconcile ended) is not answered.
                    let _ = w.reply.send(Ok(a));
                }
            }
            Err(e) => {
                let e = Arc::new(e);
                for w in round {
                    let _ = w.reply.send(Err(e.clone()));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex as StdMutex;

    use tokio::sync::mpsc;

    use super::*;

    fn fleet(ns: &str, name: &str) -> Arc<CelldFleet> {
        Arc::new(crate::testkit::fleet_object(
            ns,
            name,
            "7kq2m9x4c1v8b3n6z5h0j2w4r8",
        ))
    }

    fn name(f: &CelldFleet) -> String {
        f.metadata.name.clone().unwrap_or_default()
    }

    /// A reader that reports each read's fleets as it starts, and answers only when let
    /// go (one read per permit added to `go`; each fleet found as it was asked for, with
    /// nothing else).
    fn held_reader(started: mpsc::UnboundedSender<Vec<String>>, go: Arc<Semaphore>) -> Reader {
        Box::new(move |fleets, _| {
            let (started, go) = (started.clone(), go.clone());
            Box::pin(async move {
                let _ = started.send(fleets.iter().map(|f| name(f)).collect());
                if let Ok(p) = go.acquire().await {
                    p.forget();
                }
                Ok(fleets
                    .iter()
                    .map(|f| {
                        let g = Gathered {
                            workload_sts: None,
                            workload_dep: None,
                            pods: Vec::new(),
                            claims: Vec::new(),
                            replica_sets: Vec::new(),
                            reservation: Some(None),
                            nodes: Some(Vec::new()),
                        };
                        Some(((**f).clone(), g))
                    })
                    .collect())
            })
        })
    }

    type Asked = tokio::task::JoinHandle<Answer>;

    fn ask(reads: &Arc<SharedReads>, ns: &str, n: &str) -> Asked {
        let (reads, f) = (reads.clone(), fleet(ns, n));
        tokio::spawn(async move { reads.read(f, Vec::new()).await })
    }

    async fn answered(h: Asked) -> String {
        name(&h.await.expect("joined").expect("read").expect("found").0)
    }

    /// Shared reads through a [`held_reader`]: the reads started, the permits that let
    /// them answer, and the fleets each served.
    struct Held {
        reads: Arc<SharedReads>,
        started: mpsc::UnboundedReceiver<Vec<String>>,
        go: Arc<Semaphore>,
        rounds: Arc<StdMutex<Vec<usize>>>,
    }

    fn held() -> Held {
        let (tx, started) = mpsc::unbounded_channel();
        let go = Arc::new(Semaphore::new(0));
        let rounds = Arc::new(StdMutex::new(Vec::new()));
        let r = rounds.clone();
        let reads = SharedReads::with_reader(held_reader(tx, go.clone()), move |n| {
            r.lock().expect("rounds").push(n)
        });
        Held {
            reads,
            started,
            go,
            rounds,
        }
    }

    /// Fleets of a namespace that ask before a read starts share it; one that asks while
    /// it is under way is served by a read that starts after it asked (at once, beside
    /// the one under way), never by the one already sent. Another namespace has a line
    /// of its own.
    #[tokio::test(start_paused = true)]
    async fn a_read_serves_only_fleets_that_asked_before_it_started() {
        let Held {
            reads,
            mut started,
            go,
            rounds,
        } = held();
        // a and b ask together: one read serves both.
        let (a, b) = (ask(&reads, "apps", "a"), ask(&reads, "apps", "b"));
        let first = started.recv().await.expect("a first read");
        assert_eq!(first, ["a", "b"]);
        // c asks while that read is under way; d in another namespace.
        let (c, d) = (ask(&reads, "apps", "c"), ask(&reads, "other", "d"));
        let mut next = vec![
            started.recv().await.expect("a read"),
            started.recv().await.expect("a read"),
        ];
        next.sort();
        assert_eq!(
            next,
            [vec!["c"], vec!["d"]],
            "c is served by a read that started after it asked, while the first is held"
        );
        go.add_permits(3);
        for (h, want) in [(a, "a"), (b, "b"), (c, "c"), (d, "d")] {
            assert_eq!(answered(h).await, want);
        }
        let mut n = rounds.lock().expect("rounds").clone();
        n.sort_unstable();
        assert_eq!(n, [1, 1, 2]);
        assert!(reads.lines().is_empty(), "nothing is left of a line served");
    }

    /// Fleets that keep asking less than QUIET apart share one read; it starts QUIET
    /// after the latest of them, and at the latest MOST_WAIT after the first.
    #[tokio::test(start_paused = true)]
    async fn a_read_waits_for_the_line_to_be_quiet_but_not_for_ever() {
        let Held {
            reads,
            mut started,
            go,
            ..
        } = held();
        let t0 = Instant::now();
        let mut asked = Vec::new();
        for i in 0..3 {
            asked.push(ask(&reads, "apps", &format!("f{i}")));
            tokio::time::sleep(QUIET / 2).await;
        }
        let first = started.recv().await.expect("a read");
        assert_eq!(first, ["f0", "f1", "f2"]);
        // The latest asked at QUIET (two half-QUIET sleeps): the read starts QUIET later.
        let waited = Instant::now() - t0;
        assert!(
            waited >= 2 * QUIET && waited <= 2 * QUIET + Duration::from_millis(2),
            "a read waits for the quiet after the latest fleet: {waited:?}"
        );
        go.add_permits(1);
        for h in asked.drain(..) {
            answered(h).await;
        }
        // Fleets asking every QUIET/2 for ever: the first read starts MOST_WAIT after the
        // first of them.
        let t1 = Instant::now();
        let keep_asking = {
            let reads = reads.clone();
            tokio::spawn(async move {
                let mut hs = Vec::new();
                for i in 0..40 {
                    hs.push(ask(&reads, "apps", &format!("g{i:02}")));
                    tokio::time::sleep(QUIET / 2).await;
                }
                hs
            })
        };
        let first = started.recv().await.expect("a read");
        let waited = Instant::now() - t1;
        assert!(
            waited >= MOST_WAIT && waited < MOST_WAIT + QUIET,
            "started after {waited:?}"
        );
        assert!(
            (10..=11).contains(&first.len()),
            "the fleets of the first MOST_WAIT: {first:?}"
        );
        go.add_permits(100);
        for h in keep_asking.await.expect("joined") {
            answered(h).await;
        }
    }

    /// At most IN_FLIGHT reads of a namespace run at once: a fleet asking while they are
    /// held waits, and is read once one of them ends (in a read that starts after it
    /// asked).
    #[tokio::test(start_paused = true)]
    async fn at_most_in_flight_reads_of_a_namespace_run_at_once() {
        let Held {
            reads,
            mut started,
            go,
            ..
        } = held();
        let mut asked = Vec::new();
        for n in ["a", "b", "c"] {
            asked.push(ask(&reads, "apps", n));
            if n != "c" {
                assert_eq!(started.recv().await.expect("a read"), [n]);
            }
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(started.try_recv().is_err(), "a third read started");
        go.add_permits(1);
        assert_eq!(started.recv().await.expect("a read"), ["c"]);
        go.add_permits(2);
        for (h, want) in asked.into_iter().zip(["a", "b", "c"]) {
            assert_eq!(answered(h).await, want);
        }
    }

    /// A read that fails answers each fleet it served with the error.
    #[tokio::test]
    async fn a_failed_read_fails_every_fleet_it_served() {
        let reader: Reader = Box::new(|_, _| {
            Box::pin(async { Err(kube::Error::Service("the API server is away".into())) })
        });
        let reads = SharedReads::with_reader(reader, |_| {});
        let (x, y) = tokio::join!(
            reads.read(fleet("apps", "a"), Vec::new()),
            reads.read(fleet("apps", "b"), Vec::new())
        );
        assert!(x.is_err() && y.is_err());
    }
}
