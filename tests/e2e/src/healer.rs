//! The `celld-healer` process: starting it, stopping it, its log and metrics.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use celld_gen::api::healer_flags::{IDENTITY_ENV, METRICS_ADDR};
use celld_gen::api::labels::HEALER_NAMESPACE;

use crate::*;

/// Options of one healer process.
#[derive(Clone, Debug)]
pub struct HealerOptions {
    /// `--namespace` (None: every namespace; several comma-separated).
    pub namespace: Option<String>,
    /// The kubeconfig it runs with (None: the shared install's ServiceAccount).
    pub kubeconfig: Option<PathBuf>,
    /// `--lease-namespace` (None: the shared install's namespace).
    pub lease_namespace: Option<String>,
    /// `--lease-name`.
    pub lease_name: String,
    /// `--identity`.
    pub identity: String,
    /// `--member-replacement-delay`.
    pub replacement_delay: String,
    /// `--force-delete-margin`.
    pub force_delete_margin: String,
    /// `--absorb-window`.
    pub absorb_window: String,
    /// `--lease-duration`.
    pub lease_duration: String,
    /// `--test-halt-after`.
    pub halt_after: Option<String>,
    /// More arguments.
    pub extra: Vec<String>,
    /// The binary (None: the workspace's `celld-healer`, [`healer_bin`]); the scale
    /// benchmark runs a baseline build beside the one measured.
    pub bin: Option<PathBuf>,
    /// More environment variables (the clock tests run it under libfaketime).
    pub env: Vec<(String, String)>,
}

/// A healer run with a command line given whole: the install matrix runs the container
/// args of the Deployment `celld-gen install` rendered.
#[derive(Clone, Debug)]
pub struct RawHealer {
    /// Its identity, given as the Deployment gives it (`POD_NAME`).
    pub identity: String,
    /// The kubeconfig of the ServiceAccount it runs as (in a Pod: the mounted token).
    pub kubeconfig: PathBuf,
    /// The command line. `--metrics-addr` is replaced by a free loopback port
    /// ([`with_metrics_addr`]); nothing else is changed.
    pub args: Vec<String>,
    /// The binary (None: the workspace's `celld-healer`, [`healer_bin`]); the image test
    /// runs the one taken out of the image.
    pub bin: Option<PathBuf>,
}

/// `args` with the listener moved to `addr`: outside a Pod, the rendered `0.0.0.0:8080`
/// would collide with every other healer on the machine. Both spellings
/// (`--metrics-addr=A` and `--metrics-addr A`) are replaced; without the flag, it is added.
pub fn with_metrics_addr(args: &[String], addr: SocketAddr) -> Vec<String> {
    let flag = format!("--{METRICS_ADDR}");
    let mut out = Vec::with_capacity(args.len() + 1);
    let mut replaced = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == &flag {
            it.next();
        } else if !a.starts_with(&format!("{flag}=")) {
            out.push(a.clone());
            continue;
        }
        out.push(format!("{flag}={addr}"));
        replaced = true;
    }
    if !replaced {
        out.push(format!("{flag}={addr}"));
    }
    out
}

/// A running `celld-healer`.
pub struct Healer {
    child: Option<Child>,
    /// Its log file (text format).
    pub log: PathBuf,
    /// Its metrics address.
    pub metrics: SocketAddr,
    /// Its identity.
    pub identity: String,
}

