//! The live spec, checked by exactly the validation `celld-gen check` runs
//! ([`celld_api::validate::validate_live`]), so the healer reports the same messages and
//! never acts on a fleet the generator would refuse (the CRD schema cannot express every
//! rule, and a fleet may predate a rule).

use celld_api::CelldFleet;
use celld_api::validate::validate_live;

/// One line per problem (`field: what is wrong (expected ...)`); empty when valid.
pub fn problems(f: &CelldFleet) -> Vec<String> {
    match validate_live(f) {
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
    use celld_api::CelldFleet;

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
        let f: CelldFleet = serde_saphyr::from_str(&text).expect("the test fleet is YAML");
        assert_eq!(
            problems(&f),
            Vec::<String>::new(),
            "the test fleet is valid"
        );
        f
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
