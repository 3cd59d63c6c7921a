//! `celld-gen check`, and the loading the other commands share with it.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use serde::Serialize;

use super::{FAILED, HealerNamespaceArg, OK, TROUBLE, count, plural, print};
use crate::load::{LoadedFleet, Options, Skipped};
use crate::output::dangerous::{self, Finding, FindingKind};
use crate::render::{Bundle, RenderOptions};
use celld_api::diagnostic::Diagnostic;

const EXAMPLES: &str = "\
Examples:
  celld-gen check fleets/alpha.yaml
  celld-gen check fleets/                 # every fleet file below fleets/
  celld-gen check fleets/ -v              # also list the files that are not fleets
  celld-gen check fleets/ --against deploy/   # also refuse edits the cluster cannot take
  celld-gen check fleets/ --format json   # for tools: {\"valid\": ..., \"diagnostics\": [...]}
  celld-gen check - < fleets/alpha.yaml   # `-`: one fleet file from standard input
  celld-gen check fleets/ --format github # in a GitHub Actions step: annotations on the PR
  celld-gen check fleets/ --format junit > check.xml   # a test report for CI
  celld-gen check fleets/ --healer-namespace ops  # render checks as for install --namespace ops

In a directory, files of other YAML are skipped (listed with -v), but a file that looks
like a lost fleet is an error: a `kind` that is a typo of CelldFleet, another
fleet.celld.dev kind, a fleet without `kind`, an empty or comment-only file. Folders of
celld-gen output (their kustomization.yaml carries the generated header) are never read,
and directory symlinks are not followed.

--format github prints one `::error file=F,line=L,col=C,title=FIELD::MESSAGE` line per
problem on stdout; GitHub resolves F against the repository root, so run check from
there with relative paths. --format junit prints JUnit XML with one testcase per fleet
file, failed with every problem of that file.";

#[derive(Args, Debug)]
#[command(after_help = EXAMPLES)]
pub struct CheckArgs {
    /// Fleet files, or directories searched recursively for fleet files (*.yaml, *.yml);
    /// `-` reads one fleet file from standard input (shown as `<stdin>` in messages).
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// Output format: `text` (one line per problem), `json` (one document on stdout,
    /// with the skipped files and the dangerous edits), `github` (GitHub Actions
    /// annotations) or `junit` (JUnit XML).
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Compare with DIR, an existing render output (e.g. the committed deploy/): a change
    /// the cluster refuses (identity, profile, storage, placement), a renamed fleet or a
    /// replaced workload is a problem, and so is a deleted fleet unless --allow-removal
    /// (a deleted fleet whose last render has deletion protection on always is).
    #[arg(long, value_name = "DIR")]
    pub against: Option<PathBuf>,
    /// With --against: fleets deleted on purpose are not a problem (unless their last
    /// render has deletion protection on: turn it off and sync first).
    #[arg(long, requires = "against")]
    pub allow_removal: bool,
    /// Pass when no fleet is found (otherwise a mistyped path would pass unnoticed).
    #[arg(long)]
    pub allow_empty: bool,
    /// List every file and folder that was not read as a fleet, and why (on stderr).
    #[arg(short, long)]
    pub verbose: bool,
    #[command(flatten)]
    pub healer: HealerNamespaceArg,
}

/// Output format of `check`.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Human-readable lines.
    Text,
    /// One JSON document.
    Json,
    /// GitHub Actions workflow commands (`::error file=...::...`), one per problem.
    Github,
    /// JUnit XML: one testcase per fleet file.
    Junit,
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

/// What the commands get from loading and rendering.
pub(super) struct LoadedAndRendered {
    /// The fleets and their rendering, or every problem.
    pub result: Rendered,
    /// Files and folders passed over.
    pub skipped: Vec<Skipped>,
    /// Every file read (as diagnostics name it).
    pub files: Vec<PathBuf>,
}

impl LoadedAndRendered {
    /// The files read that hold a fleet (read but not skipped): one test case each in a
    /// JUnit report.
    fn fleet_files(&self) -> Vec<PathBuf> {
        self.files
            .iter()
            .filter(|f| !self.skipped.iter().any(|s| &s.path == *f))
            .cloned()
            .collect()
    }
}

