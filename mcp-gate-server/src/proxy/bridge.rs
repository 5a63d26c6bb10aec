//! Modern clients in front of a legacy upstream (`[upstream] legacy-only`).
//!
//! A modern client (2026-07-28) asks `server/discover` and then sends each request on its own,
//! its version and capabilities in the request's `_meta`, with no session. A legacy server
//! (2025-11-25 and earlier: the TypeScript SDK's today) knows neither: it wants `initialize`,
//! then every request in the session that opened. Without help the client falls back to
//! legacy MCP, and with it loses what only modern MCP can say: a URL approval round trip, a
//! confirmation, a held task.
//!
//! Here the gateway speaks legacy MCP to the upstream on the modern client's behalf:
//!
//! - `server/discover` is answered by the gateway from an `initialize` it sends the upstream:
//!   the upstream's capabilities (less what the bridge cannot carry: legacy tasks, change
//!   notifications and subscriptions), its instructions and `serverInfo`, and the modern
//!   versions the gateway speaks. The session it opened is closed at once.
//! - Every other modern request opens a legacy session of its own (`initialize`, then
//!   `notifications/initialized`), goes in it with the era's `_meta` keys taken off. Its answer
//!   is read whole ([`mcp_gate::answer::read_answer`], the gate's own strict reader), its
//!   result given what a modern client requires and a legacy server leaves out (`resultType`,
//!   and on cacheable results `ttlMs` and `cacheScope`), and written again in its framing,
//!   without the session's id. So a bridged answer is not streamed: the notifications before
//!   the result (progress) arrive with it. The session is closed (`DELETE`) once the answer
//!   has been read, or when the client has gone.
//!
//! Threat: sessions are where a legacy server keeps state for its client. A session used for
//! one request only never carries one caller's state into another's call, holds nothing a
//! later request (perhaps on another replica) needs, and needs no store to bound. The cost is
//! three more round trips to the upstream per call. The gateway declares no client
//! capabilities in the handshake, so the upstream has no reason to send requests of its own
//! (a modern client could not answer them on this path): an answer carrying one is refused
//! (`-32603`). Legacy requests, and anything that is
//! not one modern JSON-RPC request, go to the upstream as they came.

use std::sync::Arc;

use axum::body::Body;
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode, header};
use mcp_gate::answer::{AnswerError, CACHEABLE, read_answer, read_response};
use mcp_gate::mcp::{META_PROTOCOL_VERSION, MODERN_VERSIONS, SERVER_INFO_META};
use serde_json::{Map, Value, json};

use super::{Shared, UpstreamIdentity, headers, streamed, upstream_failure};

/// The legacy version the gateway asks the upstream for.
pub const LEGACY_VERSION: &str = "2025-11-25";

/// The id of the gateway's own `initialize`.
const HANDSHAKE_ID: &str = "mcp-gate-bridge-initialize";

/// The largest request body the bridge reads (the gate has bounded it already; this is a
/// second line), and the largest `initialize` answer.
const REQUEST_BOUND: usize = 64 * 1024 * 1024;
const HANDSHAKE_BOUND: usize = 1024 * 1024;

/// The largest bridged answer the gateway reads whole; a larger one is refused (`-32603`).
pub const ANSWER_BOUND: usize = 16 * 1024 * 1024;

/// The prefix of the `_meta` keys that say a request's era, taken off before a legacy server
/// sees it.
const ERA_META_PREFIX: &str = "io.modelcontextprotocol/";

