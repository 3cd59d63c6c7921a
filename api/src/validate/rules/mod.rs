//! Semantic rules: what the types alone cannot say. Each check appends a [`Problem`]
//! naming the field, what is wrong and what would be valid; nothing stops at the first.

mod capacity;
pub mod env;
mod execution;
pub mod pod;
mod routing;
mod storage;
mod telemetry;

use super::Problem;
use super::formats::*;
use super::yaml::{Kind, Node, Pos};
use crate::defaults::Bounds;
use crate::{CapacityMode, CelldFleet, Profile, ZoneFormat, defaults, labels};

/// What a label or annotation key may be (for "expected" in a problem).
pub(super) const QUALIFIED_NAME_HINT: &str =
    "an optional DNS-subdomain prefix and `/`, then a name of at most 63 characters";
/// What a label value may be.
pub(super) const LABEL_VALUE_HINT: &str =
    "at most 63 letters, digits, `-`, `_` or `.`, starting and ending with a letter or digit";

/// Collects problems for one document, locating each field in the source tree.
pub struct Checker<'a> {
    doc: &'a Node,
    /// Problems found so far.
    pub problems: Vec<Problem>,
}

impl<'a> Checker<'a> {
    /// A checker over the located document `doc`.
    pub fn new(doc: &'a Node) -> Self {
        Checker {
            doc,
            problems: Vec::new(),
        }
    }

    /// Records a problem at `field` (a path like `spec.placement.zones[1]`).
    pub fn fail(&mut self, field: &str, message: impl Into<String>, expected: impl Into<String>) {
        let pos = locate(self.doc, field);
        self.problems.push(Problem {
            pos,
            field: field.to_string(),
            message: message.into(),
            expected: expected.into(),
        });
    }

    /// Records a problem at `field` unless `ok`.
    pub fn require(
        &mut self,
        ok: bool,
        field: &str,
        message: impl Into<String>,
        expected: impl Into<String>,
    ) {
        if !ok {
            self.fail(field, message, expected);
        }
    }

    /// Checks an integer range (the same [`Bounds`] the CRD schema carries).
    pub fn range<T: PartialOrd + std::fmt::Display + Copy>(
        &mut self,
        value: Option<T>,
        field: &str,
        bounds: Bounds<T>,
    ) {
        if let Some(v) = value
            && !bounds.contains(v)
        {
            self.fail(
                field,
                format!("{v} is out of range"),
                format!("a whole number from {} to {}", bounds.min, bounds.max),
            );
        }
    }
}

/// The position of `path` in `doc`, or of its deepest ancestor that exists (so a missing
/// field points at the mapping that should hold it). Map keys may contain dots (label
/// keys), so at each mapping the longest key that fits the remaining path wins.
pub fn locate(doc: &Node, path: &str) -> Pos {
    let mut node = doc;
    let mut rest = path;
    loop {
        if rest.is_empty() {
            return node.pos;
        }
        if let Some(after) = rest.strip_prefix('[') {
            let Some((idx, tail)) = after.split_once(']') else {
                return node.pos;
            };
            let (Ok(i), Kind::Seq(items)) = (idx.parse::<usize>(), &node.kind) else {
                return node.pos;
            };
            let Some(item) = items.get(i) else {
                return node.pos;
            };
            node = item;
            rest = tail.strip_prefix('.').unwrap_or(tail);
            continue;
        }
        let Kind::Map(entries) = &node.kind else {
            return node.pos;
        };
        let best = entries
            .iter()
            .filter(|(k, _)| {
                rest.strip_prefix(k.name.as_str())
                    .is_some_and(|t| t.is_empty() || t.starts_with('.') || t.starts_with('['))
            })
            .max_by_key(|(k, _)| k.name.len());
        let Some((key, value)) = best else {
            return node.pos;
        };
        rest = &rest[key.name.len()..];
        rest = rest.strip_prefix('.').unwrap_or(rest);
        // A scalar value is best pointed at itself; a missing child at its key.
        node = value;
        if rest.is_empty() {
            return if matches!(value.kind, Kind::Map(_) | Kind::Seq(_))
                && value.pos.line > key.pos.line
            {
                key.pos
            } else {
                value.pos
            };
        }
    }
}

/// Runs every semantic rule over a fleet that passed the structural check.
pub fn check_fleet(doc: &Node, fleet: &CelldFleet) -> Vec<Problem> {
    let mut c = Checker::new(doc);
    check_header(&mut c, doc, fleet);
    check_spec(&mut c, fleet);
    storage::check(&mut c, fleet);
    execution::check(&mut c, fleet);
    env::check(&mut c, fleet);
    telemetry::check(&mut c, fleet);
    routing::check(&mut c, fleet);
    capacity::check(&mut c, fleet);
    pod::check(&mut c, fleet);
    c.problems
}

