//! `spec.storage`: bucket, region, prefix, endpoint, disks.

use super::Checker;
use crate::api::{CelldFleet, Profile, defaults};
use crate::validate::formats::*;

pub fn check(c: &mut Checker<'_>, fleet: &CelldFleet) {
    let s = &fleet.spec.storage;
    c.require(
        is_bucket(&s.bucket),
        "spec.storage.bucket",
        format!("`{}` is not a valid bucket name", s.bucket),
        "3 to 63 lowercase letters, digits or hyphens, starting and ending with a letter or digit",
    );
    c.require(
        is_region(&s.region),
        "spec.storage.region",
        format!("`{}` is not a region name", s.region),
        "an explicit region such as us-east-1 or eu-central-2",
    );
    if let Some(p) = &s.prefix {
        c.require(
            is_dns_label(p, defaults::MAX_DNS_LABEL_LENGTH),
            "spec.storage.prefix",
            format!("`{p}` is not a valid prefix"),
            "a DNS label of at most 63 characters",
        );
    }
    if let Some(e) = &s.endpoint {
        match parse_origin(&e.url) {
            None => c.fail(
                "spec.storage.endpoint.url",
                format!("`{}` is not an HTTP(S) origin", e.url),
                "http:// or https://, a host and an optional port, no path, query or credentials",
            ),
            Some((_, host, _)) => {
                if let Some(eg) = &e.egress {
                    super::telemetry::check_egress(c, eg, host, "spec.storage.endpoint.egress");
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
