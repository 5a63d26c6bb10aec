//! A scripted inner server: each request is answered with the status, headers and body chunks
//! a test's closure chooses from the parsed JSON-RPC request (so the script can echo its id).
//!
//! The server is an axum router the gate wraps directly (see `GatedServer::start_with`), so
//! every chunk reaches the layer as a frame of its own: a split inside a line, a field or a
//! UTF-8 sequence is seen by the layer as the script wrote it. Headers are sent as listed,
//! repeated ones included (two `Content-Type`, say).

use std::convert::Infallible;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::response::Response;
use axum::routing::post;
use bytes::Bytes;
use futures_util::StreamExt as _;
use mcp_gate::{Gate, GateBuilder, Issuer, StaticKeys};
use serde_json::{Value, json};

use super::modern::{modern, tasks_capabilities};
use super::peers::{GatedServer, Reply};
use super::tokens::{TestKey, claims};

/// One scripted answer.
#[derive(Clone, Debug)]
pub struct Script {
    /// The HTTP status.
    pub status: u16,
    /// The headers, in order; a name may repeat.
    pub headers: Vec<(String, String)>,
    /// The body, one frame per chunk.
    pub chunks: Vec<Bytes>,
}

impl Script {
    /// A `status` answer with no header and no body.
    pub fn status(status: u16) -> Self {
        Self {
            status,
            headers: Vec::new(),
            chunks: Vec::new(),
        }
    }

    /// A 200 `application/json` answer holding `body` in one chunk.
    pub fn json(body: impl Into<String>) -> Self {
        Self::status(200)
            .header("content-type", "application/json")
            .body(body)
    }

    /// A 200 `text/event-stream` answer holding `body` in one chunk.
    pub fn event_stream(body: impl Into<String>) -> Self {
        Self::status(200)
            .header("content-type", "text/event-stream")
            .body(body)
    }

    /// The answer with another status.
    pub fn with_status(mut self, status: u16) -> Self {
        self.status = status;
        self
    }

    /// The answer with one more header.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// The answer with `body` as its one chunk.
    pub fn body(mut self, body: impl Into<String>) -> Self {
        self.chunks = vec![Bytes::from(body.into())];
        self
    }

    /// The answer with its body cut into these chunks.
    pub fn chunks(mut self, chunks: Vec<Bytes>) -> Self {
        self.chunks = chunks;
        self
    }

    /// The answer with its body cut after each of `cuts` (byte offsets, in any order; those
    /// past the end or repeated are ignored).
    pub fn split_at(self, cuts: &[usize]) -> Self {
        let whole: Vec<u8> = self.chunks.iter().flat_map(|c| c.iter().copied()).collect();
        let mut cuts: Vec<usize> = cuts
            .iter()
            .copied()
            .filter(|&cut| cut > 0 && cut < whole.len())
            .collect();
        cuts.sort_unstable();
        cuts.dedup();
        let mut chunks = Vec::with_capacity(cuts.len() + 1);
        let mut start = 0;
        for cut in cuts.into_iter().chain(std::iter::once(whole.len())) {
            chunks.push(Bytes::copy_from_slice(&whole[start..cut]));
            start = cut;
        }
        self.chunks(chunks)
    }
}

/// What a script is: the parsed request (`Null` when the body is not JSON) to its answer.
pub type ScriptFn = Arc<dyn Fn(&Value) -> Script + Send + Sync>;

/// A router serving `/mcp` by `script`, for `GatedServer::start_with`.
pub fn router(script: impl Fn(&Value) -> Script + Send + Sync + 'static) -> Router {
    let script: ScriptFn = Arc::new(script);
    Router::new().route(
        "/mcp",
        post(move |body: Bytes| {
            let script = script.clone();
            async move {
                let request = serde_json::from_slice(&body).unwrap_or(Value::Null);
                respond(script(&request))
            }
        }),
    )
}

