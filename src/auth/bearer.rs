//! Strict bearer-token extraction (RFC 6750 §2.1, the header method only).
//!
//! The token is read from exactly one `Authorization: Bearer <b64token>` header. The other two
//! RFC 6750 carriers, the `access_token` query parameter (§2.3) and the form-encoded body
//! (§2.2), are refused outright rather than ignored: a client that sends a token there expects
//! it to count, and silently treating the request as anonymous would hide the mistake. Every
//! malformed value is an error, never "no credential".
//!
//! ```
//! use http::Request;
//! use mcp_gate::{AuthError, auth::bearer_token};
//!
//! let request = Request::get("/mcp").header("authorization", "bearer abc.def-ghi").body(()).unwrap();
//! assert_eq!(bearer_token(request.headers(), request.uri()), Ok("abc.def-ghi"));
//!
//! let request = Request::get("/mcp?access_token=abc").body(()).unwrap();
//! assert!(matches!(bearer_token(request.headers(), request.uri()), Err(AuthError::InvalidRequest(_))));
//! ```

use http::{HeaderMap, Uri, header};

use super::rejection::{AuthError, InvalidRequest};

/// Extracts the bearer token from a request's headers and URI, or says why it cannot.
///
/// Refusals: `access_token` in the query or a form-encoded body (400), two `Authorization`
/// headers (400), a `Bearer` value that is not one `b64token` (400), another scheme (401),
/// no header at all (401).
pub fn bearer_token<'a>(headers: &'a HeaderMap, uri: &Uri) -> Result<&'a str, AuthError> {
    credential(headers, uri, false).map(|(_, token)| token)
}

/// How a token was presented.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scheme {
    /// `Authorization: Bearer <token>` (RFC 6750).
    Bearer,
    /// `Authorization: DPoP <token>` with a `DPoP` proof header (RFC 9449 §7.1).
    Dpop,
}

/// [`bearer_token`], and when `dpop` is on, the `DPoP` scheme too (the same `b64token`
/// grammar, RFC 9449 §7.1): the token and the scheme it came with.
pub(crate) fn credential<'a>(
    headers: &'a HeaderMap,
    uri: &Uri,
    dpop: bool,
) -> Result<(Scheme, &'a str), AuthError> {
    let (scheme, token) = presented(headers, uri, dpop)?;
    Ok((scheme, token_text(token)?))
}

/// A token [`presented`] as text. A b64token is ASCII, so this cannot fail; it is refused
/// rather than trusted if it did.
pub(crate) fn token_text(token: &[u8]) -> Result<&str, AuthError> {
    std::str::from_utf8(token)
        .map_err(|_| AuthError::InvalidRequest(InvalidRequest::MalformedAuthorizationHeader))
}

/// [`credential`], with the token left as the header's bytes: a token found in the cache is
/// only hashed, never needed as text.
pub(crate) fn presented<'a>(
    headers: &'a HeaderMap,
    uri: &Uri,
    dpop: bool,
) -> Result<(Scheme, &'a [u8]), AuthError> {
    let (scheme, token) = located(headers, uri, dpop)?;
    check_token(token)?;
    Ok((scheme, token))
}

/// The token's own grammar, `b64token` (RFC 6750 §2.1), checked: what [`presented`] adds to
/// [`located`].
pub(crate) fn check_token(token: &[u8]) -> Result<(), AuthError> {
    if is_b64token(token) {
        Ok(())
    } else {
        Err(AuthError::InvalidRequest(
            InvalidRequest::MalformedAuthorizationHeader,
        ))
    }
}

