//! `WWW-Authenticate` challenges: `Bearer` (RFC 6750 §3, RFC 9728 §5.1) and `DPoP` (RFC 9449
//! §7.1, with `algs`).
//!
//! A challenge is assembled from fixed parameter names and values the layer controls, but the
//! values still pass through [`quote`] so that no byte can end the quoted string early or start
//! a new header line: `"` and `\` are escaped, control characters and non-ASCII bytes are
//! replaced by `?`.
//!
//! The structured parameters (`error`, `scope`, `resource_metadata`,
//! `authorization_remediation`) are written first and `error_description` last, so that a
//! client reading the header with an unanchored pattern (the TypeScript SDK takes the first
//! `scope=` it finds) meets the real values before any text. The description is a policy's
//! free text, so it is cut down to what RFC 6750 §3 allows there (`%x20-21 / %x23-5B /
//! %x5D-7E`: no `"`, no `\`, nothing outside visible ASCII) by [`description_text`], which
//! also turns `=` into `:` so that no text can read as a parameter to such a parser.

use http::HeaderValue;

/// The RFC 6750 §3.1 error codes the layer emits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorCode {
    /// The request is malformed (400).
    InvalidRequest,
    /// The token is expired, revoked, malformed or otherwise invalid (401).
    InvalidToken,
    /// The token lacks a scope the request needs (403).
    InsufficientScope,
    /// The operation needs a credential with specific authorization details
    /// (draft-ietf-oauth-rar-metadata-remediation).
    InsufficientAuthorization,
    /// The DPoP proof is missing, malformed or fails a check (RFC 9449 §7.1).
    InvalidDpopProof,
    /// The DPoP proof lacks the nonce the server gives in `DPoP-Nonce` (RFC 9449 §9).
    UseDpopNonce,
}

impl ErrorCode {
    /// The code as written on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidRequest => "invalid_request",
            ErrorCode::InvalidToken => "invalid_token",
            ErrorCode::InsufficientScope => "insufficient_scope",
            ErrorCode::InsufficientAuthorization => "insufficient_authorization",
            ErrorCode::InvalidDpopProof => "invalid_dpop_proof",
            ErrorCode::UseDpopNonce => "use_dpop_nonce",
        }
    }
}

/// The `Bearer` scheme (RFC 6750).
pub(crate) const BEARER: &str = "Bearer";
/// The `DPoP` scheme (RFC 9449 §7.1).
pub(crate) const DPOP: &str = "DPoP";

/// One challenge, rendered with [`Challenge::to_header_value`].
#[derive(Clone, Debug)]
pub(crate) struct Challenge<'a> {
    /// [`BEARER`] or [`DPOP`].
    pub scheme: &'static str,
    /// The DPoP `algs` parameter: the accepted proof algorithms, space-separated.
    pub algs: Option<&'a str>,
    pub resource_metadata: &'a str,
    pub scope: Option<&'a str>,
    pub error: Option<ErrorCode>,
    pub error_description: Option<&'a str>,
    /// base64url JSON `{authorization_details, authorization_reference?}`.
    pub authorization_remediation: Option<&'a str>,
}

impl Challenge<'_> {
    /// Renders the challenge. Never fails: every value is quoted and sanitised.
    pub fn to_header_value(&self) -> HeaderValue {
        let mut out = String::with_capacity(128);
        out.push_str(self.scheme);
        out.push(' ');
        let mut first = true;
        let mut param = |name: &str, value: &str| {
            if !first {
                out.push_str(", ");
            }
            first = false;
            out.push_str(name);
            out.push('=');
            quote(value, &mut out);
        };
        if let Some(error) = self.error {
            param("error", error.as_str());
        }
        if let Some(scope) = self.scope.filter(|s| !s.is_empty()) {
            param("scope", scope);
        }
        param("resource_metadata", self.resource_metadata);
        if let Some(remediation) = self.authorization_remediation {
            param("authorization_remediation", remediation);
        }
        if let Some(algs) = self.algs {
            param("algs", algs);
        }
        if let Some(description) = self.error_description {
            param("error_description", &description_text(description));
        }
        // `quote` keeps every byte visible ASCII or space, which HeaderValue always accepts.
        HeaderValue::from_str(&out).unwrap_or_else(|_| HeaderValue::from_static(BEARER))
    }
}

