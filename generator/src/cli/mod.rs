//! The `celld-gen` command line.

mod check;
mod diff;
mod init;
mod render;
mod schema;

use std::io::Write;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::diagnostic::Diagnostic;

pub use init::{InitArgs, PlacementArg, ProfileArg, WorkloadArg, fleet_file, new_identity};
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
  celld-gen render fleets/ --stdout      # one YAML stream, e.g. in an Argo CD plugin";

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
    Init(init::InitArgs),
    /// Validate fleet files and print every problem found.
    Check(check::CheckArgs),
    /// Render fleet files into a directory of manifests (or one stream).
    Render(render::RenderArgs),
    /// Show what `render` would change in an output directory.
    Diff(diff::DiffArgs),
    /// Print the JSON Schema of the fleet file (for editors).
    Schema(schema::SchemaArgs),
    // `install -o DIR` (the healer's install bundle: CRDs, RBAC, Deployment, Argo CD and
    // Flux snippets) belongs here. It comes with its own issue; it is deliberately absent
    // until then rather than a stub.
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

/// Loads, validates and renders, returning the bundle or every diagnostic.
fn load_and_render(
    paths: &[std::path::PathBuf],
) -> Result<(usize, crate::render::Bundle), Vec<Diagnostic>> {
    let fleets = crate::load::load_paths(paths)?;
    let bundle = crate::render::render_all(&fleets)?;
    Ok((fleets.len(), bundle))
}
