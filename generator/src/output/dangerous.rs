//! Dangerous edits: what a render would change that the cluster cannot take as an edit.
//! The fleets in an existing render output (each folder's `celldfleet.yaml`, the fleet as
//! it was written) are compared with the fleets about to be rendered.
//!
//! What cannot change after creation is read from the CRD's own transition rule (the CEL
//! rule comparing `self.<field>` with `oldSelf.<field>`), so this list and the API server
//! never disagree. Those fields also feed the workload's immutable parts: the identity is
//! the Deployment's and StatefulSet's `selector`, and storage makes the StatefulSet's
//! `volumeClaimTemplates` and the bucket reservation (whose spec is immutable too).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use kube::CustomResourceExt;
use serde::Serialize;
use serde_json::Value;

use crate::api::CelldFleet;
use crate::load::LoadedFleet;

/// What kind of dangerous edit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FindingKind {
    /// A fleet folder would go: the fleet is deleted by a pruning sync.
    Deleted,
    /// A fleet folder would go while its last render has deletion protection on: never
    /// allowed, not even with `--allow-removal` (see [`REMOVE_IN_ORDER`]).
    DeletedWhileProtected,
    /// The same identity under a new namespace or name: a new fleet and a deleted one.
    Renamed,
    /// A field fixed at creation changed: the API server refuses it, the sync fails.
    Immutable,
    /// The workload changes kind (Deployment and StatefulSet): deleted and recreated.
    WorkloadReplaced,
}

/// One dangerous edit.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Finding {
    /// The fleet folder, `<namespace>/<name>`.
    pub fleet: String,
    /// The fleet file (the new one, or the old rendered copy for a deletion).
    pub file: PathBuf,
    /// What kind of edit.
    pub kind: FindingKind,
    /// The field, e.g. `spec.storage.bucket` (empty for the fleet as a whole).
    pub field: String,
    /// What it is.
    pub message: String,
    /// What to do instead.
    pub instead: String,
    /// Line of the field in `file` (of the fleet's own document), 0 when it cannot be
    /// read there (standard input, a field the file leaves out: then its section's).
    pub line: usize,
    /// Column of the field, 0 likewise.
    pub column: usize,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: ", self.fleet)?;
        if !self.field.is_empty() {
            write!(f, "{}: ", self.field)?;
        }
        write!(f, "{}. Instead: {}", self.message, self.instead)
    }
}

/// Fields of `spec` fixed when the fleet is created, from the CRD's transition rule.
pub fn immutable_spec_fields() -> Vec<String> {
    let crd = serde_json::to_value(CelldFleet::crd()).unwrap_or(Value::Null);
    let rules = crd
        .pointer("/spec/versions/0/schema/openAPIV3Schema/properties/spec/x-kubernetes-validations")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut fields = Vec::new();
    for rule in rules
        .iter()
        .filter_map(|r| r.get("rule").and_then(Value::as_str))
    {
        for clause in rule.split("&&") {
            let Some((new, old)) = clause.trim().split_once("==") else {
                continue;
            };
            let (new, old) = (new.trim(), old.trim());
            if let (Some(n), Some(o)) = (new.strip_prefix("self."), old.strip_prefix("oldSelf."))
                && n == o
            {
                fields.push(n.to_owned());
            }
        }
    }
    fields
}

/// The fleets rendered into `dir` before, by folder. Folders whose `celldfleet.yaml` is
/// missing or unreadable are left out (nothing to compare with).
pub fn rendered_fleets(dir: &Path) -> BTreeMap<String, (PathBuf, CelldFleet)> {
    let mut out = BTreeMap::new();
    let Ok(tree) = super::read_own_tree(dir, crate::render::HEADER) else {
        return out;
    };
    for (path, bytes) in tree {
        let parts: Vec<&str> = path.split('/').collect();
        if parts.len() != 3 || parts[2] != "celldfleet.yaml" {
            continue;
        }
        let file = dir.join(&path);
        let Ok(text) = String::from_utf8(bytes) else {
            continue;
        };
        if let Ok(fleet) = crate::load::load_str(&file, &text) {
            out.insert(
                format!("{}/{}", parts[0], parts[1]),
                (file, fleet.into_fleet()),
            );
        }
    }
    out
}

