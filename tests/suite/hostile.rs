//! Hostile input against every parser the layer has, reached the way an attacker reaches it:
//! `Gate::authenticate` for credentials, the whole layer (through `tower::ServiceExt::oneshot`
//! on an axum router whose inner handler counts its calls) for everything after, the metadata
//! router for the well-known paths, and the public task-record API for stored records.
//!
//! Each parser gets a property with generated input and a replay of a hand-picked corpus
//! (`tests/corpus/<parser>.json`, run by `corpus_<parser>`). Every case asserts three things:
//! nothing panics (a panic fails the case), nothing tampered with is admitted or reaches the
//! inner handler, and the refusal is one the crate documents, down to its status, JSON-RPC code
//! or `AuthError` reason wherever an independent reading of the documented rules predicts it.
//! The policy behind every stack refuses the tool `secret`, asks before `guarded` and holds
//! `deploy` as a task.
//!
//! | parser | property | cases | asserted per case |
//! |---|---|---|---|
//! | bearer header | `bearer_header_*` | 10,000 | the exact `AuthError` an independent RFC 6750 reading predicts (query and form carriers, header count, scheme, `b64token`, size); only the untouched valid token is admitted; the same request through the layer gets the same status and never reaches the handler when refused |
//! | JWT header | `jwt_header_*` | 10,000 | the exact `InvalidToken` reason from the documented order (decode, `crit`, `typ`, key by `kid` and its allow-list, `b64`, signature); admitted only when validly signed, ES256, `kid` k1, an access-token `typ` and no `crit` |
//! | JWT claims | `jwt_claims_tampered_*` | 10,000 | hostile payloads under a signature that does not cover them: never admitted; `malformed`, `wrong_issuer` or `bad_signature` as predicted |
//! | JWT claims | `jwt_claims_signed_*` | 1,000 | hostile payloads really signed by the trusted key: admitted exactly when `iss`, `aud`, `exp`, `nbf`, claim types and scope meet the documented rules, otherwise the predicted reason |
//! | JSON-RPC classification | `jsonrpc_*` | 10,000 | `-32700` exactly when a strict reader (duplicate keys refused) fails, `-32600` for non-objects, only documented codes otherwise; what reaches the inner handler is the body byte for byte, strict JSON, and never a request for the refused tool |
//! | continuation state | `continuation_state_*` | 10,000 | a mutated `requestState` on an approved retry never runs the call: `-32602`/400 with the `StateError` text its format predicts, or a fresh confirmation when the mutation left the layer's prefix |
//! | signed cursors | `signed_cursor_*` | 10,000 | a mutated `cursor` never reaches the inner list: `-32602`/400 `invalid cursor` |
//! | task ids | `task_id_parse_*` | 10,000 | `TaskId::parse` (and serde) accept exactly `tsk_` + 22 base64url characters |
//! | task records | `task_record_*` | 10,000 | `TaskRecord::from_json` reads back only consistent records, names a foreign schema version, and never quotes a value in an error |
//! | task ids | `task_id_layer_*` | 10,000 | through the layer, every id of the layer's shape that is not the caller's own task gets the unknown-task answer byte for byte, other shapes go to the inner server, the task never leaks or changes |
//! | `Mcp-*` headers | `mcp_headers_*` | 10,000 | `-32020`/400 unless each mirrored header is present once and equal to the body (`-32022`/`-32602` for bad versions and capabilities); the inner handler runs exactly when they agree |
//! | metadata path | `metadata_path_only_*` | 10,000 | only the exact documented paths serve the document; anything else is 404 (405 for other methods) and never the document |
//! | metadata path | `metadata_path_for_odd_*` | 1,000 | for odd resource paths the builder accepts, the router serves exactly the paths the gate reports |
//!
//! Debug builds make ECDSA expensive (milliseconds per signature or verification), so the
//! properties sign only where the gate looks at the signature, and the really-signed claims
//! property runs 1,000 distinct tokens. Generators draw from bytes where a zero byte means "the
//! ordinary choice", so failing cases shrink towards valid input.
//!
//! Two tests are ignored because they fail on real bugs: see
//! `metadata_router_does_not_panic_for_a_resource_the_builder_accepts` and
//! `jsonrpc_guarded_methods_without_an_id_never_reach_the_inner_service`. `fuzz/` has cargo-fuzz
//! targets for the same parsers.

use crate::common::strict_json::strict_json;
use crate::common::tokens;

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::routing::post;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, StatusCode, Uri, header};
use mcp_gate::policy::{Decision, Evaluation};
use mcp_gate::tasks::{
    HeldCall, StoreError, TaskDecision, TaskId, TaskOwner, TaskRecord, TaskStatus,
};
use mcp_gate::{AuthError, Gate, GateBuilder, InvalidRequest, InvalidToken, Issuer, StaticKeys};
use proptest::prelude::*;
use proptest::sample::{Index, select};
use proptest::test_runner::TestCaseError;
use serde_json::{Value, json};
use tokens::now;
use tower::ServiceExt;

const ISSUER: &str = "https://as.example";
const RESOURCE: &str = "http://127.0.0.1:8080/mcp";
const SCOPE: &str = "mcp:read";
const VERSION: &str = "2026-07-28";
const KID: &str = "k1";
/// Cases per parser.
const CASES: u32 = 10_000;
/// Really-signed claim sets (each costs an ES256 signature and verification in debug).
const SIGNED_CASES: u32 = 1_000;
/// The JSON-RPC id every layer request in a property uses, so answers compare byte for byte.
const RPC_ID: u64 = 7;

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn b64(bytes: impl AsRef<[u8]>) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

fn fail(message: impl Into<String>) -> TestCaseError {
    TestCaseError::fail(message.into())
}

// ---------------------------------------------------------------------------------------------
// Keys and tokens
// ---------------------------------------------------------------------------------------------

/// The tests' ES256 key: the shared one, which also signs encoded segments directly.
type Key = tokens::TestKey;

/// The key set a gate trusts when it trusts `key`.
fn trusted(key: &Key) -> StaticKeys {
    StaticKeys::from_jwk_set(&key.jwk_set()).expect("an EC key set")
}

/// A valid access token for `subject`, signed by `key`.
fn token(key: &Key, subject: &str) -> String {
    key.sign_segments(
        &b64(standard_header()),
        &b64(valid_claims(subject).to_string()),
    )
}

fn standard_header() -> String {
    format!(r#"{{"alg":"ES256","typ":"at+jwt","kid":"{KID}"}}"#)
}

fn valid_claims(subject: &str) -> Value {
    json!({
        "iss": ISSUER,
        "aud": RESOURCE,
        "sub": subject,
        "client_id": "app",
        "iat": now(),
        "exp": now() + 3600,
        "scope": SCOPE,
    })
}

// ---------------------------------------------------------------------------------------------
// The stack: a gate, a recording inner handler, a runtime
// ---------------------------------------------------------------------------------------------

/// The application's policy in every stack: `secret` is refused, `guarded` asks for a
/// confirmation, `deploy` is held as a task until approved, everything else is allowed.
async fn decide(evaluation: Evaluation) -> Result<Decision, Infallible> {
    Ok(match (evaluation.tool(), evaluation.approval()) {
        (Some("secret"), _) => Decision::undisclosed("Not for you."),
        (Some("guarded"), _) => Decision::ask("Run the guarded tool?"),
        (Some("deploy"), None) => Decision::task("Deploys need the release manager."),
        _ => Decision::allow(),
    })
}

fn builder(key: &Key) -> GateBuilder {
    with_shared_client(Gate::builder())
        .resource(RESOURCE)
        .issuer(Issuer::with_keys(ISSUER, trusted(key)))
        .required_scopes([SCOPE])
        .evaluate(decide)
        // Named here, so that the recorder behind the layer sees only what clients send (the
        // layer would otherwise ask it for its identity with a `server/discover` of its own).
        .server_info("hostile-inner", "1.0.0")
}

/// One HTTP client for every gate (building one loads TLS roots, slowly in debug builds).
#[cfg(feature = "jwks")]
static HTTP: LazyLock<reqwest::Client> = LazyLock::new(reqwest::Client::new);

fn with_shared_client(builder: GateBuilder) -> GateBuilder {
    #[cfg(feature = "jwks")]
    let builder = builder.http_client(HTTP.clone());
    builder
}

/// What the inner handler saw.
#[derive(Default)]
struct Inner {
    hits: AtomicUsize,
    last: Mutex<Option<Bytes>>,
}

/// The inner MCP server: `tools/list` pages through `t0`..`t9` three at a time with cursors
/// `page-N`; every other request gets an empty successful result.
async fn inner_handler(State(inner): State<Arc<Inner>>, body: Bytes) -> http::Response<Body> {
    inner.hits.fetch_add(1, Ordering::SeqCst);
    *inner.last.lock().unwrap() = Some(body.clone());
    let message: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let result = if message["method"] == "tools/list" {
        let start: usize = message["params"]["cursor"]
            .as_str()
            .and_then(|c| c.strip_prefix("page-"))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        crate::common::paging::page_from(start)
    } else {
        json!({"content": [{"type": "text", "text": "inner ran"}], "isError": false})
    };
    let answer = json!({"jsonrpc": "2.0", "id": message.get("id").cloned().unwrap_or(Value::Null), "result": result});
    http::Response::builder()
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(answer.to_string()))
        .unwrap()
}

#[derive(Debug)]
struct Reply {
    status: StatusCode,
    bytes: Bytes,
    json: Value,
}

impl Reply {
    /// `(code, message)` of a JSON-RPC error answer.
    fn rpc_error(&self) -> Option<(i64, &str)> {
        let error = self.json.get("error")?;
        Some((error["code"].as_i64()?, error["message"].as_str()?))
    }

    fn describe(&self) -> String {
        format!("{} {}", self.status, String::from_utf8_lossy(&self.bytes))
    }
}

/// A gate in front of a recording inner handler, a runtime to drive it, and tokens.
struct Stack {
    runtime: tokio::runtime::Runtime,
    gate: Gate,
    app: Router,
    inner: Arc<Inner>,
    key: Key,
    alice: String,
    mallory: String,
}

impl Stack {
    fn new() -> Self {
        Self::with(|b| b)
    }

    fn with(tune: impl FnOnce(GateBuilder) -> GateBuilder) -> Self {
        let runtime = crate::common::fixtures::runtime();
        let key = Key::es256(KID);
        let gate = tune(builder(&key)).build().expect("gate");
        let inner = Arc::new(Inner::default());
        let app = Router::new()
            .route("/mcp", post(inner_handler))
            .with_state(inner.clone())
            .layer(gate.layer());
        let (alice, mallory) = (token(&key, "alice"), token(&key, "mallory"));
        Self {
            runtime,
            gate,
            app,
            inner,
            key,
            alice,
            mallory,
        }
    }

    fn hits(&self) -> usize {
        self.inner.hits.load(Ordering::SeqCst)
    }

    fn last_body(&self) -> Option<Bytes> {
        self.inner.last.lock().unwrap().clone()
    }

    fn send(&self, request: Request<Body>) -> Reply {
        self.runtime.block_on(async {
            let response = crate::common::fixtures::through(&self.app, request).await;
            let status = response.status();
            let bytes = axum::body::to_bytes(response.into_body(), 1 << 22)
                .await
                .expect("body");
            let json = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            Reply {
                status,
                bytes,
                json,
            }
        })
    }

    /// `POST /mcp` as `token`, with `extra` headers and `body`.
    fn post(&self, token: &str, extra: &HeaderMap, body: impl Into<Bytes>) -> Reply {
        let mut request = Request::post("/mcp")
            .header(header::AUTHORIZATION, format!("Bearer {token}"))
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "application/json, text/event-stream")
            .body(Body::from(body.into()))
            .unwrap();
        for (name, value) in extra {
            request.headers_mut().append(name, value.clone());
        }
        self.send(request)
    }

    /// Posts and reports whether the inner handler ran.
    fn post_counted(
        &self,
        token: &str,
        extra: &HeaderMap,
        body: impl Into<Bytes>,
    ) -> (Reply, bool) {
        let before = self.hits();
        let reply = self.post(token, extra, body);
        (reply, self.hits() != before)
    }
}

/// A modern request body: `params` plus `_meta` with the version and `capabilities`.
fn modern_body(method: &str, mut params: Value, capabilities: Value) -> String {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": VERSION,
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    });
    json!({"jsonrpc": "2.0", "id": RPC_ID, "method": method, "params": params}).to_string()
}

/// The mirrored headers of a modern request.
fn mirrored(method: &str, name: Option<&str>) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert("mcp-protocol-version", HeaderValue::from_static(VERSION));
    headers.insert("mcp-method", HeaderValue::from_str(method).unwrap());
    if let Some(name) = name {
        headers.insert("mcp-name", HeaderValue::from_str(name).unwrap());
    }
    headers
}

/// Whether `text` can travel as a header value that the layer reads back as the same text.
fn header_text_ok(text: &str) -> bool {
    HeaderValue::from_str(text).is_ok_and(|v| v.to_str().ok() == Some(text))
}

/// A JSON string literal for `text`.
fn quoted(text: &str) -> String {
    serde_json::to_string(text).unwrap()
}

// =============================================================================================
// Bearer header
// =============================================================================================

/// One request's credential carriers.
#[derive(Clone, Debug)]
struct Carrier {
    authorization: Vec<Vec<u8>>,
    query: Option<String>,
    content_type: Option<Vec<u8>>,
}

/// What the gate must say about a request, predicted without the gate.
#[derive(Clone, Debug, PartialEq)]
enum AuthExpect {
    Admit,
    Refuse(AuthError),
    /// Some `invalid_token` reason, after the JWT verifier or introspection had a look.
    AnyInvalidToken,
}

/// Percent-decodes one `application/x-www-form-urlencoded` name (RFC 6749 §B, WHATWG).
fn form_decode(raw: &str) -> Vec<u8> {
    let bytes = raw.as_bytes();
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (i + 2 < bytes.len() && bytes[i] == b'%')
            .then(|| Some(hex(bytes[i + 1])? * 16 + hex(bytes[i + 2])?))
            .flatten();
        match (escaped, bytes[i]) {
            (Some(byte), _) => {
                out.push(byte);
                i += 3;
                continue;
            }
            (None, b'+') => out.push(b' '),
            (None, other) => out.push(other),
        }
        i += 1;
    }
    out
}

/// The documented carrier rules (`docs/security.md`, step 1) and size limit (step 2).
fn expected_carrier(carrier: &Carrier, valid: &str) -> AuthExpect {
    use AuthExpect::*;
    let request = |kind| Refuse(AuthError::InvalidRequest(kind));
    if let Some(query) = &carrier.query
        && query
            .split('&')
            .any(|pair| form_decode(pair.split('=').next().unwrap_or("")) == b"access_token")
    {
        return request(InvalidRequest::TokenInQuery);
    }
    if let Some(content_type) = &carrier.content_type
        && let Ok(text) = std::str::from_utf8(content_type)
        && text
            .bytes()
            .all(|b| b == b'\t' || (0x20..0x7f).contains(&b))
        && text
            .split(';')
            .next()
            .unwrap()
            .trim()
            .eq_ignore_ascii_case("application/x-www-form-urlencoded")
    {
        return request(InvalidRequest::FormEncodedBody);
    }
    let value = match carrier.authorization.as_slice() {
        [] => return Refuse(AuthError::MissingCredential),
        [value] => value,
        _ => return request(InvalidRequest::MultipleAuthorizationHeaders),
    };
    // Header text is visible ASCII, space and tab; anything else cannot be read as a credential.
    if !value
        .iter()
        .all(|b| *b == b'\t' || (0x20..0x7f).contains(b))
    {
        return request(InvalidRequest::MalformedAuthorizationHeader);
    }
    let text = std::str::from_utf8(value).unwrap();
    let (scheme, rest) = match text.find(' ') {
        Some(at) => (&text[..at], &text[at + 1..]),
        None => (text, ""),
    };
    // `Bearer` glued to a separator (a tab, a comma) is a bearer credential written wrongly.
    if scheme.len() > 6 && scheme[..6].eq_ignore_ascii_case("bearer") {
        let next = scheme.as_bytes()[6];
        if !(next.is_ascii_alphanumeric() || b"-._~+/=".contains(&next)) {
            return request(InvalidRequest::MalformedAuthorizationHeader);
        }
    }
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Refuse(AuthError::UnsupportedScheme);
    }
    let token = rest.trim_start_matches(' ');
    let body = token.trim_end_matches('=');
    let b64token = !body.is_empty()
        && body
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~+/".contains(&b));
    if !b64token {
        return request(InvalidRequest::MalformedAuthorizationHeader);
    }
    if token.len() > 8 * 1024 {
        return Refuse(AuthError::InvalidToken(InvalidToken::TooLarge));
    }
    if token == valid {
        return Admit;
    }
    if token.bytes().filter(|b| *b == b'.').count() == 2 {
        AnyInvalidToken
    } else {
        Refuse(AuthError::InvalidToken(InvalidToken::Unverifiable))
    }
}

/// A gate trusting one static ES256 key, a valid token for it, and a runtime.
struct Auth {
    runtime: tokio::runtime::Runtime,
    stack: Stack,
}

impl Auth {
    fn new() -> Self {
        let runtime = crate::common::fixtures::runtime();
        let auth = Self {
            runtime,
            stack: Stack::new(),
        };
        let headers = bearer_headers(&auth.stack.alice);
        assert!(
            auth.authenticate(&headers, &"/mcp".parse().unwrap())
                .is_ok()
        );
        auth
    }

    fn authenticate(
        &self,
        headers: &HeaderMap,
        uri: &Uri,
    ) -> Result<mcp_gate::Principal, AuthError> {
        self.runtime
            .block_on(self.stack.gate.authenticate(headers, uri))
            .map_err(mcp_gate::AuthRejection::into_error)
    }

    /// Authenticates `token` in a plain `Authorization: Bearer` header.
    fn token(&self, token: &str) -> Result<mcp_gate::Principal, AuthError> {
        self.authenticate(&bearer_headers(token), &"/mcp".parse().unwrap())
    }
}

fn bearer_headers(token: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::AUTHORIZATION,
        HeaderValue::from_str(&format!("Bearer {token}")).unwrap(),
    );
    headers
}

