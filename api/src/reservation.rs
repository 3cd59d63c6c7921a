//! `CelldBucketReservation`: binds a bucket (and prefix) to one fleet identity for ever.

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Binds a bucket and prefix to one fleet identity. Its spec never changes.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "fleet.celld.dev",
    version = "v1alpha1",
    kind = "CelldBucketReservation",
    shortname = "cbr",
    category = "celld",
    printcolumn = r#"{"name":"Bucket","type":"string","jsonPath":".spec.bucket"}"#,
    printcolumn = r#"{"name":"Prefix","type":"string","jsonPath":".spec.prefix"}"#,
    printcolumn = r#"{"name":"Fleet","type":"string","jsonPath":".spec.fleetName"}"#,
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(validation = Rule::new("self == oldSelf").message("a bucket reservation cannot be transferred or changed"))]
pub struct CelldBucketReservationSpec {
    /// The reserved bucket.
    pub bucket: String,
    /// The reserved prefix inside it, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// Identity of the fleet the bucket belongs to.
    pub identity: String,
    /// Namespace of that fleet.
    pub fleet_namespace: String,
    /// Name of that fleet.
    pub fleet_name: String,
}

impl CelldBucketReservationSpec {
    /// Whether this reservation is the one `fleet` holds: for its bucket and prefix, its
    /// identity, and that fleet itself by namespace and name. A copy of a fleet (the same
    /// identity under another name or in another namespace, which a healer serving only
    /// its own namespace cannot see) does not hold its original's reservation.
    pub fn held_by(&self, fleet: &crate::CelldFleet) -> bool {
        self.identity == fleet.spec.identity
            && self.bucket == fleet.spec.storage.bucket
            && self.prefix == fleet.spec.storage.prefix
            && Some(self.fleet_namespace.as_str()) == fleet.metadata.namespace.as_deref()
            && Some(self.fleet_name.as_str()) == fleet.metadata.name.as_deref()
    }

    /// Who holds it, in words: `identity <id> (fleet <namespace>/<name>)`.
    pub fn holder(&self) -> String {
        format!(
            "identity {} (fleet {}/{})",
            self.identity, self.fleet_namespace, self.fleet_name
        )
    }
}

/// Name of the reservation for a bucket and optional prefix: a hash, so it is a valid
/// object name whatever the bucket, and the same bucket always maps to the same object.
pub fn reservation_name(bucket: &str, prefix: Option<&str>) -> String {
    let mut h = Sha256::new();
    h.update(bucket.as_bytes());
    if let Some(p) = prefix {
        // NUL cannot occur in a bucket name, so (bucket, prefix) pairs never collide.
        h.update([0u8]);
        h.update(p.as_bytes());
    }
    let hex: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    match prefix {
        Some(_) => format!("s3-scope-{}", &hex[..54]),
        None => format!("s3-{}", &hex[..56]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_stable_and_distinct() {
        let a = reservation_name("alpha-bucket", None);
        assert!(a.starts_with("s3-") && a.len() == 59);
        assert_eq!(a, reservation_name("alpha-bucket", None));
        let b = reservation_name("alpha-bucket", Some("team-a"));
        assert!(b.starts_with("s3-scope-") && b.len() == 63);
        assert_ne!(b, reservation_name("alpha-bucket", Some("team-b")));
    }
}
