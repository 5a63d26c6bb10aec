//! A tiny approval page for the example's URL remedy, on the same loopback server.
//!
//! When the policy needs an approval it registers a pending request for the caller's subject
//! and sends the user to `/approve/{id}`. The id is random and says nothing about the request.
//! Approving is a `POST` by the same subject, authenticated with a bearer token through the
//! gate itself; anyone else gets 403, and an unknown id 404. The policy then sees the approval
//! in this store on the client's retry: the URL `accept` alone never proves anything.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use mcp_gate::Gate;

#[derive(Default)]
struct Book {
    /// id -> (subject, folder)
    pending: HashMap<String, (String, String)>,
    approved: HashSet<(String, String)>,
}

/// Pending and granted folder-sharing approvals.
#[derive(Clone, Default)]
pub struct Approvals(Arc<Mutex<Book>>);

impl Approvals {
    fn book(&self) -> std::sync::MutexGuard<'_, Book> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether `subject` approved sharing `folder`.
    pub fn is_approved(&self, subject: &str, folder: &str) -> bool {
        self.book()
            .approved
            .contains(&(subject.to_owned(), folder.to_owned()))
    }

    /// The id of the pending approval for `subject` and `folder`, created if needed.
    pub fn request(&self, subject: &str, folder: &str) -> String {
        let mut book = self.book();
        let key = (subject.to_owned(), folder.to_owned());
        if let Some((id, _)) = book.pending.iter().find(|(_, v)| **v == key) {
            return id.clone();
        }
        let mut bytes = [0u8; 12];
        let _ = getrandom::fill(&mut bytes);
        let id: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        book.pending.insert(id.clone(), key);
        id
    }

    /// `GET /approve/{id}` (the page) and `POST /approve/{id}` (the approval itself).
    pub fn router(self, gate: Gate) -> Router {
        Router::new()
            .route("/approve/{id}", get(page).post(approve))
            .with_state((self, gate))
    }
}

async fn page(State((approvals, _)): State<(Approvals, Gate)>, Path(id): Path<String>) -> Response {
    match approvals.book().pending.get(&id) {
        Some((_, folder)) => Html(format!(
            "<!doctype html><title>Approve sharing</title><h1>Share folder {}?</h1>\
             <p>Send <code>POST /approve/{id}</code> with your bearer token to approve.</p>",
            html_escape(folder)
        ))
        .into_response(),
        None => (StatusCode::NOT_FOUND, "no such approval").into_response(),
    }
}

async fn approve(
    State((approvals, gate)): State<(Approvals, Gate)>,
    Path(id): Path<String>,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    let principal = match gate.authenticate(&headers, &uri).await {
        Ok(principal) => principal,
        Err(rejection) => return rejection.into_response(),
    };
    let mut book = approvals.book();
    let Some((subject, folder)) = book.pending.get(&id).cloned() else {
        return (StatusCode::NOT_FOUND, "no such approval").into_response();
    };
    if principal.subject() != Some(subject.as_str()) {
        return (
            StatusCode::FORBIDDEN,
            "this approval belongs to someone else",
        )
            .into_response();
    }
    book.pending.remove(&id);
    book.approved.insert((subject, folder.clone()));
    (StatusCode::OK, format!("approved sharing {folder}")).into_response()
}

/// Escapes text for HTML element content and attribute values.
pub fn html_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}
