//! Every bad input gets its own documented refusal, none is let through, nothing panics.
//!
//! Each case drives the layer in front of an axum router with `tower::ServiceExt::oneshot` (no
//! sockets) and checks the whole refusal: status, the exact `WWW-Authenticate` challenge,
//! `Cache-Control: no-store`, a JSON body that agrees with the header, that the inner handler
//! was never reached, and the typed [`AuthError`] (through [`Gate::authenticate`]) with its
//! stable `reason()` code. Expected descriptions are written out here, not read from the crate,
//! so a changed wording fails a test.

use crate::common::tokens;

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, Uri, header};
use jsonwebtoken::jwk::AlgorithmParameters;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use mcp_gate::{
    AuthError, ConfigError, Gate, GateBuilder, InvalidRequest, InvalidToken, Issuer, Principal,
    ScopeHierarchy, ScopeSet, StaticKeys,
};
use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::{Value, json};
use tokens::{TestKey, claims, now};
use tower::{Layer, Service, ServiceExt};

const ISSUER: &str = "https://as.example";
const RESOURCE: &str = "http://127.0.0.1:8080/mcp";
const METADATA: &str = "http://127.0.0.1:8080/.well-known/oauth-protected-resource/mcp";

// ---------------------------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------------------------

/// The inner handler: counts that it was reached and reports what it received.
async fn record(
    State(hits): State<Arc<AtomicUsize>>,
    method: Method,
    headers: HeaderMap,
    principal: Option<Principal>,
) -> Json<Value> {
    hits.fetch_add(1, Ordering::SeqCst);
    Json(json!({
        "method": method.as_str(),
        "authorization_present": headers.contains_key(header::AUTHORIZATION),
        "principal": principal.map(|p| json!({
            "issuer": p.issuer(),
            "subject": p.subject(),
            "client_id": p.client_id(),
            "scopes": p.scopes(),
            "effective_scopes": p.effective_scopes(),
        })),
    }))
}

struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: Value,
}

/// A gate in front of a recording router.
struct Harness {
    gate: Gate,
    app: Router,
    hits: Arc<AtomicUsize>,
    /// The endpoint scope the challenges must carry (written out, not read from the gate).
    scope: &'static str,
}

impl Harness {
    fn new(gate: Gate, scope: &'static str) -> Self {
        let hits = Arc::new(AtomicUsize::new(0));
        let app = Router::new()
            .route("/mcp", post(record).get(record).delete(record))
            .with_state(hits.clone())
            .layer(gate.layer());
        Self {
            gate,
            app,
            hits,
            scope,
        }
    }

    /// The usual setup: one issuer with `key`, required scope `mcp:read`.
    fn standard(key: &TestKey) -> Self {
        Self::new(
            base(key)
                .required_scopes(["mcp:read"])
                .build()
                .expect("gate"),
            "mcp:read",
        )
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }

    async fn send(&self, request: Request<Body>) -> Reply {
        let response = crate::common::fixtures::through(&self.app, request).await;
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .expect("body");
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Reply {
            status,
            headers,
            body,
        }
    }

    /// Sends `request`, expects exactly `expected`, and that the handler was not reached.
    async fn assert_refused(&self, case: &str, request: Request<Body>, expected: &Refusal) {
        let (headers, uri) = (request.headers().clone(), request.uri().clone());
        let before = self.hits();
        let reply = self.send(request).await;
        assert_eq!(self.hits(), before, "{case}: the handler was reached");
        expected.check(case, &reply, self.scope);
        // The same request through `Gate::authenticate`: the typed refusal and its reason code.
        let error = self
            .gate
            .authenticate(&headers, &uri)
            .await
            .expect_err(&format!("{case}: authenticate accepted it"));
        assert_eq!(error, expected.typed, "{case}: typed refusal");
        assert_eq!(error.reason(), expected.reason, "{case}: reason code");
        assert_eq!(self.hits(), before, "{case}: the handler was reached");
    }

    /// Sends `request`, expects 200 from the handler, and returns what the handler saw.
    async fn assert_admitted(&self, case: &str, request: Request<Body>) -> Value {
        let before = self.hits();
        let reply = self.send(request).await;
        assert_eq!(
            reply.status,
            StatusCode::OK,
            "{case}: {:?} {}",
            reply.headers,
            reply.body
        );
        assert_eq!(self.hits(), before + 1, "{case}: the handler ran once");
        assert_eq!(
            reply.body["authorization_present"], false,
            "{case}: the token reached the handler"
        );
        assert!(
            reply.body["principal"].is_object(),
            "{case}: no principal: {}",
            reply.body
        );
        reply.body
    }
}

/// `Gate::builder()` with the policy every gate needs; this file only exercises authentication,
/// so every authenticated request is allowed.
fn builder() -> GateBuilder {
    Gate::builder().evaluate(mcp_gate::policy::allow_all())
}

/// An MCP `ping` request: a POST the layer classifies and forwards without asking the policy.
const PING: &str = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;

fn ping() -> Body {
    Body::from(PING)
}

/// A `ping` body for POST; GET (the SSE stream) and DELETE (end of session) carry none.
fn body_for(method: &Method) -> Body {
    if method == Method::POST {
        ping()
    } else {
        Body::empty()
    }
}

/// The builder every test starts from: the resource and one issuer trusting `key`.
fn base(key: &TestKey) -> GateBuilder {
    builder()
        .resource(RESOURCE)
        .issuer(Issuer::with_keys(ISSUER, static_keys(key)))
}

fn static_keys(key: &TestKey) -> StaticKeys {
    StaticKeys::from_jwks_json(&key.jwks_json()).expect("an EC key set")
}

fn request(method: Method, uri: &str) -> http::request::Builder {
    Request::builder().method(method).uri(uri)
}

/// `POST /mcp` with `Authorization: Bearer <token>`.
fn bearer(token: &str) -> Request<Body> {
    bearer_to(Method::POST, token)
}

fn bearer_to(method: Method, token: &str) -> Request<Body> {
    request(method.clone(), "/mcp")
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .body(body_for(&method))
        .unwrap()
}

/// `POST /mcp` with a raw `Authorization` value.
fn authorization(value: &[u8]) -> Request<Body> {
    request(Method::POST, "/mcp")
        .header(
            header::AUTHORIZATION,
            HeaderValue::from_bytes(value).expect("a valid header value"),
        )
        .body(ping())
        .unwrap()
}

fn valid_claims() -> Value {
    claims(ISSUER, RESOURCE, "mcp:read")
}

/// `valid_claims()` changed by `edit`.
fn claims_with(edit: impl FnOnce(&mut serde_json::Map<String, Value>)) -> Value {
    let mut claims = valid_claims();
    edit(claims.as_object_mut().unwrap());
    claims
}

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// A JWS with an arbitrary JSON header, really signed by `key` with ES256.
fn sign_raw(key: &TestKey, header: &Value, claims: &Value) -> String {
    sign_segments(
        key,
        &b64(header.to_string().as_bytes()),
        &b64(claims.to_string().as_bytes()),
    )
}

/// A JWS over arbitrary (already encoded) header and payload segments, really signed by `key`.
fn sign_segments(key: &TestKey, header: &str, payload: &str) -> String {
    let message = format!("{header}.{payload}");
    let signature = jsonwebtoken::crypto::sign(message.as_bytes(), &key.encoding, Algorithm::ES256)
        .expect("sign");
    format!("{message}.{signature}")
}

/// Splits a compact JWS into its three segments.
fn segments(token: &str) -> [String; 3] {
    let parts: Vec<&str> = token.split('.').collect();
    assert_eq!(parts.len(), 3, "{token}");
    [
        parts[0].to_owned(),
        parts[1].to_owned(),
        parts[2].to_owned(),
    ]
}

// ---------------------------------------------------------------------------------------------
// Expected refusals, with the documented wording written out
// ---------------------------------------------------------------------------------------------

struct Refusal {
    status: StatusCode,
    error: Option<&'static str>,
    description: &'static str,
    /// The challenge `scope` when it is not the endpoint scope (insufficient_scope).
    scope: Option<String>,
    typed: AuthError,
    reason: &'static str,
}

fn missing_credential() -> Refusal {
    Refusal {
        status: StatusCode::UNAUTHORIZED,
        error: None,
        description: "this resource needs a bearer token",
        scope: None,
        typed: AuthError::MissingCredential,
        reason: "missing_credential",
    }
}

fn unsupported_scheme() -> Refusal {
    Refusal {
        status: StatusCode::UNAUTHORIZED,
        error: None,
        description: "this resource accepts only Bearer credentials",
        scope: None,
        typed: AuthError::UnsupportedScheme,
        reason: "unsupported_scheme",
    }
}

fn invalid_request(kind: InvalidRequest) -> Refusal {
    let (reason, description) = match kind {
        InvalidRequest::MultipleAuthorizationHeaders => (
            "multiple_authorization_headers",
            "more than one Authorization header",
        ),
        InvalidRequest::MalformedAuthorizationHeader => (
            "malformed_authorization_header",
            "the Authorization header is not a valid Bearer credential",
        ),
        InvalidRequest::TokenInQuery => (
            "token_in_query",
            "access tokens are accepted only in the Authorization header, not in the query",
        ),
        InvalidRequest::FormEncodedBody => (
            "form_encoded_body",
            "access tokens are accepted only in the Authorization header, not in a form body",
        ),
        other => panic!("no expectation written for {other:?}"),
    };
    Refusal {
        status: StatusCode::BAD_REQUEST,
        error: Some("invalid_request"),
        description,
        scope: None,
        typed: AuthError::InvalidRequest(kind),
        reason,
    }
}