/// Loads fleets (leaving `exclude` out), prints what was skipped with `verbose`, and
/// renders them in memory.
pub(super) fn load_and_render(
    paths: &[PathBuf],
    exclude: &[&Path],
    verbose: bool,
    options: &RenderOptions,
) -> LoadedAndRendered {
    let loaded = crate::load::load(
        paths,
        &Options {
            exclude: exclude.iter().map(|p| p.to_path_buf()).collect(),
            established: exclude
                .iter()
                .flat_map(|d| dangerous::rendered_fleets(d))
                .map(|(folder, (_, fleet))| (folder, fleet))
                .collect(),
        },
    );
    if verbose {
        print_skipped(&loaded.skipped);
    }
    let result = loaded.result.and_then(|fleets| {
        let bundle = crate::render::render_all_with(&fleets, options)?;
        Ok((fleets, bundle))
    });
    LoadedAndRendered {
        result,
        skipped: loaded.skipped,
        files: loaded.files,
    }
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
    let options = match args.healer.options() {
        Ok(o) => o,
        Err(e) => return super::usage_error(&e, FAILED),
    };
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
    let loaded = load_and_render(&args.paths, &exclude, args.verbose, &options);
    let result = &loaded.result;
    let findings: Vec<Finding> = match (result, &args.against) {
        (Ok((fleets, _)), Some(dir)) => dangerous_edits(dir, fleets)
            .into_iter()
            .filter(|f| !(args.allow_removal && f.kind == FindingKind::Deleted))
            .collect(),
        _ => Vec::new(),
    };
    // Zero fleets is a problem unless asked for: `render` and `diff` refuse it too.
    let nothing = matches!(result, Ok((f, _)) if f.is_empty()) && !args.allow_empty;
    let valid = result.is_ok() && findings.is_empty() && !nothing;
    let mut diags: Vec<Diagnostic> = match result {
        Ok(_) => Vec::new(),
        Err(d) => d.clone(),
    };
    if nothing {
        let paths: Vec<String> = args.paths.iter().map(|p| p.display().to_string()).collect();
        diags.push(Diagnostic::whole_file(
            Path::new(&paths.join(" ")),
            "no fleet found: a mistyped path would pass check, and render would refuse it",
            "a fleet file, or a directory of them; or --allow-empty if none is what you mean",
        ));
    }
    // Dangerous edits are problems of their fleet file in every format.
    // At the field's line and column in the fleet's file (whole file when unknown).
    let edits: Vec<Diagnostic> = findings
        .iter()
        .map(|f| Diagnostic {
            line: f.line,
            column: f.column,
            ..Diagnostic::whole_file(&f.file, f.to_string(), "")
        })
        .collect();
    let diags = &diags[..];
    let fleets = result.as_ref().map_or(0, |(f, _)| f.len());
    let stdout = match args.format {
        Format::Json => {
            let report = JsonReport {
                valid,
                fleets,
                diagnostics: diags,
                skipped: &loaded.skipped,
                findings: &findings,
            };
            match serde_json::to_string_pretty(&report) {
                Ok(json) => format!("{json}\n"),
                Err(e) => {
                    let _ = writeln!(anstream::stderr(), "error: writing the report: {e}");
                    return TROUBLE;
                }
            }
        }
        Format::Text => diags
            .iter()
            .map(|d| format!("{d}\n"))
            .chain(findings.iter().map(|f| {
                if f.line > 0 {
                    format!("{}:{}:{}: {f}\n", f.file.display(), f.line, f.column)
                } else {
                    format!("{}: {f}\n", f.file.display())
                }
            }))
            .collect(),
        Format::Github => diags.iter().chain(&edits).map(github_annotation).collect(),
        Format::Junit => {
            let all: Vec<Diagnostic> = diags.iter().chain(&edits).cloned().collect();
            junit(&loaded.fleet_files(), &all)
        }
    };
    // A reader that went away has what it wanted; the status still says valid or not.
    if let Err(e) = print(stdout.as_bytes()) {
        let _ = writeln!(anstream::stderr(), "error: writing to standard output: {e}");
    }
    if args.format != Format::Json {
        match result {
            Ok(_) if nothing => count(diags, "check the paths, or pass --allow-empty"),
            Ok(_) if findings.is_empty() => {
                let _ = writeln!(
                    anstream::stderr().lock(),
                    "{} valid",
                    plural(fleets, "fleet")
                );
            }
            Ok(_) => {
                let _ = writeln!(
                    anstream::stderr().lock(),
                    "{} valid, but {} against {}; fix them and check again",
                    plural(fleets, "fleet"),
                    plural(findings.len(), "dangerous edit"),
                    args.against
                        .as_deref()
                        .map(Path::display)
                        .map(|d| d.to_string())
                        .unwrap_or_default()
                );
            }
            Err(d) => count(d, "fix them and check again"),
        }
    }
    if valid { OK } else { FAILED }
}

