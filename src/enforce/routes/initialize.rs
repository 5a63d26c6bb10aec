//! Legacy sessions at the door: a request bearing an `Mcp-Session-Id` goes on only when the
//! id is bound to its caller; `initialize` binds the id the inner server hands out; a `DELETE`
//! the inner server accepted unbinds it. See [`crate::mcp::SessionStore`] for the threat.

use bytes::Bytes;
use http::request::Parts;
use http::{HeaderValue, Method, Request, Response, StatusCode};
use serde_json::Value;

use crate::auth::{Owner, Principal};
use crate::denial::render::json_rpc;
use crate::enforce::body::GateBody;
use crate::enforce::bounds::Inner;
use crate::enforce::call::{replied, start};
use crate::enforce::reply::Reply;
use crate::enforce::reply::{
    STORE_FULL_RETRY_AFTER, STORE_UNAVAILABLE_RETRY_AFTER, refusal_retry_after,
};
use crate::mcp::era::{SESSION_HEADER, single_header};
use crate::mcp::request::McpRequest;
use crate::mcp::{INTERNAL_ERROR, ProtocolError};
use crate::settings::Settings;
use crate::store::sessions::SessionRecord;
use crate::store::{StoreError, StoreKind};

/// JSON-RPC code of the fixed answer to a session that is not the caller's (the code MCP SDKs
/// use for "session not found").
pub(crate) const SESSION_NOT_FOUND: i64 = -32001;

/// A session bound to the caller.
pub(crate) struct BoundSession {
    pub id: String,
    pub record: SessionRecord,
}

/// The one answer for a session id that is not bound to the caller, whoever holds it: the
/// same status and bytes whether the id belongs to someone else or to no one.
pub(crate) fn not_found() -> Reply {
    let error = ProtocolError::new(
        StatusCode::NOT_FOUND,
        SESSION_NOT_FOUND,
        "Session not found",
    );
    tracing::info!(target: "mcp_gate::request", status = 404, code = SESSION_NOT_FOUND, "request refused: the session is not bound to the caller");
    json_rpc(StatusCode::NOT_FOUND, error.to_json(), false)
}

/// The session the request names, if it names one and the caller holds it; otherwise the
/// answer to send instead. Without an `Mcp-Session-Id` nothing is looked up.
pub(crate) async fn bound_session(
    settings: &Settings,
    parts: &Parts,
    principal: &Principal,
) -> Result<Option<BoundSession>, Reply> {
    let id = match single_header(&parts.headers, &SESSION_HEADER) {
        Ok(None) => return Ok(None),
        Ok(Some(id)) => id,
        // Two ids, or one that is not text: no session can be bound to that.
        Err(()) => return Err(not_found()),
    };
    match settings.sessions.get(id).await {
        Ok(Some(record)) if record.owner.is(principal) => Ok(Some(BoundSession {
            id: id.to_owned(),
            record,
        })),
        Ok(_) => Err(not_found()),
        Err(error) => {
            tracing::error!(target: "mcp_gate::request", error = %error, "session store failed; refusing");
            Err(store_refusal(&error, None))
        }
    }
}

/// Binds the session the inner server opened in answer to `initialize`, with what the client
/// declared. The refusal, when the binding cannot be kept, to send instead of the answer.
pub(crate) async fn bind(
    settings: &Settings,
    session_id: &HeaderValue,
    principal: &Principal,
    initialize: &McpRequest,
) -> Result<(), Reply> {
    let Ok(id) = session_id.to_str() else {
        tracing::error!(target: "mcp_gate::request", "the inner server's session id is not text; refusing the session");
        return Err(store_refusal(
            &StoreError::unavailable(StoreKind::Sessions, "unreadable session id"),
            Some(&initialize.id),
        ));
    };
    let mut record = SessionRecord::new(Owner::of(principal)).capabilities(
        initialize
            .param("capabilities")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default(),
    );
    if let Some(version) = initialize.param("protocolVersion").and_then(Value::as_str) {
        record = record.protocol_version(version);
    }
    match settings.sessions.bind(id, record).await {
        Ok(()) => Ok(()),
        Err(error) => {
            tracing::warn!(target: "mcp_gate::request", error = %error, "new session refused");
            Err(store_refusal(&error, Some(&initialize.id)))
        }
    }
}

