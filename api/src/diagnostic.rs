//! A problem found in a fleet file, located precisely enough to fix it.

use std::fmt;
use std::path::PathBuf;

use serde::Serialize;

/// One problem in one fleet file: where it is, which field, what is wrong, what would do.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Diagnostic {
    /// The file.
    pub file: PathBuf,
    /// 1-based line (1 when the problem is the file as a whole).
    pub line: usize,
    /// 1-based column (1 when the problem is the file as a whole).
    pub column: usize,
    /// Field path, e.g. `spec.placement.zones[1]` (empty for the whole document).
    pub field: String,
    /// What is wrong.
    pub message: String,
    /// What would be valid.
    pub expected: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never 0:0: a whole-file problem still points at the file's first character.
        write!(
            f,
            "{}:{}:{}: ",
            self.file.display(),
            self.line.max(1),
            self.column.max(1)
        )?;
        if !self.field.is_empty() {
            write!(f, "{}: ", self.field)?;
        }
        write!(f, "{}", self.message)?;
        if !self.expected.is_empty() {
            write!(f, " (expected {})", self.expected)?;
        }
        Ok(())
    }
}

impl Diagnostic {
    /// A problem with the file as a whole, reported at 1:1 (editors and CI annotations
    /// need a real position).
    pub fn whole_file(
        file: &std::path::Path,
        message: impl Into<String>,
        expected: impl Into<String>,
    ) -> Self {
        Diagnostic {
            file: file.to_path_buf(),
            line: 1,
            column: 1,
            field: String::new(),
            message: message.into(),
            expected: expected.into(),
        }
    }
}
