//! Every answer the layer gives instead of the inner server's: each one logged as one event
//! and rendered as its JSON-RPC error (or, for authentication, its challenge).

use bytes::Bytes;
use http::request::Parts;
use http::{Response, StatusCode, header};

use crate::enforce::buffer::close_if_unread;

/// A response the layer wrote itself: a refusal, a denial, a result of its own. Every one the
/// flow sends goes by this name.
pub(crate) type Reply = Response<Bytes>;
use crate::auth::AuthError;
use crate::auth::rejection::DpopChallenge;
use crate::continuation::StateError;
use crate::denial::render::json_rpc;
use crate::mcp::request::McpRequest;
use crate::mcp::{Era, INTERNAL_ERROR, METHOD_NOT_FOUND, ProtocolContext, ProtocolError};
use crate::settings::Settings;
use crate::store::StoreError;

/// An authentication failure: one `mcp_gate::auth` event, then the challenge. Authentication
/// happens before the body is read, so the response also closes an HTTP/1.x connection whose
/// body is left unread.
pub(crate) fn auth_refusal(
    settings: &Settings,
    error: &AuthError,
    request: &Parts,
) -> Response<Bytes> {
    let status = error.status().as_u16();
    tracing::info!(
        target: "mcp_gate::auth",
        status,
        error = error.error_code().map(|c| c.as_str()).unwrap_or("none"),
        reason = error.reason(),
        method = crate::mcp::http_method_label(&request.method),
        "request refused"
    );
    settings
        .policy
        .observers
        .auth_refused(error.reason(), status);
    let resource = &settings.resource;
    let dpop = settings
        .authenticator
        .dpop
        .as_ref()
        .map(|dpop| DpopChallenge {
            algs: dpop.algs(),
            presented: presents_dpop(request),
        });
    let mut response = error.to_response_in(&resource.metadata_url, &resource.endpoint_scope, dpop);
    close_if_unread(&mut response, request);
    response
}

/// Whether the request's `Authorization` header uses the DPoP scheme: its refusal is then a
/// `DPoP` challenge (RFC 9449 §7.1).
fn presents_dpop(request: &Parts) -> bool {
    request
        .headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.as_bytes().get(..5))
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case(b"dpop "))
}

/// A request the layer refuses itself: one `mcp_gate::request` event, then the JSON-RPC error.
pub(crate) fn refusal(error: &ProtocolError) -> Response<Bytes> {
    tracing::info!(target: "mcp_gate::request", status = error.status.as_u16(), code = error.code, message = %error.message, "request refused");
    json_rpc(error.status, error.to_json(), false)
}

/// `Retry-After` of a refusal because a store could not be reached, even on a fresh
/// connection (a store whose connection broke sends the command once more before refusing):
/// Redis is down or restarting, which takes seconds, and the store reconnects by itself.
pub(crate) const STORE_UNAVAILABLE_RETRY_AFTER: &str = "2";

/// `Retry-After` of a refusal because a store holds as many entries (or bytes) as it may:
/// room comes back only as entries expire or end, so sooner than this rarely helps.
pub(crate) const STORE_FULL_RETRY_AFTER: &str = "30";

/// [`refusal`] of a bound that may free up (a store full or unreachable, a quota), with
/// `Retry-After: <seconds>`.
pub(crate) fn refusal_retry_after(error: &ProtocolError, seconds: &'static str) -> Response<Bytes> {
    let mut response = refusal(error);
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, http::HeaderValue::from_static(seconds));
    response
}

/// The answer to a GET, DELETE or OPTIONS that declares a body.
pub(crate) fn bodyless_refusal(parts: &Parts) -> Response<Bytes> {
    let mut response = refusal(&ProtocolError::invalid_request(
        "GET, DELETE and OPTIONS requests carry no body; operations are POSTed",
    ));
    close_if_unread(&mut response, parts);
    response
}

/// The answer to a state the layer cannot accept: `-32602` for a state that is wrong, and
/// `-32603` with 429 or 503 when the replay store could not record its use (the state may be
/// fine; its single use cannot be guaranteed now). A 503 says when to come back
/// (`Retry-After`): soon when the store is unreachable, later when it is full.
pub(crate) fn state_refusal(error: &StateError, request: &McpRequest) -> Response<Bytes> {
    let StateError::ReplayStore(store) = error else {
        return refusal(
            &ProtocolError::invalid_params(error.to_string()).with_id(Some(&request.id)),
        );
    };
    tracing::warn!(target: "mcp_gate::replay", error = %store, "replay store refused a state");
    let (status, retry_after) = match store {
        StoreError::OwnerQuota { .. } => (StatusCode::TOO_MANY_REQUESTS, None),
        StoreError::Full { .. } => (
            StatusCode::SERVICE_UNAVAILABLE,
            Some(STORE_FULL_RETRY_AFTER),
        ),
        _ => (
            StatusCode::SERVICE_UNAVAILABLE,
            Some(STORE_UNAVAILABLE_RETRY_AFTER),
        ),
    };
    let error =
        ProtocolError::new(status, INTERNAL_ERROR, error.to_string()).with_id(Some(&request.id));
    match retry_after {
        Some(seconds) => refusal_retry_after(&error, seconds),
        None => refusal(&error),
    }
}

/// A method in no row of the method table, answered as a server answers a method it does not
/// have: `-32601`, with HTTP 404 on a 2026-07-28 request and 200 on a legacy one.
pub(crate) fn method_not_found(
    request: &McpRequest,
    protocol: &ProtocolContext,
) -> Response<Bytes> {
    let status = match protocol.era {
        Era::Modern => StatusCode::NOT_FOUND,
        Era::Legacy => StatusCode::OK,
    };
    refusal(
        &ProtocolError::new(status, METHOD_NOT_FOUND, "Method not found")
            .with_id(Some(&request.id)),
    )
}

/// The answer when authorizing failed inside the layer (a policy, a store, a random source).
pub(crate) fn internal_error(request: &McpRequest) -> Response<Bytes> {
    let error = ProtocolError::new(
        StatusCode::OK,
        INTERNAL_ERROR,
        "internal error while authorizing the request",
    )
    .with_id(Some(&request.id));
    json_rpc(StatusCode::OK, error.to_json(), false)
}
