//! `spec.pod`: the platform's settings for member Pods. Besides the Kubernetes rules
//! for each field (so the API server never refuses a rendered workload), three things
//! are the fleet's own:
//! - keys the project or the workload controllers own cannot be set as Pod labels or
//!   annotations (a label the StatefulSet controller writes would fight it; our own keys
//!   mean something to the healer);
//! - the node selector and required node affinity must leave every zone of
//!   `placement.zones` possible, since members are spread over all of them and a member
//!   whose zone no node can match never schedules ([`excluded_zones`]);
//! - a toleration may not keep members for ever on a lost node: the NoExecute eviction
//!   of `node.kubernetes.io/unreachable` (or `not-ready`, or `out-of-service`) is what
//!   starts the healing of a stranded member.

use std::collections::BTreeMap;

use super::{Checker, LABEL_VALUE_HINT, QUALIFIED_NAME_HINT};
use crate::validate::formats::*;
use crate::{
    CelldFleet, NodeSelectorOperator, NodeSelectorRequirement, NodeSelectorTerm, PodSettings,
    TaintEffect, Toleration, TolerationOperator, defaults, labels,
};

/// Pod labels the workload controllers write on member Pods, and which controller.
pub const CONTROLLER_LABELS: &[(&str, &str)] = &[
    ("controller-revision-hash", "the StatefulSet controller"),
    (
        "statefulset.kubernetes.io/pod-name",
        "the StatefulSet controller",
    ),
    ("apps.kubernetes.io/pod-index", "the StatefulSet controller"),
    ("pod-template-hash", "the Deployment controller"),
];

/// The node label that names the operating system; members run Linux images.
pub const OS_LABEL: &str = "kubernetes.io/os";
/// The only operating system members run on.
pub const OS: &str = "linux";

/// Taints the node controller puts on a node it lost; their NoExecute eviction is what
/// marks a stranded member for deletion (the healer's force-delete rule starts there).
pub const LOST_NODE_TAINTS: &[&str] = &[
    "node.kubernetes.io/unreachable",
    "node.kubernetes.io/not-ready",
    // Set by a person on a node shut down for good: its eviction is what releases the
    // member's disk (non-graceful node shutdown).
    "node.kubernetes.io/out-of-service",
];

pub fn check(c: &mut Checker<'_>, fleet: &CelldFleet) {
    let Some(pod) = &fleet.spec.pod else { return };
    let before = c.problems.len();
    check_metadata(c, pod);
    if let Some(selector) = &pod.node_selector {
        for (k, v) in selector {
            let field = format!("spec.pod.nodeSelector.{k}");
            key_ok(c, k, &field);
            c.require(
                is_label_value(v),
                &field,
                format!("`{v}` is not a valid label value"),
                LABEL_VALUE_HINT,
            );
        }
    }
    for (i, t) in pod.tolerations.iter().flatten().enumerate() {
        check_toleration(c, t, &format!("spec.pod.tolerations[{i}]"));
    }
    if let Some(affinity) = &pod.node_affinity {
        if let Some(required) = &affinity.required_during_scheduling_ignored_during_execution {
            let field = "spec.pod.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms";
            let n = required.node_selector_terms.len();
            if !(1..=defaults::MAX_NODE_SELECTOR_TERMS).contains(&n) {
                c.fail(
                    field,
                    format!("{n} terms"),
                    format!("from 1 to {} terms", defaults::MAX_NODE_SELECTOR_TERMS),
                );
            }
            for (i, term) in required.node_selector_terms.iter().enumerate() {
                check_term(c, term, &format!("{field}[{i}]"));
            }
        }
        let field = "spec.pod.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution";
        for (i, p) in affinity
            .preferred_during_scheduling_ignored_during_execution
            .iter()
            .flatten()
            .enumerate()
        {
            c.range(
                Some(p.weight),
                &format!("{field}[{i}].weight"),
                defaults::AFFINITY_WEIGHT_BOUNDS,
            );
            check_term(c, &p.preference, &format!("{field}[{i}].preference"));
        }
    }
    for (value, field, what) in [
        (
            &pod.priority_class_name,
            "spec.pod.priorityClassName",
            "PriorityClass",
        ),
        (
            &pod.runtime_class_name,
            "spec.pod.runtimeClassName",
            "RuntimeClass",
        ),
    ] {
        if let Some(v) = value {
            c.require(
                is_dns_subdomain(v),
                field,
                format!("`{v}` is not a valid {what} name"),
                "a DNS subdomain of at most 253 characters",
            );
        }
    }
    let secrets = pod.image_pull_secrets.as_deref().unwrap_or_default();
    for (i, s) in secrets.iter().enumerate() {
        let field = format!("spec.pod.imagePullSecrets[{i}].name");
        c.require(
            is_dns_subdomain(&s.name),
            &field,
            format!("`{}` is not a valid Secret name", s.name),
            "a DNS subdomain of at most 253 characters",
        );
        if secrets[..i].iter().any(|o| o.name == s.name) {
            c.fail(
                &field,
                format!("Secret `{}` is listed twice", s.name),
                "each Secret once",
            );
        }
    }
    // Placement is judged on well-formed terms only (an empty term is reported above).
    if c.problems.len() == before {
        check_zones(c, fleet, pod);
    }
}