fn invalid_token(kind: InvalidToken) -> Refusal {
    use InvalidToken::*;
    let (reason, description) = match kind {
        Malformed => ("malformed", "the token is malformed"),
        TooLarge => ("too_large", "the token is too large"),
        UnsupportedType => ("unsupported_type", "the token type is not an access token"),
        CriticalHeader => (
            "critical_header",
            "the token has critical header extensions",
        ),
        DisallowedAlgorithm => ("disallowed_algorithm", "the token algorithm is not allowed"),
        UnknownKey => ("unknown_key", "the token was signed with an unknown key"),
        BadSignature => ("bad_signature", "the token signature is invalid"),
        Expired => ("expired", "the token has expired"),
        NotYetValid => ("not_yet_valid", "the token is not yet valid"),
        WrongIssuer => ("wrong_issuer", "the token issuer is not trusted"),
        WrongAudience => ("wrong_audience", "the token audience is not this resource"),
        MissingClaim => ("missing_claim", "the token lacks a required claim"),
        BadClaim => ("bad_claim", "the token has a malformed claim"),
        Inactive => ("inactive", "the token is not active"),
        Unverifiable => ("unverifiable", "the token cannot be verified"),
        other => panic!("no expectation written for {other:?}"),
    };
    Refusal {
        status: StatusCode::UNAUTHORIZED,
        error: Some("invalid_token"),
        description,
        scope: None,
        typed: AuthError::InvalidToken(kind),
        reason,
    }
}

fn insufficient_scope(required: &[&str]) -> Refusal {
    let required: ScopeSet = required.iter().map(|s| s.to_string()).collect();
    Refusal {
        status: StatusCode::FORBIDDEN,
        error: Some("insufficient_scope"),
        description: "the token lacks scopes this resource needs",
        scope: Some(
            required
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join(" "),
        ),
        typed: AuthError::InsufficientScope { required },
        reason: "insufficient_scope",
    }
}

impl Refusal {
    fn check(&self, case: &str, reply: &Reply, endpoint_scope: &str) {
        assert_eq!(
            reply.status, self.status,
            "{case}: status (body {})",
            reply.body
        );
        let scope = self.scope.as_deref().unwrap_or(endpoint_scope);

        let mut params = Vec::new();
        // The structured parameters first, the free text last (RFC 6750 §3 and the TypeScript
        // SDK's unanchored parser).
        if let Some(error) = self.error {
            params.push(format!("error=\"{error}\""));
        }
        if !scope.is_empty() {
            params.push(format!("scope=\"{scope}\""));
        }
        params.push(format!("resource_metadata=\"{METADATA}\""));
        if self.error.is_some() {
            params.push(format!("error_description=\"{}\"", self.description));
        }
        let expected = format!("Bearer {}", params.join(", "));
        let challenges: Vec<_> = reply
            .headers
            .get_all(header::WWW_AUTHENTICATE)
            .iter()
            .collect();
        assert_eq!(challenges.len(), 1, "{case}: one challenge");
        let challenge = challenges[0].to_str().expect("a visible-ASCII challenge");
        assert_eq!(challenge, expected, "{case}: challenge");
        assert!(
            !challenge.contains(['\r', '\n']),
            "{case}: CR/LF in the challenge"
        );

        assert_eq!(
            reply.headers[header::CACHE_CONTROL],
            "no-store",
            "{case}: Cache-Control"
        );
        assert_eq!(
            reply.headers[header::CONTENT_TYPE],
            "application/json",
            "{case}: Content-Type"
        );

        let body = &reply.body;
        assert_eq!(
            body.get("error").and_then(Value::as_str),
            self.error,
            "{case}: body error {body}"
        );
        assert_eq!(
            body["error_description"], self.description,
            "{case}: body description"
        );
        assert_eq!(
            body.get("scope").and_then(Value::as_str),
            (!scope.is_empty()).then_some(scope),
            "{case}: body scope"
        );
        assert_eq!(
            body["resource_metadata"], METADATA,
            "{case}: body resource_metadata"
        );
        // And, parsed generically, the header and body agree.
        if let Err(problem) = consistent_refusal(reply) {
            panic!("{case}: {problem}");
        }
    }
}

/// Parses the parameters of a `Bearer` challenge (quoted-string values, `\` escapes).
fn challenge_params(challenge: &str) -> Result<Vec<(String, String)>, String> {
    let mut rest = challenge
        .strip_prefix("Bearer")
        .ok_or_else(|| format!("not a Bearer challenge: {challenge}"))?
        .trim_start_matches(' ');
    let mut params = Vec::new();
    while !rest.is_empty() {
        let (name, after) = rest
            .split_once("=\"")
            .ok_or_else(|| format!("no name=\"value\" in {rest}"))?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next() {
                Some((_, '\\')) => value.push(chars.next().ok_or("dangling escape")?.1),
                Some((i, '"')) => break i,
                Some((_, c)) => value.push(c),
                None => return Err(format!("unterminated value in {challenge}")),
            }
        };
        params.push((name.to_owned(), value));
        rest = &after[end + 1..];
        if !rest.is_empty() {
            rest = rest
                .strip_prefix(", ")
                .ok_or_else(|| format!("junk after a parameter: {rest}"))?;
        }
    }
    Ok(params)
}

