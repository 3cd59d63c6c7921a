//! Validation of one fleet document, in three passes over a located YAML tree:
//! 1. [`yaml`]: syntax, with refusal of anchors, tags and duplicate keys;
//! 2. [`schema`]: shape, against the CRD's own schema: every unknown field and wrong type;
//! 3. [`rules`]: meaning: formats, ranges, combinations, reserved names.

pub mod formats;
pub mod rules;
pub mod schema;
pub mod templates;
pub mod yaml;

use std::path::Path;

use crate::diagnostic::Diagnostic;
use yaml::Pos;

/// A problem inside one document; the file is added when it becomes a [`Diagnostic`].
#[derive(Clone, Debug, PartialEq)]
pub struct Problem {
    /// Where.
    pub pos: Pos,
    /// Field path.
    pub field: String,
    /// What is wrong.
    pub message: String,
    /// What would be valid.
    pub expected: String,
}

impl Problem {
    /// A problem at `pos`.
    pub fn new(pos: Pos, field: &str, message: impl Into<String>, expected: &str) -> Self {
        Problem {
            pos,
            field: field.to_string(),
            message: message.into(),
            expected: expected.to_string(),
        }
    }

    /// This problem in `file`.
    pub fn into_diagnostic(self, file: &Path) -> Diagnostic {
        Diagnostic {
            file: file.to_path_buf(),
            line: self.pos.line,
            column: self.pos.column,
            field: self.field,
            message: self.message,
            expected: self.expected,
        }
    }
}

/// Edit distance between two strings (Levenshtein, by characters).
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = if ca == cb {
                prev
            } else {
                1 + prev.min(cur).min(row[j])
            };
            prev = cur;
        }
    }
    row[b.len()]
}

