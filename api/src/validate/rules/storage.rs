//! `spec.storage`: bucket, region, prefix, endpoint, disks.

use super::Checker;
use crate::url::{HttpUrl, UrlShape};
use crate::validate::formats::*;
use crate::{CelldFleet, Profile, Storage, defaults};

/// Whether `storage.region` passes [`check`]: an AWS region for Amazon S3 (no
/// endpoint), any cloud's region name with an S3-compatible endpoint.
pub fn region_ok(s: &Storage) -> bool {
    if s.endpoint.is_none() {
        region_kind(&s.region) == Some(RegionKind::Aws)
    } else {
        is_region(&s.region)
    }
}

/// `spec.credentialsAgent`.
fn check_credentials_agent(c: &mut Checker<'_>, fleet: &CelldFleet) {
    let Some(a) = &fleet.spec.credentials_agent else {
        return;
    };
    if a.enabled == Some(false) && (a.cidr.is_some() || a.port.is_some()) {
        c.fail(
            "spec.credentialsAgent.enabled",
            "cidr and port describe an agent that `enabled: false` turns off",
            "either enabled: false alone, or cidr and port without enabled: false",
        );
    }
    if let Some(cidr) = &a.cidr
        && single_host_cidr(cidr).is_none()
    {
        c.fail(
            "spec.credentialsAgent.cidr",
            format!("`{cidr}` does not name exactly one address"),
            "an address with /32 (IPv4) or /128 (IPv6), e.g. 169.254.170.23/32",
        );
    }
    c.range(a.port, "spec.credentialsAgent.port", defaults::PORT_BOUNDS);
}

pub fn check(c: &mut Checker<'_>, fleet: &CelldFleet) {
    check_credentials_agent(c, fleet);
    let s = &fleet.spec.storage;
    c.require(
        is_bucket(&s.bucket),
        "spec.storage.bucket",
        format!("`{}` is not a valid bucket name", s.bucket),
        "3 to 63 lowercase letters, digits or hyphens, starting and ending with a letter or digit",
    );
    // Without an endpoint the bucket is on Amazon S3, so only AWS names will do; an
    // S3-compatible store (GCS, MinIO) may take Google Cloud or Azure names.
    if s.endpoint.is_none() {
        c.require(
            region_ok(s),
            "spec.storage.region",
            format!("`{}` is not a region name of Amazon S3", s.region),
            "an AWS region such as us-east-1 or eu-central-2 (without storage.endpoint the \
             bucket is on Amazon S3; Google Cloud and Azure names need storage.endpoint)",
        );
    } else {
        c.require(
            region_ok(s),
            "spec.storage.region",
            format!("`{}` is not a region name", s.region),
            "a region such as us-east-1 (AWS), us-central1 (Google Cloud) or eastus (Azure)",
        );
    }
    if let Some(p) = &s.prefix {
        c.require(
            is_dns_label(p, defaults::MAX_DNS_LABEL_LENGTH),
            "spec.storage.prefix",
            format!("`{p}` is not a valid prefix"),
            "a DNS label of at most 63 characters",
        );
    }
    if let Some(e) = &s.endpoint {
        match HttpUrl::parse(&e.url, UrlShape::Origin) {
            Err(_) => c.fail(
                "spec.storage.endpoint.url",
                format!("`{}` is not an HTTP(S) origin", e.url),
                "http:// or https://, a host and an optional port, no path, query or credentials",
            ),
            Ok(url) => {
                if let Some(eg) = &e.egress {
                    super::telemetry::check_egress(
                        c,
                        eg,
                        url.host(),
                        "spec.storage.endpoint.egress",
                    );
                }
            }
        }
        c.require(
            is_dns_subdomain(&e.credentials_secret_name),
            "spec.storage.endpoint.credentialsSecretName",
            format!("`{}` is not a valid Secret name", e.credentials_secret_name),
            "a Secret in the fleet's namespace with keys accessKeyId and secretAccessKey",
        );
    }
    match (fleet.spec.profile, &s.storage_class_name) {
        (Profile::PersistentFleet, None) => c.fail(
            "spec.storage.storageClassName",
            "a PersistentFleet needs a StorageClass for its members' disks",
            "a class with volumeBindingMode WaitForFirstConsumer and reclaimPolicy Delete, e.g. gp3",
        ),
        (Profile::PersistentFleet, Some(sc)) => c.require(
            is_dns_subdomain(sc),
            "spec.storage.storageClassName",
            format!("`{sc}` is not a valid StorageClass name"),
            "a DNS subdomain",
        ),
        (Profile::Bucket, Some(_)) => c.fail(
            "spec.storage.storageClassName",
            "a Bucket fleet keeps no disks, so a StorageClass would be ignored",
            "remove storageClassName, or use profile PersistentFleet",
        ),
        (Profile::Bucket, None) => {}
    }
    c.range(
        s.size_gib,
        "spec.storage.sizeGiB",
        defaults::SIZE_GIB_BOUNDS,
    );
}
