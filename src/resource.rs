//! The canonical resource URI (RFC 8707) and the metadata URL derived from it (RFC 9728).
//!
//! Clients put the resource URI in their token requests, authorization servers copy it into the
//! token's `aud`, and the layer compares the two. They only agree if everybody spells the URI the
//! same way, so the layer fixes one spelling when it is built: lowercase scheme and host, no
//! default port, no fragment, no query, and no trailing slash on the bare origin.
//!
//! ```
//! use mcp_gate::ResourceUri;
//!
//! let resource = ResourceUri::parse("HTTPS://MCP.Example.com:443/mcp").unwrap();
//! assert_eq!(resource.as_str(), "https://mcp.example.com/mcp");
//! assert_eq!(
//!     resource.metadata_url(),
//!     "https://mcp.example.com/.well-known/oauth-protected-resource/mcp"
//! );
//! ```

use std::fmt;

use url::Url;

use crate::error::ConfigError;

/// The well-known path prefix of the Protected Resource Metadata document (RFC 9728 §3).
pub const METADATA_WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";

/// A resource URI in canonical form (RFC 8707 §2, as profiled by MCP).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ResourceUri {
    canonical: String,
    origin: String,
    path: String,
}

impl ResourceUri {
    /// Parses and canonicalises a resource URI.
    ///
    /// Refuses anything that is not an absolute `http` or `https` URL with a host, and URLs
    /// carrying userinfo, a query or a fragment.
    pub fn parse(input: &str) -> Result<Self, ConfigError> {
        let invalid = |reason: &'static str| ConfigError::InvalidResource {
            value: input.to_owned(),
            reason,
        };
        let url = Url::parse(input).map_err(|_| invalid("not an absolute URL"))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(invalid("scheme must be http or https"));
        }
        let Some(host) = url.host_str() else {
            return Err(invalid("a host is required"));
        };
        if !url.username().is_empty() || url.password().is_some() {
            return Err(invalid("userinfo is not allowed"));
        }
        if url.query().is_some() {
            return Err(invalid("a query is not allowed"));
        }
        if url.fragment().is_some() {
            return Err(invalid("a fragment is not allowed"));
        }
        // `Url` already lowercases scheme and host and drops the default port.
        let origin = match url.port() {
            Some(port) => format!("{}://{}:{}", url.scheme(), host, port),
            None => format!("{}://{}", url.scheme(), host),
        };
        let path = match url.path() {
            "/" => String::new(),
            other => other.to_owned(),
        };
        Ok(Self {
            canonical: format!("{origin}{path}"),
            origin,
            path,
        })
    }

    /// The canonical URI, as tokens must carry it in `aud`.
    pub fn as_str(&self) -> &str {
        &self.canonical
    }

    /// Scheme, host and port, without a trailing slash.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The path of the resource (empty for a resource at the root of its origin).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The path at which the metadata document for this resource is served.
    pub fn metadata_path(&self) -> String {
        format!("{METADATA_WELL_KNOWN}{}", self.path)
    }

    /// The absolute URL of the metadata document, as sent in `resource_metadata`.
    pub fn metadata_url(&self) -> String {
        format!("{}{}", self.origin, self.metadata_path())
    }

    /// Whether the host is a loopback address or `localhost`.
    pub fn is_loopback(&self) -> bool {
        Url::parse(&self.canonical)
            .ok()
            .and_then(|url| is_loopback_host(&url))
            .unwrap_or(false)
    }
}

/// Whether a URL's host is this machine (`localhost`, or a loopback IPv4 or IPv6 address);
/// `None` for a URL without a host.
pub(crate) fn is_loopback_host(url: &Url) -> Option<bool> {
    url.host().map(|host| match host {
        url::Host::Domain(name) => name == "localhost",
        url::Host::Ipv4(ip) => ip.is_loopback(),
        url::Host::Ipv6(ip) => ip.is_loopback(),
    })
}

/// Where plain `http` is allowed besides `https`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PlainHttp {
    /// Nowhere.
    Never,
    /// On loopback hosts.
    OnLoopback,
    /// Anywhere (an explicit opt-in).
    Anywhere,
}

/// Why a URL fails [`transport_rule`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TransportProblem {
    NoHost,
    PlainHttp,
    OtherScheme,
}

/// The one transport rule for every URL the crate trusts or hands out (the resource, issuers,
/// key and introspection endpoints, approval URLs): `https`, or plain `http` where `plain`
/// allows it.
pub(crate) fn transport_rule(url: &Url, plain: PlainHttp) -> Result<(), TransportProblem> {
    let loopback = is_loopback_host(url).ok_or(TransportProblem::NoHost)?;
    match (url.scheme(), plain) {
        ("https", _) => Ok(()),
        ("http", PlainHttp::Anywhere) => Ok(()),
        ("http", PlainHttp::OnLoopback) if loopback => Ok(()),
        ("http", _) => Err(TransportProblem::PlainHttp),
        _ => Err(TransportProblem::OtherScheme),
    }
}

impl fmt::Display for ResourceUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.canonical)
    }
}

impl fmt::Debug for ResourceUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ResourceUri").field(&self.canonical).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_forms() {
        let cases = [
            ("https://MCP.example.COM/mcp", "https://mcp.example.com/mcp"),
            (
                "https://mcp.example.com:443/mcp",
                "https://mcp.example.com/mcp",
            ),
            ("http://127.0.0.1:80/mcp", "http://127.0.0.1/mcp"),
            ("http://127.0.0.1:8080/mcp", "http://127.0.0.1:8080/mcp"),
            ("https://mcp.example.com/", "https://mcp.example.com"),
            ("https://mcp.example.com", "https://mcp.example.com"),
            (
                "https://mcp.example.com/a/../mcp",
                "https://mcp.example.com/mcp",
            ),
        ];
        for (input, expected) in cases {
            assert_eq!(
                ResourceUri::parse(input).unwrap().as_str(),
                expected,
                "{input}"
            );
        }
    }

    #[test]
    fn refused_forms() {
        for input in [
            "mcp.example.com/mcp",
            "ftp://mcp.example.com/mcp",
            "https://user:pw@mcp.example.com/mcp",
            "https://mcp.example.com/mcp?x=1",
            "https://mcp.example.com/mcp#frag",
            "",
        ] {
            assert!(
                ResourceUri::parse(input).is_err(),
                "{input} must be refused"
            );
        }
    }

    #[test]
    fn metadata_url_for_root_and_path() {
        let root = ResourceUri::parse("https://a.example").unwrap();
        assert_eq!(
            root.metadata_url(),
            "https://a.example/.well-known/oauth-protected-resource"
        );
        let nested = ResourceUri::parse("http://127.0.0.1:9/x/mcp").unwrap();
        assert_eq!(
            nested.metadata_url(),
            "http://127.0.0.1:9/.well-known/oauth-protected-resource/x/mcp"
        );
        assert!(nested.is_loopback());
        assert!(!root.is_loopback());
    }
}
