//! What the layer says about itself: its extensions in the inner server's `server/discover`
//! answer, and the inner server's identity on the results the layer writes.
//!
//! The layer answers some requests itself (a `CreateTaskResult` and `tasks/*` for the calls
//! it holds, SEP-2643 denials), so a client reading the inner server's `server/discover`
//! would not learn that those are served. The answer is read whole (bounded in size and
//! time, like a list) and `capabilities.extensions` gains, where the inner server did not
//! already declare them:
//!
//! | extension | when |
//! |---|---|
//! | `io.modelcontextprotocol/structured-authorization-denials` | always |
//! | `io.modelcontextprotocol/tasks` | when the pinned revision is result-based, the only case in which the layer answers with a `CreateTaskResult` |
//!
//! An answer the layer cannot read is refused with an internal error, never passed on with
//! the extensions missing. Legacy `initialize` answers are passed on untouched: the layer
//! serves only 2026-07-28 server-directed tasks, not 2025-11-25 task-augmented calls.

use std::sync::Arc;

use bytes::Bytes;
use http::request::Parts;
use http::{Method, Request, Response, header};
use serde_json::{Map, Value, json};

use crate::auth::Principal;
use crate::denial::{EXTENSION_ID as DENIALS_EXTENSION, Family, Revision};
use crate::enforce::answer::{self, Problem, Read};
use crate::enforce::body::GateBody;
use crate::enforce::bounds::Inner;
use crate::enforce::call::replied;
use crate::mcp::TASKS_EXTENSION;
use crate::mcp::era::{METHOD_HEADER, NAME_HEADER};
use crate::mcp::request::McpRequest;
use crate::settings::Settings;

/// The extensions the layer adds under `revision`.
fn layer_extensions(revision: Revision) -> Vec<&'static str> {
    let mut extensions = vec![DENIALS_EXTENSION];
    if matches!(revision.family(), Family::ResultBased { .. }) {
        extensions.push(TASKS_EXTENSION);
    }
    extensions
}

/// Forwards a `server/discover` and returns its answer with the layer's extensions merged
/// in; the inner server's identity in it is remembered for the results the layer writes.
pub(crate) async fn discover<S: Inner>(
    settings: &Settings,
    inner: &mut S,
    parts: Parts,
    body: Bytes,
    request: &McpRequest,
) -> Result<Response<GateBody<S::Res>>, S::Error> {
    let limits = &settings.answers;
    let call = inner.call(Request::from_parts(parts, S::Req::from(body)));
    let refuse = |problem| {
        Ok(replied(answer::refusal(
            request,
            problem,
            "server/discover",
        )))
    };
    let mut read = match answer::fetch(call, limits.bounds(), &request.id).await? {
        Ok(read) => read,
        Err(problem) => return refuse(problem),
    };
    if let Some(result) = read.result_mut() {
        settings.discovery.server_identity.learn_from(result);
        let extensions = layer_extensions(settings.denial.revision);
        if add_extensions(result, &extensions).is_err() {
            return refuse(Problem::BadResult);
        }
    }
    Ok(replied(read.into_http()))
}

/// Adds each of `extensions` to `result.capabilities.extensions` (as `{}`) unless the inner
/// server declared it already.
fn add_extensions(
    result: &mut Map<String, Value>,
    extensions: &[&str],
) -> Result<(), &'static str> {
    let capabilities = result
        .entry("capabilities")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .ok_or("the capabilities are not an object")?;
    let declared = capabilities
        .entry("extensions")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .ok_or("the declared extensions are not an object")?;
    for extension in extensions {
        declared
            .entry(*extension)
            .or_insert_with(|| Value::Object(Map::new()));
    }
    Ok(())
}

/// The inner server's identity, asking it with a `server/discover` of the layer's own when
/// none is known yet (see [`crate::mcp::identity`]).
pub(crate) async fn server_identity<S: Inner>(
    settings: &Settings,
    inner: &mut S,
    parts: &Parts,
    request: &McpRequest,
) -> Option<Arc<Value>> {
    let identity = &settings.discovery.server_identity;
    if let Some(known) = identity.get() {
        return Some(known);
    }
    let _one_at_a_time = identity.asking.lock().await;
    if identity.may_ask() {
        let id = Value::String("mcp-gate-discover".into());
        let method = "server/discover";
        let side = side_request(settings, inner, parts, request, method, &id, Map::new());
        if let Some(result) = side.await {
            identity.learn_from(&result);
        }
    }
    identity.get()
}

/// Sends the inner server a request of the layer's own, as this request's caller (same URI,
/// headers, session, principal and `_meta`), and returns its result, read under the one rule
/// of [`answer`]. Best effort: an answer that is late, not read whole, not a success or an
/// error gives `None`.
pub(crate) async fn side_request<S: Inner>(
    settings: &Settings,
    inner: &mut S,
    parts: &Parts,
    request: &McpRequest,
    method: &'static str,
    id: &Value,
    mut params: Map<String, Value>,
) -> Option<Map<String, Value>> {
    if let Some(meta) = request.meta() {
        params.insert("_meta".into(), Value::Object(meta.clone()));
    }
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let mut side = Request::new(S::Req::from(Bytes::from(body.to_string())));
    *side.method_mut() = Method::POST;
    *side.uri_mut() = parts.uri.clone();
    *side.version_mut() = parts.version;
    let headers = side.headers_mut();
    headers.clone_from(&parts.headers);
    headers.remove(header::CONTENT_LENGTH);
    headers.remove(NAME_HEADER);
    if headers.contains_key(METHOD_HEADER) {
        headers.insert(METHOD_HEADER, http::HeaderValue::from_static(method));
    }
    if let Some(principal) = parts.extensions.get::<Principal>() {
        side.extensions_mut().insert(principal.clone());
    }
    let mut caller = inner.clone();
    if std::future::poll_fn(|cx| caller.poll_ready(cx))
        .await
        .is_err()
    {
        return None;
    }
    let limits = &settings.answers;
    let read = answer::fetch(caller.call(side), limits.bounds(), id);
    match read.await {
        Ok(Ok(Read::Answered(answer))) => match answer.into_response_message() {
            Value::Object(mut response) => match response.remove("result") {
                Some(Value::Object(result)) => Some(result),
                _ => None,
            },
            _ => None,
        },
        Ok(Err(problem)) => {
            tracing::warn!(target: "mcp_gate::answer", method, problem = problem.code(), "the answer to a side request of the layer's own was not read: {}", problem.describe());
            None
        }
        Ok(Ok(Read::NotSuccess(..))) | Err(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extensions_are_added_beside_the_inner_servers_own() {
        let mut result =
            json!({"capabilities": {"tools": {}, "extensions": {TASKS_EXTENSION: {"x": 1}}}})
                .as_object()
                .cloned()
                .unwrap();
        add_extensions(&mut result, &layer_extensions(Revision::current())).unwrap();
        assert_eq!(
            result["capabilities"],
            json!({"tools": {}, "extensions": {TASKS_EXTENSION: {"x": 1}, DENIALS_EXTENSION: {}}})
        );
        let mut bare = Map::new();
        let error_based = Revision::select("1c5b0cec97691cb9db3d880474a71d604d6addee").unwrap();
        add_extensions(&mut bare, &layer_extensions(error_based)).unwrap();
        assert_eq!(
            bare["capabilities"],
            json!({"extensions": {DENIALS_EXTENSION: {}}})
        );
        let mut odd = json!({"capabilities": []}).as_object().cloned().unwrap();
        assert!(add_extensions(&mut odd, &[DENIALS_EXTENSION]).is_err());
    }
}