impl Healer {
    pub(crate) fn spawn(env: &Env, o: HealerOptions) -> Result<Healer> {
        let metrics = free_port()?;
        let mut args: Vec<String> = [
            "--log-format",
            "text",
            "--metrics-addr",
            &metrics.to_string(),
            "--lease-namespace",
            o.lease_namespace.as_deref().unwrap_or(HEALER_NAMESPACE),
            "--lease-name",
            &o.lease_name,
            "--lease-duration",
            &o.lease_duration,
            "--identity",
            &o.identity,
            "--member-replacement-delay",
            &o.replacement_delay,
            "--force-delete-margin",
            &o.force_delete_margin,
            "--absorb-window",
            &o.absorb_window,
            "--allow-short-delays",
        ]
        .map(str::to_string)
        .to_vec();
        // A Lost claim is replaced only once it stayed Lost this long (default 1m),
        // unless the test sets its own.
        if !o
            .extra
            .iter()
            .any(|a| a.starts_with("--lost-claim-confirmation"))
        {
            args.extend(["--lost-claim-confirmation".into(), "10s".into()]);
        }
        args.extend(o.extra.iter().cloned());
        if let Some(ns) = &o.namespace {
            args.extend(["--namespace".to_string(), ns.clone()]);
        }
        if let Some(h) = &o.halt_after {
            args.extend(["--test-halt-after".to_string(), h.clone()]);
        }
        let kubeconfig = o.kubeconfig.as_ref().unwrap_or(&env.healer_kubeconfig);
        Healer::launch(
            env,
            &o.identity,
            kubeconfig,
            None,
            &args,
            metrics,
            o.bin.as_deref(),
            &o.env,
        )
    }

    /// Starts a healer with a command line given whole ([`Env::healer_with_args`]).
    pub(crate) fn spawn_raw(env: &Env, raw: RawHealer) -> Result<Healer> {
        let metrics = free_port()?;
        let args = with_metrics_addr(&raw.args, metrics);
        Healer::launch(
            env,
            &raw.identity,
            &raw.kubeconfig,
            Some(&raw.identity),
            &args,
            metrics,
            raw.bin.as_deref(),
            &[],
        )
    }

