//! The healer image, built without a Docker daemon by `scripts/build-image.sh` and
//! published the way `docs/install.md` tells a user to, to a throw-away registry on
//! loopback (`crane registry serve`, from github.com/google/go-containerregistry):
//!
//! - the publishing block of `docs/install.md` runs with `REGISTRY` set to that registry
//!   and prints the image by digest;
//! - crane pulls it back: its config names the entrypoint `/usr/local/bin/celld-healer`,
//!   the non-root user 65532, linux/amd64; its file system holds the binary, `/etc/passwd`
//!   and `/etc/group`, and nothing else (no shell);
//! - the entrypoint taken out of the image runs with the container args of the Deployment
//!   `celld-gen install --image <that digest>` renders, against the test control plane,
//!   and reports ready (`/readyz` 200).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use celld_e2e::*;
use kubesim::testing::{e2e_required, repo_root};
use serde_json::Value;

/// crane, as `scripts/build-image.sh` builds it; `None` (after a notice) when it is not
/// built and `CELLD_E2E` is not `1`.
fn crane() -> Result<Option<PathBuf>> {
    let p = repo_root().join("tests/.cluster/image/bin/crane");
    if p.is_file() {
        return Ok(Some(p));
    }
    if e2e_required() {
        bail!(
            "{} is not built: run scripts/build-image.sh --build-only",
            p.display()
        );
    }
    eprintln!(
        "!! IMAGE TEST NOT RUN: {} is not built: run scripts/build-image.sh --build-only",
        p.display()
    );
    Ok(None)
}

/// A `crane registry serve` on loopback, stopped on drop.
struct Registry {
    child: Child,
    addr: String,
}