/// What every refusal must satisfy, whatever provoked it: a 400/401/403 with one well-formed
/// challenge, `no-store`, and a JSON body saying the same as the header.
fn consistent_refusal(reply: &Reply) -> Result<(), String> {
    let status = reply.status.as_u16();
    if !matches!(status, 400 | 401 | 403) {
        return Err(format!("status {status}"));
    }
    if reply
        .headers
        .get(header::CACHE_CONTROL)
        .is_none_or(|v| v != "no-store")
    {
        return Err("no Cache-Control: no-store".into());
    }
    let mut challenges = reply.headers.get_all(header::WWW_AUTHENTICATE).iter();
    let (Some(challenge), None) = (challenges.next(), challenges.next()) else {
        return Err("not exactly one challenge".into());
    };
    if challenge
        .as_bytes()
        .iter()
        .any(|b| !(b' '..=b'~').contains(b))
    {
        return Err(format!(
            "a byte outside visible ASCII and space in {challenge:?}"
        ));
    }
    let params = challenge_params(challenge.to_str().unwrap())?;
    let param = |name: &str| {
        params
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    };
    if param("resource_metadata") != Some(METADATA) {
        return Err(format!("resource_metadata in {challenge:?}"));
    }
    let body = &reply.body;
    let body_error = body.get("error").and_then(Value::as_str);
    if param("error") != body_error {
        return Err(format!("header error {:?} vs body {body}", param("error")));
    }
    if param("error").is_some() && param("error_description") != body["error_description"].as_str()
    {
        return Err(format!("header description vs body {body}"));
    }
    if param("scope") != body.get("scope").and_then(Value::as_str) {
        return Err(format!("header scope vs body {body}"));
    }
    let expected_error = match status {
        400 => Some("invalid_request"),
        403 => Some("insufficient_scope"),
        _ => body_error.map(|_| "invalid_token"),
    };
    if body_error != expected_error {
        return Err(format!("status {status} with error {body_error:?}"));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Carrier (400 invalid_request, or 401 without an error code)
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn refuses_a_request_without_credentials_with_a_bare_challenge() {
    let h = Harness::standard(&TestKey::es256("k1"));
    for method in [Method::POST, Method::GET, Method::DELETE] {
        let req = request(method.clone(), "/mcp")
            .body(body_for(&method))
            .unwrap();
        h.assert_refused(&format!("no header, {method}"), req, &missing_credential())
            .await;
    }
    // Spelled out once more: no `error` parameter, the scope, and where the metadata is.
    let reply = h
        .send(request(Method::POST, "/mcp").body(ping()).unwrap())
        .await;
    assert_eq!(
        reply.headers[header::WWW_AUTHENTICATE],
        "Bearer scope=\"mcp:read\", \
         resource_metadata=\"http://127.0.0.1:8080/.well-known/oauth-protected-resource/mcp\""
    );
}

#[tokio::test]
async fn refuses_other_schemes_like_a_missing_credential() {
    let key = TestKey::es256("k1");
    let h = Harness::standard(&key);
    let token = key.mint(&valid_claims());
    let cases: [(&str, String); 5] = [
        ("Basic", "Basic dXNlcjpwYXNz".into()),
        ("Digest", "Digest username=\"u\"".into()),
        ("DPoP with a valid token", format!("DPoP {token}")),
        ("scheme glued to the token", format!("Bearer{token}")),
        ("token without a scheme", token.clone()),
    ];
    for (case, value) in cases {
        h.assert_refused(case, authorization(value.as_bytes()), &unsupported_scheme())
            .await;
    }
}

#[tokio::test]
async fn refuses_query_token_even_beside_a_valid_header() {
    let key = TestKey::es256("k1");
    let h = Harness::standard(&key);
    let token = key.mint(&valid_claims());
    let expected = invalid_request(InvalidRequest::TokenInQuery);
    let beside_header = |uri: &str| {
        request(Method::POST, uri)
            .header(header::AUTHORIZATION, format!("Bearer {token}"))
            .body(ping())
            .unwrap()
    };
    h.assert_refused(
        "query token beside a valid header",
        beside_header(&format!("/mcp?access_token={token}")),
        &expected,
    )
    .await;
    h.assert_refused(
        "query token after another parameter",
        beside_header("/mcp?x=1&access_token=abc"),
        &expected,
    )
    .await;
    h.assert_refused(
        "percent-encoded parameter name",
        beside_header("/mcp?access%5Ftoken=abc"),
        &expected,
    )
    .await;
    h.assert_refused(
        "empty query token",
        beside_header("/mcp?access_token"),
        &expected,
    )
    .await;
    let alone = request(Method::GET, "/mcp?access_token=abc")
        .body(ping())
        .unwrap();
    h.assert_refused("query token alone", alone, &expected)
        .await;
}

#[tokio::test]
async fn a_parameter_merely_containing_the_name_is_not_a_token_carrier() {
    let key = TestKey::es256("k1");
    let h = Harness::standard(&key);
    let token = key.mint(&valid_claims());
    let req = request(Method::POST, "/mcp?not_access_token=1&x=access_token")
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .body(ping())
        .unwrap();
    h.assert_admitted("look-alike query parameters", req).await;
}

#[tokio::test]
async fn refuses_form_encoded_body_even_beside_a_valid_header() {
    let key = TestKey::es256("k1");
    let h = Harness::standard(&key);
    let token = key.mint(&valid_claims());
    let expected = invalid_request(InvalidRequest::FormEncodedBody);
    for content_type in [
        "application/x-www-form-urlencoded",
        "Application/X-WWW-Form-Urlencoded; charset=utf-8",
        "application/x-www-form-urlencoded ;charset=utf-8",
    ] {
        let req = request(Method::POST, "/mcp")
            .header(header::AUTHORIZATION, format!("Bearer {token}"))
            .header(header::CONTENT_TYPE, content_type)
            .body(Body::from(format!("access_token={token}")))
            .unwrap();
        h.assert_refused(
            &format!("form body ({content_type}) beside a valid header"),
            req,
            &expected,
        )
        .await;
    }
    let alone = request(Method::POST, "/mcp")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from("access_token=abc"))
        .unwrap();
    h.assert_refused("form body alone", alone, &expected).await;
    // A second Content-Type naming the form carrier counts too.
    let second = request(Method::POST, "/mcp")
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(ping())
        .unwrap();
    h.assert_refused("form type in a second Content-Type", second, &expected)
        .await;
}

#[tokio::test]
async fn refuses_two_authorization_headers_even_when_both_are_valid() {
    let key = TestKey::es256("k1");
    let h = Harness::standard(&key);
    let token = key.mint(&valid_claims());
    let expected = invalid_request(InvalidRequest::MultipleAuthorizationHeaders);
    let cases = [
        (
            "the same valid token twice",
            format!("Bearer {token}"),
            format!("Bearer {token}"),
        ),
        (
            "a valid token and garbage",
            format!("Bearer {token}"),
            "Bearer x".to_owned(),
        ),
        (
            "Basic then Bearer",
            "Basic dXNlcjpwYXNz".to_owned(),
            format!("Bearer {token}"),
        ),
    ];
    for (case, first, second) in cases {
        let req = request(Method::POST, "/mcp")
            .header(header::AUTHORIZATION, first)
            .header(header::AUTHORIZATION, second)
            .body(ping())
            .unwrap();
        h.assert_refused(case, req, &expected).await;
    }
}

#[tokio::test]
async fn refuses_malformed_bearer_values() {
    let key = TestKey::es256("k1");
    let h = Harness::standard(&key);
    let token = key.mint(&valid_claims());
    let expected = invalid_request(InvalidRequest::MalformedAuthorizationHeader);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("Bearer with no token", b"Bearer".to_vec()),
        ("Bearer with only a space", b"Bearer ".to_vec()),
        ("Bearer with only spaces", b"Bearer    ".to_vec()),
        ("two tokens", format!("Bearer {token} {token}").into_bytes()),
        (
            "a valid token then a second word",
            format!("Bearer {token} x").into_bytes(),
        ),
        (
            "two tokens separated by a comma",
            format!("Bearer {token},{token}").into_bytes(),
        ),
        (
            "a valid token with a trailing comma",
            format!("Bearer {token},").into_bytes(),
        ),
        (
            "a valid token with a trailing space",
            format!("Bearer {token} ").into_bytes(),
        ),
        (
            "a parameter list instead of a token",
            b"Bearer realm=\"x\", token=\"y\"".to_vec(),
        ),
        ("a quoted token", format!("Bearer \"{token}\"").into_bytes()),
        ("a token of only padding", b"Bearer ====".to_vec()),
        ("padding before the token", b"Bearer =abc".to_vec()),
        (
            "a tab inside the token",
            format!("Bearer {token}\tx").into_bytes(),
        ),
        (
            "non-ASCII (UTF-8) token",
            "Bearer jéton".as_bytes().to_vec(),
        ),
        (
            "non-ASCII (obs-text) after a valid token",
            [format!("Bearer {token}").as_bytes(), b"\xff"].concat(),
        ),
        ("non-ASCII (obs-text) alone", b"Bearer \x80\x81".to_vec()),
    ];
    for (case, value) in cases {
        h.assert_refused(case, authorization(&value), &expected)
            .await;
    }
}

// ---------------------------------------------------------------------------------------------
// Token shape and size
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn refuses_an_opaque_token_when_no_introspection_is_configured() {
    let h = Harness::standard(&TestKey::es256("k1"));
    let expected = invalid_token(InvalidToken::Unverifiable);
    for (case, token) in [
        ("opaque garbage", "not-a-jwt"),
        ("one dot", "abc.def"),
        ("base64 noise", "AAAA+/~_-=="),
    ] {
        h.assert_refused(case, bearer(token), &expected).await;
    }
}

#[tokio::test]
async fn refuses_jwt_shaped_tokens_with_four_or_five_segments() {
    let key = TestKey::es256("k1");
    let h = Harness::standard(&key);
    let token = key.mint(&valid_claims());
    // Not a JWS compact serialisation: with no introspection, "cannot be verified".
    let expected = invalid_token(InvalidToken::Unverifiable);
    h.assert_refused(
        "a valid JWT plus a fourth segment",
        bearer(&format!("{token}.AAAA")),
        &expected,
    )
    .await;
    h.assert_refused("five segments (JWE shape)", bearer("a.b.c.d.e"), &expected)
        .await;
}

#[tokio::test]
async fn refuses_a_three_segment_token_whose_parts_do_not_decode() {
    let key = TestKey::es256("k1");
    let h = Harness::standard(&key);
    let [header, payload, signature] = segments(&key.mint(&valid_claims()));
    let expected = invalid_token(InvalidToken::Malformed);
    let cases = [
        ("empty segments", "..".to_owned()),
        (
            "header is not base64url JSON",
            format!("AAAA.{payload}.{signature}"),
        ),
        (
            "header is not base64url",
            format!("a+b/.{payload}.{signature}"),
        ),
        // Correctly signed, so only the payload itself is wrong.
        (
            "payload is not JSON",
            sign_segments(&key, &header, &b64(b"not json")),
        ),
        (
            "payload is a JSON array",
            sign_segments(&key, &header, &b64(b"[1,2]")),
        ),
        (
            "payload is not base64url",
            sign_segments(&key, &header, "e30+"),
        ),
        (
            "signature with base64 padding",
            format!("{header}.{payload}.{signature}=="),
        ),
    ];
    for (case, token) in cases {
        h.assert_refused(case, bearer(&token), &expected).await;
    }
}

#[tokio::test]
async fn refuses_tokens_longer_than_max_token_bytes() {
    let key = TestKey::es256("k1");
    let gate = base(&key)
        .required_scopes(["mcp:read"])
        .max_token_bytes(100)
        .build()
        .unwrap();
    let h = Harness::new(gate, "mcp:read");
    let real = key.mint(&valid_claims());
    assert!(real.len() > 100);
    h.assert_refused(
        "a valid JWT over the limit",
        bearer(&real),
        &invalid_token(InvalidToken::TooLarge),
    )
    .await;
    h.assert_refused(
        "101 bytes",
        bearer(&"a".repeat(101)),
        &invalid_token(InvalidToken::TooLarge),
    )
    .await;
    // Exactly at the limit the size check passes and the next check answers.
    h.assert_refused(
        "100 bytes",
        bearer(&"a".repeat(100)),
        &invalid_token(InvalidToken::Unverifiable),
    )
    .await;
}

// ---------------------------------------------------------------------------------------------
// Time
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn refuses_a_token_expired_beyond_the_leeway() {
    let key = TestKey::es256("k1");
    let h = Harness::standard(&key);
    let token = key.mint(&claims_with(|c| {
        c.insert("iat".into(), json!(now() - 600));
        c.insert("exp".into(), json!(now() - 120));
    }));
    h.assert_refused(
        "exp two minutes ago",
        bearer(&token),
        &invalid_token(InvalidToken::Expired),
    )
    .await;
}

/// A token of `key` that expired ten seconds ago: inside the default leeway.
fn expired_ten_seconds_ago(key: &TestKey) -> String {
    key.mint(&claims_with(|c| {
        c.insert("exp".into(), json!(now() - 10));
    }))
}

#[tokio::test]
async fn accepts_a_token_expired_within_the_default_leeway() {
    let key = TestKey::es256("k1");
    let h = Harness::standard(&key);
    let token = expired_ten_seconds_ago(&key);
    h.assert_admitted("exp ten seconds ago, leeway 30 s", bearer(&token))
        .await;
}

#[tokio::test]
async fn zero_leeway_refuses_a_token_expired_ten_seconds_ago() {
    let key = TestKey::es256("k1");
    let gate = base(&key)
        .required_scopes(["mcp:read"])
        .leeway(Duration::ZERO)
        .build()
        .unwrap();
    let h = Harness::new(gate, "mcp:read");
    let token = expired_ten_seconds_ago(&key);
    h.assert_refused(
        "exp ten seconds ago, no leeway",
        bearer(&token),
        &invalid_token(InvalidToken::Expired),
    )
    .await;
}

