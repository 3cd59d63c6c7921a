//! `celld-gen render`.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use clap::Args;

use super::{FAILED, HealerNamespaceArg, OK, Printed, load_and_render, plural, print, report};
use crate::output;

const EXAMPLES: &str = "\
Examples:
  celld-gen render fleets/ -o deploy/
  celld-gen render fleets/alpha.yaml fleets/beta.yaml -o deploy/
  celld-gen render fleets/ --stdout | kubectl apply --server-side -f -
  celld-gen render - --stdout < fleets/alpha.yaml   # `-`: one fleet file from stdin
  celld-gen render fleets/ -o deploy/ --healer-namespace ops   # after install --namespace ops

Output layout (-o DIR):
  DIR/kustomization.yaml                      every fleet folder, sorted
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
    #[command(flatten)]
    pub healer: HealerNamespaceArg,
}

pub fn run(args: RenderArgs) -> u8 {
    let start = Instant::now();
    let options = match args.healer.options() {
        Ok(o) => o,
        Err(e) => return super::usage_error(&e, FAILED),
    };
    let (fleets, bundle) = match load_and_render(&args.paths, &options) {
        Ok(r) => r,
        Err(d) => {
            report(&d, "nothing was written");
            return FAILED;
        }
    };
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