/// The response a script describes, its chunks sent as separate frames.
fn respond(script: Script) -> Response {
    let frames = futures_util::stream::iter(script.chunks).then(|chunk| async move {
        // Each frame is handed over on its own: no two chunks are joined on the way.
        tokio::task::yield_now().await;
        Ok::<_, Infallible>(chunk)
    });
    let mut response = Response::new(Body::from_stream(frames));
    *response.status_mut() = http::StatusCode::from_u16(script.status).expect("a valid status");
    let headers = response.headers_mut();
    for (name, value) in &script.headers {
        headers.append(
            http::HeaderName::from_bytes(name.as_bytes()).expect("a header name"),
            http::HeaderValue::from_str(value).expect("a header value"),
        );
    }
    response
}

/// The issuer whose tokens a [`ScriptedGate`] accepts.
pub const ISSUER: &str = "https://as.example";

/// The two eras a request can be of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Era {
    /// 2025-11-25, without a session.
    Legacy,
    /// 2026-07-28: version and capabilities (the Tasks extension declared) in `_meta`, the
    /// `Mcp-*` headers mirroring the body.
    Modern,
}

/// Both eras.
pub const ERAS: [Era; 2] = [Era::Legacy, Era::Modern];

/// A gate with static keys in front of a scripted server, on 127.0.0.1.
pub struct ScriptedGate {
    pub server: GatedServer,
    key: TestKey,
}

impl ScriptedGate {
    /// The gate (accepting [`ISSUER`]'s tokens, then `configure`) in front of `script`.
    pub async fn start(
        script: impl Fn(&Value) -> Script + Send + Sync + 'static,
        configure: impl FnOnce(GateBuilder) -> GateBuilder,
    ) -> Self {
        let key = TestKey::es256("k1");
        let keys = StaticKeys::from_jwks_json(&key.jwks_json()).expect("keys");
        let server = GatedServer::start_with(
            move |_| configure(Gate::builder().issuer(Issuer::with_keys(ISSUER, keys))),
            router(script),
        )
        .await;
        Self { server, key }
    }

    /// A valid token.
    pub fn token(&self) -> String {
        self.key.mint(&claims(ISSUER, &self.server.url, "mcp:read"))
    }

    /// Sends `method` with `params` as a request of `era` with `id`; `name` is what a modern
    /// request mirrors in `Mcp-Name`.
    pub async fn send(
        &self,
        era: Era,
        id: u64,
        method: &str,
        params: Value,
        name: Option<&str>,
    ) -> Reply {
        let token = self.token();
        match era {
            Era::Legacy => {
                let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
                self.server.post(Some(&token), &[], &body.to_string()).await
            }
            Era::Modern => {
                let (body, headers) =
                    modern(id, method, params, name.unwrap_or(""), tasks_capabilities());
                let headers: Vec<(&str, &str)> = headers
                    .iter()
                    .filter(|(header, _)| name.is_some() || *header != "mcp-name")
                    .map(|(header, value)| (*header, value.as_str()))
                    .collect();
                self.server.post(Some(&token), &headers, &body).await
            }
        }
    }
}

/// One listing method and the member of its result that holds the entries.
#[derive(Clone, Copy, Debug)]
pub struct Listing {
    pub method: &'static str,
    pub entries: &'static str,
}

/// The six listings of the method table, written out here so the tests do not read them from
/// the crate they check.
pub const LISTINGS: [Listing; 6] = [
    Listing {
        method: "tools/list",
        entries: "tools",
    },
    Listing {
        method: "prompts/list",
        entries: "prompts",
    },
    Listing {
        method: "resources/list",
        entries: "resources",
    },
    Listing {
        method: "resources/templates/list",
        entries: "resourceTemplates",
    },
    Listing {
        method: "resources/directory/read",
        entries: "resources",
    },
    Listing {
        method: "skills/list",
        entries: "skills",
    },
];
