//! `--metrics-auth kubernetes` on the real API server: the bundle rendered with it, its
//! ServiceAccount and RBAC applied, and the healer started with the rendered container
//! args, as the install matrix does. Then a real HTTPS client (`curl`) reads the
//! listener: the probes answer anyone, `/metrics` only a ServiceAccount token the API
//! server authenticates and whose user is bound to the rendered metrics-reader
//! ClusterRole. No token or an unknown one: 401; a known user without the binding: 403;
//! plain HTTP is not served.

use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use celld_e2e::*;
use celld_gen::install::metrics_reader_name;
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_answer_only_an_authorized_token() -> Result<()> {
    let Some(mut env) = Env::start("metrics-auth").await? else {
        return Ok(());
    };
    let mut cluster_scoped = Vec::new();
    let r = protected(&mut env, &mut cluster_scoped).await;
    delete_cluster_rbac(&env.client, "metrics-auth", cluster_scoped).await;
    env.finish(r).await
}

/// `curl -k` of `url` (with `token` as a bearer token): the HTTP status, 0 when no
/// HTTP answer came (a TLS listener asked in plain HTTP).
fn status(url: &str, token: Option<&str>) -> Result<u16> {
    let mut c = Command::new("curl");
    c.args([
        "-sk",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "--max-time",
        "10",
    ]);
    if let Some(t) = token {
        c.args(["-H", &format!("Authorization: Bearer {t}")]);
    }
    let out = c.arg(url).output().context("running curl")?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0))
}

fn body(url: &str, token: &str) -> Result<String> {
    let out = Command::new("curl")
        .args(["-sk", "--max-time", "10", "-H"])
        .arg(format!("Authorization: Bearer {token}"))
        .arg(url)
        .output()
        .context("running curl")?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

async fn protected(env: &mut Env, cluster_scoped: &mut Vec<(String, String)>) -> Result<()> {
    let inst = env.extra_namespace("inst").await?;
    let stream = install_stream(&[
        "--namespace",
        &inst,
        "--watch-namespace",
        &env.ns,
        "--metrics-auth",
        "kubernetes",
    ])?;
    for o in stream.iter().filter(|o| {
        o["kind"]
            .as_str()
            .is_some_and(|k| HEALER_RBAC_KINDS.contains(&k))
    }) {
        apply(&env.client, o, SETUP, false).await?;
        let kind = o["kind"].as_str().unwrap_or_default();
        if kind.starts_with("Cluster") {
            let name = o["metadata"]["name"].as_str().unwrap_or_default();
            if name != celld_gen::install::SERVED_ROLE {
                cluster_scoped.push((kind.to_string(), name.to_string()));
            }
        }
    }
    let reader = metrics_reader_name(&inst);
    ensure!(
        stream
            .iter()
            .any(|o| o["kind"] == "ClusterRole" && o["metadata"]["name"] == reader.as_str()),
        "the bundle has no {reader}"
    );

    // Two would-be scrapers: one bound to the reader role, one not.
    for sa in ["scraper", "stranger"] {
        let obj = json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": sa, "namespace": env.ns}});
        apply(&env.client, &obj, SETUP, false).await?;
    }
    let binding_name = format!("{reader}-e2e-scraper");
    let binding: Value = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": binding_name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": reader},
        "subjects": [{"kind": "ServiceAccount", "name": "scraper", "namespace": env.ns}],
    });
    apply(&env.client, &binding, SETUP, false).await?;
    cluster_scoped.push(("ClusterRoleBinding".into(), binding_name));
    let scraper = sa_token(&env.client, &env.ns, "scraper").await?;
    let stranger = sa_token(&env.client, &env.ns, "stranger").await?;

    let args = healer_container_args(&stream)?;
    let kubeconfig = env.dir.join("metrics-auth.kubeconfig");
    write_sa_kubeconfig(&env.cluster, &inst, HEALER_SA, &kubeconfig).await?;
    let h = env.healer_with_args(RawHealer {
        identity: "metrics-auth".into(),
        kubeconfig,
        args,
        bin: None,
    })?;
    let base = format!("https://{}", env.h(h).metrics);
    let readyz = format!("{base}/readyz");
    wait_for(
        "the healer ready over HTTPS (no token)",
        Duration::from_secs(60),
        || async { Ok((status(&readyz, None)? == 200).then_some(())) },
    )
    .await
    .with_context(|| env.h(h).log_text())?;
    ensure!(status(&format!("{base}/healthz"), None)? == 200);

    let metrics = format!("{base}/metrics");
    let cases = [
        ("no token", None, 401),
        (
            "a token the API server does not know",
            Some("not-a-token"),
            401,
        ),
        (
            "a known user without the reader role",
            Some(stranger.as_str()),
            403,
        ),
        (
            "the scraper bound to the reader role",
            Some(scraper.as_str()),
            200,
        ),
    ];
    for (what, token, want) in cases {
        let got = status(&metrics, token)?;
        ensure!(got == want, "{what}: /metrics answered {got}, not {want}");
        eprintln!("[metrics-auth] {what}: {got}");
    }
    let text = body(&metrics, &scraper)?;
    ensure!(
        text.contains("celld_healer_leader"),
        "the scraper's /metrics has no healer metrics: {text:.300}"
    );
    // The decision is cached per token: asking again costs no review.
    ensure!(status(&metrics, Some(&stranger))? == 403);
    // No plain HTTP beside the TLS listener.
    let plain = status(&format!("http://{}/metrics", env.h(h).metrics), None)?;
    ensure!(plain != 200, "plain HTTP answered {plain}");
    // The rendered RBAC is exactly enough: no review failed for lack of a right.
    let log = env.h(h).log_text();
    ensure!(
        !log.contains("could not review a /metrics token"),
        "a review failed:\n{log}"
    );
    ensure!(env.h_mut(h).terminate().is_some_and(|s| s.success()));
    Ok(())
}
