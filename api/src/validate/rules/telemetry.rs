//! `spec.telemetry`, and the egress destination shape it shares with storage endpoints.

use super::Checker;
use crate::url::{HttpUrl, UrlShape};
use crate::validate::formats::*;
use crate::{CelldFleet, Egress, defaults};

/// An egress destination: exactly one of a single-host CIDR or Pod labels; a namespace
/// only with Pod labels; a CIDR must equal the URL's host when that host is an IP.
pub fn check_egress(c: &mut Checker<'_>, e: &Egress, url_host: &str, field: &str) {
    match (&e.cidr, &e.pod_labels) {
        (Some(_), Some(_)) | (None, None) => c.fail(
            field,
            "the egress destination needs exactly one of cidr or podLabels",
            "cidr: <ip>/32, or podLabels (and optionally namespace)",
        ),
        (Some(cidr), None) => match single_host_cidr(cidr) {
            None => c.fail(
                &format!("{field}.cidr"),
                format!("`{cidr}` does not name exactly one address"),
                "an address with /32 (IPv4) or /128 (IPv6)",
            ),
            Some(ip) => {
                let host = url_host.trim_start_matches('[').trim_end_matches(']');
                if let Ok(url_ip) = host.parse::<std::net::IpAddr>()
                    && url_ip != ip
                {
                    c.fail(
                        &format!("{field}.cidr"),
                        format!("`{cidr}` is not the address in the URL ({host})"),
                        format!("{host}/32"),
                    );
                }
            }
        },
        (None, Some(labels)) => {
            let b = defaults::POD_LABELS_BOUNDS;
            if !b.contains(labels.len()) {
                c.fail(
                    &format!("{field}.podLabels"),
                    format!("{} labels listed", labels.len()),
                    format!("{} to {} labels", b.min, b.max),
                );
            }
            for (k, v) in labels {
                c.require(
                    is_qualified_name(k) && is_label_value(v),
                    &format!("{field}.podLabels.{k}"),
                    format!("`{k}: {v}` is not a valid label"),
                    "a label key and value as Kubernetes accepts them",
                );
            }
        }
    }
    if let Some(ns) = &e.namespace {
        if e.pod_labels.is_none() {
            c.fail(
                &format!("{field}.namespace"),
                "namespace only applies with podLabels",
                "remove namespace, or select the destination by podLabels",
            );
        }
        c.require(
            is_dns_label(ns, defaults::MAX_DNS_LABEL_LENGTH),
            &format!("{field}.namespace"),
            format!("`{ns}` is not a valid namespace"),
            "a DNS label",
        );
    }
}

pub fn check(c: &mut Checker<'_>, fleet: &CelldFleet) {
    let Some(t) = &fleet.spec.telemetry else {
        return;
    };
    match HttpUrl::parse(&t.collector_url, UrlShape::Base) {
        Err(_) => c.fail(
            "spec.telemetry.collectorURL",
            format!("`{}` is not an HTTP(S) base URL", t.collector_url),
            "http(s)://host[:port][/path] without credentials, query or fragment",
        ),
        Ok(url) => check_egress(c, &t.egress, url.host(), "spec.telemetry.egress"),
    }
    let ratio = t.sampler.is_some_and(|s| s.takes_ratio());
    match &t.sampler_arg {
        Some(arg) => {
            if !ratio {
                c.fail(
                    "spec.telemetry.samplerArg",
                    "samplerArg only applies to the ratio samplers",
                    "sampler traceidratio or parentbased_traceidratio, or no samplerArg",
                );
            }
            let in_range = arg.parse::<f64>().is_ok_and(|v| (0.0..=1.0).contains(&v))
                && arg.bytes().all(|b| b.is_ascii_digit() || b == b'.');
            c.require(
                in_range,
                "spec.telemetry.samplerArg",
                format!("`{arg}` is not a ratio"),
                "a number from 0 to 1 written as a string, e.g. \"0.1\"",
            );
        }
        None if ratio => c.fail(
            "spec.telemetry.samplerArg",
            "the ratio samplers need a samplerArg",
            "a number from 0 to 1 written as a string, e.g. \"0.1\"",
        ),
        None => {}
    }
    c.range(
        t.flush_milliseconds,
        "spec.telemetry.flushMilliseconds",
        defaults::FLUSH_MILLISECONDS_BOUNDS,
    );
    c.range(
        t.flush_bytes,
        "spec.telemetry.flushBytes",
        defaults::FLUSH_BYTES_BOUNDS,
    );
    if let Some(r) = &t.headers_secret_key_ref {
        super::env::check_secret_ref(c, r, "spec.telemetry.headersSecretKeyRef");
    }
}
