//! The live spec, checked by exactly the validation `celld-gen check` runs, so the
//! healer reports the same messages and never acts on a fleet the generator would refuse
//! (the CRD schema cannot express every rule, and a fleet may predate a rule).

use celld_gen::api::labels::API_VERSION;
use celld_gen::api::{CapacityMode, CelldFleet};
use serde_json::json;

/// One line per problem (`field: what is wrong (expected ...)`); empty when valid.
pub fn problems(f: &CelldFleet) -> Vec<String> {
    // Only what a fleet file holds: server-set metadata (uid, managedFields...) and the
    // status are not the user's to write, and annotations are not validated.
    let doc = json!({
        "apiVersion": API_VERSION,
        "kind": "CelldFleet",
        "metadata": {
            "name": f.metadata.name,
            "namespace": f.metadata.namespace,
        },
        "spec": f.spec,
    });
    let mut doc = doc;
    // In External mode the fleet file leaves members out, and the `/scale` writer sets
    // it live (the CRD bounds it there): a live value is not a problem of the file.
    if f.spec.capacity_mode() == Some(CapacityMode::External)
        && let Some(spec) = doc["spec"].as_object_mut()
    {
        spec.remove("members");
    }
    // JSON is YAML; the generator's reader keeps positions we do not need here.
    let text = doc.to_string();
    match celld_gen::load::load_str(std::path::Path::new("live"), &text) {
        Ok(_) => Vec::new(),
        Err(diags) => diags
            .into_iter()
            .map(|d| {
                let mut line = String::new();
                if !d.field.is_empty() {
                    line.push_str(&d.field);
                    line.push_str(": ");
                }
                line.push_str(&d.message);
                if !d.expected.is_empty() {
                    line.push_str(&format!(" (expected {})", d.expected));
                }
                line
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::problems;
    use celld_gen::api::CelldFleet;

    fn fleet(capacity_and_members: &str) -> CelldFleet {
        let text = format!(
            "apiVersion: fleet.celld.dev/v1alpha1
kind: CelldFleet
metadata: {{name: ext, namespace: apps}}
spec:
  identity: lhdvnr58raah9qlzfdyocqdy8i
  profile: Bucket
  runtimeImage: ghcr.io/ewhauser/celld@sha256:{digest}
  serviceAccountName: lobby
  storage: {{bucket: apps-ext, region: us-east-1}}
  placement: {{zones: [us-east-1a, us-east-1b, us-east-1c]}}
{capacity_and_members}",
            digest = "ab".repeat(32)
        );
        match celld_gen::load::load_str(std::path::Path::new("t.yaml"), &text) {
            Ok(f) => f,
            Err(d) => panic!("test fleet invalid: {d:?}"),
        }
    }

    /// A `/scale` write sets spec.members of an External fleet: still valid live (it
    /// was not, and the healer stopped acting on the fleet at its autoscaler's first write).
    #[test]
    fn external_fleet_with_members_written_by_scale_is_valid_live() {
        let mut f = fleet("  capacity: {mode: External, minMembers: 3, maxMembers: 6}\n");
        assert!(problems(&f).is_empty());
        f.spec.members = Some(4);
        assert_eq!(problems(&f), Vec::<String>::new());
    }

    /// Without External mode, members is still checked.
    #[test]
    fn manual_fleet_members_are_still_checked() {
        let mut f = fleet("  members: 3\n");
        f.spec.members = Some(2);
        assert!(problems(&f).iter().any(|p| p.starts_with("spec.members")));
    }
}
