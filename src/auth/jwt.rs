//! JWT access-token verification (RFC 9068 profile) with `jsonwebtoken`.
//!
//! Order of checks, cheapest first: the header decodes; no `crit`; `typ` is an access-token
//! type; the issuer is one of the configured ones; a key of that issuer matches the `kid` and
//! allows the `alg`; then one decode checks the signature, `exp` (required), `nbf`, `iss` and
//! `aud` with the configured leeway; finally the claims the layer reads must have the right
//! types. The key is always chosen from the issuer named in the token, so a token claiming
//! issuer A can never be verified with a key published by issuer B.

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, Validation};
use serde_json::{Map, Value};

use super::claims::principal_from_claims;
use super::keys::KeySource;
use super::principal::{Principal, TokenKind};
use super::rejection::{AuthError, InvalidToken};
use super::scope::ScopeHierarchy;

/// Which `typ` header values are accepted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum TypPolicy {
    /// `at+jwt`, `application/at+jwt` or `JWT`, or no `typ` at all (the default: many issuers
    /// omit it).
    #[default]
    AccessTokenOrJwt,
    /// Only `at+jwt` / `application/at+jwt`, as RFC 9068 §4 requires.
    AccessTokenOnly,
}

impl TypPolicy {
    fn accepts(self, typ: Option<&str>) -> bool {
        // RFC 7515 §4.1.9: a `typ` without a `/` stands for `application/<typ>`, and media
        // types compare case-insensitively, so `JWT` and `application/jwt` are one type.
        let media_type = |t: &str| -> Option<&'static str> {
            let short = match t.get(..12) {
                Some(prefix) if prefix.eq_ignore_ascii_case("application/") => &t[12..],
                _ if t.contains('/') => return None,
                _ => t,
            };
            ["at+jwt", "jwt"]
                .into_iter()
                .find(|known| short.eq_ignore_ascii_case(known))
        };
        match (self, typ.map(media_type)) {
            (Self::AccessTokenOrJwt, None) => true,
            (Self::AccessTokenOrJwt, Some(found)) => found.is_some(),
            (Self::AccessTokenOnly, Some(found)) => found == Some("at+jwt"),
            (Self::AccessTokenOnly, None) => false,
        }
    }
}

/// The keys of one trusted issuer and the validation rules for its tokens.
pub(crate) struct TrustedIssuer {
    pub issuer: String,
    pub keys: KeySource,
    validation: Validation,
}

impl TrustedIssuer {
    pub fn new(issuer: String, keys: KeySource, audience: &str, leeway_secs: u64) -> Self {
        let mut validation = Validation::new(Algorithm::ES256);
        validation.leeway = leeway_secs;
        validation.validate_exp = true;
        validation.validate_nbf = true;
        validation.validate_aud = true;
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        validation.set_issuer(&[issuer.as_str()]);
        validation.set_audience(&[audience]);
        Self {
            issuer,
            keys,
            validation,
        }
    }
}

/// Verifies JWT access tokens against a list of trusted issuers.
pub(crate) struct JwtVerifier {
    issuers: Vec<TrustedIssuer>,
    typ: TypPolicy,
}

#[derive(serde::Deserialize)]
struct IssuerPeek {
    iss: Option<Value>,
}

impl JwtVerifier {
    pub fn new(issuers: Vec<TrustedIssuer>, typ: TypPolicy) -> Self {
        Self { issuers, typ }
    }

    #[cfg(feature = "jwks")]
    pub fn issuers(&self) -> &[TrustedIssuer] {
        &self.issuers
    }

    /// Whether `token` has the shape of a JWS compact serialisation (three parts).
    pub fn looks_like_jwt(token: &str) -> bool {
        token.bytes().filter(|b| *b == b'.').count() == 2
    }