fn key_ok(c: &mut Checker<'_>, key: &str, field: &str) -> bool {
    let ok = is_qualified_name(key);
    c.require(
        ok,
        field,
        format!("`{key}` is not a valid key"),
        QUALIFIED_NAME_HINT,
    );
    ok
}

fn check_metadata(c: &mut Checker<'_>, pod: &PodSettings) {
    let own = format!("{}/", labels::GROUP);
    for (map, field) in [
        (&pod.labels, "spec.pod.labels"),
        (&pod.annotations, "spec.pod.annotations"),
    ] {
        let Some(map) = map else { continue };
        let annotations = field.ends_with("annotations");
        for (k, v) in map {
            let f = format!("{field}.{k}");
            if !key_ok(c, k, &f) {
                continue;
            }
            if k.starts_with(&own) {
                c.fail(
                    &f,
                    format!("`{k}` is reserved for celld-gen and the healer"),
                    format!("a key outside the {own} prefix"),
                );
            } else if !annotations
                && let Some((_, owner)) = CONTROLLER_LABELS.iter().find(|(key, _)| key == k)
            {
                c.fail(
                    &f,
                    format!("`{k}` is reserved: {owner} writes it on member Pods"),
                    "another label key",
                );
            }
            if !annotations {
                c.require(
                    is_label_value(v),
                    &f,
                    format!("`{v}` is not a valid label value"),
                    LABEL_VALUE_HINT,
                );
            }
        }
        if annotations {
            let bytes: usize = map.iter().map(|(k, v)| k.len() + v.len()).sum();
            c.require(
                bytes <= defaults::MAX_POD_ANNOTATION_BYTES,
                field,
                format!("the annotations take {bytes} bytes"),
                format!(
                    "at most {} bytes of keys and values",
                    defaults::MAX_POD_ANNOTATION_BYTES
                ),
            );
        }
    }
}