fn check_auth(
    actual: &Result<mcp_gate::Principal, AuthError>,
    expected: &AuthExpect,
) -> Result<(), TestCaseError> {
    match (expected, actual) {
        (AuthExpect::Admit, Ok(_)) => Ok(()),
        (AuthExpect::Refuse(want), Err(got)) if want == got => Ok(()),
        (AuthExpect::AnyInvalidToken, Err(AuthError::InvalidToken(_))) => Ok(()),
        _ => Err(fail(format!("expected {expected:?}, got {actual:?}"))),
    }
}

static BEARER: LazyLock<Auth> = LazyLock::new(Auth::new);

/// Scheme spellings, separators and token shapes an attacker would try.
fn authorization_value() -> BoxedStrategy<Vec<u8>> {
    let scheme = select(vec![
        "Bearer",
        "bearer",
        "BEARER",
        "BeArEr",
        "Basic",
        "Bearerx",
        "",
        "DPoP",
        "Token",
        "Bearer,",
        "B\u{e9}arer",
    ]);
    let separator = select(vec![" ", "  ", "\t", "", ",", " \t", " ,"]);
    let token_char = prop_oneof![
        30 => select(b"ABCXYZabcxyz0129-._~+/".to_vec()),
        3 => Just(b'='),
        1 => select(b" ,\"\\;:@".to_vec()),
        1 => 0x80u8..=0xff,
        1 => any::<u8>(),
    ];
    let token = prop_oneof![
        4 => proptest::collection::vec(token_char, 0..48),
        2 => (
            proptest::collection::vec(select(b"AZaz09-_".to_vec()), 0..30),
            proptest::collection::vec(select(b"AZaz09-_".to_vec()), 0..30),
            proptest::collection::vec(select(b"AZaz09-_".to_vec()), 0..30),
        )
            .prop_map(|(a, b, c)| [a, b".".to_vec(), b, b".".to_vec(), c].concat()),
        2 => Just(BEARER.stack.alice.clone().into_bytes()),
        1 => (any::<Index>(), select(b"A.=_ ".to_vec())).prop_map(|(at, c)| {
            let mut token = BEARER.stack.alice.clone().into_bytes();
            let at = at.index(token.len());
            token[at] = if token[at] == c { b'B' } else { c };
            token
        }),
        1 => Just(vec![b'a'; 8 * 1024 + 1]),
    ];
    prop_oneof![
        8 => (scheme, separator, token).prop_map(|(s, sep, t)| [s.as_bytes(), sep.as_bytes(), &t].concat()),
        1 => proptest::collection::vec(any::<u8>(), 0..40),
    ]
    .boxed()
}

fn carrier() -> impl Strategy<Value = Carrier> {
    let query = prop_oneof![
        6 => Just(None),
        1 => select(vec![
            "access_token=x", "ACCESS_TOKEN=x", "access%5Ftoken=x", "access_token", "a=1&access_token=",
            "x=access_token", "access_token%00=1", "access+token=1", "%61ccess_token=1",
            "access_token%=1", "access%5ftoken", "&&access_token&&", "access_token[]=1",
        ]).prop_map(|q| Some(q.to_owned())),
        1 => proptest::collection::vec(select(b"abcz_=&%+5F7".to_vec()), 0..16)
            .prop_map(|q| Some(String::from_utf8(q).unwrap())),
    ];
    let content_type = prop_oneof![
        5 => Just(None),
        2 => select(vec![
            "application/json", "application/x-www-form-urlencoded",
            "Application/X-WWW-Form-Urlencoded; charset=utf-8", " application/x-www-form-urlencoded ",
            "application/x-www-form-urlencoded;", "multipart/form-data", "text/plain",
            "application/x-www-form-urlencoded\u{e9}", "\tapplication/x-www-form-urlencoded",
        ]).prop_map(|c| Some(c.as_bytes().to_vec())),
    ];
    (
        proptest::collection::vec(authorization_value(), 0..3),
        query,
        content_type,
    )
        .prop_map(|(authorization, query, content_type)| Carrier {
            authorization,
            query,
            content_type,
        })
}

proptest! {
    #![proptest_config(config(CASES))]

    /// Gate::authenticate says exactly what the RFC 6750 rules say; only the untouched valid
    /// token in a clean carrier is admitted.
    #[test]
    fn bearer_header_carriers_get_exactly_the_documented_answer(carrier in carrier()) {
        let auth = &*BEARER;
        let mut headers = HeaderMap::new();
        for value in &carrier.authorization {
            let Ok(value) = HeaderValue::from_bytes(value) else {
                // Not a header value at all: no HTTP stack delivers it.
                return Ok(());
            };
            headers.append(header::AUTHORIZATION, value);
        }
        if let Some(content_type) = &carrier.content_type {
            let Ok(value) = HeaderValue::from_bytes(content_type) else { return Ok(()) };
            headers.insert(header::CONTENT_TYPE, value);
        }
        let uri: Uri = match &carrier.query {
            Some(query) => match format!("/mcp?{query}").parse() {
                Ok(uri) => uri,
                Err(_) => return Ok(()),
            },
            None => "/mcp".parse().unwrap(),
        };
                let expected = expected_carrier(&carrier, &auth.stack.alice);
        let actual = auth.authenticate(&headers, &uri);
        check_auth(&actual, &expected)?;
        // The same request through the layer: refused with the same status, the inner handler
        // untouched; admitted, it reaches the handler.
        let mut request = Request::post(uri).body(Body::from(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)).unwrap();
        *request.headers_mut() = headers;
        let before = auth.stack.hits();
        let reply = auth.stack.send(request);
        let reached = auth.stack.hits() != before;
        match &actual {
            Ok(_) => prop_assert!(reached, "{}", reply.describe()),
            Err(error) => {
                prop_assert!(!reached, "{error:?} reached the handler");
                prop_assert!(matches!(error.status().as_u16(), 400 | 401), "{error:?}");
                prop_assert_eq!(reply.status, error.status());
            }
        }
    }
}

/// A token's grammar is checked for every token the verified-token cache does not hold, however
/// close it is to one the cache holds (the cache spares only the very bytes it verified): the
/// cached token with a byte the `b64token` grammar refuses added is a bad request, not a token
/// to verify, and so is a malformed token over the size limit.
#[test]
fn a_cached_tokens_malformed_variants_are_refused_as_malformed() {
    let auth = &*BEARER;
    let valid = &auth.stack.alice;
    let uri: Uri = "/mcp".parse().unwrap();
    let headers = |value: &str| {
        let mut headers = HeaderMap::new();
        let value = HeaderValue::from_str(value).expect("a header value");
        headers.insert(header::AUTHORIZATION, value);
        headers
    };
    // Verified once, then found in the cache.
    for _ in 0..2 {
        let admitted = auth.authenticate(&headers(&format!("Bearer {valid}")), &uri);
        assert!(admitted.is_ok(), "{admitted:?}");
    }
    let too_long = format!("{valid}{}", "%".repeat(9 * 1024));
    for token in [
        format!("{valid}!"),
        format!("{valid} "),
        format!("{valid}\t"),
        format!("{valid}=x"),
        format!("{valid},{valid}"),
        too_long,
    ] {
        let refused = auth.authenticate(&headers(&format!("Bearer {token}")), &uri);
        assert!(
            matches!(
                refused,
                Err(AuthError::InvalidRequest(
                    InvalidRequest::MalformedAuthorizationHeader
                ))
            ),
            "{} bytes: {refused:?}",
            token.len()
        );
    }
}

// =============================================================================================
// JWT header
// =============================================================================================

/// A header member of string type, as sent.
#[derive(Clone, Debug)]
enum Text {
    Absent,
    Null,
    Str(&'static str),
    Number,
    Object,
    Array,
}

impl Text {
    fn render(&self, name: &str) -> Option<String> {
        let value = match self {
            Text::Absent => return None,
            Text::Null => "null".to_owned(),
            Text::Str(s) => quoted(s),
            Text::Number => "256".to_owned(),
            Text::Object => "{}".to_owned(),
            Text::Array => format!("[{}]", quoted(KID)),
        };
        Some(format!("{}:{value}", quoted(name)))
    }

    /// `Ok(None)` absent or null, `Ok(Some)` a string, `Err` a type the header cannot hold.
    fn read(&self) -> Result<Option<&'static str>, ()> {
        match self {
            Text::Absent | Text::Null => Ok(None),
            Text::Str(s) => Ok(Some(s)),
            _ => Err(()),
        }
    }
}

#[derive(Clone, Debug)]
enum Crit {
    Absent,
    Null,
    Empty,
    B64,
    Exp,
    Twice,
    NotArray,
}

#[derive(Clone, Debug)]
enum B64Member {
    Absent,
    True,
    False,
    Text,
    Null,
}

#[derive(Clone, Debug)]
enum Extra {
    Jku,
    /// Another key, embedded: must be ignored, never trusted.
    EmbeddedKey,
    JunkKey,
    X5u,
    X5c,
    X5cNotArray,
    Cty,
    Unknown,
    Nested(usize),
    HugeNumber,
    LoneSurrogate,
    Nul,
}

#[derive(Clone, Debug)]
enum Twice {
    None,
    Alg,
    Kid,
    Typ,
    Unknown,
}

#[derive(Clone, Debug)]
enum Encoding {
    Normal,
    Padded,
    Standard,
    Array,
    Garbage(Vec<u8>),
    Bom,
    Trailing,
    Whitespace,
}

#[derive(Clone, Debug)]
enum Sig {
    Real,
    /// Decodes, wrong length: refused before any curve arithmetic.
    Short,
    Zero,
    NotBase64,
    Empty,
    Padded,
    /// 64 random bytes: a full verification that fails.
    Random,
}

#[derive(Clone, Debug)]
struct HeaderCase {
    alg: Text,
    typ: Text,
    kid: Text,
    crit: Crit,
    b64: B64Member,
    extra: Vec<Extra>,
    twice: Twice,
    encoding: Encoding,
    sig: Sig,
}

const ALGORITHMS: [&str; 12] = [
    "HS256", "HS384", "HS512", "ES256", "ES384", "RS256", "RS384", "RS512", "PS256", "PS384",
    "PS512", "EdDSA",
];

fn text(values: Vec<&'static str>) -> BoxedStrategy<Text> {
    prop_oneof![
        12 => select(values).prop_map(Text::Str),
        1 => Just(Text::Absent),
        1 => Just(Text::Null),
        1 => select(vec![Text::Number, Text::Object, Text::Array]),
    ]
    .boxed()
}

fn header_case() -> impl Strategy<Value = HeaderCase> {
    let alg = prop_oneof![
        7 => Just(Text::Str("ES256")),
        2 => select(vec!["ES384", "RS256", "PS256", "HS256", "HS512", "EdDSA"]).prop_map(Text::Str),
        1 => text(vec![
            "none", "None", "NONE", "es256", "ES256 ", "", "ES256\u{0}", "E\u{0405}256",
        ]),
    ];
    let typ = prop_oneof![
        3 => Just(Text::Str("at+jwt")),
        1 => Just(Text::Absent),
        3 => text(vec![
            "at+jwt", "AT+JWT", "application/at+jwt", "Application/AT+JWT", "JWT", "jwt", "JOSE",
            "id_token+jwt", "dpop+jwt", "at+jwt ", "", "application/jwt",
        ]),
    ];
    let kid = prop_oneof![
        6 => Just(Text::Str(KID)),
        3 => text(vec!["k1", "K1", "k1 ", "k2", "", "k1\u{0}", "\u{43a}1", "../k1", "k1\\", "k\u{0131}"]),
    ];
    let crit = prop_oneof![
        12 => Just(Crit::Absent),
        1 => select(vec![Crit::Null, Crit::Empty, Crit::B64, Crit::Exp, Crit::Twice, Crit::NotArray]),
    ];
    let b64 = prop_oneof![
        12 => Just(B64Member::Absent),
        1 => select(vec![B64Member::True, B64Member::False, B64Member::Text, B64Member::Null]),
    ];
    let one_extra = prop_oneof![
        4 => select(vec![
            Extra::Jku, Extra::EmbeddedKey, Extra::JunkKey, Extra::X5u, Extra::X5c, Extra::Cty,
            Extra::Unknown, Extra::Nul, Extra::Nested(20),
        ]),
        1 => select(vec![
            Extra::X5cNotArray, Extra::HugeNumber, Extra::LoneSurrogate, Extra::Nested(300),
        ]),
    ];
    let extra = prop_oneof![
        3 => Just(Vec::new()),
        1 => proptest::collection::vec(one_extra, 1..3),
    ];
    let twice = prop_oneof![
        12 => Just(Twice::None),
        1 => select(vec![Twice::Alg, Twice::Kid, Twice::Typ, Twice::Unknown]),
    ];
    let encoding = prop_oneof![
        20 => Just(Encoding::Normal),
        1 => select(vec![
            Encoding::Padded, Encoding::Standard, Encoding::Array, Encoding::Bom,
            Encoding::Trailing, Encoding::Whitespace,
        ]),
        1 => proptest::collection::vec(any::<u8>(), 0..24)
            .prop_map(|g| Encoding::Garbage([b"\x00".as_slice(), &g].concat())),
    ];
    // Real signatures and random ones cost a full ES256 verification each in debug builds.
    let sig = prop_oneof![
        3 => Just(Sig::Real),
        12 => Just(Sig::Short),
        4 => select(vec![Sig::Zero, Sig::NotBase64, Sig::Empty, Sig::Padded]),
        1 => Just(Sig::Random),
    ];
    (alg, typ, kid, crit, b64, extra, twice, encoding, sig).prop_map(
        |(alg, typ, kid, crit, b64, extra, twice, encoding, sig)| HeaderCase {
            alg,
            typ,
            kid,
            crit,
            b64,
            extra,
            twice,
            encoding,
            sig,
        },
    )
}

