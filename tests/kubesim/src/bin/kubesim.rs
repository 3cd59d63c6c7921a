//! `kubesim`: plays every node's kubelet and the disk provisioner against a real
//! Kubernetes API server. See `tests/README.md` ("kubesim and the stub celld").

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,kube_client=warn,kube_runtime=warn,hyper=warn".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cfg = kubesim::sim::Config::parse();
    kubesim::sim::run(cfg).await
}
