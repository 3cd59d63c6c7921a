//! Small, dependency-free checks of Kubernetes and celld value formats, and the regular
//! expressions the CRD schema carries for them (`pattern`, with the lengths from
//! [`crate::defaults`] as `maxLength`). A pattern accepts exactly what its check
//! accepts, or (where a regular expression cannot say it all, noted) a little more, never
//! less: the API server must accept every fleet `celld-gen check` accepts. A unit test
//! compares each pattern with its check.

use crate::defaults::{
    BUCKET_LENGTH_BOUNDS, IDENTITY_LENGTH, MAX_DNS_LABEL_LENGTH, MAX_DNS_SUBDOMAIN_LENGTH,
    MAX_ENV_NAME_LENGTH, MAX_REGION_LENGTH, MAX_SECRET_KEY_LENGTH, MAX_ZONE_LENGTH,
};

/// [`is_dns_label`] (with `maxLength`).
pub const DNS_LABEL_PATTERN: &str = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
/// [`is_dns_subdomain`] (with `maxLength`; each label's own limit of 63 is not in it).
pub const DNS_SUBDOMAIN_PATTERN: &str =
    "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
/// [`is_route_hostname`] (with `maxLength`; not its refusal of all-numeric names).
pub const ROUTE_HOSTNAME_PATTERN: &str =
    "^(\\*\\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
/// The bucket rule of `spec.storage.bucket` (with `minLength`/`maxLength`).
pub const BUCKET_PATTERN: &str = "^[a-z0-9][-a-z0-9]*[a-z0-9]$";
/// [`is_region`] (with `maxLength`): [`AWS_REGION_PATTERN`], [`GCP_REGION_PATTERN`] or
/// [`AZURE_REGION_PATTERN`].
pub const REGION_PATTERN: &str = "^([a-z]{2}(-[a-z]+)+-[0-9]+|[a-z]+-[a-z]+[0-9]+|[a-z]+[0-9]*)$";
/// An AWS region: `us-east-1`, `ap-southeast-2`, `us-gov-west-1`.
pub const AWS_REGION_PATTERN: &str = "^[a-z]{2}(-[a-z]+)+-[0-9]+$";
/// A Google Cloud region: `us-central1`, `europe-west4`.
pub const GCP_REGION_PATTERN: &str = "^[a-z]+-[a-z]+[0-9]+$";
/// An Azure region: `eastus`, `westeurope`, `eastus2` (also what S3-compatible stores
/// often take, such as `auto`).
pub const AZURE_REGION_PATTERN: &str = "^[a-z]+[0-9]*$";
/// [`is_zone_name`] (with `maxLength` [`MAX_ZONE_LENGTH`]): a non-empty label value.
pub const ZONE_PATTERN: &str = "^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$";

/// The zone formats `placement.zones` accepts, for `--help`, the schema and the docs.
pub const ZONE_FORMATS: &str = "\
With zoneFormat Cloud (the default) each zone must be a zone of storage.region as its \
cloud names it in the topology.kubernetes.io/zone node label: AWS, the region plus a \
letter (us-east-1a), a Local Zone (us-west-2-lax-1a) or a Wavelength Zone \
(us-east-1-wl1-bos-wlz-1); Google Cloud, the region, a hyphen and a letter \
(us-central1-a); Azure, the region, a hyphen and a number (eastus-1). With zoneFormat \
Any each zone is any label value, as on premises, in an Azure region without \
availability zones (fault domains 0, 1, 2) or when the bucket is not in the cluster's \
region; zones are then not checked against storage.region.";
/// [`is_env_name`] (with `maxLength`).
pub const ENV_NAME_PATTERN: &str = "^[A-Za-z_][A-Za-z0-9_]*$";
/// [`is_secret_key`] (with `maxLength`).
pub const SECRET_KEY_PATTERN: &str = "^[-._a-zA-Z0-9]+$";
/// The digest pin [`image_problem`] requires (not its checks of the name part).
pub const IMAGE_DIGEST_PATTERN: &str = "^[^@]+@sha256:[0-9a-f]{64}$";

/// [`is_identity`].
pub fn identity_pattern() -> String {
    format!("^[a-z0-9]{{{IDENTITY_LENGTH}}}$")
}

/// RFC 1123 label: lowercase alphanumerics and `-`, starting and ending alphanumeric.
pub fn is_dns_label(s: &str, max: usize) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// RFC 1123 subdomain: dot-separated labels, at most 253 characters.
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_DNS_SUBDOMAIN_LENGTH
        && s.split('.').all(|l| is_dns_label(l, MAX_DNS_LABEL_LENGTH))
}