fn folder(f: &CelldFleet) -> String {
    format!(
        "{}/{}",
        f.metadata.namespace.as_deref().unwrap_or_default(),
        f.metadata.name.as_deref().unwrap_or_default()
    )
}

/// Leaf paths where two JSON values differ, with both sides (absent is `null`).
fn differences(path: &str, old: &Value, new: &Value, out: &mut Vec<(String, Value, Value)>) {
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for k in keys {
                differences(
                    &format!("{path}.{k}"),
                    a.get(k).unwrap_or(&Value::Null),
                    b.get(k).unwrap_or(&Value::Null),
                    out,
                );
            }
        }
        _ if old != new => out.push((path.to_owned(), old.clone(), new.clone())),
        _ => {}
    }
}

fn show(v: &Value) -> String {
    match v {
        Value::Null => "(unset)".to_owned(),
        Value::String(s) => format!("`{s}`"),
        other => format!("`{other}`"),
    }
}

/// The safe order for removing a protected fleet from Git.
pub const REMOVE_IN_ORDER: &str = "remove a protected fleet in order: set `deletionProtection: false` in its file, render, and let Argo CD or Flux sync that first; then remove the file and render with --allow-removal";

/// Whether the fleet of a render output is protected from deletion (absent is on).
pub fn protected(fleet: &CelldFleet) -> bool {
    fleet.spec.deletion_protection != Some(false)
}

const NEW_FLEET_INSTEAD: &str = "revert the change; to move to new values, add a new fleet (`celld-gen init`: new name, identity and bucket or prefix), move clients to it, then delete this one (deletionProtection: false, sync, then remove its file)";

