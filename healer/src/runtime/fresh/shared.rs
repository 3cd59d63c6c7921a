//! Fresh reads shared by the fleets of a namespace that wait for one at the same time.
//!
//! Every destructive write waits for a fresh read of its fleet, started after the write
//! was decided. When many fleets fall due at once (a lost node or zone), each read of
//! its own put seven lists per fleet in front of the API server, and the writes queued
//! behind them. Here at most [`AT_ONCE`] reads of a namespace are on the wire: a fleet
//! asking while they all are joins the next read, which starts when one of them has
//! finished and carries every fleet that asked meanwhile ([`super::many`]). So a read
//! never answers a fleet that asked after it started: each answer is read after its
//! question, as when every fleet had a read of its own. A fleet that asks when fewer are
//! on the wire is read at once, alone, exactly as before.
//!
//! Why not one read at a time: in a burst at 200 fleets in one namespace, the reads then
//! went out one after another, each waiting for the one before (about 0.6 s each under
//! that load), and fleets waited for their read longer than for their delete.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use celld_api::CelldFleet;
use celld_api::validate::formats::is_identity;
use futures::future::BoxFuture;
use kube::Client;
use kube::runtime::reflector::Store;
use tokio::sync::oneshot;

use super::Gathered;
use super::many::{Listing, read_many};

/// At most this many fleets in one shared read (each identity adds about 27 bytes to the
/// label selectors' query).
pub const MAX_BATCH: usize = 128;

/// Reads of one namespace on the wire at once.
pub const AT_ONCE: usize = 4;

/// A shared read lists the objects it reads by name whole (the namespace's CelldFleets
/// and workloads, the reservations) when its fleets are at least one in this many of the
/// namespace's: one larger list instead of several small ones per fleet.
const WHOLE_ONE_IN: usize = 16;

/// Why a fresh read gave no answer (nothing is written: the fleet is retried).
#[derive(Debug, Clone, thiserror::Error)]
pub enum ReadError {
    /// A request of the read failed (every fleet sharing the read gets this).
    #[error(transparent)]
    Api(Arc<kube::Error>),
    /// The read was dropped before it answered (the healer is stopping).
    #[error("the shared fresh read ended without an answer")]
    Abandoned,
}

impl From<kube::Error> for ReadError {
    fn from(e: kube::Error) -> Self {
        ReadError::Api(Arc::new(e))
    }
}

/// What one fleet gets back from a fresh read (see [`super::read`]).
pub type Answer = Result<Option<(CelldFleet, Gathered)>, ReadError>;

/// A fleet waiting for the next read of its namespace.
struct Waiter {
    fleet: Arc<CelldFleet>,
    reply: oneshot::Sender<Answer>,
}

/// The fleets waiting in one namespace, and its readers; present while one runs.
#[derive(Default)]
struct Queue {
    waiting: Vec<Waiter>,
    /// Reader tasks running (each with at most one read on the wire).
    readers: usize,
}

/// One read of namespace `ns` for the fleets given, answering each in order.
type ReadFn = dyn Fn(String, Vec<Arc<CelldFleet>>) -> BoxFuture<'static, Vec<Answer>> + Send + Sync;

/// The fresh reads of every namespace (cheap to clone).
#[derive(Clone)]
pub struct Reads {
    /// Makes one read (from the API server: [`answer`]).
    read: Arc<ReadFn>,
    /// Reader tasks per namespace at most ([`AT_ONCE`]).
    at_once: usize,
    /// Per namespace, the fleets waiting for its next read. A namespace is present
    /// exactly while one of its reader tasks runs.
    queues: Arc<Mutex<HashMap<String, Queue>>>,
}

/// Counts a reader out when it ends otherwise than by finding no fleet waiting (a
/// panic, say); the last one out removes the namespace's queue, so the fleets still
/// waiting get [`ReadError::Abandoned`] and the next one to ask starts a new reader. A
/// reader that ends normally counts itself out under the lock that saw no fleet
/// waiting, and disarms this (doing it here, later, could count out a reader started
/// after it).
struct Running {
    queues: Arc<Mutex<HashMap<String, Queue>>>,
    ns: String,
    armed: bool,
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.armed {
            let mut queues = self.queues.lock().unwrap_or_else(|p| p.into_inner());
            leave(&mut queues, &self.ns);
        }
    }
}

