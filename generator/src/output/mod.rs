//! Writing a rendered bundle: the whole output tree at once, never half of it, and the
//! difference between a bundle and what a directory holds.

pub mod dangerous;
pub mod diff;

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::render::{Bundle, HEADER, OutputFile};

/// Why the tree could not be written.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The directory exists and holds something the generator did not write.
    #[error(
        "{0} exists and is not a celld-gen output directory (no kustomization.yaml starting with the celld-gen header); refusing to replace it. Render into an empty or new directory."
    )]
    NotOurs(PathBuf),
    /// The bundle would write into a folder that holds another celld-gen output.
    #[error(
        "{0} holds the output of another celld-gen command (its kustomization.yaml says so), and this output would write into it; use another output folder for one of them"
    )]
    Overlap(PathBuf),
    /// The path has no final name (`.`, `..`, `/`): it cannot be swapped.
    #[error("{0} cannot be replaced as a whole; name the output directory (e.g. deploy/)")]
    Unnamed(PathBuf),
    /// The directory is a symbolic link.
    #[error("{0} is a symbolic link; render into the directory it points to instead")]
    Symlink(PathBuf),
    /// A file system operation failed.
    #[error("{path}: {source}")]
    Io {
        /// Where.
        path: PathBuf,
        /// What.
        source: io::Error,
    },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> WriteError + '_ {
    move |source| WriteError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Why `render` or `diff` stop before anything is written: the render would drop fleets
/// and nobody said so.
#[derive(Debug, thiserror::Error)]
pub enum GuardError {
    /// No fleet was found at all.
    #[error(
        "no fleet found in {inputs}; refusing to render zero fleets{into}. Check the paths, or pass --allow-empty if an empty output is what you want"
    )]
    Empty {
        /// The input paths, as given.
        inputs: String,
        /// ` into DIR, which would remove every fleet in it`, or empty.
        into: String,
    },
    /// Fleet folders of the output would go.
    #[error(
        "render would remove {} from {}: {}. Behind Argo CD or Flux with pruning, a folder removed from Git is a fleet deleted. Restore the fleet files (renamed, skipped or lost?), or pass --allow-removal to remove them on purpose",
        plural_folders(.folders.len()),
        .dir.display(),
        .folders.join(", ")
    )]
    WouldRemove {
        /// The output directory.
        dir: PathBuf,
        /// The fleet folders (`<namespace>/<name>`) that would go, sorted.
        folders: Vec<String>,
    },
    /// Fleet folders would go whose last render has deletion protection on (or cannot
    /// be read): refused even with `--allow-removal`.
    #[error(
        "render would remove {} from {} with deletion protection on in their last render: {}. Their CelldFleets and disks stay (the admission policy keeps them), so the removal only takes the fleets out of Git. Restore the fleet files, or {}",
        plural_folders(.folders.len()),
        .dir.display(),
        .folders.join(", "),
        dangerous::REMOVE_IN_ORDER
    )]
    ProtectedRemoval {
        /// The output directory.
        dir: PathBuf,
        /// The fleet folders (`<namespace>/<name>`) that would go, sorted; one whose
        /// `celldfleet.yaml` cannot be read is taken as protected.
        folders: Vec<String>,
    },
    /// The output directory cannot be read.
    #[error("reading {path}: {source}")]
    Io {
        /// Where.
        path: PathBuf,
        /// What.
        source: io::Error,
    },
}

fn plural_folders(n: usize) -> String {
    if n == 1 {
        "1 fleet folder".to_owned()
    } else {
        format!("{n} fleet folders")
    }
}

/// Fleet folders (`<namespace>/<name>`) in an existing output directory (none if missing).
pub fn fleet_folders(dir: &Path) -> io::Result<std::collections::BTreeSet<String>> {
    Ok(read_own_tree(dir, HEADER)?
        .into_iter()
        .filter_map(|(path, _)| {
            let mut parts = path.splitn(3, '/');
            match (parts.next(), parts.next(), parts.next()) {
                (Some(ns), Some(name), Some(_)) => Some(format!("{ns}/{name}")),
                _ => None,
            }
        })
        .collect())
}

/// What the user allowed, for [`guard`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Allow {
    /// `--allow-removal`: fleet folders may leave the output.
    pub removal: bool,
    /// `--allow-empty`: zero fleets may be rendered.
    pub empty: bool,
}

