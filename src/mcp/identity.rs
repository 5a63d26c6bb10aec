//! The inner server's identity on the results the layer writes itself.
//!
//! MCP 2026-07-28 says a server SHOULD name itself in `_meta["io.modelcontextprotocol/serverInfo"]`
//! (an `Implementation`: `name`, `version`, optional `title`, ...) on every response. The
//! layer answers some requests itself (denials carried as results, confirmations, approval
//! tasks); a client must not be able to tell from the missing name that something else
//! answered. The identity is the one configured with
//! [`GateBuilder::server_info`](crate::GateBuilder::server_info), or else the one the inner
//! server gives in its `server/discover` answer: learned when a client's discovery passes
//! through the layer, or asked for by the layer itself the first time it needs it (at most
//! once per ten seconds per process while the inner server names none). Legacy (2025-11-25)
//! results never get it: that version names the server once, in `initialize`.
//!
//! Per process: each replica learns the identity on its own, at the cost of one
//! `server/discover` to the inner server the first time it writes a result.

use std::sync::{Arc, PoisonError, RwLock};

use bytes::Bytes;
use http::Response;
use serde_json::{Map, Value};

use crate::deadline::OncePer;

/// Where a result names the server that wrote it.
pub const SERVER_INFO_META: &str = "io.modelcontextprotocol/serverInfo";

/// How often, at most, the layer asks the inner server for its identity.
const ASK_INTERVAL_MS: u64 = 10_000;

/// The identity results are stamped with.
pub(crate) struct ServerIdentity {
    configured: Option<Arc<Value>>,
    learned: RwLock<Option<Arc<Value>>>,
    ask: OncePer,
    /// One `server/discover` at a time: callers that need the identity meanwhile wait.
    pub asking: tokio::sync::Mutex<()>,
}

impl ServerIdentity {
    /// An identity fixed by configuration (`None`: learned from the inner server).
    pub fn new(configured: Option<Value>) -> Self {
        Self {
            configured: configured.map(Arc::new),
            learned: RwLock::new(None),
            ask: OncePer::new(std::time::Duration::from_millis(ASK_INTERVAL_MS)),
            asking: tokio::sync::Mutex::new(()),
        }
    }

    /// The identity to stamp, if one is known.
    pub fn get(&self) -> Option<Arc<Value>> {
        if let Some(configured) = &self.configured {
            return Some(configured.clone());
        }
        self.learned
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Remembers the identity a `server/discover` result gives, when it is a well-formed
    /// `Implementation` (an object with a string `name` and `version`).
    pub fn learn_from(&self, result: &Map<String, Value>) {
        let Some(info) = result
            .get("_meta")
            .and_then(|meta| meta.get(SERVER_INFO_META))
            .filter(|info| is_implementation(info))
        else {
            return;
        };
        let mut learned = self.learned.write().unwrap_or_else(PoisonError::into_inner);
        if learned.as_deref() != Some(info) {
            *learned = Some(Arc::new(info.clone()));
        }
    }

    /// Whether this caller should ask the inner server now: never when configured, and at
    /// most once per ten seconds per process otherwise.
    pub fn may_ask(&self) -> bool {
        if self.get().is_some() {
            return false;
        }
        self.ask.try_now()
    }
}

/// Whether `value` reads as an MCP `Implementation`.
pub(crate) fn is_implementation(value: &Value) -> bool {
    value.get("name").is_some_and(Value::is_string)
        && value.get("version").is_some_and(Value::is_string)
}

/// `response` with `info` in its result's `_meta` (see [`name_result`]). A body that is not a
/// JSON-RPC result (an error, a refusal) is returned as it is.
pub(crate) fn stamp(response: Response<Bytes>, info: &Value) -> Response<Bytes> {
    let (mut parts, body) = response.into_parts();
    let Ok(mut message) = serde_json::from_slice::<Value>(&body) else {
        return Response::from_parts(parts, body);
    };
    if !name_result(&mut message, info) {
        return Response::from_parts(parts, body);
    }
    parts.headers.remove(http::header::CONTENT_LENGTH);
    Response::from_parts(parts, Bytes::from(message.to_string()))
}

/// Puts `info` in the `_meta` of `message`'s result, unless it already names a server; whether
/// `message` changed (a message that is not a result with an object `_meta` does not).
pub(crate) fn name_result(message: &mut Value, info: &Value) -> bool {
    let Some(result) = message.get_mut("result").and_then(Value::as_object_mut) else {
        return false;
    };
    let meta = result
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()));
    match meta.as_object_mut() {
        Some(meta) if !meta.contains_key(SERVER_INFO_META) => {
            meta.insert(SERVER_INFO_META.to_owned(), info.clone());
            true
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn response(body: Value) -> Response<Bytes> {
        Response::new(Bytes::from(body.to_string()))
    }

    fn body(response: Response<Bytes>) -> Value {
        serde_json::from_slice(response.body()).unwrap()
    }

    #[test]
    fn results_are_stamped_and_errors_are_not() {
        let info = json!({"name": "inner", "version": "1.0.0"});
        let result = json!({"jsonrpc": "2.0", "id": 1, "result": {"resultType": "complete", "_meta": {"a": 1}}});
        let stamped = body(stamp(response(result), &info));
        assert_eq!(stamped["result"]["_meta"][SERVER_INFO_META], info);
        assert_eq!(stamped["result"]["_meta"]["a"], 1);
        let error = json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32003, "message": "no"}});
        assert_eq!(body(stamp(response(error.clone()), &info)), error);
        let named = json!({"jsonrpc": "2.0", "id": 1, "result": {"_meta": {SERVER_INFO_META: {"name": "x", "version": "2"}}}});
        assert_eq!(body(stamp(response(named.clone()), &info)), named);
    }

    #[test]
    fn the_configured_identity_wins_and_only_implementations_are_learned() {
        let identity = ServerIdentity::new(None);
        assert!(identity.get().is_none());
        let mut result = Map::new();
        result.insert("_meta".into(), json!({SERVER_INFO_META: {"name": 7}}));
        identity.learn_from(&result);
        assert!(identity.get().is_none(), "not an Implementation");
        result.insert(
            "_meta".into(),
            json!({SERVER_INFO_META: {"name": "inner", "version": "1"}}),
        );
        identity.learn_from(&result);
        assert_eq!(identity.get().unwrap()["name"], "inner");
        assert!(!identity.may_ask(), "known: nothing to ask");

        let fixed = ServerIdentity::new(Some(json!({"name": "fixed", "version": "2"})));
        fixed.learn_from(&result);
        assert_eq!(fixed.get().unwrap()["name"], "fixed");
    }

    #[test]
    fn asking_is_rate_limited() {
        let identity = ServerIdentity::new(None);
        assert!(identity.may_ask());
        assert!(!identity.may_ask());
    }
}