    /// Runs the binary (`bin`, or the workspace's) with `args`, its output in a log file of the test's directory.
    /// `pod_name` is the identity given the way a Deployment gives it (`POD_NAME`); without
    /// it, the variable is removed so that the test's own environment cannot leak in.
    // Each argument is one of the process's inputs; a struct for them would only rename them.
    #[allow(clippy::too_many_arguments)]
    fn launch(
        env: &Env,
        identity: &str,
        kubeconfig: &Path,
        pod_name: Option<&str>,
        args: &[String],
        metrics: SocketAddr,
        bin: Option<&Path>,
        vars: &[(String, String)],
    ) -> Result<Healer> {
        let bin = match bin {
            Some(b) => b.to_path_buf(),
            None => healer_bin()?,
        };
        let log = (1..)
            .map(|n| env.dir.join(format!("healer-{identity}-{n}.log")))
            .find(|p| !p.exists())
            .context("a free log name")?;
        let logf = std::fs::File::create(&log)?;
        let mut cmd = Command::new(&bin);
        cmd.env("KUBECONFIG", kubeconfig)
            .env(
                "RUST_LOG",
                std::env::var("HEALER_LOG").unwrap_or_else(|_| "info,kube=warn".into()),
            )
            .envs(vars.iter().map(|(k, v)| (k, v)))
            .args(args)
            .stdin(Stdio::null())
            .stdout(logf.try_clone()?)
            .stderr(logf);
        match pod_name {
            Some(name) => cmd.env(IDENTITY_ENV, name),
            None => cmd.env_remove(IDENTITY_ENV),
        };
        // SAFETY: prctl is async-signal-safe; the healer dies with the test process.
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("spawning {}", bin.display()))?;
        Ok(Healer {
            child: Some(child),
            log,
            metrics,
            identity: identity.to_string(),
        })
    }

    /// Its exit status once it has exited on its own (it is then reaped).
    pub fn try_exit(&mut self) -> Option<std::process::ExitStatus> {
        let status = self.child.as_mut()?.try_wait().ok().flatten()?;
        self.child = None;
        Some(status)
    }

    /// The process id, while running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// CPU seconds (user + system) the process has used so far, from `/proc/<pid>/stat`;
    /// `None` once it has exited.
    pub fn cpu_seconds(&self) -> Option<f64> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid()?)).ok()?;
        // The fields after the command name (which may hold spaces) follow the last ')':
        // utime and stime are the 12th and 13th of them.
        let rest = stat.rsplit_once(')')?.1;
        let f: Vec<&str> = rest.split_whitespace().collect();
        let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok());
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        Some((ticks(11)? + ticks(12)?) / hz.max(1.0))
    }

    /// SIGKILL, no cleanup (as a crash or an OOM kill).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGSTOP: the process stops where it is (a long GC pause, a frozen VM), its
    /// lease lapses, and it remembers whatever it had when [`Healer::resume`]d.
    pub fn pause(&self) {
        self.signal(libc::SIGSTOP);
    }

    /// SIGCONT after [`Healer::pause`].
    pub fn resume(&self) {
        self.signal(libc::SIGCONT);
    }

    fn signal(&self, sig: i32) {
        if let Some(pid) = self.pid().and_then(|p| i32::try_from(p).ok()) {
            // SAFETY: kill(2) on our own child.
            unsafe {
                libc::kill(pid, sig);
            }
        }
    }

    /// SIGTERM and wait (at most 30 s, then SIGKILL); the exit status.
    pub fn terminate(&mut self) -> Option<std::process::ExitStatus> {
        let mut c = self.child.take()?;
        if let Ok(pid) = i32::try_from(c.id()) {
            // SAFETY: kill(2) on our own child.
            unsafe {
                libc::kill(pid, libc::SIGTERM);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(st)) = c.try_wait() {
                return Some(st);
            }
            if Instant::now() > deadline {
                let _ = c.kill();
                return c.wait().ok();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until the log contains `needle`.
    pub async fn wait_log(&self, needle: &str, timeout: Duration) -> Result<()> {
        wait_for(&format!("healer log line {needle:?}"), timeout, || {
            let text = self.log_text();
            async move { Ok(text.contains(needle).then_some(())) }
        })
        .await
    }

    /// GET /metrics.
    pub async fn metrics_text(&self) -> Result<String> {
        let http = kubesim::http::HttpClient::new();
        Ok(http
            .get(
                &format!("http://{}/metrics", self.metrics),
                Duration::from_secs(5),
            )
            .await?
            .ok()?
            .text())
    }

    /// GET a path; the status code.
    pub async fn http_status(&self, path: &str) -> Result<u16> {
        let http = kubesim::http::HttpClient::new();
        Ok(http
            .get(
                &format!("http://{}{path}", self.metrics),
                Duration::from_secs(5),
            )
            .await?
            .status
            .as_u16())
    }

    /// Sum of every sample of a metric whose line starts with `prefix` (a name, or a
    /// name with the opening of its labels).
    pub async fn metric(&self, prefix: &str) -> Result<f64> {
        Ok(sum_metric(&self.metrics_text().await?, prefix))
    }

    /// Resident memory (KiB) from /proc.
    pub fn rss_kib(&self) -> Option<u64> {
        let pid = self.pid()?;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        status
            .lines()
            .find(|l| l.starts_with("VmRSS:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
    }
}

impl Drop for Healer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Sum of every sample whose line starts with `prefix`.
pub fn sum_metric(text: &str, prefix: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#') && l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Parsed `celld_healer_api_requests_total` samples: (verb, resource) -> count.
/// `celld_healer_watch_events_total` by resource.
pub fn watch_events(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter_map(|l| l.strip_prefix("celld_healer_watch_events_total{resource=\""))
        .filter_map(|l| {
            let (resource, rest) = l.split_once('"')?;
            let value = rest.rsplit(' ').next()?.parse().ok()?;
            Some((resource.to_string(), value))
        })
        .collect()
}

pub fn api_requests(text: &str) -> BTreeMap<(String, String), f64> {
    let mut out = BTreeMap::new();
    for l in text
        .lines()
        .filter(|l| l.starts_with("celld_healer_api_requests_total{"))
    {
        let (labels, value) = l.rsplit_once(' ').unwrap_or((l, "0"));
        let get = |k: &str| {
            labels
                .split(&format!("{k}=\""))
                .nth(1)
                .and_then(|s| s.split('"').next())
                .unwrap_or_default()
                .to_string()
        };
        out.insert((get("verb"), get("resource")), value.parse().unwrap_or(0.0));
    }
    out
}