/// [`presented`] but for the token's grammar ([`check_token`]): the one credential found, its
/// scheme checked, the token's bytes as sent. For a caller that checks the grammar only when
/// it has not met these bytes before (the verified-token cache holds only tokens that passed).
pub(crate) fn located<'a>(
    headers: &'a HeaderMap,
    uri: &Uri,
    dpop: bool,
) -> Result<(Scheme, &'a [u8]), AuthError> {
    if uri.query().is_some_and(query_has_access_token) {
        return Err(AuthError::InvalidRequest(InvalidRequest::TokenInQuery));
    }
    if is_form_encoded(headers) {
        return Err(AuthError::InvalidRequest(InvalidRequest::FormEncodedBody));
    }
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    let Some(value) = values.next() else {
        return Err(AuthError::MissingCredential);
    };
    if values.next().is_some() {
        return Err(AuthError::InvalidRequest(
            InvalidRequest::MultipleAuthorizationHeaders,
        ));
    }
    let malformed = AuthError::InvalidRequest(InvalidRequest::MalformedAuthorizationHeader);
    // One pass over the long part, the token: the b64token check implies what `to_str` would
    // check (visible ASCII), so the header is only read byte by byte once.
    let bytes = value.as_bytes();
    let (scheme, rest) = match bytes.iter().position(|&b| b == b' ') {
        Some(space) => (&bytes[..space], &bytes[space + 1..]),
        None => (bytes, &b""[..]),
    };
    if !is_visible(scheme) {
        return Err(malformed);
    }
    // `Bearer` followed by anything but a space (a tab, say) is a bearer credential written
    // wrongly, not another scheme: RFC 7235 separates the scheme from its value with spaces.
    if scheme.len() > BEARER.len() && scheme[..BEARER.len()].eq_ignore_ascii_case(BEARER) {
        let next = scheme[BEARER.len()];
        if !is_b64token_byte(next) && next != b'=' {
            return Err(malformed);
        }
    }
    let presented = if scheme.eq_ignore_ascii_case(BEARER) {
        Scheme::Bearer
    } else if dpop && scheme.eq_ignore_ascii_case(DPOP) {
        Scheme::Dpop
    } else {
        return Err(if is_visible(rest) {
            AuthError::UnsupportedScheme
        } else {
            malformed
        });
    };
    let start = rest.iter().position(|&b| b != b' ').unwrap_or(rest.len());
    Ok((presented, &rest[start..]))
}

/// The scheme, as compared (case-insensitively).
const BEARER: &[u8] = b"bearer";
/// The DPoP scheme, as compared (case-insensitively).
const DPOP: &[u8] = b"dpop";

/// What `HeaderValue::to_str` accepts: visible ASCII, space and tab.
fn is_visible(bytes: &[u8]) -> bool {
    bytes
        .iter()
        .all(|&b| b == b'\t' || (0x20..0x7f).contains(&b))
}

/// One byte of the RFC 6750 `b64token` grammar: `ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" /
/// "/"`. Branch-free, so that the check over a whole token is vectorised.
const fn is_b64token_byte(b: u8) -> bool {
    let folded = b | 0x20;
    (folded.wrapping_sub(b'a') < 26)
        | (b.wrapping_sub(b'0') < 10)
        | (b == b'-')
        | (b == b'.')
        | (b == b'_')
        | (b == b'~')
        | (b == b'+')
        | (b == b'/')
}

/// `1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="`.
fn is_b64token(token: &[u8]) -> bool {
    let padding = token.iter().rev().take_while(|&&b| b == b'=').count();
    let body = &token[..token.len() - padding];
    !body.is_empty() && body.iter().fold(true, |ok, &b| ok & is_b64token_byte(b))
}

fn query_has_access_token(query: &str) -> bool {
    url::form_urlencoded::parse(query.as_bytes()).any(|(name, _)| name == "access_token")
}

