//! Small, dependency-free checks of Kubernetes and celld value formats.

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
    !s.is_empty() && s.len() <= 253 && s.split('.').all(|l| is_dns_label(l, 63))
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
    s.len() == 26
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

/// An environment variable name as shells and celld accept it.
pub fn is_env_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && !s.as_bytes()[0].is_ascii_digit()
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
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
    for component in &path {
        if component.contains(':') {
            return Some("a tag and a digest together are ambiguous; keep only the digest");
        }
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

/// An `http(s)://host[:port]` origin without path, query, fragment or credentials.
/// Returns (scheme, host, port).
pub fn parse_origin(url: &str) -> Option<(&str, &str, Option<u16>)> {
    let (scheme, rest) = url.split_once("://")?;
    if scheme != "http" && scheme != "https" {
        return None;
    }
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    parse_authority(rest).map(|(h, p)| (scheme, h, p))
}

/// An `http(s)://host[:port][/path]` base URL without query, fragment or credentials.
pub fn parse_base_url(url: &str) -> Option<(&str, &str, Option<u16>)> {
    let (scheme, rest) = url.split_once("://")?;
    if scheme != "http" && scheme != "https" {
        return None;
    }
    if rest.contains(['?', '#']) {
        return None;
    }
    let authority = rest.split('/').next()?;
    parse_authority(authority).map(|(h, p)| (scheme, h, p))
}

fn parse_authority(a: &str) -> Option<(&str, Option<u16>)> {
    if a.is_empty() || a.contains(['@', '/', '?', '#', ' ']) {
        return None;
    }
    // IPv6 literal: [::1]:port
    if let Some(rest) = a.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        let port = match after {
            "" => None,
            p => Some(
                p.strip_prefix(':')?
                    .parse::<u16>()
                    .ok()
                    .filter(|p| *p > 0)?,
            ),
        };
        return Some((host, port));
    }
    match a.rsplit_once(':') {
        Some((host, port)) => {
            let port = port.parse::<u16>().ok().filter(|p| *p > 0)?;
            (!host.is_empty()).then_some((host, Some(port)))
        }
        None => Some((a, None)),
    }
}

/// A hostname for routing: DNS name, optionally with a `*.` wildcard prefix; no IPs.
pub fn is_route_hostname(s: &str) -> bool {
    let name = s.strip_prefix("*.").unwrap_or(s);
    let all_numeric = name
        .split('.')
        .all(|l| l.bytes().all(|b| b.is_ascii_digit()));
    s.len() <= 253 && is_dns_subdomain(name) && !all_numeric
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
        assert!(image_problem(&format!("ghcr.io/ewhauser/celld:v1@sha256:{d}")).is_some());
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

    #[test]
    fn urls() {
        assert_eq!(
            parse_origin("http://minio.store:9000"),
            Some(("http", "minio.store", Some(9000)))
        );
        assert!(parse_origin("http://minio.store:9000/path").is_none());
        assert!(parse_origin("http://u:p@minio").is_none());
        assert!(parse_base_url("https://otel.obs:4318/v1").is_some());
        assert!(parse_base_url("https://otel.obs:4318/v1?x").is_none());
        assert!(parse_origin("ftp://x").is_none());
    }

    #[test]
    fn hostnames_and_cidrs() {
        assert!(is_route_hostname("*.example.com"));
        assert!(!is_route_hostname("10.0.0.1"));
        assert!(single_host_cidr("10.0.0.1/32").is_some());
        assert!(single_host_cidr("10.0.0.0/24").is_none());
    }
}
