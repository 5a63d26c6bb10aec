//! `[identity]`: the signed statement of who is calling that the gateway sends the upstream
//! (see [`crate::identity`]). Absent, the upstream gets no `Authorization` at all.

use std::path::PathBuf;
use std::time::Duration;

use http::HeaderName;
use serde::Deserialize;

use super::values::Span;
use crate::proxy::headers;

/// The shortest lifetime an identity token may be given.
pub const MIN_TTL: Duration = Duration::from_secs(10);
/// The longest lifetime an identity token may be given.
pub const MAX_TTL: Duration = Duration::from_secs(600);

/// `[identity]`: an ES256 JWT minted per caller and sent to the upstream.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Identity {
    /// The signing key: a PEM PKCS#8 EC P-256 private key, relative to the file. Absent, a
    /// key is made at start (each replica then has its own).
    pub key_file: Option<PathBuf>,
    /// The token's `aud` (default: `[upstream] url`, as written).
    pub audience: Option<String>,
    /// The token's `iss` (default: `[resource] uri`, as written).
    pub issuer: Option<String>,
    /// The token's lifetime, from 10 s to 10 min (default 60 s).
    #[serde(default = "default_ttl")]
    pub ttl: Span,
    /// The request header that carries it (default `authorization`, as `Bearer <jwt>`; any
    /// other header carries the JWT alone).
    #[serde(default = "default_header")]
    pub header: String,
}

fn default_ttl() -> Span {
    Span(Duration::from_secs(60))
}

fn default_header() -> String {
    "authorization".to_owned()
}

impl Identity {
    /// The header, checked: a valid name the proxy neither copies from the client nor
    /// treats as one connection's.
    pub fn header_name(&self) -> Result<HeaderName, (&'static str, String)> {
        let name = HeaderName::from_bytes(self.header.as_bytes()).map_err(|_| {
            (
                "[identity] header",
                format!("`{}` is not a header name", self.header),
            )
        })?;
        if headers::forwards_request_header(&name)
            || headers::is_connection_header(&name)
            || [http::header::HOST, http::header::COOKIE].contains(&name)
        {
            return Err((
                "[identity] header",
                format!(
                    "`{name}` is a header the gateway already writes or copies; name another (`authorization` or an `x-` header)"
                ),
            ));
        }
        Ok(name)
    }

    /// The checks of the table's own keys: `(key, why)` for the first that fails.
    pub(super) fn check(&self) -> Result<(), (&'static str, String)> {
        if self.ttl.0 < MIN_TTL || self.ttl.0 > MAX_TTL {
            return Err((
                "[identity] ttl",
                format!(
                    "must be from {} to {}",
                    humantime::format_duration(MIN_TTL),
                    humantime::format_duration(MAX_TTL)
                ),
            ));
        }
        for (key, value) in [
            ("[identity] audience", &self.audience),
            ("[identity] issuer", &self.issuer),
        ] {
            if value.as_deref().is_some_and(|text| text.trim().is_empty()) {
                return Err((key, "must not be empty".to_owned()));
            }
        }
        self.header_name().map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::config::Config;

    const BASE: &str = "[upstream]\nurl = \"http://127.0.0.1:3000/mcp\"\n[resource]\nuri = \"http://127.0.0.1:8080/mcp\"\n[[issuer]]\nurl = \"http://127.0.0.1:9000\"\n[policy]\nallow-all = true\n";

    fn parse(identity: &str) -> Result<Config, String> {
        Config::parse(
            Path::new("/etc/gw/gateway.toml"),
            &format!("{BASE}{identity}"),
        )
        .map_err(|error| error.to_string())
    }

    #[test]
    fn defaults_are_a_minute_in_authorization_and_absent_means_none() {
        assert!(parse("").unwrap().file.identity.is_none());
        let config = parse("[identity]\n").unwrap();
        let identity = config.file.identity.as_ref().unwrap().get_ref();
        assert_eq!(identity.ttl.0.as_secs(), 60);
        assert_eq!(identity.header_name().unwrap(), "authorization");
        assert!(identity.key_file.is_none() && identity.audience.is_none());
    }

    #[test]
    fn a_ttl_out_of_bounds_is_refused_with_its_line() {
        for ttl in ["5s", "11m"] {
            let error = parse(&format!("[identity]\nttl = \"{ttl}\"\n")).unwrap_err();
            assert!(
                error.starts_with(
                    "/etc/gw/gateway.toml:10: [identity] ttl: must be from 10s to 10m"
                ),
                "{error}"
            );
        }
        assert!(parse("[identity]\nttl = \"10m\"\n").is_ok());
    }

    #[test]
    fn headers_the_proxy_copies_or_owns_are_refused() {
        for header in [
            "content-type",
            "mcp-session-id",
            "connection",
            "host",
            "bad header",
        ] {
            let error = parse(&format!("[identity]\nheader = \"{header}\"\n")).unwrap_err();
            assert!(error.contains("[identity] header"), "{header}: {error}");
        }
        let config = parse("[identity]\nheader = \"X-Caller-Identity\"\n").unwrap();
        let identity = config.file.identity.as_ref().unwrap().get_ref();
        assert_eq!(identity.header_name().unwrap(), "x-caller-identity");
    }

    #[test]
    fn empty_audience_or_issuer_and_unknown_keys_are_refused() {
        assert!(parse("[identity]\naudience = \"\"\n").is_err());
        assert!(parse("[identity]\nissuer = \" \"\n").is_err());
        let error = parse("[identity]\nkey = \"k.pem\"\n").unwrap_err();
        assert!(error.contains("[identity] key: unknown key"), "{error}");
    }

    #[test]
    fn the_example_documents_every_key_with_its_default() {
        let example = include_str!("../../gateway.example.toml");
        let mut inside = false;
        let text: String = example
            .lines()
            .map(|line| {
                inside = (inside && !line.is_empty()) || line == "# [identity]";
                let key = line.strip_prefix("# ").filter(|rest| {
                    inside && (rest.starts_with('[') || rest.split_once(" = ").is_some())
                });
                format!("{}\n", key.unwrap_or(line))
            })
            .collect();
        let config = Config::parse(Path::new("/etc/gw/gateway.toml"), &text).unwrap();
        let identity = config.file.identity.as_ref().expect("[identity]").get_ref();
        assert_eq!(
            identity.key_file.as_deref(),
            Some(Path::new("identity-key.pem"))
        );
        assert_eq!(
            identity.audience.as_deref(),
            Some("http://127.0.0.1:3000/mcp")
        );
        assert_eq!(
            identity.audience.as_deref(),
            Some(config.file.upstream.url.as_str())
        );
        assert_eq!(
            identity.issuer.as_deref(),
            Some(config.file.resource.uri.get_ref().as_str())
        );
        assert_eq!(identity.ttl, super::default_ttl());
        assert_eq!(identity.header, super::default_header());
    }

    #[test]
    fn the_jwks_path_cannot_be_the_resource_path() {
        let text = BASE.replace("8080/mcp", "8080/.well-known/mcp-gate/identity-jwks.json");
        let error = Config::parse(Path::new("/g.toml"), &format!("{text}[identity]\n"))
            .unwrap_err()
            .to_string();
        assert!(error.contains("[resource] uri"), "{error}");
    }
}
