//! The member Pods' metadata and platform settings (`spec.pod`) as the Pod template
//! writes them, in Kubernetes' own shape so the template writes them with the `yaml`
//! filter. The fleet's node affinity is merged in, never replaced: Kubernetes ORs
//! required node terms and ANDs the requirements inside one term, so the template
//! appends the fleet's zone and operating-system requirements to each of the user's
//! required terms (here: one empty term when there are none). A member's node then
//! matches one of the user's terms *and* the fleet's placement. Preferred terms are
//! added as written.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::api::{
    CelldFleetSpec, FsGroupChangePolicy, NodeSelectorTerm, PreferredSchedulingTerm, Toleration,
    labels,
};

/// What the Pod template writes from `spec.pod`, `placement` and `maintenance`.
#[derive(Serialize, Debug, PartialEq)]
pub struct PodContext {
    /// The identity label and the user's labels.
    labels: BTreeMap<String, String>,
    /// The restart token and the user's annotations (null when there are none).
    annotations: Option<BTreeMap<String, String>>,
    node_selector: Option<BTreeMap<String, String>>,
    tolerations: Option<Vec<Toleration>>,
    /// The user's required node terms, or one empty term; the template appends the
    /// placement's requirements to each.
    required_terms: Vec<NodeSelectorTerm>,
    preferred_terms: Option<Vec<PreferredSchedulingTerm>>,
    priority_class_name: Option<String>,
    runtime_class_name: Option<String>,
    image_pull_secrets: Option<Vec<crate::api::LocalObjectReference>>,
    fs_group_change_policy: Option<FsGroupChangePolicy>,
}

