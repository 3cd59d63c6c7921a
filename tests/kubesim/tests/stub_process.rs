//! The celld-stub binary as a process (no cluster needed): listens on its IP, answers
//! health and /state, changes mode at run time, drains on SIGTERM and exits 0, and refuses
//! to start with a variable celld removed.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use hyper::{Method, StatusCode};
use kubesim::http::HttpClient;
use serde_json::json;

const T: Duration = Duration::from_secs(2);

fn ip() -> String {
    // A loopback address unlikely to be used by a running kubesim (127.20/16).
    format!("127.21.{}.{}", std::process::id() % 250 + 1, 7)
}

#[tokio::test]
async fn stub_serves_changes_mode_and_drains_on_sigterm() -> Result<()> {
    let ip = ip();
    let mut child = Command::new(env!("CARGO_BIN_EXE_celld-stub"))
        .arg("--ip")
        .arg(&ip)
        .env("CELLD_NODE", "alpha-1")
        .env("CELLD_SHUTDOWN_TOTAL_MS", "800")
        .env("CELLD_STUB_MODE", r#"{"version":"v5"}"#)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let http = HttpClient::new();
    let health = format!("http://{ip}:8080/.well-known/celld/health");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(r) = http.get(&health, T).await {
            ensure!(r.status == StatusCode::OK, "health {}", r.status);
            ensure!(r.json::<serde_json::Value>()? == json!({"ok": true}));
            break;
        }
        ensure!(Instant::now() < deadline, "stub never listened");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let app: serde_json::Value = http
        .get(&format!("http://{ip}:8081/state?view=application"), T)
        .await?
        .ok()?
        .json()?;
    ensure!(app["loaded"]["version"] == "v5", "{app}");
    let info: serde_json::Value = http
        .get(&format!("http://{ip}:8081/__stub/info"), T)
        .await?
        .json()?;
    ensure!(info["member"] == "alpha-1", "{info}");

    let r = http
        .send_json(
            Method::PUT,
            &format!("http://{ip}:8081/__stub/mode"),
            &json!({"observation": "malformed"}),
            T,
        )
        .await?;
    ensure!(r.status == StatusCode::OK);
    let r = http.get(&format!("http://{ip}:8081/state"), T).await?;
    ensure!(
        serde_json::from_slice::<serde_json::Value>(&r.body).is_err(),
        "malformed mode gave valid JSON"
    );

    // SIGTERM: health 503 at once, exit 0 after the drain (800 ms).
    let started = Instant::now();
    // SAFETY: kill(2) on our own child.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    tokio::time::sleep(Duration::from_millis(150)).await;
    let r = http.get(&health, T).await?;
    ensure!(
        r.status == StatusCode::SERVICE_UNAVAILABLE,
        "draining health {}",
        r.status
    );
    let status = loop {
        if let Some(st) = child.try_wait()? {
            break st;
        }
        ensure!(
            started.elapsed() < Duration::from_secs(10),
            "stub did not exit"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    ensure!(status.success(), "exit {status}");
    ensure!(
        started.elapsed() >= Duration::from_millis(700),
        "drained only {:?}",
        started.elapsed()
    );
    Ok(())
}

#[test]
fn stub_refuses_removed_variables() {
    let out = Command::new(env!("CARGO_BIN_EXE_celld-stub"))
        .arg("--ip")
        .arg(ip())
        .env("CELLD_SHUTDOWN_DRAIN_MS", "100")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("CELLD_SHUTDOWN_DRAIN_MS"));
}