fn check_toleration(c: &mut Checker<'_>, t: &Toleration, field: &str) {
    let key = t.key.as_deref().unwrap_or("");
    let exists = t.operator == Some(TolerationOperator::Exists);
    if !key.is_empty() {
        key_ok(c, key, &format!("{field}.key"));
    } else if !exists {
        c.fail(
            &format!("{field}.operator"),
            "a toleration without a key tolerates every taint, which needs operator Exists",
            "a key, or operator: Exists",
        );
    }
    match t.value.as_deref() {
        Some(v) if !v.is_empty() && exists => c.fail(
            &format!("{field}.value"),
            "a toleration with operator Exists takes no value",
            "leave value out, or use operator: Equal",
        ),
        Some(v) => c.require(
            is_label_value(v),
            &format!("{field}.value"),
            format!("`{v}` is not a valid taint value"),
            LABEL_VALUE_HINT,
        ),
        None => {}
    }
    let no_execute = matches!(t.effect, None | Some(TaintEffect::NoExecute));
    if let Some(s) = t.toleration_seconds {
        c.require(
            t.effect == Some(TaintEffect::NoExecute),
            &format!("{field}.tolerationSeconds"),
            "tolerationSeconds applies to effect NoExecute only",
            "effect: NoExecute, or leave tolerationSeconds out",
        );
        c.range(
            Some(s),
            &format!("{field}.tolerationSeconds"),
            defaults::TOLERATION_SECONDS_BOUNDS,
        );
    } else if no_execute {
        let lost = if key.is_empty() && exists {
            Some("every taint, node.kubernetes.io/unreachable included,")
        } else {
            LOST_NODE_TAINTS.iter().find(|k| **k == key).copied()
        };
        if let Some(what) = lost {
            c.fail(
                field,
                format!(
                    "tolerates {what} for ever: a member on a lost node would never be \
                     evicted, so the healer would never move it or heal its disk"
                ),
                "tolerationSeconds with effect NoExecute, as Kubernetes' own default \
                 toleration of 300 seconds has; or effect NoSchedule",
            );
        }
    }
}

fn check_term(c: &mut Checker<'_>, term: &NodeSelectorTerm, field: &str) {
    let expressions = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if expressions.is_empty() && fields.is_empty() {
        c.fail(
            field,
            "an empty node term matches no node",
            "matchExpressions or matchFields with at least one requirement",
        );
    }
    for (i, r) in expressions.iter().enumerate() {
        let f = format!("{field}.matchExpressions[{i}]");
        key_ok(c, &r.key, &format!("{f}.key"));
        check_requirement(c, r, &f);
    }
    for (i, r) in fields.iter().enumerate() {
        let f = format!("{field}.matchFields[{i}]");
        c.require(
            r.key == "metadata.name",
            &format!("{f}.key"),
            format!("`{}` is not a node field a term can match", r.key),
            "metadata.name",
        );
        let one = r.values.as_ref().is_some_and(|v| v.len() == 1);
        c.require(
            matches!(
                r.operator,
                NodeSelectorOperator::In | NodeSelectorOperator::NotIn
            ) && one,
            &f,
            "a node field requirement takes In or NotIn and exactly one value",
            "operator: In (or NotIn) with one node name in values",
        );
    }
}

fn check_requirement(c: &mut Checker<'_>, r: &NodeSelectorRequirement, field: &str) {
    use NodeSelectorOperator as Op;
    let values = r.values.as_deref().unwrap_or_default();
    let values_field = format!("{field}.values");
    match r.operator {
        Op::In | Op::NotIn => {
            c.require(
                !values.is_empty(),
                &values_field,
                format!("operator {:?} needs at least one value", r.operator),
                "a list of label values",
            );
            for (i, v) in values.iter().enumerate() {
                c.require(
                    is_label_value(v),
                    &format!("{values_field}[{i}]"),
                    format!("`{v}` is not a valid label value"),
                    "at most 63 letters, digits, `-`, `_` or `.`",
                );
            }
        }
        Op::Exists | Op::DoesNotExist => c.require(
            values.is_empty(),
            &values_field,
            format!("operator {:?} takes no values", r.operator),
            "leave values out",
        ),
        Op::Gt | Op::Lt => c.require(
            values.len() == 1 && values[0].parse::<i64>().is_ok(),
            &values_field,
            format!("operator {:?} needs exactly one whole number", r.operator),
            "values: [\"<integer>\"]",
        ),
    }
}

