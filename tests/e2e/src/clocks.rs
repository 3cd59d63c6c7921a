//! Running the healer under a shifted clock: libfaketime (Debian's `libfaketime`, put
//! in place by `tests/faketime.sh`) shifts its wall clock, not its monotonic clock, as a
//! badly synchronised node would.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// The variable `tests/faketime.sh` sets to the library's path.
pub const FAKETIME_LIB_ENV: &str = "CELLD_FAKETIME_LIB";

/// Where Debian installs the library.
const SYSTEM_LIB: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// The libfaketime library: `$CELLD_FAKETIME_LIB`, or the system's.
pub fn faketime_lib() -> Result<PathBuf> {
    let candidates = std::env::var_os(FAKETIME_LIB_ENV)
        .map(PathBuf::from)
        .into_iter()
        .chain([PathBuf::from(SYSTEM_LIB)]);
    for c in candidates {
        if c.is_file() {
            return Ok(c);
        }
    }
    bail!(
        "libfaketime not found (${FAKETIME_LIB_ENV} or {SYSTEM_LIB}): run `eval \"$(tests/faketime.sh)\"` first, which fetches Debian's libfaketime"
    )
}

/// The environment that shifts a process's wall clock by `offset` (libfaketime's
/// relative form, `+15m` or `-15m`) and leaves its monotonic clock alone.
pub fn shifted_clock(offset: &str) -> Result<Vec<(String, String)>> {
    let lib = faketime_lib()?;
    Ok(vec![
        ("LD_PRELOAD".into(), lib.display().to_string()),
        ("FAKETIME".into(), offset.into()),
        ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
        // Read the offset once: nothing changes it while the process runs.
        ("FAKETIME_NO_CACHE".into(), "0".into()),
    ])
}

/// A copy of `kubeconfig` that skips the server certificate's validation. A process
/// whose clock runs 15 minutes behind would find the test cluster's certificates, made
/// minutes ago, not valid yet; the tests under a shifted clock are about the healer's
/// delays, not TLS (the API server still checks the client's token on its own clock).
pub fn without_tls_verification(kubeconfig: &Path, out: &Path) -> Result<()> {
    let mut k = kube::config::Kubeconfig::read_from(kubeconfig)
        .with_context(|| format!("reading {}", kubeconfig.display()))?;
    for c in &mut k.clusters {
        if let Some(cluster) = c.cluster.as_mut() {
            cluster.insecure_skip_tls_verify = Some(true);
            cluster.certificate_authority = None;
            cluster.certificate_authority_data = None;
        }
    }
    std::fs::write(out, serde_json::to_vec_pretty(&k)?)
        .with_context(|| format!("writing {}", out.display()))
}
