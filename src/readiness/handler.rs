//! The readiness report as an axum handler: `200` when ready, `503` when not, a small JSON
//! body either way, never cached.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::MethodRouter;
use serde_json::{Value, json};

use super::{CheckStatus, Readiness};
use crate::Gate;

/// A `GET` route answering the readiness report of `gate`: `200` when every check is
/// ready, `503` otherwise, with a JSON body naming each check and, when not ready, why (the
/// reason code, not the error text, which goes to the log):
///
/// ```json
/// {"ready":false,"checks":[{"component":"issuer","name":"https://auth.example.com",
///   "ready":false,"why":"keys_unavailable"},{"component":"policy","name":"policy","ready":true}]}
/// ```
///
/// ```no_run
/// # fn wire(gate: mcp_gate::Gate, app: axum::Router) -> axum::Router {
/// app.route("/readyz", mcp_gate::readiness::handler(gate))
/// # }
/// ```
///
/// A check that fails is also logged at `warn` on `mcp_gate::readiness`, with its detail.
pub fn handler<S: Clone + Send + Sync + 'static>(gate: Gate) -> MethodRouter<S> {
    axum::routing::get(move || async move { answer(&gate.readiness().await) })
}

/// The response for `report`.
fn answer(report: &Readiness) -> Response {
    for check in report.not_ready() {
        if let CheckStatus::NotReady { why, detail } = &check.status {
            tracing::warn!(target: "mcp_gate::readiness", component = check.component.as_str(), name = %check.name, why = why.as_str(), detail = %detail, "not ready");
        }
    }
    let checks: Vec<Value> = report
        .checks
        .iter()
        .map(|check| {
            let mut row = json!({
                "component": check.component.as_str(),
                "name": check.name,
                "ready": check.is_ready(),
            });
            if let CheckStatus::NotReady { why, .. } = &check.status {
                row["why"] = Value::from(why.as_str());
            }
            row
        })
        .collect();
    let body = json!({ "ready": report.is_ready(), "checks": checks });
    let status = if report.is_ready() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let mut response = (status, axum::Json(body)).into_response();
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}
