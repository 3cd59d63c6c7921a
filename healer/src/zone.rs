//! Which zone a member is in, for `status.memberStates[].zone`: its node's
//! `topology.kubernetes.io/zone` label, or, while the Pod is not on a node (or its node's
//! zone is unknown), the zone its disk's PersistentVolume is pinned to by node affinity.
//!
//! Status only: no rule reads a zone, so an unknown zone (no nodes watch, no label, no
//! zonal disk) leaves the field empty and changes nothing else.

use std::fmt::Debug;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};

use crate::snapshot::NodeState;
use crate::time::Timestamp;

/// The well-known zone label of Nodes (and the key of a zonal volume's node affinity).
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// Where the runtime's caches say things are.
pub trait ZoneLookup: Debug + Sync {
    /// The zone label of node `name`, when known.
    fn node(&self, name: &str) -> Option<String>;
    /// The zone PersistentVolume `name` is pinned to, when known.
    fn volume(&self, name: &str) -> Option<String>;
    /// Whether node `name` is Ready, NotReady or Unknown (`Unreachable`, not yet timed),
    /// or gone, as far as the healer knows; `Unknown` when it cannot tell (the default:
    /// a lookup without a node watch).
    fn node_state(&self, name: &str) -> crate::snapshot::NodeState {
        let _ = name;
        crate::snapshot::NodeState::Unknown
    }
}

/// A node's state from its Ready condition (`None`: it has none): Unknown (the node
/// controller lost its kubelet) is unreachable, keyed by the condition's transition time;
/// True or False (reported by a live kubelet) is Ready; no condition is not known.
pub fn node_state_of(ready: Option<&k8s_openapi::api::core::v1::NodeCondition>) -> NodeState {
    match ready.map(|c| (c.status.as_str(), c)) {
        Some(("True" | "False", _)) => NodeState::Ready,
        Some(("Unknown", c)) => NodeState::Unreachable {
            since: None,
            transition: c
                .last_transition_time
                .as_ref()
                .map(|t| Timestamp(t.0.as_millisecond())),
        },
        _ => NodeState::Unknown,
    }
}

/// The Ready condition of a node.
pub fn ready_condition(
    n: &k8s_openapi::api::core::v1::Node,
) -> Option<&k8s_openapi::api::core::v1::NodeCondition> {
    n.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
}

/// Knows no zone (tests, and callers without caches).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoZones;

impl ZoneLookup for NoZones {
    fn node(&self, _: &str) -> Option<String> {
        None
    }
    fn volume(&self, _: &str) -> Option<String> {
        None
    }
}

/// The member's zone: its node's, else its disk's (`claims` are the fleet's claims).
pub fn member_zone(
    pod: &Pod,
    claims: &[PersistentVolumeClaim],
    zones: &dyn ZoneLookup,
) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    if let Some(z) = spec
        .node_name
        .as_deref()
        .filter(|n| !n.is_empty())
        .and_then(|n| zones.node(n))
    {
        return Some(z);
    }
    let ns = pod.metadata.namespace.as_deref();
    spec.volumes
        .iter()
        .flatten()
        .filter_map(|v| v.persistent_volume_claim.as_ref())
        .find_map(|src| {
            let claim = claims.iter().find(|c| {
                c.metadata.name.as_deref() == Some(src.claim_name.as_str())
                    && c.metadata.namespace.as_deref() == ns
            })?;
            let pv = claim.spec.as_ref()?.volume_name.as_deref()?;
            zones.volume(pv)
        })
}

