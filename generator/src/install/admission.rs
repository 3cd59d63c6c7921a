//! The two ValidatingAdmissionPolicies (admissionregistration.k8s.io/v1, evaluated by the
//! API server itself: no webhook to run) and their bindings:
//!
//! - [`FLEET_POLICY`]: refuses DELETE of a CelldFleet unless its stored
//!   `spec.deletionProtection` is `false` (absent means protected,
//!   [`defaults::DELETION_PROTECTION`]). A GitOps prune, a cascading Application
//!   deletion, `kubectl delete` and the namespace controller all get the same answer.
//! - [`DISK_POLICY`]: refuses DELETE of a PersistentVolumeClaim that carries the fleet
//!   identity label, unless a ServiceAccount named `celld-healer` that holds the
//!   healer's disk-deletion permission in the claim's namespace asks (`rbac::DISK_DELETER`,
//!   asked of the API server's authorizer: exactly the healers of the installs serving
//!   that namespace, which delete claims only through their guarded rules: disk handoff,
//!   deliberate fleet deletion; never a namesake elsewhere), or an operator
//!   marked the claim with [`labels::DELETION_ALLOWED`]`: "true"`. Deleting a namespace
//!   makes the namespace controller delete every claim directly; with this policy the
//!   disks stay and the namespace stays Terminating until someone decides.
//!
//! Both fail closed (`failurePolicy: Fail`) and deny (`validationActions: [Deny]`). Both
//! are the same whatever the install's options, so several installs (each serving its
//! own namespaces) apply the same objects and never undo each other.
//!
//! And, on Kubernetes 1.36 and newer, one MutatingAdmissionPolicy (GA in 1.36):
//!
//! - [`START_POLICY`]: a StatefulSet that celld-gen rendered (identity label and
//!   `app.kubernetes.io/managed-by: celld-gen`) and created at the API default (1) is
//!   created with `spec.replicas: 0` instead; a count written on purpose is kept.
//!   celld-gen never renders replicas, so without it the API server's default of 1 would
//!   start member 0 the moment Argo CD or Flux creates the workload, before the healer
//!   could see another fleet's claim already at `data-<fleet>-0` (rule G1). Starting at
//!   0, every member goes through the healer's growth rules. Only creation is mutated;
//!   the mutation is not attributed to the applying field manager (checked on the real
//!   API server), so the healer's unforced server-side apply of `spec.replicas` takes
//!   the field without a conflict and Git never owns it.
//!
//! And, on every minor, one more ValidatingAdmissionPolicy, bound per install like the
//! mutating one:
//!
//! - [`REPLICAS_POLICY`]: refuses creating a rendered fleet StatefulSet at the API
//!   default of 1 (before 1.36, [`crate::kubernetes::StartGuard::RenderedZero`], Git
//!   renders `replicas: 0`; one rendered for 1.36 or newer has none, and its first member
//!   would start before the healer vetted anything; from 1.36 on the mutating policy has
//!   made it 0 before validation runs), and refuses any change of a rendered fleet
//!   StatefulSet's `spec.replicas` except a healer's ([`from_a_healer`]). Argo CD and
//!   Flux create the workload at 0 and, under the ignore rules of the install bundle's
//!   examples, apply the live value from then on. Two writes it keeps out: an engine
//!   without those rules, which would write Git's 0 back on every sync and stop every
//!   member at once; and an engine's forced apply of a live value it read before the
//!   healer changed it (Argo CD copies ignored fields from its cache). Both fail their
//!   sync with a message that says what to add; their dry runs, which change nothing and
//!   are how both engines detect drift, pass. The `/scale` subresource is not matched:
//!   `kubectl scale` stays a person's deliberate act.

use serde_json::{Value, json};

use super::InstallOptions;
use crate::api::{defaults, labels};

/// Name of the policy (and binding) that protects CelldFleets.
pub const FLEET_POLICY: &str = "celld-fleet-deletion-protection";
/// Name of the policy (and binding) that protects fleet disks.
pub const DISK_POLICY: &str = "celld-fleet-disk-protection";
/// Name of the mutating policy (and binding) that creates fleet StatefulSets at 0.
pub const START_POLICY: &str = "celld-fleet-start-at-zero";
/// Name of the policy (and binding) that keeps `spec.replicas` of fleet StatefulSets
/// the healer's where Git renders it (Kubernetes before 1.36).
pub const REPLICAS_POLICY: &str = "celld-fleet-replicas";

