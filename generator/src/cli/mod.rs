//! The `celld-gen` command line.

mod check;
mod diff;
mod init;
mod init_from;
mod install;
mod meta;
mod render;
mod schema;

use std::io::{self, Write};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::api::labels::HEALER_NAMESPACE;
use crate::render::RenderOptions;
use celld_api::diagnostic::Diagnostic;
use celld_api::validate::formats::is_dns_label;

pub use init::{
    DEFAULT_SCHEMA_REF, InitArgs, PlacementArg, ProfileArg, WorkloadArg, ZoneFormatArg, fleet_file,
    new_identity,
};
pub use schema::{crd_schemas, fleet_file_schema};

/// Exit code: success / no difference.
pub const OK: u8 = 0;
/// Exit code: invalid fleets, or (diff) a difference.
pub const FAILED: u8 = 1;
/// Exit code: usage errors (clap) and, for `diff`, errors other than a difference.
pub const TROUBLE: u8 = 2;

const ABOUT: &str =
    "Render celld fleet files (CelldFleet) into plain Kubernetes manifests for Argo CD and Flux";

const LONG_ABOUT: &str = "\
Render celld fleet files into plain Kubernetes manifests for Argo CD and Flux.

A fleet file is a CelldFleet resource (fleet.celld.dev/v1alpha1). celld-gen checks it,
and renders it into one folder per fleet (<namespace>/<name>/) with one object per file
and a kustomization.yaml, ready to commit and sync. The in-cluster celld-healer does the
rest (member count, healing, status).";

const EXAMPLES: &str = "\
Examples:
  celld-gen init alpha --namespace apps --profile PersistentFleet --bucket alpha-cells \\
      --region us-east-1 --zones a,b,c --storage-class gp3 \\
      --image ghcr.io/ewhauser/celld@sha256:<64 hex> > fleets/alpha.yaml
  celld-gen check fleets/
  celld-gen render fleets/ -o deploy/
  celld-gen diff fleets/ -o deploy/      # exit 1 when deploy/ is out of date
  celld-gen render fleets/ --stdout      # one YAML stream, e.g. in an Argo CD plugin
  celld-gen install -o deploy/cluster/   # once per cluster: CRDs, healer, GitOps snippets
  celld-gen check - < fleets/alpha.yaml  # `-` reads a fleet file from standard input
  celld-gen version                      # version, commit, supported Kubernetes
  celld-gen completion bash > /etc/bash_completion.d/celld-gen
  celld-gen man > celld-gen.1";

/// The command line.
#[derive(Parser, Debug)]
#[command(
    name = "celld-gen",
    version,
    about = ABOUT,
    long_about = LONG_ABOUT,
    after_help = EXAMPLES,
    propagate_version = true,
    max_term_width = 100
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Print a new, valid fleet file with a fresh identity.
    ///
    /// The identity (26 lowercase letters and digits) is written once: it labels every
    /// object and disk of the fleet and must never change. Values without a sane default
    /// must be given: the bucket, its region, the zones, the digest-pinned runtime image,
    /// and the storage class for PersistentFleet. The file is validated before it is
    /// printed; edit it to add execution, lifecycle, env, telemetry, routing or capacity
    /// settings.
    Init(init::InitArgs),
    /// Validate fleet files and print every problem found.
    ///
    /// Every problem is reported, not only the first, as
    /// `file:line:column: field: what is wrong (expected what would be valid)`. Fleets are
    /// also rendered in memory and checked against each other, so fleets that pass `check`
    /// render. Exit 0 when all are valid, 1 otherwise.
    Check(check::CheckArgs),
    /// Render fleet files into a directory of manifests (or one stream).
    ///
    /// One folder per fleet (`<namespace>/<name>/`), one object per file, sorted
    /// kustomization.yaml files. Everything is rendered and checked in memory first: if any
    /// fleet is invalid, or two fleets share a name, an identity or a bucket and prefix,
    /// nothing is written and the exit code is 1. Otherwise DIR is replaced as a whole
    /// (written aside, then swapped in), so it is never half-written. DIR must be missing,
    /// empty, or an earlier render output.
    Render(render::RenderArgs),
    /// Show what `render` would change in an output directory.
    ///
    /// A unified diff of the files render would add, remove or rewrite in DIR; nothing is
    /// written. Colored on a terminal (NO_COLOR and CLICOLOR_FORCE are honoured). Exit 1
    /// when there is a difference, so CI can require committed manifests to be up to date.
    Diff(diff::DiffArgs),
    /// Print the JSON Schema of the fleet file (for editors).
    ///
    /// Draft-07 JSON Schema of a fleet file (apiVersion, kind, metadata and the CelldFleet
    /// spec), generated from the Rust types the generator reads, for yaml-language-server
    /// and other editors. Cross-field rules are checked by `celld-gen check`, not by the
    /// schema.
    Schema(schema::SchemaArgs),
    /// Render what a cluster needs once: CRDs, the healer, Argo CD and Flux snippets.
    ///
    /// The two CRDs (schemas from the same types the generator reads, with status and scale
    /// subresources on CelldFleet and an immutable reservation spec), the healer's namespace,
    /// ServiceAccount, least-privilege RBAC, Deployment (two replicas, one leads), metrics
    /// Service, PodDisruptionBudget and NetworkPolicy; plus an Argo CD Application and a
    /// Flux Kustomization to adapt (server-side apply, ignore rules for the fields the
    /// healer owns) and the CelldFleet health check for Argo CD.
    Install(install::InstallArgs),
    /// Print the version, the git commit and the supported Kubernetes versions.
    Version(meta::VersionArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completion(meta::CompletionArgs),
    /// Print the man page (roff), generated from this help.
    Man(meta::ManArgs),
    /// Print the CustomResourceDefinitions of CelldFleet and CelldBucketReservation as a
    /// JSON array (used by CI to validate rendered objects against their schemas).
    #[command(hide = true)]
    Crds,
}