/// Escapes the message part of a workflow command (GitHub's `escapeData`).
fn escape_data(s: &str) -> String {
    s.replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

/// Escapes a property value of a workflow command (GitHub's `escapeProperty`).
fn escape_property(s: &str) -> String {
    escape_data(s).replace(':', "%3A").replace(',', "%2C")
}

/// `::error file=F,line=L,col=C,title=FIELD::MESSAGE (expected ...)`; no `file` for
/// standard input or a problem of no file, no `line`/`col` for a whole-file problem.
fn github_annotation(d: &Diagnostic) -> String {
    let mut props = Vec::new();
    let file = d.file.to_string_lossy();
    if !file.is_empty() && !crate::load::is_stdin_name(&d.file) {
        props.push(format!("file={}", escape_property(&file)));
        if d.line > 0 {
            props.push(format!("line={}", d.line));
            if d.column > 0 {
                props.push(format!("col={}", d.column));
            }
        }
    }
    let title = if d.field.is_empty() {
        "celld-gen check".to_owned()
    } else {
        format!("celld-gen check: {}", d.field)
    };
    props.push(format!("title={}", escape_property(&title)));
    let mut message = d.message.clone();
    if !d.expected.is_empty() {
        message.push_str(&format!(" (expected {})", d.expected));
    }
    // A message for stdin or no file still says where, in its text.
    if props.first().is_none_or(|p| !p.starts_with("file=")) && !file.is_empty() {
        message = format!("{file}:{}:{}: {message}", d.line, d.column);
    }
    format!("::error {}::{}\n", props.join(","), escape_data(&message))
}

fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // XML 1.0 has no way to write most control characters; show them instead.
            c if (c as u32) < 0x20 && !matches!(c, '\n' | '\t' | '\r') => {
                out.push_str(&format!("\\u{{{:x}}}", c as u32));
            }
            c => out.push(c),
        }
    }
    out
}

/// JUnit XML: one testcase per fleet file (the valid ones and every file with a problem),
/// sorted by path; a file's problems are its one failure. No timestamps or durations, so
/// the report is byte-stable.
fn junit(fleet_files: &[PathBuf], diags: &[Diagnostic]) -> String {
    let mut cases: BTreeMap<&Path, Vec<&Diagnostic>> = BTreeMap::new();
    for f in fleet_files {
        cases.entry(f.as_path()).or_default();
    }
    for d in diags {
        cases.entry(d.file.as_path()).or_default().push(d);
    }
    let failures = cases.values().filter(|v| !v.is_empty()).count();
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    out.push_str(&format!(
        "<testsuites name=\"celld-gen check\" tests=\"{}\" failures=\"{failures}\" errors=\"0\">\n",
        cases.len()
    ));
    out.push_str(&format!(
        "  <testsuite name=\"celld-gen check\" tests=\"{}\" failures=\"{failures}\" errors=\"0\" skipped=\"0\">\n",
        cases.len()
    ));
    for (file, problems) in &cases {
        let name = if file.as_os_str().is_empty() {
            "(all fleets)".to_owned()
        } else {
            file.display().to_string()
        };
        let name = xml_escape(&name);
        let open =
            format!("    <testcase classname=\"celld-gen.check\" name=\"{name}\" file=\"{name}\"");
        if problems.is_empty() {
            out.push_str(&open);
            out.push_str("/>\n");
            continue;
        }
        out.push_str(&open);
        out.push_str(">\n");
        let body: String = problems.iter().map(|d| format!("{d}\n")).collect();
        out.push_str(&format!(
            "      <failure type=\"invalid\" message=\"{}\">{}</failure>\n",
            xml_escape(&plural(problems.len(), "problem")),
            xml_escape(&body)
        ));
        out.push_str("    </testcase>\n");
    }
    out.push_str("  </testsuite>\n</testsuites>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn diag(file: &str, line: usize, message: &str) -> Diagnostic {
        Diagnostic {
            file: file.into(),
            line,
            column: 3,
            field: "spec.members".into(),
            message: message.into(),
            expected: "1..100".into(),
        }
    }

    #[test]
    fn annotations_escape_what_github_reads_as_syntax() {
        let a = github_annotation(&diag("f,1:x.yaml", 4, "50% off\nnext"));
        assert_eq!(
            a,
            "::error file=f%2C1%3Ax.yaml,line=4,col=3,title=celld-gen check%3A spec.members::50%25 off%0Anext (expected 1..100)\n"
        );
        // Whole-file problems have no line or column.
        let a = github_annotation(&diag("f.yaml", 0, "m"));
        assert!(a.starts_with("::error file=f.yaml,title="), "{a}");
    }

    #[test]
    fn junit_has_one_case_per_file_and_escapes() {
        let files = vec![PathBuf::from("a.yaml"), PathBuf::from("b.yaml")];
        let x = junit(&files, &[diag("b.yaml", 2, "<bad> & \"worse\"")]);
        assert!(x.contains("tests=\"2\" failures=\"1\""), "{x}");
        assert!(
            x.contains("<testcase classname=\"celld-gen.check\" name=\"a.yaml\" file=\"a.yaml\"/>")
        );
        assert!(x.contains("&lt;bad&gt; &amp; &quot;worse&quot;"), "{x}");
    }
}
