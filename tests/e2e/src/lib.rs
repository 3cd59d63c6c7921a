//! Shared helpers of the healer's end-to-end tests (`tests/e2e/tests/*.rs`).
//!
//! Every test: [`Env::start`] (cluster gate, cluster lock, the one-time install, a fresh
//! kubesim, a namespace of its own), then fleets rendered by `celld_gen` and applied the
//! way Argo CD applies them (server-side apply, field manager `argocd-controller`,
//! conflicts forced), then the real `celld-healer` binary ([`Env::healer`]) running with a
//! kubeconfig for its own ServiceAccount, bound to exactly the RBAC `celld-gen install`
//! renders (which a test compares with `celld_healer::runtime::rbac::RULES`), with
//! shortened delays. [`Env::finish`] prints
//! diagnostics when the test failed and cleans up.
//!
//! Binaries: [`ensure_built`] runs `cargo build -p celld-healer -p kubesim --bins` once per
//! test process (skipped with `CELLD_E2E_NO_BUILD=1`, or when `CELLD_HEALER_BIN`,
//! `KUBESIM_BIN` and `CELLD_STUB_BIN` name the binaries), because a test crate cannot
//! depend on another package's binary target.

pub mod autoscaler;
mod clocks;
mod env;
mod fleet;
pub mod gitops;
mod healer;
mod install;
mod queries;

pub use clocks::*;
pub use env::*;
pub use fleet::*;
pub use healer::*;
pub use install::*;
pub use kubesim::testing::{
    Cluster, ClusterLock, KubeSim, KubeSimOptions, Sharing, Slot, pod_ready, unique_name, wait_for,
};
pub use queries::*;

/// How the tests of the golden examples share the cluster: beside other tests, one at a
/// time among themselves (they use the examples' fixed namespaces, reservations and the
/// `gp3` StorageClass).
pub const GOLDEN: Sharing = Sharing::Group("golden");

/// Field manager Argo CD applies with.
pub const ARGO: &str = "argocd-controller";
/// Field manager of the test's own setup writes.
pub const SETUP: &str = "celld-e2e";
/// StorageClass kubesim provisions (WaitForFirstConsumer, zonal disks).
pub const STORAGE_CLASS: &str = "celld-e2e-disk";
/// kubesim's provisioner name.
pub const PROVISIONER: &str = "kubesim.celld.dev/disk";
/// The healer's ServiceAccount.
pub const HEALER_SA: &str = "celld-healer";
/// ServiceAccount fleet members run as.
pub const MEMBER_SA: &str = "celld";
/// kubesim's zones.
pub const ZONES: [&str; 3] = ["us-east-1a", "us-east-1b", "us-east-1c"];
/// Termination grace of the test fleets (seconds).
pub const GRACE_S: i64 = 6;
/// The healer's `--force-delete-margin` in the tests (seconds): a Pod still there this
/// long after its deletionTimestamp is force-deleted (rule F1).
pub const FORCE_DELETE_MARGIN_S: i64 = 5;
