//! The shared harness of the fuzz targets: one gate trusting one ES256 key, in front of an inner
//! handler that counts its calls, driven on a current-thread runtime built once per process.
//!
//! Every target reaches its parser the way a client does (`Gate::authenticate`, the layer, the
//! metadata router, the public task API) and panics when an invariant breaks, so libFuzzer
//! keeps the input as a crash.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::routing::post;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, StatusCode, Uri, header};
use mcp_gate::policy::{Decision, Evaluation};
use mcp_gate::{AuthError, Gate, Issuer, Principal, StaticKeys};
use serde_json::{Value, json};
use tower::ServiceExt;

pub const ISSUER: &str = "https://as.example";
pub const RESOURCE: &str = "http://127.0.0.1:8080/mcp";
pub const SCOPE: &str = "mcp:read";
pub const VERSION: &str = "2026-07-28";
pub const KID: &str = "k1";

pub fn b64(bytes: impl AsRef<[u8]>) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Key minting, shared with the integration tests.
#[path = "../../tests/common/tokens.rs"]
mod tokens;

/// JSON with duplicate keys refused, as an independent check of what was forwarded.
#[path = "../../tests/common/strict_json.rs"]
mod strict_json;
pub use strict_json::strict_json;

/// The trusted ES256 key.
pub type Key = tokens::TestKey;

/// The trusted key: a fixed one, so that crashes replay the same way in every process.
fn trusted_key() -> Key {
    Key::es256_fixed(KID, [0x42; 32])
}

pub fn standard_header() -> String {
    format!(r#"{{"alg":"ES256","typ":"at+jwt","kid":"{KID}"}}"#)
}

pub fn claims(subject: &str) -> Value {
    json!({
        "iss": ISSUER, "aud": RESOURCE, "sub": subject, "client_id": "app",
        "exp": now() + 3600, "scope": SCOPE,
    })
}

/// `secret` is refused, `guarded` asks for a confirmation, `deploy` becomes a task.
async fn decide(evaluation: Evaluation) -> Result<Decision, Infallible> {
    Ok(match (evaluation.tool(), evaluation.approval()) {
        (Some("secret"), _) => Decision::undisclosed("Not for you."),
        (Some("guarded"), _) => Decision::ask("Run the guarded tool?"),
        (Some("deploy"), None) => Decision::task("Deploys need the release manager."),
        _ => Decision::allow(),
    })
}

#[derive(Default)]
struct Inner {
    hits: AtomicUsize,
    last: Mutex<Option<Bytes>>,
}

async fn inner_handler(State(inner): State<Arc<Inner>>, body: Bytes) -> http::Response<Body> {
    inner.hits.fetch_add(1, Ordering::SeqCst);
    *inner.last.lock().unwrap() = Some(body.clone());
    let message: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let mut result = json!({"content": [], "isError": false});
    if message["method"] == "tools/list" {
        result = json!({"tools": [{"name": "t0", "inputSchema": {"type": "object"}}], "nextCursor": "page-1"});
    }
    let answer = json!({"jsonrpc": "2.0", "id": message.get("id").cloned().unwrap_or(Value::Null), "result": result});
    http::Response::builder()
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(answer.to_string()))
        .unwrap()
}

/// What the layer answered.
pub struct Reply {
    pub status: StatusCode,
    pub bytes: Bytes,
    pub json: Value,
    /// Whether the inner handler ran.
    pub reached: bool,
}

impl Reply {
    pub fn rpc_code(&self) -> Option<i64> {
        self.json["error"]["code"].as_i64()
    }
}

pub struct Harness {
    runtime: tokio::runtime::Runtime,
    pub gate: Gate,
    app: Router,
    inner: Arc<Inner>,
    pub key: Key,
    pub alice: String,
    pub mallory: String,
    /// A confirmation state the layer issued to alice for `guarded`.
    pub state: String,
    /// A list cursor the layer sealed for alice.
    pub cursor: String,
    /// Alice's waiting task, and the answer to a task id that names nothing.
    pub task: String,
    pub unknown_task: Bytes,
}

static HARNESS: OnceLock<Harness> = OnceLock::new();

/// The harness, built on first use.
pub fn harness() -> &'static Harness {
    HARNESS.get_or_init(Harness::new)
}

impl Harness {
    fn new() -> Self {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime");
        let key = trusted_key();
        let keys = StaticKeys::from_jwk_set(&key.jwk_set()).expect("keys");
        let gate = Gate::builder()
            .resource(RESOURCE)
            .issuer(Issuer::with_keys(ISSUER, keys))
            .required_scopes([SCOPE])
            .evaluate(decide)
            .reusable_state()
            .build()
            .expect("gate");
        let inner = Arc::new(Inner::default());
        let app = Router::new()
            .route("/mcp", post(inner_handler))
            .with_state(inner.clone())
            .layer(gate.layer());
        let token =
            |sub: &str| key.sign_segments(&b64(standard_header()), &b64(claims(sub).to_string()));
        let (alice, mallory) = (token("alice"), token("mallory"));
        let mut harness = Self {
            runtime,
            gate,
            app,
            inner,
            key,
            alice,
            mallory,
            state: String::new(),
            cursor: String::new(),
            task: String::new(),
            unknown_task: Bytes::new(),
        };
        let (body, headers) = guarded_call(None);
        let asked = harness.post(&harness.alice, &headers, body);
        harness.state = asked.json["result"]["requestState"]
            .as_str()
            .expect("a state")
            .to_owned();
        let listed = harness.post(&harness.alice, &HeaderMap::new(), list_body(None));
        harness.cursor = listed.json["result"]["nextCursor"]
            .as_str()
            .expect("a cursor")
            .to_owned();
        let deploy = modern_body(
            "tools/call",
            json!({"name": "deploy", "arguments": {}}),
            json!({"extensions": {"io.modelcontextprotocol/tasks": {}}}),
        );
        let held = harness.post(&harness.alice, &mirrored("tools/call", "deploy"), deploy);
        harness.task = held.json["result"]["taskId"]
            .as_str()
            .expect("a task")
            .to_owned();
        let fresh = mcp_gate::tasks::TaskId::generate().expect("random");
        let (body, headers) = task_call(fresh.as_str());
        harness.unknown_task = harness.post(&harness.alice, &headers, body).bytes;
        harness
    }

