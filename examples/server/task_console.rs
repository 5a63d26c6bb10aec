//! The approval console of the example: the calls held for approval (`deploy`), with approve
//! and refuse buttons, served on its own loopback-only listener.
//!
//! Anyone who can reach the console can decide any task, so it never listens beyond loopback.
//! A decision is a form `POST` naming the task's unguessable id; a `POST` whose `Origin` is
//! another site is refused, so a page the approver visits cannot decide for them.
//!
//! - `GET /tasks`: the page.
//! - `GET /tasks.json`: the same list as JSON, for scripts (the demo uses it).
//! - `POST /tasks/{id}/approve` (form field `by`) and `POST /tasks/{id}/refuse` (field
//!   `reason`): decide, then back to the page.

use axum::Router;
use axum::extract::{Form, Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use mcp_gate::tasks::{Approvals, DecideError, TaskRecord};
use serde::Deserialize;
use serde_json::{Value, json};

use super::approvals::html_escape;

/// The console's routes over `approvals`, for a listener bound to `origin`
/// (`http://127.0.0.1:8081`).
pub fn router(approvals: Approvals, origin: String) -> Router {
    Router::new()
        .route("/tasks", get(page))
        .route("/tasks.json", get(list))
        .route("/tasks/{id}/approve", post(approve))
        .route("/tasks/{id}/refuse", post(refuse))
        .with_state((approvals, origin))
}

type Console = State<(Approvals, String)>;

fn summary(task: &TaskRecord) -> Value {
    json!({
        "id": task.id.as_str(),
        "tool": task.call.params.get("name"),
        "arguments": task.call.params.get("arguments"),
        "owner": {"subject": task.owner.subject, "client_id": task.owner.client_id},
        "created_at": task.created_at_rfc3339(),
        "expires_at": mcp_gate::tasks::rfc3339(task.expires_at()),
    })
}

async fn list(State((approvals, _)): Console) -> Response {
    match approvals.pending(100).await {
        Ok(tasks) => axum::Json(tasks.iter().map(summary).collect::<Vec<_>>()).into_response(),
        Err(error) => (StatusCode::SERVICE_UNAVAILABLE, error.to_string()).into_response(),
    }
}

async fn page(State((approvals, _)): Console) -> Response {
    let tasks = match approvals.pending(100).await {
        Ok(tasks) => tasks,
        Err(error) => return (StatusCode::SERVICE_UNAVAILABLE, error.to_string()).into_response(),
    };
    let mut rows = String::new();
    for task in &tasks {
        let id = html_escape(task.id.as_str());
        let call = summary(task);
        rows.push_str(&format!(
            "<tr><td><code>{id}</code></td><td>{tool}</td><td><code>{arguments}</code></td>\
             <td>{owner}</td><td>{expires}</td>\
             <td><form method=post action=\"/tasks/{id}/approve\">\
             <input name=by value=\"release-manager\"> <button>Approve</button></form>\
             <form method=post action=\"/tasks/{id}/refuse\">\
             <input name=reason value=\"not now\"> <button>Refuse</button></form></td></tr>",
            tool = html_escape(call["tool"].as_str().unwrap_or("?")),
            arguments = html_escape(&call["arguments"].to_string()),
            owner = html_escape(&call["owner"].to_string()),
            expires = html_escape(call["expires_at"].as_str().unwrap_or("")),
        ));
    }
    if tasks.is_empty() {
        rows.push_str("<tr><td colspan=6>Nothing is waiting for a decision.</td></tr>");
    }
    Html(format!(
        "<!doctype html><title>Held calls</title><h1>Calls waiting for approval</h1>\
         <table border=1 cellpadding=4><tr><th>task</th><th>tool</th><th>arguments</th>\
         <th>owner</th><th>expires</th><th>decision</th></tr>{rows}</table>"
    ))
    .into_response()
}

#[derive(Deserialize)]
struct ApproveForm {
    by: String,
}

#[derive(Deserialize)]
struct RefuseForm {
    reason: String,
}

/// Refuses a cross-site form post: a browser names the page that sent it in `Origin`.
fn same_origin(headers: &HeaderMap, origin: &str) -> bool {
    match headers.get(header::ORIGIN) {
        None => true,
        Some(sent) => sent.to_str().is_ok_and(|sent| sent == origin),
    }
}

fn decided(outcome: Result<TaskRecord, DecideError>) -> Response {
    match outcome {
        Ok(_) => Redirect::to("/tasks").into_response(),
        Err(error @ DecideError::UnknownTask(_)) => {
            (StatusCode::NOT_FOUND, error.to_string()).into_response()
        }
        Err(error @ DecideError::AlreadyDecided { .. }) => {
            (StatusCode::CONFLICT, error.to_string()).into_response()
        }
        Err(error) => (StatusCode::SERVICE_UNAVAILABLE, error.to_string()).into_response(),
    }
}

async fn approve(
    State((approvals, origin)): Console,
    Path(id): Path<String>,
    headers: HeaderMap,
    Form(form): Form<ApproveForm>,
) -> Response {
    if !same_origin(&headers, &origin) {
        return (StatusCode::FORBIDDEN, "cross-site decision refused").into_response();
    }
    decided(approvals.approve(&id, form.by).await)
}

async fn refuse(
    State((approvals, origin)): Console,
    Path(id): Path<String>,
    headers: HeaderMap,
    Form(form): Form<RefuseForm>,
) -> Response {
    if !same_origin(&headers, &origin) {
        return (StatusCode::FORBIDDEN, "cross-site decision refused").into_response();
    }
    decided(approvals.refuse(&id, form.reason).await)
}