impl HeaderCase {
    /// The header's JSON text (duplicates and all).
    fn json(&self, embedded_key: &str) -> String {
        let mut members: Vec<String> = Vec::new();
        members.extend(self.alg.render("alg"));
        members.extend(self.typ.render("typ"));
        members.extend(self.kid.render("kid"));
        match self.crit {
            Crit::Absent => {}
            Crit::Null => members.push(r#""crit":null"#.into()),
            Crit::Empty => members.push(r#""crit":[]"#.into()),
            Crit::B64 => members.push(r#""crit":["b64"]"#.into()),
            Crit::Exp => members.push(r#""crit":["exp"]"#.into()),
            Crit::Twice => members.push(r#""crit":["b64","b64"]"#.into()),
            Crit::NotArray => members.push(r#""crit":"exp""#.into()),
        }
        match self.b64 {
            B64Member::Absent => {}
            B64Member::True => members.push(r#""b64":true"#.into()),
            B64Member::False => members.push(r#""b64":false"#.into()),
            B64Member::Text => members.push(r#""b64":"false""#.into()),
            B64Member::Null => members.push(r#""b64":null"#.into()),
        }
        for (i, extra) in self.extra.iter().enumerate() {
            members.push(match extra {
                Extra::Jku => r#""jku":"https://evil.example/jwks.json""#.into(),
                Extra::EmbeddedKey => format!(r#""jwk":{embedded_key}"#),
                Extra::JunkKey => r#""jwk":{"kty":"nope"}"#.into(),
                Extra::X5u => r#""x5u":"https://evil.example/cert.pem""#.into(),
                Extra::X5c => r#""x5c":["MIIBIjAN"]"#.into(),
                Extra::X5cNotArray => r#""x5c":"MIIBIjAN""#.into(),
                Extra::Cty => r#""cty":"JWT""#.into(),
                Extra::Unknown => format!(r#""ext{i}":{{"a":[1,2,{{}}]}}"#),
                Extra::Nested(depth) => {
                    format!(r#""deep{i}":{}{}"#, "[".repeat(*depth), "]".repeat(*depth))
                }
                Extra::HugeNumber => format!(r#""big{i}":1e400"#),
                Extra::LoneSurrogate => format!(r#""sur{i}":"\ud800""#),
                Extra::Nul => format!(r#""nul{i}":"a\u0000b""#),
            });
        }
        match self.twice {
            Twice::None => {}
            Twice::Alg => members.push(r#""alg":"HS256""#.into()),
            Twice::Kid => members.push(r#""kid":"k2""#.into()),
            Twice::Typ => members.push(r#""typ":"JWT""#.into()),
            Twice::Unknown => members.push(r#""ext0":1,"ext0":2"#.into()),
        }
        format!("{{{}}}", members.join(","))
    }

    /// The encoded header segment.
    fn segment(&self, embedded_key: &str) -> String {
        let json = self.json(embedded_key);
        match &self.encoding {
            Encoding::Normal => b64(&json),
            Encoding::Padded => format!("{}=", b64(&json)),
            Encoding::Standard => base64::engine::general_purpose::STANDARD_NO_PAD.encode(&json),
            Encoding::Array => b64(format!("[{json}]")),
            Encoding::Garbage(bytes) => b64(bytes),
            Encoding::Bom => b64([b"\xef\xbb\xbf".as_slice(), json.as_bytes()].concat()),
            Encoding::Trailing => b64(format!("{json} x")),
            Encoding::Whitespace => b64(format!("\n {json} \t")),
        }
    }

    /// What the gate must answer, or `Err(())` when the signature decides (the header passed).
    fn expected(&self, segment: &str) -> Result<InvalidToken, ()> {
        use InvalidToken::*;
        let readable = match &self.encoding {
            Encoding::Normal | Encoding::Whitespace => true,
            Encoding::Standard => !segment.contains(['+', '/']),
            _ => false,
        };
        if !readable {
            return Ok(Malformed);
        }
        // A second member of a known name: refused when the first was there, else it is the one.
        let (mut alg, mut typ, mut kid) = (self.alg.clone(), self.typ.clone(), self.kid.clone());
        let second = match self.twice {
            Twice::Alg => Some((&mut alg, "HS256")),
            Twice::Kid => Some((&mut kid, "k2")),
            Twice::Typ => Some((&mut typ, "JWT")),
            Twice::None | Twice::Unknown => None,
        };
        if let Some((slot, value)) = second {
            if !matches!(slot, Text::Absent) {
                return Ok(Malformed);
            }
            *slot = Text::Str(value);
        }
        let named = |e: &Extra| match e {
            Extra::Jku => "jku",
            Extra::EmbeddedKey | Extra::JunkKey => "jwk",
            Extra::X5u => "x5u",
            Extra::X5c | Extra::X5cNotArray => "x5c",
            Extra::Cty => "cty",
            _ => "",
        };
        let names: Vec<&str> = self
            .extra
            .iter()
            .map(named)
            .filter(|n| !n.is_empty())
            .collect();
        let repeated = names.iter().collect::<BTreeSet<_>>().len() != names.len();
        let unreadable_extra = repeated
            || self.extra.iter().any(|e| {
                matches!(
                    e,
                    Extra::X5cNotArray
                        | Extra::HugeNumber
                        | Extra::LoneSurrogate
                        | Extra::Nested(300)
                )
            });
        let alg = match alg.read() {
            Ok(Some(alg)) if ALGORITHMS.contains(&alg) => alg,
            _ => return Ok(Malformed),
        };
        let (Ok(typ), Ok(kid)) = (typ.read(), kid.read()) else {
            return Ok(Malformed);
        };
        let crit = match self.crit {
            Crit::Absent | Crit::Null => false,
            Crit::NotArray => return Ok(Malformed),
            _ => true,
        };
        if unreadable_extra {
            return Ok(Malformed);
        }
        if crit {
            return Ok(CriticalHeader);
        }
        // RFC 7515 4.1.9: `jwt` and `application/jwt` name one media type.
        let access_token_type = typ.is_none_or(|t| {
            ["at+jwt", "application/at+jwt", "jwt", "application/jwt"]
                .iter()
                .any(|ok| t.eq_ignore_ascii_case(ok))
        });
        if !access_token_type {
            return Ok(UnsupportedType);
        }
        if kid != Some(KID) {
            return Ok(UnknownKey);
        }
        if alg != "ES256" {
            return Ok(DisallowedAlgorithm);
        }
        // The full (checked) header read refuses `b64` unless it is absent or `true`.
        if !matches!(self.b64, B64Member::Absent | B64Member::True) {
            return Ok(Malformed);
        }
        Err(())
    }
}

static HEADERS: LazyLock<(Auth, String, String)> = LazyLock::new(|| {
    let auth = Auth::new();
    let payload = b64(valid_claims("alice").to_string());
    let embedded = serde_json::to_string(&Key::es256(KID).jwk).unwrap();
    (auth, payload, embedded)
});

proptest! {
    #![proptest_config(config(CASES))]

    /// Hostile JWS headers: the predicted reason in the documented order, and an admission only
    /// for a validly signed ES256 token naming the trusted key with an access-token type.
    #[test]
    fn jwt_header_hostile_headers_get_the_predicted_reason(case in header_case()) {
        let (auth, payload, embedded) = &*HEADERS;
        let segment = case.segment(embedded);
        let input = format!("{segment}.{payload}");
        let expected = case.expected(&segment);
        let signature = match (&expected, &case.sig) {
            // The gate refuses before the signature: do not pay for one.
            (Ok(_), _) => "AAAA".to_owned(),
            (Err(()), Sig::Real) => auth.stack.key.signature(&input),
            (Err(()), Sig::Short) => b64([1u8; 20]),
            (Err(()), Sig::Zero) => b64([0u8; 64]),
            (Err(()), Sig::NotBase64) => "~~~~".to_owned(),
            (Err(()), Sig::Empty) => String::new(),
            (Err(()), Sig::Padded) => format!("{}=", auth.stack.key.signature(&input)),
            (Err(()), Sig::Random) => {
                let mut bytes = [0u8; 64];
                getrandom::fill(&mut bytes).unwrap();
                b64(bytes)
            }
        };
        let expected = match (expected, &case.sig) {
            // `=` inside the token breaks the carrier's `b64token` before any JWT parsing.
            _ if matches!(case.encoding, Encoding::Padded) => AuthExpect::Refuse(
                AuthError::InvalidRequest(InvalidRequest::MalformedAuthorizationHeader),
            ),
            (Ok(reason), _) => AuthExpect::Refuse(AuthError::InvalidToken(reason)),
            (Err(()), Sig::Real) => AuthExpect::Admit,
            (Err(()), Sig::NotBase64 | Sig::Padded) => AuthExpect::Refuse(AuthError::InvalidToken(InvalidToken::Malformed)),
            (Err(()), _) => AuthExpect::Refuse(AuthError::InvalidToken(InvalidToken::BadSignature)),
        };
        let token = format!("{input}.{signature}");
        let actual = auth.token(&token);
        check_auth(&actual, &expected).map_err(|e| fail(format!("{e}\nheader: {}", case.json(embedded))))?;
    }
}

// =============================================================================================
// JWT claims
// =============================================================================================

/// A payload as sent: members in order (duplicates possible), each value as raw JSON text.
#[derive(Clone, Debug)]
struct ClaimsCase {
    members: Vec<(&'static str, String)>,
    shape: Shape,
}

#[derive(Clone, Debug)]
enum Shape {
    Object,
    /// `[ {...} ]`
    Wrapped,
    /// `["<issuer>"]`
    IssuerArray,
    Text,
    Trailing,
}

/// How a tampered payload is signed.
#[derive(Clone, Debug)]
enum TamperSig {
    /// A valid signature of the original payload (a full ES256 verification).
    Original,
    Short,
    NotBase64,
}

/// Choices read from generated bytes. A zero byte always means "the ordinary choice", so
/// proptest, which shrinks bytes towards zero, shrinks a failing case towards a valid one.
struct Picks<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Picks<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, at: 0 }
    }

    fn byte(&mut self) -> usize {
        let byte = self.bytes.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        usize::from(byte)
    }

    /// `true` with roughly `percent` % probability; a zero byte gives `false`.
    fn chance(&mut self, percent: usize) -> bool {
        self.byte() * 100 >= 256 * (100 - percent)
    }

    /// `ordinary`, or with roughly `percent` % probability one of `others`.
    fn pick<T: Clone>(&mut self, ordinary: T, percent: usize, others: &[T]) -> T {
        let byte = self.byte();
        if byte * 100 >= 256 * (100 - percent) {
            others[byte % others.len()].clone()
        } else {
            ordinary
        }
    }

    /// One of `items`, the first for a zero byte.
    fn any<T: Clone>(&mut self, items: &[T]) -> T {
        items[self.byte() % items.len()].clone()
    }
}

fn at(offset: i64) -> String {
    (now() as i64 + offset).to_string()
}

fn strings(values: &[&str]) -> Vec<String> {
    values.iter().map(|v| v.to_string()).collect()
}

/// Hostile values for one claim.
fn hostile_values(name: &str) -> Vec<String> {
    match name {
        "iss" => strings(&[
            r#""https://evil.example""#,
            r#""https://as.example/""#,
            r#""HTTPS://AS.EXAMPLE""#,
            r#""https://as.example\u0000""#,
            r#"["https://as.example"]"#,
            "1",
            "null",
            r#""https://as.examp\u0142e""#,
            r#""https://as.ex\ud800ample""#,
            "{}",
        ]),
        "aud" => strings(&[
            r#"["x","http://127.0.0.1:8080/mcp"]"#,
            r#"["x"]"#,
            "[]",
            r#""https://other.example/mcp""#,
            r#""http://127.0.0.1:8080/mcp/""#,
            "1",
            "null",
            r#"[["http://127.0.0.1:8080/mcp"]]"#,
            r#"["http://127.0.0.1:8080/mcp",1]"#,
            r#""HTTP://127.0.0.1:8080/mcp""#,
            r#"["http://127.0.0.1:8080/mcp","http://127.0.0.1:8080/mcp"]"#,
            "{}",
        ]),
        "exp" | "nbf" => vec![
            at(-10),
            at(10),
            at(-3600),
            at(3600),
            format!("{}.5", at(3600)),
            format!("{}.25", at(-3600)),
            "0".into(),
            u64::MAX.to_string(),
            "18446744073709551616".into(),
            "-1".into(),
            "-1.5".into(),
            r#""tomorrow""#.into(),
            "null".into(),
            "1e400".into(),
            "1e19".into(),
            "-0".into(),
            "true".into(),
            format!("[{}]", at(3600)),
            "{}".into(),
        ],
        "sub" => strings(&[
            "null",
            "42",
            "{}",
            "[]",
            r#""""#,
            r#""\u202eecila""#,
            r#""a\ud800""#,
        ]),
        "client_id" => strings(&["null", "7", "[]", r#""""#]),
        "azp" => strings(&[r#""x""#, "3", "null", "{}"]),
        "scope" => strings(&[
            r#""mcp:read other""#,
            r#""other""#,
            r#""""#,
            r#""MCP:READ""#,
            r#""mcp:read\tx""#,
            r#"" mcp:read ""#,
            "1",
            r#"["mcp:read"]"#,
            "null",
            r#""mcp:read\u0000""#,
            r#""mcp:read  mcp:write""#,
            "{}",
        ]),
        "scp" => strings(&[
            r#"["mcp:read"]"#,
            "[1]",
            r#""mcp:read""#,
            "{}",
            "null",
            r#"["a b","mcp:read"]"#,
            r#"["x"]"#,
            r#"[["mcp:read"]]"#,
        ]),
        "authorization_details" => strings(&[
            r#"[{"type":"x"}]"#,
            r#"["x"]"#,
            r#"{"type":"x"}"#,
            r#""x""#,
            "null",
            "[]",
            r#"[{"type":"x"},null]"#,
        ]),
        _ => vec![
            format!("{}1{}", "[".repeat(20), "]".repeat(20)),
            format!("{}1{}", "[".repeat(300), "]".repeat(300)),
            r#""\ud800""#.into(),
            r#""a\u0000b""#.into(),
            "1e400".into(),
            quoted(&"x".repeat(2000)),
            r#""\uD83D\uDE00""#.into(),
            r#"{"iss":"https://evil.example"}"#.into(),
        ],
    }
}

/// One claim of a generated payload.
struct ClaimPlan {
    name: &'static str,
    /// How often (%) it is present.
    present: usize,
    ordinary: String,
    /// How often (%) its value is one of `others`.
    hostile: usize,
    others: Vec<String>,
}

/// The claims of a generated payload.
fn claim_plan() -> Vec<ClaimPlan> {
    [
        ("iss", 96, quoted(ISSUER), 12),
        ("aud", 96, quoted(RESOURCE), 25),
        ("exp", 96, at(3600), 30),
        ("nbf", 20, at(-3600), 45),
        ("sub", 80, quoted("alice"), 20),
        ("client_id", 60, quoted("app"), 20),
        ("azp", 15, quoted("x"), 50),
        ("scope", 85, quoted(SCOPE), 30),
        ("scp", 20, r#"["mcp:read"]"#.to_owned(), 60),
        (
            "authorization_details",
            15,
            r#"[{"type":"x"}]"#.to_owned(),
            60,
        ),
    ]
    .into_iter()
    .map(|(name, present, ordinary, hostile)| ClaimPlan {
        name,
        present,
        ordinary,
        hostile,
        others: hostile_values(name),
    })
    .collect()
}

static CLAIM_PLAN: LazyLock<Vec<ClaimPlan>> = LazyLock::new(claim_plan);

impl ClaimsCase {
    fn from_picks(bytes: &[u8]) -> Self {
        let mut picks = Picks::new(bytes);
        let mut members: Vec<(&'static str, String)> = Vec::new();
        for plan in CLAIM_PLAN.iter() {
            // A zero byte keeps a usually-present claim and leaves out a usually-absent one.
            let keep = if plan.present >= 50 {
                !picks.chance(100 - plan.present)
            } else {
                picks.chance(plan.present)
            };
            let value = picks.pick(plan.ordinary.clone(), plan.hostile, &plan.others);
            if keep {
                members.push((plan.name, value));
            }
        }
        let extras = hostile_values("extra");
        for name in ["x-a", "x-b"] {
            let keep = picks.chance(5);
            let value = picks.any(&extras);
            if keep {
                members.push((name, value));
            }
        }
        // A second occurrence of one member, with another value of the same claim.
        let twice = picks.chance(6);
        let (which, value) = (picks.byte(), picks.byte());
        if twice && !members.is_empty() {
            let name = members[which % members.len()].0;
            let plan = CLAIM_PLAN.iter().find(|p| p.name == name);
            let values = plan.map_or(extras.clone(), |p| {
                let mut values = p.others.clone();
                values.push(p.ordinary.clone());
                values
            });
            members.push((name, values[value % values.len()].clone()));
        }
        let shape = picks.pick(
            Shape::Object,
            4,
            &[
                Shape::Wrapped,
                Shape::IssuerArray,
                Shape::Text,
                Shape::Trailing,
            ],
        );
        ClaimsCase { members, shape }
    }
}

fn claims_case() -> impl Strategy<Value = ClaimsCase> {
    proptest::collection::vec(any::<u8>(), 32).prop_map(|bytes| ClaimsCase::from_picks(&bytes))
}

/// What the gate must say about a payload.
#[derive(Clone, Debug, PartialEq)]
enum ClaimsExpect {
    Admit,
    Insufficient,
    OneOf(Vec<InvalidToken>),
}

/// `exp`/`nbf` as a verifier reads a NumericDate: a non-negative integer, or a finite
/// non-negative float below 2^64 (rounded).
fn numeric_date(value: &Value) -> Option<u64> {
    let Value::Number(n) = value else { return None };
    if let Some(u) = n.as_u64() {
        return Some(u);
    }
    if n.is_i64() {
        return None;
    }
    let f = n.as_f64()?;
    (f.is_finite() && f >= 0.0 && f < u64::MAX as f64).then(|| f.round() as u64)
}

impl ClaimsCase {
    fn object(&self) -> String {
        let members: Vec<String> = self
            .members
            .iter()
            .map(|(name, value)| format!("{}:{value}", quoted(name)))
            .collect();
        format!("{{{}}}", members.join(","))
    }

    fn document(&self) -> String {
        match self.shape {
            Shape::Object => self.object(),
            Shape::Wrapped => format!("[{}]", self.object()),
            Shape::IssuerArray => format!("[{}]", quoted(ISSUER)),
            Shape::Text => quoted("claims"),
            Shape::Trailing => format!("{} x", self.object()),
        }
    }

    /// Every value of `name`, in order; `None` for one that is not valid JSON.
    fn values(&self, name: &str) -> Vec<Option<Value>> {
        self.members
            .iter()
            .filter(|(n, _)| *n == name)
            .map(|(_, v)| serde_json::from_str::<Value>(v).ok())
            .collect()
    }

    /// The issuer check that comes before the signature (documented: `iss` exactly a
    /// configured issuer). `Ok` when the issuer is trusted; `Err` with the possible reasons.
    fn issuer(&self) -> Result<(), Vec<InvalidToken>> {
        use InvalidToken::*;
        if !matches!(self.shape, Shape::Object) {
            return Err(vec![Malformed, WrongIssuer, BadSignature]);
        }
        match self.values("iss").as_slice() {
            [] => Err(vec![WrongIssuer]),
            [None] => Err(vec![Malformed]),
            [Some(Value::String(iss))] if iss == ISSUER => Ok(()),
            [Some(_)] => Err(vec![WrongIssuer]),
            _ => Err(vec![Malformed]),
        }
    }

    fn readable(&self) -> bool {
        serde_json::from_str::<Value>(&self.document()).is_ok()
    }

    /// Expected answer when the signature does not cover the payload.
    fn expected_tampered(&self, sig: &TamperSig) -> ClaimsExpect {
        use InvalidToken::*;
        let after_signature = match sig {
            TamperSig::NotBase64 => Malformed,
            _ => BadSignature,
        };
        match self.issuer() {
            Err(mut reasons) => {
                if reasons.contains(&BadSignature) {
                    reasons.retain(|r| *r != BadSignature);
                    reasons.push(after_signature);
                }
                ClaimsExpect::OneOf(reasons)
            }
            // An unreadable value elsewhere may fail the issuer read or wait for the signature.
            Ok(()) if !self.readable() => ClaimsExpect::OneOf(vec![Malformed, after_signature]),
            Ok(()) => ClaimsExpect::OneOf(vec![after_signature]),
        }
    }

    /// Expected answer when the trusted key really signed this payload.
    fn expected_signed(&self) -> ClaimsExpect {
        use InvalidToken::*;
        let reason = |r| ClaimsExpect::OneOf(vec![r]);
        match self.issuer() {
            Err(mut reasons) => {
                reasons.retain(|r| *r != BadSignature);
                if !matches!(self.shape, Shape::Object) {
                    reasons = vec![Malformed, WrongIssuer];
                }
                return ClaimsExpect::OneOf(reasons);
            }
            Ok(()) if !self.readable() => return reason(Malformed),
            Ok(()) => {}
        }
        // Registered claims read twice are refused; other claims: the last one counts.
        for name in ["exp", "nbf", "sub", "aud"] {
            if self.values(name).len() > 1 {
                return reason(Malformed);
            }
        }
        // A registered string or date claim holding an array or object can stop jsonwebtoken's
        // claim reader mid-value, which then reports `malformed` rather than the claim's reason.
        let quirk = ["exp", "nbf", "sub"].iter().any(|name| {
            self.values(name)
                .pop()
                .flatten()
                .is_some_and(|v| v.is_array() || v.is_object())
        });
        match self.signed_claims() {
            ClaimsExpect::OneOf(mut reasons) if quirk => {
                reasons.push(Malformed);
                ClaimsExpect::OneOf(reasons)
            }
            other => other,
        }
    }

    /// The claim rules in the documented order, once the issuer and signature are good.
    fn signed_claims(&self) -> ClaimsExpect {
        use InvalidToken::*;
        let reason = |r| ClaimsExpect::OneOf(vec![r]);
        let last = |name: &str| self.values(name).pop().map(|v| v.unwrap());
        let present = |v: &Option<Value>| v.as_ref().is_some_and(|v| !v.is_null());
        let (exp, nbf, aud) = (last("exp"), last("nbf"), last("aud"));
        let exp_read = exp.as_ref().and_then(numeric_date);
        let aud_read = match &aud {
            Some(Value::String(a)) => Some(vec![a.clone()]),
            Some(Value::Array(items)) if items.iter().all(Value::is_string) => Some(
                items
                    .iter()
                    .map(|v| v.as_str().unwrap().to_owned())
                    .collect(),
            ),
            _ => None,
        };
        // A required claim that cannot be read counts as missing (jsonwebtoken checks presence
        // before format; `tests/suite/refusals.rs` pins this for `exp`).
        if exp_read.is_none() || aud_read.is_none() {
            return reason(MissingClaim);
        }
        // `nbf` is optional, but present it must be a NumericDate (`null` included).
        let nbf_read = nbf.as_ref().map(numeric_date);
        if nbf_read == Some(None) {
            return reason(BadClaim);
        }
        let now = now();
        if exp_read.unwrap() < now - 30 {
            return reason(Expired);
        }
        if nbf_read.flatten().is_some_and(|nbf| nbf > now + 30) {
            return reason(NotYetValid);
        }
        if !aud_read.unwrap().iter().any(|a| a == RESOURCE) {
            return reason(WrongAudience);
        }
        let text_or_null =
            |v: &Option<Value>| v.as_ref().is_none_or(|v| v.is_null() || v.is_string());
        let (sub, client_id, azp) = (last("sub"), last("client_id"), last("azp"));
        let client_ok = if present(&client_id) {
            text_or_null(&client_id)
        } else {
            text_or_null(&azp)
        };
        let (scope, scp, details) = (last("scope"), last("scp"), last("authorization_details"));
        let scp_ok = match &scp {
            None | Some(Value::Null) | Some(Value::String(_)) => true,
            Some(Value::Array(items)) => items.iter().all(Value::is_string),
            Some(_) => false,
        };
        let details_ok = match &details {
            None | Some(Value::Null) => true,
            Some(Value::Array(items)) => items.iter().all(Value::is_object),
            Some(_) => false,
        };
        if !text_or_null(&sub) || !client_ok || !text_or_null(&scope) || !scp_ok || !details_ok {
            return reason(BadClaim);
        }
        let mut granted: BTreeSet<String> = BTreeSet::new();
        let mut add = |text: &str| {
            granted.extend(text.split(' ').filter(|s| !s.is_empty()).map(str::to_owned))
        };
        if let Some(Value::String(s)) = &scope {
            add(s);
        }
        match &scp {
            Some(Value::String(s)) => add(s),
            Some(Value::Array(items)) => items.iter().for_each(|v| add(v.as_str().unwrap())),
            _ => {}
        }
        if granted.contains(SCOPE) {
            ClaimsExpect::Admit
        } else {
            ClaimsExpect::Insufficient
        }
    }
}

fn check_claims(
    actual: &Result<mcp_gate::Principal, AuthError>,
    expected: &ClaimsExpect,
    case: &ClaimsCase,
) -> Result<(), TestCaseError> {
    let ok = match (expected, actual) {
        (ClaimsExpect::Admit, Ok(_)) => true,
        (ClaimsExpect::Insufficient, Err(AuthError::InsufficientScope { .. })) => true,
        (ClaimsExpect::OneOf(reasons), Err(AuthError::InvalidToken(got))) => reasons.contains(got),
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(fail(format!(
            "expected {expected:?}, got {actual:?}\npayload: {}",
            case.document()
        )))
    }
}

static TAMPERED: LazyLock<(Auth, String, String)> = LazyLock::new(|| {
    let auth = Auth::new();
    let original = auth.stack.alice.clone();
    let signature = original.rsplit('.').next().unwrap().to_owned();
    (auth, b64(standard_header()), signature)
});

static SIGNED: LazyLock<(Auth, String)> = LazyLock::new(|| (Auth::new(), b64(standard_header())));

proptest! {
    #![proptest_config(config(CASES))]

    /// Hostile payloads under a signature that does not cover them are never admitted: the
    /// issuer check or the signature refuses them, with the predicted reason.
    #[test]
    fn jwt_claims_tampered_payloads_are_never_admitted(
        case in claims_case(),
        sig in prop_oneof![
            3 => Just(TamperSig::Original),
            90 => Just(TamperSig::Short),
            7 => Just(TamperSig::NotBase64),
        ],
        raw_segment in prop_oneof![
            19 => Just(None),
            1 => select(vec!["~~~~", "e30", "", "A", "W10"]).prop_map(Some),
        ],
    ) {
        let (auth, header, original) = &*TAMPERED;
        let payload = match raw_segment {
            Some(segment) => segment.to_owned(),
            None => b64(case.document()),
        };
        let signature = match sig {
            TamperSig::Original => original.clone(),
            TamperSig::Short => b64([7u8; 16]),
            TamperSig::NotBase64 => "~~~~".to_owned(),
        };
        let actual = auth.token(&format!("{header}.{payload}.{signature}"));
        let expected = match raw_segment {
            // `e30` is `{}` and `W10` is `[]`: no issuer, or nothing an issuer can be read from.
            Some("e30") => ClaimsExpect::OneOf(vec![InvalidToken::WrongIssuer]),
            Some("W10") => ClaimsExpect::OneOf(vec![InvalidToken::Malformed, InvalidToken::WrongIssuer]),
            Some(_) => ClaimsExpect::OneOf(vec![InvalidToken::Malformed]),
            None => case.expected_tampered(&sig),
        };
        check_claims(&actual, &expected, &case)?;
    }
}

proptest! {
    #![proptest_config(config(SIGNED_CASES))]

    /// Hostile payloads really signed by the trusted key: admitted exactly when the documented
    /// claim rules hold, refused with the predicted reason otherwise.
    #[test]
    fn jwt_claims_signed_payloads_follow_the_documented_rules(case in claims_case()) {
        let (auth, header) = &*SIGNED;
        let token = auth.stack.key.sign_segments(header, &b64(case.document()));
        let actual = auth.token(&token);
        check_claims(&actual, &case.expected_signed(), &case)?;
    }
}

// =============================================================================================
// JSON-RPC classification
// =============================================================================================

/// `"name":value` members of an object, from picks: each is present with its own chance,
/// ordinary or hostile, and one may be repeated.
fn object_from_picks(
    picks: &mut Picks<'_>,
    plan: &[(&str, usize, &str, usize, &[&str])],
) -> String {
    let mut members = Vec::new();
    for (name, present, ordinary, hostile, others) in plan {
        let keep = if *present >= 50 {
            !picks.chance(100 - present)
        } else {
            picks.chance(*present)
        };
        let value = picks.pick(*ordinary, *hostile, others);
        if keep {
            members.push(format!("{}:{value}", quoted(name)));
        }
    }
    let twice = picks.chance(8);
    let (which, spelling) = (picks.byte(), picks.byte());
    if twice && !members.is_empty() {
        let (name, value) = members[which % members.len()]
            .split_once(':')
            .map(|(n, v)| (n.to_owned(), v.to_owned()))
            .unwrap();
        // The same key again, sometimes spelled with an escape, with another value.
        let name = match spelling % 3 {
            0 => name,
            1 => name.replacen('a', "\\u0061", 1).replacen('e', "\\u0065", 1),
            _ => name.replacen('m', "\\u006d", 1).replacen('d', "\\u0064", 1),
        };
        let other = match value.as_str() {
            r#""echo""# => r#""secret""#.to_owned(),
            r#""2.0""# => r#""1.0""#.to_owned(),
            _ => "null".to_owned(),
        };
        members.push(format!("{name}:{other}"));
    }
    format!("{{{}}}", members.join(","))
}

const META_MODERN: &str = r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}"#;

fn jsonrpc_body(bytes: &[u8]) -> Vec<u8> {
    let mut picks = Picks::new(bytes);
    let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
    let arguments_deep = format!("{{\"a\":{deep}}}");
    let params = object_from_picks(
        &mut picks,
        &[
            (
                "name",
                92,
                r#""echo""#,
                30,
                &[
                    r#""secret""#,
                    "1",
                    "null",
                    r#""sec\u0072et""#,
                    r#""secret ""#,
                    r#""SECRET""#,
                    r#""\u0455ecret""#,
                    r#""""#,
                    "{}",
                    r#""guarded""#,
                    r#""deploy""#,
                ],
            ),
            (
                "arguments",
                70,
                r#"{"text":"hi"}"#,
                30,
                &[
                    "[]",
                    "null",
                    r#""x""#,
                    r#"{"a":1,"a":2}"#,
                    &arguments_deep,
                    r#"{"n":1e400}"#,
                    r#"{"s":"\ud800"}"#,
                    r#"{"s":"\u0000"}"#,
                    r#"{"a":{"b":1,"b":2}}"#,
                    r#"{"n":-0.0,"m":1E+2}"#,
                ],
            ),
            ("uri", 10, r#""file:///x""#, 30, &["1", "null", r#""""#]),
            (
                "_meta",
                12,
                META_MODERN,
                40,
                &[
                    r#""x""#,
                    "{}",
                    "[]",
                    r#"{"io.modelcontextprotocol/protocolVersion":"2025-11-25","io.modelcontextprotocol/clientCapabilities":{}}"#,
                    r#"{"io.modelcontextprotocol/protocolVersion":7,"io.modelcontextprotocol/clientCapabilities":{}}"#,
                    r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}"#,
                    r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}"#,
                ],
            ),
            (
                "requestState",
                5,
                r#""x""#,
                50,
                &["1", r#""mcpgate1.a.b.c""#, "null"],
            ),
            (
                "inputResponses",
                5,
                "{}",
                50,
                &[
                    "[]",
                    r#"{"mcp-gate/confirm":{"action":"accept","content":{"approve":true}}}"#,
                ],
            ),
            (
                "taskId",
                8,
                r#""tsk_AAAAAAAAAAAAAAAAAAAAAA""#,
                50,
                &["1", r#""t-1""#],
            ),
            ("cursor", 5, r#""x""#, 50, &["1", "null"]),
        ],
    );
    let object = object_from_picks(
        &mut picks,
        &[
            (
                "jsonrpc",
                96,
                r#""2.0""#,
                8,
                &[r#""1.0""#, "2.0", "null", r#""2.0 ""#, r#""2.\u0030""#],
            ),
            (
                "id",
                92,
                "7",
                25,
                &[
                    r#""a""#,
                    "1.5",
                    "null",
                    "{}",
                    "[]",
                    "18446744073709551616",
                    "-1",
                    r#""\ud800""#,
                    "1e400",
                    "9223372036854775807",
                    "-9223372036854775809",
                    "0",
                    "true",
                    r#""""#,
                ],
            ),
            (
                "method",
                96,
                r#""tools/call""#,
                40,
                &[
                    r#""ping""#,
                    r#""resources/read""#,
                    r#""prompts/get""#,
                    r#""tools/list""#,
                    r#""initialize""#,
                    r#""notifications/initialized""#,
                    "1",
                    "null",
                    r#""tools/call\u0000""#,
                    r#""Tools/Call""#,
                    r#""tools\/call""#,
                    r#""completion/complete""#,
                    r#""tasks/get""#,
                    r#""resources/subscribe""#,
                    r#""tasks/cancel""#,
                ],
            ),
            ("params", 92, &params, 8, &["[]", "null", r#""x""#, "1"]),
            ("result", 4, "{}", 0, &["{}"]),
            ("error", 3, r#"{"code":1,"message":"m"}"#, 0, &["{}"]),
            ("extra", 5, "1", 0, &["1"]),
        ],
    );
    let shape = picks.pick(0, 12, &[1, 2, 3, 4, 5, 6, 7, 8, 9]);
    match shape {
        0 => object.into_bytes(),
        1 => format!("[{object}]").into_bytes(),
        2 => b"[]".to_vec(),
        3 => picks
            .any(&["\"ping\"", "1", "null", "true", "\"\""])
            .as_bytes()
            .to_vec(),
        4 => [b"\xef\xbb\xbf".as_slice(), object.as_bytes()].concat(),
        5 => format!("{object} {{}}").into_bytes(),
        6 => format!(" \n\t{object}\r\n ").into_bytes(),
        7 => {
            // A raw control byte inside a string.
            let mut body = object.into_bytes();
            let at = body.iter().position(|b| *b == b'"').map_or(0, |i| i + 1);
            body.insert(at, 0);
            body
        }
        8 => object.as_bytes()[..object.len() / 2].to_vec(),
        _ => bytes.iter().rev().take(16).copied().collect(),
    }
}

/// Mirrored headers read leniently from the body, as a client would send them.
fn headers_for(body: &[u8]) -> HeaderMap {
    let mut headers = HeaderMap::new();
    let Ok(message) = serde_json::from_slice::<Value>(body) else {
        return headers;
    };
    let params = &message["params"];
    let put = |headers: &mut HeaderMap, name: &'static str, value: &Value| {
        if let Some(text) = value.as_str().filter(|t| header_text_ok(t)) {
            headers.insert(name, HeaderValue::from_str(text).unwrap());
        }
    };
    put(
        &mut headers,
        "mcp-protocol-version",
        &params["_meta"]["io.modelcontextprotocol/protocolVersion"],
    );
    put(&mut headers, "mcp-method", &message["method"]);
    for key in ["name", "uri", "taskId"] {
        put(&mut headers, "mcp-name", &params[key]);
    }
    headers
}

const JSONRPC_CODES: [i64; 6] = [-32700, -32600, -32602, -32020, -32021, -32022];

static JSONRPC: LazyLock<Stack> = LazyLock::new(|| {
    let stack = Stack::new();
    let body =
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{}}}"#;
    let (reply, reached) = stack.post_counted(&stack.alice, &HeaderMap::new(), body);
    assert!(
        reached,
        "a plain call must reach the inner handler: {}",
        reply.describe()
    );
    stack
});

/// Whether a strictly read message is a request for the refused tool.
fn calls_secret(message: &Value) -> bool {
    message["method"] == "tools/call" && message["params"]["name"] == "secret"
}

fn check_jsonrpc(stack: &Stack, body: &[u8], headers: &HeaderMap) -> Result<(), TestCaseError> {
    let (reply, reached) = stack.post_counted(&stack.alice, headers, body.to_vec());
    let read = strict_json(body);
    let request_id = read.as_ref().and_then(|m| m.get("id")).cloned();
    let context = || {
        format!(
            "body {:?} -> {}",
            String::from_utf8_lossy(body),
            reply.describe()
        )
    };
    if reached {
        let forwarded = stack.last_body();
        // The layer's own input responses (`mcp-gate/*`) never reach the inner service: a body
        // that carries them is forwarded without them, and otherwise byte for byte.
        let layer_inputs = read.as_ref().is_some_and(|m| {
            m["method"].is_string()
                && m.get("id").is_some()
                && m["params"]["inputResponses"]
                    .as_object()
                    .is_some_and(|r| r.keys().any(|k| k.starts_with("mcp-gate/")))
        });
        if layer_inputs {
            // A rewritten message carries the four JSON-RPC members only.
            let original = read.clone().unwrap_or_default();
            let mut expected = json!({
                "jsonrpc": original["jsonrpc"], "id": original["id"],
                "method": original["method"], "params": original["params"],
            });
            let responses = expected["params"]["inputResponses"]
                .as_object_mut()
                .unwrap();
            responses.retain(|k, _| !k.starts_with("mcp-gate/"));
            if responses.is_empty() {
                expected["params"]
                    .as_object_mut()
                    .unwrap()
                    .remove("inputResponses");
            }
            let got = forwarded.as_deref().and_then(strict_json);
            prop_assert_eq!(
                got,
                Some(expected),
                "not forwarded without the layer's keys: {}",
                context()
            );
            return Ok(());
        }
        prop_assert_eq!(
            forwarded.as_deref(),
            Some(body),
            "not forwarded byte for byte: {}",
            context()
        );
        let message = read
            .as_ref()
            .ok_or_else(|| fail(format!("unreadable body forwarded: {}", context())))?;
        prop_assert!(
            message.is_object() && message["jsonrpc"] == "2.0",
            "{}",
            context()
        );
        // Notifications (no id) are documented to pass unevaluated; see the ignored
        // `jsonrpc_guarded_methods_without_an_id_never_reach_the_inner_service`.
        let notification = message.get("id").is_none();
        prop_assert!(
            notification || !calls_secret(message),
            "the refused tool ran: {}",
            context()
        );
        return Ok(());
    }
    match &read {
        None => {
            prop_assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{}", context());
            prop_assert_eq!(
                reply.rpc_error().map(|e| e.0),
                Some(-32700),
                "{}",
                context()
            );
            prop_assert_eq!(&reply.json["id"], &Value::Null, "{}", context());
            return Ok(());
        }
        Some(message) if !message.is_object() => {
            prop_assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{}", context());
            prop_assert_eq!(
                reply.rpc_error().map(|e| e.0),
                Some(-32600),
                "{}",
                context()
            );
            return Ok(());
        }
        Some(message) => {
            // A well-formed legacy call of an allowed tool is never refused.
            let plain = message.as_object().unwrap();
            let ordinary = plain.len() == 4
                && message["jsonrpc"] == "2.0"
                && message["id"].is_u64()
                && message["method"] == "tools/call"
                && message["params"].as_object().is_some_and(|p| {
                    p.keys().all(|k| k == "name" || k == "arguments")
                        && p.get("name") == Some(&json!("echo"))
                        && p.get("arguments").is_none_or(Value::is_object)
                });
            prop_assert!(!ordinary, "an ordinary call was refused: {}", context());
        }
    }
    match reply.status {
        StatusCode::BAD_REQUEST => {
            let (code, _) = reply
                .rpc_error()
                .ok_or_else(|| fail(format!("400 without a JSON-RPC error: {}", context())))?;
            prop_assert!(
                JSONRPC_CODES.contains(&code) && code != -32700,
                "code {code}: {}",
                context()
            );
            let id = &reply.json["id"];
            let echoed = request_id
                .as_ref()
                .is_some_and(|r| r == id && (r.is_string() || r.is_i64() || r.is_u64()));
            prop_assert!(id.is_null() || echoed, "answer id {id}: {}", context());
        }
        StatusCode::OK => {
            // The layer answered itself: a denial, a confirmation, a task or an unknown task.
            prop_assert!(
                reply.json.get("result").is_some() || reply.rpc_error().is_some(),
                "{}",
                context()
            );
            prop_assert_ne!(
                reply.rpc_error().map(|e| e.0),
                Some(-32603),
                "internal error: {}",
                context()
            );
        }
        StatusCode::NOT_FOUND => {
            // A modern request for a method in no row of the method table.
            prop_assert_eq!(
                reply.rpc_error().map(|e| e.0),
                Some(-32601),
                "{}",
                context()
            );
        }
        other => return Err(fail(format!("status {other}: {}", context()))),
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(CASES))]

    /// Hostile JSON-RPC bodies: strictness, documented codes, and nothing but an allowed call,
    /// byte for byte, ever reaches the inner handler.
    #[test]
    fn jsonrpc_bodies_are_classified_strictly(bytes in proptest::collection::vec(any::<u8>(), 48), mirror in any::<bool>()) {
        let body = jsonrpc_body(&bytes);
        let headers = if mirror { headers_for(&body) } else { HeaderMap::new() };
        check_jsonrpc(&JSONRPC, &body, &headers)?;
    }
}

// =============================================================================================
// Sealed values: continuation state and list cursors
// =============================================================================================

const ALPHABET: [char; 24] = [
    'A',
    'z',
    '0',
    '9',
    '-',
    '_',
    '.',
    '=',
    '+',
    '/',
    '%',
    ' ',
    '\u{e9}',
    '\u{0}',
    '"',
    '\\',
    '\u{1f600}',
    '\u{ff41}',
    'm',
    'c',
    'p',
    'g',
    '\n',
    '~',
];

/// Applies one to three edits chosen by `picks` to `base`, a sealed value
/// `<prefix><kid>.<payload>.<tag>`; `sibling` is another valid value of the same kind.
fn mutate(base: &str, sibling: &str, prefix: &str, picks: &mut Picks<'_>) -> String {
    let mut text: Vec<char> = base.chars().collect();
    let edits = 1 + picks.byte() % 3;
    for _ in 0..edits {
        let kind = picks.byte() % 14;
        let at = (picks.byte() * 256 + picks.byte()) % (text.len() + 1);
        let c = ALPHABET[picks.byte() % ALPHABET.len()];
        let segments = |text: &[char]| -> Option<Vec<String>> {
            let s: String = text.iter().collect();
            let rest = s.strip_prefix(prefix)?;
            Some(rest.split('.').map(str::to_owned).collect())
        };
        let join = |segments: &[String]| -> Vec<char> {
            format!("{prefix}{}", segments.join(".")).chars().collect()
        };
        match kind {
            0 if at < text.len() => text[at] = if text[at] == c { 'Q' } else { c },
            0 | 1 => text.insert(at, c),
            2 => {
                let len = 1 + picks.byte() % 4;
                let end = (at + len).min(text.len());
                text.drain(at.min(end)..end);
            }
            3 => text.truncate(at),
            4 => text.extend(std::iter::repeat_n(c, 1 + picks.byte() % 4)),
            5 => text.insert(0, c),
            6 => {
                let which = picks.byte() % 3;
                if let (Some(mut mine), Some(theirs)) = (
                    segments(&text),
                    segments(&sibling.chars().collect::<Vec<_>>()),
                ) && which < mine.len()
                    && which < theirs.len()
                {
                    mine[which] = theirs[which].clone();
                    text = join(&mine);
                }
            }
            7 => {
                let kid = [
                    "",
                    "k2",
                    "ephemeral2",
                    "EPHEMERAL",
                    "ephemeral ",
                    "..",
                    "\u{435}phemeral",
                ][picks.byte() % 7];
                if let Some(mut mine) = segments(&text) {
                    mine[0] = kid.to_owned();
                    text = join(&mine);
                }
            }
            8 => {
                // A forged payload under the original tag.
                if let Some(mut mine) = segments(&text)
                    && mine.len() > 1
                    && let Ok(decoded) = URL_SAFE_NO_PAD.decode(&mine[1])
                    && let Ok(Value::Object(mut payload)) =
                        serde_json::from_slice::<Value>(&decoded)
                {
                    let field = [
                        "exp",
                        "round",
                        "who",
                        "what",
                        "key",
                        "interaction",
                        "nonce",
                        "method",
                        "inner",
                        "extra",
                    ][picks.byte() % 10];
                    let value = [
                        json!(u64::MAX),
                        json!(0),
                        json!(-1),
                        json!("x"),
                        json!(null),
                        json!("url"),
                        json!({}),
                        json!(4_294_967_296u64),
                        json!("tools/list"),
                        json!("page-9"),
                    ][picks.byte() % 10]
                        .clone();
                    payload.insert(field.to_owned(), value);
                    mine[1] = b64(Value::Object(payload).to_string());
                    text = join(&mine);
                }
            }
            9 => {
                if let Some(mut mine) = segments(&text) {
                    let which = picks.byte() % mine.len();
                    mine[which].push('=');
                    text = join(&mine);
                }
            }
            10 => {
                for ch in &mut text {
                    *ch = match *ch {
                        '-' => '+',
                        '_' => '/',
                        other => other,
                    };
                }
            }
            11 => {
                let upper = picks.byte().is_multiple_of(2);
                let s: String = text.iter().collect();
                text = if upper {
                    s.to_uppercase()
                } else {
                    s.to_lowercase()
                }
                .chars()
                .collect();
            }
            12 => {
                let space = [" ", "\n", "\t", "\u{a0}", "%20"][picks.byte() % 5];
                if picks.byte().is_multiple_of(2) {
                    text.splice(0..0, space.chars());
                } else {
                    text.extend(space.chars());
                }
            }
            _ => {
                if let Some(mut mine) = segments(&text) {
                    let which = picks.byte() % mine.len();
                    let copy = mine[which].clone();
                    mine.insert(which, copy);
                    text = join(&mine);
                }
            }
        }
    }
    text.into_iter().collect()
}

/// Why the layer cannot open a sealed value that is not one it issued: the refusal its
/// documented format predicts (`<prefix><kid>.<payload>.<tag>`, 64 KiB at most).
#[derive(Debug, PartialEq)]
enum Unsealed {
    /// Not the layer's prefix.
    Foreign,
    Malformed,
    UnknownKey,
    Tampered,
}

fn unseal(candidate: &str, prefix: &str, kid: &str) -> Unsealed {
    if candidate.len() > 64 * 1024 {
        return Unsealed::Malformed;
    }
    let Some(rest) = candidate.strip_prefix(prefix) else {
        return Unsealed::Foreign;
    };
    let parts: Vec<&str> = rest.split('.').collect();
    let [candidate_kid, _, tag] = parts.as_slice() else {
        return Unsealed::Malformed;
    };
    if URL_SAFE_NO_PAD.decode(tag).is_err() {
        return Unsealed::Malformed;
    }
    if *candidate_kid != kid {
        return Unsealed::UnknownKey;
    }
    Unsealed::Tampered
}

const CONFIRM: &str = r#"{"mcp-gate/confirm":{"action":"accept","content":{"approve":true}}}"#;
const CONFIRM_CAPABILITIES: &str = r#"{"elicitation":{"form":{}}}"#;

/// A modern call of `guarded` (which asks for a confirmation), optionally with a state and the
/// user's approval.
fn guarded_call(state: Option<&str>) -> (String, HeaderMap) {
    let mut params = json!({"name": "guarded", "arguments": {"path": "notes.txt"}});
    if let Some(state) = state {
        params["requestState"] = json!(state);
        params["inputResponses"] = serde_json::from_str(CONFIRM).unwrap();
    }
    let body = modern_body(
        "tools/call",
        params,
        serde_json::from_str(CONFIRM_CAPABILITIES).unwrap(),
    );
    (body, mirrored("tools/call", Some("guarded")))
}

/// A stack and two fresh confirmation states for the same call.
struct StateFixture {
    stack: Stack,
    base: String,
    sibling: String,
    kid: String,
}

impl Stack {
    /// Asks for `guarded` and returns the layer's state.
    fn issue_state(&self, token: &str) -> String {
        let (body, headers) = guarded_call(None);
        let (reply, reached) = self.post_counted(token, &headers, body);
        assert!(!reached);
        assert_eq!(
            reply.json["result"]["resultType"],
            "input_required",
            "{}",
            reply.describe()
        );
        reply.json["result"]["requestState"]
            .as_str()
            .unwrap()
            .to_owned()
    }
}

static STATES: LazyLock<StateFixture> = LazyLock::new(|| {
    let stack = Stack::new();
    // Not vacuous: an untouched state with the approval runs the call.
    let first = stack.issue_state(&stack.alice);
    let (body, headers) = guarded_call(Some(&first));
    let (reply, reached) = stack.post_counted(&stack.alice, &headers, body);
    assert!(reached, "an approved retry must run: {}", reply.describe());
    let (base, sibling) = (
        stack.issue_state(&stack.alice),
        stack.issue_state(&stack.alice),
    );
    let kid = base
        .strip_prefix("mcpgate1.")
        .unwrap()
        .split('.')
        .next()
        .unwrap()
        .to_owned();
    StateFixture {
        stack,
        base,
        sibling,
        kid,
    }
});

const STATE_MESSAGES: [(Unsealed, &str); 3] = [
    (Unsealed::Malformed, "the request state is malformed"),
    (
        Unsealed::UnknownKey,
        "the request state was signed with an unknown key",
    ),
    (Unsealed::Tampered, "the request state was tampered with"),
];

proptest! {
    #![proptest_config(config(CASES))]

    /// A mutated `requestState` on an approved retry never runs the call.
    #[test]
    fn continuation_state_mutations_never_run_the_call(bytes in proptest::collection::vec(any::<u8>(), 24)) {
        let f = &*STATES;
        let state = mutate(&f.base, &f.sibling, "mcpgate1.", &mut Picks::new(&bytes));
        prop_assume!(state != f.base && state != f.sibling);
        let (body, headers) = guarded_call(Some(&state));
        let (reply, reached) = f.stack.post_counted(&f.stack.alice, &headers, body);
        prop_assert!(!reached, "a tampered state ran the call: {state:?}");
        match unseal(&state, "mcpgate1.", &f.kid) {
            Unsealed::Foreign => {
                // Not the layer's state: it is the application's, and the layer asks afresh.
                prop_assert_eq!(reply.status, StatusCode::OK, "{}", reply.describe());
                prop_assert_eq!(&reply.json["result"]["resultType"], "input_required", "{}", reply.describe());
            }
            predicted => {
                let message = STATE_MESSAGES.iter().find(|(k, _)| *k == predicted).unwrap().1;
                prop_assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{}", reply.describe());
                prop_assert_eq!(reply.rpc_error(), Some((-32602, message)), "{:?}: {}", state, reply.describe());
            }
        }
    }
}

/// A stack and two valid cursors of the same list.
struct CursorFixture {
    stack: Stack,
    base: String,
    sibling: String,
}

fn list_body(cursor: Option<&Value>) -> String {
    let mut message = json!({"jsonrpc": "2.0", "id": RPC_ID, "method": "tools/list", "params": {}});
    if let Some(cursor) = cursor {
        message["params"]["cursor"] = cursor.clone();
    }
    message.to_string()
}

static CURSORS: LazyLock<CursorFixture> = LazyLock::new(|| {
    let stack = Stack::new();
    let next = |cursor: Option<&str>| {
        let (reply, reached) = stack.post_counted(
            &stack.alice,
            &HeaderMap::new(),
            list_body(cursor.map(|c| json!(c)).as_ref()),
        );
        assert!(reached, "{}", reply.describe());
        reply.json["result"]["nextCursor"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let base = next(None);
    let sibling = next(Some(&base));
    assert!(base.starts_with("mcpgatec1.") && sibling.starts_with("mcpgatec1."));
    CursorFixture {
        stack,
        base,
        sibling,
    }
});

proptest! {
    #![proptest_config(config(CASES))]

    /// A mutated list cursor never reaches the inner server: `invalid cursor`, -32602, 400.
    #[test]
    fn signed_cursor_mutations_never_reach_the_inner_list(bytes in proptest::collection::vec(any::<u8>(), 24)) {
        let f = &*CURSORS;
        let cursor = mutate(&f.base, &f.sibling, "mcpgatec1.", &mut Picks::new(&bytes));
        prop_assume!(cursor != f.base && cursor != f.sibling);
        let (reply, reached) = f.stack.post_counted(&f.stack.alice, &HeaderMap::new(), list_body(Some(&json!(cursor))));
        prop_assert!(!reached, "a tampered cursor reached the inner list: {cursor:?}");
        prop_assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{}", reply.describe());
        prop_assert_eq!(reply.rpc_error(), Some((-32602, "invalid cursor")), "{:?}: {}", cursor, reply.describe());
    }
}

// =============================================================================================
// Task ids and task records
// =============================================================================================

const BASE64URL: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// The documented task id shape: `tsk_` and 22 base64url characters.
fn layer_shaped(id: &str) -> bool {
    id.strip_prefix("tsk_")
        .is_some_and(|rest| rest.len() == 22 && rest.bytes().all(|b| BASE64URL.contains(&b)))
}

/// A candidate task id from picks: edits of `real`, fresh ids of the layer's shape, near
/// misses and junk.
fn task_id_from_picks(real: &str, picks: &mut Picks<'_>) -> String {
    let random_chars = |picks: &mut Picks<'_>, n: usize, alphabet: &[char]| -> String {
        (0..n)
            .map(|_| alphabet[picks.byte() % alphabet.len()])
            .collect()
    };
    let b64chars: Vec<char> = BASE64URL.iter().map(|b| *b as char).collect();
    let mut odd = b64chars.clone();
    odd.extend([
        '=', '+', '/', '.', ' ', '\u{e9}', '\u{0}', '\u{ff21}', '%', '\t',
    ]);
    match picks.byte() % 8 {
        0 | 1 => {
            let mut id: Vec<char> = real.chars().collect();
            let at = picks.byte() % id.len();
            match picks.byte() % 5 {
                0 => id[at] = odd[picks.byte() % odd.len()],
                1 => id.insert(at, odd[picks.byte() % odd.len()]),
                2 => {
                    id.remove(at);
                }
                3 => id.truncate(at),
                _ => {
                    let s: String = id.iter().collect();
                    id = s.to_uppercase().chars().collect();
                }
            }
            id.into_iter().collect()
        }
        2 | 3 => format!("tsk_{}", random_chars(picks, 22, &b64chars)),
        4 => real.to_owned(),
        5 => {
            let prefix = ["TSK_", "tsk-", "tsk", "tsk__", "", "xtsk_", " tsk_"][picks.byte() % 7];
            format!("{prefix}{}", &real[4..])
        }
        6 => {
            let len = picks.byte() % 40;
            random_chars(picks, len, &odd)
        }
        _ => {
            let len = 21 + picks.byte() % 3;
            format!("tsk_{}", random_chars(picks, len, &odd))
        }
    }
}

proptest! {
    #![proptest_config(config(CASES))]

    /// `TaskId::parse` accepts exactly the documented shape, and serde agrees with it.
    #[test]
    fn task_id_parse_accepts_exactly_the_documented_shape(
                bytes in proptest::collection::vec(any::<u8>(), 48),
        chars in proptest::collection::vec(any::<char>(), 0..30),
    ) {
        let text: String = chars.into_iter().collect();
        let real = TaskId::generate().unwrap();
        for id in [task_id_from_picks(real.as_str(), &mut Picks::new(&bytes)), text] {
            let parsed = TaskId::parse(&id);
            prop_assert_eq!(parsed.is_some(), layer_shaped(&id), "{:?}", id);
            if let Some(parsed) = &parsed {
                prop_assert_eq!(parsed.as_str(), id.as_str());
            }
            let via_serde = serde_json::from_value::<TaskId>(json!(id));
            prop_assert_eq!(via_serde.ok(), parsed, "{:?}", id);
        }
    }
}

const SECRET_ARGUMENT: &str = "SECRET-ARGUMENT-VALUE-42";

fn sample_record() -> TaskRecord {
    TaskRecord::new(
        TaskOwner::new(ISSUER, Some("alice".into()), Some("app".into())),
        HeldCall::new(
            "tools/call",
            json!({"name": "deploy", "arguments": {"env": SECRET_ARGUMENT}}),
            VERSION,
            RESOURCE,
        ),
        "actx_hostile",
        60_000,
        1_000,
    )
    .unwrap()
}

/// The documented consistency rules of a stored record (`TaskRecord::from_json`).
fn consistent(record: &TaskRecord) -> Result<(), String> {
    let approved = matches!(record.decision, Some(TaskDecision::Approved { .. }));
    let rules = [
        (record.schema_version == 1, "schema version"),
        (record.ttl_ms > 0, "ttl"),
        (record.poll_interval_ms > 0, "poll interval"),
        (record.last_updated_at >= record.created_at, "timestamps"),
        (!record.owner.issuer.is_empty(), "owner"),
        ((1..=256).contains(&record.context_id.len()), "context id"),
        (!record.call.method.is_empty(), "method"),
        (
            match &record.call.params {
                Value::Null => true,
                Value::Object(map) => ["_meta", "inputResponses", "requestState", "task"]
                    .iter()
                    .all(|k| !map.contains_key(*k)),
                _ => false,
            },
            "params",
        ),
        (
            match record.status {
                TaskStatus::Working => {
                    record.decision.is_none() && record.result.is_none() && record.error.is_none()
                }
                TaskStatus::Approved | TaskStatus::Executing => {
                    approved && record.result.is_none() && record.error.is_none()
                }
                TaskStatus::Cancelled => record.result.is_none() && record.error.is_none(),
                TaskStatus::Completed => record.result.is_some() && record.error.is_none(),
                TaskStatus::Failed => record.error.is_some() && record.result.is_none(),
                // `TaskStatus` is non-exhaustive: a status this test does not know is not
                // one it can call consistent.
                _ => false,
            },
            "status and outcome",
        ),
    ];
    match rules.iter().find(|(ok, _)| !ok) {
        Some((_, what)) => Err(format!("inconsistent {what}")),
        None => Ok(()),
    }
}

/// A stored record edited by picks: fields removed, retyped, set to hostile values, added,
/// duplicated, or the text cut.
fn record_from_picks(base: &Value, picks: &mut Picks<'_>) -> Vec<u8> {
    const PATHS: [&str; 21] = [
        "schema_version",
        "id",
        "owner",
        "owner/issuer",
        "owner/subject",
        "owner/client_id",
        "status",
        "created_at",
        "last_updated_at",
        "ttl_ms",
        "poll_interval_ms",
        "call",
        "call/method",
        "call/params",
        "call/params/_meta",
        "call/params/task",
        "call/protocol_version",
        "context_id",
        "decision",
        "result",
        "error",
    ];
    let values = [
        json!(null),
        json!(true),
        json!(-1),
        json!(0),
        json!(1.5),
        json!(u64::MAX),
        json!(1.8446744073709552e19),
        json!(""),
        json!("x".repeat(300)),
        json!([]),
        json!({}),
        json!(SECRET_ARGUMENT),
        json!("working"),
        json!("approved"),
        json!("executing"),
        json!("completed"),
        json!("cancelled"),
        json!("failed"),
        json!("WORKING"),
        json!({"kind": "approved", "by": "rm"}),
        json!({"kind": "refused", "reason": SECRET_ARGUMENT}),
        json!({"kind": "approved"}),
        json!({"content": [], "isError": false}),
        json!({"code": -32603, "message": "m"}),
        json!({"code": "x", "message": SECRET_ARGUMENT}),
        json!(TaskId::generate().unwrap().as_str()),
        json!("tsk_short"),
        json!(1),
        json!(2),
        json!(4_294_967_297u64),
        json!({"name": "deploy", "_meta": {}}),
    ];
    let mut record = base.clone();
    for _ in 0..1 + picks.byte() % 4 {
        let path = PATHS[picks.byte() % PATHS.len()];
        let pointer = format!("/{path}");
        let (parent, key) = pointer.rsplit_once('/').unwrap();
        let value = values[picks.byte() % values.len()].clone();
        let remove = picks.byte().is_multiple_of(4);
        if let Some(Value::Object(map)) =
            record.pointer_mut(if parent.is_empty() { "" } else { parent })
        {
            if remove {
                map.remove(key);
            } else {
                map.insert(key.to_owned(), value);
            }
        }
    }
    if picks.chance(10) {
        record[format!("unknown_{}", picks.byte())] = json!(SECRET_ARGUMENT);
    }
    let mut text = serde_json::to_vec(&record).unwrap();
    match picks.byte() % 12 {
        0 => {
            // The same field twice, first with another value.
            let field = [
                &b"\"status\":\"completed\","[..],
                b"\"id\":\"tsk_AAAAAAAAAAAAAAAAAAAAAA\",",
                b"\"schema_version\":2,",
                b"\"ttl_ms\":1,",
            ][picks.byte() % 4];
            text.splice(1..1, field.iter().copied());
        }
        1 => {
            let at = picks.byte() * 16 % text.len();
            text.truncate(at);
        }
        2 => {
            let deep = format!("\"deep\":{}1{},", "[".repeat(200), "]".repeat(200));
            text.splice(1..1, deep.bytes());
        }
        3 => text.extend_from_slice(b" x"),
        4 => text = [b"\xef\xbb\xbf".as_slice(), &text].concat(),
        _ => {}
    }
    text
}

static RECORD: LazyLock<(TaskRecord, Value)> = LazyLock::new(|| {
    let record = sample_record();
    let value = serde_json::to_value(&record).unwrap();
    (record, value)
});

proptest! {
    #![proptest_config(config(CASES))]

    /// A stored record is read back only when it is consistent, and a refusal never quotes a
    /// value from the record.
    #[test]
    fn task_record_from_json_reads_only_consistent_records(
        bytes in proptest::collection::vec(any::<u8>(), 24),
        other_id in any::<bool>(),
    ) {
        let (record, value) = &*RECORD;
        let text = record_from_picks(value, &mut Picks::new(&bytes));
        let id = if other_id { TaskId::generate().unwrap().to_string() } else { record.id.to_string() };
        let context = || String::from_utf8_lossy(&text).into_owned();
        match TaskRecord::from_json(&text, &id) {
            Ok(read) => {
                prop_assert_eq!(read.id.as_str(), id.as_str(), "{}", context());
                consistent(&read).map_err(|e| fail(format!("{e}: {}", context())))?;
                let again = TaskRecord::from_json(&read.to_json().unwrap(), &id).unwrap();
                prop_assert_eq!(again, read);
            }
            Err(error) => {
                let shown = error.to_string();
                prop_assert!(!shown.contains(SECRET_ARGUMENT), "{shown}");
                // The version is read first: a clean record of another version is named as
                // such; a version is only ever reported as it appears in the record.
                let version_of = |v: Value| v.get("schema_version").and_then(Value::as_u64);
                let clean = strict_json(&text).and_then(version_of).filter(|v| *v != 1);
                match &error {
                    StoreError::UnsupportedSchema { id: got, found, supported } => {
                        prop_assert_eq!(got, &id);
                        prop_assert!(*found != 1 && *supported == 1, "{}", shown);
                        let spelled = format!("\"schema_version\":{found}");
                        prop_assert!(context().contains(&spelled), "{} not in the record", spelled);
                    }
                    StoreError::Corrupt { id: got, .. } => {
                        prop_assert_eq!(got, &id);
                        prop_assert!(clean.is_none(), "version {:?} should be named: {}", clean, shown);
                    }
                    other => return Err(fail(format!("undocumented error {other:?}"))),
                }
            }
        }
    }
}

/// A stack holding one task of alice's, and the answer to an id that names no task.
struct TaskFixture {
    stack: Stack,
    real: String,
    unknown: Bytes,
}

const TASKS_CAPABILITIES: &str = r#"{"extensions":{"io.modelcontextprotocol/tasks":{}}}"#;

fn task_call(method: &str, id: &str, declare: bool, modern: bool) -> (String, HeaderMap) {
    let params = json!({"taskId": id});
    if !modern {
        let body = json!({"jsonrpc": "2.0", "id": RPC_ID, "method": method, "params": params});
        return (body.to_string(), HeaderMap::new());
    }
    let capabilities = if declare {
        serde_json::from_str(TASKS_CAPABILITIES).unwrap()
    } else {
        json!({})
    };
    let body = modern_body(method, params, capabilities);
    let mut headers = mirrored(method, None);
    headers.insert(
        "mcp-name",
        HeaderValue::from_str(id).unwrap_or(HeaderValue::from_static("unsendable")),
    );
    (body, headers)
}

impl TaskFixture {
    fn status(&self) -> TaskStatus {
        let id = TaskId::parse(&self.real).unwrap();
        let store = self.stack.gate.tasks();
        let record = self.stack.runtime.block_on(store.store().get(&id)).unwrap();
        record.expect("the task exists").status
    }
}

static TASKS: LazyLock<TaskFixture> = LazyLock::new(|| {
    let stack = Stack::new();
    let body = modern_body(
        "tools/call",
        json!({"name": "deploy", "arguments": {"env": "prod"}}),
        serde_json::from_str(TASKS_CAPABILITIES).unwrap(),
    );
    let (reply, reached) =
        stack.post_counted(&stack.alice, &mirrored("tools/call", Some("deploy")), body);
    assert!(!reached);
    assert_eq!(
        reply.json["result"]["resultType"],
        "task",
        "{}",
        reply.describe()
    );
    let real = reply.json["result"]["taskId"].as_str().unwrap().to_owned();
    // The owner sees it; an id of the same shape that names nothing gets the unknown answer.
    let (body, headers) = task_call("tasks/get", &real, true, true);
    let (own, _) = stack.post_counted(&stack.alice, &headers, body);
    assert_eq!(
        own.json["result"]["taskId"],
        real.as_str(),
        "{}",
        own.describe()
    );
    let fresh = TaskId::generate().unwrap();
    let (body, headers) = task_call("tasks/get", fresh.as_str(), true, true);
    let (unknown, reached) = stack.post_counted(&stack.alice, &headers, body);
    assert!(!reached);
    assert_eq!(
        unknown.rpc_error(),
        Some((-32602, "Unknown task")),
        "{}",
        unknown.describe()
    );
    TaskFixture {
        stack,
        real,
        unknown: unknown.bytes,
    }
});

proptest! {
    #![proptest_config(config(CASES))]

    /// Task ids through the layer: every id of the layer's shape that is not the caller's own
    /// task gets the unknown-task answer byte for byte; the owner's task never changes.
    #[test]
    fn task_id_layer_strangers_and_near_misses_learn_nothing(bytes in proptest::collection::vec(any::<u8>(), 32)) {
        let f = &*TASKS;
        let mut picks = Picks::new(&bytes);
        let id = task_id_from_picks(&f.real, &mut picks);
        let method = picks.pick("tasks/get", 30, &["tasks/cancel", "tasks/update", "tasks/result"]);
        let mallory = picks.chance(50) || id == f.real;
        let declare = !picks.chance(5);
        let modern = !picks.chance(5);
        let token = if mallory { &f.stack.mallory } else { &f.stack.alice };
        let (body, headers) = task_call(method, &id, declare, modern);
        let (reply, reached) = f.stack.post_counted(token, &headers, body);
        let context = || format!("{method} {id:?} as {}: {}", if mallory { "mallory" } else { "alice" }, reply.describe());
        prop_assert!(!String::from_utf8_lossy(&reply.bytes).contains(&f.real), "the task leaked: {}", context());
        if modern && !header_text_ok(&id) {
            prop_assert_eq!(reply.rpc_error().map(|e| e.0), Some(-32020), "{}", context());
            prop_assert!(!reached);
        } else if modern && !declare {
            prop_assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{}", context());
            prop_assert_eq!(reply.rpc_error().map(|e| e.0), Some(-32021), "{}", context());
            prop_assert!(!reached);
        } else if modern && layer_shaped(&id) {
            prop_assert!(!reached, "{}", context());
            prop_assert_eq!(&reply.bytes, &f.unknown, "not the unknown-task answer: {}", context());
        } else {
            // Not one of the layer's ids (or a legacy request): the inner server's to answer.
            prop_assert!(reached, "{}", context());
        }
        prop_assert_eq!(f.status(), TaskStatus::Working);
    }
}

// =============================================================================================
// Mcp-* headers
// =============================================================================================

/// One modern (or legacy) request and the mirrored headers sent with it.
#[derive(Debug)]
struct MirrorCase {
    method: &'static str,
    name: Option<&'static str>,
    version: Option<Value>,
    capabilities: Option<Value>,
    headers: Vec<(&'static str, Vec<u8>)>,
}

const NAMED_TARGETS: [(&str, Option<&str>); 8] = [
    ("tools/call", Some("echo")),
    ("resources/read", Some("file:///a")),
    ("prompts/get", Some("p")),
    ("tools/list", None),
    ("tools/call", Some("caf\u{e9}")),
    ("tools/call", Some("two words")),
    ("resources/read", Some("file:///tmp/x?y=1")),
    ("ping", None),
];

fn mirror_case_from_picks(picks: &mut Picks<'_>) -> MirrorCase {
    let (method, name) = picks.any(&NAMED_TARGETS);
    let legacy = picks.chance(8);
    let version = (!legacy).then(|| {
        picks.pick(
            json!(VERSION),
            10,
            &[
                json!("2025-11-25"),
                json!("2026-07-29"),
                json!(""),
                json!(20260728),
                json!(null),
                json!("2026-07-28 "),
                json!(["2026-07-28"]),
            ],
        )
    });
    let capabilities = picks.pick(
        Some(json!({})),
        5,
        &[None, Some(json!("x")), Some(json!([])), Some(json!(null))],
    );
    let expected = |header: &str| -> String {
        match header {
            "mcp-protocol-version" => version
                .as_ref()
                .and_then(Value::as_str)
                .unwrap_or(VERSION)
                .to_owned(),
            "mcp-method" => method.to_owned(),
            _ => name.unwrap_or("echo").to_owned(),
        }
    };
    let mut headers = Vec::new();
    for header in ["mcp-protocol-version", "mcp-method", "mcp-name"] {
        let count = picks.pick(1usize, 20, &[0, 2, 2, 3]);
        for _ in 0..count {
            let exact = expected(header);
            let value: Vec<u8> = match picks.pick(0usize, 30, &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]) {
                0 => exact.into_bytes(),
                1 => exact.to_uppercase().into_bytes(),
                2 => format!(" {exact}").into_bytes(),
                3 => format!("{exact} ").into_bytes(),
                4 => format!("{exact}\t").into_bytes(),
                5 => Vec::new(),
                6 => format!("{exact}x").into_bytes(),
                7 => b"tools/call".to_vec(),
                8 => [exact.as_bytes(), b"\xc3\xa9"].concat(),
                9 => exact.replace('/', "%2F").into_bytes(),
                _ => expected("mcp-name").into_bytes(),
            };
            headers.push((header, value));
        }
    }
    MirrorCase {
        method,
        name,
        version,
        capabilities,
        headers,
    }
}

impl MirrorCase {
    fn body(&self) -> String {
        let mut params = match (self.method, self.name) {
            ("resources/read", Some(uri)) => json!({"uri": uri}),
            ("prompts/get", Some(name)) => json!({"name": name, "arguments": {}}),
            (_, Some(name)) => json!({"name": name, "arguments": {}}),
            (_, None) => json!({}),
        };
        if let Some(version) = &self.version {
            let mut meta = json!({"io.modelcontextprotocol/protocolVersion": version});
            if let Some(capabilities) = &self.capabilities {
                meta["io.modelcontextprotocol/clientCapabilities"] = capabilities.clone();
            }
            params["_meta"] = meta;
        }
        json!({"jsonrpc": "2.0", "id": RPC_ID, "method": self.method, "params": params}).to_string()
    }

    /// The documented answer: `None` when the request goes through.
    fn expected(&self) -> Option<i64> {
        let version = self.version.as_ref()?;
        let Some(version) = version.as_str() else {
            return Some(-32602);
        };
        if version != VERSION {
            return Some(-32022);
        }
        if !self.capabilities.as_ref().is_some_and(Value::is_object) {
            return Some(-32602);
        }
        let agrees = |header: &str, want: &str| {
            let values: Vec<&Vec<u8>> = self
                .headers
                .iter()
                .filter(|(h, _)| *h == header)
                .map(|(_, v)| v)
                .collect();
            matches!(values.as_slice(), [one] if one.as_slice() == want.as_bytes())
        };
        let named = self
            .name
            .filter(|_| self.method != "tools/list" && self.method != "ping");
        let ok = agrees("mcp-protocol-version", version)
            && agrees("mcp-method", self.method)
            && named.is_none_or(|name| header_text_ok(name) && agrees("mcp-name", name));
        (!ok).then_some(-32020)
    }
}

static MCP_HEADERS: LazyLock<Stack> = LazyLock::new(Stack::new);

proptest! {
    #![proptest_config(config(CASES))]

    /// Modern requests run only when each mirrored header is present once and equal to the
    /// body; otherwise the documented code, and the inner handler never runs.
    #[test]
    fn mcp_headers_must_mirror_the_body(bytes in proptest::collection::vec(any::<u8>(), 40)) {
        let stack = &*MCP_HEADERS;
        let case = mirror_case_from_picks(&mut Picks::new(&bytes));
        let mut headers = HeaderMap::new();
        for (name, value) in &case.headers {
            match HeaderValue::from_bytes(value) {
                Ok(value) => headers.append(*name, value),
                Err(_) => return Ok(()),
            };
        }
        let (reply, reached) = stack.post_counted(&stack.alice, &headers, case.body());
        match case.expected() {
            None => prop_assert!(reached, "{case:?}: {}", reply.describe()),
            Some(code) => {
                prop_assert!(!reached, "{case:?}");
                prop_assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{:?}: {}", case, reply.describe());
                prop_assert_eq!(reply.rpc_error().map(|e| e.0), Some(code), "{:?}: {}", case, reply.describe());
                prop_assert_eq!(&reply.json["id"], &json!(RPC_ID));
            }
        }
    }
}

// =============================================================================================
// SEP-2243: wrapped header values
// =============================================================================================

/// How a client following SEP-2243 (rmcp's does) writes a value into `Mcp-Name`: as it is when
/// it can travel as plain header text, otherwise `=?base64?<standard base64>?=`. Written here
/// from the SEP's rule.
fn sep2243_wrap(value: &str) -> String {
    let edge = |c: Option<char>| matches!(c, Some(' ' | '\t'));
    let needs = edge(value.chars().next())
        || edge(value.chars().last())
        || value.chars().any(|c| !(' '..='~').contains(&c))
        || (value.starts_with("=?base64?") && value.ends_with("?="));
    if needs {
        format!(
            "=?base64?{}?=",
            base64::engine::general_purpose::STANDARD.encode(value)
        )
    } else {
        value.to_owned()
    }
}

/// How the receiving server reads it back: `None` for a wrapper that does not decode.
fn sep2243_read(header: &str) -> Option<String> {
    match header
        .strip_prefix("=?base64?")
        .and_then(|rest| rest.strip_suffix("?="))
    {
        Some(inner) => base64::engine::general_purpose::STANDARD
            .decode(inner)
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok()),
        None => Some(header.to_owned()),
    }
}

/// Tool names that stress the wrapping: non-ASCII, edge whitespace, wrapper look-alikes.
fn sep2243_name() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z_]{1,12}",
        "[ \t]?[a-zé名前\u{1F600}_ -]{1,10}[ \t]?",
        "[a-zA-Z0-9+/=?]{0,12}".prop_map(|inner| format!("=?base64?{inner}?=")),
        select(vec![
            "café",
            " echo",
            "echo\t",
            "名前",
            "demo://naïve",
            "=?base64?ZWNobw==?=",
            "echo"
        ])
        .prop_map(str::to_owned),
    ]
    .prop_filter("a tool the test policy treats specially", |name| {
        !["secret", "guarded", "deploy"].contains(&name.as_str())
    })
}

/// What the test puts in `Mcp-Name` for a body naming `name`.
fn sep2243_header(name: String) -> impl Strategy<Value = String> {
    let wrapped = sep2243_wrap(&name);
    prop_oneof![
        4 => Just(wrapped.clone()),
        // Always wrapped, even when plain text would do: servers read both alike.
        1 => Just(format!("=?base64?{}?=", base64::engine::general_purpose::STANDARD.encode(&name))),
        // The plain text, where it can be a header at all.
        1 => Just(name.clone()),
        // Another name, wrapped as a client would.
        1 => sep2243_name().prop_map(|other| sep2243_wrap(&other)),
        // A damaged wrapper.
        1 => Just(wrapped.replacen('=', "", 1)),
        1 => Just(format!("{}x?=", wrapped.trim_end_matches("?="))),
    ]
}

static SEP2243: LazyLock<Stack> = LazyLock::new(Stack::new);

proptest! {
    #![proptest_config(config(CASES))]

    /// A modern `tools/call` goes on exactly when the server would read `Mcp-Name` as the body's
    /// name; otherwise `-32020` and the inner handler never runs.
    #[test]
    fn sep2243_names_are_read_as_the_server_reads_them(
        (name, header) in sep2243_name().prop_flat_map(|name| (Just(name.clone()), sep2243_header(name)))
    ) {
        let stack = &*SEP2243;
        let Ok(value) = HeaderValue::from_str(&header) else {
            // Not header text at all: no client can send it.
            return Ok(());
        };
        let mut headers = mirrored("tools/call", None);
        headers.insert("mcp-name", value);
        let body = modern_body("tools/call", json!({"name": name, "arguments": {}}), json!({}));
        let (reply, reached) = stack.post_counted(&stack.alice, &headers, body);
        // A header that is not plain header text (raw UTF-8) cannot be read as text at all.
        let agrees = header_text_ok(&header) && sep2243_read(&header).as_deref() == Some(name.as_str());
        prop_assert_eq!(reached, agrees, "{:?} / {:?}: {}", name, header, reply.describe());
        if !agrees {
            prop_assert_eq!(reply.status, StatusCode::BAD_REQUEST);
            prop_assert_eq!(reply.rpc_error().map(|e| e.0), Some(-32020), "{:?} / {:?}", name, header);
        }
    }
}

// =============================================================================================
// Credential challenges: bounded in size, the remedy never lost
// =============================================================================================

/// A gate whose policy asks for a credential whose `authorization_details` carry the call's
/// `blob` argument, so the remedy is as large as the request makes it.
static CREDENTIAL: LazyLock<Stack> = LazyLock::new(|| {
    Stack::with(|builder| {
        builder.evaluate(|evaluation: Evaluation| async move {
            let blob = evaluation
                .arguments()
                .and_then(|a| a.get("blob"))
                .cloned()
                .unwrap_or(Value::Null);
            Ok::<_, Infallible>(Decision::credential([
                json!({"type": "payment", "blob": blob}),
            ]))
        })
    })
});

/// Every `authorization_details` array anywhere in `value`.
fn details_in(value: &Value, found: &mut Vec<Value>) {
    match value {
        Value::Object(map) => {
            if let Some(details) = map.get("authorization_details") {
                found.push(details.clone());
            }
            map.values().for_each(|v| details_in(v, found));
        }
        Value::Array(items) => items.iter().for_each(|v| details_in(v, found)),
        _ => {}
    }
}

/// The `authorization_remediation` parameter of a challenge, decoded.
fn challenge_remedy(challenge: &str) -> Option<Value> {
    let start =
        challenge.find("authorization_remediation=\"")? + "authorization_remediation=\"".len();
    let end = start + challenge[start..].find('"')?;
    let json = URL_SAFE_NO_PAD.decode(&challenge[start..end]).ok()?;
    serde_json::from_slice(&json).ok()
}

proptest! {
    #![proptest_config(config(CASES))]

    /// However large the requested remedy, the challenge header stays under the cap, and the
    /// remedy reaches the client whole: in the header when it fits; otherwise in the result
    /// (modern) or in the JSON body of the 401 (legacy).
    #[test]
    fn credential_challenges_are_bounded_and_lose_nothing(
        blob in prop_oneof![
            3 => "[ -~]{0,200}",
            2 => (0usize..12_000).prop_map(|n| "x".repeat(n)),
            1 => r#"[a-zé\u{1F600}"\\]{0,2000}"#,
        ],
        modern in any::<bool>(),
    ) {
        let stack = &*CREDENTIAL;
        let params = json!({"name": "pay", "arguments": {"blob": blob}});
        let (body, headers) = if modern {
            (modern_body("tools/call", params, json!({})), mirrored("tools/call", Some("pay")))
        } else {
            (json!({"jsonrpc": "2.0", "id": RPC_ID, "method": "tools/call", "params": params}).to_string(), HeaderMap::new())
        };
        let mut request = Request::post("/mcp")
            .header(header::AUTHORIZATION, format!("Bearer {}", stack.alice))
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "application/json, text/event-stream")
            .body(Body::from(body))
            .unwrap();
        request.headers_mut().extend(headers);
        let (status, challenge, answer) = stack.runtime.block_on(async {
            let response = stack.app.clone().oneshot(request).await.unwrap();
            let challenge = response
                .headers()
                .get(header::WWW_AUTHENTICATE)
                .map(|v| v.to_str().unwrap().to_owned());
            let status = response.status();
            let bytes = axum::body::to_bytes(response.into_body(), 1 << 24).await.unwrap();
            (status, challenge, serde_json::from_slice::<Value>(&bytes).unwrap_or(Value::Null))
        });
        let expected = json!([{"type": "payment", "blob": blob}]);
        let cap = mcp_gate::denial::MAX_CHALLENGE_REMEDIATION;
        if let Some(challenge) = &challenge {
            prop_assert!(challenge.len() <= cap + 1024, "a {}-byte challenge", challenge.len());
        }
        let encoded_len = URL_SAFE_NO_PAD
            .encode(json!({"authorization_details": expected}).to_string())
            .len();
        match challenge.as_deref().and_then(challenge_remedy) {
            Some(remedy) => {
                prop_assert_eq!(&remedy["authorization_details"], &expected);
                prop_assert_eq!(status, StatusCode::UNAUTHORIZED);
            }
            None => {
                // Only a remedy too large for a header leaves it.
                prop_assert!(encoded_len > cap - 200, "a {encoded_len}-character remedy left the header");
                let mut found = Vec::new();
                details_in(&answer, &mut found);
                if modern {
                    prop_assert_eq!(status, StatusCode::OK);
                    prop_assert_eq!(found.first(), Some(&expected), "{}", answer);
                } else {
                    prop_assert_eq!(status, StatusCode::UNAUTHORIZED);
                    let encoded = answer["authorization_remediation"].as_str().unwrap_or_default();
                    let remedy: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(encoded).unwrap_or_default()).unwrap_or(Value::Null);
                    prop_assert_eq!(&remedy["authorization_details"], &expected);
                }
            }
        }
    }
}

// =============================================================================================
// Metadata path
// =============================================================================================

struct MetadataFixture {
    runtime: tokio::runtime::Runtime,
    router: Router,
    paths: Vec<String>,
    document: Value,
}

static METADATA: LazyLock<MetadataFixture> = LazyLock::new(|| {
    let stack = Stack::new();
    let runtime = crate::common::fixtures::runtime();
    MetadataFixture {
        runtime,
        router: stack.gate.metadata_router(),
        paths: stack.gate.metadata_paths().to_vec(),
        document: serde_json::to_value(stack.gate.metadata()).unwrap(),
    }
});

fn metadata_path_from_picks(picks: &mut Picks<'_>) -> String {
    const PREFIXES: [&str; 18] = [
        "/.well-known/oauth-protected-resource",
        "/.WELL-KNOWN/oauth-protected-resource",
        "/.well-known/OAUTH-PROTECTED-RESOURCE",
        "/%2Ewell-known/oauth-protected-resource",
        "/.well-known%2Foauth-protected-resource",
        "//.well-known/oauth-protected-resource",
        "/.well-known//oauth-protected-resource",
        "/./.well-known/oauth-protected-resource",
        "/x/../.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource%00",
        "/.well-known/oauth-protected-resourc",
        "/.well-known/oauth-authorization-server",
        "/.well-known/openid-configuration",
        "/.well-known/oauth-protected-resource;x",
        "/.well%E2%80%90known/oauth-protected-resource",
        "",
        "/",
        "/.well-known",
    ];
    const SUFFIXES: [&str; 17] = [
        "",
        "/mcp",
        "/mcp/",
        "/MCP",
        "/mcp%2F",
        "/mcp/x",
        "//mcp",
        "/%6Dcp",
        "/mcp%00",
        "/mcp/..",
        "/mcp/.",
        "/mcp;v=1",
        "/../mcp",
        "/mc",
        "/mcpx",
        "/%2e%2e/mcp",
        "/mcp%20",
    ];
    let prefix = picks.pick(PREFIXES[0], 25, &PREFIXES);
    let suffix = picks.any(&SUFFIXES);
    let query = picks.pick(
        "",
        15,
        &["?x=1", "?", "?resource=http://evil.example/mcp", "?%00"],
    );
    let mut path = format!("{prefix}{suffix}{query}");
    if picks.chance(5) {
        let noise = b"/.%-_~:@!$&'()*+,;=AZaz09";
        let at = picks.byte() % (path.len() + 1);
        path.insert(at, noise[picks.byte() % noise.len()] as char);
    }
    path
}

proptest! {
    #![proptest_config(config(CASES))]

    /// Only the exact documented paths serve the metadata document.
    #[test]
    fn metadata_path_only_the_exact_paths_serve_the_document(bytes in proptest::collection::vec(any::<u8>(), 12)) {
        let f = &*METADATA;
        let mut picks = Picks::new(&bytes);
        let path = metadata_path_from_picks(&mut picks);
        let method = picks.pick(Method::GET, 20, &[Method::HEAD, Method::POST, Method::OPTIONS, Method::PUT, Method::DELETE]);
        let Ok(uri) = path.parse::<Uri>() else { return Ok(()) };
        let exact = f.paths.iter().any(|p| p == uri.path());
        let request = Request::builder().method(method.clone()).uri(uri).body(Body::empty()).unwrap();
        let (status, body) = f.runtime.block_on(async {
            let response = f.router.clone().oneshot(request).await.unwrap();
            let status = response.status();
            (status, axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap())
        });
        let serves = serde_json::from_slice::<Value>(&body).is_ok_and(|v| v == f.document);
        match (exact, &method) {
            (true, &Method::GET) => prop_assert!(status == StatusCode::OK && serves, "{path}: {status}"),
            (true, &Method::HEAD) => prop_assert_eq!(status, StatusCode::OK, "{}", path),
            // CORS answers OPTIONS itself (preflight), without the document.
            (_, &Method::OPTIONS) => prop_assert!(!serves, "{} {}: {}", method, path, status),
            (true, _) => prop_assert!(status.is_client_error() && !serves, "{} {}: {}", method, path, status),
            (false, _) => {
                prop_assert!(!serves, "{} {} served the document", method, path);
                prop_assert_eq!(status, StatusCode::NOT_FOUND, "{} {}", method, path);
            }
        }
    }
}

// =============================================================================================
// The corpus: hand-picked inputs per parser, each with its expected answer
// =============================================================================================

/// The cases of `tests/corpus/<parser>.json`.
fn corpus(parser: &str) -> Vec<Value> {
    let path = format!("{}/tests/corpus/{parser}.json", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let document: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    assert_eq!(document["parser"], parser, "{path}");
    let cases = document["cases"].as_array().expect("cases").clone();
    assert!(!cases.is_empty(), "{path}: no cases");
    cases
}

/// Fills `${NAME}` from `vars`, and the generated forms `${NEST:n}` (n nested empty arrays),
/// `${X:n}` (n letters x) and `${NOW+n}` / `${NOW-n}` (seconds from now).
fn fill(template: &str, vars: &[(&str, &str)]) -> String {
    let mut out = String::new();
    let mut rest = template;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let end = start
            + rest[start..]
                .find('}')
                .expect("an unterminated placeholder");
        let name = &rest[start + 2..end];
        let number = |prefix: &str| {
            name.strip_prefix(prefix)
                .and_then(|n| n.parse::<i64>().ok())
        };
        if let Some(n) = number("NEST:") {
            out.push_str(&"[".repeat(n as usize));
            out.push_str(&"]".repeat(n as usize));
        } else if let Some(n) = number("X:") {
            out.push_str(&"x".repeat(n as usize));
        } else if let Some(n) = number("NOW+") {
            out.push_str(&at(n));
        } else if let Some(n) = number("NOW-") {
            out.push_str(&at(-n));
        } else {
            let value = vars.iter().find(|(k, _)| *k == name);
            out.push_str(
                value
                    .unwrap_or_else(|| panic!("no value for ${{{name}}}"))
                    .1,
            );
        }
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}

/// Bytes of a corpus value: a string (UTF-8, placeholders filled) or `{"hex": "..."}`.
fn corpus_bytes(value: &Value, vars: &[(&str, &str)]) -> Vec<u8> {
    match value {
        Value::String(text) => fill(text, vars).into_bytes(),
        Value::Object(o) => {
            let hex = o["hex"].as_str().expect("a hex string");
            (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
                .collect()
        }
        other => panic!("not a corpus string: {other}"),
    }
}

/// Collects every mismatch of one corpus, then fails once with all of them.
struct Replay {
    parser: &'static str,
    ran: usize,
    failures: Vec<String>,
}

impl Replay {
    fn new(parser: &'static str) -> Self {
        Self {
            parser,
            ran: 0,
            failures: Vec::new(),
        }
    }

    fn check(&mut self, case: &Value, ok: bool, detail: impl FnOnce() -> String) {
        self.ran += 1;
        if !ok {
            self.failures.push(format!(
                "{}: expected {}, {}",
                case["name"],
                case["expect"],
                detail()
            ));
        }
    }

    /// [`Replay::check`] of a case sent through the layer: whether it reached the inner
    /// server, and what came back.
    fn check_reply(&mut self, case: &Value, ok: bool, reached: bool, reply: &Reply) {
        self.check(case, ok, || {
            format!("reached {reached}, got {}", reply.describe())
        });
    }

    fn finish(self) {
        assert!(self.ran > 0);
        assert!(
            self.failures.is_empty(),
            "{} of {} {} corpus cases failed:\n{}",
            self.failures.len(),
            self.ran,
            self.parser,
            self.failures.join("\n")
        );
    }
}

/// Whether an authentication `result` is the corpus case's `expect`: `admit`, or the reason
/// code of the refusal.
fn outcome_matches<T>(result: &Result<T, AuthError>, expect: &str) -> bool {
    match (result, expect) {
        (Ok(_), "admit") => true,
        (Err(error), reason) => error.reason() == reason,
        _ => false,
    }
}

/// `reply` is the layer's own `-32602` with `message`, and nothing reached the inner server.
fn invalid_params_refusal(reply: &Reply, reached: bool, message: &str) -> bool {
    !reached
        && reply.status == StatusCode::BAD_REQUEST
        && reply.rpc_error() == Some((-32602, message))
}

/// `expect` is a string naming an outcome, or `{"status", "code"[, "message"]}` of a refusal.
fn refusal_matches(expect: &Value, reply: &Reply, reached: bool) -> bool {
    !reached
        && expect["status"].as_u64() == Some(u64::from(reply.status.as_u16()))
        && expect["code"].as_i64() == reply.rpc_error().map(|e| e.0)
        && expect
            .get("message")
            .is_none_or(|m| m.as_str() == reply.rpc_error().map(|e| e.1))
}

#[test]
fn corpus_bearer_header() {
    let auth = Auth::new();
    let long = "a".repeat(8 * 1024 + 1);
    let vars = [
        ("TOKEN", auth.stack.alice.as_str()),
        ("LONG", long.as_str()),
    ];
    let mut replay = Replay::new("bearer_header");
    for case in corpus("bearer_header") {
        let mut headers = HeaderMap::new();
        for value in case["authorization"].as_array().into_iter().flatten() {
            let value =
                HeaderValue::from_bytes(&corpus_bytes(value, &vars)).expect("a header value");
            headers.append(header::AUTHORIZATION, value);
        }
        if let Some(content_type) = case.get("content_type") {
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_bytes(&corpus_bytes(content_type, &vars)).unwrap(),
            );
        }
        let uri: Uri = match case["query"].as_str() {
            Some(query) => format!("/mcp?{}", fill(query, &vars)).parse().unwrap(),
            None => "/mcp".parse().unwrap(),
        };
        let result = auth.authenticate(&headers, &uri);
        let ok = outcome_matches(&result, case["expect"].as_str().unwrap());
        replay.check(&case, ok, || format!("got {result:?}"));
    }
    replay.finish();
}

#[test]
fn corpus_jwt_header() {
    let auth = Auth::new();
    let attacker = Key::es256(KID);
    let attacker_jwk = serde_json::to_string(&attacker.jwk).unwrap();
    let vars = [("ATTACKER_JWK", attacker_jwk.as_str())];
    let payload = b64(valid_claims("alice").to_string());
    let original = auth.stack.alice.rsplit('.').next().unwrap().to_owned();
    let mut replay = Replay::new("jwt_header");
    for case in corpus("jwt_header") {
        let segment = match case.get("header_segment") {
            Some(segment) => segment.as_str().unwrap().to_owned(),
            None => b64(fill(case["header"].as_str().unwrap(), &vars)),
        };
        let input = format!("{segment}.{payload}");
        let signature = match case["signature"].as_str().unwrap() {
            "real" => auth.stack.key.signature(&input),
            "attacker" => attacker.signature(&input),
            "original" => original.clone(),
            "short" => b64([1u8; 20]),
            "zero" => b64([0u8; 64]),
            "empty" => String::new(),
            literal => literal.to_owned(),
        };
        let result = auth.token(&format!("{input}.{signature}"));
        let ok = match (&result, case["expect"].as_str().unwrap()) {
            (Ok(principal), "admit") => principal.subject() == Some("alice"),
            (Err(error), reason) => error.reason() == reason,
            _ => false,
        };
        replay.check(&case, ok, || format!("got {result:?}"));
    }
    replay.finish();
}

#[test]
fn corpus_jwt_claims() {
    let auth = Auth::new();
    let vars = [("ISSUER", ISSUER), ("RESOURCE", RESOURCE)];
    let header = b64(standard_header());
    let original = auth.stack.alice.rsplit('.').next().unwrap().to_owned();
    let mut replay = Replay::new("jwt_claims");
    for case in corpus("jwt_claims") {
        let segment = match case.get("payload_segment") {
            Some(segment) => segment.as_str().unwrap().to_owned(),
            None => b64(fill(case["payload"].as_str().unwrap(), &vars)),
        };
        let token = if case["signed"] == true {
            auth.stack.key.sign_segments(&header, &segment)
        } else {
            format!("{header}.{segment}.{original}")
        };
        let result = auth.token(&token);
        let ok = outcome_matches(&result, case["expect"].as_str().unwrap());
        replay.check(&case, ok, || format!("got {result:?}"));
    }
    replay.finish();
}

#[test]
fn corpus_jsonrpc() {
    let stack = Stack::new();
    let mut replay = Replay::new("jsonrpc");
    for case in corpus("jsonrpc") {
        let body = match case.get("body_hex") {
            Some(hex) => corpus_bytes(&json!({"hex": hex}), &[]),
            None => fill(case["body"].as_str().unwrap(), &[]).into_bytes(),
        };
        let headers = if case["mirror"] == true {
            headers_for(&body)
        } else {
            HeaderMap::new()
        };
        let (reply, reached) = stack.post_counted(&stack.alice, &headers, body.clone());
        let expect = &case["expect"];
        let ok = match expect.as_str() {
            Some("forwarded") => reached && stack.last_body().as_deref() == Some(body.as_slice()),
            Some("answered") => !reached && reply.status == StatusCode::OK,
            _ => refusal_matches(expect, &reply, reached),
        };
        replay.check_reply(&case, ok, reached, &reply);
    }
    replay.finish();
}

/// The `kid`, payload and tag of a sealed value.
fn seal_parts(sealed: &str, prefix: &str) -> (String, String, String) {
    let parts: Vec<&str> = sealed.strip_prefix(prefix).unwrap().split('.').collect();
    (
        parts[0].to_owned(),
        parts[1].to_owned(),
        parts[2].to_owned(),
    )
}

/// A sealed payload decoded, changed by `edit` (an object of members), re-encoded.
fn forge(payload: &str, edit: &Value) -> String {
    let mut value: Value =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).unwrap()).unwrap();
    for (k, v) in edit.as_object().into_iter().flatten() {
        value[k] = v.clone();
    }
    b64(value.to_string())
}

/// A modern call of `tool` with the standard arguments unless given, and optionally a state
/// with an answer to the layer's confirmation.
fn retry_call(
    tool: &str,
    arguments: Option<&Value>,
    state: &str,
    answer: &str,
) -> (String, HeaderMap) {
    let response = match answer {
        "approve" => json!({"action": "accept", "content": {"approve": true}}),
        "refuse" => json!({"action": "accept", "content": {"approve": false}}),
        other => json!({"action": other}),
    };
    let params = json!({
        "name": tool,
        "arguments": arguments.cloned().unwrap_or(json!({"path": "notes.txt"})),
        "requestState": state,
        "inputResponses": {"mcp-gate/confirm": response},
    });
    let body = modern_body(
        "tools/call",
        params,
        serde_json::from_str(CONFIRM_CAPABILITIES).unwrap(),
    );
    (body, mirrored("tools/call", Some(tool)))
}

#[test]
fn corpus_continuation_state() {
    let stack = Stack::new();
    let (cursor_reply, _) = stack.post_counted(&stack.alice, &HeaderMap::new(), list_body(None));
    let cursor = cursor_reply.json["result"]["nextCursor"]
        .as_str()
        .unwrap()
        .to_owned();
    let cursor_as_state = format!("mcpgate1.{}", cursor.strip_prefix("mcpgatec1.").unwrap());
    let long = "A".repeat(70_000);
    let mut replay = Replay::new("continuation_state");
    for case in corpus("continuation_state") {
        let state = stack.issue_state(&stack.alice);
        let other = stack.issue_state(&stack.alice);
        let (kid, payload, tag) = seal_parts(&state, "mcpgate1.");
        let (_, other_payload, other_tag) = seal_parts(&other, "mcpgate1.");
        let forged = forge(&payload, &case["payload_edit"]);
        let vars = [
            ("STATE", state.as_str()),
            ("KID", kid.as_str()),
            ("PAYLOAD", payload.as_str()),
            ("TAG", tag.as_str()),
            ("OTHER_PAYLOAD", other_payload.as_str()),
            ("OTHER_TAG", other_tag.as_str()),
            ("FORGED", forged.as_str()),
            ("CURSOR", cursor.as_str()),
            ("CURSOR_AS_STATE", cursor_as_state.as_str()),
            ("LONG", long.as_str()),
        ];
        let presented = fill(case["state"].as_str().unwrap(), &vars);
        let tool = case["tool"].as_str().unwrap_or("guarded");
        let answer = case["answer"].as_str().unwrap_or("approve");
        let token = if case["as"] == "mallory" {
            &stack.mallory
        } else {
            &stack.alice
        };
        if case["replay"] == true {
            let (body, headers) = retry_call(tool, None, &presented, "approve");
            let (_, reached) = stack.post_counted(token, &headers, body);
            assert!(reached, "the first use of a state runs the call");
        }
        let (body, headers) = retry_call(tool, case.get("arguments"), &presented, answer);
        let (reply, reached) = stack.post_counted(token, &headers, body);
        let result_type = &reply.json["result"]["resultType"];
        let ok = match case["expect"].as_str().unwrap() {
            "forwarded" => reached,
            "answered" => {
                !reached
                    && reply.status == StatusCode::OK
                    && reply.json.get("result").is_some()
                    && result_type != "input_required"
            }
            "reask" => !reached && result_type == "input_required",
            message => invalid_params_refusal(&reply, reached, message),
        };
        replay.check_reply(&case, ok, reached, &reply);
    }
    replay.finish();
}

#[test]
fn corpus_signed_cursor() {
    let stack = Stack::new();
    let next = |cursor: Option<&str>| {
        let (reply, _) = stack.post_counted(
            &stack.alice,
            &HeaderMap::new(),
            list_body(cursor.map(|c| json!(c)).as_ref()),
        );
        reply.json["result"]["nextCursor"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let cursor = next(None);
    let other = next(Some(&cursor));
    let (kid, payload, tag) = seal_parts(&cursor, "mcpgatec1.");
    let (_, _, other_tag) = seal_parts(&other, "mcpgatec1.");
    let forged = forge(&payload, &json!({"inner": "page-0"}));
    let state = stack.issue_state(&stack.alice);
    let state_as_cursor = format!("mcpgatec1.{}", state.strip_prefix("mcpgate1.").unwrap());
    let long = "A".repeat(70_000);
    let vars = [
        ("CURSOR", cursor.as_str()),
        ("KID", kid.as_str()),
        ("PAYLOAD", payload.as_str()),
        ("TAG", tag.as_str()),
        ("OTHER_TAG", other_tag.as_str()),
        ("FORGED", forged.as_str()),
        ("STATE", state.as_str()),
        ("STATE_AS_CURSOR", state_as_cursor.as_str()),
        ("LONG", long.as_str()),
    ];
    let mut replay = Replay::new("signed_cursor");
    for case in corpus("signed_cursor") {
        let cursor = match &case["cursor"] {
            Value::Null => None,
            Value::String(template) => Some(json!(fill(template, &vars))),
            other => Some(other.clone()),
        };
        let method = case["method"].as_str().unwrap_or("tools/list");
        let mut message = json!({"jsonrpc": "2.0", "id": RPC_ID, "method": method, "params": {}});
        if let Some(cursor) = cursor {
            message["params"]["cursor"] = cursor;
        }
        let token = if case["as"] == "mallory" {
            &stack.mallory
        } else {
            &stack.alice
        };
        let (reply, reached) = stack.post_counted(token, &HeaderMap::new(), message.to_string());
        let expect = &case["expect"];
        let ok = match expect.as_str() {
            Some("forwarded") => reached,
            Some(message) => invalid_params_refusal(&reply, reached, message),
            None => refusal_matches(expect, &reply, reached),
        };
        replay.check_reply(&case, ok, reached, &reply);
    }
    replay.finish();
}

#[test]
fn corpus_task_id() {
    let f = &*TASKS;
    let unknown = TaskId::generate().unwrap().to_string();
    let short = f.real[..f.real.len() - 1].to_owned();
    let upper = format!("TSK_{}", &f.real[4..]);
    let vars = [
        ("REAL", f.real.as_str()),
        ("UNKNOWN", unknown.as_str()),
        ("REAL_SHORT", short.as_str()),
        ("REAL_UPPER_PREFIX", upper.as_str()),
    ];
    let mut replay = Replay::new("task_id");
    for case in corpus("task_id") {
        let id = fill(case["task_id"].as_str().unwrap(), &vars);
        let method = case["method"].as_str().unwrap_or("tasks/get");
        let token = if case["as"] == "mallory" {
            &f.stack.mallory
        } else {
            &f.stack.alice
        };
        let (body, headers) = task_call(
            method,
            &id,
            case["declare"] != false,
            case["modern"] != false,
        );
        let (reply, reached) = f.stack.post_counted(token, &headers, body);
        let expect = &case["expect"];
        let ok = match expect.as_str() {
            Some("owner") => !reached && reply.json["result"]["taskId"] == f.real.as_str(),
            Some("unknown") => !reached && reply.bytes == f.unknown,
            Some("inner") => reached,
            _ => refusal_matches(expect, &reply, reached),
        };
        replay.check(&case, ok && f.status() == TaskStatus::Working, || {
            format!(
                "reached {reached}, task {:?}, got {}",
                f.status(),
                reply.describe()
            )
        });
    }
    replay.finish();
}

#[test]
fn corpus_task_record() {
    let (record, value) = &*RECORD;
    let mut replay = Replay::new("task_record");
    for case in corpus("task_record") {
        let mut edited = value.clone();
        for (pointer, new) in case["set"].as_object().into_iter().flatten() {
            let (parent, key) = pointer.rsplit_once('/').unwrap();
            edited
                .pointer_mut(parent)
                .and_then(Value::as_object_mut)
                .expect(pointer)
                .insert(key.to_owned(), new.clone());
        }
        for pointer in case["remove"].as_array().into_iter().flatten() {
            let (parent, key) = pointer.as_str().unwrap().rsplit_once('/').unwrap();
            edited
                .pointer_mut(parent)
                .and_then(Value::as_object_mut)
                .unwrap()
                .remove(key);
        }
        let mut text = edited.to_string();
        if let Some(splice) = case["splice"].as_str() {
            text.insert_str(1, &fill(splice, &[]));
        }
        if let Some(raw) = case["raw"].as_str() {
            let half = text[..text.len() / 2].to_owned();
            text = fill(
                raw,
                &[("RECORD", text.as_str()), ("RECORD_HALF", half.as_str())],
            );
        }
        let id = if case["other_id"] == true {
            TaskId::generate().unwrap().to_string()
        } else {
            record.id.to_string()
        };
        let result = TaskRecord::from_json(text.as_bytes(), &id);
        let shown = result
            .as_ref()
            .err()
            .map(ToString::to_string)
            .unwrap_or_default();
        let kind = match &result {
            Ok(_) => "ok",
            Err(StoreError::Corrupt { .. }) => "corrupt",
            Err(StoreError::UnsupportedSchema { .. }) => "unsupported_schema",
            Err(_) => "undocumented",
        };
        let ok = case["expect"] == kind
            && !shown.contains(SECRET_ARGUMENT)
            && case["reason_contains"]
                .as_str()
                .is_none_or(|s| shown.contains(s));
        replay.check(&case, ok, || format!("got {kind}: {shown}"));
    }
    replay.finish();
}

#[test]
fn corpus_mcp_headers() {
    let stack = Stack::new();
    let mut replay = Replay::new("mcp_headers");
    for case in corpus("mcp_headers") {
        let method = case["method"].as_str().unwrap();
        let mut params = match (method, case["target"].as_str()) {
            ("resources/read", Some(uri)) => json!({"uri": uri}),
            (_, Some(name)) => json!({"name": name, "arguments": {}}),
            (_, None) => json!({}),
        };
        if case["legacy"] != true {
            let mut meta = json!({"io.modelcontextprotocol/protocolVersion": case["version"]});
            if let Some(capabilities) = case.get("capabilities") {
                meta["io.modelcontextprotocol/clientCapabilities"] = capabilities.clone();
            }
            params["_meta"] = meta;
        }
        let body =
            json!({"jsonrpc": "2.0", "id": RPC_ID, "method": method, "params": params}).to_string();
        let mut headers = HeaderMap::new();
        for pair in case["headers"].as_array().unwrap() {
            let name = HeaderName::from_bytes(pair[0].as_str().unwrap().as_bytes()).unwrap();
            headers.append(
                name,
                HeaderValue::from_bytes(&corpus_bytes(&pair[1], &[])).unwrap(),
            );
        }
        let (reply, reached) = stack.post_counted(&stack.alice, &headers, body);
        let expect = &case["expect"];
        let ok = match expect.as_str() {
            Some("forwarded") => reached,
            _ => refusal_matches(expect, &reply, reached),
        };
        replay.check_reply(&case, ok, reached, &reply);
    }
    replay.finish();
}

#[test]
fn corpus_metadata_path() {
    let f = &*METADATA;
    let mut replay = Replay::new("metadata_path");
    for case in corpus("metadata_path") {
        let method = Method::from_bytes(case["method"].as_str().unwrap().as_bytes()).unwrap();
        let request = Request::builder()
            .method(method.clone())
            .uri(case["path"].as_str().unwrap())
            .body(Body::empty())
            .unwrap();
        let (status, body) = f.runtime.block_on(async {
            let response = f.router.clone().oneshot(request).await.unwrap();
            let status = response.status();
            (
                status,
                axum::body::to_bytes(response.into_body(), 1 << 20)
                    .await
                    .unwrap(),
            )
        });
        let serves = serde_json::from_slice::<Value>(&body).is_ok_and(|v| v == f.document);
        let expected = case["expect"].as_u64().unwrap();
        let ok = u64::from(status.as_u16()) == expected
            && serves == (expected == 200 && method == Method::GET);
        replay.check(&case, ok, || {
            format!("got {status}, document served: {serves}")
        });
    }
    replay.finish();
}

// =============================================================================================
// Resource paths (configuration side of the metadata path) and the bugs found
// =============================================================================================

/// Resource URIs whose path has arbitrary segments (none starting with `:` or `*`: see the
/// ignored test below).
fn resource_from_picks(picks: &mut Picks<'_>) -> String {
    const PIECES: [&str; 24] = [
        "mcp",
        "v1",
        "a:b",
        "x*",
        "{id}",
        "%7B",
        "..",
        ".",
        "",
        "caf\u{e9}",
        "a b",
        "~u",
        "@",
        "$",
        "!",
        "'",
        "(x)",
        "+",
        ",",
        ";p=1",
        "=",
        "%2F",
        "%25",
        "__",
    ];
    let segments: Vec<&str> = (0..1 + picks.byte() % 4)
        .map(|_| picks.any(&PIECES))
        .collect();
    format!("https://mcp.example.com/{}", segments.join("/"))
}

static RESOURCE_KEY: LazyLock<Key> = LazyLock::new(|| Key::es256(KID));

proptest! {
    #![proptest_config(config(1_000))]

    /// For any resource the builder accepts (segments not starting with `:` or `*`), the
    /// metadata router serves the document at exactly the paths the gate reports.
    #[test]
    fn metadata_path_for_odd_resource_paths_is_served_exactly(bytes in proptest::collection::vec(any::<u8>(), 12)) {
        let resource = resource_from_picks(&mut Picks::new(&bytes));
        // Small caches: this builds a gate per case.
        let gate = Gate::builder()
            .resource(&resource)
            .issuer(Issuer::with_keys(ISSUER, trusted(&RESOURCE_KEY)))
            .evaluate(decide)
            .token_cache_capacity(0)
            .legacy_sessions(1, std::time::Duration::from_secs(1))
            .replay_store(mcp_gate::continuation::MemoryReplayStore::new(1, 1));
        let Ok(gate) = with_shared_client(gate).build() else {
            return Ok(());
        };
        let path = gate.metadata_paths()[0].clone();
        prop_assume!(!path.split('/').any(|s| s.starts_with(':') || s.starts_with('*')));
        let router: Router = gate.metadata_router();
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let get = |uri: String| {
            let request = Request::get(uri).body(Body::empty()).unwrap();
            runtime.block_on(async {
                let response = router.clone().oneshot(request).await.unwrap();
                let status = response.status();
                (status, axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap())
            })
        };
        let (status, body) = get(path.clone());
        prop_assert_eq!(status, StatusCode::OK, "{} -> {}", resource, path);
        let document: Value = serde_json::from_slice(&body).unwrap();
        prop_assert_eq!(&document["resource"], gate.resource().as_str());
        let (status, _) = get(format!("{path}x"));
        prop_assert_eq!(status, StatusCode::NOT_FOUND, "{}x", path);
    }
}

/// Found by this file: a resource path with a segment starting with `:` or `*` (valid RFC 3986,
/// left as it is by the URL parser) made `Gate::metadata_router` panic, because axum 0.8 reads
/// such segments as its old capture syntax. The metadata routes are now literal, and the
/// document is served at the exact path.
#[test]
fn metadata_router_does_not_panic_for_a_resource_the_builder_accepts() {
    for resource in [
        "https://mcp.example.com/:tenant/mcp",
        "https://mcp.example.com/*mcp",
    ] {
        let gate = Gate::builder()
            .resource(resource)
            .issuer(Issuer::with_keys(ISSUER, trusted(&RESOURCE_KEY)))
            .evaluate(decide)
            .build()
            .expect("the builder accepts the resource");
        let built = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let router: Router = gate.metadata_router();
            router
        }));
        let Ok(router) = built else {
            panic!("metadata_router() panicked for {resource}");
        };
        // Served at the literal path, and only there.
        let path = gate.metadata_paths()[0].clone();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        for (uri, want) in [
            (path.clone(), StatusCode::OK),
            (path.replace([':', '*'], "x"), StatusCode::NOT_FOUND),
        ] {
            let request = http::Request::get(&uri)
                .body(axum::body::Body::empty())
                .unwrap();
            let status = runtime
                .block_on(router.clone().oneshot(request))
                .unwrap()
                .status();
            assert_eq!(status, want, "{resource}: GET {uri}");
        }
    }
}

/// Found by this file (fail-open): a guarded method sent without an `id` was classified as a
/// notification and forwarded without asking the policy; a JSON-RPC server runs notifications,
/// it only does not answer them. Only `notifications/*` may now omit the id; anything else is
/// refused with `-32600`.
#[test]
fn jsonrpc_guarded_methods_without_an_id_never_reach_the_inner_service() {
    let stack = Stack::new();
    for body in [
        r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"secret","arguments":{}}}"#,
        r#"{"jsonrpc":"2.0","method":"resources/read","params":{"uri":"file:///etc/shadow"}}"#,
    ] {
        let (reply, reached) = stack.post_counted(&stack.alice, &HeaderMap::new(), body);
        assert!(
            !reached,
            "{body} reached the inner service: {}",
            reply.describe()
        );
    }
}