impl PodContext {
    /// The Pod settings of `spec`, placement merged.
    pub fn new(spec: &CelldFleetSpec) -> Self {
        let pod = spec.pod.clone().unwrap_or_default();
        let affinity = pod.node_affinity.unwrap_or_default();
        let user_terms = affinity
            .required_during_scheduling_ignored_during_execution
            .map(|r| r.node_selector_terms)
            .unwrap_or_default();
        // An empty list reads as absent: the template appends the placement to the
        // term's own requirements, if it has any.
        let required_terms = if user_terms.is_empty() {
            vec![NodeSelectorTerm::default()]
        } else {
            user_terms
                .into_iter()
                .map(|t| NodeSelectorTerm {
                    match_expressions: t.match_expressions.filter(|e| !e.is_empty()),
                    match_fields: t.match_fields.filter(|f| !f.is_empty()),
                })
                .collect()
        };
        let mut labels = pod.labels.unwrap_or_default();
        labels.insert(labels::IDENTITY.into(), spec.identity.clone());
        let mut annotations = pod.annotations.unwrap_or_default();
        if let Some(token) = spec.restart_token() {
            annotations.insert(labels::RESTART_TOKEN.into(), token.into());
        }
        PodContext {
            labels,
            annotations: (!annotations.is_empty()).then_some(annotations),
            node_selector: pod.node_selector.filter(|m| !m.is_empty()),
            tolerations: pod.tolerations.filter(|t| !t.is_empty()),
            required_terms,
            preferred_terms: affinity
                .preferred_during_scheduling_ignored_during_execution
                .filter(|p| !p.is_empty()),
            priority_class_name: pod.priority_class_name,
            runtime_class_name: pod.runtime_class_name,
            image_pull_secrets: pod.image_pull_secrets.filter(|s| !s.is_empty()),
            fs_group_change_policy: pod.fs_group_change_policy,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use k8s_openapi::api::apps::v1::StatefulSet;

    use crate::render::render_fleet;
    use crate::validate::load_str;

    fn statefulset(pod: &str) -> StatefulSet {
        let text = format!(
            "apiVersion: fleet.celld.dev/v1alpha1
kind: CelldFleet
metadata: {{name: alpha, namespace: apps}}
spec:
  identity: 7kq2m9x4c1v8b3n6z5h0j2w4r8
  profile: PersistentFleet
  runtimeImage: ghcr.io/ewhauser/celld@sha256:{}
  serviceAccountName: runtime
  storage: {{bucket: alpha-bucket, region: us-east-1, storageClassName: gp3}}
  placement: {{zones: [us-east-1a, us-east-1b, us-east-1c]}}
  maintenance: {{restartToken: t1}}
{pod}",
            "0".repeat(64)
        );
        let fleet = load_str(Path::new("f.yaml"), &text).expect("valid");
        let rendered = render_fleet(&fleet).expect("renders");
        let o = rendered
            .objects
            .iter()
            .find(|o| o.file == "statefulset.yaml")
            .expect("a StatefulSet");
        let value = crate::render::parse::parse_document(&o.yaml).expect("parses");
        serde_json::from_value(value).expect("a StatefulSet")
    }

    /// Every required term of the rendered node affinity, as `key operator values`.
    fn terms(s: &StatefulSet) -> Vec<Vec<String>> {
        let spec = s.spec.template.spec.as_ref().unwrap();
        let required = spec
            .affinity
            .as_ref()
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|n| {
                n.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .unwrap();
        required
            .node_selector_terms
            .iter()
            .map(|t| {
                t.match_expressions
                    .iter()
                    .flatten()
                    .map(|r| {
                        format!(
                            "{} {} {}",
                            r.key,
                            r.operator,
                            r.values.clone().unwrap_or_default().join(",")
                        )
                    })
                    .collect()
            })
            .collect()
    }

    const ZONE: &str = "topology.kubernetes.io/zone In us-east-1a,us-east-1b,us-east-1c";
    const OS: &str = "kubernetes.io/os In linux";

    #[test]
    fn without_settings_the_fleet_term_stands_alone() {
        let s = statefulset("");
        assert_eq!(terms(&s), vec![vec![ZONE.to_string(), OS.to_string()]]);
        let meta = s.spec.template.metadata.unwrap();
        assert_eq!(meta.labels.unwrap().len(), 1, "the identity label only");
        assert_eq!(meta.annotations.unwrap().len(), 1, "the restart token only");
    }

    #[test]
    fn each_required_term_is_joined_with_the_placement() {
        let s = statefulset(
            "  pod:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
          - matchExpressions: [{key: pool, operator: In, values: [a]}]
          - matchFields: [{key: metadata.name, operator: In, values: [n1]}]
            matchExpressions: []
",
        );
        assert_eq!(
            terms(&s),
            vec![
                vec!["pool In a".to_string(), ZONE.into(), OS.into()],
                vec![ZONE.to_string(), OS.into()],
            ]
        );
        let spec = s.spec.template.spec.unwrap();
        let required = spec
            .affinity
            .unwrap()
            .node_affinity
            .unwrap()
            .required_during_scheduling_ignored_during_execution
            .unwrap();
        let fields = required.node_selector_terms[1]
            .match_fields
            .clone()
            .unwrap();
        assert_eq!(fields[0].key, "metadata.name");
    }

    #[test]
    fn labels_and_annotations_join_the_fleets_own() {
        let s = statefulset(
            "  pod:
    labels: {team: payments}
    annotations: {example.com/scrape: \"true\"}
    tolerations: [{key: dedicated, operator: Exists, effect: NoSchedule}]
    imagePullSecrets: [{name: regcred}]
",
        );
        let template = s.spec.template;
        let meta = template.metadata.unwrap();
        let labels = meta.labels.unwrap();
        assert_eq!(labels["team"], "payments");
        assert_eq!(
            labels["fleet.celld.dev/identity"],
            "7kq2m9x4c1v8b3n6z5h0j2w4r8"
        );
        let annotations = meta.annotations.unwrap();
        assert_eq!(annotations["example.com/scrape"], "true");
        assert_eq!(annotations["fleet.celld.dev/restart-token"], "t1");
        let spec = template.spec.unwrap();
        let t = &spec.tolerations.unwrap()[0];
        assert_eq!(
            (t.key.as_deref(), t.operator.as_deref(), t.value.as_deref()),
            (Some("dedicated"), Some("Exists"), None)
        );
        assert_eq!(spec.image_pull_secrets.unwrap()[0].name, "regcred");
    }
}
