//! A problem found in a fleet file, located precisely enough to fix it.

use std::fmt;
use std::path::PathBuf;

use serde::Serialize;

/// One problem in one fleet file: where it is, which field, what is wrong, what would do.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Diagnostic {
    /// The file.
    pub file: PathBuf,
    /// 1-based line (0 when the problem is the file as a whole).
    pub line: usize,
    /// 1-based column (0 when unknown).
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
        write!(f, "{}:{}:{}: ", self.file.display(), self.line, self.column)?;
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