fn check_header(c: &mut Checker<'_>, doc: &Node, fleet: &CelldFleet) {
    let api = doc.get("apiVersion").and_then(Node::as_str).unwrap_or("");
    c.require(
        api == labels::API_VERSION,
        "apiVersion",
        format!("`{api}` is not the fleet API version"),
        labels::API_VERSION,
    );
    let kind = doc.get("kind").and_then(Node::as_str).unwrap_or("");
    c.require(
        kind == "CelldFleet",
        "kind",
        format!("`{kind}` is not a fleet"),
        "CelldFleet",
    );
    let name = fleet.metadata.name.as_deref().unwrap_or("");
    c.require(
        is_dns_label(name, defaults::MAX_NAME_LENGTH),
        "metadata.name",
        format!("`{name}` is not a valid fleet name"),
        format!("a DNS label (lowercase letters, digits and `-`) of at most {} characters, leaving room for the `-peers`, `-routing` and `data-<name>-<n>` names derived from it", defaults::MAX_NAME_LENGTH),
    );
    let ns = fleet.metadata.namespace.as_deref().unwrap_or("");
    c.require(
        is_dns_label(ns, defaults::MAX_DNS_LABEL_LENGTH),
        "metadata.namespace",
        format!("`{ns}` is not a valid namespace"),
        "a DNS label of at most 63 characters",
    );
    for (map, field) in [
        (&fleet.metadata.labels, "metadata.labels"),
        (&fleet.metadata.annotations, "metadata.annotations"),
    ] {
        for key in map.iter().flat_map(|m| m.keys()) {
            c.require(
                is_qualified_name(key),
                &format!("{field}.{key}"),
                format!("`{key}` is not a valid key"),
                QUALIFIED_NAME_HINT,
            );
            if field == "metadata.annotations" {
                check_gitops_guard(c, map.as_ref().and_then(|m| m.get(key)), key, field);
            }
            // Our own keys mean something to the healer (identity, handoff records);
            // a fleet file must not be able to forge them. The members-owner mark is
            // set or removed by render itself from the capacity mode, whatever the file
            // says, so a rendered fleet read back as input stays valid.
            if key.starts_with(&format!("{}/", labels::GROUP))
                && !(field == "metadata.annotations" && key == labels::MEMBERS_OWNER)
            {
                c.fail(
                    &format!("{field}.{key}"),
                    format!("`{key}` is reserved for celld-gen and the healer"),
                    "a key outside the fleet.celld.dev/ prefix",
                );
            }
        }
    }
    if let Some(labels_map) = &fleet.metadata.labels {
        for (k, v) in labels_map {
            c.require(
                is_label_value(v),
                &format!("metadata.labels.{k}"),
                format!("`{v}` is not a valid label value"),
                LABEL_VALUE_HINT,
            );
        }
    }
}

/// The GitOps guards celld-gen writes on every fleet may be written by hand only as
/// strong: an Argo CD `Prune=`/`Delete=` option of `false` or `confirm`, Flux `disabled`.
fn check_gitops_guard(c: &mut Checker<'_>, value: Option<&String>, key: &str, field: &str) {
    let Some(value) = value else { return };
    if key == labels::ARGOCD_SYNC_OPTIONS {
        for option in value.split(',').map(str::trim) {
            let (name, v) = option.split_once('=').unwrap_or((option, ""));
            if matches!(name, "Prune" | "Delete") && !matches!(v, "false" | "confirm") {
                c.fail(
                    &format!("{field}.{key}"),
                    format!(
                        "`{option}` would let Argo CD remove the fleet without a person confirming"
                    ),
                    format!(
                        "leave it out (celld-gen writes {}), or {name}=false",
                        labels::FLEET_ARGOCD_SYNC_OPTIONS.join(",")
                    ),
                );
            }
        }
    } else if key == labels::FLUX_PRUNE && value != labels::FLUX_PRUNE_DISABLED {
        c.fail(
            &format!("{field}.{key}"),
            format!("`{value}` would let Flux prune the fleet"),
            format!(
                "leave it out (celld-gen writes {}: {})",
                labels::FLUX_PRUNE,
                labels::FLUX_PRUNE_DISABLED
            ),
        );
    }
}

