//! What `render` would change in an output directory, as a unified diff.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::Path;

use anstyle::{AnsiColor, Style};
use similar::{ChangeTag, TextDiff};

use crate::render::Bundle;

/// How one file would change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// Render would create it.
    Added {
        /// Relative path.
        path: String,
        /// New contents.
        new: String,
    },
    /// Render would remove it.
    Removed {
        /// Relative path.
        path: String,
        /// Current contents (lossy UTF-8).
        old: String,
    },
    /// Render would rewrite it.
    Changed {
        /// Relative path.
        path: String,
        /// Current contents (lossy UTF-8).
        old: String,
        /// New contents.
        new: String,
    },
}

impl Change {
    /// The file's relative path.
    pub fn path(&self) -> &str {
        match self {
            Change::Added { path, .. }
            | Change::Removed { path, .. }
            | Change::Changed { path, .. } => path,
        }
    }
}

/// Every file that differs between `dir` and `bundle`, sorted by path.
pub fn changes(dir: &Path, bundle: &Bundle) -> io::Result<Vec<Change>> {
    // Another command's output inside `dir` (the install bundle) is not ours to compare.
    let mut current: BTreeMap<String, Vec<u8>> = super::read_own_tree(dir, crate::render::HEADER)?
        .into_iter()
        .collect();
    let mut out = Vec::new();
    for f in &bundle.files {
        match current.remove(&f.path) {
            None => out.push(Change::Added {
                path: f.path.clone(),
                new: f.contents.clone(),
            }),
            Some(old) if old != f.contents.as_bytes() => out.push(Change::Changed {
                path: f.path.clone(),
                old: String::from_utf8_lossy(&old).into_owned(),
                new: f.contents.clone(),
            }),
            Some(_) => {}
        }
    }
    for (path, old) in current {
        out.push(Change::Removed {
            path,
            old: String::from_utf8_lossy(&old).into_owned(),
        });
    }
    out.sort_by(|a, b| a.path().cmp(b.path()));
    Ok(out)
}

const HEADER_STYLE: Style = Style::new().bold();
const HUNK_STYLE: Style = AnsiColor::Cyan.on_default();
const DELETE_STYLE: Style = AnsiColor::Red.on_default();
const INSERT_STYLE: Style = AnsiColor::Green.on_default();

/// Writes `changes` as a unified diff (`a/<path>` → `b/<path>`, `/dev/null` for added
/// and removed files, 3 lines of context), with ANSI colors. Write to an
/// `anstream` stream to have colors dropped where they do not belong.
pub fn write_unified(changes: &[Change], out: &mut impl Write) -> io::Result<()> {
    for c in changes {
        let (old, new, a, b) = match c {
            Change::Added { path, new } => {
                ("", new.as_str(), "/dev/null".into(), format!("b/{path}"))
            }
            Change::Removed { path, old } => {
                (old.as_str(), "", format!("a/{path}"), "/dev/null".into())
            }
            Change::Changed { path, old, new } => (
                old.as_str(),
                new.as_str(),
                format!("a/{path}"),
                format!("b/{path}"),
            ),
        };
        writeln!(out, "{HEADER_STYLE}--- {a}{HEADER_STYLE:#}")?;
        writeln!(out, "{HEADER_STYLE}+++ {b}{HEADER_STYLE:#}")?;
        let diff = TextDiff::from_lines(old, new);
        for hunk in diff.unified_diff().context_radius(3).iter_hunks() {
            writeln!(out, "{HUNK_STYLE}{}{HUNK_STYLE:#}", hunk.header())?;
            for change in hunk.iter_changes() {
                let (sign, style) = match change.tag() {
                    ChangeTag::Delete => ('-', DELETE_STYLE),
                    ChangeTag::Insert => ('+', INSERT_STYLE),
                    ChangeTag::Equal => (' ', Style::new()),
                };
                let text = change.value();
                let line = text.strip_suffix('\n').unwrap_or(text);
                writeln!(out, "{style}{sign}{line}{style:#}")?;
                if !text.ends_with('\n') {
                    writeln!(out, "\\ No newline at end of file")?;
                }
            }
        }
    }
    Ok(())
}

/// One line per change: `added|removed|changed <path>`.
pub fn summary(changes: &[Change]) -> String {
    let mut s = String::new();
    for c in changes {
        let what = match c {
            Change::Added { .. } => "added",
            Change::Removed { .. } => "removed",
            Change::Changed { .. } => "changed",
        };
        s.push_str(&format!("{what} {}\n", c.path()));
    }
    s
}