/// How long closing a session may take before the gateway stops waiting.
const CLOSE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Why the bridge could not open a legacy session with the upstream.
#[derive(Debug, thiserror::Error)]
enum HandshakeError {
    /// The upstream answered `initialize` in a way that cannot be read.
    #[error("the upstream's initialize answer: {0}")]
    Answer(#[from] AnswerError),
    /// The upstream refused `initialize` with a JSON-RPC error.
    #[error("the upstream refused initialize (code {0})")]
    Refused(i64),
    /// The result is not an `InitializeResult` of a legacy version.
    #[error("the upstream's initialize result is not a legacy InitializeResult: {0}")]
    Result(&'static str),
    /// The answer's body did not arrive whole, in time, within the bound.
    #[error("the upstream's initialize answer did not arrive whole")]
    Body,
}

/// Forwards one POST in front of a legacy upstream: bridged when it is one modern request,
/// relayed as it came otherwise.
pub(super) async fn forward(
    shared: Arc<Shared>,
    parts: http::request::Parts,
    body: Body,
) -> Response<Body> {
    let Ok(bytes) = axum::body::to_bytes(body, REQUEST_BOUND).await else {
        return upstream_failure(
            StatusCode::BAD_REQUEST,
            "the request body could not be read\n",
        );
    };
    let Some(request) = modern_request(&bytes) else {
        return shared.relay(&parts, Some(reqwest::Body::from(bytes))).await;
    };
    let base = base_headers(&parts);
    let session = match Session::open(&shared, base, &request).await {
        Ok(session) => session,
        Err(failure) => return failure,
    };
    if request_method(&request) == "server/discover" {
        let answer = discover_answer(&request["id"], &session.initialized);
        session.close();
        let mut response = Response::new(Body::from(answer.to_string()));
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        return response;
    }
    if let Err(failure) = session.notify_initialized(&shared).await {
        session.close();
        return failure;
    }
    let method = request_method(&request).to_owned();
    let id = request.get("id").cloned().unwrap_or(Value::Null);
    let outgoing = shared
        .client
        .post(shared.url.clone())
        .headers(session.headers.clone())
        .body(legacy_body(request));
    match shared.send(outgoing).await {
        Ok(answer) => session.answer_back(answer, &id, &method).await,
        Err(failure) => {
            session.close();
            failure
        }
    }
}

/// Whether `message` is a request (a method and an id), as opposed to a notification.
fn asks(message: &Value) -> bool {
    message.get("method").is_some() && message.get("id").is_some()
}

/// The method of a request [`modern_request`] returned.
fn request_method(request: &Map<String, Value>) -> &str {
    request
        .get("method")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// What a modern client requires of a result that a legacy server leaves out: `resultType`
/// (`complete`: a legacy server has no other), and on a cacheable result the caching
/// directives, as conservative as they come (`ttlMs` 0, `cacheScope` private: the result may
/// depend on the caller).
fn modern_result(result: &mut Map<String, Value>, method: &str) {
    result
        .entry("resultType")
        .or_insert_with(|| Value::from("complete"));
    if CACHEABLE.contains(&method) {
        result.entry("ttlMs").or_insert_with(|| Value::from(0));
        result
            .entry("cacheScope")
            .or_insert_with(|| Value::from("private"));
    }
}

/// The client's answer when a bridged answer could not be read: `-32603`, as the gate says an
/// inner answer it refused.
fn unreadable(id: &Value) -> Response<Body> {
    let error = json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {
            "code": -32603,
            "message": "the upstream MCP server's answer could not be read",
        },
    });
    let mut response = Response::new(Body::from(error.to_string()));
    *response.status_mut() = StatusCode::BAD_GATEWAY;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// The body of `answer`, whole, at most `bound` bytes.
async fn collect(mut answer: reqwest::Response, bound: usize) -> Result<Bytes, ()> {
    let mut body = Vec::new();
    while let Some(chunk) = answer.chunk().await.map_err(|_| ())? {
        if body.len() + chunk.len() > bound {
            return Err(());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Bytes::from(body))
}

/// The request in `body` when it is one modern JSON-RPC request (an object with a `method`, an
/// `id`, and the era's version in `params._meta`); `None` for anything else.
fn modern_request(body: &[u8]) -> Option<Map<String, Value>> {
    let Ok(Value::Object(message)) = serde_json::from_slice::<Value>(body) else {
        return None;
    };
    let modern = message
        .get("params")
        .and_then(|params| params.get("_meta"))
        .and_then(|meta| meta.get(META_PROTOCOL_VERSION))
        .is_some();
    let request = message.get("method").is_some_and(Value::is_string)
        && message.get("id").is_some_and(|id| !id.is_null());
    (modern && request).then_some(message)
}

/// The headers every request of a bridged session carries: the client's forwarded ones less
/// the transport's own (`Mcp-*`, which describe the client's era, not the session's), the
/// gateway's identity for the caller, and the framing the legacy transport asks for.
fn base_headers(parts: &http::request::Parts) -> HeaderMap {
    let mut base = headers::upstream_request_headers(&parts.headers);
    let transport: Vec<HeaderName> = base
        .keys()
        .filter(|name| name.as_str().starts_with("mcp-"))
        .cloned()
        .collect();
    for name in transport {
        base.remove(name);
    }
    base.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    base.insert(
        header::ACCEPT,
        HeaderValue::from_static("application/json, text/event-stream"),
    );
    if let Some(identity) = parts.extensions.get::<UpstreamIdentity>() {
        base.insert(identity.header.clone(), identity.value.clone());
    }
    base
}

/// The request as a legacy server reads it: the era's `_meta` keys taken off (and `_meta` with
/// them when nothing else was in it).
fn legacy_body(mut request: Map<String, Value>) -> Vec<u8> {
    if let Some(Value::Object(params)) = request.get_mut("params")
        && let Some(Value::Object(meta)) = params.get_mut("_meta")
    {
        meta.retain(|key, _| !key.starts_with(ERA_META_PREFIX));
        if meta.is_empty() {
            params.remove("_meta");
        }
    }
    // Writing a map of JSON values cannot fail.
    serde_json::to_vec(&request).unwrap_or_default()
}

/// The `server/discover` result built from the upstream's `InitializeResult`.
fn discover_answer(id: &Value, initialized: &Map<String, Value>) -> Value {
    let mut capabilities = initialized
        .get("capabilities")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    // Legacy tasks are not modern ones, and a session that lasts one request delivers no
    // change notification and keeps no subscription.
    capabilities.remove("tasks");
    for kind in ["tools", "prompts", "resources"] {
        if let Some(Value::Object(feature)) = capabilities.get_mut(kind) {
            feature.remove("listChanged");
            feature.remove("subscribe");
        }
    }
    let mut result = json!({
        "supportedVersions": MODERN_VERSIONS,
        "capabilities": capabilities,
        "resultType": "complete",
        "ttlMs": 0,
        "cacheScope": "private",
    });
    if let Some(instructions) = initialized.get("instructions").filter(|i| i.is_string()) {
        result["instructions"] = instructions.clone();
    }
    if let Some(info) = initialized.get("serverInfo").filter(|i| i.is_object()) {
        result["_meta"] = json!({ SERVER_INFO_META: info });
    }
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// A legacy session opened for one modern request.
struct Session {
    /// The request headers in the session: the base, its id when the upstream gave one, and
    /// the version it agreed to.
    headers: HeaderMap,
    /// The upstream's `InitializeResult`.
    initialized: Map<String, Value>,
    /// Closes the session when dropped (once the answer has ended or the client has gone).
    closer: Option<Closer>,
}

impl Session {
    /// Opens a session: the gateway's `initialize`, with no client capabilities and the
    /// client's own `clientInfo` when its request named one.
    async fn open(
        shared: &Arc<Shared>,
        mut headers: HeaderMap,
        request: &Map<String, Value>,
    ) -> Result<Self, Response<Body>> {
        let client_info = request
            .get("params")
            .and_then(|params| params.get("_meta"))
            .and_then(|meta| meta.get("io.modelcontextprotocol/clientInfo"))
            .filter(|info| info.is_object())
            .cloned()
            .unwrap_or_else(
                || json!({"name": "mcp-gate-server", "version": env!("CARGO_PKG_VERSION")}),
            );
        let initialize = json!({
            "jsonrpc": "2.0",
            "id": HANDSHAKE_ID,
            "method": "initialize",
            "params": {
                "protocolVersion": LEGACY_VERSION,
                "capabilities": {},
                "clientInfo": client_info,
            },
        });
        let outgoing = shared
            .client
            .post(shared.url.clone())
            .headers(headers.clone())
            .body(initialize.to_string());
        let answer = shared.send(outgoing).await?;
        let session_id = answer
            .headers()
            .get("mcp-session-id")
            .filter(|id| !id.is_empty())
            .cloned();
        if let Some(id) = &session_id {
            headers.insert(HeaderName::from_static("mcp-session-id"), id.clone());
        }
        // Alive from now on, so that a client gone during the handshake still closes the
        // session the upstream opened.
        let mut closer = session_id.map(|_| Closer {
            shared: Arc::clone(shared),
            headers: headers.clone(),
        });
        let initialized = match handshake_result(shared, answer).await {
            Ok(initialized) => initialized,
            Err(error) => {
                tracing::warn!(%error, "the legacy upstream did not open a session for a modern request");
                drop(closer);
                return Err(no_session());
            }
        };
        // Checked to be a string by `handshake_result`; a header value takes visible ASCII.
        let version = initialized
            .get("protocolVersion")
            .and_then(Value::as_str)
            .and_then(|version| HeaderValue::from_str(version).ok());
        let Some(version) = version else {
            drop(closer);
            return Err(no_session());
        };
        let version_header = HeaderName::from_static("mcp-protocol-version");
        headers.insert(version_header.clone(), version.clone());
        // The close goes with every header of the session, its version included.
        if let Some(closer) = &mut closer {
            closer.headers.insert(version_header, version);
        }
        Ok(Self {
            headers,
            initialized,
            closer,
        })
    }

    /// Sends `notifications/initialized`; the upstream must accept it.
    async fn notify_initialized(&self, shared: &Shared) -> Result<(), Response<Body>> {
        let outgoing = shared
            .client
            .post(shared.url.clone())
            .headers(self.headers.clone())
            .body(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        let answer = shared.send(outgoing).await?;
        if answer.status().is_success() {
            return Ok(());
        }
        tracing::warn!(
            status = answer.status().as_u16(),
            "the legacy upstream refused notifications/initialized"
        );
        Err(no_session())
    }

    /// The answer for the client, without the session's id. A success is read whole (within
    /// [`ANSWER_BOUND`], with no time limit: a call may run long), its response made a modern
    /// one ([`modern_result`]) and written again in its framing; anything else streams back as
    /// it came. The session closes once the answer has been read, or when the client goes.
    async fn answer_back(
        self,
        answer: reqwest::Response,
        id: &Value,
        method: &str,
    ) -> Response<Body> {
        let status = answer.status();
        let mut returned = headers::client_response_headers(answer.headers());
        returned.remove("mcp-session-id");
        if !status.is_success() {
            // The session closes once the stream is dropped.
            return streamed(answer, returned, self.closer);
        }
        let head = answer.headers().clone();
        let body = collect(answer, ANSWER_BOUND).await;
        self.close();
        let read = body
            .map_err(|()| "the answer did not arrive whole within the bound".to_owned())
            .and_then(|body| {
                read_answer(status, &head, &body, id).map_err(|error| error.to_string())
            });
        // The upstream was told the client can answer nothing: a request of its own in the
        // answer (an elicitation, a sampling) breaks that, and a modern client could not answer
        // it on this path either.
        let read = read.and_then(|messages| {
            if messages.before.iter().any(asks) {
                return Err(
                    "the upstream sent a request of its own to a client that declared \
                            no capabilities"
                        .to_owned(),
                );
            }
            Ok(messages)
        });
        let mut messages = match read {
            Ok(messages) => messages,
            Err(why) => {
                tracing::warn!(%why, "a bridged answer from the legacy upstream was not passed on");
                return unreadable(id);
            }
        };
        if let Some(Value::Object(result)) = messages.response.get_mut("result") {
            modern_result(result, method);
        }
        let (content_type, body) = messages.into_body();
        returned.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        let mut response = Response::new(Body::from(body));
        *response.status_mut() = status;
        *response.headers_mut() = returned;
        response
    }

    /// Closes the session now.
    fn close(self) {
        drop(self.closer);
    }
}

/// What the client gets when the upstream did not open the session its request needs.
fn no_session() -> Response<Body> {
    upstream_failure(
        StatusCode::BAD_GATEWAY,
        "the upstream MCP server did not open a legacy session\n",
    )
}

/// The `InitializeResult` in the upstream's answer, read whole within the response timeout
/// and the handshake bound.
async fn handshake_result(
    shared: &Shared,
    answer: reqwest::Response,
) -> Result<Map<String, Value>, HandshakeError> {
    let status = answer.status();
    let headers = answer.headers().clone();
    let body = tokio::time::timeout(shared.response_timeout, collect(answer, HANDSHAKE_BOUND))
        .await
        .map_err(|_| HandshakeError::Body)?
        .map_err(|()| HandshakeError::Body)?;
    let mut response = read_response(status, &headers, &body, &json!(HANDSHAKE_ID))?;
    if let Some(error) = response.get("error") {
        return Err(HandshakeError::Refused(
            error.get("code").and_then(Value::as_i64).unwrap_or(0),
        ));
    }
    let Some(Value::Object(result)) = response.get_mut("result").map(Value::take) else {
        return Err(HandshakeError::Result("no result object"));
    };
    match result.get("protocolVersion").and_then(Value::as_str) {
        None => return Err(HandshakeError::Result("no protocolVersion")),
        Some(version) if MODERN_VERSIONS.contains(&version) => {
            return Err(HandshakeError::Result("a modern protocolVersion"));
        }
        Some(_) => {}
    }
    if !result.get("capabilities").is_some_and(Value::is_object) {
        return Err(HandshakeError::Result("no capabilities object"));
    }
    Ok(result)
}

/// Ends a bridged session with `DELETE` when dropped, without making anyone wait for it.
struct Closer {
    shared: Arc<Shared>,
    headers: HeaderMap,
}

impl Drop for Closer {
    fn drop(&mut self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let close = self
            .shared
            .client
            .delete(self.shared.url.clone())
            .headers(std::mem::take(&mut self.headers));
        runtime.spawn(async move {
            match tokio::time::timeout(CLOSE_TIMEOUT, close.send()).await {
                Ok(Ok(answer)) if answer.status().is_success() => {}
                Ok(Ok(answer)) => tracing::debug!(
                    status = answer.status().as_u16(),
                    "the legacy upstream did not close a bridged session"
                ),
                Ok(Err(_)) | Err(_) => {
                    tracing::debug!("the legacy upstream did not close a bridged session")
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_one_modern_request_is_bridged() {
        let modern = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
        assert!(modern_request(modern).is_some());
        for other in [
            &br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}"#[..],
            br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#,
            br#"{"jsonrpc":"2.0","id":null,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#,
            br#"[{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}]"#,
            b"not json",
        ] {
            assert!(modern_request(other).is_none(), "{}", String::from_utf8_lossy(other));
        }
    }

    #[test]
    fn a_legacy_server_sees_no_era_keys_and_keeps_the_rest() {
        let request = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
            "name": "echo",
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
                "progressToken": 7,
            },
        }});
        let Value::Object(request) = request else {
            unreachable!()
        };
        let sent: Value = serde_json::from_slice(&legacy_body(request)).expect("json");
        assert_eq!(sent["params"]["_meta"], json!({"progressToken": 7}));
        assert_eq!(sent["params"]["name"], "echo");

        let bare = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": {
            "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"},
        }});
        let Value::Object(bare) = bare else {
            unreachable!()
        };
        let sent: Value = serde_json::from_slice(&legacy_body(bare)).expect("json");
        assert_eq!(sent["params"], json!({}));
    }

    #[test]
    fn a_request_is_told_from_a_notification() {
        assert!(asks(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "elicitation/create"})
        ));
        assert!(!asks(
            &json!({"jsonrpc": "2.0", "method": "notifications/progress"})
        ));
    }

    #[test]
    fn discovery_says_what_the_bridge_carries() {
        let initialized = json!({
            "protocolVersion": "2025-11-25",
            "capabilities": {
                "tools": {"listChanged": true},
                "resources": {"subscribe": true, "listChanged": true},
                "tasks": {"requests": {}},
                "logging": {},
            },
            "serverInfo": {"name": "upstream", "version": "1"},
            "instructions": "be kind",
        });
        let Value::Object(initialized) = initialized else {
            unreachable!()
        };
        let answer = discover_answer(&json!("d"), &initialized);
        assert_eq!(answer["id"], "d");
        let result = &answer["result"];
        assert_eq!(result["supportedVersions"], json!(MODERN_VERSIONS));
        assert_eq!(
            result["capabilities"],
            json!({"tools": {}, "resources": {}, "logging": {}})
        );
        assert_eq!(result["instructions"], "be kind");
        assert_eq!(result["_meta"][SERVER_INFO_META]["name"], "upstream");
        assert_eq!(result["resultType"], "complete");
    }
}