/// Refuses a render of zero fleets, and one that would remove fleet folders from `dir`,
/// unless allowed; one that would remove a protected fleet's folder always.
pub fn guard(
    dir: Option<&Path>,
    bundle: &Bundle,
    inputs: &[PathBuf],
    allow: Allow,
) -> Result<(), GuardError> {
    if bundle.fleets.is_empty() && !allow.empty {
        let existing = match dir {
            Some(d) => fleet_folders(d).map_err(|source| GuardError::Io {
                path: d.to_path_buf(),
                source,
            })?,
            None => Default::default(),
        };
        return Err(GuardError::Empty {
            inputs: inputs
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(" "),
            into: match dir {
                Some(d) if !existing.is_empty() => format!(
                    " into {}, which would remove every fleet in it ({})",
                    d.display(),
                    existing.into_iter().collect::<Vec<_>>().join(", ")
                ),
                Some(d) => format!(" into {}", d.display()),
                None => String::new(),
            },
        });
    }
    let Some(dir) = dir else {
        return Ok(());
    };
    let existing = fleet_folders(dir).map_err(|source| GuardError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let kept: std::collections::BTreeSet<String> =
        bundle.fleets.iter().map(|f| f.folder()).collect();
    let folders: Vec<String> = existing.difference(&kept).cloned().collect();
    if folders.is_empty() {
        return Ok(());
    }
    let rendered = dangerous::rendered_fleets(dir);
    let protected: Vec<String> = folders
        .iter()
        .filter(|f| {
            rendered
                .get(*f)
                .is_none_or(|(_, fleet)| dangerous::protected(fleet))
        })
        .cloned()
        .collect();
    if !protected.is_empty() {
        return Err(GuardError::ProtectedRemoval {
            dir: dir.to_path_buf(),
            folders: protected,
        });
    }
    if allow.removal {
        return Ok(());
    }
    Err(GuardError::WouldRemove {
        dir: dir.to_path_buf(),
        folders,
    })
}

/// What [`write_tree`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteOutcome {
    /// The directory already held exactly the bundle's files: nothing was touched.
    Unchanged,
    /// The directory was replaced by the bundle's files.
    Replaced,
}

/// Replaces `dir` by exactly the bundle's files. Everything is written into a fresh
/// sibling directory first; then the old directory is renamed aside, the new one renamed
/// into place and the old one removed. `dir` is therefore never half-written: a reader
/// sees the old tree or the new one (or, for the instant between the two renames, none).
/// If anything fails before the swap, `dir` is untouched. If `dir` already holds exactly
/// the bundle's files, nothing is written at all (no churn of file times).
///
/// `dir` may be missing, empty, or a directory this function wrote before (its
/// top-level `kustomization.yaml` starts with [`HEADER`]); anything else is refused, so a
/// mistyped `-o` can never wipe unrelated files.
pub fn write_tree(dir: &Path, bundle: &Bundle) -> Result<WriteOutcome, WriteError> {
    write_files_tree(dir, &bundle.files, HEADER)
}

/// [`write_tree`] for any set of files whose top-level `kustomization.yaml` starts with
/// `header` (the install bundle has its own, so `render` and `install` never replace each
/// other's directories).
pub fn write_files_tree(
    dir: &Path,
    files: &[OutputFile],
    header: &str,
) -> Result<WriteOutcome, WriteError> {
    if dir.file_name().is_none() {
        return Err(WriteError::Unnamed(dir.to_path_buf()));
    }
    check_replaceable_by(dir, header)?;
    let nested = nested_outputs(dir, header);
    if let Some(top) = nested
        .iter()
        .find(|n| files.iter().any(|f| f.path.starts_with(&format!("{n}/"))))
    {
        return Err(WriteError::Overlap(dir.join(top)));
    }
    if dir.is_dir() && holds_exactly_besides(dir, files, &nested) {
        return Ok(WriteOutcome::Unchanged);
    }
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    fs::create_dir_all(&parent).map_err(io_err(&parent))?;
    let base = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();

    let staging = tempfile::Builder::new()
        .prefix(&format!(".{base}.celld-gen-new-"))
        .tempdir_in(&parent)
        .map_err(io_err(&parent))?;
    write_files(staging.path(), files)?;
    set_dir_mode(staging.path())?;

    let aside = tempfile::Builder::new()
        .prefix(&format!(".{base}.celld-gen-old-"))
        .tempdir_in(&parent)
        .map_err(io_err(&parent))?;
    let old = aside.path().join("old");
    let had_old = dir.exists();
    if had_old {
        fs::rename(dir, &old).map_err(io_err(dir))?;
    }
    let staged = staging.keep();
    // Another command's output inside this tree moves into the new tree as it is.
    let mut moved = Vec::new();
    for n in &nested {
        if let Err(e) = fs::rename(old.join(n), staged.join(n)) {
            for m in &moved {
                let _ = fs::rename(staged.join(m), old.join(m));
            }
            let _ = fs::rename(&old, dir);
            let _ = fs::remove_dir_all(&staged);
            return Err(io_err(&dir.join(n))(e));
        }
        moved.push(n.clone());
    }
    if let Err(e) = fs::rename(&staged, dir) {
        // Put the old tree back (with what moved out of it); the new one is cleaned up.
        for m in &moved {
            let _ = fs::rename(staged.join(m), old.join(m));
        }
        if had_old {
            let _ = fs::rename(&old, dir);
        }
        let _ = fs::remove_dir_all(&staged);
        return Err(io_err(dir)(e));
    }
    if had_old {
        remove_tree(&old);
    }
    // `aside` (now empty) is removed when dropped.
    drop(aside);
    Ok(WriteOutcome::Replaced)
}

