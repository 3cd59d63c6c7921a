//! Validation of fleet files. (Being written: see load.rs for the interface.)

use std::path::{Path, PathBuf};

use crate::api::CelldFleet;
use crate::diagnostic::Diagnostic;
use crate::load::LoadedFleet;

/// See [`crate::load::load_paths`].
pub fn load_paths(paths: &[PathBuf]) -> Result<Vec<LoadedFleet>, Vec<Diagnostic>> {
    let mut out = Vec::new();
    for p in paths {
        let text = std::fs::read_to_string(p).map_err(|e| {
            vec![Diagnostic {
                file: p.clone(),
                line: 0,
                column: 0,
                field: String::new(),
                message: e.to_string(),
                expected: String::new(),
            }]
        })?;
        out.push(LoadedFleet {
            path: p.clone(),
            fleet: load_str(p, &text)?,
        });
    }
    Ok(out)
}

/// See [`crate::load::load_str`].
pub fn load_str(path: &Path, text: &str) -> Result<CelldFleet, Vec<Diagnostic>> {
    serde_saphyr::from_str(text).map_err(|e| {
        let loc = e.location();
        vec![Diagnostic {
            file: path.to_path_buf(),
            line: loc.map(|l| l.line() as usize).unwrap_or(0),
            column: loc.map(|l| l.column() as usize).unwrap_or(0),
            field: String::new(),
            message: e.to_string(),
            expected: String::new(),
        }]
    })
}