/// `text` cut down to the characters RFC 6750 §3 allows in `error_description`: `"` becomes
/// `'`, `\` becomes `/`, `=` becomes `:` (see the module docs), and every control or non-ASCII
/// character becomes `?`.
pub(crate) fn description_text(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '"' => '\'',
            '\\' => '/',
            '=' => ':',
            ' '..='~' => c,
            _ => '?',
        })
        .collect()
}

/// Writes `value` as an RFC 9110 quoted-string.
pub(crate) fn quote(value: &str, out: &mut String) {
    out.push('"');
    for c in value.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => out.push('?'),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_error_when_no_credential() {
        let value = Challenge {
            scheme: BEARER,
            algs: None,
            resource_metadata: "https://a.example/.well-known/oauth-protected-resource/mcp",
            scope: Some("mcp:read"),
            error: None,
            error_description: None,
            authorization_remediation: None,
        }
        .to_header_value();
        assert_eq!(
            value,
            "Bearer scope=\"mcp:read\", resource_metadata=\"https://a.example/.well-known/oauth-protected-resource/mcp\""
        );
    }

    #[test]
    fn a_dpop_challenge_names_its_scheme_and_algorithms() {
        let value = Challenge {
            scheme: DPOP,
            algs: Some("ES256 PS256"),
            resource_metadata: "https://a.example/prm",
            scope: Some("mcp:read"),
            error: Some(ErrorCode::UseDpopNonce),
            error_description: Some("nonce"),
            authorization_remediation: None,
        }
        .to_header_value();
        assert_eq!(
            value,
            "DPoP error=\"use_dpop_nonce\", scope=\"mcp:read\", resource_metadata=\"https://a.example/prm\", \
             algs=\"ES256 PS256\", error_description=\"nonce\""
        );
    }

    #[test]
    fn hostile_values_cannot_escape_the_quotes() {
        let value = Challenge {
            scheme: BEARER,
            algs: None,
            resource_metadata: "x\", error=\"evil\r\nSet-Cookie: a=b",
            scope: Some("a\\b"),
            error: Some(ErrorCode::InvalidToken),
            error_description: Some("caf\u{e9}\u{0}"),
            authorization_remediation: None,
        }
        .to_header_value();
        let text = value.to_str().unwrap();
        assert_eq!(
            text,
            "Bearer error=\"invalid_token\", scope=\"a\\\\b\", \
             resource_metadata=\"x\\\", error=\\\"evil??Set-Cookie: a=b\", error_description=\"caf??\""
        );
        assert!(!text.contains('\r') && !text.contains('\n'));
    }

    #[test]
    fn a_description_holds_only_what_rfc_6750_allows_and_comes_last() {
        let value = Challenge {
            scheme: BEARER,
            algs: None,
            resource_metadata: "https://a.example/prm",
            scope: Some("mcp:read"),
            error: Some(ErrorCode::InsufficientScope),
            error_description: Some(
                "say \"hi\" \\ scope=mcp:admin resource_metadata=https://evil caf\u{e9}",
            ),
            authorization_remediation: None,
        }
        .to_header_value();
        let text = value.to_str().unwrap();
        assert_eq!(
            text,
            "Bearer error=\"insufficient_scope\", scope=\"mcp:read\", resource_metadata=\"https://a.example/prm\", \
             error_description=\"say 'hi' / scope:mcp:admin resource_metadata:https://evil caf?\""
        );
        let description = text
            .split("error_description=\"")
            .nth(1)
            .unwrap()
            .trim_end_matches('"');
        assert!(
            description
                .bytes()
                .all(|b| matches!(b, 0x20..=0x21 | 0x23..=0x5B | 0x5D..=0x7E))
        );
    }
}
