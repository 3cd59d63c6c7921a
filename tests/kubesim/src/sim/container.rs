//! A simulated container: the stub celld of one Pod, run either as its own `celld-stub`
//! process (`--stubs process`, the default) or as a task inside kubesim (`--stubs
//! in-process`). The worker sees the same four things either way: an id, an exit (code
//! or signal), a graceful stop (SIGTERM: the stub drains, then exits 0) and a kill
//! (SIGKILL: listeners and open connections gone at once).
//!
//! In-process stubs exist for scale runs: a Pod's machine is somewhere else on a real
//! cluster, and thousands of stub processes on the test machine's cores take the time
//! the API server and the code under test need. The stub code is the same
//! ([`crate::stub::Stub`]); what differs is what a process gives for free: an environment
//! check at start-up (done here the same way, a failure is exit code 1), a pid (a
//! kubesim-wide counter above any Linux pid, so it can never be signalled by mistake),
//! and a log file (the task logs into kubesim's log, in a span naming the Pod).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use tokio::process::Child;
use tokio::task::{AbortHandle, JoinHandle};
use tracing::Instrument;

use crate::stub::{Stub, StubConfig};

/// How the Pods' stubs run (`--stubs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum StubRuntime {
    /// One `celld-stub` process per Pod (its own pid, signals, log file).
    #[default]
    Process,
    /// A task inside kubesim per Pod: the same stub code, a fraction of the cost.
    InProcess,
}

/// First id handed to an in-process stub: above Linux's largest pid (2^22), so an id
/// shown in the control API is never mistaken for, or signalled as, a process.
const FIRST_TASK_ID: u32 = 1 << 24;

static NEXT_TASK_ID: AtomicU32 = AtomicU32::new(FIRST_TASK_ID);

/// How a container ended: its exit code, or the signal that ended it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Exit {
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

impl Exit {
    const KILLED: Exit = Exit {
        code: None,
        signal: Some(libc::SIGKILL),
    };

    fn code(code: i32) -> Exit {
        Exit {
            code: Some(code),
            signal: None,
        }
    }

    fn of_process(st: std::io::Result<std::process::ExitStatus>) -> Exit {
        use std::os::unix::process::ExitStatusExt;
        match st {
            Ok(s) => Exit {
                code: s.code(),
                signal: s.signal(),
            },
            Err(_) => Exit::KILLED,
        }
    }
}

/// Stops a running container from outside its worker (fault injection, a stopped node,
/// kubesim shutting down).
#[derive(Clone)]
pub(crate) enum Killer {
    Process(u32),
    /// `stub` is `None` for a container that never started (its environment refused).
    Task {
        id: u32,
        abort: AbortHandle,
        stub: Option<Arc<Stub>>,
    },
}

impl std::fmt::Debug for Killer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Killer::Process(pid) => write!(f, "Process({pid})"),
            Killer::Task { id, .. } => write!(f, "Task({id})"),
        }
    }
}

impl Killer {
    /// The container's id: its pid, or the in-process stub's id.
    pub fn id(&self) -> u32 {
        match self {
            Killer::Process(pid) => *pid,
            Killer::Task { id, .. } => *id,
        }
    }

    /// SIGTERM: the stub drains, then exits 0.
    pub fn terminate(&self) {
        match self {
            Killer::Process(pid) => signal(*pid, libc::SIGTERM),
            Killer::Task { stub, .. } => {
                if let Some(stub) = stub {
                    stub.begin_drain();
                }
            }
        }
    }

    /// SIGKILL: gone at once, with its listeners and connections.
    pub fn kill(&self) {
        match self {
            Killer::Process(pid) => signal(*pid, libc::SIGKILL),
            Killer::Task { abort, .. } => abort.abort(),
        }
    }
}