const API_VERSION: &str = "admissionregistration.k8s.io/v1";

/// A CEL string literal (single-quoted) holding `s`.
fn lit(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// CEL: the request comes from a healer: a ServiceAccount named `celld-healer` that
/// also holds the healer's disk-deletion permission in the claim's namespace
/// (`rbac::DISK_DELETER`, which each install grants its own healer where it serves).
/// Both halves matter: the name alone would let any namesake through, and the
/// permission alone would let through every requester with wildcard rights (cluster
/// administrators, the namespace controller), the very deletions the policy stops. The
/// same rule for every install, so a second install never takes the exemption away from
/// the first healer.
pub fn from_a_healer() -> String {
    let (group, resource, sub, verb) = crate::api::rbac::DISK_DELETER;
    format!(
        "request.userInfo.username.startsWith('system:serviceaccount:') && \
         request.userInfo.username.endsWith({}) && \
         authorizer.group({}).resource({}).subresource({}).namespace(request.namespace).check({}).allowed()",
        lit(&format!(":{}", labels::HEALER_NAME)),
        lit(group),
        lit(resource),
        lit(sub),
        lit(verb)
    )
}

/// CEL: whether the stored fleet may be deleted (protection off; absent means the default).
pub fn fleet_deletable() -> String {
    format!(
        "(has(oldObject.spec.deletionProtection) ? oldObject.spec.deletionProtection : {}) == false",
        defaults::DELETION_PROTECTION
    )
}

/// CEL: whether the stored claim carries the operator's deletion mark.
pub fn claim_marked() -> String {
    let key = lit(labels::DELETION_ALLOWED);
    format!(
        "has(oldObject.metadata.annotations) && {key} in oldObject.metadata.annotations && \
         oldObject.metadata.annotations[{key}] == {}",
        lit(labels::DELETION_ALLOWED_VALUE)
    )
}

fn fleet_message() -> String {
    let ns = "oldObject.metadata.namespace";
    let name = "oldObject.metadata.name";
    let patch = r#"{"spec":{"deletionProtection":false}}"#;
    [
        lit("CelldFleet "),
        ns.into(),
        lit("/"),
        name.into(),
        lit(
            " is protected from deletion (spec.deletionProtection is absent or true): deleting it \
             would remove its members and every disk. To delete it on purpose, set \
             spec.deletionProtection: false in Git (or kubectl patch celldfleet ",
        ),
        name.into(),
        lit(" -n "),
        ns.into(),
        lit(&format!(
            " --type=merge -p '{patch}' where nothing syncs it), let it sync, then delete it."
        )),
    ]
    .join(" + ")
}

fn disk_message() -> String {
    let ns = "oldObject.metadata.namespace";
    let name = "oldObject.metadata.name";
    [
        lit("PersistentVolumeClaim "),
        ns.into(),
        lit("/"),
        name.into(),
        lit(" is a disk of the celld fleet with identity "),
        format!("oldObject.metadata.labels[{}]", lit(labels::IDENTITY)),
        lit(
            ": only celld-healer deletes fleet disks. To delete the whole fleet, set \
             spec.deletionProtection: false on its CelldFleet and delete the CelldFleet (the \
             healer deletes its disks in order). To delete this one claim by hand: kubectl \
             annotate pvc ",
        ),
        name.into(),
        lit(" -n "),
        ns.into(),
        lit(&format!(
            " {}={}, then delete it. A namespace being deleted stays Terminating until then.",
            labels::DELETION_ALLOWED,
            labels::DELETION_ALLOWED_VALUE
        )),
    ]
    .join(" + ")
}

fn binding(policy: &str) -> Value {
    json!({
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": policy},
        "spec": {"policyName": policy, "validationActions": ["Deny"]},
    })
}

/// The fleet policy.
pub fn fleet_policy() -> Value {
    json!({
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": FLEET_POLICY},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [{
                    "apiGroups": [labels::GROUP],
                    "apiVersions": ["*"],
                    "operations": ["DELETE"],
                    "resources": ["celldfleets"],
                }],
            },
            "validations": [{
                "expression": fleet_deletable(),
                "messageExpression": fleet_message(),
                "reason": "Forbidden",
            }],
        },
    })
}

