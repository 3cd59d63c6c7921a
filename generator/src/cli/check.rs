//! `celld-gen check`.

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, ValueEnum};
use serde::Serialize;

use super::{FAILED, OK, count, load_and_render, plural};
use crate::diagnostic::Diagnostic;

const EXAMPLES: &str = "\
Examples:
  celld-gen check fleets/alpha.yaml
  celld-gen check fleets/                 # every fleet file below fleets/
  celld-gen check fleets/ --format json   # for tools: {\"valid\": ..., \"diagnostics\": [...]}";

#[derive(Args, Debug)]
#[command(after_help = EXAMPLES)]
pub struct CheckArgs {
    /// Fleet files, or directories searched recursively for fleet files (*.yaml, *.yml).
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// Output format: `text` (one line per problem) or `json` (one document on
    /// stdout).
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
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
}

pub fn run(args: CheckArgs) -> u8 {
    let result = load_and_render(&args.paths);
    match args.format {
        Format::Json => {
            let (valid, fleets, diags) = match &result {
                Ok((n, _)) => (true, *n, &[][..]),
                Err(d) => (false, 0, &d[..]),
            };
            let json = serde_json::to_string_pretty(&JsonReport {
                valid,
                fleets,
                diagnostics: diags,
            })
            .expect("diagnostics serialize");
            let _ = writeln!(std::io::stdout().lock(), "{json}");
        }
        Format::Text => match &result {
            Ok((n, _)) => {
                let _ = writeln!(anstream::stderr().lock(), "{} valid", plural(*n, "fleet"));
            }
            Err(d) => {
                let mut out = std::io::stdout().lock();
                for diag in d {
                    let _ = writeln!(out, "{diag}");
                }
                let _ = out.flush();
                count(d, "fix them and check again");
            }
        },
    }
    if result.is_ok() { OK } else { FAILED }
}