/// Name part of a label key or a label value: alphanumerics, `-`, `_`, `.`, starting and
/// ending alphanumeric, at most 63 characters.
fn is_label_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && s.as_bytes()[0].is_ascii_alphanumeric()
        && s.as_bytes()[s.len() - 1].is_ascii_alphanumeric()
}

/// A label or annotation key: optional DNS-subdomain prefix and `/`, then a name.
pub fn is_qualified_name(s: &str) -> bool {
    match s.split_once('/') {
        Some((prefix, name)) => is_dns_subdomain(prefix) && is_label_name(name),
        None => is_label_name(s),
    }
}

/// A label value: empty, or a label name.
pub fn is_label_value(s: &str) -> bool {
    s.is_empty() || is_label_name(s)
}

/// The fleet identity: exactly 26 lowercase letters and digits.
pub fn is_identity(s: &str) -> bool {
    s.len() == IDENTITY_LENGTH
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

/// An environment variable name as shells and celld accept it.
pub fn is_env_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_ENV_NAME_LENGTH
        && !s.as_bytes()[0].is_ascii_digit()
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// A bucket name: 3 to 63 lowercase letters, digits or hyphens, starting and ending with
/// a letter or digit.
pub fn is_bucket(s: &str) -> bool {
    BUCKET_LENGTH_BOUNDS.contains(s.len())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// Which cloud's naming a region follows. The three shapes are disjoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegionKind {
    /// [`AWS_REGION_PATTERN`].
    Aws,
    /// [`GCP_REGION_PATTERN`].
    Gcp,
    /// [`AZURE_REGION_PATTERN`].
    Azure,
}

fn is_lower(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_lowercase())
}

fn is_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// Lowercase letters then digits (`central1`, `eastus2` when `digits_optional`).
fn letters_then_digits(s: &str, digits_optional: bool) -> bool {
    let split = s.find(|c: char| c.is_ascii_digit()).unwrap_or(s.len());
    let (letters, digits) = s.split_at(split);
    is_lower(letters) && (is_digits(digits) || (digits_optional && digits.is_empty()))
}

/// The naming a region follows, or `None` when it is not a region name.
pub fn region_kind(s: &str) -> Option<RegionKind> {
    if s.len() > MAX_REGION_LENGTH {
        return None;
    }
    let parts: Vec<&str> = s.split('-').collect();
    match parts.as_slice() {
        [one] => letters_then_digits(one, true).then_some(RegionKind::Azure),
        [first, second] => {
            (is_lower(first) && letters_then_digits(second, false)).then_some(RegionKind::Gcp)
        }
        [first, middle @ .., last] => (first.len() == 2
            && is_lower(first)
            && middle.iter().all(|p| is_lower(p))
            && is_digits(last))
        .then_some(RegionKind::Aws),
        [] => None,
    }
}

/// A region name as AWS (`us-east-1`), Google Cloud (`us-central1`) or Azure (`eastus`)
/// writes it.
pub fn is_region(s: &str) -> bool {
    region_kind(s).is_some()
}

/// A zone as the `topology.kubernetes.io/zone` label may hold it: a non-empty label
/// value (what `placement.zoneFormat: Any` accepts).
pub fn is_zone_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= MAX_ZONE_LENGTH && is_label_value(s)
}

/// Whether `zone` is a zone of `region` in its cloud's format ([`ZONE_FORMATS`]).
pub fn is_zone_of_region(zone: &str, region: &str) -> bool {
    let (Some(kind), Some(rest)) = (region_kind(region), zone.strip_prefix(region)) else {
        return false;
    };
    if !is_zone_name(zone) {
        return false;
    }
    let Some(suffix) = rest.strip_prefix('-') else {
        // Only AWS appends the letter directly.
        return kind == RegionKind::Aws && rest.len() == 1 && is_lower(rest);
    };
    let parts: Vec<&str> = suffix.split('-').collect();
    match kind {
        // Local Zone `-lax-1a`, Wavelength Zone `-wl1-bos-wlz-1`.
        RegionKind::Aws => match parts.as_slice() {
            [city, n] => {
                is_lower(city)
                    && n.len() >= 2
                    && is_digits(&n[..n.len() - 1])
                    && is_lower(&n[n.len() - 1..])
            }
            [wl, city, "wlz", n] => {
                wl.strip_prefix("wl").is_some_and(is_digits) && is_lower(city) && is_digits(n)
            }
            _ => false,
        },
        RegionKind::Gcp => suffix.len() == 1 && is_lower(suffix),
        RegionKind::Azure => is_digits(suffix) && !suffix.starts_with('0'),
    }
}

