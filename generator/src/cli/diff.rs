//! `celld-gen diff`.

use std::io::Write;
use std::path::{Path, PathBuf};

use anstream::ColorChoice;
use clap::{Args, ValueEnum};
use serde::Serialize;

use super::check::{dangerous_edits, load_and_render, print_findings};
use super::{FAILED, HealerNamespaceArg, OK, TROUBLE, plural, report};
use crate::output::dangerous::{Finding, FindingKind};
use crate::output::diff::{Change, changes, summary, write_unified};
use crate::output::{self, Allow};

const EXAMPLES: &str = "\
Examples:
  celld-gen diff fleets/ -o deploy/
  celld-gen diff fleets/ -o deploy/ --color never > render.patch
  celld-gen diff fleets/ -o deploy/ --name-only   # just the files
  celld-gen diff fleets/ -o deploy/ --format json # for tools: changes and dangerous edits
  celld-gen diff fleets/ -o deploy/ --allow-removal   # show a fleet deletion meant on purpose
  celld-gen diff - -o deploy/ < fleets/alpha.yaml # `-`: one fleet file from stdin
  celld-gen diff fleets/ -o deploy/ --healer-namespace ops   # as rendered for it

Dangerous edits are named on stderr (in the `findings` of --format json): a change the
cluster refuses (identity, profile, storage, placement: the sync fails), a fleet renamed
(a new fleet and a deleted one), a workload replaced, each with what to do instead.
Like render, diff refuses (exit 2) when fleet folders would leave DIR, unless
--allow-removal (never for a fleet whose last render has deletion protection on), and
when no fleet is found, unless --allow-empty.

Exit status: 0 when DIR is up to date, 1 when render would change it, 2 when the fleets
are invalid, DIR cannot be read, or render would refuse.";

#[derive(Args, Debug)]
#[command(after_help = EXAMPLES)]
pub struct DiffArgs {
    /// Fleet files, or directories searched recursively for fleet files (*.yaml, *.yml);
    /// `-` reads one fleet file from standard input (shown as `<stdin>` in messages).
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// The output directory to compare with.
    #[arg(short = 'o', long = "output", value_name = "DIR", required = true)]
    pub output: PathBuf,
    /// When to color the diff.
    #[arg(long, value_enum, default_value_t = Color::Auto)]
    pub color: Color,
    /// Print only `added|removed|changed <path>` lines.
    #[arg(long, conflicts_with = "format")]
    pub name_only: bool,
    /// Output format: `text` (a unified diff) or `json` (one document on stdout:
    /// `{"upToDate", "changes": [{"path", "change"}], "findings", "refused"}`).
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Show the removal of fleet folders that no fleet file produces any more, instead
    /// of refusing.
    #[arg(long)]
    pub allow_removal: bool,
    /// Compare even when no fleet is found.
    #[arg(long)]
    pub allow_empty: bool,
    /// List every file and folder that was not read as a fleet, and why (on stderr).
    #[arg(short, long)]
    pub verbose: bool,
    #[command(flatten)]
    pub healer: HealerNamespaceArg,
}

/// When to color output.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Color {
    /// On a terminal, unless NO_COLOR is set.
    Auto,
    /// Always.
    Always,
    /// Never.
    Never,
}

/// Output format of `diff`.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// A unified diff.
    Text,
    /// One JSON document.
    Json,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonChange<'a> {
    path: &'a str,
    change: &'static str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonReport<'a> {
    up_to_date: bool,
    output: &'a Path,
    changes: Vec<JsonChange<'a>>,
    findings: &'a [Finding],
    /// Why render would refuse, if it would.
    refused: Option<String>,
}

fn change_name(c: &Change) -> &'static str {
    match c {
        Change::Added { .. } => "added",
        Change::Removed { .. } => "removed",
        Change::Changed { .. } => "changed",
    }
}

pub fn run(args: DiffArgs) -> u8 {
    match args.color {
        Color::Auto => {}
        Color::Always => ColorChoice::Always.write_global(),
        Color::Never => ColorChoice::Never.write_global(),
    }
    let options = match args.healer.options() {
        Ok(o) => o,
        Err(e) => return super::usage_error(&e, TROUBLE),
    };
    let (fleets, bundle) =
        match load_and_render(&args.paths, &[&args.output], args.verbose, &options).result {
            Ok(r) => r,
            Err(d) => {
                report(&d, "nothing to compare");
                return TROUBLE;
            }
        };
    if let Err(e) = crate::output::check_replaceable(&args.output) {
        let _ = writeln!(anstream::stderr(), "error: render would refuse: {e}");
        return TROUBLE;
    }
    let allow = Allow {
        removal: args.allow_removal,
        empty: args.allow_empty,
    };
    let refused = output::guard(Some(&args.output), &bundle, &args.paths, allow).err();
    let findings = dangerous_edits(&args.output, &fleets);
    let changes = match changes(&args.output, &bundle) {
        Ok(c) => c,
        Err(e) => {
            let _ = writeln!(
                anstream::stderr(),
                "error: reading {}: {e}",
                args.output.display()
            );
            return TROUBLE;
        }
    };
    if args.format == Format::Json {
        let report = JsonReport {
            up_to_date: changes.is_empty(),
            output: &args.output,
            changes: changes
                .iter()
                .map(|c| JsonChange {
                    path: c.path(),
                    change: change_name(c),
                })
                .collect(),
            findings: &findings,
            refused: refused.as_ref().map(ToString::to_string),
        };
        let written = serde_json::to_string_pretty(&report)
            .map_err(std::io::Error::other)
            .and_then(|json| writeln!(std::io::stdout().lock(), "{json}"));
        if let Err(e) = written {
            let _ = writeln!(anstream::stderr(), "error: writing the report: {e}");
            return TROUBLE;
        }
        return match (&refused, changes.is_empty()) {
            (Some(_), _) => TROUBLE,
            (None, true) => OK,
            (None, false) => FAILED,
        };
    }
    if let Some(e) = refused {
        // A refused removal may be a rename or a deletion: name what it is.
        print_findings(&findings, "danger", args.allow_removal);
        let _ = writeln!(anstream::stderr(), "error: {e}");
        return TROUBLE;
    }
    let mut out = anstream::stdout().lock();
    let written = if args.name_only {
        out.write_all(summary(&changes).as_bytes())
    } else {
        write_unified(&changes, &mut out)
    };
    if let Err(e) = written.and_then(|_| out.flush())
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        let _ = writeln!(anstream::stderr(), "error: writing the diff: {e}");
        return TROUBLE;
    }
    drop(out);
    // Deletions allowed on purpose are still named, so the diff's removals are explained.
    print_findings(&findings, "danger", args.allow_removal);
    let dir = args.output.display();
    if changes.is_empty() {
        let _ = writeln!(anstream::stderr(), "{dir} is up to date");
        OK
    } else {
        let dangerous = findings
            .iter()
            .filter(|f| f.kind != FindingKind::Deleted)
            .count();
        let extra = if dangerous > 0 {
            format!(", with {} (see above)", plural(dangerous, "dangerous edit"))
        } else {
            String::new()
        };
        let _ = writeln!(
            anstream::stderr(),
            "render would change {} in {dir}{extra}",
            plural(changes.len(), "file")
        );
        FAILED
    }
}
