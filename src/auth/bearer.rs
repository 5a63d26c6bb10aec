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
    let text = value.to_str().map_err(|_| malformed.clone())?;
    let (scheme, rest) = match text.split_once(' ') {
        Some((scheme, rest)) => (scheme, Some(rest)),
        None => (text, None),
    };
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(AuthError::UnsupportedScheme);
    }
    let token = rest.map(|r| r.trim_start_matches(' ')).unwrap_or("");
    if is_b64token(token) {
        Ok(token)
    } else {
        Err(malformed)
    }
}

/// The characters of a `b64token` before its `=` padding, as a lookup table: the check runs
/// over every byte of every token.
const B64TOKEN_CHARS: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        table[b] =
            c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b'~' | b'+' | b'/');
        b += 1;
    }
    table
};

/// `b64token = 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="`
fn is_b64token(token: &str) -> bool {
    let body = token.trim_end_matches('=');
    !body.is_empty() && body.bytes().all(|b| B64TOKEN_CHARS[usize::from(b)])
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
            assert_eq!(B64TOKEN_CHARS[usize::from(byte)], grammar, "byte {byte}");
        }
        assert!(is_b64token("a.b-c_d~e+f/g=="));
        assert!(!is_b64token("=="));
        assert!(!is_b64token("a=b"));
        assert!(!is_b64token("a b"));
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
