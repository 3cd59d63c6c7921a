//! Reading what the members say about the application (`status.application`,
//! `status.runtimeVersions`): the I/O around the pure [`crate::application`].
//!
//! Each member Pod is asked `GET http://<exact Pod IP>:8081/state?view=application`
//! directly (never through a Service), one request per member, concurrently, with a 1 s
//! connect and 2 s overall timeout and a 1 MiB body limit. A member that is not ready, has
//! no IP or does not answer counts as unavailable.
//!
//! This never delays a write: a reconcile only *starts* an observation in the background
//! when the fleet's last one is older than `--application-interval` (5 s at most while
//! the view is not `Converged`), and uses the latest
//! result when it builds the status. A finished observation whose view changed asks for a
//! reconcile of its fleet (so the status picks it up); the reconcile that started it asked
//! to be run again one interval later, which starts the next one.
//! These are requests to the members, not to the API server; the status is patched only
//! when the view changed. The view never gates anything (rule A4).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use celld_api::ApplicationStatus;
use celld_api::CelldFleet;
use http_body_util::{BodyExt, Empty, LengthLimitError, Limited};
use hyper::body::Bytes;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::ObjectRef;
use tokio::net::TcpStream;

use crate::application::{self, Answer, Observation, Reading};
use crate::time::Timestamp;

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

/// The members' latest application view of each fleet, and which fleets have an
/// observation in flight.
#[derive(Default)]
pub struct ApplicationViews {
    views: Mutex<HashMap<ObjectRef<CelldFleet>, View>>,
    in_flight: Mutex<std::collections::HashSet<ObjectRef<CelldFleet>>>,
}

impl ApplicationViews {
    /// The latest view of a fleet.
    pub fn view(&self, key: &ObjectRef<CelldFleet>) -> Option<View> {
        self.views.lock().expect("views").get(key).cloned()
    }

    /// Whether an observation should start now (none in flight, last one older than
    /// `interval`); marks it in flight when it returns true.
    pub fn start(&self, key: &ObjectRef<CelldFleet>, interval: Duration) -> bool {
        let fresh = self
            .views
            .lock()
            .expect("views")
            .get(key)
            .is_some_and(|v| v.at.elapsed() < interval);
        if fresh {
            return false;
        }
        self.in_flight
            .lock()
            .expect("in flight")
            .insert(key.clone())
    }

    /// Whether an observation of the fleet is running.
    pub fn in_flight(&self, key: &ObjectRef<CelldFleet>) -> bool {
        self.in_flight.lock().expect("in flight").contains(key)
    }

    /// Stores a finished observation.
    pub fn finish(&self, key: ObjectRef<CelldFleet>, view: View) {
        self.in_flight.lock().expect("in flight").remove(&key);
        self.views.lock().expect("views").insert(key, view);
    }

    /// Keeps the views of the fleets `keep` keeps (the others are gone).
    pub fn retain(&self, keep: impl Fn(&ObjectRef<CelldFleet>) -> bool) {
        self.views.lock().expect("views").retain(|k, _| keep(k));
    }

    /// How many fleets have a view.
    pub fn len(&self) -> usize {
        self.views.lock().expect("views").len()
    }

    /// Whether no fleet has a view.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
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
pub async fn observe(members: Vec<Pod>, expected: usize) -> View {
    let asks = members.into_iter().map(|p| async move {
        let name = p.metadata.name.clone().unwrap_or_default();
        let ip = p.status.as_ref().and_then(|s| s.pod_ip.clone());
        let answer = match ip {
            _ if p.metadata.deletion_timestamp.is_some() => Answer::Failed("terminating".into()),
            _ if !ready(&p) => Answer::Failed("not ready".into()),
            None => Answer::Failed("no Pod IP".into()),
            Some(ip) => fetch(&ip, MEMBER_PORT, "/state?view=application").await,
        };
        application::read(&Observation {
            member: name,
            received: now(),
            container_started: started(&p),
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
