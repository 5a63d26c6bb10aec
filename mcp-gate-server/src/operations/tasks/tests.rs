//! The console over a memory store (and one that always fails): what it lists, and each answer.

use std::sync::Arc;

use axum::body::Body;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use mcp_gate::store::StoreKind;
use mcp_gate::tasks::{
    Approvals, HeldCall, MemoryTaskStore, StoreError, TaskFuture, TaskId, TaskOwner, TaskQuery,
    TaskRecord, TaskStatus, TaskStore, Transition,
};
use serde_json::{Value, json};
use tower::ServiceExt;

/// A store with one waiting `deploy` of alice's, and its id.
async fn one_waiting() -> (Approvals, String) {
    let store = Arc::new(MemoryTaskStore::new(10));
    let owner = TaskOwner::new(
        "http://127.0.0.1:9000",
        Some("alice".to_owned()),
        Some("mcp-client".to_owned()),
    );
    let call = HeldCall::new(
        "tools/call",
        json!({"name": "deploy", "arguments": {"service": "payroll-secret"}}),
        "2026-07-28",
        "http://127.0.0.1:8080/mcp",
    );
    let record = TaskRecord::new(owner, call, "actx_test", 60_000, 200).expect("random");
    let id = record.id.as_str().to_owned();
    store.create(record).await.expect("stored");
    (Approvals::new(store), id)
}

async fn send(approvals: &Approvals, method: &str, path: &str, body: &str) -> (StatusCode, Value) {
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(Body::from(body.to_owned()))
        .expect("request");
    let answer = super::router(approvals.clone())
        .oneshot(request)
        .await
        .expect("infallible");
    let status = answer.status();
    let bytes = answer.into_body().collect().await.expect("body").to_bytes();
    let value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, value)
}

#[tokio::test]
async fn the_list_names_the_waiting_call_and_its_owner_never_its_arguments() {
    let (approvals, id) = one_waiting().await;
    let (status, body) = send(&approvals, "GET", "/tasks", "").await;
    assert_eq!(status, StatusCode::OK);
    let tasks = body["tasks"].as_array().expect("tasks");
    assert_eq!(tasks.len(), 1, "{body}");
    let task = &tasks[0];
    assert_eq!(task["id"], id.as_str());
    assert_eq!(task["tool"], "deploy");
    assert_eq!(
        task["owner"],
        json!({"subject": "alice", "client_id": "mcp-client"})
    );
    assert!(
        task["created_at"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z'))
    );
    assert!(
        task["expires_at"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z'))
    );
    assert!(task.get("arguments").is_none());
    assert!(!body.to_string().contains("payroll-secret"), "{body}");
}

#[tokio::test]
async fn approving_records_the_approver_once_and_a_second_decision_conflicts() {
    let (approvals, id) = one_waiting().await;
    let path = format!("/tasks/{id}/approve");
    let (status, body) = send(&approvals, "POST", &path, r#"{"by": "ops"}"#).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["id"], id.as_str());
    let record = approvals.get(&id).await.expect("read").expect("stored");
    assert_eq!(record.status, TaskStatus::Approved);
    assert_eq!(
        serde_json::to_value(&record.decision).expect("json")["by"],
        "ops",
        "{:?}",
        record.decision
    );
    // No longer waiting: off the list, and a second decision is refused.
    let (_, listed) = send(&approvals, "GET", "/tasks", "").await;
    assert_eq!(listed["tasks"], json!([]));
    let refuse = format!("/tasks/{id}/refuse");
    let (status, body) = send(&approvals, "POST", &refuse, r#"{"reason": "late"}"#).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"], "already_decided");
}

#[tokio::test]
async fn refusing_completes_the_task_with_the_reason() {
    let (approvals, id) = one_waiting().await;
    let path = format!("/tasks/{id}/refuse");
    let (status, body) = send(&approvals, "POST", &path, r#"{"reason": "not today"}"#).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "completed");
    let record = approvals.get(&id).await.expect("read").expect("stored");
    let result = record.result.expect("a result for the owner").to_string();
    assert!(result.contains("not today"), "{result}");
}

#[tokio::test]
async fn unknown_ids_are_404_and_bad_bodies_400() {
    let (approvals, id) = one_waiting().await;
    for path in [
        "/tasks/tsk_AAAAAAAAAAAAAAAAAAAAAA/approve",
        "/tasks/not-a-task-id/approve",
    ] {
        let (status, body) = send(&approvals, "POST", path, r#"{"by": "ops"}"#).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {body}");
        assert_eq!(body["error"], "unknown_task");
    }
    let approve = format!("/tasks/{id}/approve");
    let refuse = format!("/tasks/{id}/refuse");
    for (path, bad) in [
        (&approve, "not json"),
        (&approve, r#"{"reason": "wrong field"}"#),
        (&approve, r#"{"by": "ops", "extra": 1}"#),
        (&approve, r#"{"by": "  "}"#),
        (&approve, r#"{"by": 7}"#),
        (&refuse, r#"{}"#),
        (&refuse, r#"{"reason": ""}"#),
    ] {
        let (status, body) = send(&approvals, "POST", path, bad).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
        assert_eq!(body["error"], "bad_request");
    }
    let long = json!({"by": "x".repeat(super::MAX_APPROVER + 1)}).to_string();
    let (status, _) = send(&approvals, "POST", &approve, &long).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    // None of them decided anything.
    let record = approvals.get(&id).await.expect("read").expect("stored");
    assert_eq!(record.status, TaskStatus::Working);
}

/// A task store that cannot be reached.
struct Down;

fn down<T>() -> TaskFuture<'static, T>
where
    T: Send + 'static,
{
    Box::pin(async {
        Err(StoreError::Unavailable {
            store: StoreKind::Tasks,
            reason: "test: down".to_owned(),
        })
    })
}

impl TaskStore for Down {
    fn create(&self, _record: TaskRecord) -> TaskFuture<'_, ()> {
        down()
    }
    fn get<'a>(&'a self, _id: &'a TaskId) -> TaskFuture<'a, Option<TaskRecord>> {
        down()
    }
    fn transition<'a>(
        &'a self,
        _id: &'a TaskId,
        _change: mcp_gate::tasks::TaskChange,
    ) -> TaskFuture<'a, Transition> {
        down()
    }
    fn list<'a>(&'a self, _query: TaskQuery<'a>) -> TaskFuture<'a, Vec<TaskRecord>> {
        down()
    }
}

#[tokio::test]
async fn a_store_that_is_down_is_503() {
    let approvals = Approvals::new(Arc::new(Down));
    let (status, body) = send(&approvals, "GET", "/tasks", "").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["error"], "store_unavailable");
    for (path, payload) in [
        (
            "/tasks/tsk_AAAAAAAAAAAAAAAAAAAAAA/approve",
            r#"{"by": "ops"}"#,
        ),
        (
            "/tasks/tsk_AAAAAAAAAAAAAAAAAAAAAA/refuse",
            r#"{"reason": "no"}"#,
        ),
    ] {
        let (status, body) = send(&approvals, "POST", path, payload).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{path}: {body}");
        assert_eq!(body["error"], "store_unavailable");
    }
}
