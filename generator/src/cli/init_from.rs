//! `celld-gen init --from FILE NAME`: a fleet like an existing one. Everything is kept
//! but what makes a fleet itself: its name (and, when asked, its namespace), a fresh
//! identity, storage of its own, and its routing (hostnames route to one fleet; the note
//! says so). A copied bucket and prefix would give two fleets
//! one bucket reservation (refused by validation and by the API server), so the new
//! fleet gets `--bucket`, or `--prefix`, or, when the source already writes under a
//! prefix, a sibling prefix named after the new fleet; a source that uses its whole
//! bucket needs one of the flags.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use super::init::InitArgs;
use crate::api::{CelldFleet, labels};
use crate::render::yaml;

/// Why no fleet could be made from FILE.
#[derive(Debug, thiserror::Error)]
pub enum FromError {
    /// FILE does not hold exactly one valid fleet.
    #[error("{path} does not hold one valid fleet: {problems}")]
    Source {
        /// FILE.
        path: PathBuf,
        /// Its problems, or how many fleets it holds.
        problems: String,
    },
    /// The new fleet would share the source's storage.
    #[error(
        "{0} uses its whole bucket, so any prefix in it would overlap {0}: pass --bucket with a bucket of the new fleet's own"
    )]
    NeedsStorage(String),
    /// The new fleet and the source cannot live side by side.
    #[error("the new fleet cannot live beside the source: {0}")]
    Beside(String),
    /// The derived prefix would be the source's.
    #[error("the new fleet's prefix would be `{0}`, the source's own; pass --prefix or --bucket")]
    SamePrefix(String),
}

/// The new fleet file, made from the fleet in `from` (not validated yet; `run` checks it
/// like every `init` output).
pub fn fleet_file_from(args: &InitArgs, from: &Path, identity: &str) -> Result<String, FromError> {
    let loaded = crate::load::load_paths(&[from.to_path_buf()]).map_err(|d| FromError::Source {
        path: from.to_path_buf(),
        problems: d
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; "),
    })?;
    let [source] = loaded.as_slice() else {
        return Err(FromError::Source {
            path: from.to_path_buf(),
            problems: format!("{} fleets in it; name the file of one", loaded.len()),
        });
    };
    let source: &CelldFleet = &source.fleet;
    let source_name = format!(
        "{}/{}",
        source.metadata.namespace.as_deref().unwrap_or(""),
        source.metadata.name.as_deref().unwrap_or("")
    );
    let mut spec = source.spec.clone();
    spec.identity = identity.to_string();
    // Routed hostnames belong to one fleet: the new one gets its own, by hand.
    if spec.routing.take().is_some() {
        use std::io::Write;
        let _ = writeln!(
            anstream::stderr(),
            "note: spec.routing of {source_name} is left out: its hostnames route to it; give the new fleet hostnames of its own"
        );
    }
    match (&args.bucket, &args.prefix) {
        (Some(bucket), prefix) => {
            spec.storage.bucket = bucket.clone();
            spec.storage.prefix = prefix.clone();
        }
        (None, Some(prefix)) => spec.storage.prefix = Some(prefix.clone()),
        (None, None) => match &source.spec.storage.prefix {
            None => return Err(FromError::NeedsStorage(source_name)),
            Some(p) if *p == args.name => return Err(FromError::SamePrefix(p.clone())),
            Some(_) => spec.storage.prefix = Some(args.name.clone()),
        },
    }
    let namespace = args
        .namespace
        .clone()
        .or_else(|| source.metadata.namespace.clone())
        .unwrap_or_default();
    let mut metadata = Map::new();
    metadata.insert("name".into(), json!(args.name));
    metadata.insert("namespace".into(), json!(namespace));
    for (key, map) in [
        ("labels", &source.metadata.labels),
        ("annotations", &source.metadata.annotations),
    ] {
        if let Some(m) = map.as_ref().filter(|m| !m.is_empty()) {
            metadata.insert(key.into(), json!(m));
        }
    }
    let mut out = format!(
        "# yaml-language-server: $schema={schema}\n\
         # CelldFleet {namespace}/{name}, made by `celld-gen init --from {from}`:\n\
         # the settings of {source_name}, with its own identity and storage.\n",
        schema = args.schema,
        name = args.name,
        from = from.display(),
    );
    let spec = serde_json::to_value(&spec).map_err(|e| FromError::Source {
        path: from.to_path_buf(),
        problems: e.to_string(),
    })?;
    out.push_str(&yaml::object(&json!({
        "apiVersion": labels::API_VERSION,
        "kind": "CelldFleet",
        "metadata": Value::Object(metadata),
        "spec": spec,
    })));
    // The two fleets side by side, as a render of both would see them: the identity,
    // name and storage checks between fleets (a prefix inside a bucket the source uses
    // whole overlaps it).
    let sources = [
        crate::validate::Source {
            path: from.to_path_buf(),
            text: std::fs::read_to_string(from).unwrap_or_default(),
            explicit: true,
        },
        crate::validate::Source {
            path: PathBuf::from(format!("<init {}>", args.name)),
            text: out.clone(),
            explicit: true,
        },
    ];
    if let Err(d) = crate::validate::load_sources(&sources, &mut Vec::new()) {
        return Err(FromError::Beside(
            d.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; "),
        ));
    }
    Ok(out)
}