#[tokio::test]
async fn refuses_a_token_not_yet_valid_beyond_the_leeway() {
    let key = TestKey::es256("k1");
    let h = Harness::standard(&key);
    let future = key.mint(&claims_with(|c| {
        c.insert("nbf".into(), json!(now() + 120));
    }));
    h.assert_refused(
        "nbf in two minutes",
        bearer(&future),
        &invalid_token(InvalidToken::NotYetValid),
    )
    .await;
    let soon = key.mint(&claims_with(|c| {
        c.insert("nbf".into(), json!(now() + 10));
    }));
    h.assert_admitted("nbf in ten seconds, leeway 30 s", bearer(&soon))
        .await;
}

// ---------------------------------------------------------------------------------------------
// Required claims, issuer, audience
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn refuses_tokens_missing_a_required_claim() {
    let key = TestKey::es256("k1");
    let h = Harness::standard(&key);
    for claim in ["exp", "aud"] {
        let token = key.mint(&claims_with(|c| {
            c.remove(claim);
        }));
        h.assert_refused(
            &format!("no {claim}"),
            bearer(&token),
            &invalid_token(InvalidToken::MissingClaim),
        )
        .await;
    }
    // `exp` of the wrong type: jsonwebtoken checks presence of required claims before their
    // format, so an unparsable `exp` counts as missing rather than malformed.
    let token = key.mint(&claims_with(|c| {
        c.insert("exp".into(), json!("tomorrow"));
    }));
    h.assert_refused(
        "exp as a string",
        bearer(&token),
        &invalid_token(InvalidToken::MissingClaim),
    )
    .await;
}

#[tokio::test]
async fn refuses_a_token_from_an_untrusted_or_missing_issuer() {
    let key = TestKey::es256("k1");
    let h = Harness::standard(&key);
    let expected = invalid_token(InvalidToken::WrongIssuer);
    let cases: [(&str, Option<Value>); 7] = [
        ("another issuer", Some(json!("https://evil.example"))),
        (
            "the issuer with a trailing slash",
            Some(json!("https://as.example/")),
        ),
        (
            "the issuer in upper case",
            Some(json!("HTTPS://AS.EXAMPLE")),
        ),
        ("no iss at all", None),
        ("iss null", Some(Value::Null)),
        ("iss as an array naming the issuer", Some(json!([ISSUER]))),
        (
            "iss as an array naming the issuer and another",
            Some(json!(["https://evil.example", ISSUER])),
        ),
    ];
    for (case, iss) in cases {
        let token = key.mint(&claims_with(|c| match iss {
            Some(iss) => {
                c.insert("iss".into(), iss);
            }
            None => {
                c.remove("iss");
            }
        }));
        h.assert_refused(case, bearer(&token), &expected).await;
    }
}

#[tokio::test]
async fn refuses_a_token_for_another_audience() {
    let key = TestKey::es256("k1");
    let h = Harness::standard(&key);
    let expected = invalid_token(InvalidToken::WrongAudience);
    let cases = [
        ("another resource", json!("http://127.0.0.1:8080/other")),
        (
            "the resource with a trailing slash",
            json!("http://127.0.0.1:8080/mcp/"),
        ),
        ("the bare origin", json!("http://127.0.0.1:8080")),
        (
            "an array without the resource",
            json!(["https://a.example", "https://b.example"]),
        ),
        ("an empty array", json!([])),
    ];
    for (case, aud) in cases {
        let token = key.mint(&claims_with(|c| {
            c.insert("aud".into(), aud);
        }));
        h.assert_refused(case, bearer(&token), &expected).await;
    }
}

#[tokio::test]
async fn accepts_an_audience_array_containing_the_resource() {
    let key = TestKey::es256("k1");
    let h = Harness::standard(&key);
    let token = key.mint(&claims_with(|c| {
        c.insert("aud".into(), json!(["https://other.example", RESOURCE]));
    }));
    h.assert_admitted("aud array with the resource", bearer(&token))
        .await;
}

// ---------------------------------------------------------------------------------------------
// JOSE header: typ, crit, alg, kid
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn refuses_token_types_that_are_not_access_tokens() {
    let key = TestKey::es256("k1");
    let h = Harness::standard(&key);
    for typ in ["id_token+jwt", "dpop+jwt", "logout+jwt", "JWS", ""] {
        let mut header = key.header();
        header.typ = Some(typ.into());
        let token = key.mint_with(&header, &valid_claims());
        h.assert_refused(
            &format!("typ {typ:?}"),
            bearer(&token),
            &invalid_token(InvalidToken::UnsupportedType),
        )
        .await;
    }
}

#[tokio::test]
async fn accepts_access_token_types_and_no_typ() {
    let key = TestKey::es256("k1");
    let h = Harness::standard(&key);
    for typ in [
        Some("at+jwt"),
        Some("application/at+jwt"),
        Some("AT+JWT"),
        Some("JWT"),
        None,
    ] {
        let mut header = key.header();
        header.typ = typ.map(str::to_owned);
        let token = key.mint_with(&header, &valid_claims());
        h.assert_admitted(&format!("typ {typ:?}"), bearer(&token))
            .await;
    }
}

#[tokio::test]
async fn refuses_a_critical_header() {
    let key = TestKey::es256("k1");
    let h = Harness::standard(&key);
    let expected = invalid_token(InvalidToken::CriticalHeader);
    let mut header = key.header();
    header.crit = Some(vec!["exp".into()]);
    let token = key.mint_with(&header, &valid_claims());
    h.assert_refused("crit [exp]", bearer(&token), &expected)
        .await;
    // Even the one extension jsonwebtoken understands, and even empty.
    for crit in [json!(["b64"]), json!([])] {
        let header =
            json!({"alg": "ES256", "typ": "at+jwt", "kid": "k1", "crit": crit, "b64": true});
        let token = sign_raw(&key, &header, &valid_claims());
        h.assert_refused(&format!("crit {crit}"), bearer(&token), &expected)
            .await;
    }
}

/// The classic key-confusion attack: sign with HMAC, using the public key as the secret.
#[tokio::test]
async fn refuses_hs256_signed_with_the_public_key_as_hmac_secret() {
    let key = TestKey::es256("k1");
    let h = Harness::standard(&key);
    let AlgorithmParameters::EllipticCurve(ec) = &key.jwk.algorithm else {
        unreachable!()
    };
    let point = [
        vec![0x04],
        URL_SAFE_NO_PAD.decode(&ec.x).unwrap(),
        URL_SAFE_NO_PAD.decode(&ec.y).unwrap(),
    ]
    .concat();
    let secrets: [(&str, Vec<u8>); 3] = [
        ("the JWK set document", key.jwks_json().into_bytes()),
        ("the JWK", serde_json::to_vec(&key.jwk).unwrap()),
        ("the SEC1 public point", point),
    ];
    for (what, secret) in secrets {
        let hmac = EncodingKey::from_secret(&secret).unwrap();
        for alg in [Algorithm::HS256, Algorithm::HS384, Algorithm::HS512] {
            let mut header = Header::new(alg);
            header.typ = Some("at+jwt".into());
            header.kid = Some("k1".into());
            let token = jsonwebtoken::encode(&header, &valid_claims(), &hmac).unwrap();
            let case = format!("{alg:?} keyed with {what}, kid of the EC key");
            h.assert_refused(
                &case,
                bearer(&token),
                &invalid_token(InvalidToken::DisallowedAlgorithm),
            )
            .await;
            // Without a kid, no key of the set allows HMAC at all.
            header.kid = None;
            let token = jsonwebtoken::encode(&header, &valid_claims(), &hmac).unwrap();
            let case = format!("{alg:?} keyed with {what}, no kid");
            h.assert_refused(
                &case,
                bearer(&token),
                &invalid_token(InvalidToken::UnknownKey),
            )
            .await;
        }
    }
}

#[tokio::test]
async fn refuses_alg_none() {
    let key = TestKey::es256("k1");
    let h = Harness::standard(&key);
    let payload = b64(valid_claims().to_string().as_bytes());
    let [_, _, real_signature] = segments(&key.mint(&valid_claims()));
    let cases = [
        (
            "alg none, empty signature",
            json!({"alg": "none"}),
            String::new(),
        ),
        (
            "alg none with typ and kid",
            json!({"alg": "none", "typ": "at+jwt", "kid": "k1"}),
            String::new(),
        ),
        (
            "alg None",
            json!({"alg": "None", "kid": "k1"}),
            String::new(),
        ),
        (
            "alg NONE",
            json!({"alg": "NONE", "kid": "k1"}),
            String::new(),
        ),
        (
            "alg none with a real signature",
            json!({"alg": "none", "kid": "k1"}),
            real_signature,
        ),
        (
            "no alg at all",
            json!({"typ": "at+jwt", "kid": "k1"}),
            String::new(),
        ),
    ];
    for (case, header, signature) in cases {
        let token = format!(
            "{}.{payload}.{signature}",
            b64(header.to_string().as_bytes())
        );
        h.assert_refused(
            case,
            bearer(&token),
            &invalid_token(InvalidToken::Malformed),
        )
        .await;
    }
}

#[tokio::test]
async fn refuses_algorithms_the_key_does_not_allow() {
    let key = TestKey::es256("k1");
    let h = Harness::standard(&key);
    let [_, payload, signature] = segments(&key.mint(&valid_claims()));
    // The EC P-256 key allows only ES256: another asymmetric alg naming it is refused before
    // any signature check.
    for alg in ["ES384", "RS256", "PS256", "EdDSA"] {
        let header = json!({"alg": alg, "typ": "at+jwt", "kid": "k1"});
        let token = format!(
            "{}.{payload}.{signature}",
            b64(header.to_string().as_bytes())
        );
        h.assert_refused(
            &format!("alg {alg}"),
            bearer(&token),
            &invalid_token(InvalidToken::DisallowedAlgorithm),
        )
        .await;
    }
}