/// The disk policy, exempting the healers.
pub fn disk_policy() -> Value {
    json!({
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": DISK_POLICY},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [{
                    "apiGroups": [""],
                    "apiVersions": ["v1"],
                    "operations": ["DELETE"],
                    "resources": ["persistentvolumeclaims"],
                }],
                // Only fleet disks are looked at; other claims never reach the rule.
                "objectSelector": {
                    "matchExpressions": [{"key": labels::IDENTITY, "operator": "Exists"}],
                },
            },
            "matchConditions": [{
                "name": "not-the-healer",
                "expression": format!("!({})", from_a_healer()),
            }],
            "validations": [{
                "expression": claim_marked(),
                "messageExpression": disk_message(),
                "reason": "Forbidden",
            }],
        },
    })
}

/// CEL: the object is a workload celld-gen rendered.
pub fn rendered_workload() -> String {
    rendered_workload_in("object")
}

/// CEL: `var` (`object` or `oldObject`) is a workload celld-gen rendered.
fn rendered_workload_in(var: &str) -> String {
    format!(
        "has({var}.metadata.labels) && {id} in {var}.metadata.labels && \
         {mb} in {var}.metadata.labels && {var}.metadata.labels[{mb}] == {v}",
        id = lit(labels::IDENTITY),
        mb = lit(labels::MANAGED_BY),
        v = lit(labels::MANAGED_BY_VALUE),
    )
}

/// CEL: the StatefulSet arrives with the API server's default replica count.
pub const API_DEFAULT_REPLICAS: &str = "!has(object.spec.replicas) || object.spec.replicas == 1";

/// The mutating policy: fleet StatefulSets are created with no member.
pub fn start_policy() -> Value {
    json!({
        "apiVersion": API_VERSION,
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": START_POLICY},
        "spec": {
            "failurePolicy": "Fail",
            "reinvocationPolicy": "Never",
            "matchConstraints": {
                "resourceRules": [{
                    "apiGroups": ["apps"],
                    "apiVersions": ["v1"],
                    "operations": ["CREATE"],
                    "resources": ["statefulsets"],
                }],
            },
            "matchConditions": [
                {"name": "rendered-by-celld-gen", "expression": rendered_workload()},
                // Defaulting runs before admission, so a StatefulSet created without
                // replicas (celld-gen never renders them) arrives with 1; a larger count
                // was written on purpose (a hand re-creation) and is kept.
                {"name": "at-the-api-default", "expression": API_DEFAULT_REPLICAS},
            ],
            "mutations": [{
                "patchType": "ApplyConfiguration",
                "applyConfiguration": {
                    "expression": "Object{spec: Object.spec{replicas: 0}}",
                },
            }],
        },
    })
}

/// The mutating policy's binding, one per install (named after its namespace): with
/// `--watch-namespace`, only the served namespaces' StatefulSets start at 0 (no healer
/// grows them elsewhere). A second install adds its own binding instead of replacing the
/// first one's.
pub fn start_binding(o: &InstallOptions) -> Value {
    let mut spec = json!({"policyName": START_POLICY});
    if !o.watch_namespaces.is_empty() {
        spec["matchResources"] = json!({
            "namespaceSelector": {
                "matchExpressions": [{
                    "key": "kubernetes.io/metadata.name",
                    "operator": "In",
                    "values": o.watch_namespaces,
                }],
            },
        });
    }
    json!({
        "apiVersion": API_VERSION,
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": format!("{START_POLICY}.{}", o.namespace)},
        "spec": spec,
    })
}

fn replicas_create_message() -> String {
    [
        lit("StatefulSet "),
        "object.metadata.namespace".into(),
        lit("/"),
        "object.metadata.name".into(),
        lit(&format!(
            " would start a member before the healer vetted the fleet: it arrives without \
             spec.replicas (rendered for Kubernetes 1.36 or newer), and this cluster's \
             install bundle has no policy to start it at 0. Render the fleets with \
             --kubernetes-version for this cluster (or set {}), or write spec.replicas: 0.",
            crate::kubernetes::KUBERNETES_VERSION_ENV
        )),
    ]
    .join(" + ")
}

