//! Test table: every whole-number field with a range, where it sits in the CRD schema,
//! how to write it in a fleet file, and its [`Bounds`] constant. The install tests check
//! that the rendered CRD carries each bound; the validation tests check that
//! `celld-gen check` accepts exactly the same range.

use super::defaults::{self as d, Bounds};

/// An edit of a fleet file.
pub enum Edit {
    /// Append this text to the spec (two-space indent).
    Append(&'static str),
    /// Replace the first `.0` with `.1`.
    Replace(&'static str, &'static str),
}

impl Edit {
    /// `base` with the field set to `v`.
    pub fn apply(&self, base: &str, v: i64) -> String {
        match self {
            Edit::Append(t) => format!("{base}{}", t.replace("{v}", &v.to_string())),
            Edit::Replace(from, to) => {
                assert!(base.contains(from), "the base fleet has no {from:?}");
                base.replacen(from, &to.replace("{v}", &v.to_string()), 1)
            }
        }
    }
}

/// One bounded field.
pub struct Bounded {
    /// Path of the property below `spec` in the CRD schema, e.g. `capacity/minMembers`.
    pub schema_path: &'static str,
    /// The field in validation's diagnostics, e.g. `spec.capacity.minMembers`.
    pub field: &'static str,
    /// How to write the field into the validation tests' base fleet (`{v}`: the value).
    pub edit: Edit,
    /// The constant.
    pub min: i64,
    /// The constant.
    pub max: i64,
}

fn b32(b: Bounds<i32>) -> (i64, i64) {
    (b.min.into(), b.max.into())
}

fn b64(b: Bounds<i64>) -> (i64, i64) {
    (b.min, b.max)
}

/// Every bounded field.
pub fn bounded() -> Vec<Bounded> {
    let telemetry = "  telemetry:\n    collectorURL: http://otel.obs:4318\n    egress: {podLabels: {app: otel}}\n";
    let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
    let mut out = vec![
        Bounded {
            schema_path: "members",
            field: "spec.members",
            edit: Edit::Replace("members: 3", "members: {v}"),
            min: d::MEMBERS_BOUNDS.min.into(),
            max: d::MEMBERS_BOUNDS.max.into(),
        },
        Bounded {
            schema_path: "storage/sizeGiB",
            field: "spec.storage.sizeGiB",
            edit: Edit::Replace(
                "    storageClassName: gp3\n",
                "    storageClassName: gp3\n    sizeGiB: {v}\n",
            ),
            min: d::SIZE_GIB_BOUNDS.min.into(),
            max: d::SIZE_GIB_BOUNDS.max.into(),
        },
    ];
    let rows: Vec<(&str, &str, String, (i64, i64))> = vec![
        (
            "execution/maxResidentCells",
            "spec.execution.maxResidentCells",
            "  execution:\n    maxResidentCells: {v}\n".into(),
            b64(d::MAX_RESIDENT_CELLS_BOUNDS),
        ),
        (
            "execution/idleEvictSeconds",
            "spec.execution.idleEvictSeconds",
            "  execution:\n    idleEvictSeconds: {v}\n".into(),
            b64(d::IDLE_EVICT_SECONDS_BOUNDS),
        ),
        (
            "lifecycle/shutdownSeconds",
            "spec.lifecycle.shutdownSeconds",
            "  lifecycle:\n    shutdownSeconds: {v}\n".into(),
            b64(d::SHUTDOWN_SECONDS_BOUNDS),
        ),
        (
            "lifecycle/terminationGraceSeconds",
            "spec.lifecycle.terminationGraceSeconds",
            "  lifecycle:\n    terminationGraceSeconds: {v}\n".into(),
            b64(d::TERMINATION_GRACE_SECONDS_BOUNDS),
        ),
        (
            "pod/tolerations/[]/tolerationSeconds",
            "spec.pod.tolerations[0].tolerationSeconds",
            "  pod:\n    tolerations: [{key: a, operator: Exists, effect: NoExecute, tolerationSeconds: {v}}]\n".into(),
            b64(d::TOLERATION_SECONDS_BOUNDS),
        ),
        (
            "pod/nodeAffinity/preferredDuringSchedulingIgnoredDuringExecution/[]/weight",
            "spec.pod.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight",
            "  pod:\n    nodeAffinity:\n      preferredDuringSchedulingIgnoredDuringExecution:\n        - {weight: {v}, preference: {matchExpressions: [{key: a, operator: Exists}]}}\n".into(),
            b32(d::AFFINITY_WEIGHT_BOUNDS),
        ),
        (
            "telemetry/flushMilliseconds",
            "spec.telemetry.flushMilliseconds",
            format!("{telemetry}    flushMilliseconds: {{v}}\n"),
            b64(d::FLUSH_MILLISECONDS_BOUNDS),
        ),
        (
            "telemetry/flushBytes",
            "spec.telemetry.flushBytes",
            format!("{telemetry}    flushBytes: {{v}}\n"),
            b64(d::FLUSH_BYTES_BOUNDS),
        ),
    ];
    let capacity: Vec<(&str, Bounds<i32>)> = vec![
        ("minMembers", d::MEMBERS_BOUNDS),
        ("maxMembers", d::MEMBERS_BOUNDS),
        ("scaleOutStep", d::SCALE_OUT_STEP_BOUNDS),
        ("sampleIntervalSeconds", d::SAMPLE_INTERVAL_SECONDS_BOUNDS),
        ("maxAgeSeconds", d::MAX_AGE_SECONDS_BOUNDS),
        ("minWindowSeconds", d::MIN_WINDOW_SECONDS_BOUNDS),
        ("maxWindowSeconds", d::MAX_WINDOW_SECONDS_BOUNDS),
        ("minSamples", d::MIN_SAMPLES_BOUNDS),
        (
            "scaleOutStabilizationSeconds",
            d::SCALE_OUT_STABILIZATION_SECONDS_BOUNDS,
        ),
        (
            "scaleInStabilizationSeconds",
            d::SCALE_IN_STABILIZATION_SECONDS_BOUNDS,
        ),
        (
            "scaleOutCooldownSeconds",
            d::SCALE_OUT_COOLDOWN_SECONDS_BOUNDS,
        ),
        (
            "scaleInCooldownSeconds",
            d::SCALE_IN_COOLDOWN_SECONDS_BOUNDS,
        ),
        (
            "provisioningTimeoutSeconds",
            d::PROVISIONING_TIMEOUT_SECONDS_BOUNDS,
        ),
        (
            "redistributionObservationSeconds",
            d::REDISTRIBUTION_OBSERVATION_SECONDS_BOUNDS,
        ),
        ("cpuHighMillicores", d::CPU_HIGH_MILLICORES_BOUNDS),
        ("cpuLowMillicores", d::CPU_LOW_MILLICORES_BOUNDS),
        ("memoryHighMiB", d::MEMORY_HIGH_MIB_BOUNDS),
        ("memoryLowMiB", d::MEMORY_LOW_MIB_BOUNDS),
    ];
    out.extend(
        rows.into_iter()
            .map(|(schema_path, field, yaml, (min, max))| Bounded {
                schema_path,
                field,
                edit: Edit::Append(leak(yaml)),
                min,
                max,
            }),
    );
    for (name, b) in capacity {
        let (min, max) = b32(b);
        out.push(Bounded {
            schema_path: leak(format!("capacity/{name}")),
            field: leak(format!("spec.capacity.{name}")),
            edit: Edit::Append(leak(format!("  capacity:\n    {name}: {{v}}\n"))),
            min,
            max,
        });
    }
    out
}