/// The zone a PersistentVolume's required node affinity pins it to: every term must name
/// exactly one zone (`In` with one value), the same one. Anything else (no affinity, a
/// term without a zone, several zones) is no single zone.
pub fn volume_zone(pv: &PersistentVolume) -> Option<String> {
    let terms = &pv
        .spec
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required
        .as_ref()?
        .node_selector_terms;
    let mut zone: Option<&str> = None;
    for t in terms {
        let here = t.match_expressions.iter().flatten().find_map(|e| {
            match (e.key.as_str(), e.operator.as_str(), e.values.as_deref()) {
                (ZONE_LABEL, "In", Some([one])) => Some(one.as_str()),
                _ => None,
            }
        })?;
        if zone.is_some_and(|z| z != here) {
            return None;
        }
        zone = Some(here);
    }
    zone.map(str::to_string)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::*;

    #[derive(Debug, Default)]
    struct Maps {
        nodes: BTreeMap<String, String>,
        volumes: BTreeMap<String, String>,
    }

    impl ZoneLookup for Maps {
        fn node(&self, name: &str) -> Option<String> {
            self.nodes.get(name).cloned()
        }
        fn volume(&self, name: &str) -> Option<String> {
            self.volumes.get(name).cloned()
        }
    }

    fn maps() -> Maps {
        Maps {
            nodes: BTreeMap::from([("n1".into(), "zone-a".into())]),
            volumes: BTreeMap::from([("pv-1".into(), "zone-b".into())]),
        }
    }

    fn pod(node: Option<&str>) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "f-0", "namespace": "ns"},
            "spec": {
                "nodeName": node,
                "containers": [{"name": "celld"}],
                "volumes": [
                    {"name": "cfg", "configMap": {"name": "x"}},
                    {"name": "data", "persistentVolumeClaim": {"claimName": "data-f-0"}}
                ]
            }
        }))
        .unwrap()
    }

    fn claim(ns: &str, volume: Option<&str>) -> PersistentVolumeClaim {
        serde_json::from_value(json!({
            "metadata": {"name": "data-f-0", "namespace": ns},
            "spec": {"volumeName": volume}
        }))
        .unwrap()
    }

    fn pv(terms: serde_json::Value) -> PersistentVolume {
        serde_json::from_value(json!({
            "metadata": {"name": "pv-1"},
            "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": terms}}}
        }))
        .unwrap()
    }

    fn zone_term(values: &[&str]) -> serde_json::Value {
        json!({"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "Exists"},
            {"key": ZONE_LABEL, "operator": "In", "values": values}
        ]})
    }

    #[test]
    fn a_member_on_a_node_is_in_the_node_zone() {
        let claims = [claim("ns", Some("pv-1"))];
        assert_eq!(
            member_zone(&pod(Some("n1")), &claims, &maps()).as_deref(),
            Some("zone-a")
        );
    }

    #[test]
    fn a_member_not_on_a_node_is_in_its_disk_zone() {
        let claims = [claim("ns", Some("pv-1"))];
        assert_eq!(
            member_zone(&pod(None), &claims, &maps()).as_deref(),
            Some("zone-b")
        );
        // A node whose zone is unknown (no label, or the nodes watch not working): the
        // disk still says where the member must run.
        assert_eq!(
            member_zone(&pod(Some("n9")), &claims, &maps()).as_deref(),
            Some("zone-b")
        );
    }

    #[test]
    fn neither_a_known_node_nor_a_zonal_disk_is_no_zone() {
        let m = maps();
        assert_eq!(member_zone(&pod(None), &[], &m), None);
        assert_eq!(member_zone(&pod(None), &[claim("ns", None)], &m), None);
        assert_eq!(
            member_zone(&pod(None), &[claim("other", Some("pv-1"))], &m),
            None
        );
        assert_eq!(
            member_zone(&pod(None), &[claim("ns", Some("pv-2"))], &m),
            None
        );
        assert_eq!(
            member_zone(&pod(Some("n1")), &[], &NoZones),
            None,
            "nothing known"
        );
    }

    #[test]
    fn a_volume_has_a_zone_only_when_every_term_names_the_same_one() {
        assert_eq!(
            volume_zone(&pv(json!([zone_term(&["zone-b"])]))).as_deref(),
            Some("zone-b")
        );
        assert_eq!(
            volume_zone(&pv(json!([zone_term(&["zone-b"]), zone_term(&["zone-b"])]))).as_deref(),
            Some("zone-b")
        );
        assert_eq!(
            volume_zone(&pv(json!([zone_term(&["zone-b"]), zone_term(&["zone-c"])]))),
            None
        );
        assert_eq!(
            volume_zone(&pv(json!([zone_term(&["zone-b", "zone-c"])]))),
            None
        );
        assert_eq!(
            volume_zone(&pv(json!([zone_term(&["zone-b"]), {"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}
            ]}]))),
            None
        );
        assert_eq!(volume_zone(&pv(json!([]))), None);
        let none: PersistentVolume =
            serde_json::from_value(json!({"metadata": {"name": "pv"}, "spec": {}})).unwrap();
        assert_eq!(volume_zone(&none), None);
    }
}