#[tokio::test]
async fn refuses_a_tampered_payload() {
    let key = TestKey::es256("k1");
    let h = Harness::standard(&key);
    let [header, _, signature] = segments(&key.mint(&valid_claims()));
    let expected = invalid_token(InvalidToken::BadSignature);
    let edits: [(&str, Value); 3] = [
        (
            "subject changed",
            claims_with(|c| {
                c.insert("sub".into(), json!("admin"));
            }),
        ),
        (
            "scope widened",
            claims_with(|c| {
                c.insert("scope".into(), json!("mcp:read mcp:admin"));
            }),
        ),
        (
            "exp extended",
            claims_with(|c| {
                c.insert("exp".into(), json!(now() + 86_400));
            }),
        ),
    ];
    for (case, claims) in edits {
        let token = format!(
            "{header}.{}.{signature}",
            b64(claims.to_string().as_bytes())
        );
        h.assert_refused(case, bearer(&token), &expected).await;
    }
}

#[tokio::test]
async fn refuses_a_tampered_signature() {
    let key = TestKey::es256("k1");
    let h = Harness::standard(&key);
    let [header, payload, signature] = segments(&key.mint(&valid_claims()));
    let expected = invalid_token(InvalidToken::BadSignature);
    let mut bytes = URL_SAFE_NO_PAD.decode(&signature).unwrap();
    assert_eq!(bytes.len(), 64);
    let flip = |bytes: &mut Vec<u8>, i: usize| {
        bytes[i] ^= 0x01;
        format!("{header}.{payload}.{}", b64(bytes))
    };
    h.assert_refused(
        "first byte of r flipped",
        bearer(&flip(&mut bytes.clone(), 0)),
        &expected,
    )
    .await;
    h.assert_refused(
        "last byte of s flipped",
        bearer(&flip(&mut bytes.clone(), 63)),
        &expected,
    )
    .await;
    bytes.iter_mut().for_each(|b| *b = 0);
    h.assert_refused(
        "all-zero signature",
        bearer(&format!("{header}.{payload}.{}", b64(&bytes))),
        &expected,
    )
    .await;
    h.assert_refused(
        "empty signature",
        bearer(&format!("{header}.{payload}.")),
        &expected,
    )
    .await;
    let short = b64(&URL_SAFE_NO_PAD.decode(&signature).unwrap()[..32]);
    h.assert_refused(
        "half a signature",
        bearer(&format!("{header}.{payload}.{short}")),
        &expected,
    )
    .await;
}

#[tokio::test]
async fn refuses_an_unknown_kid() {
    let key = TestKey::es256("k1");
    let h = Harness::standard(&key);
    let mut header = key.header();
    header.kid = Some("k2".into());
    let token = key.mint_with(&header, &valid_claims());
    h.assert_refused(
        "kid k2, only k1 is known",
        bearer(&token),
        &invalid_token(InvalidToken::UnknownKey),
    )
    .await;
    header.kid = None;
    let token = key.mint_with(&header, &valid_claims());
    // The only key has a kid, so a token without one matches nothing.
    h.assert_refused(
        "no kid",
        bearer(&token),
        &invalid_token(InvalidToken::UnknownKey),
    )
    .await;
}

#[tokio::test]
async fn refuses_a_token_signed_by_another_key_with_the_same_kid() {
    let trusted = TestKey::es256("k1");
    let impostor = TestKey::es256("k1");
    let h = Harness::standard(&trusted);
    let token = impostor.mint(&valid_claims());
    h.assert_refused(
        "impostor key, same kid",
        bearer(&token),
        &invalid_token(InvalidToken::BadSignature),
    )
    .await;
}

#[tokio::test]
async fn ignores_keys_named_by_the_token_itself() {
    let trusted = TestKey::es256("k1");
    let attacker = TestKey::es256("k1");
    let h = Harness::standard(&trusted);
    // `jwk` embeds the attacker's public key; `jku`/`x5u` point at the attacker's key set.
    let mut header = attacker.header();
    header.jwk = Some(attacker.jwk.clone());
    header.jku = Some("https://evil.example/jwks.json".into());
    header.x5u = Some("https://evil.example/cert.pem".into());
    let token = attacker.mint_with(&header, &valid_claims());
    h.assert_refused(
        "embedded jwk, jku and x5u",
        bearer(&token),
        &invalid_token(InvalidToken::BadSignature),
    )
    .await;
}

// ---------------------------------------------------------------------------------------------
// Claim types and scopes
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn refuses_claims_of_the_wrong_type() {
    let key = TestKey::es256("k1");
    let h = Harness::standard(&key);
    let cases: [(&str, &str, Value); 10] = [
        ("scope as a number", "scope", json!(1)),
        ("scope as an array", "scope", json!(["mcp:read"])),
        ("scp as an object", "scp", json!({"mcp:read": true})),
        ("scp as an array of numbers", "scp", json!([1, 2])),
        (
            "authorization_details as a string",
            "authorization_details",
            json!("[{\"type\":\"x\"}]"),
        ),
        (
            "authorization_details as an array of strings",
            "authorization_details",
            json!(["x"]),
        ),
        (
            "authorization_details as an object",
            "authorization_details",
            json!({"type": "x"}),
        ),
        ("sub as a number", "sub", json!(42)),
        ("client_id as a boolean", "client_id", json!(true)),
        ("nbf as a string", "nbf", json!("yesterday")),
    ];
    for (case, name, value) in cases {
        let token = key.mint(&claims_with(|c| {
            c.insert(name.into(), value);
        }));
        h.assert_refused(case, bearer(&token), &invalid_token(InvalidToken::BadClaim))
            .await;
    }
}

#[tokio::test]
async fn refuses_duplicate_claims() {
    // A parser differential: `{"iss":"evil","iss":"<trusted>"}` must not be read one way for
    // the issuer check and another way for the principal.
    let key = TestKey::es256("k1");
    let h = Harness::standard(&key);
    let payload = format!(
        r#"{{"iss":"https://evil.example","iss":"{ISSUER}","aud":"{RESOURCE}","sub":"u","exp":{},"scope":"mcp:read"}}"#,
        now() + 300
    );
    let header = serde_json::to_string(&key.header()).unwrap();
    let token = sign_segments(&key, &b64(header.as_bytes()), &b64(payload.as_bytes()));
    h.assert_refused(
        "iss twice",
        bearer(&token),
        &invalid_token(InvalidToken::Malformed),
    )
    .await;
}

#[tokio::test]
async fn accepts_scopes_given_as_an_scp_array() {
    let key = TestKey::es256("k1");
    let h = Harness::standard(&key);
    let token = key.mint(&claims_with(|c| {
        c.remove("scope");
        c.insert("scp".into(), json!(["mcp:read", "other"]));
    }));
    let seen = h.assert_admitted("scp array", bearer(&token)).await;
    assert_eq!(seen["principal"]["scopes"], json!(["mcp:read", "other"]));
}

#[tokio::test]
async fn refuses_insufficient_scope_listing_every_required_scope() {
    let key = TestKey::es256("k1");
    let gate = base(&key)
        .required_scopes(["mcp:read", "mcp:write"])
        .build()
        .unwrap();
    let h = Harness::new(gate, "mcp:read mcp:write");
    let expected = insufficient_scope(&["mcp:read", "mcp:write"]);
    for (case, scope) in [
        ("only mcp:read", "mcp:read"),
        ("no scope at all", ""),
        ("a look-alike", "mcp:write2 mcp:read"),
    ] {
        let token = key.mint(&claims(ISSUER, RESOURCE, scope));
        h.assert_refused(case, bearer(&token), &expected).await;
        // Verified once, the principal is cached: the cached path refuses it just the same.
        h.assert_refused(&format!("{case} (cached)"), bearer(&token), &expected)
            .await;
    }
    let reply = h
        .send(bearer(&key.mint(&claims(ISSUER, RESOURCE, "mcp:read"))))
        .await;
    assert_eq!(
        reply.headers[header::WWW_AUTHENTICATE],
        "Bearer error=\"insufficient_scope\", scope=\"mcp:read mcp:write\", \
         resource_metadata=\"http://127.0.0.1:8080/.well-known/oauth-protected-resource/mcp\", \
         error_description=\"the token lacks scopes this resource needs\""
    );
    h.assert_admitted(
        "both scopes",
        bearer(&key.mint(&claims(ISSUER, RESOURCE, "mcp:write mcp:read"))),
    )
    .await;
}

#[tokio::test]
async fn scope_hierarchy_lets_a_broader_scope_through() {
    let key = TestKey::es256("k1");
    let gate = base(&key)
        .required_scopes(["mcp:read"])
        .scope_hierarchy(ScopeHierarchy::new().implies("mcp:admin", ["mcp:read"]))
        .build()
        .unwrap();
    let h = Harness::new(gate, "mcp:read");
    let seen = h
        .assert_admitted(
            "mcp:admin implies mcp:read",
            bearer(&key.mint(&claims(ISSUER, RESOURCE, "mcp:admin"))),
        )
        .await;
    assert_eq!(seen["principal"]["scopes"], json!(["mcp:admin"]));
    assert_eq!(
        seen["principal"]["effective_scopes"],
        json!(["mcp:admin", "mcp:read"])
    );
    // The hierarchy only widens downwards.
    let gate = base(&key)
        .required_scopes(["mcp:admin"])
        .scope_hierarchy(ScopeHierarchy::new().implies("mcp:admin", ["mcp:read"]))
        .build()
        .unwrap();
    let h = Harness::new(gate, "mcp:admin");
    let token = key.mint(&claims(ISSUER, RESOURCE, "mcp:read"));
    h.assert_refused(
        "mcp:read does not imply mcp:admin",
        bearer(&token),
        &insufficient_scope(&["mcp:admin"]),
    )
    .await;
}