/// Whether `dir` holds exactly `files` (same paths, same bytes, no other files, no
/// directories but theirs, no symbolic links).
pub fn holds_exactly(dir: &Path, files: &[OutputFile]) -> bool {
    holds_exactly_besides(dir, files, &Default::default())
}

/// [`holds_exactly`], not looking into the top-level folders named in `besides` (other
/// commands' [`nested_outputs`]).
fn holds_exactly_besides(
    dir: &Path,
    files: &[OutputFile],
    besides: &std::collections::BTreeSet<String>,
) -> bool {
    let wanted: std::collections::BTreeMap<&str, &[u8]> = files
        .iter()
        .map(|f| (f.path.as_str(), f.contents.as_bytes()))
        .collect();
    let dirs: std::collections::BTreeSet<&str> = files
        .iter()
        .flat_map(|f| f.path.match_indices('/').map(move |(i, _)| &f.path[..i]))
        .collect();
    let mut seen = 0;
    fn visit(
        dir: &Path,
        prefix: &str,
        wanted: &std::collections::BTreeMap<&str, &[u8]>,
        dirs: &std::collections::BTreeSet<&str>,
        besides: &std::collections::BTreeSet<String>,
        seen: &mut usize,
    ) -> io::Result<bool> {
        for entry in fs::read_dir(dir)? {
            let entry = entry?;
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                return Ok(false);
            };
            let rel = if prefix.is_empty() {
                name
            } else {
                format!("{prefix}/{name}")
            };
            let ty = entry.file_type()?;
            if ty.is_dir() && prefix.is_empty() && besides.contains(rel.as_str()) {
                continue;
            }
            if ty.is_dir() {
                if !dirs.contains(rel.as_str())
                    || !visit(&entry.path(), &rel, wanted, dirs, besides, seen)?
                {
                    return Ok(false);
                }
            } else if ty.is_file() {
                match wanted.get(rel.as_str()) {
                    Some(want) if entry.metadata()?.len() == want.len() as u64 => {
                        if fs::read(entry.path())? != *want {
                            return Ok(false);
                        }
                        *seen += 1;
                    }
                    _ => return Ok(false),
                }
            } else {
                return Ok(false);
            }
        }
        Ok(true)
    }
    visit(dir, "", &wanted, &dirs, besides, &mut seen).unwrap_or(false) && seen == wanted.len()
}

/// Removes a tree, spreading the work over the cores (removing thousands of small files
/// is bound by file-system metadata updates, which proceed in parallel). Errors are
/// ignored: the tree is already out of the way.
fn remove_tree(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let children: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    let threads = workers(children.len());
    std::thread::scope(|s| {
        for part in children.chunks(children.len().div_ceil(threads).max(1)) {
            s.spawn(move || {
                for p in part {
                    let _ = if p.is_dir() {
                        fs::remove_dir_all(p)
                    } else {
                        fs::remove_file(p)
                    };
                }
            });
        }
    });
    let _ = fs::remove_dir_all(dir);
}

fn workers(items: usize) -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(items)
        .max(1)
}

/// Whether [`write_tree`] may replace `dir`: missing, empty, or an earlier output.
pub fn check_replaceable(dir: &Path) -> Result<(), WriteError> {
    check_replaceable_by(dir, HEADER)
}