fn replicas_update_message() -> String {
    [
        lit("spec.replicas of fleet StatefulSet "),
        "object.metadata.namespace".into(),
        lit("/"),
        "object.metadata.name".into(),
        lit(
            " is the healer's: it grows and shrinks members one at a time, in order. This \
             write would set it from ",
        ),
        "string(oldObject.spec.replicas)".into(),
        lit(" to "),
        "string(object.spec.replicas)".into(),
        lit(
            ". Let your GitOps engine leave the field alone: the ignore rules of the Argo CD \
             Application (ignoreDifferences /spec/replicas with RespectIgnoreDifferences=true) \
             or of the Flux Kustomization (spec.ignore) that celld-gen install renders. To \
             change the member count, change spec.members of the CelldFleet.",
        ),
    ]
    .join(" + ")
}

/// The replicas policy: fleet StatefulSets start at 0 from Git, and only a healer
/// changes their `spec.replicas` ([`REPLICAS_POLICY`]).
pub fn replicas_policy() -> Value {
    json!({
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": REPLICAS_POLICY},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [{
                    "apiGroups": ["apps"],
                    "apiVersions": ["v1"],
                    "operations": ["CREATE", "UPDATE"],
                    "resources": ["statefulsets"],
                }],
            },
            "matchConditions": [
                // The stored object's labels too: an update that drops them cannot take
                // the replicas with it.
                {"name": "rendered-by-celld-gen", "expression": format!(
                    "({}) || (request.operation == 'UPDATE' && ({}))",
                    rendered_workload(),
                    rendered_workload_in("oldObject")
                )},
            ],
            "validations": [
                {
                    // As the mutating policy on 1.36: the API default (defaulting runs
                    // before admission) is refused, a count written on purpose kept.
                    "expression": format!("request.operation != 'CREATE' || !({API_DEFAULT_REPLICAS})"),
                    "messageExpression": replicas_create_message(),
                    "reason": "Forbidden",
                },
                {
                    // A dry run changes nothing, and it is how Argo CD and Flux detect
                    // drift (Git's 0 against the live count, which their ignore rules
                    // then leave out of the comparison): refusing it would fail every
                    // diff; the real write is refused.
                    "expression": format!(
                        "request.operation != 'UPDATE' || \
                         (has(request.dryRun) && request.dryRun) || \
                         (has(object.spec.replicas) ? object.spec.replicas : 1) == \
                         (has(oldObject.spec.replicas) ? oldObject.spec.replicas : 1) || \
                         ({})",
                        from_a_healer()
                    ),
                    "messageExpression": replicas_update_message(),
                    "reason": "Forbidden",
                },
            ],
        },
    })
}

/// The replicas policy's binding, one per install like [`start_binding`]: with
/// `--watch-namespace`, only the served namespaces' StatefulSets (no healer changes
/// replicas elsewhere).
pub fn replicas_binding(o: &InstallOptions) -> Value {
    let mut b = start_binding(o);
    b["kind"] = json!("ValidatingAdmissionPolicyBinding");
    b["metadata"]["name"] = json!(format!("{REPLICAS_POLICY}.{}", o.namespace));
    b["spec"]["policyName"] = json!(REPLICAS_POLICY);
    b["spec"]["validationActions"] = json!(["Deny"]);
    b
}

/// The policies and their bindings, as (file name, object), in apply order. The replicas
/// policy on every minor (it keeps a stale count out on 1.36 and newer too, such as an
/// engine's forced apply of the live value it read before the healer changed it); the
/// mutating start policy where the cluster serves it.
pub fn objects(o: &InstallOptions) -> Vec<(String, Value)> {
    let mut v = vec![
        (
            "fleet-deletion-protection-policy.yaml".into(),
            fleet_policy(),
        ),
        (
            "fleet-deletion-protection-binding.yaml".into(),
            binding(FLEET_POLICY),
        ),
        ("disk-protection-policy.yaml".into(), disk_policy()),
        ("disk-protection-binding.yaml".into(), binding(DISK_POLICY)),
    ];
    if o.kubernetes.start_guard() == crate::kubernetes::StartGuard::MutatingPolicy {
        v.push(("start-at-zero-policy.yaml".into(), start_policy()));
        v.push(("start-at-zero-binding.yaml".into(), start_binding(o)));
    }
    v.push(("replicas-policy.yaml".into(), replicas_policy()));
    v.push(("replicas-binding.yaml".into(), replicas_binding(o)));
    v
}
