//! The healer's check of its own permissions at start: does it hold more than its RBAC
//! table ([`super::rbac::RULES`]) grants?
//!
//! After an upgrade that narrowed the table (or an install with `--watch-namespace`
//! over an older cluster-wide one), the old ClusterRole and its binding may stay behind
//! and keep granting writes the healer no longer needs. The healer cannot remove them,
//! but it can tell: at start it asks the API server what it may do
//! (`SelfSubjectRulesReview`, which every authenticated user may create) in each
//! namespace it serves and in its lease namespace, compares the answer with the table,
//! and reports what is granted beyond it: in the log, as
//! `celld_healer_excess_permissions` (the number of (group, resource, verb) grants beyond
//! the table) and as a Warning Event (`ExcessPermissions`) on its Lease. A review the API
//! server answers as incomplete, or one that fails, is logged and changes nothing.
//!
//! The checks are reads about itself: they never hold back healing.

use std::collections::BTreeSet;

use k8s_openapi::api::authorization::v1::{
    ResourceRule, SelfSubjectRulesReview, SelfSubjectRulesReviewSpec,
};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::PostParams;
use kube::{Api, Client};
use tracing::{info, warn};

use super::rbac::{Scope, Triple, triples};
use super::served::Served;
use celld_api::healer_flags::MetricsAuth;

/// Grants the API server's default bindings give every authenticated user
/// (`system:basic-user`) or every ServiceAccount (`system:cluster-trust-bundle-discovery`,
/// from Kubernetes 1.37 on): not the healer's excess. Only the verbs they grant.
const EVERYONE: &[(&str, &str, &[&str])] = &[
    (
        "authorization.k8s.io",
        "selfsubjectaccessreviews",
        &["create"],
    ),
    (
        "authorization.k8s.io",
        "selfsubjectrulesreviews",
        &["create"],
    ),
    ("authentication.k8s.io", "selfsubjectreviews", &["create"]),
    (
        "certificates.k8s.io",
        "clustertrustbundles",
        &["get", "list", "watch"],
    ),
];

/// The namespaces reviewed, each with the scopes of the table granted there.
pub fn reviewed(served: &Served, lease_namespace: &str) -> Vec<(String, Vec<Scope>)> {
    let all = [Scope::ClusterRead, Scope::Served, Scope::LeaseNamespace];
    match served {
        // Watching every namespace, the served rules are cluster-wide: one review, in
        // the lease namespace, shows them all.
        Served::All => vec![(lease_namespace.to_string(), all.to_vec())],
        Served::Only(nss) => {
            let mut v: Vec<(String, Vec<Scope>)> = nss
                .iter()
                .map(|ns| {
                    let mut scopes = vec![Scope::ClusterRead, Scope::Served, Scope::ServedBinding];
                    if ns == lease_namespace {
                        scopes.push(Scope::LeaseNamespace);
                    }
                    (ns.clone(), scopes)
                })
                .collect();
            if !nss.contains(lease_namespace) {
                v.push((
                    lease_namespace.to_string(),
                    vec![Scope::ClusterRead, Scope::LeaseNamespace],
                ));
            }
            v
        }
    }
}

/// The grants of `rules` beyond `expected`: wildcards (`*` group, resource or verb) are
/// excess as written, since they grant whatever exists.
pub fn excess(rules: &[ResourceRule], expected: &[Triple]) -> BTreeSet<Triple> {
    let expected: BTreeSet<&Triple> = expected.iter().collect();
    let mut out = BTreeSet::new();
    for r in rules {
        let groups = r.api_groups.clone().unwrap_or_default();
        let resources = r.resources.clone().unwrap_or_default();
        for g in &groups {
            for res in &resources {
                for verb in &r.verbs {
                    if EVERYONE
                        .iter()
                        .any(|(eg, er, ev)| eg == g && er == res && ev.contains(&verb.as_str()))
                    {
                        continue;
                    }
                    // A grant limited to named objects still grants: count it as written.
                    let t = (g.clone(), res.clone(), verb.clone());
                    if !expected.contains(&t) {
                        out.insert(t);
                    }
                }
            }
        }
    }
    out
}

/// Reviews each namespace of [`reviewed`] and returns what is granted beyond the table,
/// as `group/resource verb in namespace` lines.
pub async fn check(
    client: &Client,
    served: &Served,
    metrics_auth: MetricsAuth,
    lease_namespace: &str,
) -> Vec<String> {
    let api: Api<SelfSubjectRulesReview> = Api::all(client.clone());
    let mut found = BTreeSet::new();
    for (ns, mut scopes) in reviewed(served, lease_namespace) {
        // Cluster-wide, so seen in every review; granted only with the flag.
        if metrics_auth == MetricsAuth::Kubernetes {
            scopes.push(Scope::MetricsAuth);
        }
        let review = SelfSubjectRulesReview {
            spec: SelfSubjectRulesReviewSpec {
                namespace: Some(ns.clone()),
            },
            ..SelfSubjectRulesReview::default()
        };
        let answer = match api.create(&PostParams::default(), &review).await {
            Ok(a) => a,
            Err(e) => {
                warn!(namespace = %ns, error = %e, "could not review this healer's own permissions");
                continue;
            }
        };
        let Some(status) = answer.status else {
            continue;
        };
        if status.incomplete {
            info!(namespace = %ns, why = ?status.evaluation_error, "the review of this healer's own permissions is incomplete (an authorizer that cannot list rules): not compared");
            continue;
        }
        for (g, r, v) in excess(&status.resource_rules, &triples(&scopes)) {
            let g = if g.is_empty() { "core".to_string() } else { g };
            found.insert(format!("{g}/{r} {v} in {ns}"));
        }
    }
    found.into_iter().collect()
}