/// Counts one reader of `ns` out; the last one removes the queue.
fn leave(queues: &mut HashMap<String, Queue>, ns: &str) {
    if let Some(q) = queues.get_mut(ns) {
        q.readers = q.readers.saturating_sub(1);
        if q.readers == 0 {
            queues.remove(ns);
        }
    }
}

impl Reads {
    /// Fresh reads through `client`; `fleets` is the CelldFleet cache (to size a shared
    /// read against its namespace).
    pub fn new(client: Client, fleets: Store<CelldFleet>) -> Reads {
        let read: Arc<ReadFn> = Arc::new(move |ns, batch| {
            let (client, fleets) = (client.clone(), fleets.clone());
            Box::pin(async move { answer(&client, &fleets, &ns, &batch).await })
        });
        Reads::with(read, AT_ONCE)
    }

    /// Fresh reads made by `read`, at most `at_once` of a namespace on the wire.
    fn with(read: Arc<ReadFn>, at_once: usize) -> Reads {
        Reads {
            read,
            at_once: at_once.max(1),
            queues: Arc::default(),
        }
    }

    /// Reads `fleet` and its objects from the API server, in a read started after this
    /// call (see the module documentation); `Ok(None)` when the CelldFleet is gone or
    /// was replaced.
    pub async fn read(&self, fleet: &Arc<CelldFleet>) -> Answer {
        // An identity that is not one could not be put in a selector with others: such a
        // fleet (invalid, so never acted on) is read alone.
        let ns = fleet.metadata.namespace.clone().unwrap_or_default();
        if !is_identity(&fleet.spec.identity) {
            let mut alone = (self.read)(ns, vec![fleet.clone()]).await;
            return alone.pop().unwrap_or(Err(ReadError::Abandoned));
        }
        let (reply, answer) = oneshot::channel();
        let start = {
            let mut queues = self.queues.lock().unwrap_or_else(|p| p.into_inner());
            let q = queues.entry(ns.clone()).or_default();
            q.waiting.push(Waiter {
                fleet: fleet.clone(),
                reply,
            });
            // A reader free to take it now, or one that will be.
            let start = q.readers < self.at_once;
            q.readers += usize::from(start);
            start
        };
        if start {
            tokio::spawn(self.clone().reader(ns));
        }
        answer.await.unwrap_or(Err(ReadError::Abandoned))
    }

    /// Reads namespace `ns` for the fleets waiting, one read at a time, until none waits
    /// (counted in [`Queue::readers`] when spawned).
    async fn reader(self, ns: String) {
        let mut running = Running {
            queues: self.queues.clone(),
            ns: ns.clone(),
            armed: true,
        };
        loop {
            let batch: Vec<Waiter> = {
                let mut queues = self.queues.lock().unwrap_or_else(|p| p.into_inner());
                let Some(q) = queues.get_mut(&ns) else {
                    running.armed = false;
                    return;
                };
                if q.waiting.is_empty() {
                    leave(&mut queues, &ns);
                    running.armed = false;
                    return;
                }
                let n = q.waiting.len().min(MAX_BATCH);
                q.waiting.drain(..n).collect()
            };
            // Started now: after every question it answers was asked.
            let fleets = batch.iter().map(|w| w.fleet.clone()).collect();
            let answers = (self.read)(ns.clone(), fleets).await;
            for (w, a) in batch.into_iter().zip(answers) {
                // A fleet no longer waiting (its reconcile was dropped) needs no answer.
                let _ = w.reply.send(a);
            }
        }
    }
}

/// One read of namespace `ns` for the fleets of `batch`, from the API server: alone as
/// [`super::read`] for one fleet, shared ([`read_many`]) for several.
async fn answer(
    client: &Client,
    fleets: &Store<CelldFleet>,
    ns: &str,
    batch: &[Arc<CelldFleet>],
) -> Vec<Answer> {
    if let [one] = batch {
        return vec![super::read(client, one).await.map_err(Into::into)];
    }
    let all = fleets.state();
    let in_namespace = all
        .iter()
        .filter(|f| f.metadata.namespace.as_deref() == Some(ns))
        .count();
    let listing = Listing {
        namespace_whole: whole(batch.len(), in_namespace),
        // One reservation per fleet of the cluster, whatever its namespace.
        reservations_whole: whole(batch.len(), all.len()),
    };
    match read_many(client, ns, batch, listing).await {
        Ok(answers) => answers.into_iter().map(Ok).collect(),
        Err(e) => {
            let e = ReadError::from(e);
            batch.iter().map(|_| Err(e.clone())).collect()
        }
    }
}

