//! `celld-gen install` and `celld-healer` agree on the healer's command line.
//!
//! For a matrix of install options: render the bundle, apply its ServiceAccount and RBAC,
//! take the rendered Deployment's container args exactly, and start the real healer with
//! them against the test control plane. It must start and report ready (`/readyz` 200).
//! Only what running outside a Pod needs is added: `KUBECONFIG` with a token of the
//! install's ServiceAccount (in a Pod: the mounted token), `POD_NAME` (in a Pod: from
//! `metadata.name`), and `--metrics-addr` moved to a free loopback port (the rendered
//! `0.0.0.0:8080` would collide with other healers on this machine).
//!
//! And: what the healer refuses, `celld-gen install` refuses, with the healer's words.
//!
//! Install options and what they change in the container args: `--namespace`
//! (`--lease-namespace`), `--watch-namespace` (`--namespace`), `--member-replacement-delay`
//! (the same flag), `--shards` (`--shard`; the first shard's Deployment is started).
//! `--image`, `--replicas`, `--repo-url` and `--repo-path` change no arg;
//! one case sets them all to show it. Every case with `--watch-namespace` or `--namespace`
//! installs into a namespace of its own: the ClusterRole is named per install namespace,
//! and a read-only one must not replace the shared install's.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use celld_e2e::*;
use celld_gen::api::labels::HEALER_NAMESPACE;
use celld_gen::install::SERVED_ROLE;
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_install_option_starts_a_ready_healer() -> Result<()> {
    let Some(mut env) = Env::start_with(
        "install_matrix",
        // Most cases render healers that serve every namespace, on the shared lease.
        EnvOptions::alone("runs healers with install args that serve every namespace"),
    )
    .await?
    else {
        return Ok(());
    };
    let mut cluster_scoped = Vec::new();
    let r = matrix(&mut env, &mut cluster_scoped).await;
    delete_cluster_rbac(&env.client, "install_matrix", cluster_scoped).await;
    env.finish(r).await
}

async fn matrix(env: &mut Env, cluster_scoped: &mut Vec<(String, String)>) -> Result<()> {
    let a = env.ns.clone();
    let b = env.extra_namespace("b").await?;
    let both = format!("{a},{b}");
    let mut cases: Vec<(&str, Vec<String>)> = vec![
        ("default", vec![]),
        (
            "delay-1m30s",
            args(&["--member-replacement-delay", "1m30s"]),
        ),
        ("delay-1h", args(&["--member-replacement-delay", "1h"])),
        (
            "unrendered-options",
            args(&[
                "--image",
                "registry.example/celld-healer:test",
                "--allow-tag",
                "--replicas",
                "1",
                "--repo-url",
                "https://git.example/x.git",
                "--repo-path",
                "deploy",
            ]),
        ),
    ];
    for (case, extra) in [
        ("other-namespace", vec![]),
        // The first shard's Deployment (`--shard=0/3`).
        ("shards-3", args(&["--shards", "3"])),
        ("watch-one", args(&["--watch-namespace", &a])),
        ("watch-several", args(&["--watch-namespace", &both])),
        (
            "watch-several-delay",
            args(&[
                "--watch-namespace",
                &both,
                "--member-replacement-delay",
                "90s",
            ]),
        ),
    ] {
        let inst = env.extra_namespace(&case.replace("watch-", "w")).await?;
        let mut v = args(&["--namespace", &inst]);
        v.extend(extra);
        cases.push((case, v));
    }

    for (case, install_args) in &cases {
        let argv: Vec<&str> = install_args.iter().map(String::as_str).collect();
        let stream = install_stream(&argv).with_context(|| format!("{case}: rendering"))?;
        let ns = install_namespace(&stream)?;
        for o in stream.iter().filter(|o| {
            o["kind"]
                .as_str()
                .is_some_and(|k| HEALER_RBAC_KINDS.contains(&k))
        }) {
            apply(&env.client, o, SETUP, false).await?;
            let kind = o["kind"].as_str().unwrap_or_default();
            let name = o["metadata"]["name"].as_str().unwrap_or_default();
            // The shared install's own objects stay; a case's own ClusterRole goes (the
            // served ClusterRole is every install's, and grants nothing unbound).
            if kind.starts_with("Cluster") && ns != HEALER_NAMESPACE && name != SERVED_ROLE {
                cluster_scoped.push((kind.to_string(), name.to_string()));
            }
        }
        let rendered = healer_container_args(&stream)?;
        let kubeconfig = env.dir.join(format!("{case}.kubeconfig"));
        write_sa_kubeconfig(&env.cluster, &ns, HEALER_SA, &kubeconfig).await?;
        let i = env.healer_with_args(RawHealer {
            identity: format!("matrix-{case}"),
            kubeconfig,
            args: rendered.clone(),
            bin: None,
        })?;
        match ready_or_exit(env, i, Duration::from_secs(60)).await? {
            Started::Ready => {}
            outcome => bail!(
                "{case}: {outcome:?} with {rendered:?}:\n{}",
                env.h(i).log_text()
            ),
        }
        let status = env.h_mut(i).terminate();
        ensure!(
            status.is_some_and(|s| s.success()),
            "{case}: the healer did not stop cleanly ({status:?}):\n{}",
            env.h(i).log_text()
        );
        eprintln!("[install_matrix] {case}: ready with {rendered:?}");
    }

    refusals(env).await
}