/// Every dangerous edit from `old` (a render output's fleets) to `new`.
pub fn findings(
    old: &BTreeMap<String, (PathBuf, CelldFleet)>,
    new: &[LoadedFleet],
    immutable: &[String],
) -> Vec<Finding> {
    let mut out = Vec::new();
    let new_by_folder: BTreeMap<String, &LoadedFleet> =
        new.iter().map(|f| (folder(&f.fleet), f)).collect();
    let new_by_identity: BTreeMap<&str, &LoadedFleet> = new
        .iter()
        .map(|f| (f.fleet.spec.identity.as_str(), f))
        .collect();
    for (name, (old_file, was)) in old {
        let Some(now) = new_by_folder.get(name) else {
            match new_by_identity.get(was.spec.identity.as_str()) {
                Some(moved) => out.push(Finding {
                    fleet: name.clone(),
                    file: moved.path.clone(),
                    kind: FindingKind::Renamed,
                    field: if moved.fleet.metadata.name == was.metadata.name {
                        "metadata.namespace"
                    } else {
                        "metadata.name"
                    }
                    .to_owned(),
                    message: format!(
                        "renamed to {} with the same identity: to Kubernetes this is a new fleet and a deleted one. A pruning sync deletes {name} (its deletion protection blocks that while set) and the new fleet's bucket reservation is refused, because the existing one is immutable and names {name}",
                        folder(&moved.fleet)
                    ),
                    instead: "a fleet cannot be renamed or moved to another namespace: keep its namespace and name; for a fleet under another name, add a new fleet with `celld-gen init` (new identity and bucket or prefix)".to_owned(),
                    line: 0,
                    column: 0,
                }),
                None if protected(was) => out.push(Finding {
                    fleet: name.clone(),
                    file: old_file.clone(),
                    kind: FindingKind::DeletedWhileProtected,
                    field: "spec.deletionProtection".to_owned(),
                    message: "deleted while its deletion protection is on: the admission policy keeps the CelldFleet and its disks, so the removal does nothing but leave the fleet out of Git".to_owned(),
                    instead: format!("restore the fleet file; to delete the fleet, {REMOVE_IN_ORDER}"),
                    line: 0,
                    column: 0,
                }),
                None => out.push(Finding {
                    fleet: name.clone(),
                    file: old_file.clone(),
                    kind: FindingKind::Deleted,
                    field: String::new(),
                    message: "deleted: its folder leaves the output, so a pruning sync (Argo CD `prune: true`, Flux `prune: true`) deletes the fleet".to_owned(),
                    instead: "if the fleet file was renamed, skipped or lost, restore it; to delete the fleet on purpose, pass --allow-removal (with deletion protection on, the fleet is kept until deletionProtection: false is synced first)".to_owned(),
                    line: 0,
                    column: 0,
                }),
            }
            continue;
        };
        let was_spec = serde_json::to_value(&was.spec).unwrap_or(Value::Null);
        let now_spec = serde_json::to_value(&now.fleet.spec).unwrap_or(Value::Null);
        for field in immutable {
            let mut diffs = Vec::new();
            differences(
                &format!("spec.{field}"),
                was_spec.get(field).unwrap_or(&Value::Null),
                now_spec.get(field).unwrap_or(&Value::Null),
                &mut diffs,
            );
            for (path, a, b) in diffs {
                let what = if field == "identity" {
                    "the identity is the workload's selector and every object's and disk's label; to Kubernetes a new identity is a new fleet".to_owned()
                } else if field == "storage" {
                    "the bucket, prefix, region, disks and endpoint are fixed when the fleet is created (they make the StatefulSet's volumeClaimTemplates and the bucket reservation, both immutable)".to_owned()
                } else {
                    format!("`spec.{field}` is fixed when the fleet is created")
                };
                out.push(Finding {
                    fleet: name.clone(),
                    file: now.path.clone(),
                    kind: FindingKind::Immutable,
                    field: path,
                    message: format!(
                        "changed from {} to {}: {what}; the API server refuses the change, so the Argo CD or Flux sync fails",
                        show(&a),
                        show(&b)
                    ),
                    instead: NEW_FLEET_INSTEAD.to_owned(),
                    line: 0,
                    column: 0,
                });
            }
        }
        let (was_sts, now_sts) = (was.spec.is_stateful_set(), now.fleet.spec.is_stateful_set());
        if was_sts != now_sts {
            let kinds = |sts: bool| if sts { "StatefulSet" } else { "Deployment" };
            out.push(Finding {
                fleet: name.clone(),
                file: now.path.clone(),
                kind: FindingKind::WorkloadReplaced,
                field: "spec.bucketWorkload".to_owned(),
                message: format!(
                    "the workload changes from a {} to a {}: the old one is deleted and a new one created, so every member restarts at once",
                    kinds(was_sts),
                    kinds(now_sts)
                ),
                instead: "keep the workload kind; if the switch is wanted, do it in a maintenance window".to_owned(),
                line: 0,
                column: 0,
            });
        }
    }
    for f in &mut out {
        (f.line, f.column) = position(f);
    }
    out.sort();
    out
}

/// Where a finding's field is in its file: the fleet's own document (by namespace and
/// name) located like a validation problem, so GitHub annotations and JUnit point at the
/// line a reviewer must look at. `(0, 0)` when the file cannot be read again.
fn position(f: &Finding) -> (usize, usize) {
    let Ok(text) = std::fs::read_to_string(&f.file) else {
        return (0, 0);
    };
    let Ok(docs) = celld_api::validate::yaml::parse(&text) else {
        return (0, 0);
    };
    let (namespace, name) = f.fleet.split_once('/').unwrap_or(("", &f.fleet));
    let of = |doc: &celld_api::validate::yaml::Node, key: &str| {
        doc.get("metadata")
            .and_then(|m| m.get(key))
            .and_then(celld_api::validate::yaml::Node::as_str)
            .map(str::to_owned)
    };
    let doc = docs
        .iter()
        .find(|d| {
            d.get("kind").and_then(|k| k.as_str()) == Some("CelldFleet")
                && of(d, "namespace").as_deref() == Some(namespace)
                && of(d, "name").as_deref() == Some(name)
        })
        .or_else(|| {
            docs.iter()
                .find(|d| d.get("kind").and_then(|k| k.as_str()) == Some("CelldFleet"))
        });
    let Some(doc) = doc else { return (0, 0) };
    let pos = celld_api::validate::rules::locate(doc, &f.field);
    (pos.line, pos.column)
}
