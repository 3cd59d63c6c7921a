//! `celld-gen diff`.

use std::io::Write;
use std::path::PathBuf;

use anstream::ColorChoice;
use clap::{Args, ValueEnum};

use super::{FAILED, HealerNamespaceArg, OK, TROUBLE, load_and_render, plural, report};
use crate::output::diff::{changes, summary, write_unified};

const EXAMPLES: &str = "\
Examples:
  celld-gen diff fleets/ -o deploy/
  celld-gen diff fleets/ -o deploy/ --color never > render.patch
  celld-gen diff fleets/ -o deploy/ --name-only   # just the files
  celld-gen diff - -o deploy/ < fleets/alpha.yaml # `-`: one fleet file from stdin
  celld-gen diff fleets/ -o deploy/ --healer-namespace ops   # as rendered for it

Exit status: 0 when DIR is up to date, 1 when render would change it, 2 when the fleets
are invalid or DIR cannot be read.";

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
    #[arg(long)]
    pub name_only: bool,
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
    let bundle = match load_and_render(&args.paths, &options) {
        Ok((_, b)) => b,
        Err(d) => {
            report(&d, "nothing to compare");
            return TROUBLE;
        }
    };
    if let Err(e) = crate::output::check_replaceable(&args.output) {
        let _ = writeln!(anstream::stderr(), "error: render would refuse: {e}");
        return TROUBLE;
    }
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
    let dir = args.output.display();
    if changes.is_empty() {
        let _ = writeln!(anstream::stderr(), "{dir} is up to date");
        OK
    } else {
        let _ = writeln!(
            anstream::stderr(),
            "render would change {} in {dir}",
            plural(changes.len(), "file")
        );
        FAILED
    }
}