fn check_spec(c: &mut Checker<'_>, fleet: &CelldFleet) {
    let spec = &fleet.spec;
    c.require(
        is_identity(&spec.identity),
        "spec.identity",
        "the identity must be exactly 26 lowercase letters and digits",
        "the value `celld-gen init` wrote; never edit it, it labels every object and disk of the fleet",
    );
    if spec.bucket_workload.is_some() && spec.profile != Profile::Bucket {
        c.fail(
            "spec.bucketWorkload",
            "bucketWorkload applies to the Bucket profile only",
            "remove it: a PersistentFleet is always a StatefulSet",
        );
    }
    if let Some(problem) = image_problem(&spec.runtime_image) {
        c.fail(
            "spec.runtimeImage",
            problem,
            "registry/repository@sha256:<64 hex>, e.g. ghcr.io/ewhauser/celld@sha256:…",
        );
    } else if pinned_image(&spec.runtime_image).starts_with("ghcr.io/denoland/celld@") {
        c.fail(
            "spec.runtimeImage",
            "the stock ghcr.io/denoland/celld image lacks the fleet features this project needs",
            "a digest-pinned build of the ewhauser/celld fork; there is no default image",
        );
    }
    let zones = spec.placement.zones.len() as i32;
    let external = spec.capacity_mode() == Some(CapacityMode::External);
    match spec.members {
        Some(_) if external => c.fail(
            "spec.members",
            "in capacity mode External, members is owned by the /scale writer (HPA, KEDA)",
            "leave members out of the fleet file so Git and the autoscaler never fight",
        ),
        Some(m) if !defaults::MEMBERS_BOUNDS.contains(m) => c.fail(
            "spec.members",
            format!("{m} is out of range"),
            format!(
                "a whole number from {} to {}",
                defaults::MEMBERS_BOUNDS.min,
                defaults::MEMBERS_BOUNDS.max
            ),
        ),
        Some(m) if m < zones => c.fail(
            "spec.members",
            format!("{m} members cannot cover {zones} zones"),
            format!("at least {zones}, one member per zone"),
        ),
        None if !external && defaults::MEMBERS < zones => c.fail(
            "spec.members",
            format!(
                "the default of {} members cannot cover {zones} zones",
                defaults::MEMBERS
            ),
            format!("members: {zones} or more"),
        ),
        _ => {}
    }
    c.require(
        is_dns_subdomain(&spec.service_account_name),
        "spec.serviceAccountName",
        format!(
            "`{}` is not a valid ServiceAccount name",
            spec.service_account_name
        ),
        "a DNS subdomain of at most 253 characters",
    );
    check_placement(c, fleet);
    if let Some(m) = &spec.maintenance
        && let Some(t) = &m.restart_token
    {
        c.require(
            t.chars().count() <= defaults::MAX_RESTART_TOKEN_CHARS,
            "spec.maintenance.restartToken",
            format!(
                "the restart token is longer than {} characters",
                defaults::MAX_RESTART_TOKEN_CHARS
            ),
            "a short value such as a date, e.g. 2026-11-29.1",
        );
    }
}

fn check_placement(c: &mut Checker<'_>, fleet: &CelldFleet) {
    let spec = &fleet.spec;
    let zones = &spec.placement.zones;
    if !defaults::ZONES_BOUNDS.contains(zones.len()) {
        c.fail(
            "spec.placement.zones",
            format!("{} zones listed", zones.len()),
            format!(
                "from {} to {} zones",
                defaults::ZONES_BOUNDS.min,
                defaults::ZONES_BOUNDS.max
            ),
        );
    }
    let region = &spec.storage.region;
    let cloud = spec.zone_format() == ZoneFormat::Cloud;
    // With an invalid region every zone would also be reported; say it once, at the region.
    let region_ok = storage::region_ok(&spec.storage);
    for (i, z) in zones.iter().enumerate() {
        let field = format!("spec.placement.zones[{i}]");
        if !is_zone_name(z) {
            c.fail(
                &field,
                format!("`{z}` is not a zone name"),
                "a label value: 1 to 63 letters, digits, `-`, `_` or `.`, starting and ending \
                 with a letter or digit",
            );
        } else if cloud && region_ok && !is_zone_of_region(z, region) {
            c.fail(
                &field,
                format!("`{z}` is not a zone of region `{region}`"),
                format!(
                    "a zone of {region} such as {}; or `zoneFormat: Any` in spec.placement \
                     for zones not named after storage.region (on premises, Azure fault \
                     domains)",
                    zone_examples(region)
                ),
            );
        }
        if zones[..i].contains(z) {
            c.fail(
                &format!("spec.placement.zones[{i}]"),
                format!("zone `{z}` is listed twice"),
                "each zone once",
            );
        }
    }
}
