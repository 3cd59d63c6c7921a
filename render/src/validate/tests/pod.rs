//! `spec.pod`: one test per rule, with the field and message each problem names.

use super::{check, fails, with};

#[test]
fn every_pod_setting_is_accepted() {
    let text = with(
        "  pod:
    labels: {team: payments}
    annotations: {sidecar.istio.io/inject: \"false\"}
    nodeSelector: {node-pool: celld}
    tolerations:
      - {key: dedicated, operator: Equal, value: celld, effect: NoSchedule}
      - {key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: 60}
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
          - matchExpressions: [{key: kubernetes.io/arch, operator: In, values: [arm64]}]
          - matchExpressions: [{key: topology.kubernetes.io/zone, operator: NotIn, values: [us-east-1d]}]
      preferredDuringSchedulingIgnoredDuringExecution:
        - {weight: 10, preference: {matchExpressions: [{key: nvme, operator: Exists}]}}
    priorityClassName: celld-critical
    runtimeClassName: gvisor
    imagePullSecrets: [{name: regcred}]
    fsGroupChangePolicy: OnRootMismatch
",
    );
    assert_eq!(check(&text), vec![]);
}

#[test]
fn unknown_pod_fields_are_refused_with_a_suggestion() {
    let d = fails(
        &with("  pod:\n    nodeSelecter: {a: b}\n"),
        "spec.pod.nodeSelecter",
        "nodeSelector",
    );
    assert_eq!(d.line, 19);
}

#[test]
fn pod_labels_refuse_reserved_keys() {
    fails(
        &with("  pod:\n    labels: {fleet.celld.dev/identity: x}\n"),
        "spec.pod.labels.fleet.celld.dev/identity",
        "reserved for celld-gen and the healer",
    );
    let d = fails(
        &with("  pod:\n    labels: {statefulset.kubernetes.io/pod-name: x}\n"),
        "spec.pod.labels.statefulset.kubernetes.io/pod-name",
        "the StatefulSet controller writes it",
    );
    assert_eq!(d.line, 19);
    fails(
        &with("  pod:\n    labels: {pod-template-hash: x}\n"),
        "spec.pod.labels.pod-template-hash",
        "the Deployment controller",
    );
    fails(
        &with("  pod:\n    labels: {team: \"not ok\"}\n"),
        "spec.pod.labels.team",
        "not a valid label value",
    );
    fails(
        &with("  pod:\n    labels: {\"bad key!\": x}\n"),
        "spec.pod.labels.bad key!",
        "not a valid key",
    );
}

#[test]
fn pod_annotations_refuse_our_keys_and_size() {
    fails(
        &with("  pod:\n    annotations: {fleet.celld.dev/restart-token: x}\n"),
        "spec.pod.annotations.fleet.celld.dev/restart-token",
        "reserved",
    );
    // A controller label key is fine as an annotation, and any annotation value is.
    assert_eq!(
        check(&with(
            "  pod:\n    annotations: {pod-template-hash: \"any text, spaces too\"}\n"
        )),
        vec![]
    );
    let big = "x".repeat(celld_api::defaults::MAX_POD_ANNOTATION_BYTES);
    fails(
        &with(&format!("  pod:\n    annotations: {{a: {big}}}\n")),
        "spec.pod.annotations",
        "bytes",
    );
}

#[test]
fn tolerations_follow_kubernetes_rules() {
    fails(
        &with("  pod:\n    tolerations: [{operator: Equal, value: x}]\n"),
        "spec.pod.tolerations[0].operator",
        "without a key",
    );
    fails(
        &with("  pod:\n    tolerations: [{key: a, operator: Exists, value: x}]\n"),
        "spec.pod.tolerations[0].value",
        "takes no value",
    );
    fails(
        &with("  pod:\n    tolerations: [{key: a, effect: NoSchedule, tolerationSeconds: 5}]\n"),
        "spec.pod.tolerations[0].tolerationSeconds",
        "NoExecute only",
    );
    let d = fails(
        &with("  pod:\n    tolerations: [{key: a, effect: NoSchedul}]\n"),
        "spec.pod.tolerations[0].effect",
        "not a valid value",
    );
    assert!(d.expected.contains("NoSchedule"), "{d:?}");
}

#[test]
fn tolerating_a_lost_node_for_ever_is_refused() {
    for t in [
        "{key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute}",
        "{key: node.kubernetes.io/not-ready, operator: Exists}",
        "{operator: Exists}",
        "{operator: Exists, effect: NoExecute}",
    ] {
        fails(
            &with(&format!("  pod:\n    tolerations: [{t}]\n")),
            "spec.pod.tolerations[0]",
            "for ever",
        );
    }
    // Bounded, or not NoExecute: the eviction still comes.
    for t in [
        "{key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: 30}",
        "{operator: Exists, effect: NoSchedule}",
        "{key: node.kubernetes.io/unreachable, operator: Exists, effect: NoSchedule}",
    ] {
        assert_eq!(
            check(&with(&format!("  pod:\n    tolerations: [{t}]\n"))),
            vec![],
            "{t}"
        );
    }
}

#[test]
fn node_terms_follow_kubernetes_rules() {
    let req = |term: &str| {
        with(&format!(
            "  pod:\n    nodeAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n        nodeSelectorTerms: [{term}]\n"
        ))
    };
    let field =
        "spec.pod.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]";
    fails(&req("{}"), field, "matches no node");
    fails(
        &req("{matchExpressions: [{key: a, operator: In}]}"),
        &format!("{field}.matchExpressions[0].values"),
        "at least one value",
    );
    fails(
        &req("{matchExpressions: [{key: a, operator: Exists, values: [x]}]}"),
        &format!("{field}.matchExpressions[0].values"),
        "takes no values",
    );
    fails(
        &req("{matchExpressions: [{key: a, operator: Gt, values: [x]}]}"),
        &format!("{field}.matchExpressions[0].values"),
        "whole number",
    );
    fails(
        &req("{matchFields: [{key: metadata.labels, operator: In, values: [x]}]}"),
        &format!("{field}.matchFields[0].key"),
        "not a node field",
    );
    assert_eq!(
        check(&req(
            "{matchFields: [{key: metadata.name, operator: NotIn, values: [node-1]}]}"
        )),
        vec![]
    );
    fails(
        &with(
            "  pod:\n    nodeAffinity:\n      preferredDuringSchedulingIgnoredDuringExecution:\n        - {weight: 0, preference: {matchExpressions: [{key: a, operator: Exists}]}}\n",
        ),
        "spec.pod.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight",
        "out of range",
    );
}

#[test]
fn node_selection_must_leave_every_zone_possible() {
    // A zone pinned by the nodeSelector: the other two zones' members never schedule.
    let d = fails(
        &with("  pod:\n    nodeSelector: {topology.kubernetes.io/zone: us-east-1a}\n"),
        "spec.pod.nodeSelector.topology.kubernetes.io/zone",
        "zones us-east-1b, us-east-1c",
    );
    assert!(
        d.expected.contains("us-east-1a, us-east-1b, us-east-1c"),
        "{d:?}"
    );
    fails(
        &with("  pod:\n    nodeSelector: {topology.kubernetes.io/zone: eu-west-1a}\n"),
        "spec.pod.nodeSelector.topology.kubernetes.io/zone",
        "no zone of placement.zones",
    );
    fails(
        &with("  pod:\n    nodeSelector: {kubernetes.io/os: windows}\n"),
        "spec.pod.nodeSelector.kubernetes.io/os",
        "no zone",
    );
    let req = |term: &str| {
        with(&format!(
            "  pod:\n    nodeAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n        nodeSelectorTerms: [{term}]\n"
        ))
    };
    let field = "spec.pod.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution";
    fails(
        &req(
            "{matchExpressions: [{key: topology.kubernetes.io/zone, operator: NotIn, values: [us-east-1c]}]}",
        ),
        field,
        "zone us-east-1c of placement.zones",
    );
    fails(
        &req("{matchExpressions: [{key: topology.kubernetes.io/zone, operator: DoesNotExist}]}"),
        field,
        "no zone",
    );
    fails(
        &req("{matchExpressions: [{key: kubernetes.io/os, operator: NotIn, values: [linux]}]}"),
        field,
        "no zone",
    );
    // Terms are ORed: two terms that cover the zones between them are fine.
    assert_eq!(
        check(&req(
            "{matchExpressions: [{key: topology.kubernetes.io/zone, operator: In, values: [us-east-1a]}]}, \
             {matchExpressions: [{key: topology.kubernetes.io/zone, operator: NotIn, values: [us-east-1a]}]}"
        )),
        vec![]
    );
    // A selector on the zone that names every zone is redundant, not wrong.
    assert_eq!(
        check(&req(
            "{matchExpressions: [{key: topology.kubernetes.io/zone, operator: In, values: [us-east-1a, us-east-1b, us-east-1c]}]}"
        )),
        vec![]
    );
}

#[test]
fn pull_secrets_and_class_names() {
    fails(
        &with("  pod:\n    imagePullSecrets: [{name: a}, {name: a}]\n"),
        "spec.pod.imagePullSecrets[1].name",
        "listed twice",
    );
    fails(
        &with("  pod:\n    priorityClassName: Not_Valid\n"),
        "spec.pod.priorityClassName",
        "",
    );
    let d = fails(
        &with("  pod:\n    fsGroupChangePolicy: Sometimes\n"),
        "spec.pod.fsGroupChangePolicy",
        "not a valid value",
    );
    assert!(d.expected.contains("OnRootMismatch"), "{d:?}");
}