impl Registry {
    fn start(crane: &Path) -> Result<Registry> {
        let addr = match std::env::var("CELLD_E2E_REGISTRY_PORT") {
            Ok(port) => format!("127.0.0.1:{port}"),
            Err(_) => free_port()?.to_string(),
        };
        let child = Command::new(crane)
            .args(["registry", "serve", "--address", &addr])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting crane registry serve")?;
        let r = Registry { child, addr };
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(&r.addr).is_err() {
            ensure!(
                Instant::now() < deadline,
                "the registry on {} never listened",
                r.addr
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(r)
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The shell block of `docs/install.md` that publishes the image (the one its `no-run`
/// comment hands to this test).
fn publish_block() -> Result<String> {
    let text = std::fs::read_to_string(repo_root().join("docs/install.md"))?;
    let mut lines = text.lines().skip_while(|l| {
        !(l.starts_with("<!-- no-run:") && l.contains("tests/e2e/tests/healer_image.rs"))
    });
    lines
        .next()
        .context("docs/install.md hands no block to this test")?;
    let fence = lines.next().unwrap_or_default();
    ensure!(
        fence.starts_with("```sh"),
        "no shell block after the comment: {fence}"
    );
    Ok(lines
        .take_while(|l| !l.starts_with("```"))
        .collect::<Vec<_>>()
        .join("\n"))
}

fn crane_out(crane: &Path, args: &[&str]) -> Result<Vec<u8>> {
    let out = Command::new(crane)
        .args(args)
        .output()
        .with_context(|| format!("crane {args:?}"))?;
    ensure!(
        out.status.success(),
        "crane {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(out.stdout)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn published_image_runs_the_healer_from_its_entrypoint() -> Result<()> {
    let Some(crane) = crane()? else {
        return Ok(());
    };
    let Some(mut env) = Env::start_with(
        "healer-image",
        // The rendered Deployment args serve every namespace and take the shared lease.
        EnvOptions::alone("runs the healer with the install's own args: every namespace"),
    )
    .await?
    else {
        return Ok(());
    };
    let r = image(&mut env, &crane).await;
    env.finish(r).await
}

async fn image(env: &mut Env, crane: &Path) -> Result<()> {
    let registry = Registry::start(crane)?;
    let t0 = Instant::now();
    let mut path = crane
        .parent()
        .context("crane's folder")?
        .as_os_str()
        .to_owned();
    path.push(":");
    path.push(std::env::var_os("PATH").unwrap_or_default());
    let block = publish_block()?;
    let out = tokio::task::block_in_place(|| {
        Command::new("bash")
            .args(["-euo", "pipefail", "-c", &block])
            .current_dir(repo_root())
            .env("REGISTRY", format!("{}/celld-fleet", registry.addr))
            .env("PATH", &path)
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
    })
    .context("running the publishing block of docs/install.md")?;
    ensure!(
        out.status.success(),
        "the publishing block failed: {}",
        out.status
    );
    let image = String::from_utf8(out.stdout)?.trim().to_string();
    let prefix = format!("{}/celld-fleet/celld-healer@sha256:", registry.addr);
    ensure!(
        image.starts_with(&prefix),
        "the block printed {image:?}, not {prefix}<digest>"
    );
    eprintln!("[image] published {image} in {:?}", t0.elapsed());

    // Its config: entrypoint, non-root user, platform.
    let config: Value = serde_json::from_slice(&crane_out(crane, &["config", &image])?)?;
    let c = &config["config"];
    ensure!(
        c["Entrypoint"] == serde_json::json!(["/usr/local/bin/celld-healer"]),
        "entrypoint {}",
        c["Entrypoint"]
    );
    ensure!(c["User"] == "65532:65532", "user {}", c["User"]);
    ensure!(
        config["os"] == "linux" && config["architecture"] == "amd64",
        "platform {}/{}",
        config["os"],
        config["architecture"]
    );

    // Its file system: the binary and the user's entries, nothing else (no shell).
    let root = env.dir.join("image-root");
    std::fs::create_dir_all(&root)?;
    let fs_tar = env.dir.join("image.tar");
    let fs_tar_s = fs_tar.to_str().context("path")?;
    crane_out(crane, &["export", &image, fs_tar_s])?;
    let list = Command::new("tar").args(["-tf", fs_tar_s]).output()?;
    ensure!(list.status.success(), "tar -tf");
    let mut files: Vec<String> = String::from_utf8(list.stdout)?
        .lines()
        .map(|l| l.trim_end_matches('/').to_string())
        .collect();
    files.sort();
    let want = [
        "etc",
        "etc/group",
        "etc/passwd",
        "usr",
        "usr/local",
        "usr/local/bin",
        "usr/local/bin/celld-healer",
    ];
    ensure!(files == want, "the image holds {files:?}, want {want:?}");
    let x = Command::new("tar")
        .args(["-xf", fs_tar_s, "-C"])
        .arg(&root)
        .status()?;
    ensure!(x.success(), "extracting the image");
    let passwd = std::fs::read_to_string(root.join("etc/passwd"))?;
    ensure!(
        passwd
            .lines()
            .any(|l| l.starts_with("nonroot:x:65532:65532:")),
        "/etc/passwd: {passwd}"
    );
    let bin = root.join("usr/local/bin/celld-healer");

    // The rendered Deployment names the image, and its args start the entrypoint.
    let stream = install_stream(&["--image", &image])?;
    let deployment = stream
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .context("no Deployment")?;
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    ensure!(
        container["image"] == image.as_str(),
        "image {}",
        container["image"]
    );
    ensure!(
        container.get("command").is_none(),
        "the Deployment overrides the image's entrypoint: {}",
        container["command"]
    );
    let args = healer_container_args(&stream)?;
    let i = env.healer_with_args(RawHealer {
        identity: "image-healer".into(),
        kubeconfig: env.healer_kubeconfig.clone(),
        args: args.clone(),
        bin: Some(bin),
    })?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(st) = env.h_mut(i).try_exit() {
            bail!("the image's healer exited ({st}):\n{}", env.h(i).log_text());
        }
        if env.h(i).http_status("/readyz").await.ok() == Some(200) {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "the image's healer is not ready after 60 s:\n{}",
            env.h(i).log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "[image] the entrypoint of {image} is ready with the rendered args {args:?} ({:?} in all)",
        t0.elapsed()
    );
    let status = env.h_mut(i).terminate();
    ensure!(
        status.is_some_and(|s| s.success()),
        "the image's healer did not stop cleanly ({status:?})"
    );
    drop(registry);
    Ok(())
}
