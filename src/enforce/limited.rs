//! The answer to an operation past a rate limit, and to one whose limit could not be counted.
//!
//! No SEP-2643 remediation means "come back later", so the answer is the crate's own
//! (`spec/limits.md` records the choice and why). It is HTTP 200 with `Retry-After`, so that
//! the SDKs hand the client a JSON-RPC answer (a 429 is a transport error to them), and in the
//! idiom the pinned revision uses for a denial: a `tools/call` under a result-based revision
//! gets a `CallToolResult` with `isError: true` (the model reads it), every other operation,
//! and every operation under the error-based revision, a JSON-RPC error `-32029`. Either way
//! the delay is in whole seconds, rounded up, in `retryAfterSeconds`: in `result._meta
//! ["mcp-gate/rateLimit"]` or in `error.data.rateLimit`, beside the limit's scope. A call past
//! the concurrency limit gets the same answer, with the scope `concurrency` and one second.

use http::{HeaderValue, StatusCode, header};
use serde_json::{Map, Value, json};

use super::reply::{
    Reply, STORE_FULL_RETRY_AFTER, STORE_UNAVAILABLE_RETRY_AFTER, refusal_retry_after,
};
use crate::denial::render::json_rpc;
use crate::denial::{Family, Revision};
use crate::limit::{Limited, Reached};
use crate::mcp::request::McpRequest;
use crate::mcp::{Era, INTERNAL_ERROR, ProtocolContext, ProtocolError};
use crate::store::StoreError;

/// The JSON-RPC error code of a rate-limited operation: in the range JSON-RPC leaves to
/// servers, and unassigned by MCP (429, as HTTP says it).
pub(crate) const RATE_LIMITED: i64 = -32029;

/// The `_meta` key of a limited tool call's result.
pub(crate) const RESULT_META_KEY: &str = "mcp-gate/rateLimit";

/// The answer to `request` past `limited`, in `revision`'s idiom.
pub(crate) fn limited_answer(
    request: &McpRequest,
    protocol: &ProtocolContext,
    revision: Revision,
    limited: &Limited,
) -> Reply {
    let seconds = limited.retry_after_secs();
    let scope = limited.scope.as_str();
    let message = match limited.scope {
        Reached::Rate(_) => format!("Rate limit reached ({scope}): try again in {seconds} s."),
        Reached::Concurrency => {
            format!("Too many calls in flight ({scope}): try again in {seconds} s.")
        }
    };
    let info = json!({"retryAfterSeconds": seconds, "scope": scope});
    let result_based = matches!(revision.family(), Family::ResultBased { .. });
    let body = if result_based && request.method == "tools/call" {
        let mut result = Map::new();
        if protocol.era == Era::Modern {
            result.insert("resultType".into(), "complete".into());
        }
        result.insert("isError".into(), true.into());
        result.insert("content".into(), json!([{"type": "text", "text": message}]));
        result.insert("_meta".into(), json!({ RESULT_META_KEY: info }));
        json!({"jsonrpc": "2.0", "id": request.id, "result": Value::Object(result)})
    } else {
        json!({
            "jsonrpc": "2.0",
            "id": request.id,
            "error": {"code": RATE_LIMITED, "message": message, "data": {"rateLimit": info}},
        })
    };
    let mut response = json_rpc(StatusCode::OK, body, false);
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    response
}

/// The answer when the limits' store could not count the call: `-32603` with 503 and
/// `Retry-After`, soon when the store is unreachable, later when it is full. Never admitted
/// uncounted.
pub(crate) fn limit_store_refusal(error: &StoreError, request: &McpRequest) -> Reply {
    tracing::warn!(target: "mcp_gate::limits", error = %error, "the rate limits could not count a call");
    let retry_after = match error {
        StoreError::Full { .. } => STORE_FULL_RETRY_AFTER,
        _ => STORE_UNAVAILABLE_RETRY_AFTER,
    };
    let refusal = ProtocolError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        INTERNAL_ERROR,
        "the rate limits could not count this call; try again later",
    )
    .with_id(Some(&request.id));
    refusal_retry_after(&refusal, retry_after)
}