/// A value the healer refuses is refused by the installer with the same message: the
/// bound (checked by the healer at start) and the grammar (checked by both parsers).
async fn refusals(env: &mut Env) -> Result<()> {
    let default_args = healer_container_args(&install_stream(&[])?)?;
    for (value, message) in [
        (
            "30s",
            "--member-replacement-delay must be at least 1m, got 30s",
        ),
        (
            "59s999ms",
            "--member-replacement-delay must be at least 1m, got 59s999ms",
        ),
        (
            "10",
            "\"10\" has no unit: write e.g. 10s or 10m (units: ms, s, m, h)",
        ),
        ("1d", "\"1d\": unknown unit \"d\" (units: ms, s, m, h)"),
    ] {
        let installer = install_refusal(&["--member-replacement-delay", value])?;
        ensure!(
            installer.contains(message),
            "celld-gen install on {value}: {installer}"
        );
        // The healer with the default rendered args, the delay changed to the value.
        let args: Vec<String> = default_args
            .iter()
            .map(|a| {
                if a.starts_with("--member-replacement-delay=") {
                    format!("--member-replacement-delay={value}")
                } else {
                    a.clone()
                }
            })
            .collect();
        let i = env.healer_with_args(RawHealer {
            identity: format!(
                "refused-{}",
                value.replace(|c: char| !c.is_ascii_alphanumeric(), "-")
            ),
            kubeconfig: env.healer_kubeconfig.clone(),
            args,
            bin: None,
        })?;
        let outcome = ready_or_exit(env, i, Duration::from_secs(20)).await?;
        let log = env.h(i).log_text();
        let Started::Exited(exited) = outcome else {
            bail!("the healer with {value}: {outcome:?}:\n{log}");
        };
        ensure!(!exited.success(), "the healer accepted {value}: {log}");
        ensure!(
            log.contains(&json_escaped(message)) || log.contains(message),
            "the healer's words for {value} differ from the installer's {message:?}: {log}"
        );
        eprintln!("[install_matrix] {value}: both refuse with {message:?}");
    }
    Ok(())
}

/// How a started healer turned out.
#[derive(Debug)]
enum Started {
    /// `/readyz` answered 200.
    Ready,
    /// It exited first.
    Exited(std::process::ExitStatus),
    /// Neither within the time given.
    StillStarting,
}

/// Waits until healer `i` is ready or has exited.
async fn ready_or_exit(env: &mut Env, i: usize, timeout: Duration) -> Result<Started> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Some(st) = env.h_mut(i).try_exit() {
            return Ok(Started::Exited(st));
        }
        if env.h(i).http_status("/readyz").await.ok() == Some(200) {
            return Ok(Started::Ready);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(Started::StillStarting)
}

fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

/// The message as it appears inside a JSON log line.
fn json_escaped(s: &str) -> String {
    let v = Value::String(s.to_string()).to_string();
    v[1..v.len() - 1].to_string()
}

/// The namespace the stream installs the healer into.
fn install_namespace(stream: &[Value]) -> Result<String> {
    stream
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .and_then(|d| d["metadata"]["namespace"].as_str())
        .map(str::to_string)
        .context("the install stream has no namespaced Deployment")
}
