//! Patches: the escape hatch for what a fleet file does not model. A `CelldFleetPatch`
//! document (in the fleet's own file, as a second document, or in any file beside it)
//! names a fleet and lists patches of its rendered objects, RFC 6902 JSON patches or
//! strategic merges, the way Kustomize's `patches` work. They are applied after
//! rendering, so patched output passes the same parse-back check and is byte for byte
//! deterministic; `diff` and `check --against` see it like any other change.
//!
//! What the healer and the safety rules rely on cannot be patched ([`guard`]): a patch
//! that touches it is refused with the path and the reason. The healer renders live
//! fleets without patches to compare their Services; since patches may only add to a
//! Service, that comparison never calls a patched Service drift.
//!
//! ```yaml
//! apiVersion: fleet.celld.dev/v1alpha1
//! kind: CelldFleetPatch
//! metadata: {name: ledger, namespace: ledger}   # the fleet
//! patches:
//!   - target: {kind: Service}                   # name: default, the fleet's own
//!     strategicMerge:
//!       metadata: {annotations: {service.kubernetes.io/topology-mode: Auto}}
//!   - target: {kind: StatefulSet}
//!     jsonPatch:
//!       - {op: add, path: /spec/template/spec/dnsConfig, value: {options: [{name: ndots, value: "2"}]}}
//! ```

pub mod guard;
pub mod json;
pub mod merge;
mod parse;

use std::path::PathBuf;

use serde_json::Value;

use crate::api::validate::yaml::Pos;
use crate::render::{RenderedFleet, parse::parse_document, roundtrip, yaml};
use celld_api::diagnostic::Diagnostic;

pub use parse::{PATCH_KIND, is_patch_doc, parse_patch_doc};

/// Every `CelldFleetPatch` document for one fleet, in file and document order.
#[derive(Clone, Debug, PartialEq)]
pub struct PatchSet {
    /// The file it came from.
    pub path: PathBuf,
    /// Where its `metadata.name` is (an unknown fleet is reported there).
    pub pos: Pos,
    /// The fleet's namespace.
    pub namespace: String,
    /// The fleet's name.
    pub name: String,
    /// The patches, in order.
    pub patches: Vec<Patch>,
}

/// One patch of one rendered object.
#[derive(Clone, Debug, PartialEq)]
pub struct Patch {
    /// Its field path in the document, e.g. `patches[1]`.
    pub field: String,
    /// Where it starts.
    pub pos: Pos,
    /// The target's kind, as Kubernetes spells it (`StatefulSet`).
    pub kind: String,
    /// The target's name (default: the fleet's name).
    pub name: Option<String>,
    /// What it does.
    pub change: Change,
}

/// A patch's body.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// RFC 6902 operations, each with its field path and position.
    Json(Vec<(String, Pos, json::Operation)>),
    /// A strategic merge.
    Merge(Value),
}

fn at(set: &PatchSet, field: &str, pos: Pos, message: String, expected: &str) -> Diagnostic {
    Diagnostic {
        file: set.path.clone(),
        line: pos.line,
        column: pos.column,
        field: field.to_string(),
        message,
        expected: expected.to_string(),
    }
}

/// Applies `sets` (all for `fleet`) to its rendered objects. On any problem nothing is
/// changed and every problem is returned.
pub fn apply(sets: &[PatchSet], fleet: &mut RenderedFleet) -> Result<(), Vec<Diagnostic>> {
    let mut errors = Vec::new();
    // Working copies of the objects patched so far, by index: (kind, value).
    let mut work: Vec<Option<Value>> = vec![None; fleet.objects.len()];
    let mut touched_by: Vec<Option<(usize, usize)>> = vec![None; fleet.objects.len()];
    for (si, set) in sets.iter().enumerate() {
        for (pi, patch) in set.patches.iter().enumerate() {
            let name = patch.name.clone().unwrap_or_else(|| fleet.name.clone());
            let found = fleet
                .objects
                .iter()
                .position(|o| o.kind.kind() == patch.kind && o.name == name);
            let Some(i) = found else {
                let rendered: Vec<String> = fleet
                    .objects
                    .iter()
                    .map(|o| format!("{} {}", o.kind.kind(), o.name))
                    .collect();
                errors.push(at(
                    set,
                    &format!("{}.target", patch.field),
                    patch.pos,
                    format!(
                        "the fleet {}/{} renders no {} named `{name}`: this patch no longer applies",
                        fleet.namespace, fleet.name, patch.kind
                    ),
                    &format!("a target among: {}", rendered.join(", ")),
                ));
                continue;
            };
            let kind = fleet.objects[i].kind;
            if let Err(why) = guard::patchable(kind) {
                errors.push(at(
                    set,
                    &format!("{}.target.kind", patch.field),
                    patch.pos,
                    format!("a {} cannot be patched: {why}", patch.kind),
                    "a Kubernetes object the fleet renders (StatefulSet, Deployment, Service, ...)",
                ));
                continue;
            }
            let before = match &work[i] {
                Some(v) => v.clone(),
                None => match parse_document(&fleet.objects[i].yaml) {
                    Ok(v) => v,
                    Err(e) => {
                        errors.push(at(
                            set,
                            &patch.field,
                            patch.pos,
                            format!("the rendered {} does not parse: {e}", patch.kind),
                            "a bug report",
                        ));
                        continue;
                    }
                },
            };
            let mut after = before.clone();
            let applied = match &patch.change {
                Change::Merge(m) => merge::merge(&mut after, m)
                    .map_err(|e| (patch.field.clone() + ".strategicMerge", patch.pos, e)),
                Change::Json(ops) => ops.iter().try_for_each(|(field, pos, op)| {
                    json::apply(&mut after, op).map_err(|e| (field.clone(), *pos, e))
                }),
            };
            if let Err((field, pos, e)) = applied {
                errors.push(at(
                    set,
                    &field,
                    pos,
                    format!(
                        "{e} in the rendered {} `{name}`: this patch no longer applies",
                        patch.kind
                    ),
                    "a patch whose paths exist in the rendering (`celld-gen render --stdout` shows it)",
                ));
                continue;
            }
            let refused = guard::refusals(kind, &before, &after);
            for r in &refused {
                errors.push(at(
                    set,
                    &patch.field,
                    patch.pos,
                    format!(
                        "this patch changes {} of the {} `{name}`, which patches may not: {}",
                        r.pointer, patch.kind, r.why
                    ),
                    "a patch that leaves it as rendered",
                ));
            }
            if refused.is_empty() {
                work[i] = Some(after);
                touched_by[i] = Some((si, pi));
            }
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    let mut texts = Vec::new();
    for (i, value) in work.into_iter().enumerate() {
        let Some(value) = value else { continue };
        let o = &fleet.objects[i];
        let text = yaml::object(&value);
        match roundtrip::check(o.kind, &text) {
            Ok(()) => texts.push((i, text)),
            Err(e) => {
                let (si, pi) = touched_by[i].unwrap_or((0, 0));
                let (set, patch) = (&sets[si], &sets[si].patches[pi]);
                errors.push(at(
                    set,
                    &patch.field,
                    patch.pos,
                    format!(
                        "the patched {kind} `{}` is not a valid {kind}: {e}",
                        o.name,
                        kind = o.kind.kind()
                    ),
                    "fields Kubernetes knows, with values of their type",
                ));
            }
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    for (i, text) in texts {
        fleet.objects[i].yaml = text;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
