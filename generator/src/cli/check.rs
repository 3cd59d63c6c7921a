//! `celld-gen check`, and the loading the other commands share with it.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use serde::Serialize;

use super::{FAILED, OK, TROUBLE, plural};
use crate::diagnostic::Diagnostic;
use crate::load::{LoadedFleet, Options, Skipped};
use crate::output::dangerous::{self, Finding, FindingKind};
use crate::render::Bundle;

const EXAMPLES: &str = "\
Examples:
  celld-gen check fleets/alpha.yaml
  celld-gen check fleets/                 # every fleet file below fleets/
  celld-gen check fleets/ -v              # also list the files that are not fleets
  celld-gen check fleets/ --against deploy/   # also refuse edits the cluster cannot take
  celld-gen check fleets/ --format json   # for tools: {\"valid\": ..., \"diagnostics\": [...]}

In a directory, files of other YAML are skipped (listed with -v), but a file that looks
like a lost fleet is an error: a `kind` that is a typo of CelldFleet, another
fleet.celld.dev kind, a fleet without `kind`, an empty or comment-only file. Folders of
celld-gen output (their kustomization.yaml carries the generated header) are never read,
and directory symlinks are not followed.";

#[derive(Args, Debug)]
#[command(after_help = EXAMPLES)]
pub struct CheckArgs {
    /// Fleet files, or directories searched recursively for fleet files (*.yaml, *.yml).
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// Output format: `text` (one line per problem) or `json` (one document on
    /// stdout, with the skipped files and the dangerous edits).
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Compare with DIR, an existing render output (e.g. the committed deploy/): a change
    /// the cluster refuses (identity, profile, storage, placement), a renamed fleet or a
    /// replaced workload is a problem, and so is a deleted fleet unless --allow-removal.
    #[arg(long, value_name = "DIR")]
    pub against: Option<PathBuf>,
    /// With --against: fleets deleted on purpose are not a problem.
    #[arg(long, requires = "against")]
    pub allow_removal: bool,
    /// List every file and folder that was not read as a fleet, and why (on stderr).
    #[arg(short, long)]
    pub verbose: bool,
}

/// Output format of `check`.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Human-readable lines.
    Text,
    /// One JSON document.
    Json,
}

#[derive(Serialize)]
struct JsonReport<'a> {
    valid: bool,
    fleets: usize,
    diagnostics: &'a [Diagnostic],
    skipped: &'a [Skipped],
    findings: &'a [Finding],
}

/// Valid fleets and their rendering, or every problem.
pub(super) type Rendered = Result<(Vec<LoadedFleet>, Bundle), Vec<Diagnostic>>;

/// Loads fleets (leaving `exclude` out), prints what was skipped with `verbose`, and
/// renders them in memory.
pub(super) fn load_and_render(
    paths: &[PathBuf],
    exclude: &[&Path],
    verbose: bool,
) -> (Rendered, Vec<Skipped>) {
    let loaded = crate::load::load(
        paths,
        &Options {
            exclude: exclude.iter().map(|p| p.to_path_buf()).collect(),
        },
    );
    if verbose {
        print_skipped(&loaded.skipped);
    }
    let result = loaded.result.and_then(|fleets| {
        let bundle = crate::render::render_all(&fleets)?;
        Ok((fleets, bundle))
    });
    (result, loaded.skipped)
}

fn print_skipped(skipped: &[Skipped]) {
    let mut err = anstream::stderr().lock();
    for s in skipped {
        let _ = writeln!(err, "skipped {}: {}", s.path.display(), s.reason);
    }
}

/// The dangerous edits from the fleets rendered in `dir` to `fleets`.
pub(super) fn dangerous_edits(dir: &Path, fleets: &[LoadedFleet]) -> Vec<Finding> {
    dangerous::findings(
        &dangerous::rendered_fleets(dir),
        fleets,
        &dangerous::immutable_spec_fields(),
    )
}

/// Prints findings on stderr, one per line: `label` for dangerous edits, `note` for
/// deletions the user allowed with --allow-removal.
pub(super) fn print_findings(findings: &[Finding], label: &str, removal_allowed: bool) {
    let mut err = anstream::stderr().lock();
    for f in findings {
        let label = if removal_allowed && f.kind == FindingKind::Deleted {
            "note"
        } else {
            label
        };
        let _ = writeln!(err, "{label}: {f}");
    }
}

pub fn run(args: CheckArgs) -> u8 {
    if let Some(dir) = &args.against {
        // Only a render output holds the fleets as they were rendered.
        let problem = if !dir.is_dir() {
            Some("not a directory".to_owned())
        } else {
            crate::output::check_replaceable(dir)
                .err()
                .map(|e| e.to_string())
        };
        if let Some(problem) = problem {
            let _ = writeln!(
                anstream::stderr(),
                "error: --against {}: {problem} (expected an existing render output, e.g. the committed deploy/)",
                dir.display()
            );
            return TROUBLE;
        }
    }
    let exclude: Vec<&Path> = args.against.iter().map(PathBuf::as_path).collect();
    let (result, skipped) = load_and_render(&args.paths, &exclude, args.verbose);
    let findings: Vec<Finding> = match (&result, &args.against) {
        (Ok((fleets, _)), Some(dir)) => dangerous_edits(dir, fleets)
            .into_iter()
            .filter(|f| !(args.allow_removal && f.kind == FindingKind::Deleted))
            .collect(),
        _ => Vec::new(),
    };
    let valid = result.is_ok() && findings.is_empty();
    match args.format {
        Format::Json => {
            let (fleets, diags) = match &result {
                Ok((f, _)) => (f.len(), &[][..]),
                Err(d) => (0, &d[..]),
            };
            let report = JsonReport {
                valid,
                fleets,
                diagnostics: diags,
                skipped: &skipped,
                findings: &findings,
            };
            match serde_json::to_string_pretty(&report) {
                Ok(json) => {
                    let _ = writeln!(std::io::stdout().lock(), "{json}");
                }
                Err(e) => {
                    let _ = writeln!(anstream::stderr(), "error: writing the report: {e}");
                    return TROUBLE;
                }
            }
        }
        Format::Text => match &result {
            Ok((fleets, _)) if findings.is_empty() => {
                let _ = writeln!(
                    anstream::stderr().lock(),
                    "{} valid",
                    plural(fleets.len(), "fleet")
                );
            }
            Ok((fleets, _)) => {
                let mut out = std::io::stdout().lock();
                for f in &findings {
                    let _ = writeln!(out, "{}: {f}", f.file.display());
                }
                let _ = out.flush();
                let _ = writeln!(
                    anstream::stderr().lock(),
                    "{} valid, but {} against {}; fix them and check again",
                    plural(fleets.len(), "fleet"),
                    plural(findings.len(), "dangerous edit"),
                    args.against
                        .as_deref()
                        .map(Path::display)
                        .map(|d| d.to_string())
                        .unwrap_or_default()
                );
            }
            Err(d) => {
                let mut out = std::io::stdout().lock();
                for diag in d {
                    let _ = writeln!(out, "{diag}");
                }
                let _ = out.flush();
                super::count(d, "fix them and check again");
            }
        },
    }
    if valid { OK } else { FAILED }
}
