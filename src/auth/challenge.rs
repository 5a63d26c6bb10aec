//! `WWW-Authenticate: Bearer` challenges (RFC 6750 §3, RFC 9728 §5.1).
//!
//! A challenge is assembled from fixed parameter names and values the layer controls, but the
//! values still pass through [`quote`] so that no byte can end the quoted string early or start
//! a new header line: `"` and `\` are escaped, control characters and non-ASCII bytes are
//! replaced by `?`.

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
}

impl ErrorCode {
    /// The code as written on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidRequest => "invalid_request",
            ErrorCode::InvalidToken => "invalid_token",
            ErrorCode::InsufficientScope => "insufficient_scope",
            ErrorCode::InsufficientAuthorization => "insufficient_authorization",
        }
    }
}

/// One `Bearer` challenge, rendered with [`Challenge::to_header_value`].
#[derive(Clone, Debug)]
pub(crate) struct Challenge<'a> {
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
        out.push_str("Bearer ");
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
        if let Some(description) = self.error_description {
            param("error_description", description);
        }
        if let Some(scope) = self.scope.filter(|s| !s.is_empty()) {
            param("scope", scope);
        }
        param("resource_metadata", self.resource_metadata);
        if let Some(remediation) = self.authorization_remediation {
            param("authorization_remediation", remediation);
        }
        // `quote` keeps every byte visible ASCII or space, which HeaderValue always accepts.
        HeaderValue::from_str(&out).unwrap_or_else(|_| HeaderValue::from_static("Bearer"))
    }
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
    fn hostile_values_cannot_escape_the_quotes() {
        let value = Challenge {
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
            "Bearer error=\"invalid_token\", error_description=\"caf??\", scope=\"a\\\\b\", \
             resource_metadata=\"x\\\", error=\\\"evil??Set-Cookie: a=b\""
        );
        assert!(!text.contains('\r') && !text.contains('\n'));
    }
}