/// Examples of zones of `region`, for messages.
pub fn zone_examples(region: &str) -> String {
    match region_kind(region) {
        Some(RegionKind::Aws) => format!(
            "{region}a, a Local Zone such as {region}-lax-1a or a Wavelength Zone such as \
             {region}-wl1-bos-wlz-1"
        ),
        Some(RegionKind::Gcp) => format!("{region}-a"),
        Some(RegionKind::Azure) => format!("{region}-1"),
        None => "a zone of storage.region".to_owned(),
    }
}

/// The short forms `init --zones` expands with the region: a letter for AWS
/// (`a` -> `us-east-1a`) and Google Cloud (`a` -> `us-central1-a`), a number for Azure
/// (`1` -> `eastus-1`). Anything else is taken as written.
pub fn expand_zone(zone: &str, region: &str) -> String {
    match region_kind(region) {
        Some(RegionKind::Aws) if zone.len() == 1 && is_lower(zone) => format!("{region}{zone}"),
        Some(RegionKind::Gcp) if zone.len() == 1 && is_lower(zone) => {
            format!("{region}-{zone}")
        }
        Some(RegionKind::Azure) if zone.len() == 1 && is_digits(zone) && zone != "0" => {
            format!("{region}-{zone}")
        }
        _ => zone.to_owned(),
    }
}

/// A Secret key: letters, digits, `-`, `_` or `.`, at most 253 characters.
pub fn is_secret_key(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_SECRET_KEY_LENGTH
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Problems with an image reference, or `None` when it is a digest-pinned reference.
pub fn image_problem(image: &str) -> Option<&'static str> {
    let Some((name, digest)) = image.split_once("@sha256:") else {
        return Some("the image must be pinned by digest (`@sha256:<64 hex>`); tags can move");
    };
    if digest.len() != 64
        || !digest
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return Some("the digest must be 64 lowercase hexadecimal characters");
    }
    let mut parts = name.split('/');
    let Some(first) = parts.next() else {
        return Some("the image has no repository");
    };
    let path: Vec<&str> = parts.collect();
    if path.is_empty() {
        return Some("the image must name its registry and repository, e.g. ghcr.io/owner/celld");
    }
    // The first part is the registry host, optionally with a port.
    let (host, port) = match first.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (first, None),
    };
    let host_ok =
        host == "localhost" || (host.contains('.') && host.split('.').all(|l| is_dns_label(l, 63)));
    let port_ok =
        port.is_none_or(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()));
    if !host_ok || !port_ok {
        return Some("the image must start with a registry host, e.g. ghcr.io/owner/celld");
    }
    let last = path.len() - 1;
    for (i, component) in path.iter().enumerate() {
        // `repo:tag@sha256:…` (what Renovate and Dependabot write): the tag is a label
        // for people, the digest is what runs (see `pinned_image`).
        let component = match component.split_once(':') {
            Some((repo, tag)) if i == last => {
                if !is_image_tag(tag) {
                    return Some(
                        "the tag before the digest must be 1 to 128 letters, digits, `_`, `.` or `-`, not starting with `.` or `-`",
                    );
                }
                repo
            }
            Some(_) => return Some("only the last path component may carry a tag"),
            None => component,
        };
        let ok = !component.is_empty()
            && component.bytes().all(|b| {
                b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-')
            })
            && component.as_bytes()[0].is_ascii_alphanumeric()
            && component.as_bytes()[component.len() - 1].is_ascii_alphanumeric();
        if !ok {
            return Some(
                "repository path components are lowercase letters, digits, `.`, `_` or `-`",
            );
        }
    }
    None
}

/// An image tag: 1 to 128 of `[A-Za-z0-9_.-]`, not starting with `.` or `-`.
fn is_image_tag(tag: &str) -> bool {
    (1..=128).contains(&tag.len())
        && tag
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
        && !tag.starts_with(['.', '-'])
}

/// The reference that runs: a valid `registry/repo[:tag]@sha256:<hex>` without its tag
/// (the digest alone decides the image; a tag beside it is for people and update bots).
pub fn pinned_image(image: &str) -> String {
    let Some((name, digest)) = image.split_once("@sha256:") else {
        return image.to_string();
    };
    let (dir, last) = name.rsplit_once('/').unwrap_or(("", name));
    let repo = last.split_once(':').map_or(last, |(r, _)| r);
    if dir.is_empty() {
        format!("{repo}@sha256:{digest}")
    } else {
        format!("{dir}/{repo}@sha256:{digest}")
    }
}

