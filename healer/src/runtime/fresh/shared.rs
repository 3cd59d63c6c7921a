//! Fresh reads shared by the fleets of a namespace that wait for one at the same time.
//!
//! Every destructive write waits for a fresh read of its fleet, started after the write
//! was decided. When many fleets fall due at once (a lost node or zone), each read of
//! its own put seven lists per fleet in front of the API server, and the writes queued
//! behind them. Here the reads of a namespace go one at a time: a fleet asking joins the
//! next read, and that read starts once the one on the wire has finished, carrying every
//! fleet that asked meanwhile ([`super::many`]). So a read never answers a fleet that
//! asked after it started: each answer is read after its question, as when every fleet
//! had a read of its own. A fleet that asks when nothing is on the wire is read at once,
//! alone, exactly as before.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use celld_api::CelldFleet;
use celld_api::validate::formats::is_identity;
use futures::future::BoxFuture;
use kube::Client;
use kube::runtime::reflector::Store;
use tokio::sync::oneshot;

use super::Gathered;
use super::many::read_many;

/// At most this many fleets in one shared read (each identity adds about 27 bytes to the
/// label selectors' query).
pub const MAX_BATCH: usize = 128;

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

/// The fleets waiting in one namespace; present while its reader runs.
#[derive(Default)]
struct Queue {
    waiting: Vec<Waiter>,
}

/// One read of namespace `ns` for the fleets given, answering each in order.
type ReadFn = dyn Fn(String, Vec<Arc<CelldFleet>>) -> BoxFuture<'static, Vec<Answer>> + Send + Sync;

/// The fresh reads of every namespace (cheap to clone).
#[derive(Clone)]
pub struct Reads {
    /// Makes one read (from the API server: [`answer`]).
    read: Arc<ReadFn>,
    /// Per namespace, the fleets waiting for its next read. A namespace is present
    /// exactly while its reader task runs.
    queues: Arc<Mutex<HashMap<String, Queue>>>,
}

/// Removes the namespace's queue when its reader ends otherwise than by finding no
/// fleet waiting (a panic, say): the fleets still waiting get [`ReadError::Abandoned`]
/// and the next one to ask starts a new reader. A reader that ends normally removes its
/// queue itself, under the lock that saw it empty, and disarms this (removing it here,
/// later, could remove the queue of the reader started after it).
struct Running {
    queues: Arc<Mutex<HashMap<String, Queue>>>,
    ns: String,
    armed: bool,
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.armed {
            let mut q = self.queues.lock().unwrap_or_else(|p| p.into_inner());
            q.remove(&self.ns);
        }
    }
}

impl Reads {
    /// Fresh reads through `client`; `fleets` is the CelldFleet cache (to size a shared
    /// read against its namespace).
    pub fn new(client: Client, fleets: Store<CelldFleet>) -> Reads {
        Reads::with(Arc::new(move |ns, batch| {
            let (client, fleets) = (client.clone(), fleets.clone());
            Box::pin(async move { answer(&client, &fleets, &ns, &batch).await })
        }))
    }

    /// Fresh reads made by `read`.
    fn with(read: Arc<ReadFn>) -> Reads {
        Reads {
            read,
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
            let start = !queues.contains_key(&ns);
            queues.entry(ns.clone()).or_default().waiting.push(Waiter {
                fleet: fleet.clone(),
                reply,
            });
            start
        };
        if start {
            tokio::spawn(self.clone().reader(ns));
        }
        answer.await.unwrap_or(Err(ReadError::Abandoned))
    }

    /// Reads namespace `ns` for the fleets waiting, one read at a time, until none waits.
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
                    queues.remove(&ns);
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
    let in_namespace = fleets
        .state()
        .iter()
        .filter(|f| f.metadata.namespace.as_deref() == Some(ns))
        .count();
    match read_many(client, ns, batch, whole(batch.len(), in_namespace)).await {
        Ok(answers) => answers.into_iter().map(Ok).collect(),
        Err(e) => {
            let e = ReadError::from(e);
            batch.iter().map(|_| Err(e.clone())).collect()
        }
    }
}

/// Whether a shared read of `reading` fleets lists the objects it reads by name whole,
/// in a namespace of `in_namespace` fleets (see [`WHOLE_ONE_IN`]).
fn whole(reading: usize, in_namespace: usize) -> bool {
    reading.saturating_mul(WHOLE_ONE_IN) >= in_namespace
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
    fn fake(gate: Arc<Semaphore>, log: Log) -> Reads {
        let n = Arc::new(AtomicUsize::new(0));
        Reads::with(Arc::new(move |_ns, batch: Vec<Arc<CelldFleet>>| {
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
        }))
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

    /// A fleet asking while a read is on the wire is not answered by it (that read
    /// started before the question): it waits for the next read, which carries every
    /// fleet that asked meanwhile, together. Another namespace reads on its own.
    #[tokio::test]
    async fn a_read_answers_only_the_fleets_that_asked_before_it_started() {
        let (gate, log) = (Arc::new(Semaphore::new(0)), Log::default());
        let reads = fake(gate.clone(), log.clone());
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
        let reads = Reads::with(Arc::new(move |_ns, batch: Vec<Arc<CelldFleet>>| {
            let first = c.fetch_add(1, Ordering::SeqCst) == 0;
            Box::pin(async move {
                assert!(!first, "the first read dies");
                batch
                    .iter()
                    .map(|f| Ok(Some(((**f).clone(), empty()))))
                    .collect()
            })
        }));
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
        let reads = fake(gate.clone(), log.clone());
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
}
