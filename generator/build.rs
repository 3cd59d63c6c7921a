//! Captures the git commit celld-gen is built from, for `celld-gen version`, and checks
//! the release's healer image when one is given (`CELLD_GEN_HEALER_IMAGE`).
//!
//! Order: `CELLD_GEN_GIT_COMMIT` from the environment (packagers building from a tarball
//! can set it), then `git rev-parse`, then `unknown` (no git, or not a checkout). A build
//! never fails for want of git.

use std::path::PathBuf;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (!s.is_empty()).then_some(s)
}

/// A release pipeline that sets `CELLD_GEN_HEALER_IMAGE` means it to be the default:
/// one that is not pinned by digest fails the build rather than ship a celld-gen whose
/// `install` quietly defaults to the tag (`version::default_healer_image`).
fn check_healer_image() {
    println!("cargo:rerun-if-env-changed=CELLD_GEN_HEALER_IMAGE");
    let Ok(image) = std::env::var("CELLD_GEN_HEALER_IMAGE") else {
        return;
    };
    let digest = image.trim().rsplit_once("@sha256:").map(|(_, d)| d);
    let pinned = digest.is_some_and(|d| d.len() == 64 && d.bytes().all(|b| b.is_ascii_hexdigit()));
    if !pinned || image.trim().contains(char::is_whitespace) {
        panic!(
            "CELLD_GEN_HEALER_IMAGE={image:?} is not an image pinned by digest \
             (registry/repo[:tag]@sha256:<64 hex>, what scripts/build-image.sh prints); \
             unset it to default to the release tag"
        );
    }
}

fn main() {
    check_healer_image();
    println!("cargo:rerun-if-env-changed=CELLD_GEN_GIT_COMMIT");
    let commit = std::env::var("CELLD_GEN_GIT_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".to_owned());
    // Rebuild when HEAD moves: HEAD itself (a branch switch) and the ref it points at (a
    // commit). In a worktree these live under the worktree's own git dir.
    if let Some(head) = git(&["rev-parse", "--git-path", "HEAD"]) {
        println!("cargo:rerun-if-changed={}", PathBuf::from(head).display());
    }
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"])
        && let Some(path) = git(&["rev-parse", "--git-path", &branch])
    {
        println!("cargo:rerun-if-changed={}", PathBuf::from(path).display());
    }
    println!("cargo:rustc-env=CELLD_GEN_GIT_COMMIT={commit}");
}