// ---------------------------------------------------------------------------------------------
// Two issuers
// ---------------------------------------------------------------------------------------------

const ISSUER_A: &str = "https://a.example";
const ISSUER_B: &str = "https://b.example";

fn two_issuers(a: &TestKey, b: &TestKey) -> Harness {
    let gate = builder()
        .resource(RESOURCE)
        .issuer(Issuer::with_keys(ISSUER_A, static_keys(a)))
        .issuer(Issuer::with_keys(ISSUER_B, static_keys(b)))
        .required_scopes(["mcp:read"])
        .build()
        .unwrap();
    Harness::new(gate, "mcp:read")
}

#[tokio::test]
async fn refuses_a_token_claiming_one_issuer_but_signed_with_the_others_key() {
    let key_a = TestKey::es256("key-a");
    let key_b = TestKey::es256("key-b");
    let h = two_issuers(&key_a, &key_b);
    let a_claims = claims(ISSUER_A, RESOURCE, "mcp:read");
    let b_claims = claims(ISSUER_B, RESOURCE, "mcp:read");

    // Signed by B with B's kid, claiming A: A's keys do not include key-b.
    let token = key_b.mint(&a_claims);
    h.assert_refused(
        "iss A, key B, kid key-b",
        bearer(&token),
        &invalid_token(InvalidToken::UnknownKey),
    )
    .await;
    // Signed by B but naming A's kid: A's key does not verify it.
    let mut header = key_b.header();
    header.kid = Some("key-a".into());
    let token = key_b.mint_with(&header, &a_claims);
    h.assert_refused(
        "iss A, key B, kid key-a",
        bearer(&token),
        &invalid_token(InvalidToken::BadSignature),
    )
    .await;
    // And the other way round.
    let token = key_a.mint(&b_claims);
    h.assert_refused(
        "iss B, key A, kid key-a",
        bearer(&token),
        &invalid_token(InvalidToken::UnknownKey),
    )
    .await;
    let mut header = key_a.header();
    header.kid = Some("key-b".into());
    let token = key_a.mint_with(&header, &b_claims);
    h.assert_refused(
        "iss B, key A, kid key-b",
        bearer(&token),
        &invalid_token(InvalidToken::BadSignature),
    )
    .await;

    for (case, iss) in [
        (
            "an untrusted third issuer",
            Some(json!("https://c.example")),
        ),
        ("no iss", None),
        ("iss as an array naming A", Some(json!([ISSUER_A]))),
    ] {
        let mut claims = a_claims.clone();
        match iss {
            Some(iss) => claims["iss"] = iss,
            None => {
                claims.as_object_mut().unwrap().remove("iss");
            }
        }
        h.assert_refused(
            case,
            bearer(&key_a.mint(&claims)),
            &invalid_token(InvalidToken::WrongIssuer),
        )
        .await;
    }
}

#[tokio::test]
async fn accepts_each_issuers_own_tokens() {
    let key_a = TestKey::es256("key-a");
    let key_b = TestKey::es256("key-b");
    let h = two_issuers(&key_a, &key_b);
    let seen = h
        .assert_admitted(
            "A's token",
            bearer(&key_a.mint(&claims(ISSUER_A, RESOURCE, "mcp:read"))),
        )
        .await;
    assert_eq!(seen["principal"]["issuer"], ISSUER_A);
    let seen = h
        .assert_admitted(
            "B's token",
            bearer(&key_b.mint(&claims(ISSUER_B, RESOURCE, "mcp:read"))),
        )
        .await;
    assert_eq!(seen["principal"]["issuer"], ISSUER_B);
}

// ---------------------------------------------------------------------------------------------
// Header injection
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn challenges_never_echo_what_the_client_sent() {
    let key = TestKey::es256("k1");
    let h = Harness::standard(&key);
    let hostile: [&[u8]; 6] = [
        b"Bearer x\", error=\"evil",
        b"Bearer x\\\"",
        b"Bearer \xc3\xa9\xe2\x80\xa8",
        b"Evil realm=\"injected\"",
        b"Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJldmlsIn0.c2ln",
        b"Bearer evil-marker-token",
    ];
    // (CR and LF cannot even be sent: `HeaderValue` refuses them.)
    assert!(HeaderValue::from_bytes(b"Bearer x\r\nSet-Cookie: a=b").is_err());
    for value in hostile {
        let value = HeaderValue::from_bytes(value).expect("a valid header value");
        let reply = h
            .send(
                request(Method::POST, "/mcp")
                    .header(header::AUTHORIZATION, value.clone())
                    .body(ping())
                    .unwrap(),
            )
            .await;
        consistent_refusal(&reply).unwrap_or_else(|problem| panic!("{value:?}: {problem}"));
        let challenge = reply.headers[header::WWW_AUTHENTICATE].to_str().unwrap();
        for marker in ["evil", "injected", "\u{e9}", "eyJ"] {
            assert!(
                !challenge.contains(marker),
                "{value:?} echoed in {challenge}"
            );
            assert!(
                !reply.body.to_string().contains(marker),
                "{value:?} echoed in {}",
                reply.body
            );
        }
    }
    assert_eq!(h.hits(), 0);
}

#[test]
fn scopes_that_could_break_a_challenge_are_config_errors() {
    let key = TestKey::es256("k1");
    for scope in [
        "a\"b",
        "a\\b",
        "a b",
        "a\r\nSet-Cookie: x=y",
        "a\nb",
        "",
        "caf\u{e9}",
        "tab\there",
        "nul\0",
    ] {
        let error = base(&key)
            .required_scopes([scope])
            .build()
            .expect_err(scope);
        assert!(
            matches!(&error, ConfigError::InvalidScope(s) if s == scope),
            "{scope:?}: {error:?}"
        );
    }
    let error = base(&key)
        .scope_hierarchy(ScopeHierarchy::new().implies("mcp:admin", ["mcp:\"read"]))
        .build()
        .expect_err("hierarchy");
    assert!(
        matches!(&error, ConfigError::InvalidScope(s) if s == "mcp:\"read"),
        "{error:?}"
    );
    let error = base(&key)
        .scopes_supported(["ok", "not ok"])
        .build()
        .expect_err("scopes_supported");
    assert!(
        matches!(&error, ConfigError::InvalidScope(s) if s == "not ok"),
        "{error:?}"
    );
}

#[tokio::test]
async fn resource_name_and_path_cannot_break_the_challenge() {
    let key = TestKey::es256("k1");
    // The name only goes into the JSON metadata document, never into a header.
    let gate = base(&key)
        .required_scopes(["mcp:read"])
        .resource_name("evil\"\r\nSet-Cookie: a=b")
        .build()
        .expect("a free-text name is allowed");
    let h = Harness::new(gate.clone(), "mcp:read");
    let reply = h
        .send(request(Method::POST, "/mcp").body(ping()).unwrap())
        .await;
    missing_credential().check("weird resource_name", &reply, "mcp:read");
    assert_eq!(
        gate.metadata().resource_name.as_deref(),
        Some("evil\"\r\nSet-Cookie: a=b")
    );

    // A resource path with a quote and a space is percent-encoded before it reaches a challenge.
    let gate = builder()
        .resource("http://127.0.0.1:8080/m\"c p")
        .issuer(Issuer::with_keys(ISSUER, static_keys(&key)))
        .build()
        .expect("gate");
    let app = Router::new()
        .route("/{*rest}", post(|| async { "reached" }))
        .layer(gate.layer());
    let response = app
        .oneshot(request(Method::POST, "/x").body(ping()).unwrap())
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        response.headers()[header::WWW_AUTHENTICATE],
        "Bearer resource_metadata=\"http://127.0.0.1:8080/.well-known/oauth-protected-resource/m%22c%20p\""
    );
}

// ---------------------------------------------------------------------------------------------
// Configuration errors: found at build time, never a panic
// ---------------------------------------------------------------------------------------------

#[test]
fn missing_resource_is_a_config_error() {
    let key = TestKey::es256("k1");
    let error = builder()
        .issuer(Issuer::with_keys(ISSUER, static_keys(&key)))
        .build()
        .unwrap_err();
    assert!(matches!(error, ConfigError::MissingResource), "{error:?}");
}

#[test]
fn missing_policy_is_a_config_error() {
    let key = TestKey::es256("k1");
    let error = Gate::builder()
        .resource(RESOURCE)
        .issuer(Issuer::with_keys(ISSUER, static_keys(&key)))
        .build()
        .unwrap_err();
    assert!(matches!(error, ConfigError::MissingPolicy), "{error:?}");
}

#[test]
fn unusable_resource_uris_are_config_errors() {
    let key = TestKey::es256("k1");
    for (case, resource) in [
        ("fragment", "http://127.0.0.1:8080/mcp#frag"),
        ("query", "http://127.0.0.1:8080/mcp?x=1"),
        ("userinfo", "http://user:pw@127.0.0.1:8080/mcp"),
        ("username only", "http://user@127.0.0.1:8080/mcp"),
        ("relative", "/mcp"),
        ("another scheme", "ftp://127.0.0.1/mcp"),
        ("empty", ""),
    ] {
        let error = builder()
            .resource(resource)
            .issuer(Issuer::with_keys(ISSUER, static_keys(&key)))
            .build()
            .unwrap_err();
        assert!(
            matches!(&error, ConfigError::InvalidResource { value, .. } if value == resource),
            "{case}: {error:?}"
        );
    }
}