/// [`check`] at start, then its report: the log and `celld_healer_excess_permissions`
/// from every replica, the `ExcessPermissions` Event on the Lease (`lease`: namespace and
/// name) from the leader only, once it leads (a standby writes nothing).
pub async fn report(
    client: Client,
    served: Served,
    metrics_auth: MetricsAuth,
    metrics: std::sync::Arc<super::metrics::Metrics>,
    gate: super::leader::Gate,
    identity: String,
    lease: (String, String),
) {
    let (lease_ns, lease_name) = lease;
    let extra = check(&client, &served, metrics_auth, &lease_ns).await;
    metrics.excess_permissions.set(extra.len() as i64);
    if extra.is_empty() {
        info!("this healer's permissions are those of its RBAC table, or fewer");
        return;
    }
    warn!(excess = %extra.join(", "), "this healer holds permissions beyond its RBAC table");
    let note = format!(
        "This healer holds {} permissions beyond its RBAC table, maybe left by an older install: {}. Remove the roles or bindings that grant them.",
        extra.len(),
        extra.join(", ")
    );
    let mut leading = gate.subscribe();
    while !gate.may_act() {
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), leading.changed()).await;
    }
    let regarding = k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some(<Lease as k8s_openapi::Resource>::API_VERSION.into()),
        kind: Some(<Lease as k8s_openapi::Resource>::KIND.into()),
        namespace: Some(lease_ns),
        name: Some(lease_name),
        ..Default::default()
    };
    super::events::Events::new(client, &identity, metrics)
        .publish_regarding(regarding, true, "ExcessPermissions", "Report", note)
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> ResourceRule {
        ResourceRule {
            api_groups: Some(groups.iter().map(|s| s.to_string()).collect()),
            resources: Some(resources.iter().map(|s| s.to_string()).collect()),
            verbs: verbs.iter().map(|s| s.to_string()).collect(),
            resource_names: None,
        }
    }

    #[test]
    fn exactly_the_table_is_no_excess() {
        let mut scopes = vec![
            Scope::ClusterRead,
            Scope::Served,
            Scope::LeaseNamespace,
            Scope::ServedBinding,
        ];
        let rules: Vec<ResourceRule> = super::super::rbac::RULES
            .iter()
            .map(|r| rule(&[r.group], r.resources, r.verbs))
            .chain([rule(
                &["authorization.k8s.io"],
                &["selfsubjectrulesreviews"],
                &["create"],
            )])
            .collect();
        // The metrics reviews are the healer's own only with --metrics-auth kubernetes.
        let without = excess(&rules, &triples(&scopes));
        assert_eq!(
            without
                .iter()
                .map(|(_, r, _)| r.as_str())
                .collect::<Vec<_>>(),
            ["tokenreviews", "subjectaccessreviews"],
            "{without:?}"
        );
        scopes.push(Scope::MetricsAuth);
        assert!(excess(&rules, &triples(&scopes)).is_empty());
    }

    /// What the API server's default bindings give every ServiceAccount is not excess,
    /// but only for the verbs they give.
    #[test]
    fn the_defaults_every_service_account_holds_are_not_excess() {
        let rules = [
            rule(
                &["authentication.k8s.io"],
                &["selfsubjectreviews"],
                &["create"],
            ),
            rule(
                &["certificates.k8s.io"],
                &["clustertrustbundles"],
                &["get", "list", "watch"],
            ),
        ];
        assert!(excess(&rules, &[]).is_empty());
        let more = [rule(
            &["certificates.k8s.io"],
            &["clustertrustbundles"],
            &["get", "create"],
        )];
        assert_eq!(
            excess(&more, &[]),
            BTreeSet::from([(
                "certificates.k8s.io".to_string(),
                "clustertrustbundles".to_string(),
                "create".to_string()
            )])
        );
    }

    #[test]
    fn a_left_over_grant_or_a_wildcard_is_excess() {
        let scopes = [Scope::ClusterRead, Scope::Served];
        let rules = [
            rule(&["apps"], &["statefulsets"], &["list", "watch", "delete"]),
            rule(&[""], &["secrets"], &["get"]),
            rule(&["*"], &["*"], &["*"]),
        ];
        let e = excess(&rules, &triples(&scopes));
        assert!(e.contains(&("".into(), "secrets".into(), "get".into())));
        assert!(e.contains(&("*".into(), "*".into(), "*".into())));
        assert!(!e.contains(&("apps".into(), "statefulsets".into(), "list".into())));
    }

    #[test]
    fn every_served_namespace_and_the_lease_namespace_are_reviewed() {
        let only = Served::new(&["a".into(), "b".into()]).unwrap();
        let r = reviewed(&only, "celld-system");
        assert_eq!(
            r.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
            ["a", "b", "celld-system"]
        );
        assert!(!r[0].1.contains(&Scope::LeaseNamespace));
        assert!(
            r[0].1.contains(&Scope::ServedBinding),
            "its own RoleBinding there"
        );
        assert_eq!(
            r[2].1,
            [Scope::ClusterRead, Scope::LeaseNamespace],
            "no served rules in the lease namespace"
        );
        assert_eq!(reviewed(&Served::All, "celld-system").len(), 1);
    }
}