/// Forgets a session its owner ended.
pub(crate) async fn unbind(settings: &Settings, session: &BoundSession) {
    if let Err(error) = settings
        .sessions
        .unbind(&session.id, &session.record.owner)
        .await
    {
        // The binding stays until it expires; only its owner can use it meanwhile.
        tracing::warn!(target: "mcp_gate::request", error = %error, "could not unbind an ended session");
    }
}

/// The answer when the session store refuses or fails, with `Retry-After`: a full store
/// frees up as sessions end or idle out, an unreachable one within seconds.
fn store_refusal(error: &StoreError, id: Option<&Value>) -> Reply {
    let (status, message, retry_after) = match error {
        StoreError::OwnerQuota { .. } => (
            StatusCode::TOO_MANY_REQUESTS,
            "too many open sessions for this principal: end one (DELETE) or wait for one to expire",
            "5",
        ),
        StoreError::Full { .. } => (
            StatusCode::SERVICE_UNAVAILABLE,
            "the server holds as many sessions as it may: retry later",
            STORE_FULL_RETRY_AFTER,
        ),
        _ => (
            StatusCode::SERVICE_UNAVAILABLE,
            "the session store is unavailable: retry later",
            STORE_UNAVAILABLE_RETRY_AFTER,
        ),
    };
    let error = ProtocolError::new(status, INTERNAL_ERROR, message).with_id(id);
    refusal_retry_after(&error, retry_after)
}

/// `initialize`: forwarded, and the session the inner server opens is bound to the caller. A
/// session the layer cannot bind (the store is full, the owner is over quota, the store is
/// down) is refused, and ended at the inner server so that it does not linger.
pub(crate) async fn initialize<S: Inner>(
    settings: &Settings,
    inner: &mut S,
    parts: Parts,
    bytes: Bytes,
    principal: &Principal,
    request: &McpRequest,
) -> Result<Response<GateBody<S::Res>>, S::Error> {
    let uri = parts.uri.clone();
    let response = start(inner, parts, S::Req::from(bytes)).await?;
    let Some(session_id) = response
        .headers()
        .get(SESSION_HEADER)
        .filter(|_| response.status().is_success())
        .cloned()
    else {
        return Ok(response.map(GateBody::inner));
    };
    match bind(settings, &session_id, principal, request).await {
        Ok(()) => Ok(response.map(GateBody::inner)),
        Err(refused) => {
            drop(response);
            let mut end = Request::new(S::Req::from(Bytes::new()));
            *end.method_mut() = Method::DELETE;
            *end.uri_mut() = uri;
            end.headers_mut().insert(SESSION_HEADER, session_id);
            end.extensions_mut().insert(principal.clone());
            let mut again = inner.clone();
            if std::future::poll_fn(|cx| again.poll_ready(cx))
                .await
                .is_ok()
            {
                // Best effort: the session is unusable through the layer either way.
                let _ = again.call(end).await;
            }
            Ok(replied(refused))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_503_of_the_session_store_says_when_to_come_back() {
        let cases = [
            (
                StoreError::Full {
                    store: StoreKind::Sessions,
                    capacity: 1,
                },
                503,
                "30",
            ),
            (
                StoreError::unavailable(StoreKind::Sessions, "down"),
                503,
                "2",
            ),
            (StoreError::Taken, 503, "2"),
            (
                StoreError::OwnerQuota {
                    store: StoreKind::Sessions,
                    quota: 1,
                },
                429,
                "5",
            ),
        ];
        for (error, status, seconds) in cases {
            let response = store_refusal(&error, None);
            assert_eq!(response.status().as_u16(), status, "{error}");
            assert_eq!(
                response.headers()[http::header::RETRY_AFTER],
                seconds,
                "{error}"
            );
        }
    }
}