    pub fn authenticate(&self, headers: &HeaderMap, uri: &Uri) -> Result<Principal, AuthError> {
        self.runtime
            .block_on(self.gate.authenticate(headers, uri))
            .map_err(mcp_gate::AuthRejection::into_error)
    }

    pub fn token(&self, token: &str) -> Result<Principal, AuthError> {
        let mut headers = HeaderMap::new();
        match HeaderValue::from_str(&format!("Bearer {token}")) {
            Ok(value) => headers.insert(header::AUTHORIZATION, value),
            Err(_) => return Err(AuthError::MissingCredential),
        };
        self.authenticate(&headers, &Uri::from_static("/mcp"))
    }

    /// `POST /mcp` through the layer.
    pub fn post(&self, token: &str, extra: &HeaderMap, body: impl Into<Bytes>) -> Reply {
        let mut request = Request::post("/mcp")
            .header(header::AUTHORIZATION, format!("Bearer {token}"))
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.into()))
            .unwrap();
        for (name, value) in extra {
            request.headers_mut().append(name, value.clone());
        }
        let before = self.inner.hits.load(Ordering::SeqCst);
        let (status, bytes) = self.runtime.block_on(async {
            let response = self.app.clone().oneshot(request).await.unwrap();
            let status = response.status();
            (
                status,
                axum::body::to_bytes(response.into_body(), 1 << 24)
                    .await
                    .unwrap(),
            )
        });
        Reply {
            status,
            json: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            bytes,
            reached: self.inner.hits.load(Ordering::SeqCst) != before,
        }
    }

    /// The body the inner handler last received.
    pub fn last_body(&self) -> Option<Bytes> {
        self.inner.last.lock().unwrap().clone()
    }

    /// A request to the metadata router.
    pub fn metadata(&self, uri: Uri) -> (StatusCode, Bytes) {
        let request = Request::get(uri).body(Body::empty()).unwrap();
        let router: Router = self.gate.metadata_router();
        self.runtime.block_on(async {
            let response = router.oneshot(request).await.unwrap();
            let status = response.status();
            (
                status,
                axum::body::to_bytes(response.into_body(), 1 << 20)
                    .await
                    .unwrap(),
            )
        })
    }
}

/// A modern request body.
pub fn modern_body(method: &str, mut params: Value, capabilities: Value) -> String {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": VERSION,
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    });
    json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}).to_string()
}

pub fn mirrored(method: &str, name: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert("mcp-protocol-version", HeaderValue::from_static(VERSION));
    headers.insert("mcp-method", HeaderValue::from_str(method).unwrap());
    if let Ok(name) = HeaderValue::from_str(name) {
        headers.insert("mcp-name", name);
    }
    headers
}

/// A modern call of `guarded`, with a state and an approval when given one.
pub fn guarded_call(state: Option<&str>) -> (String, HeaderMap) {
    let mut params = json!({"name": "guarded", "arguments": {}});
    if let Some(state) = state {
        params["requestState"] = json!(state);
        params["inputResponses"] =
            json!({"mcp-gate/confirm": {"action": "accept", "content": {"approve": true}}});
    }
    let body = modern_body("tools/call", params, json!({"elicitation": {"form": {}}}));
    (body, mirrored("tools/call", "guarded"))
}

pub fn list_body(cursor: Option<&str>) -> String {
    let mut message = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": {}});
    if let Some(cursor) = cursor {
        message["params"]["cursor"] = json!(cursor);
    }
    message.to_string()
}

/// A modern `tasks/get` for `id`, with the Tasks extension declared.
pub fn task_call(id: &str) -> (String, HeaderMap) {
    let body = modern_body(
        "tasks/get",
        json!({"taskId": id}),
        json!({"extensions": {"io.modelcontextprotocol/tasks": {}}}),
    );
    (body, mirrored("tasks/get", id))
}

/// Whether `text` travels as a header value read back as the same text.
pub fn header_text_ok(text: &str) -> bool {
    HeaderValue::from_str(text).is_ok_and(|v| v.to_str().ok() == Some(text))
}

/// Applies an edit described by `data` to `base`: the first two bytes pick a position, the
/// third how many characters to remove there, the rest (lossy UTF-8) is inserted.
pub fn splice(base: &str, data: &[u8]) -> String {
    let mut chars: Vec<char> = base.chars().collect();
    let at = match data {
        [a, b, ..] => (usize::from(*a) << 8 | usize::from(*b)) % (chars.len() + 1),
        _ => 0,
    };
    let remove = data
        .get(2)
        .map_or(0, |n| usize::from(*n) % 8)
        .min(chars.len() - at);
    let insert: Vec<char> = String::from_utf8_lossy(data.get(3..).unwrap_or_default())
        .chars()
        .collect();
    chars.splice(at..at + remove, insert);
    chars.into_iter().collect()
}