/// Whether a shared read of `reading` fleets lists a kind it reads by name whole, in a
/// scope holding that kind for `in_scope` fleets (see [`WHOLE_ONE_IN`]).
fn whole(reading: usize, in_scope: usize) -> bool {
    reading.saturating_mul(WHOLE_ONE_IN) >= in_scope
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use tokio::sync::Semaphore;

    use super::*;
    use crate::testkit::fleet_object;

    #[test]
    fn a_read_lists_whole_when_its_fleets_are_a_large_share() {
        assert!(whole(2, 20));
        assert!(whole(13, 200));
        assert!(!whole(12, 200));
        assert!(!whole(16, 1000));
        assert!(whole(63, 1000));
    }

    /// What a fake read was asked: its number and the fleets it read.
    type Log = Arc<Mutex<Vec<(usize, Vec<String>)>>>;

    /// Reads that each wait for a permit from `gate`, log what they read, and answer
    /// each fleet with its CelldFleet whose resourceVersion names the read.
    fn fake(gate: Arc<Semaphore>, log: Log, at_once: usize) -> Reads {
        let n = Arc::new(AtomicUsize::new(0));
        let read: Arc<ReadFn> = Arc::new(move |_ns, batch: Vec<Arc<CelldFleet>>| {
            let (gate, log, n) = (gate.clone(), log.clone(), n.clone());
            Box::pin(async move {
                let read = n.fetch_add(1, Ordering::SeqCst) + 1;
                let names = batch
                    .iter()
                    .map(|f| f.metadata.name.clone().unwrap_or_default());
                log.lock().expect("log").push((read, names.collect()));
                gate.acquire().await.expect("gate").forget();
                batch
                    .iter()
                    .map(|f| {
                        let mut fresh = (**f).clone();
                        fresh.metadata.resource_version = Some(format!("read-{read}"));
                        Ok(Some((fresh, empty())))
                    })
                    .collect()
            })
        });
        Reads::with(read, at_once)
    }

    fn empty() -> Gathered {
        Gathered {
            workload_sts: None,
            workload_dep: None,
            pods: Vec::new(),
            claims: Vec::new(),
            replica_sets: Vec::new(),
            reservation: Some(None),
        }
    }

    /// The read that answered (the resourceVersion the fake put there).
    fn answered_by(a: Answer) -> String {
        let (fleet, _) = a.expect("an answer").expect("the fleet");
        fleet.metadata.resource_version.unwrap_or_default()
    }

    fn fleet(ns: &str, name: &str) -> Arc<CelldFleet> {
        let identity = format!("{name:0<26}");
        Arc::new(fleet_object(ns, name, &identity))
    }

    /// Lets the spawned tasks run until each is waiting.
    async fn settle() {
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    /// A fleet asking while every read it may start is on the wire is not answered by
    /// one of them (they started before the question): it waits for the next read, which
    /// carries every fleet that asked meanwhile, together. Another namespace reads on
    /// its own.
    #[tokio::test]
    async fn a_read_answers_only_the_fleets_that_asked_before_it_started() {
        let (gate, log) = (Arc::new(Semaphore::new(0)), Log::default());
        let reads = fake(gate.clone(), log.clone(), 1);
        let ask = |f: Arc<CelldFleet>| {
            let reads = reads.clone();
            tokio::spawn(async move { reads.read(&f).await })
        };
        let a = ask(fleet("ns", "a"));
        settle().await;
        let (b, c) = (ask(fleet("ns", "b")), ask(fleet("ns", "c")));
        let other = ask(fleet("elsewhere", "d"));
        settle().await;
        assert_eq!(
            log.lock().expect("log").len(),
            2,
            "a's read and d's, nothing more"
        );
        gate.add_permits(1);
        settle().await;
        gate.add_permits(2);
        let (a, b, c, other) = (a.await, b.await, c.await, other.await);
        let log = log.lock().expect("log").clone();
        let read_of = |name: &str| {
            log.iter()
                .find(|(_, names)| names.iter().any(|n| n == name))
                .map(|(n, _)| format!("read-{n}"))
                .expect("read")
        };
        assert_eq!(log.len(), 3, "{log:?}");
        assert_eq!(log[0].1, ["a"]);
        assert_eq!(
            read_of("b"),
            read_of("c"),
            "b and c share the read after a's"
        );
        assert!(log.iter().any(|(_, n)| n == &["b", "c"]), "{log:?}");
        assert_eq!(answered_by(a.expect("task")), read_of("a"));
        assert_eq!(answered_by(b.expect("task")), read_of("b"));
        assert_eq!(answered_by(c.expect("task")), read_of("c"));
        assert_eq!(answered_by(other.expect("task")), read_of("d"));
        assert_ne!(read_of("a"), read_of("b"));
    }

    /// A reader that dies answers nothing wrong: its fleets get an error (and are
    /// retried), and the next fleet to ask gets a read of its own.
    #[tokio::test]
    async fn a_read_that_dies_leaves_no_fleet_waiting() {
        let calls = Arc::new(AtomicUsize::new(0));
        let c = calls.clone();
        let read: Arc<ReadFn> = Arc::new(move |_ns, batch: Vec<Arc<CelldFleet>>| {
            let first = c.fetch_add(1, Ordering::SeqCst) == 0;
            Box::pin(async move {
                assert!(!first, "the first read dies");
                batch
                    .iter()
                    .map(|f| Ok(Some(((**f).clone(), empty()))))
                    .collect()
            })
        });
        let reads = Reads::with(read, AT_ONCE);
        let died = reads.read(&fleet("ns", "a")).await;
        assert!(
            matches!(died, Err(ReadError::Abandoned)),
            "{:?}",
            died.as_ref().err()
        );
        let next = tokio::time::timeout(Duration::from_secs(5), reads.read(&fleet("ns", "b")))
            .await
            .expect("the next read is not stuck behind the dead one");
        assert!(matches!(next, Ok(Some(_))), "{:?}", next.as_ref().err());
        assert!(reads.queues.lock().expect("queues").is_empty());
    }

    /// A fleet whose identity is not one is never put in a shared read's selector.
    #[tokio::test]
    async fn a_fleet_without_a_valid_identity_is_read_alone() {
        let (gate, log) = (Arc::new(Semaphore::new(0)), Log::default());
        let reads = fake(gate.clone(), log.clone(), 1);
        let r = reads.clone();
        let a = tokio::spawn(async move { r.read(&fleet("ns", "a")).await });
        settle().await;
        let mut bad = (*fleet("ns", "bad")).clone();
        bad.spec.identity = "x) , y in (z".into();
        let r = reads.clone();
        let bad = tokio::spawn(async move { r.read(&Arc::new(bad)).await });
        settle().await;
        gate.add_permits(2);
        assert!(a.await.expect("task").is_ok());
        assert!(bad.await.expect("task").is_ok());
        let log = log.lock().expect("log").clone();
        assert_eq!(log.len(), 2, "{log:?}");
        assert!(log.iter().all(|(_, names)| names.len() == 1), "{log:?}");
    }

    /// Up to `at_once` reads of a namespace go out without waiting for each other; the
    /// fleets asking while all are on the wire share the next one, and when every read
    /// has answered no reader is left behind.
    #[tokio::test]
    async fn reads_of_a_namespace_go_out_at_once_up_to_the_limit() {
        let (gate, log) = (Arc::new(Semaphore::new(0)), Log::default());
        let reads = fake(gate.clone(), log.clone(), 2);
        let ask = |name: &str| {
            let (reads, f) = (reads.clone(), fleet("ns", name));
            tokio::spawn(async move { reads.read(&f).await })
        };
        let a = ask("a");
        settle().await;
        let b = ask("b");
        settle().await;
        assert_eq!(log.lock().expect("log").len(), 2, "a and b read at once");
        let (c, d) = (ask("c"), ask("d"));
        settle().await;
        assert_eq!(
            log.lock().expect("log").len(),
            2,
            "c and d wait for a free read"
        );
        gate.add_permits(1);
        settle().await;
        gate.add_permits(3);
        for t in [a, b, c, d] {
            assert!(t.await.expect("task").is_ok());
        }
        let log = log.lock().expect("log").clone();
        assert_eq!(log.len(), 3, "{log:?}");
        assert!(log.iter().any(|(_, n)| n == &["c", "d"]), "{log:?}");
        settle().await;
        assert!(reads.queues.lock().expect("queues").is_empty());
    }
}
