//! `Gate::revoke` as an axum route, for an operator's or an authorization server's calls.
//!
//! The route revokes for whoever reaches it: mount it only where only trusted callers can
//! (an internal port, a network policy, mutual TLS, or behind the application's own
//! authentication), never on the MCP endpoint's public listener.

use axum::extract::rejection::JsonRejection;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::MethodRouter;
use serde_json::json;

use super::{RevokeError, Revoked};
use crate::Gate;
use crate::auth::Revocation;
use crate::store::StoreError;

/// A `POST` route that revokes what its JSON body names (a
/// [`Revocation`]):
///
/// ```json
/// {"by":"subject","issuer":"https://as.example","subject":"alice"}
/// {"by":"client","issuer":"https://as.example","client_id":"cli"}
/// {"by":"jti","issuer":"https://as.example","jti":"a1b2","expires_at":1900000000}
/// {"by":"token_hash","sha256":"<64 hex digits>","expires_at":1900000000}
/// ```
///
/// Answers `200 {"revoked":true,"until_ms":…}` (or `"already_expired":true`), `400` for a
/// body it cannot read (`{"error":"invalid_body"}`, `"invalid_revocation"`), `404` when the
/// gate has no revocation set (`"not_configured"`), `503` when the set is full or unreachable
/// (`"full"`, `"unavailable"`): the revocation is then not in force. Never cached; nothing of
/// the body is logged.
///
/// ```no_run
/// # async fn run(gate: mcp_gate::Gate) -> std::io::Result<()> {
/// // On an internal listener only: whoever reaches this route can revoke.
/// let internal = axum::Router::new().route("/revoke", mcp_gate::revocation::handler::route(gate));
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:9090").await?;
/// axum::serve(listener, internal).await
/// # }
/// ```
pub fn route<S: Clone + Send + Sync + 'static>(gate: Gate) -> MethodRouter<S> {
    axum::routing::post(
        move |body: Result<axum::Json<Revocation>, JsonRejection>| async move {
            let answer = match body {
                Ok(axum::Json(revocation)) => gate.revoke(revocation).await,
                Err(_) => return answer(StatusCode::BAD_REQUEST, json!({"error": "invalid_body"})),
            };
            respond(answer)
        },
    )
}

fn respond(outcome: Result<Revoked, RevokeError>) -> Response {
    match outcome {
        Ok(Revoked::Until { until_ms }) => answer(
            StatusCode::OK,
            json!({"revoked": true, "until_ms": until_ms}),
        ),
        Ok(Revoked::AlreadyExpired) => answer(
            StatusCode::OK,
            json!({"revoked": true, "already_expired": true}),
        ),
        Err(RevokeError::Invalid) => answer(
            StatusCode::BAD_REQUEST,
            json!({"error": "invalid_revocation"}),
        ),
        Err(RevokeError::NotConfigured) => {
            answer(StatusCode::NOT_FOUND, json!({"error": "not_configured"}))
        }
        Err(RevokeError::Store(error)) => {
            tracing::warn!(target: "mcp_gate::revocation", %error, "revocation refused");
            let code = match error {
                StoreError::Full { .. } => "full",
                _ => "unavailable",
            };
            answer(StatusCode::SERVICE_UNAVAILABLE, json!({"error": code}))
        }
    }
}

fn answer(status: StatusCode, body: serde_json::Value) -> Response {
    let mut response = (status, axum::Json(body)).into_response();
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}
