//! The one HTTP(S) URL type of a fleet (the storage endpoint and the telemetry
//! collector). Validation parses each URL once with the strict rules below and keeps the
//! result in the [`crate::validate::ValidatedFleet`], so rendering reads the scheme and
//! port from here instead of parsing the text again with rules of its own.
//!
//! The rules: the scheme is `http` or `https` in lowercase (what celld and the AWS SDK
//! accept without normalising); no credentials (`user@`: a secret in a URL would land in
//! Git and in the Pod spec); a host; an optional port from 1 to 65535; no query or
//! fragment. An origin has no path (a trailing `/` is allowed); a base URL may have one.

use std::fmt;

/// `http` or `https`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    /// Plain HTTP (port 80 by default).
    Http,
    /// HTTPS (port 443 by default).
    Https,
}

impl Scheme {
    /// The port used when the URL names none.
    pub fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }
}

/// Which URLs a field takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UrlShape {
    /// `http(s)://host[:port]` with at most a trailing `/` (`spec.storage.endpoint.url`).
    Origin,
    /// `http(s)://host[:port][/path]` (`spec.telemetry.collectorURL`).
    Base,
}

/// Why a text is not a URL of the wanted shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    /// No `scheme://`, or a scheme other than lowercase `http`/`https`.
    #[error("the scheme must be http:// or https:// in lowercase")]
    Scheme,
    /// `user@` or `user:password@` before the host.
    #[error("credentials (user@) are not allowed in the URL")]
    Credentials,
    /// A `?query` or `#fragment`.
    #[error("a query or fragment is not allowed")]
    QueryOrFragment,
    /// A path where only an origin is taken.
    #[error("a path is not allowed here")]
    Path,
    /// No host, a space in it, or an unclosed `[` of an IPv6 literal.
    #[error("the host is missing or malformed")]
    Host,
    /// A port that is not a number from 1 to 65535.
    #[error("the port must be a number from 1 to 65535")]
    Port,
}

/// An HTTP(S) URL parsed by the rules above.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpUrl {
    scheme: Scheme,
    host: String,
    port: Option<u16>,
}

impl HttpUrl {
    /// Parses `text` as a URL of `shape`.
    pub fn parse(text: &str, shape: UrlShape) -> Result<HttpUrl, UrlError> {
        let (scheme, rest) = text.split_once("://").ok_or(UrlError::Scheme)?;
        let scheme = match scheme {
            "http" => Scheme::Http,
            "https" => Scheme::Https,
            _ => return Err(UrlError::Scheme),
        };
        if rest.contains(['?', '#']) {
            return Err(UrlError::QueryOrFragment);
        }
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        if shape == UrlShape::Origin && !path.is_empty() && path != "/" {
            return Err(UrlError::Path);
        }
        if authority.contains('@') {
            return Err(UrlError::Credentials);
        }
        let (host, port) = parse_authority(authority)?;
        Ok(HttpUrl {
            scheme,
            host: host.to_owned(),
            port,
        })
    }

    /// The scheme.
    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// The host (an IPv6 literal without its brackets).
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The TCP port: the one written, else the scheme's default.
    pub fn port(&self) -> u16 {
        self.port.unwrap_or(self.scheme.default_port())
    }
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        })
    }
}

/// `host[:port]` or `[v6]:port`.
fn parse_authority(a: &str) -> Result<(&str, Option<u16>), UrlError> {
    if a.is_empty() || a.contains(' ') {
        return Err(UrlError::Host);
    }
    let port = |p: &str| {
        p.parse::<u16>()
            .ok()
            .filter(|p| *p > 0)
            .ok_or(UrlError::Port)
    };
    if let Some(rest) = a.strip_prefix('[') {
        let (host, after) = rest.split_once(']').ok_or(UrlError::Host)?;
        if host.is_empty() {
            return Err(UrlError::Host);
        }
        return match after {
            "" => Ok((host, None)),
            p => Ok((
                host,
                Some(port(p.strip_prefix(':').ok_or(UrlError::Port)?)?),
            )),
        };
    }
    match a.rsplit_once(':') {
        Some(("", _)) => Err(UrlError::Host),
        Some((host, p)) => Ok((host, Some(port(p)?))),
        None => Ok((a, None)),
    }
}

#[cfg(test)]
mod tests {
    use super::UrlShape::{Base, Origin};
    use super::*;

    fn ok(text: &str, shape: UrlShape) -> (Scheme, String, u16) {
        let u = HttpUrl::parse(text, shape).unwrap_or_else(|e| panic!("{text}: {e}"));
        (u.scheme(), u.host().to_owned(), u.port())
    }

    #[test]
    fn hosts_and_ports() {
        let h = |s: &str| s.to_owned();
        assert_eq!(
            ok("http://minio.store:9000", Origin),
            (Scheme::Http, h("minio.store"), 9000)
        );
        assert_eq!(
            ok("http://minio.store", Origin),
            (Scheme::Http, h("minio.store"), 80)
        );
        assert_eq!(
            ok("https://s3.example.com/", Origin),
            (Scheme::Https, h("s3.example.com"), 443)
        );
        assert_eq!(
            ok("http://[fd00::1]:4318/v1", Base),
            (Scheme::Http, h("fd00::1"), 4318)
        );
        assert_eq!(
            ok("http://[fd00::1]", Origin),
            (Scheme::Http, h("fd00::1"), 80)
        );
        assert_eq!(
            ok("https://otel.obs:4318/v1/traces", Base),
            (Scheme::Https, h("otel.obs"), 4318)
        );
    }

    /// The strict rules: each refusal names its reason.
    #[test]
    fn refusals() {
        let err = |s: &str, shape| HttpUrl::parse(s, shape).err();
        assert_eq!(
            err("HTTPS://s3.example.com", Origin),
            Some(UrlError::Scheme)
        );
        assert_eq!(err("Http://s3.example.com", Base), Some(UrlError::Scheme));
        assert_eq!(err("ftp://x", Origin), Some(UrlError::Scheme));
        assert_eq!(err("minio.store:9000", Origin), Some(UrlError::Scheme));
        assert_eq!(err("http://u:p@minio", Origin), Some(UrlError::Credentials));
        assert_eq!(err("http://u@otel/v1", Base), Some(UrlError::Credentials));
        assert_eq!(
            err("http://otel.obs:4318/v1?x", Base),
            Some(UrlError::QueryOrFragment)
        );
        assert_eq!(
            err("http://10.0.0.5:4318#y", Origin),
            Some(UrlError::QueryOrFragment)
        );
        assert_eq!(
            err("http://minio.store:9000/path", Origin),
            Some(UrlError::Path)
        );
        assert_eq!(err("http://", Origin), Some(UrlError::Host));
        assert_eq!(err("http://:80", Origin), Some(UrlError::Host));
        assert_eq!(err("http://a b", Origin), Some(UrlError::Host));
        assert_eq!(err("http://[::1", Origin), Some(UrlError::Host));
        assert_eq!(err("http://x:0", Origin), Some(UrlError::Port));
        assert_eq!(err("http://x:99999", Origin), Some(UrlError::Port));
        assert_eq!(err("http://x:", Origin), Some(UrlError::Port));
        assert_eq!(err("http://[::1]x", Origin), Some(UrlError::Port));
    }
}
