//! The healer's Deployments: one, or one per shard (`--shards`), each with its command
//! line from [`celld_api::healer_flags`], hardened Pod, probes and anti-affinity.

use serde_json::{Value, json};

use super::{InstallOptions, METRICS_PORT, flags, healer_labels, labels, meta, selector};

/// One healer Deployment: the shard it serves (None: unsharded, every fleet).
#[derive(Clone, Copy)]
pub(super) struct Unit {
    shard: Option<flags::Shard>,
}

impl Unit {
    /// The Deployments of an install: one, or one per shard.
    pub(super) fn all(o: &InstallOptions) -> Vec<Unit> {
        if o.shards <= 1 {
            return vec![Unit { shard: None }];
        }
        (0..o.shards)
            .map(|index| Unit {
                shard: Some(flags::Shard {
                    index,
                    count: o.shards,
                }),
            })
            .collect()
    }

    /// `celld-healer`, or `celld-healer-<i>` for shard i.
    pub(super) fn name(&self) -> String {
        match self.shard {
            None => labels::HEALER_NAME.to_string(),
            Some(s) => format!("{}-{}", labels::HEALER_NAME, s.index),
        }
    }

    /// The bundle file of one of its objects: `healer/<kind>.yaml`, or
    /// `healer/<kind>-<i>.yaml` for shard i.
    pub(super) fn file(&self, kind: &str) -> String {
        match self.shard {
            None => format!("healer/{kind}.yaml"),
            Some(s) => format!("healer/{kind}-{}.yaml", s.index),
        }
    }

    /// Selects this unit's Pods only: Deployments must not share Pods.
    pub(super) fn selector(&self) -> Value {
        let mut s = selector();
        if let Some(shard) = self.shard {
            s[labels::HEALER_SHARD_LABEL] = json!(shard.index.to_string());
        }
        s
    }

    /// The labels of its Pods.
    fn pod_labels(&self) -> Value {
        let mut l = healer_labels();
        if let Some(shard) = self.shard {
            l[labels::HEALER_SHARD_LABEL] = json!(shard.index.to_string());
        }
        l
    }
}

/// The healer's command line, every flag named by [`celld_api::healer_flags`].
fn args(o: &InstallOptions, unit: Unit) -> Vec<String> {
    let mut a = vec![
        flags::arg(flags::METRICS_ADDR, &format!("0.0.0.0:{METRICS_PORT}")),
        flags::arg(flags::LOG_FORMAT, flags::LOG_FORMAT_JSON),
        flags::arg(flags::LEASE_NAMESPACE, &o.namespace),
        flags::MEMBER_REPLACEMENT_DELAY.arg(o.member_replacement_delay),
    ];
    if !o.watch_namespaces.is_empty() {
        a.push(flags::arg(flags::NAMESPACE, &o.watch_namespaces.join(",")));
    }
    if let Some(shard) = unit.shard {
        a.push(shard.arg());
    }
    if o.metrics_auth != flags::MetricsAuth::None {
        a.push(flags::arg(flags::METRICS_AUTH, o.metrics_auth.as_str()));
    }
    a
}

pub(super) fn deployment(o: &InstallOptions, unit: Unit) -> Value {
    let name = labels::HEALER_NAME;
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta(&unit.name(), Some(&o.namespace)),
        "spec": {
            "replicas": o.replicas,
            "selector": {"matchLabels": unit.selector()},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}},
            "template": {
                "metadata": {"labels": unit.pod_labels()},
                "spec": {
                    "serviceAccountName": name,
                    "automountServiceAccountToken": true,
                    "terminationGracePeriodSeconds": 30,
                    "securityContext": {
                        "runAsNonRoot": true,
                        "runAsUser": 65532,
                        "runAsGroup": 65532,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
                        "weight": 100,
                        "podAffinityTerm": {
                            "labelSelector": {"matchLabels": unit.selector()},
                            "topologyKey": "kubernetes.io/hostname",
                        },
                    }]}},
                    "containers": [{
                        "name": name,
                        "image": o.image,
                        "imagePullPolicy": "IfNotPresent",
                        "args": args(o, unit),
                        "env": [
                            {"name": flags::IDENTITY_ENV, "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}},
                            {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}},
                        ],
                        "ports": [{"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"}],
                        "readinessProbe": {
                            "httpGet": {"path": "/readyz", "port": "metrics", "scheme": o.metrics_auth.scheme()},
                            "periodSeconds": 5, "timeoutSeconds": 2, "failureThreshold": 3, "successThreshold": 1,
                        },
                        "livenessProbe": {
                            "httpGet": {"path": "/healthz", "port": "metrics", "scheme": o.metrics_auth.scheme()},
                            "periodSeconds": 10, "timeoutSeconds": 2, "failureThreshold": 6, "successThreshold": 1,
                        },
                        "resources": {
                            "requests": {"cpu": "50m", "memory": "64Mi"},
                            "limits": {"memory": "128Mi"},
                        },
                        "securityContext": {
                            "allowPrivilegeEscalation": false,
                            "readOnlyRootFilesystem": true,
                            "capabilities": {"drop": ["ALL"]},
                        },
                    }],
                },
            },
        },
    })
}