fn signal(pid: u32, sig: i32) {
    if let Ok(pid) = i32::try_from(pid) {
        // SAFETY: plain kill(2) on a child we spawned and have not reaped yet.
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

/// A running container, owned by its Pod's worker.
pub(crate) struct Container {
    run: Run,
    killer: Killer,
    /// How it ended, once [`Container::wait`] saw it (a task's end is read only once).
    exited: Option<Exit>,
}

enum Run {
    Process(Child),
    Task(JoinHandle<Exit>),
}

impl Container {
    /// Wraps a spawned `celld-stub` process.
    pub fn process(child: Child) -> Option<Container> {
        let id = child.id()?;
        Some(Container {
            run: Run::Process(child),
            killer: Killer::Process(id),
            exited: None,
        })
    }

    /// Starts the stub for `env` (the environment its process would get) as a task. Like
    /// the `celld-stub` binary, an environment celld refuses ends the container at once
    /// with exit code 1.
    pub fn task(env: BTreeMap<String, String>, pod: &str) -> Container {
        let id = NEXT_TASK_ID.fetch_add(1, Ordering::Relaxed);
        let span = tracing::info_span!("stub", pod = %pod, id);
        let stub = crate::stub::validate_env(&env)
            .and_then(|()| StubConfig::from_env(env))
            .map(|cfg| Stub::new(StubConfig { pid: id, ..cfg }));
        let (handle, stub) = match stub {
            Ok(stub) => {
                let s = stub.clone();
                let handle = tokio::spawn(
                    async move {
                        match s.run_until(std::future::pending()).await {
                            Ok(()) => Exit::code(0),
                            Err(e) => {
                                tracing::error!("{e:#}");
                                Exit::code(1)
                            }
                        }
                    }
                    .instrument(span),
                );
                (handle, Some(stub))
            }
            Err(e) => {
                let _g = span.enter();
                tracing::error!("refusing to start: {e:#}");
                (tokio::spawn(async { Exit::code(1) }), None)
            }
        };
        let killer = Killer::Task {
            id,
            abort: handle.abort_handle(),
            stub,
        };
        Container {
            run: Run::Task(handle),
            killer,
            exited: None,
        }
    }

    /// The process id, or the in-process stub's id.
    pub fn id(&self) -> u32 {
        self.killer.id()
    }

    pub fn killer(&self) -> Killer {
        self.killer.clone()
    }

    /// Waits until the container ends; after that, returns how it ended.
    pub async fn wait(&mut self) -> Exit {
        if let Some(exit) = self.exited {
            return exit;
        }
        let exit = match &mut self.run {
            Run::Process(child) => Exit::of_process(child.wait().await),
            Run::Task(handle) => match handle.await {
                Ok(exit) => exit,
                Err(e) if e.is_cancelled() => Exit::KILLED,
                // A panic in the stub: what a Rust binary's panic exits with.
                Err(_) => Exit::code(101),
            },
        };
        self.exited = Some(exit);
        exit
    }

    /// Sends the kill without waiting; [`Container::wait`] then returns.
    pub fn start_kill(&mut self) {
        match &mut self.run {
            Run::Process(child) => {
                let _ = child.start_kill();
            }
            Run::Task(handle) => handle.abort(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use super::*;

    /// A loopback address of this test process's own (kubesim hands out 127.20/16).
    fn env(last: u8, total_ms: &str) -> (String, BTreeMap<String, String>) {
        let ip = format!("127.24.{}.{last}", std::process::id() % 250 + 1);
        let vars = [
            ("KUBESIM_POD_IP", ip.as_str()),
            ("CELLD_NODE", "alpha-0"),
            ("CELLD_SHUTDOWN_TOTAL_MS", total_ms),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        (ip, vars)
    }

    /// One GET of the health endpoint on `conn`, kept alive; `None` once the server has
    /// closed the connection.
    async fn health_on(conn: &mut TcpStream) -> Option<String> {
        let req = "GET /.well-known/celld/health HTTP/1.1\r\nhost: stub\r\n\r\n";
        conn.write_all(req.as_bytes()).await.ok()?;
        let mut buf = vec![0u8; 4096];
        let n = tokio::time::timeout(Duration::from_secs(2), conn.read(&mut buf))
            .await
            .ok()?
            .ok()?;
        (n > 0).then(|| String::from_utf8_lossy(&buf[..n]).into_owned())
    }

    async fn connect(ip: &str) -> TcpStream {
        for _ in 0..200 {
            if let Ok(c) = TcpStream::connect((ip, 8080)).await {
                return c;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the stub on {ip} never listened");
    }

    #[tokio::test]
    async fn a_kill_closes_the_listener_and_open_connections_at_once() {
        let (ip, vars) = env(1, "60000");
        let mut c = Container::task(vars, "ns/alpha-0");
        assert!(c.id() >= FIRST_TASK_ID);
        let mut conn = connect(&ip).await;
        let first = health_on(&mut conn).await.expect("an answer");
        assert!(first.starts_with("HTTP/1.1 200"), "{first}");
        c.killer().kill();
        assert_eq!(c.wait().await, Exit::KILLED);
        // As with a process: once its end is seen, nothing of it answers or accepts.
        assert_eq!(health_on(&mut conn).await, None, "a dead stub answered");
        assert!(TcpStream::connect((ip.as_str(), 8080)).await.is_err());
        // How it ended is kept: a second wait does not poll the finished task again.
        assert_eq!(c.wait().await, Exit::KILLED);
    }

    #[tokio::test]
    async fn a_terminate_drains_then_exits_zero() {
        let (ip, vars) = env(2, "300");
        let mut c = Container::task(vars, "ns/alpha-0");
        let mut conn = connect(&ip).await;
        assert!(
            health_on(&mut conn)
                .await
                .expect("an answer")
                .starts_with("HTTP/1.1 200")
        );
        c.killer().terminate();
        let draining = health_on(&mut conn)
            .await
            .expect("an answer while draining");
        assert!(draining.starts_with("HTTP/1.1 503"), "{draining}");
        assert_eq!(c.wait().await, Exit::code(0));
    }

    #[tokio::test]
    async fn an_environment_celld_refuses_is_exit_code_one() {
        let (_, mut vars) = env(3, "300");
        // A variable celld removed: the binary refuses to start, and so does the task.
        vars.insert("CELLD_SHUTDOWN_DRAIN_MS".into(), "100".into());
        let mut c = Container::task(vars, "ns/alpha-0");
        assert_eq!(c.wait().await, Exit::code(1));
        c.killer().terminate(); // nothing to drain: no effect, no panic
    }
}
