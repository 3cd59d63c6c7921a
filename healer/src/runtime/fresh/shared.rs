//! Fresh reads shared by the fleets of a namespace that ask at the same moment.
//!
//! When a node or a zone is lost, many fleets of a namespace reach a force delete in the
//! same second, and each must confirm it on a fresh read (`crate::confirm`). Read one by
//! one, that is seven lists or more per fleet, sent to an API server that the burst
//! already loads, before each delete. Here a fleet asking for a fresh read joins the
//! namespace's queue; one read at a time runs per namespace, and it serves every fleet
//! that was waiting when it started ([`super::read_many`]: one request per kind for all
//! of them).
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

use celld_api::CelldFleet;
use futures::future::BoxFuture;
use kube::Client;
use tokio::sync::oneshot;

use super::{Gathered, read_many};

/// At most this many fleets share one read (the set-based selectors name each fleet's
/// identity; this keeps the request line short). More wait for the next read.
/// (The healer reconciles at most 48 fleets at once, `controller::CONCURRENCY`, so today
/// fewer ever wait.)
pub const MOST_SHARING: usize = 64;

/// What a fleet's fresh read answered: its fresh CelldFleet and objects (`None`: gone).
pub type Answer = Result<Option<(CelldFleet, Gathered)>, Arc<kube::Error>>;

struct Waiting {
    fleet: Arc<CelldFleet>,
    /// The nodes the caches show under the fleet's terminating Pods (read with the rest).
    nodes: Vec<String>,
    reply: oneshot::Sender<Answer>,
}

/// One namespace's line: whether a read runs, and the fleets waiting for the next.
#[derive(Default)]
struct Line {
    reading: bool,
    waiting: Vec<Waiting>,
}

/// What one read of some fleets of a namespace answers, in their order.
type Read = Result<Vec<Option<(CelldFleet, Gathered)>>, kube::Error>;

/// Reads fleets of one namespace, and the nodes named: [`read_many`] (a test's own in
/// the unit tests).
type Reader =
    Box<dyn Fn(Vec<Arc<CelldFleet>>, Vec<String>) -> BoxFuture<'static, Read> + Send + Sync>;

/// Removes a namespace's line when its serving task ends early (see `serve`).
struct Clear<'a> {
    reads: &'a SharedReads,
    ns: &'a str,
    armed: bool,
}

impl Drop for Clear<'_> {
    fn drop(&mut self) {
        if self.armed {
            let mut lines = self
                .reads
                .lines
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            lines.remove(self.ns);
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

    /// Reads `fleet` fresh, with whichever fleets of its namespace ask before the read
    /// starts (see the module docs). `nodes`: the nodes the caches show under its
    /// terminating Pods, read in the same round trip as the rest (a node found under a
    /// terminating Pod only on the fresh read is read after it).
    pub async fn read(self: &Arc<Self>, fleet: Arc<CelldFleet>, nodes: Vec<String>) -> Answer {
        let ns = fleet.metadata.namespace.clone().unwrap_or_default();
        let (reply, answer) = oneshot::channel();
        let start = {
            let mut lines = self
                .lines
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let line = lines.entry(ns.clone()).or_default();
            line.waiting.push(Waiting {
                fleet,
                nodes,
                reply,
            });
            !std::mem::replace(&mut line.reading, true)
        };
        if start {
            tokio::spawn(self.clone().serve(ns));
        }
        answer.await.unwrap_or_else(|_| {
            Err(Arc::new(kube::Error::Service(
                "the shared fresh read ended without an answer".into(),
            )))
        })
    }

    /// Serves namespace `ns`'s line until nobody waits: each round takes every fleet
    /// waiting when it starts (at most [`MOST_SHARING`]), reads them, and answers each.
    async fn serve(self: Arc<Self>, ns: String) {
        // Should this task end any other way than below (a panic, the runtime dropping
        // it), the line goes with it: its waiters are answered with an error instead of
        // waiting for ever, and the next fleet to ask starts a line afresh.
        let mut clear = Clear {
            reads: &self,
            ns: &ns,
            armed: true,
        };
        loop {
            let round: Vec<Waiting> = {
                let mut lines = self
                    .lines
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                let Some(line) = lines.get_mut(&ns) else {
                    return;
                };
                if line.waiting.is_empty() {
                    lines.remove(&ns);
                    clear.armed = false;
                    return;
                }
                let n = line.waiting.len().min(MOST_SHARING);
                line.waiting.drain(..n).collect()
            };
            (self.on_round)(round.len());
            let fleets: Vec<Arc<CelldFleet>> = round.iter().map(|w| w.fleet.clone()).collect();
            let nodes: Vec<String> = round.iter().flat_map(|w| w.nodes.clone()).collect();
            match (self.reader)(fleets, nodes).await {
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
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex as StdMutex;

    use tokio::sync::{Notify, mpsc};

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
    /// go (each fleet found as it was asked for, with nothing else).
    fn held_reader(started: mpsc::UnboundedSender<Vec<String>>, go: Arc<Notify>) -> Reader {
        Box::new(move |fleets, _| {
            let (started, go) = (started.clone(), go.clone());
            Box::pin(async move {
                let _ = started.send(fleets.iter().map(|f| name(f)).collect());
                go.notified().await;
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

    /// Fleets of a namespace that ask before a read starts share it; one that asks while
    /// it is under way is served by the next read, which starts after it asked, never by
    /// the one already sent. Another namespace has a line of its own.
    #[tokio::test]
    async fn a_read_serves_only_fleets_that_asked_before_it_started() {
        let (tx, mut started) = mpsc::unbounded_channel();
        let go = Arc::new(Notify::new());
        let rounds = Arc::new(StdMutex::new(Vec::new()));
        let r = rounds.clone();
        let reads = SharedReads::with_reader(held_reader(tx, go.clone()), move |n| {
            r.lock().expect("rounds").push(n)
        });
        // a and b ask together: one read serves both.
        let (ra, rb) = (reads.clone(), reads.clone());
        let a = tokio::spawn(async move { ra.read(fleet("apps", "a"), Vec::new()).await });
        let b = tokio::spawn(async move { rb.read(fleet("apps", "b"), Vec::new()).await });
        tokio::task::yield_now().await;
        let first = started.recv().await.expect("a first read");
        assert_eq!(first, ["a", "b"]);
        // c asks while that read is under way; d in another namespace.
        let (rc, rd) = (reads.clone(), reads.clone());
        let c = tokio::spawn(async move { rc.read(fleet("apps", "c"), Vec::new()).await });
        let d = tokio::spawn(async move { rd.read(fleet("other", "d"), Vec::new()).await });
        let other = started.recv().await.expect("the other namespace's read");
        assert_eq!(other, ["d"]);
        // Let the reads under way answer.
        go.notify_waiters();
        for (h, want) in [(a, "a"), (b, "b"), (d, "d")] {
            let got = h.await.expect("joined").expect("read").expect("found");
            assert_eq!(name(&got.0), want);
        }
        let second = started.recv().await.expect("a second read");
        assert_eq!(
            second,
            ["c"],
            "c is served by a read that started after it asked"
        );
        go.notify_waiters();
        let got = c.await.expect("joined").expect("read").expect("found");
        assert_eq!(name(&got.0), "c");
        let mut n = rounds.lock().expect("rounds").clone();
        n.sort_unstable();
        assert_eq!(n, [1, 1, 2]);
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