#[test]
fn plain_http_issuers_need_loopback_or_an_explicit_opt_in() {
    let key = TestKey::es256("k1");
    let with = |issuer: &str| {
        builder()
            .resource(RESOURCE)
            .issuer(Issuer::with_keys(issuer, static_keys(&key)))
    };
    let error = with("http://as.example").build().unwrap_err();
    assert!(
        matches!(&error, ConfigError::InvalidIssuer { value, .. } if value == "http://as.example"),
        "{error:?}"
    );
    with("http://as.example")
        .allow_insecure_http()
        .build()
        .expect("explicitly allowed");
    with("http://127.0.0.1:9000").build().expect("loopback");
    with("http://localhost:9000").build().expect("localhost");
    with("http://[::1]:9000").build().expect("IPv6 loopback");
    for (case, issuer) in [
        ("not a URL", "as.example"),
        ("a fragment", "https://as.example#x"),
        ("a query", "https://as.example?x=1"),
        ("another scheme", "ftp://as.example"),
    ] {
        let error = with(issuer).allow_insecure_http().build().unwrap_err();
        assert!(
            matches!(&error, ConfigError::InvalidIssuer { value, .. } if value == issuer),
            "{case}: {error:?}"
        );
    }
}

#[test]
fn plain_http_resource_needs_loopback_or_an_explicit_opt_in() {
    let key = TestKey::es256("k1");
    let with = |resource: &str| {
        builder()
            .resource(resource)
            .issuer(Issuer::with_keys(ISSUER, static_keys(&key)))
    };
    let error = with("http://mcp.example/mcp").build().unwrap_err();
    assert!(
        matches!(&error, ConfigError::InvalidResource { value, reason } if value == "http://mcp.example/mcp" && reason.contains("loopback")),
        "{error:?}"
    );
    with("http://mcp.example/mcp")
        .allow_insecure_http()
        .build()
        .expect("explicitly allowed");
    with("https://mcp.example/mcp").build().expect("https");
    with("http://localhost:8080/mcp").build().expect("loopback");
}

/// A builder call whose effect another one cancels is refused, never silently ignored.
#[test]
fn options_that_would_do_nothing_are_config_errors() {
    let key = TestKey::es256("k1");
    let base = || {
        builder()
            .resource(RESOURCE)
            .issuer(Issuer::with_keys(ISSUER, static_keys(&key)))
    };
    let small_store = || mcp_gate::mcp::MemorySessionStore::new(10, 10, Duration::from_secs(60));
    let field_of = |error: ConfigError| match error {
        ConfigError::InvalidOption { field, .. } => field,
        other => panic!("{other:?}"),
    };
    let sessions = base()
        .legacy_sessions_per_owner(5)
        .session_store(small_store())
        .build()
        .unwrap_err();
    assert!(field_of(sessions).contains("legacy_sessions"));
    let origins = base()
        .allowed_origins(["https://app.example"])
        .allow_any_origin()
        .build()
        .unwrap_err();
    assert!(field_of(origins).contains("allow_any_origin"));
    #[cfg(feature = "jwks")]
    {
        let refresh = base()
            .key_refresh(mcp_gate::KeyRefresh::default())
            .build()
            .unwrap_err();
        assert_eq!(field_of(refresh), "key_refresh");
    }
    // Each alone is fine.
    base()
        .legacy_sessions_per_owner(5)
        .build()
        .expect("bounds alone");
    base().allow_any_origin().build().expect("any origin alone");
    base()
        .session_store(small_store())
        .build()
        .expect("a store alone");
}

#[test]
fn no_issuer_is_a_config_error() {
    let error = builder()
        .resource(RESOURCE)
        .required_scopes(["mcp:read"])
        .build()
        .unwrap_err();
    assert!(matches!(error, ConfigError::NoTokenSource), "{error:?}");
}

#[test]
fn a_duplicate_issuer_is_a_config_error() {
    let (a, b) = (TestKey::es256("a"), TestKey::es256("b"));
    let error = builder()
        .resource(RESOURCE)
        .issuer(Issuer::with_keys(ISSUER, static_keys(&a)))
        .issuer(Issuer::with_keys(ISSUER, static_keys(&b)))
        .build()
        .unwrap_err();
    assert!(
        matches!(&error, ConfigError::DuplicateIssuer(id) if id == ISSUER),
        "{error:?}"
    );
}

#[test]
fn symmetric_or_empty_key_sets_are_config_errors() {
    let oct_only = r#"{"keys":[{"kty":"oct","k":"c2VjcmV0","kid":"h","alg":"HS256"}]}"#;
    let error = StaticKeys::from_jwks_json(oct_only).unwrap_err();
    assert!(matches!(error, ConfigError::InvalidKey(_)), "{error:?}");
    let error = StaticKeys::from_jwks_json(r#"{"keys":[]}"#).unwrap_err();
    assert!(matches!(error, ConfigError::InvalidKey(_)), "{error:?}");
    let error = StaticKeys::from_jwks_json("not json").unwrap_err();
    assert!(matches!(error, ConfigError::InvalidKey(_)), "{error:?}");
    let error = StaticKeys::new()
        .with_pem(b"secret", Algorithm::HS256, None)
        .unwrap_err();
    assert!(matches!(error, ConfigError::InvalidKey(_)), "{error:?}");
    let error = builder()
        .resource(RESOURCE)
        .issuer(Issuer::with_keys(ISSUER, StaticKeys::new()))
        .build()
        .unwrap_err();
    assert!(
        matches!(&error, ConfigError::NoUsableKey(id) if id == ISSUER),
        "{error:?}"
    );
}

/// `error` refuses the option `field`.
fn assert_invalid_option(error: &ConfigError, field: &str) {
    let refused = matches!(error, ConfigError::InvalidOption { field: f, .. } if *f == field);
    assert!(refused, "{error:?}");
}

#[test]
fn leeway_and_token_size_are_bounded() {
    let key = TestKey::es256("k1");
    base(&key)
        .leeway(Duration::from_secs(300))
        .build()
        .expect("300 s is the maximum");
    let error = base(&key)
        .leeway(Duration::from_secs(301))
        .build()
        .unwrap_err();
    assert_invalid_option(&error, "leeway");
    let error = base(&key)
        .leeway(Duration::from_secs(u64::MAX))
        .build()
        .unwrap_err();
    assert_invalid_option(&error, "leeway");
    let error = base(&key).max_token_bytes(0).build().unwrap_err();
    assert_invalid_option(&error, "max_token_bytes");
}

// ---------------------------------------------------------------------------------------------
// Success path
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn valid_token_reaches_the_handler_with_its_principal_and_without_the_header() {
    let key = TestKey::es256("k1");
    let h = Harness::standard(&key);
    let token = key.mint(&claims(ISSUER, RESOURCE, "mcp:read mcp:extra"));
    let seen = h.assert_admitted("valid token", bearer(&token)).await;
    assert_eq!(h.hits(), 1);
    assert_eq!(
        seen["principal"],
        json!({
            "issuer": ISSUER,
            "subject": "user-1",
            "client_id": "client-1",
            "scopes": ["mcp:extra", "mcp:read"],
            "effective_scopes": ["mcp:extra", "mcp:read"],
        })
    );
    // The scheme is case-insensitive and extra spaces before the token are tolerated.
    h.assert_admitted(
        "lower-case scheme, two spaces",
        authorization(format!("bearer  {token}").as_bytes()),
    )
    .await;
    assert_eq!(h.hits(), 2);
    let principal = h
        .gate
        .authenticate(bearer(&token).headers(), &Uri::from_static("/mcp"))
        .await
        .unwrap();
    assert_eq!(principal.subject(), Some("user-1"));
}

#[tokio::test]
async fn second_request_with_the_same_token_is_served_from_the_cache() {
    let key = TestKey::es256("k1");
    let token = key.mint(&valid_claims());

    // Observed at the Tower level, on DELETE: a cached token is admitted inside `call`, before
    // the response future is polled, while an unknown token is verified first, inside the
    // future. (A POST body is always read and classified inside the future, cached token or
    // not, and a GET's stream is watched there, so the difference is only visible on DELETE and
    // OPTIONS.)
    async fn run(gate: Gate, token: &str) -> (usize, usize) {
        let hits = Arc::new(AtomicUsize::new(0));
        let counter = hits.clone();
        let inner = tower::service_fn(move |request: Request<Body>| {
            counter.fetch_add(1, Ordering::SeqCst);
            assert!(request.headers().get(header::AUTHORIZATION).is_none());
            assert!(request.extensions().get::<Principal>().is_some());
            async { Ok::<_, Infallible>(Response::new(Body::empty())) }
        });
        let mut service = gate.layer().layer(inner);
        let mut called_before_poll = Vec::new();
        for _ in 0..2 {
            let before = hits.load(Ordering::SeqCst);
            let future = service
                .ready()
                .await
                .unwrap()
                .call(bearer_to(Method::DELETE, token));
            called_before_poll.push(hits.load(Ordering::SeqCst) - before);
            let response = future.await.unwrap();
            assert_eq!(response.status(), StatusCode::OK);
            assert_eq!(hits.load(Ordering::SeqCst), before + 1);
        }
        (called_before_poll[0], called_before_poll[1])
    }

    let cached = base(&key).required_scopes(["mcp:read"]).build().unwrap();
    assert_eq!(
        run(cached, &token).await,
        (0, 1),
        "first verified, second from the cache"
    );
    // The control: with the cache disabled, the second request is verified again.
    let uncached = base(&key)
        .required_scopes(["mcp:read"])
        .token_cache_capacity(0)
        .build()
        .unwrap();
    assert_eq!(
        run(uncached, &token).await,
        (0, 0),
        "no cache, verified both times"
    );

    // And through the router: both answered 200, each reaching the handler once.
    let h = Harness::standard(&key);
    let first = h.assert_admitted("first request", bearer(&token)).await;
    let second = h
        .assert_admitted("second request (cached)", bearer(&token))
        .await;
    assert_eq!(first["principal"], second["principal"]);
    assert_eq!(h.hits(), 2);
}

#[tokio::test]
async fn get_and_delete_are_authenticated_like_post() {
    let key = TestKey::es256("k1");
    let h = Harness::standard(&key);
    let good = key.mint(&valid_claims());
    let expired = key.mint(&claims_with(|c| {
        c.insert("exp".into(), json!(now() - 3600));
    }));
    let narrow = key.mint(&claims(ISSUER, RESOURCE, "other"));
    for method in [Method::POST, Method::GET, Method::DELETE] {
        let seen = h
            .assert_admitted(
                &format!("{method} with a valid token"),
                bearer_to(method.clone(), &good),
            )
            .await;
        assert_eq!(seen["method"], method.as_str());
        assert_eq!(seen["principal"]["subject"], "user-1");
        let missing = request(method.clone(), "/mcp")
            .body(body_for(&method))
            .unwrap();
        h.assert_refused(
            &format!("{method} without a token"),
            missing,
            &missing_credential(),
        )
        .await;
        h.assert_refused(
            &format!("{method} expired"),
            bearer_to(method.clone(), &expired),
            &invalid_token(InvalidToken::Expired),
        )
        .await;
        h.assert_refused(
            &format!("{method} narrow scope"),
            bearer_to(method.clone(), &narrow),
            &insufficient_scope(&["mcp:read"]),
        )
        .await;
        let query = request(method.clone(), "/mcp?access_token=x")
            .header(header::AUTHORIZATION, format!("Bearer {good}"))
            .body(ping())
            .unwrap();
        h.assert_refused(
            &format!("{method} query token"),
            query,
            &invalid_request(InvalidRequest::TokenInQuery),
        )
        .await;
    }
    assert_eq!(h.hits(), 3);
}

// ---------------------------------------------------------------------------------------------
// Properties: arbitrary input is never let through and never panics
// ---------------------------------------------------------------------------------------------

/// A gate, a recording router, a valid token and a runtime to drive them, built once per
/// property.
struct Fuzz {
    runtime: tokio::runtime::Runtime,
    harness: Harness,
    token: String,
}

impl Fuzz {
    fn new() -> Self {
        let runtime = crate::common::fixtures::runtime();
        let key = TestKey::es256("k1");
        let harness = Harness::standard(&key);
        let token = key.mint(&claims_with(|c| {
            c.insert("exp".into(), json!(now() + 3600));
        }));
        let fuzz = Self {
            runtime,
            harness,
            token,
        };
        // The unmutated token is admitted, so the properties below are not vacuous.
        let reply = fuzz
            .runtime
            .block_on(fuzz.harness.send(bearer(&fuzz.token)));
        assert_eq!(
            reply.status,
            StatusCode::OK,
            "the fixture token must be valid"
        );
        fuzz
    }

    /// Sends `Authorization: <value>` (skipped when it is not a valid header value) and checks
    /// that it is refused consistently without reaching the handler.
    fn never_admitted(&self, value: &[u8]) -> Result<(), TestCaseError> {
        let Ok(value) = HeaderValue::from_bytes(value) else {
            return Ok(());
        };
        let request = request(Method::POST, "/mcp")
            .header(header::AUTHORIZATION, value)
            .body(ping())
            .unwrap();
        let before = self.harness.hits();
        let reply = self.runtime.block_on(self.harness.send(request));
        prop_assert_eq!(self.harness.hits(), before, "the handler was reached");
        prop_assert_ne!(reply.status, StatusCode::OK);
        prop_assert!(
            matches!(reply.status.as_u16(), 400 | 401),
            "status {}",
            reply.status
        );
        if let Err(problem) = consistent_refusal(&reply) {
            return Err(TestCaseError::fail(problem));
        }
        Ok(())
    }

    fn bearer_value(token: &str) -> Vec<u8> {
        format!("Bearer {token}").into_bytes()
    }
}

static ARBITRARY: LazyLock<Fuzz> = LazyLock::new(Fuzz::new);
static FLIPPED: LazyLock<Fuzz> = LazyLock::new(Fuzz::new);
static TRUNCATED: LazyLock<Fuzz> = LazyLock::new(Fuzz::new);
static APPENDED: LazyLock<Fuzz> = LazyLock::new(Fuzz::new);

/// Characters a flipped token character is replaced with: the whole b64token alphabet (so most
/// mutations still pass the carrier check and reach the JWT verifier) and a few separators.
const REPLACEMENTS: &[u8] =
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~+/= ,\"";

/// Bytes a header value may hold: tab, visible ASCII and space, obs-text.
fn header_bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    let byte = prop_oneof![
        1 => Just(b'\t'),
        40 => 0x20u8..0x7f,
        5 => 0x80u8..=0xff,
    ];
    proptest::collection::vec(byte, 0..max)
}