/// Runs the command line and returns the process exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Init(a) => init::run(a),
        Command::Install(a) => install::run(a),
        Command::Check(a) => check::run(a),
        Command::Render(a) => render::run(a),
        Command::Diff(a) => diff::run(a),
        Command::Schema(a) => schema::run(a),
        Command::Version(a) => meta::run_version(a),
        Command::Completion(a) => meta::run_completion(a),
        Command::Man(a) => meta::run_man(a),
        Command::Crds => schema::run_crds(),
    };
    ExitCode::from(code)
}

/// Prints diagnostics to stderr, then a one-line count.
fn report(diags: &[Diagnostic], what_next: &str) {
    {
        let mut err = anstream::stderr().lock();
        for d in diags {
            let _ = writeln!(err, "{d}");
        }
    }
    count(diags, what_next);
}

/// Prints the one-line count of diagnostics to stderr.
fn count(diags: &[Diagnostic], what_next: &str) {
    let mut err = anstream::stderr().lock();
    let files: std::collections::BTreeSet<_> = diags.iter().map(|d| &d.file).collect();
    let _ = writeln!(
        err,
        "{} in {}; {what_next}",
        plural(diags.len(), "problem"),
        plural(files.len(), "file")
    );
}

fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}

/// What became of a write to standard output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Printed {
    /// Everything was written.
    All,
    /// The reader went away (`celld-gen render --stdout | head`): it has what it wanted,
    /// so the command ends quietly with status 0 (Rust ignores SIGPIPE, so this is an
    /// EPIPE error here, not a signal).
    ReaderGone,
}

/// Writes `bytes` to standard output and flushes; a closed pipe is [`Printed::ReaderGone`],
/// not an error.
pub(crate) fn print(bytes: &[u8]) -> io::Result<Printed> {
    let mut out = io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Ok(()) => Ok(Printed::All),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(Printed::ReaderGone),
        Err(e) => Err(e),
    }
}

/// Environment variable that `install --namespace` and `render`/`check`/`diff
/// --healer-namespace` all read, so one setting serves both sides.
pub const HEALER_NAMESPACE_ENV: &str = "CELLD_GEN_HEALER_NAMESPACE";