/// A Kubernetes quantity as a number of base units, or `None` if it doesn't parse.
/// `allow_binary` admits `Ki`..`Ei`; cpu quantities only take `m` or nothing.
pub fn parse_quantity(s: &str, memory: bool) -> Option<f64> {
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, suffix) = s.split_at(split);
    if num.is_empty() || num.starts_with('.') || num.ends_with('.') || num.matches('.').count() > 1
    {
        return None;
    }
    let value: f64 = num.parse().ok()?;
    let factor = if memory {
        match suffix {
            "" => 1.0,
            "k" => 1e3,
            "M" => 1e6,
            "G" => 1e9,
            "T" => 1e12,
            "P" => 1e15,
            "E" => 1e18,
            "Ki" => 1024.0,
            "Mi" => 1024f64.powi(2),
            "Gi" => 1024f64.powi(3),
            "Ti" => 1024f64.powi(4),
            "Pi" => 1024f64.powi(5),
            "Ei" => 1024f64.powi(6),
            _ => return None,
        }
    } else {
        match suffix {
            "" => 1.0,
            "m" => 1e-3,
            _ => return None,
        }
    };
    Some(value * factor)
}

/// A hostname for routing: DNS name, optionally with a `*.` wildcard prefix; no IPs.
pub fn is_route_hostname(s: &str) -> bool {
    let name = s.strip_prefix("*.").unwrap_or(s);
    let all_numeric = name
        .split('.')
        .all(|l| l.bytes().all(|b| b.is_ascii_digit()));
    s.len() <= MAX_DNS_SUBDOMAIN_LENGTH && is_dns_subdomain(name) && !all_numeric
}