/// Whether a node whose label `key` has `value` (absent: `None`) meets `r`.
fn meets(r: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    use NodeSelectorOperator as Op;
    let values = r.values.as_deref().unwrap_or_default();
    let number = |v: &str| v.parse::<i64>().ok();
    match (r.operator, value) {
        (Op::In, Some(v)) => values.iter().any(|x| x == v),
        (Op::In, None) => false,
        (Op::NotIn, v) => v.is_none_or(|v| !values.iter().any(|x| x == v)),
        (Op::Exists, v) => v.is_some(),
        (Op::DoesNotExist, v) => v.is_none(),
        (Op::Gt | Op::Lt, None) => false,
        (op, Some(v)) => match (number(v), values.first().and_then(|x| number(x))) {
            (Some(have), Some(bound)) => {
                if op == Op::Gt {
                    have > bound
                } else {
                    have < bound
                }
            }
            _ => false,
        },
    }
}

/// Whether a node in `zone` running Linux can meet `term`: its requirements on the zone
/// and operating-system labels (the ones the fleet's own placement fixes) hold for those
/// values; requirements on other labels or on node fields could hold on some node.
fn term_allows(term: &NodeSelectorTerm, zone: &str) -> bool {
    let fixed = BTreeMap::from([(labels::ZONE, zone), (OS_LABEL, OS)]);
    term.match_expressions
        .iter()
        .flatten()
        .all(|r| fixed.get(r.key.as_str()).is_none_or(|v| meets(r, Some(v))))
        && (term
            .match_expressions
            .as_ref()
            .is_some_and(|e| !e.is_empty())
            || term.match_fields.as_ref().is_some_and(|f| !f.is_empty()))
}

/// The zones of `placement.zones` that no node could offer a member under the Pod's
/// nodeSelector and required node affinity (members run Linux in one of the fleet's
/// zones; an empty term matches nothing).
pub fn excluded_zones(fleet: &CelldFleet) -> Vec<String> {
    let spec = &fleet.spec;
    let Some(pod) = &spec.pod else {
        return Vec::new();
    };
    let selector = pod.node_selector.as_ref();
    let terms = pod
        .node_affinity
        .as_ref()
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .map(|r| r.node_selector_terms.as_slice());
    spec.placement
        .zones
        .iter()
        .filter(|zone| {
            let fixed = [(labels::ZONE, zone.as_str()), (OS_LABEL, OS)];
            let by_selector = fixed.iter().all(|(k, v)| {
                selector
                    .and_then(|s| s.get(*k))
                    .is_none_or(|want| want == v)
            });
            let by_affinity = terms.is_none_or(|t| t.iter().any(|term| term_allows(term, zone)));
            !(by_selector && by_affinity)
        })
        .cloned()
        .collect()
}

fn check_zones(c: &mut Checker<'_>, fleet: &CelldFleet, pod: &PodSettings) {
    let excluded = excluded_zones(fleet);
    if excluded.is_empty() {
        return;
    }
    let selector = pod.node_selector.as_ref();
    let field = if let Some(k) = [labels::ZONE, OS_LABEL]
        .into_iter()
        .find(|k| selector.is_some_and(|s| s.contains_key(*k)))
    {
        format!("spec.pod.nodeSelector.{k}")
    } else {
        "spec.pod.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution".to_string()
    };
    let all = excluded.len() == fleet.spec.placement.zones.len();
    let message = if all {
        "no zone of placement.zones can satisfy both the fleet's placement and this node \
         selection: no member would ever schedule"
            .to_string()
    } else {
        format!(
            "zone{} {} of placement.zones cannot satisfy this node selection: the members \
             spread there would never schedule",
            if excluded.len() == 1 { "" } else { "s" },
            excluded.join(", ")
        )
    };
    c.fail(
        &field,
        message,
        format!(
            "a node selection that Linux nodes in every zone of placement.zones ({}) can \
             meet; leave {} out, the fleet already requires its zones",
            fleet.spec.placement.zones.join(", "),
            labels::ZONE
        ),
    );
}
