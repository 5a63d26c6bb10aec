//! Reading a [`Principal`] out of verified claims (a JWT payload or an introspection response).
//!
//! Claims the layer relies on must have the right type; a wrong type is an `invalid_token`
//! refusal, never a silent default. Claims it does not know are kept, untouched, for the
//! application.

use serde_json::{Map, Value};

use super::principal::{Principal, PrincipalParts, TokenKind};
use super::rejection::InvalidToken;
use super::scope::{ScopeHierarchy, ScopeSet, parse_scope_string};

/// Builds a principal from verified claims. `issuer` is the issuer the verifier accepted.
pub(crate) fn principal_from_claims(
    claims: Map<String, Value>,
    issuer: &str,
    kind: TokenKind,
    hierarchy: &ScopeHierarchy,
) -> Result<Principal, InvalidToken> {
    let subject = optional_string(&claims, "sub")?;
    let client_id = match optional_string(&claims, "client_id")? {
        Some(id) => Some(id),
        None => optional_string(&claims, "azp")?,
    };
    let scopes = granted_scopes(&claims)?;
    let authorization_details = match claims.get("authorization_details") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) if items.iter().all(Value::is_object) => items.clone(),
        Some(_) => return Err(InvalidToken::BadClaim),
    };
    let expires_at = match claims.get("exp") {
        None => None,
        Some(Value::Number(n)) => Some(
            n.as_u64()
                .or_else(|| {
                    n.as_f64()
                        .filter(|f| f.is_finite() && *f >= 0.0)
                        .map(|f| f as u64)
                })
                .ok_or(InvalidToken::BadClaim)?,
        ),
        Some(_) => return Err(InvalidToken::BadClaim),
    };
    let dpop_jkt = confirmation_jkt(&claims)?;
    let effective_scopes = if hierarchy.is_empty() {
        scopes.clone()
    } else {
        hierarchy.expand(&scopes)
    };
    Ok(Principal::new(PrincipalParts {
        issuer: issuer.to_owned(),
        subject,
        client_id,
        scopes,
        effective_scopes,
        authorization_details,
        claims,
        expires_at,
        kind,
        dpop_jkt,
    }))
}

/// The DPoP key thumbprint of `cnf` (RFC 7800 §3.1, RFC 9449 §6.1 and §6.2): `None` for an
/// unbound token. A `cnf` that is not an object, a `jkt` that is not a non-empty string, or a
/// confirmation method the layer cannot check (`x5t#S256`, mutual TLS, RFC 8705) is refused:
/// a bound token whose binding cannot be verified is not accepted as a bearer token.
fn confirmation_jkt(claims: &Map<String, Value>) -> Result<Option<String>, InvalidToken> {
    let cnf = match claims.get("cnf") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(cnf)) => cnf,
        Some(_) => return Err(InvalidToken::BadClaim),
    };
    match cnf.get("jkt") {
        Some(Value::String(jkt)) if !jkt.is_empty() => Ok(Some(jkt.clone())),
        Some(_) => Err(InvalidToken::BadClaim),
        None if cnf.is_empty() => Ok(None),
        None => Err(InvalidToken::UnsupportedBinding),
    }
}

fn optional_string(
    claims: &Map<String, Value>,
    name: &str,
) -> Result<Option<String>, InvalidToken> {
    match claims.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(InvalidToken::BadClaim),
    }
}

/// Scopes from `scope` (space-separated string) and `scp` (array of strings, or a string).
fn granted_scopes(claims: &Map<String, Value>) -> Result<ScopeSet, InvalidToken> {
    let mut scopes = ScopeSet::new();
    match claims.get("scope") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => scopes.extend(parse_scope_string(s).map(str::to_owned)),
        Some(_) => return Err(InvalidToken::BadClaim),
    }
    match claims.get("scp") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => scopes.extend(parse_scope_string(s).map(str::to_owned)),
        Some(Value::Array(items)) => {
            for item in items {
                let Value::String(s) = item else {
                    return Err(InvalidToken::BadClaim);
                };
                scopes.extend(parse_scope_string(s).map(str::to_owned));
            }
        }
        Some(_) => return Err(InvalidToken::BadClaim),
    }
    Ok(scopes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(value: Value) -> Result<Principal, InvalidToken> {
        let Value::Object(map) = value else {
            unreachable!()
        };
        principal_from_claims(
            map,
            "https://as.example",
            TokenKind::Jwt,
            &ScopeHierarchy::new(),
        )
    }

    #[test]
    fn scopes_from_scope_and_scp() {
        let p =
            read(json!({"scope": "a b", "scp": ["c", "d e"], "sub": "u", "azp": "cli"})).unwrap();
        assert_eq!(
            p.scopes().iter().collect::<Vec<_>>(),
            ["a", "b", "c", "d", "e"]
        );
        assert_eq!(p.client_id(), Some("cli"));
        let p = read(json!({"scp": "x y"})).unwrap();
        assert!(p.has_scope("y"));
    }

    #[test]
    fn wrong_types_are_refused() {
        for claims in [
            json!({"scope": 1}),
            json!({"scope": ["a"]}),
            json!({"scp": [1]}),
            json!({"scp": {}}),
            json!({"sub": 5}),
            json!({"client_id": true}),
            json!({"authorization_details": {"type": "x"}}),
            json!({"authorization_details": ["x"]}),
            json!({"exp": "soon"}),
            json!({"exp": -1}),
            json!({"cnf": "jkt"}),
            json!({"cnf": {"jkt": 1}}),
            json!({"cnf": {"jkt": ""}}),
        ] {
            assert_eq!(
                read(claims.clone()).err(),
                Some(InvalidToken::BadClaim),
                "{claims}"
            );
        }
    }

    #[test]
    fn cnf_jkt_binds_the_principal_and_other_bindings_are_refused() {
        let p =
            read(json!({"cnf": {"jkt": "0ZcOCORZNYy-DWpqq30jZyJGHTN0d2HglBV3uiguA4I"}})).unwrap();
        assert_eq!(
            p.dpop_jkt(),
            Some("0ZcOCORZNYy-DWpqq30jZyJGHTN0d2HglBV3uiguA4I")
        );
        assert_eq!(read(json!({"sub": "u"})).unwrap().dpop_jkt(), None);
        assert_eq!(read(json!({"cnf": {}})).unwrap().dpop_jkt(), None);
        assert_eq!(
            read(json!({"cnf": {"x5t#S256": "abc"}})).err(),
            Some(InvalidToken::UnsupportedBinding)
        );
    }

    #[test]
    fn hierarchy_expands_effective_scopes_only() {
        let Value::Object(map) = json!({"scope": "admin"}) else {
            unreachable!()
        };
        let h = ScopeHierarchy::new().implies("admin", ["read"]);
        let p = principal_from_claims(map, "i", TokenKind::Jwt, &h).unwrap();
        assert!(p.has_scope("read"));
        assert!(!p.scopes().contains("read"));
    }
}