/// A CIDR naming exactly one address (/32 for IPv4, /128 for IPv6).
pub fn single_host_cidr(s: &str) -> Option<std::net::IpAddr> {
    let (ip, bits) = s.split_once('/')?;
    let ip: std::net::IpAddr = ip.parse().ok()?;
    let ok = match ip {
        std::net::IpAddr::V4(_) => bits == "32",
        std::net::IpAddr::V6(_) => bits == "128",
    };
    ok.then_some(ip)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(is_dns_label("alpha-1", 63));
        assert!(!is_dns_label("Alpha", 63));
        assert!(!is_dns_label("-a", 63));
        assert!(is_dns_subdomain("a.b-c.d"));
        assert!(is_qualified_name("app.kubernetes.io/name"));
        assert!(!is_qualified_name("/name"));
        assert!(is_label_value(""));
        assert!(is_identity("7kq2m9x4c1v8b3n6z5h0j2w4r8"));
        assert!(!is_identity("7kq2m9x4c1v8b3n6z5h0j2w4r"));
        assert!(is_env_name("RUST_LOG"));
        assert!(!is_env_name("1A"));
    }

    #[test]
    fn regions_of_each_cloud() {
        for (r, k) in [
            ("us-east-1", RegionKind::Aws),
            ("us-gov-west-1", RegionKind::Aws),
            ("ap-southeast-2", RegionKind::Aws),
            ("us-central1", RegionKind::Gcp),
            ("northamerica-northeast1", RegionKind::Gcp),
            ("eastus", RegionKind::Azure),
            ("eastus2", RegionKind::Azure),
        ] {
            assert_eq!(region_kind(r), Some(k), "{r}");
        }
        for r in [
            "",
            "us-1",
            "us--1",
            "u-east-1",
            "US-east-1",
            "us-central",
            "1eastus",
            "eastus-",
        ] {
            assert_eq!(region_kind(r), None, "{r}");
        }
    }

    #[test]
    fn zones_of_each_cloud() {
        for (z, r) in [
            ("us-east-1a", "us-east-1"),
            ("us-west-2-lax-1a", "us-west-2"),
            ("us-east-1-wl1-bos-wlz-1", "us-east-1"),
            ("us-central1-a", "us-central1"),
            ("europe-west4-c", "europe-west4"),
            ("eastus-1", "eastus"),
            ("eastus2-3", "eastus2"),
        ] {
            assert!(is_zone_of_region(z, r), "{z} of {r}");
        }
        for (z, r) in [
            ("us-east-2a", "us-east-1"),
            ("us-east-1", "us-east-1"),
            ("us-east-1ab", "us-east-1"),
            ("us-east-1-a", "us-east-1"),
            ("us-east-1-lax-a", "us-east-1"),
            ("us-central1a", "us-central1"),
            ("us-central1-1", "us-central1"),
            ("eastus-a", "eastus"),
            ("eastus-0", "eastus"),
            ("eastus1", "eastus"),
            ("rack-1", "us-east-1"),
        ] {
            assert!(!is_zone_of_region(z, r), "{z} of {r}");
        }
        assert!(is_zone_name("rack-1") && is_zone_name("0") && is_zone_name("DC_1.a"));
        assert!(!is_zone_name("") && !is_zone_name("-a") && !is_zone_name(&"a".repeat(64)));
        assert_eq!(expand_zone("a", "us-east-1"), "us-east-1a");
        assert_eq!(expand_zone("a", "us-central1"), "us-central1-a");
        assert_eq!(expand_zone("2", "eastus"), "eastus-2");
        assert_eq!(expand_zone("rack-1", "eastus"), "rack-1");
    }

    #[test]
    fn images() {
        let d = "a".repeat(64);
        assert_eq!(
            image_problem(&format!("ghcr.io/ewhauser/celld@sha256:{d}")),
            None
        );
        assert_eq!(
            image_problem(&format!("localhost:5000/celld@sha256:{d}")),
            None
        );
        assert!(image_problem("ghcr.io/ewhauser/celld:v1").is_some());
        // A tag beside the digest (as update bots write it) is accepted; the digest alone
        // is what runs.
        assert_eq!(
            image_problem(&format!("ghcr.io/ewhauser/celld:v1@sha256:{d}")),
            None
        );
        assert_eq!(
            pinned_image(&format!("localhost:5000/celld:v1@sha256:{d}")),
            format!("localhost:5000/celld@sha256:{d}")
        );
        assert!(image_problem(&format!("ghcr.io/ewhauser:v1/celld@sha256:{d}")).is_some());
        assert!(image_problem(&format!("celld@sha256:{d}")).is_some());
        assert!(image_problem("ghcr.io/x/celld@sha256:ABC").is_some());
    }

    #[test]
    fn quantities() {
        assert_eq!(parse_quantity("250m", false), Some(0.25));
        assert_eq!(parse_quantity("2", false), Some(2.0));
        assert_eq!(parse_quantity("1Gi", true), Some(1073741824.0));
        assert!(parse_quantity("1Gi", false).is_none());
        assert!(parse_quantity("1K", true).is_none());
        assert!(parse_quantity("", true).is_none());
        assert!(parse_quantity(".5", true).is_none());
    }

    /// Strings shaped like names (parts of letters, digits and punctuation joined by
    /// separators), plus edge cases; deterministic.
    fn candidates() -> Vec<String> {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let chars: Vec<char> = "az09-_.A*@:/ é".chars().collect();
        let seps = [".", "-", "", "_", "*.", "@sha256:"];
        let mut out: Vec<String> = vec![
            String::new(),
            "a".into(),
            "-".into(),
            "us-east-1".into(),
            "us-east-1a".into(),
            "eu-central-2".into(),
            "us-central1".into(),
            "eastus2".into(),
            "us-west-2-lax-1a".into(),
            "u-east-1".into(),
            "us-1".into(),
            "us--1".into(),
            "RUST_LOG".into(),
            "_x".into(),
            "1A".into(),
            "*.example.com".into(),
            "a.".into(),
            ".a".into(),
            "7kq2m9x4c1v8b3n6z5h0j2w4r8".into(),
            "7KQ2M9X4C1V8B3N6Z5H0J2W4R8".into(),
            format!("ghcr.io/ewhauser/celld@sha256:{}", "a".repeat(64)),
            format!("localhost:5000/celld@sha256:{}", "0".repeat(64)),
            format!("ghcr.io/x/celld@sha256:{}", "A".repeat(64)),
        ];
        for n in [25, 26, 27, 32, 33, 62, 63, 64, 127, 128, 129, 252, 253, 254] {
            out.push("a".repeat(n));
            out.push(format!("a{}", "-".repeat(n.saturating_sub(2))) + "a");
            out.push("a".repeat(n / 2) + "." + &"b".repeat(n.saturating_sub(n / 2 + 1)));
            out.push("ab".repeat(n / 2) + "-" + &"1".repeat(n % 3 + 1));
        }
        for _ in 0..20_000 {
            let parts = rng.random_range(1..=4);
            let mut s = String::new();
            for i in 0..parts {
                if i > 0 {
                    s.push_str(seps[rng.random_range(0..seps.len())]);
                }
                let len = rng.random_range(0..=6);
                for _ in 0..len {
                    // Mostly lowercase letters and digits, the shapes names take.
                    let c = if rng.random_bool(0.7) {
                        chars[rng.random_range(0..4)]
                    } else {
                        chars[rng.random_range(0..chars.len())]
                    };
                    s.push(c);
                }
            }
            out.push(s);
        }
        out
    }

    /// Each CRD pattern (with its lengths) accepts exactly what its check accepts, or,
    /// where noted at the pattern, a superset: never refuses a value validation accepts.
    #[test]
    fn crd_patterns_agree_with_the_checks() {
        use crate::defaults as d;
        let re = |p: &str| regex::Regex::new(p).expect("a valid regular expression");
        let len = |s: &str| s.chars().count();
        let identity = re(&identity_pattern());
        let label = re(DNS_LABEL_PATTERN);
        let subdomain = re(DNS_SUBDOMAIN_PATTERN);
        let hostname = re(ROUTE_HOSTNAME_PATTERN);
        let bucket = re(BUCKET_PATTERN);
        let region = re(REGION_PATTERN);
        let aws_region = re(AWS_REGION_PATTERN);
        let zone = re(ZONE_PATTERN);
        let env = re(ENV_NAME_PATTERN);
        let key = re(SECRET_KEY_PATTERN);
        let image = re(IMAGE_DIGEST_PATTERN);
        let (mut accepted, mut total) = (0, 0);
        for s in candidates() {
            let s = s.as_str();
            total += 1;
            // Exact equivalents.
            let pairs = [
                (
                    "identity",
                    is_identity(s),
                    identity.is_match(s) && len(s) == d::IDENTITY_LENGTH,
                ),
                (
                    "dns label",
                    is_dns_label(s, d::MAX_DNS_LABEL_LENGTH),
                    label.is_match(s) && len(s) <= d::MAX_DNS_LABEL_LENGTH,
                ),
                (
                    "bucket",
                    is_bucket(s),
                    bucket.is_match(s) && d::BUCKET_LENGTH_BOUNDS.contains(len(s)),
                ),
                (
                    "region",
                    is_region(s),
                    region.is_match(s) && len(s) <= d::MAX_REGION_LENGTH,
                ),
                (
                    "aws region",
                    region_kind(s) == Some(RegionKind::Aws),
                    aws_region.is_match(s) && len(s) <= d::MAX_REGION_LENGTH,
                ),
                (
                    "zone",
                    is_zone_name(s),
                    zone.is_match(s) && len(s) <= d::MAX_ZONE_LENGTH,
                ),
                (
                    "env name",
                    is_env_name(s),
                    env.is_match(s) && len(s) <= d::MAX_ENV_NAME_LENGTH,
                ),
                (
                    "secret key",
                    is_secret_key(s),
                    key.is_match(s) && len(s) <= d::MAX_SECRET_KEY_LENGTH,
                ),
            ];
            for (what, check, pattern) in pairs {
                assert_eq!(check, pattern, "{what}: {s:?}");
                accepted += usize::from(check);
            }
            // Supersets: whatever the check accepts, the pattern accepts.
            let supersets = [
                (
                    "dns subdomain",
                    is_dns_subdomain(s),
                    subdomain.is_match(s) && len(s) <= d::MAX_DNS_SUBDOMAIN_LENGTH,
                ),
                (
                    "route hostname",
                    is_route_hostname(s),
                    hostname.is_match(s) && len(s) <= d::MAX_DNS_SUBDOMAIN_LENGTH,
                ),
                ("image", image_problem(s).is_none(), image.is_match(s)),
            ];
            for (what, check, pattern) in supersets {
                assert!(
                    !check || pattern,
                    "{what}: {s:?} passes the check, not the pattern"
                );
                accepted += usize::from(check);
            }
        }
        // The corpus exercises both answers.
        assert!(
            accepted > 1000 && accepted < total * 9,
            "{accepted} of {total}"
        );
    }

    #[test]
    fn hostnames_and_cidrs() {
        assert!(is_route_hostname("*.example.com"));
        assert!(!is_route_hostname("10.0.0.1"));
        assert!(single_host_cidr("10.0.0.1/32").is_some());
        assert!(single_host_cidr("10.0.0.0/24").is_none());
    }
}
