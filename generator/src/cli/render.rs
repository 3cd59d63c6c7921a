//! `celld-gen render`.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use clap::Args;

use super::check::{dangerous_edits, load_and_render, print_findings};
use super::{FAILED, HealerNamespaceArg, OK, Printed, plural, print, report};
use crate::output::{self, Allow};

const EXAMPLES: &str = "\
Examples:
  celld-gen render fleets/ -o deploy/
  celld-gen render fleets/alpha.yaml fleets/beta.yaml -o deploy/
  celld-gen render fleets/ --stdout | kubectl apply --server-side -f -
  celld-gen render fleets/ -o deploy/ --allow-removal   # ledger/old's file was deleted on purpose
  celld-gen render - --stdout < fleets/alpha.yaml   # `-`: one fleet file from stdin
  celld-gen render fleets/ -o deploy/ --healer-namespace ops   # after install --namespace ops

Safety: render refuses (exit 1, nothing written) to remove a fleet folder from DIR unless
--allow-removal, and to render zero fleets unless --allow-empty; behind Argo CD or Flux
with pruning, a folder gone from Git is a fleet deleted. A fleet whose last render in DIR
has deletion protection on is never removed, not even with --allow-removal: render
deletionProtection: false and sync it first. DIR itself, and any folder of
celld-gen output below the inputs, is never read as input. Edits the cluster cannot take
(identity, profile, storage, placement, a renamed fleet) are reported as warnings; see
`celld-gen check --against DIR`.

Patches: a CelldFleetPatch document among the inputs (a second document in the fleet
file, or a file beside it) patches the fleet's rendered objects after rendering
(jsonPatch: RFC 6902; strategicMerge). Changes to what the healer relies on are refused;
a patch that no longer applies is an error. See docs/platform.md.

Output layout (-o DIR):
  DIR/kustomization.yaml                      every namespace folder, sorted
  DIR/<namespace>/kustomization.yaml          the namespace's fleet folders (a team's unit)
  DIR/<namespace>/<name>/kustomization.yaml   the fleet's files, sorted
  DIR/<namespace>/<name>/celldbucketreservation.yaml, celldfleet.yaml,
      networkpolicy.yaml, poddisruptionbudget.yaml, service.yaml, service-peers.yaml,
      deployment.yaml | statefulset.yaml,
      networkpolicy-routing.yaml and httproute.yaml | ingress.yaml (with routing)";

#[derive(Args, Debug)]
#[command(after_help = EXAMPLES)]
pub struct RenderArgs {
    /// Fleet files, or directories searched recursively for fleet files (*.yaml, *.yml);
    /// `-` reads one fleet file from standard input (shown as `<stdin>` in messages).
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// Output directory (replaced as a whole).
    #[arg(
        short = 'o',
        long = "output",
        value_name = "DIR",
        required_unless_present = "stdout",
        conflicts_with = "stdout"
    )]
    pub output: Option<PathBuf>,
    /// Write every object to standard output as one `---`-separated YAML stream instead
    /// (no kustomization files): what an Argo CD config-management plugin prints.
    #[arg(long)]
    pub stdout: bool,
    /// Allow fleet folders in DIR that no fleet file produces any more to be removed
    /// (their fleets are deleted by a pruning sync).
    #[arg(long)]
    pub allow_removal: bool,
    /// Allow rendering when no fleet is found (an output with no fleets).
    #[arg(long)]
    pub allow_empty: bool,
    /// List every file and folder that was not read as a fleet, and why (on stderr).
    #[arg(short, long)]
    pub verbose: bool,
    #[command(flatten)]
    pub healer: HealerNamespaceArg,
}

pub fn run(args: RenderArgs) -> u8 {
    let start = Instant::now();
    let options = match args.healer.options() {
        Ok(o) => o,
        Err(e) => return super::usage_error(&e, FAILED),
    };
    let exclude: Vec<&std::path::Path> = args.output.iter().map(PathBuf::as_path).collect();
    let (fleets, bundle) =
        match load_and_render(&args.paths, &exclude, args.verbose, &options).result {
            Ok(r) => r,
            Err(d) => {
                report(&d, "nothing was written");
                return FAILED;
            }
        };
    let allow = Allow {
        removal: args.allow_removal,
        empty: args.allow_empty,
    };
    if let Err(e) = output::guard(args.output.as_deref(), &bundle, &args.paths, allow) {
        let _ = writeln!(anstream::stderr(), "error: {e}; nothing was written");
        return FAILED;
    }
    if let Some(dir) = &args.output {
        let findings: Vec<_> = dangerous_edits(dir, &fleets)
            .into_iter()
            .filter(|f| f.kind != output::dangerous::FindingKind::Deleted)
            .collect();
        print_findings(&findings, "warning", args.allow_removal);
    }
    let fleets = fleets.len();
    let target = match &args.output {
        None => match print(bundle.stream().as_bytes()) {
            Ok(Printed::All) => "standard output".to_owned(),
            Ok(Printed::ReaderGone) => return OK,
            Err(e) => {
                let _ = writeln!(anstream::stderr(), "error: writing to standard output: {e}");
                return FAILED;
            }
        },
        Some(dir) => match output::write_tree(dir, &bundle) {
            Ok(output::WriteOutcome::Replaced) => format!("{}", dir.display()),
            Ok(output::WriteOutcome::Unchanged) => {
                format!("{} (already up to date, nothing written)", dir.display())
            }
            Err(e) => {
                let _ = writeln!(anstream::stderr(), "error: {e}; nothing was written");
                return FAILED;
            }
        },
    };
    let _ = writeln!(
        anstream::stderr(),
        "rendered {}, {} into {target} in {} ms",
        plural(fleets, "fleet"),
        plural(bundle.object_count(), "object"),
        start.elapsed().as_millis()
    );
    OK
}