/// [`check_replaceable`] for trees whose top-level kustomization starts with `header`.
pub fn check_replaceable_by(dir: &Path, header: &str) -> Result<(), WriteError> {
    let meta = match fs::symlink_metadata(dir) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err(dir)(e)),
    };
    if meta.file_type().is_symlink() {
        return Err(WriteError::Symlink(dir.to_path_buf()));
    }
    if !meta.is_dir() {
        return Err(WriteError::NotOurs(dir.to_path_buf()));
    }
    if fs::read_dir(dir).map_err(io_err(dir))?.next().is_none() {
        return Ok(());
    }
    let nested = nested_outputs(dir, header);
    let only_nested = fs::read_dir(dir)
        .map_err(io_err(dir))?
        .filter_map(Result::ok)
        .all(|e| e.file_name().to_str().is_some_and(|n| nested.contains(n)));
    if is_ours_by(dir, header) || only_nested {
        Ok(())
    } else {
        Err(WriteError::NotOurs(dir.to_path_buf()))
    }
}

/// Whether `dir` holds a tree the generator wrote.
pub fn is_ours(dir: &Path) -> bool {
    is_ours_by(dir, HEADER)
}

fn is_ours_by(dir: &Path, header: &str) -> bool {
    fs::read_to_string(dir.join("kustomization.yaml")).is_ok_and(|s| s.starts_with(header))
}

/// The first line of the top-level kustomization of every tree celld-gen writes:
/// `render`'s and `install`'s. Each knows its own tree by it, and another's.
const TOOL_HEADERS: [&str; 2] = [HEADER, crate::install::HEADER];

/// Top-level folders of `dir` that hold the output of another celld-gen command than the
/// one whose header is `header` (`install -o deploy/cluster` inside `render -o deploy`, or
/// the other way round). They are not part of this tree: never compared, never removed,
/// kept as they are when the tree is replaced, so both commands can share one folder of
/// a GitOps repository in either order.
pub fn nested_outputs(dir: &Path, header: &str) -> std::collections::BTreeSet<String> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Default::default();
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter(|e| {
            TOOL_HEADERS
                .iter()
                .any(|h| *h != header && is_ours_by(&e.path(), h))
        })
        .filter_map(|e| e.file_name().to_str().map(str::to_owned))
        .collect()
}

/// [`read_tree`] without the [`nested_outputs`] of other commands: the files of the tree
/// whose top-level kustomization starts with `header`.
pub fn read_own_tree(dir: &Path, header: &str) -> io::Result<Vec<(String, Vec<u8>)>> {
    let nested = nested_outputs(dir, header);
    Ok(read_tree(dir)?
        .into_iter()
        .filter(|(path, _)| {
            path.split_once('/')
                .is_none_or(|(top, _)| !nested.contains(top))
        })
        .collect())
}

fn write_files(root: &Path, files: &[OutputFile]) -> Result<(), WriteError> {
    // Files are sorted by path, so each chunk holds whole folders (but for the edges).
    let threads = workers(files.len() / 64);
    let chunk = files.len().div_ceil(threads).max(1);
    std::thread::scope(|s| {
        let handles: Vec<_> = files
            .chunks(chunk)
            .map(|part| s.spawn(move || write_part(root, part)))
            .collect();
        handles
            .into_iter()
            .try_for_each(|h| h.join().expect("writing does not panic"))
    })
}

fn write_part(root: &Path, files: &[OutputFile]) -> Result<(), WriteError> {
    let mut made = std::collections::BTreeSet::new();
    for f in files {
        let path = root.join(&f.path);
        if let Some(d) = path.parent()
            && made.insert(d.to_path_buf())
        {
            fs::create_dir_all(d).map_err(io_err(d))?;
            set_dir_mode(d)?;
        }
        fs::write(&path, &f.contents).map_err(io_err(&path))?;
    }
    Ok(())
}

/// Temporary directories are created private (0700); the output is an ordinary tree.
fn set_dir_mode(dir: &Path) -> Result<(), WriteError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(dir, fs::Permissions::from_mode(0o755)).map_err(io_err(dir))?;
    }
    Ok(())
}

/// Every regular file under `dir`, as `/`-separated relative paths with their contents,
/// sorted by path. A missing directory reads as empty.
pub fn read_tree(dir: &Path) -> io::Result<Vec<(String, Vec<u8>)>> {
    let mut out = Vec::new();
    match fs::symlink_metadata(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e),
        Ok(_) => {}
    }
    walk(dir, String::new(), &mut out)?;
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

fn walk(dir: &Path, prefix: String, out: &mut Vec<(String, Vec<u8>)>) -> io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let rel = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        let ty = entry.file_type()?;
        if ty.is_dir() {
            walk(&entry.path(), rel, out)?;
        } else {
            out.push((rel, fs::read(entry.path())?));
        }
    }
    Ok(())
}
