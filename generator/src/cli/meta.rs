//! `celld-gen version`, `completion` and `man`: what a packaged command line is expected
//! to offer, all generated from the same clap definition as `--help`.

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, CommandFactory, ValueEnum};
use clap_complete::Shell;

use super::{Cli, FAILED, OK, Printed, print};
use crate::version;

const VERSION_EXAMPLES: &str = "\
Examples:
  celld-gen version
  celld-gen version --format json | jq -r .commit";

#[derive(Args, Debug)]
#[command(after_help = VERSION_EXAMPLES)]
pub struct VersionArgs {
    /// `text` (three lines) or `json` (one object: version, commit, kubernetes
    /// {min, max}).
    #[arg(long, value_enum, default_value_t = VersionFormat::Text)]
    pub format: VersionFormat,
}

/// Output format of `version`.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum VersionFormat {
    /// `celld-gen 0.1.0`, `commit: ...`, `kubernetes: 1.36`.
    Text,
    /// One JSON object.
    Json,
}

const COMPLETION_EXAMPLES: &str = "\
Examples:
  celld-gen completion bash > /etc/bash_completion.d/celld-gen
  celld-gen completion zsh > \"${fpath[1]}/_celld-gen\"
  celld-gen completion fish > ~/.config/fish/completions/celld-gen.fish
  celld-gen completion powershell >> $PROFILE";

#[derive(Args, Debug)]
#[command(after_help = COMPLETION_EXAMPLES)]
pub struct CompletionArgs {
    /// The shell to complete for.
    #[arg(value_enum, value_name = "SHELL")]
    pub shell: Shell,
}

const MAN_EXAMPLES: &str = "\
Examples:
  celld-gen man > celld-gen.1 && man ./celld-gen.1
  celld-gen man --dir /usr/local/share/man/man1   # celld-gen.1 and celld-gen-<command>.1
  celld-gen man | gzip > /usr/local/share/man/man1/celld-gen.1.gz";

#[derive(Args, Debug)]
#[command(after_help = MAN_EXAMPLES)]
pub struct ManArgs {
    /// Write one page per command (`celld-gen.1`, `celld-gen-render.1`, ...) into DIR
    /// instead of printing the main page.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

pub fn run_version(args: VersionArgs) -> u8 {
    let text = match args.format {
        VersionFormat::Text => format!("celld-gen {}\n", version::long_version()),
        VersionFormat::Json => {
            let json = serde_json::json!({
                "version": version::VERSION,
                "commit": version::GIT_COMMIT,
                "kubernetes": {
                    "min": crate::kubernetes::OLDEST.to_string(),
                    "max": crate::kubernetes::NEWEST.to_string(),
                    "supported": crate::kubernetes::Minor::supported()
                        .map(|m| m.to_string())
                        .collect::<Vec<_>>(),
                },
                "healerImage": version::default_healer_image(),
            });
            format!("{json:#}\n")
        }
    };
    finish(print(text.as_bytes()))
}

pub fn run_completion(args: CompletionArgs) -> u8 {
    finish(print(completion_script(args.shell).as_bytes()))
}

/// The command line as completion offers it: without hidden subcommands (clap_complete
/// lists them otherwise), so `crds`, a CI helper, is never suggested.
fn completion_command() -> clap::Command {
    let full = Cli::command();
    let mut cmd = clap::Command::new("celld-gen")
        .version(env!("CARGO_PKG_VERSION"))
        .about(full.get_about().cloned().unwrap_or_default());
    for arg in full.get_arguments() {
        cmd = cmd.arg(arg.clone());
    }
    for sub in full.get_subcommands().filter(|s| !s.is_hide_set()) {
        cmd = cmd.subcommand(sub.clone());
    }
    cmd
}

/// The completion script for `shell`. For bash, clap_complete names the functions of a
/// hyphenated binary's subcommands inconsistently (`celld__subcmd__gen__…` in the cases,
/// `celld__gen__…` where it dispatches), so no subcommand's flags would ever complete;
/// the names are made consistent here (checked by running the script in bash, zsh and
/// fish: `tests/conventions.rs`).
pub fn completion_script(shell: Shell) -> String {
    let mut buf = Vec::new();
    clap_complete::generate(shell, &mut completion_command(), "celld-gen", &mut buf);
    let text = String::from_utf8_lossy(&buf).into_owned();
    match shell {
        Shell::Bash => text.replace("celld__subcmd__gen", "celld__gen"),
        _ => text,
    }
}

pub fn run_man(args: ManArgs) -> u8 {
    let cmd = Cli::command();
    match args.dir {
        None => {
            let mut buf = Vec::new();
            if let Err(e) = clap_mangen::Man::new(cmd).render(&mut buf) {
                return fail(&format!("rendering the man page: {e}"));
            }
            finish(print(&buf))
        }
        Some(dir) => {
            if let Err(e) = std::fs::create_dir_all(&dir) {
                return fail(&format!("creating {}: {e}", dir.display()));
            }
            match clap_mangen::generate_to(cmd, &dir) {
                Ok(()) => {
                    let _ = writeln!(anstream::stderr(), "man pages written to {}", dir.display());
                    OK
                }
                Err(e) => fail(&format!("writing man pages to {}: {e}", dir.display())),
            }
        }
    }
}

fn finish(printed: std::io::Result<Printed>) -> u8 {
    match printed {
        Ok(_) => OK,
        Err(e) => fail(&format!("writing to standard output: {e}")),
    }
}

fn fail(message: &str) -> u8 {
    let _ = writeln!(anstream::stderr(), "error: {message}");
    FAILED
}
