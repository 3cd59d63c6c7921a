//! The live spec, checked by exactly the validation `celld-gen check` runs
//! ([`celld_api::validate::validate_live`]), so the healer reports the same messages and
//! never acts on a fleet the generator would refuse (the CRD schema cannot express every
//! rule, and a fleet may predate a rule).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use celld_api::validate::validate_live;
use celld_api::{CelldFleet, CelldFleetSpec};

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

/// What one fleet's problems were computed from (exactly what [`validate_live`] reads),
/// and what they were.
struct Checked {
    name: Option<String>,
    namespace: Option<String>,
    spec: CelldFleetSpec,
    problems: Arc<[String]>,
}

impl Checked {
    fn of(&self, f: &CelldFleet) -> bool {
        self.name == f.metadata.name
            && self.namespace == f.metadata.namespace
            && self.spec == f.spec
    }
}

/// The problems of each live fleet's spec, remembered by fleet uid, so a reconcile does
/// not check an unchanged spec again. [`validate_live`] reads the fleet as a file (YAML,
/// with positions), and that was the largest single cost of a steady reconcile: a
/// twelfth of the healer's CPU at 100 fleets (`docs/performance.md`). An entry answers
/// only for the very name, namespace and spec it was computed from (compared whole, not
/// by `metadata.generation`), so it can never stand for another spec.
#[derive(Default)]
pub struct Remembered {
    by_uid: Mutex<HashMap<String, Checked>>,
}

impl Remembered {
    /// [`problems`] of `f`, from memory when its spec is the one last checked.
    pub fn problems(&self, f: &CelldFleet) -> Arc<[String]> {
        let uid = f.metadata.uid.clone().unwrap_or_default();
        if let Some(c) = self.by_uid.lock().expect("validity").get(&uid)
            && c.of(f)
        {
            return c.problems.clone();
        }
        let p: Arc<[String]> = problems(f).into();
        let checked = Checked {
            name: f.metadata.name.clone(),
            namespace: f.metadata.namespace.clone(),
            spec: f.spec.clone(),
            problems: p.clone(),
        };
        self.by_uid.lock().expect("validity").insert(uid, checked);
        p
    }

    /// Keeps the fleets whose uid `keep` keeps (the live ones).
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.by_uid
            .lock()
            .expect("validity")
            .retain(|uid, _| keep(uid));
    }

    /// How many fleets are remembered.
    pub fn len(&self) -> usize {
        self.by_uid.lock().expect("validity").len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
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

    /// A remembered answer is the answer for that very spec: a spec changed in place (same
    /// uid, with or without a new generation) is checked again, and so is a fleet under
    /// another uid; nothing of a forgotten fleet is kept.
    #[test]
    fn a_remembered_answer_is_only_for_the_spec_it_was_computed_from() {
        use super::Remembered;
        let m = Remembered::default();
        let mut f = fleet("  members: 3\n");
        f.metadata.uid = Some("uid-1".into());
        assert!(m.problems(&f).is_empty());
        // Invalid now, generation untouched: not the remembered "valid".
        f.spec.members = Some(2);
        assert_eq!(&*m.problems(&f), problems(&f).as_slice());
        assert!(!m.problems(&f).is_empty());
        // Back to valid.
        f.spec.members = Some(3);
        assert!(m.problems(&f).is_empty());
        // Another namespace is another check (the rules read it).
        let mut g = f.clone();
        g.metadata.namespace = Some("Not_A_Namespace".into());
        assert_eq!(&*m.problems(&g), problems(&g).as_slice());
        assert!(!m.problems(&g).is_empty());
        assert_eq!(m.len(), 1, "one entry per uid");
        m.retain(|uid| uid != "uid-1");
        assert!(m.is_empty());
    }
}
