//! `celld-stub`: stands in for celld inside each simulated Pod. Serves the health endpoint
//! on :8080 and `/state` on :8081 of the Pod's IP, with answers a test can change at run
//! time (`PUT /__stub/mode`). See `tests/README.md` ("kubesim and the stub celld").

use std::collections::BTreeMap;

use clap::Parser;

/// Flags override the environment kubesim passes (KUBESIM_POD_IP, CELLD_ADDR, ...).
#[derive(Debug, Parser)]
#[command(name = "celld-stub", version, about)]
struct Args {
    /// Address to listen on (default: $KUBESIM_POD_IP, else 127.0.0.1).
    #[arg(long)]
    ip: Option<String>,
    /// Public port (default: port of $CELLD_ADDR, else 8080).
    #[arg(long)]
    public_port: Option<u16>,
    /// Internal port (default: port of $CELLD_INTERNAL_ADDR, else 8081).
    #[arg(long)]
    internal_port: Option<u16>,
    /// Initial mode as JSON (like $CELLD_STUB_MODE), e.g. '{"health":"unhealthy"}'.
    #[arg(long)]
    mode: Option<String>,
    /// Initial mode from a JSON file (like $CELLD_STUB_MODE_FILE).
    #[arg(long)]
    mode_file: Option<String>,
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let args = Args::parse();
    let mut env: BTreeMap<String, String> = std::env::vars().collect();
    if let Some(ip) = args.ip {
        env.insert("KUBESIM_POD_IP".into(), ip);
    }
    if let Some(m) = args.mode {
        env.insert("CELLD_STUB_MODE".into(), m);
    }
    if let Some(f) = args.mode_file {
        env.insert("CELLD_STUB_MODE_FILE".into(), f);
    }
    // Like celld: an invalid or removed variable stops startup (the Pod crash-loops).
    if let Err(e) = kubesim::stub::validate_env(&env) {
        tracing::error!("refusing to start: {e:#}");
        std::process::exit(1);
    }
    let mut cfg = match kubesim::stub::StubConfig::from_env(env) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("refusing to start: {e:#}");
            std::process::exit(1);
        }
    };
    if let Some(p) = args.public_port {
        cfg.public_port = p;
    }
    if let Some(p) = args.internal_port {
        cfg.internal_port = p;
    }
    let stub = kubesim::stub::Stub::new(cfg);
    if let Err(e) = stub.run().await {
        tracing::error!("{e:#}");
        std::process::exit(1);
    }
}
