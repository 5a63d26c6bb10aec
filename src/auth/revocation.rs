//! [`Revocation`]: what an operator withdraws (one token, one `jti`, a user, a client), and the
//! seam through which the authenticator asks whether a verified token was withdrawn.
//!
//! The set of revocations and its backends live in `store::revocations`; this module only
//! names what a revocation is and what the request path asks of the set, so that `auth` keeps
//! importing nothing of the stores.

use serde::{Deserialize, Serialize};

use super::principal::Principal;
use super::rejection::AuthError;
use super::token_cache::{TokenDigest, digest};

/// What is withdrawn. Each variant matches the tokens it names from the moment it is stored
/// until the longest token it could match has expired
/// (`docs/revocation.md` says how long each lives).
///
/// ```
/// use mcp_gate::auth::Revocation;
///
/// // One token, by its SHA-256 (the token itself is hashed here and not kept).
/// let one = Revocation::token("eyJhbGciOi…", Some(1_900_000_000));
/// // Every token of a user issued until now, and of a client.
/// let user = Revocation::subject("https://as.example", "alice");
/// let client = Revocation::client("https://as.example", "cli");
/// # let _ = (one, user, client);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "by", rename_all = "snake_case", deny_unknown_fields)]
#[non_exhaustive]
pub enum Revocation {
    /// One token, by the SHA-256 of its text (64 hex digits), as the token cache keys it.
    TokenHash {
        /// SHA-256 of the token, lowercase hex.
        #[serde(with = "hex_digest")]
        sha256: TokenDigest,
        /// The token's `exp` (seconds since the epoch), when known: the entry lives until
        /// then; otherwise for the configured maximum token lifetime.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        expires_at: Option<u64>,
    },
    /// The token with this `jti` from this issuer.
    Jti {
        /// The token's issuer (`iss`).
        issuer: String,
        /// The token's `jti`.
        jti: String,
        /// The token's `exp`, when known (as for [`TokenHash`](Self::TokenHash)).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        expires_at: Option<u64>,
    },
    /// Every token of this subject from this issuer issued at or before the revocation
    /// (`iat`); a token issued after it (a grant given again) is accepted.
    Subject {
        /// The tokens' issuer.
        issuer: String,
        /// The tokens' `sub`.
        subject: String,
    },
    /// Every token of this client from this issuer issued at or before the revocation, as for
    /// [`Subject`](Self::Subject).
    Client {
        /// The tokens' issuer.
        issuer: String,
        /// The tokens' `client_id` (or `azp`).
        client_id: String,
    },
}

impl Revocation {
    /// One token: its SHA-256 is kept, never the token. `expires_at` is its `exp`, if known.
    pub fn token(token: &str, expires_at: Option<u64>) -> Self {
        Self::TokenHash {
            sha256: digest(token),
            expires_at,
        }
    }

    /// One token by the SHA-256 of its text.
    pub fn token_hash(sha256: [u8; 32], expires_at: Option<u64>) -> Self {
        Self::TokenHash { sha256, expires_at }
    }

    /// The token `jti` of `issuer`.
    pub fn jti(issuer: impl Into<String>, jti: impl Into<String>, expires_at: Option<u64>) -> Self {
        Self::Jti {
            issuer: issuer.into(),
            jti: jti.into(),
            expires_at,
        }
    }

    /// Every token of `subject` at `issuer` issued until now.
    pub fn subject(issuer: impl Into<String>, subject: impl Into<String>) -> Self {
        Self::Subject {
            issuer: issuer.into(),
            subject: subject.into(),
        }
    }

    /// Every token of `client_id` at `issuer` issued until now.
    pub fn client(issuer: impl Into<String>, client_id: impl Into<String>) -> Self {
        Self::Client {
            issuer: issuer.into(),
            client_id: client_id.into(),
        }
    }

    /// Which kind of revocation this is: `token_hash`, `jti`, `subject` or `client` (a closed
    /// set, fit for a metric label or a log line; the values themselves are not).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::TokenHash { .. } => "token_hash",
            Self::Jti { .. } => "jti",
            Self::Subject { .. } => "subject",
            Self::Client { .. } => "client",
        }
    }

    /// The token's own `exp` when the revocation names one token and it was given.
    pub fn token_expiry(&self) -> Option<u64> {
        match self {
            Self::TokenHash { expires_at, .. } | Self::Jti { expires_at, .. } => *expires_at,
            Self::Subject { .. } | Self::Client { .. } => None,
        }
    }

    /// Whether every text it names is non-empty (an empty issuer, subject, client or `jti`
    /// matches nothing a verified token carries, and is refused as a mistake).
    pub fn is_well_formed(&self) -> bool {
        match self {
            Self::TokenHash { .. } => true,
            Self::Jti { issuer, jti, .. } => !issuer.is_empty() && !jti.is_empty(),
            Self::Subject { issuer, subject } => !issuer.is_empty() && !subject.is_empty(),
            Self::Client { issuer, client_id } => !issuer.is_empty() && !client_id.is_empty(),
        }
    }
}

/// What the request path asks of the revocation set, on every request (a cache hit or a
/// fresh verification): `Ok` to go on, or the refusal (a revoked token, `401 invalid_token`;
/// a revocation feed the gate may not trust now, `503`). Synchronous: the set is a local copy.
pub(crate) trait RevocationCheck: Send + Sync {
    /// Checks the token whose SHA-256 is `key` and whose verified principal is `principal`.
    fn check(&self, key: &TokenDigest, principal: &Principal) -> Result<(), AuthError>;
}

/// Serde for a SHA-256 as 64 lowercase hex digits.
mod hex_digest {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(digest: &[u8; 32], serializer: S) -> Result<S::Ok, S::Error> {
        let text: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        serializer.serialize_str(&text)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<[u8; 32], D::Error> {
        let text = String::deserialize(deserializer)?;
        parse(&text).ok_or_else(|| serde::de::Error::custom("sha256 must be 64 hex digits"))
    }

    fn parse(text: &str) -> Option<[u8; 32]> {
        let bytes = text.as_bytes();
        if bytes.len() != 64 {
            return None;
        }
        let mut out = [0u8; 32];
        for (i, pair) in bytes.chunks_exact(2).enumerate() {
            let pair = std::str::from_utf8(pair).ok()?;
            out[i] = u8::from_str_radix(pair, 16).ok()?;
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_revocation_reads_back_as_written_and_refuses_unknown_fields() {
        for revocation in [
            Revocation::token("abc", Some(5)),
            Revocation::jti("i", "j", None),
            Revocation::subject("i", "s"),
            Revocation::client("i", "c"),
        ] {
            let text = serde_json::to_string(&revocation).unwrap();
            assert_eq!(
                serde_json::from_str::<Revocation>(&text).unwrap(),
                revocation
            );
        }
        let hashed = serde_json::to_value(Revocation::token("abc", None)).unwrap();
        assert_eq!(
            hashed["sha256"],
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        for bad in [
            r#"{"by":"subject","issuer":"i","subject":"s","extra":1}"#,
            r#"{"by":"token_hash","sha256":"zz"}"#,
            r#"{"by":"everyone"}"#,
        ] {
            assert!(serde_json::from_str::<Revocation>(bad).is_err(), "{bad}");
        }
        assert!(!Revocation::subject("i", "").is_well_formed());
    }
}