fn authorization_value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        // Anything at all; the values `HeaderValue` refuses (control bytes) are skipped.
        proptest::collection::vec(any::<u8>(), 0..64),
        header_bytes(300),
        header_bytes(300).prop_map(|rest| [b"Bearer ".as_slice(), &rest].concat()),
        "[A-Za-z0-9._~+/=, -]{0,300}".prop_map(|s| format!("Bearer {s}").into_bytes()),
        "[A-Za-z0-9_-]{0,80}\\.[A-Za-z0-9_-]{0,200}\\.[A-Za-z0-9_-]{0,90}"
            .prop_map(|s| Fuzz::bearer_value(&s)),
        // JWT-shaped with a decodable header naming the real key and algorithm.
        "[A-Za-z0-9_-]{0,200}\\.[A-Za-z0-9_-]{0,90}".prop_map(|rest| {
            let header = b64(br#"{"alg":"ES256","typ":"at+jwt","kid":"k1"}"#);
            Fuzz::bearer_value(&format!("{header}.{rest}"))
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_authorization_values_are_never_admitted(value in authorization_value()) {
        ARBITRARY.never_admitted(&value)?;
    }

    #[test]
    fn a_valid_token_with_one_character_changed_is_never_admitted(
        at in any::<Index>(),
        replacement in any::<Index>(),
    ) {
        let fuzz = &*FLIPPED;
        let mut token = fuzz.token.clone().into_bytes();
        let at = at.index(token.len());
        let mut index = replacement.index(REPLACEMENTS.len());
        if REPLACEMENTS[index] == token[at] {
            index = (index + 1) % REPLACEMENTS.len();
        }
        token[at] = REPLACEMENTS[index];
        fuzz.never_admitted(&[b"Bearer ".as_slice(), &token].concat())?;
    }

    #[test]
    fn a_valid_token_truncated_anywhere_is_never_admitted(len in any::<Index>()) {
        let fuzz = &*TRUNCATED;
        let len = len.index(fuzz.token.len()); // strictly shorter than the token
        fuzz.never_admitted(&Fuzz::bearer_value(&fuzz.token[..len]))?;
    }

    #[test]
    fn a_valid_token_with_anything_appended_is_never_admitted(
        suffix in prop_oneof![
            // base64url characters keep the signature decodable, only longer.
            3 => "[A-Za-z0-9_-]{1,8}".prop_map(String::into_bytes),
            2 => "[A-Za-z0-9._~+/=-]{1,40}".prop_map(String::into_bytes),
            2 => header_bytes(40).prop_filter("something to append", |s| !s.is_empty()),
        ],
    ) {
        let fuzz = &*APPENDED;
        fuzz.never_admitted(&[Fuzz::bearer_value(&fuzz.token), suffix].concat())?;
    }
}

/// Over a real HTTP/1.1 connection: a refusal sent before the request body was read says
/// `Connection: close` and the server closes, so that a client never reuses the connection for
/// its retry (a Python SDK client once raced that close: "Server disconnected without sending
/// a response"). A refusal of a request without a body keeps the connection.
#[tokio::test]
async fn a_refusal_before_the_body_closes_the_connection_and_says_so() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let h = Harness::standard(&TestKey::es256("k1"));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, h.app).await });
    // One read: the head of the answer, lower-cased.
    async fn read_head(stream: &mut tokio::net::TcpStream) -> String {
        let mut answer = vec![0u8; 4096];
        let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut answer))
            .await
            .expect("an answer")
            .unwrap();
        let text = String::from_utf8_lossy(&answer[..read]).to_ascii_lowercase();
        text.split("\r\n\r\n").next().unwrap_or_default().to_owned()
    }

    // Headers announce a body, which the client has not sent yet.
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nhost: {address}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        PING.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let head = read_head(&mut stream).await;
    assert!(head.starts_with("http/1.1 401"), "{head}");
    assert!(head.contains("\r\nconnection: close"), "{head}");
    // The server ends the connection: reading reaches its end.
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut rest))
        .await
        .expect("the server closes the connection")
        .unwrap();

    // A GET without a body: refused, and the connection is kept for the next request.
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    for _ in 0..2 {
        let get = format!("GET /mcp HTTP/1.1\r\nhost: {address}\r\n\r\n");
        stream.write_all(get.as_bytes()).await.unwrap();
        let head = read_head(&mut stream).await;
        assert!(head.starts_with("http/1.1 401"), "{head}");
        assert!(!head.contains("connection: close"), "{head}");
    }
    server.abort();
}