    pub async fn verify(
        &self,
        token: &str,
        hierarchy: &ScopeHierarchy,
    ) -> Result<Principal, AuthError> {
        let invalid = AuthError::InvalidToken;
        let header =
            jsonwebtoken::decode_header(token).map_err(|_| invalid(InvalidToken::Malformed))?;
        if header.crit.is_some() {
            return Err(invalid(InvalidToken::CriticalHeader));
        }
        if !self.typ.accepts(header.typ.as_deref()) {
            return Err(invalid(InvalidToken::UnsupportedType));
        }
        let trusted = self.issuer_for(token)?;
        let key = trusted.keys.find(header.kid.as_deref(), header.alg).await?;
        if !key.algorithms.contains(&header.alg) {
            return Err(invalid(InvalidToken::DisallowedAlgorithm));
        }
        let mut validation = trusted.validation.clone();
        validation.algorithms = vec![header.alg];
        let data = jsonwebtoken::decode::<Map<String, Value>>(token, &key.key, &validation)
            .map_err(|e| invalid(reason_for(e.kind())))?;
        principal_from_claims(data.claims, &trusted.issuer, TokenKind::Jwt, hierarchy)
            .map_err(invalid)
    }

    /// The configured issuer the token claims, read before verification only to pick keys.
    fn issuer_for(&self, token: &str) -> Result<&TrustedIssuer, AuthError> {
        let wrong_issuer = AuthError::InvalidToken(InvalidToken::WrongIssuer);
        // Peeked even with a single issuer: `decode` alone would accept an `iss` array that
        // merely contains the issuer, and report a missing `iss` as a missing claim.
        let peek: IssuerPeek = jsonwebtoken::dangerous::insecure_decode_claims(token)
            .map_err(|_| AuthError::InvalidToken(InvalidToken::Malformed))?;
        let Some(Value::String(iss)) = peek.iss else {
            return Err(wrong_issuer);
        };
        self.issuers
            .iter()
            .find(|t| t.issuer == iss)
            .ok_or(wrong_issuer)
    }
}

fn reason_for(kind: &ErrorKind) -> InvalidToken {
    match kind {
        ErrorKind::ExpiredSignature => InvalidToken::Expired,
        ErrorKind::ImmatureSignature => InvalidToken::NotYetValid,
        ErrorKind::InvalidIssuer => InvalidToken::WrongIssuer,
        ErrorKind::InvalidAudience => InvalidToken::WrongAudience,
        ErrorKind::MissingRequiredClaim(_) => InvalidToken::MissingClaim,
        ErrorKind::InvalidClaimFormat(_) => InvalidToken::BadClaim,
        ErrorKind::InvalidAlgorithm | ErrorKind::MissingAlgorithm => {
            InvalidToken::DisallowedAlgorithm
        }
        ErrorKind::InvalidToken
        | ErrorKind::Base64(_)
        | ErrorKind::Json(_)
        | ErrorKind::Utf8(_) => InvalidToken::Malformed,
        // Signature mismatches and key/crypto failures alike: the token does not verify.
        _ => InvalidToken::BadSignature,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typ_policy() {
        let lax = TypPolicy::AccessTokenOrJwt;
        for typ in [
            None,
            Some("at+jwt"),
            Some("AT+JWT"),
            Some("application/at+jwt"),
            Some("JWT"),
            Some("application/jwt"),
            Some("Application/JWT"),
        ] {
            assert!(lax.accepts(typ), "{typ:?}");
        }
        assert!(!lax.accepts(Some("id_token+jwt")));
        assert!(!lax.accepts(Some("dpop+jwt")));
        for odd in [
            "text/jwt",
            "application/",
            "application/jwt/x",
            "jwt ",
            "",
            "application/dpop+jwt",
        ] {
            assert!(!lax.accepts(Some(odd)), "{odd:?}");
        }
        assert!(TypPolicy::AccessTokenOnly.accepts(Some("Application/At+Jwt")));
        let strict = TypPolicy::AccessTokenOnly;
        assert!(strict.accepts(Some("at+jwt")));
        assert!(!strict.accepts(Some("JWT")));
        assert!(!strict.accepts(None));
    }

    #[test]
    fn jwt_shape() {
        assert!(JwtVerifier::looks_like_jwt("a.b.c"));
        assert!(!JwtVerifier::looks_like_jwt("opaque-token"));
        assert!(!JwtVerifier::looks_like_jwt("a.b.c.d.e"));
    }
}
