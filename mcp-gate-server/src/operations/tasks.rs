//! The held-call console: the calls a policy held for approval (`task`), listed and decided
//! on the operations listener, in JSON only (`[operations] tasks`, on by default).
//!
//! - `GET /tasks`: the waiting calls, those expiring soonest first (at most [`LISTED`]): each
//!   one's id, tool, owner (subject and client id), creation and expiry times. Never the
//!   call's arguments: the console shows what is waiting and whose it is, not what it carries.
//! - `POST /tasks/{id}/approve` with `{"by": "<approver>"}`: approves; the call runs when its
//!   owner next polls, if the policy, asked again in phase `approval`, allows it.
//! - `POST /tasks/{id}/refuse` with `{"reason": "..."}`: refuses; the owner's next poll gets
//!   the reason as a tool error.
//!
//! Answers are JSON: `200` with the task's id and status; `404 unknown_task` (never stored,
//! malformed or expired); `409 already_decided`; `400 bad_request` (a body that is not the
//! object above, or an empty or over-long name or reason); `503 store_unavailable`.
//!
//! Threat: anyone who reaches this listener can decide any held call, which is why the
//! operations listener stays on loopback unless `allow-remote` says otherwise. Decisions are
//! compare-and-set in the task store shared across reloads and replicas, so of two approvers
//! exactly one wins.

use axum::Router;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use http::StatusCode;
use mcp_gate::tasks::{Approvals, DecideError, TaskRecord};
use serde::Deserialize;
use serde_json::{Value, json};

/// The most waiting calls `GET /tasks` lists.
pub const LISTED: usize = 100;

/// The longest approver name accepted, in characters.
pub const MAX_APPROVER: usize = 200;

/// The longest refusal reason accepted, in characters (the owner is shown it).
pub const MAX_REASON: usize = 1000;

/// The console's routes over `approvals` (built on the task store the gateway keeps across
/// reloads).
pub fn router(approvals: Approvals) -> Router {
    Router::new()
        .route("/tasks", get(list))
        .route("/tasks/{id}/approve", post(approve))
        .route("/tasks/{id}/refuse", post(refuse))
        .with_state(approvals)
}

/// Why the console did not do what it was asked.
#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    /// The body is not the JSON object the route takes.
    #[error("{0}")]
    BadRequest(String),
    /// No such task is waiting.
    #[error(transparent)]
    Decide(#[from] DecideError),
    /// The task store could not be read.
    #[error(transparent)]
    Store(#[from] mcp_gate::tasks::StoreError),
}

impl IntoResponse for ConsoleError {
    fn into_response(self) -> Response {
        let (status, code) = match &self {
            ConsoleError::BadRequest(_) => (StatusCode::BAD_REQUEST, "bad_request"),
            ConsoleError::Decide(DecideError::UnknownTask(_)) => {
                (StatusCode::NOT_FOUND, "unknown_task")
            }
            ConsoleError::Decide(DecideError::AlreadyDecided { .. }) => {
                (StatusCode::CONFLICT, "already_decided")
            }
            ConsoleError::Decide(DecideError::Store(_)) | ConsoleError::Store(_) => {
                (StatusCode::SERVICE_UNAVAILABLE, "store_unavailable")
            }
            // A kind of refusal this build does not know: nothing is known to have changed.
            ConsoleError::Decide(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal_error"),
        };
        let body = json!({"error": code, "message": self.to_string()});
        (status, axum::Json(body)).into_response()
    }
}

/// What the list says of a waiting call: never its arguments.
fn summary(task: &TaskRecord) -> Value {
    json!({
        "id": task.id.as_str(),
        "tool": task.call.params.get("name").and_then(Value::as_str),
        "owner": {"subject": task.owner.subject, "client_id": task.owner.client_id},
        "created_at": task.created_at_rfc3339(),
        "expires_at": mcp_gate::tasks::rfc3339(task.expires_at()),
    })
}

/// What a decision answers: the task and where it stands now.
fn decided(task: &TaskRecord) -> Response {
    axum::Json(json!({"id": task.id.as_str(), "status": task.status.to_string()})).into_response()
}

async fn list(State(approvals): State<Approvals>) -> Result<Response, ConsoleError> {
    let tasks = approvals.pending(LISTED).await?;
    let tasks: Vec<Value> = tasks.iter().map(summary).collect();
    Ok(axum::Json(json!({"tasks": tasks})).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Approve {
    by: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Refuse {
    reason: String,
}

/// `value`, when it is neither empty nor longer than `max` characters.
fn bounded(what: &str, value: String, max: usize) -> Result<String, ConsoleError> {
    if value.trim().is_empty() {
        return Err(ConsoleError::BadRequest(format!("`{what}` is empty")));
    }
    if value.chars().count() > max {
        return Err(ConsoleError::BadRequest(format!(
            "`{what}` is longer than {max} characters"
        )));
    }
    Ok(value)
}

/// The body, or why it is not one.
fn body<T>(body: Result<axum::Json<T>, JsonRejection>) -> Result<T, ConsoleError> {
    body.map(|axum::Json(body)| body)
        .map_err(|rejection| ConsoleError::BadRequest(rejection.body_text()))
}

async fn approve(
    State(approvals): State<Approvals>,
    Path(id): Path<String>,
    request: Result<axum::Json<Approve>, JsonRejection>,
) -> Result<Response, ConsoleError> {
    let by = bounded("by", body(request)?.by, MAX_APPROVER)?;
    Ok(decided(&approvals.approve(&id, by).await?))
}

async fn refuse(
    State(approvals): State<Approvals>,
    Path(id): Path<String>,
    request: Result<axum::Json<Refuse>, JsonRejection>,
) -> Result<Response, ConsoleError> {
    let reason = bounded("reason", body(request)?.reason, MAX_REASON)?;
    Ok(decided(&approvals.refuse(&id, reason).await?))
}

#[cfg(test)]
mod tests;