fn is_form_encoded(headers: &HeaderMap) -> bool {
    headers.get_all(header::CONTENT_TYPE).iter().any(|value| {
        value.to_str().is_ok_and(|v| {
            v.split(';').next().is_some_and(|mime| {
                mime.trim()
                    .eq_ignore_ascii_case("application/x-www-form-urlencoded")
            })
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_b64token_table_is_the_grammar() {
        for byte in 0..=255u8 {
            let grammar = byte.is_ascii_alphanumeric() || b"-._~+/".contains(&byte);
            assert_eq!(is_b64token_byte(byte), grammar, "byte {byte}");
        }
        assert!(is_b64token(b"a.b-c_d~e+f/g=="));
        assert!(!is_b64token(b"=="));
        assert!(!is_b64token(b"a=b"));
        assert!(!is_b64token(b"a b"));
    }
    use http::{HeaderValue, Request};

    fn extract(request: &Request<()>) -> Result<&str, AuthError> {
        bearer_token(request.headers(), request.uri())
    }

    fn with_auth(value: &'static [u8]) -> Request<()> {
        let mut request = Request::post("/mcp").body(()).unwrap();
        request.headers_mut().insert(
            header::AUTHORIZATION,
            HeaderValue::from_bytes(value).unwrap(),
        );
        request
    }

    const MALFORMED: AuthError =
        AuthError::InvalidRequest(InvalidRequest::MalformedAuthorizationHeader);

    #[test]
    fn accepts_b64token_with_any_scheme_case() {
        assert_eq!(extract(&with_auth(b"Bearer a.b.c")), Ok("a.b.c"));
        assert_eq!(extract(&with_auth(b"BEARER a+/b~c_-==")), Ok("a+/b~c_-=="));
        assert_eq!(extract(&with_auth(b"bearer   spaced")), Ok("spaced"));
    }

    #[test]
    fn refuses_malformed_values() {
        for value in [
            &b"Bearer"[..],
            b"Bearer ",
            b"Bearer a b",
            b"Bearer a,b",
            b"Bearer =abc",
            b"Bearer ====",
            b"Bearer a\"b",
            b"Bearer \xc3\xa9",
            b"Bearer\ttoken",
            b"bearer\t\ttoken",
            b"Bearer\t",
            b"Bearer,token",
        ] {
            assert_eq!(extract(&with_auth(value)), Err(MALFORMED), "{value:?}");
        }
    }

    #[test]
    fn other_schemes_and_absence() {
        assert_eq!(
            extract(&with_auth(b"Basic dXNlcjpwdw==")),
            Err(AuthError::UnsupportedScheme)
        );
        assert_eq!(
            extract(&with_auth(b"Bearertoken")),
            Err(AuthError::UnsupportedScheme)
        );
        let request = Request::post("/mcp").body(()).unwrap();
        assert_eq!(extract(&request), Err(AuthError::MissingCredential));
    }

    #[test]
    fn the_dpop_scheme_only_when_enabled() {
        let request = with_auth(b"DPoP a.b.c");
        let (headers, uri) = (request.headers(), request.uri());
        assert_eq!(credential(headers, uri, true), Ok((Scheme::Dpop, "a.b.c")));
        assert_eq!(
            credential(headers, uri, false),
            Err(AuthError::UnsupportedScheme)
        );
        assert_eq!(extract(&request), Err(AuthError::UnsupportedScheme));
        let request = with_auth(b"dpop a b");
        assert_eq!(
            credential(request.headers(), request.uri(), true),
            Err(MALFORMED)
        );
        let request = with_auth(b"Bearer a.b.c");
        assert_eq!(
            credential(request.headers(), request.uri(), true),
            Ok((Scheme::Bearer, "a.b.c"))
        );
    }

    #[test]
    fn refuses_two_headers() {
        let request = Request::post("/mcp")
            .header("authorization", "Bearer a")
            .header("authorization", "Bearer b")
            .body(())
            .unwrap();
        assert_eq!(
            extract(&request),
            Err(AuthError::InvalidRequest(
                InvalidRequest::MultipleAuthorizationHeaders
            ))
        );
    }

    #[test]
    fn refuses_query_and_form_tokens_even_beside_a_header() {
        let request = Request::post("/mcp?x=1&access_token=abc")
            .header("authorization", "Bearer a")
            .body(())
            .unwrap();
        assert_eq!(
            extract(&request),
            Err(AuthError::InvalidRequest(InvalidRequest::TokenInQuery))
        );
        let request = Request::post("/mcp")
            .header(
                "content-type",
                "Application/X-WWW-Form-Urlencoded; charset=utf-8",
            )
            .body(())
            .unwrap();
        assert_eq!(
            extract(&request),
            Err(AuthError::InvalidRequest(InvalidRequest::FormEncodedBody))
        );
        // A parameter that merely contains the name is not a token carrier.
        let request = Request::post("/mcp?not_access_token=1")
            .header("authorization", "Bearer a")
            .body(())
            .unwrap();
        assert_eq!(extract(&request), Ok("a"));
    }
}
