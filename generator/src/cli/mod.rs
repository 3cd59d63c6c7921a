//! The `celld-gen` command line.

mod check;
mod diff;
mod init;
mod install;
mod render;
mod schema;

use std::io::Write;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::diagnostic::Diagnostic;

pub use init::{
    DEFAULT_SCHEMA_REF, InitArgs, PlacementArg, ProfileArg, WorkloadArg, fleet_file, new_identity,
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
  celld-gen install -o deploy/cluster/   # once per cluster: CRDs, healer, GitOps snippets";

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
