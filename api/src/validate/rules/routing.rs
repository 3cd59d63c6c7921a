//! `spec.routing`: hostnames, the traffic source, and exactly one of gateway / ingress.

use std::collections::BTreeSet;

use super::Checker;
use crate::validate::formats::*;
use crate::{CelldFleet, defaults, labels};

pub fn check(c: &mut Checker<'_>, fleet: &CelldFleet) {
    let Some(r) = &fleet.spec.routing else { return };
    if !defaults::HOSTNAMES_BOUNDS.contains(r.hostnames.len()) {
        c.fail(
            "spec.routing.hostnames",
            format!("{} hostnames listed", r.hostnames.len()),
            format!(
                "{} to {} hostnames",
                defaults::HOSTNAMES_BOUNDS.min,
                defaults::HOSTNAMES_BOUNDS.max
            ),
        );
    }
    let mut seen = BTreeSet::new();
    for (i, h) in r.hostnames.iter().enumerate() {
        let field = format!("spec.routing.hostnames[{i}]");
        c.require(
            is_route_hostname(h),
            &field,
            format!("`{h}` is not a valid hostname"),
            "a lowercase DNS name, optionally starting with `*.`; not an IP address",
        );
        if !seen.insert(h.as_str()) {
            c.fail(
                &field,
                format!("`{h}` is listed twice"),
                "each hostname once",
            );
        }
    }
    c.require(
        is_dns_label(&r.source.namespace, defaults::MAX_DNS_LABEL_LENGTH),
        "spec.routing.source.namespace",
        format!("`{}` is not a valid namespace", r.source.namespace),
        "the namespace of the gateway or ingress controller Pods",
    );
    let n = r.source.pod_labels.len();
    let b = defaults::POD_LABELS_BOUNDS;
    if !b.contains(n) {
        c.fail(
            "spec.routing.source.podLabels",
            format!("{n} labels listed"),
            format!(
                "{} to {} labels that select the gateway or ingress controller Pods",
                b.min, b.max
            ),
        );
    }
    for (k, v) in &r.source.pod_labels {
        c.require(
            is_qualified_name(k) && is_label_value(v),
            &format!("spec.routing.source.podLabels.{k}"),
            format!("`{k}: {v}` is not a valid label"),
            "a label key and value as Kubernetes accepts them",
        );
    }
    match (&r.gateway, &r.ingress) {
        (Some(_), Some(_)) | (None, None) => c.fail(
            "spec.routing",
            "routing needs exactly one of gateway or ingress",
            "gateway: {name, namespace} or ingress: {className}",
        ),
        (Some(g), None) => {
            c.require(
                is_dns_subdomain(&g.name),
                "spec.routing.gateway.name",
                format!("`{}` is not a valid Gateway name", g.name),
                "a DNS subdomain",
            );
            if let Some(ns) = &g.namespace {
                c.require(
                    is_dns_label(ns, defaults::MAX_DNS_LABEL_LENGTH),
                    "spec.routing.gateway.namespace",
                    format!("`{ns}` is not a valid namespace"),
                    "a DNS label",
                );
            }
            if let Some(s) = &g.section_name {
                c.require(
                    is_dns_subdomain(s),
                    "spec.routing.gateway.sectionName",
                    format!("`{s}` is not a valid listener name"),
                    "a DNS subdomain naming a listener of the Gateway",
                );
            }
        }
        (None, Some(ing)) => {
            c.require(
                is_dns_subdomain(&ing.class_name),
                "spec.routing.ingress.className",
                format!("`{}` is not a valid IngressClass name", ing.class_name),
                "a DNS subdomain, e.g. nginx",
            );
            if let Some(t) = &ing.tls_secret_name {
                c.require(
                    is_dns_subdomain(t),
                    "spec.routing.ingress.tlsSecretName",
                    format!("`{t}` is not a valid Secret name"),
                    "a TLS Secret in the fleet's namespace",
                );
            }
            let annotations = ing.annotations.iter().flatten();
            let max = defaults::MAX_INGRESS_ANNOTATIONS;
            if ing.annotations.as_ref().is_some_and(|a| a.len() > max) {
                c.fail(
                    "spec.routing.ingress.annotations",
                    format!("more than {max} annotations"),
                    format!("at most {max}"),
                );
            }
            for (k, v) in annotations {
                let field = format!("spec.routing.ingress.annotations.{k}");
                if k.starts_with(&format!("{}/", labels::GROUP))
                    || k == "kubernetes.io/ingress.class"
                {
                    c.fail(
                        &field,
                        format!("`{k}` is reserved"),
                        "set the class with className; fleet.celld.dev/ keys belong to this project",
                    );
                } else {
                    c.require(
                        is_qualified_name(k),
                        &field,
                        format!("`{k}` is not a valid annotation key"),
                        "an optional DNS-subdomain prefix and `/`, then a name",
                    );
                }
                c.require(
                    v.len() <= 4096,
                    &field,
                    "the value is longer than 4096 bytes",
                    "a shorter value",
                );
            }
        }
    }
}