/// `--healer-namespace` and `--kubernetes-version`, shared by `render`, `check` and
/// `diff` (they must render alike).
#[derive(Args, Debug, Clone, Default)]
pub struct HealerNamespaceArg {
    /// Namespace the healer runs in: the one given to `celld-gen install --namespace`.
    /// Each fleet NetworkPolicy admits the healer Pods of this namespace to the peer
    /// port; a wrong one leaves every fleet unhealed. Also read from
    /// CELLD_GEN_HEALER_NAMESPACE (which `install` reads too); when both are set they
    /// must agree. [default: celld-system]
    #[arg(long, value_name = "NS")]
    pub healer_namespace: Option<String>,
    /// Kubernetes minor of the cluster the fleets run in (1.34 to 1.37), the one given
    /// to `celld-gen install --kubernetes-version`. Before 1.36 a fleet StatefulSet is
    /// rendered with `replicas: 0`, as that install bundle expects. Also read from
    /// CELLD_GEN_KUBERNETES_VERSION (which `install` reads too); when both are set they
    /// must agree. [default: the newest supported, 1.37]
    #[arg(long, value_name = "MINOR")]
    pub kubernetes_version: Option<String>,
}

impl HealerNamespaceArg {
    /// The render options these flags (and the environment) ask for.
    pub fn options(&self) -> Result<RenderOptions, RenderOptionsError> {
        Ok(RenderOptions {
            healer_namespace: healer_namespace(
                "--healer-namespace",
                self.healer_namespace.as_deref(),
                std::env::var(HEALER_NAMESPACE_ENV).ok().as_deref(),
            )?,
            kubernetes: kubernetes_version(self.kubernetes_version.as_deref())?,
        })
    }
}

/// The minor from `--kubernetes-version` and [`KUBERNETES_VERSION_ENV`].
pub fn kubernetes_version(
    flag: Option<&str>,
) -> Result<crate::kubernetes::Minor, crate::kubernetes::ChooseError> {
    crate::kubernetes::choose(
        flag,
        std::env::var(crate::kubernetes::KUBERNETES_VERSION_ENV)
            .ok()
            .as_deref(),
    )
}

/// The render options cannot be decided.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderOptionsError {
    /// The healer's namespace.
    #[error(transparent)]
    HealerNamespace(#[from] HealerNamespaceError),
    /// The Kubernetes version.
    #[error(transparent)]
    Kubernetes(#[from] crate::kubernetes::ChooseError),
}

/// The healer's namespace cannot be decided.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HealerNamespaceError {
    /// The flag and the environment variable name different namespaces.
    #[error(
        "{flag} `{flag_value}` disagrees with {HEALER_NAMESPACE_ENV}=`{env_value}`: the \
         healer would run in one namespace and the fleet NetworkPolicies admit the other; \
         unset one, or give both the same value"
    )]
    Conflict {
        /// `--healer-namespace` or `--namespace`.
        flag: &'static str,
        /// Its value.
        flag_value: String,
        /// The environment's value.
        env_value: String,
    },
    /// Not a namespace name.
    #[error(
        "{origin} `{value}` is not a namespace name (a DNS label: at most 63 lowercase \
         letters, digits and `-`, starting and ending with a letter or digit)"
    )]
    Invalid {
        /// Where the value came from.
        origin: String,
        /// The value.
        value: String,
    },
}

/// Decides the healer's namespace from a flag and [`HEALER_NAMESPACE_ENV`] (an empty
/// variable counts as unset): either one, or both when equal, else the default
/// [`HEALER_NAMESPACE`]. `install` and `render` both call this, so the default and the
/// rules are written once.
pub fn healer_namespace(
    flag: &'static str,
    flag_value: Option<&str>,
    env_value: Option<&str>,
) -> Result<String, HealerNamespaceError> {
    let env_value = env_value.filter(|v| !v.is_empty());
    let (origin, value) = match (flag_value, env_value) {
        (Some(f), Some(e)) if f != e => {
            return Err(HealerNamespaceError::Conflict {
                flag,
                flag_value: f.to_owned(),
                env_value: e.to_owned(),
            });
        }
        (Some(f), _) => (flag.to_owned(), f),
        (None, Some(e)) => (HEALER_NAMESPACE_ENV.to_owned(), e),
        (None, None) => return Ok(HEALER_NAMESPACE.to_owned()),
    };
    if !is_dns_label(value, 63) {
        return Err(HealerNamespaceError::Invalid {
            origin,
            value: value.to_owned(),
        });
    }
    Ok(value.to_owned())
}

/// Prints a usage error of ours (not clap's) and returns the exit code to use.
fn usage_error(e: &dyn std::fmt::Display, code: u8) -> u8 {
    let _ = writeln!(anstream::stderr(), "error: {e}");
    code
}
