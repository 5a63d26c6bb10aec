//! Durable approval tasks through the layer, with the example's rmcp server behind it and its
//! policy (`deploy` is held for approval): creation, polling, deciding, running once,
//! cancelling, expiry, and what strangers and undeclared clients see.
//!
//! These tests use the in-memory store and locally minted tokens; `tests/suite/tasks_redis.rs`
//! repeats the flow with oidc-provider, the Python SDK and replicas sharing a real Redis.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use common::clients::demo_gate;
use common::modern::{ModernRequest, envelope, modern, tasks_capabilities};
use common::peers::{GatedServer, Reply};
use common::tokens::{TestKey, claims};
use common::tools::{DeployCount, mcp_service_counting};
use mcp_gate::mcp::SERVER_INFO_META;
use mcp_gate::policy::{Decision, Evaluation, Phase};
use mcp_gate::tasks::{DecideError, MemoryTaskStore, StartedTask, TaskStatus, TaskStore};
use mcp_gate::{GateBuilder, Issuer, StaticKeys};
use serde_json::{Value, json};

const ISSUER: &str = "https://as.example";

/// One deployment: its signing key, a deploy counter, and a replica serving it.
struct Deployment {
    key: TestKey,
    deploys: DeployCount,
    server: GatedServer,
}

impl Deployment {
    /// The example policy and server, with `configure` adding options.
    async fn start(configure: impl FnOnce(GateBuilder) -> GateBuilder) -> Self {
        let key = TestKey::es256("k1");
        let keys = StaticKeys::from_jwks_json(&key.jwks_json()).unwrap();
        let deploys = DeployCount::default();
        let server = GatedServer::start_with(
            |resource| {
                let poll = Duration::from_millis(50);
                let gate = demo_gate(resource).issuer(Issuer::with_keys(ISSUER, keys));
                configure(gate.task_poll_interval(poll))
            },
            Router::new().nest_service("/mcp", mcp_service_counting(deploys.clone())),
        )
        .await;
        Self {
            key,
            deploys,
            server,
        }
    }

    fn token(&self, subject: &str) -> String {
        let mut claims = claims(ISSUER, &self.server.url, "mcp:read");
        claims["sub"] = json!(subject);
        self.key.mint(&claims)
    }

    fn runs(&self) -> u64 {
        self.deploys.load(Ordering::SeqCst)
    }

    async fn send(&self, token: &str, request: &ModernRequest) -> Reply {
        let headers: Vec<(&str, &str)> = request.1.iter().map(|(k, v)| (*k, v.as_str())).collect();
        self.server.post(Some(token), &headers, &request.0).await
    }

    /// Alice asks to deploy; the answer is her task.
    async fn held_deploy(&self, env: &str) -> Value {
        let reply = self.send(&self.token("alice"), &deploy(1, env, true)).await;
        assert_eq!(reply.status, 200, "{reply:?}");
        assert_eq!(reply.body["result"]["resultType"], "task", "{reply:?}");
        reply.body["result"].clone()
    }

    async fn task(&self, subject: &str, method: &str, id: &str) -> Reply {
        self.send(&self.token(subject), &task_request(7, method, id, true))
            .await
    }
}

fn deploy(id: u64, env: &str, tasks: bool) -> ModernRequest {
    modern(
        id,
        "tools/call",
        json!({"name": "deploy", "arguments": {"env": env}}),
        "deploy",
        capabilities(tasks),
    )
}

/// What a client declares: the Tasks extension, or nothing.
fn capabilities(tasks: bool) -> Value {
    if tasks {
        tasks_capabilities()
    } else {
        json!({})
    }
}

fn task_request(id: u64, method: &str, task_id: &str, tasks: bool) -> ModernRequest {
    modern(
        id,
        method,
        json!({"taskId": task_id}),
        task_id,
        capabilities(tasks),
    )
}

fn is_rfc3339_utc(text: &Value) -> bool {
    let text = text.as_str().unwrap_or_default();
    text.len() == 20
        && text.ends_with('Z')
        && text.as_bytes()[10] == b'T'
        && text
            .bytes()
            .enumerate()
            .all(|(i, b)| matches!(i, 4 | 7 | 10 | 13 | 16 | 19) || b.is_ascii_digit())
}

/// A random id of the layer's shape that names no task.
fn unknown_id() -> String {
    mcp_gate::tasks::TaskId::generate().unwrap().to_string()
}

#[tokio::test]
async fn a_declared_call_becomes_a_task_that_polls_working_with_the_same_envelope() {
    let d = Deployment::start(|b| b).await;
    let task = d.held_deploy("prod").await;
    let id = task["taskId"].as_str().unwrap();
    assert!(mcp_gate::tasks::TaskId::parse(id).is_some(), "{id}");
    assert_eq!(task["status"], "working");
    assert!(is_rfc3339_utc(&task["createdAt"]), "{task}");
    assert!(is_rfc3339_utc(&task["lastUpdatedAt"]), "{task}");
    assert_eq!(task["ttlMs"], 86_400_000);
    assert_eq!(task["pollIntervalMs"], 50);
    let hold = envelope(&task);
    assert_eq!(hold["reason"], "insufficient_authorization");
    assert_eq!(hold["remediation"], "available");
    assert_eq!(hold["remediationHints"], json!([{"type": "task"}]));
    let context_id = hold["authorizationContextId"].as_str().unwrap();
    assert!(context_id.starts_with("actx_"));

    // Read back at once, and the same on every poll while it waits; nothing has run.
    for _ in 0..5 {
        let poll = d.task("alice", "tasks/get", id).await;
        assert_eq!(poll.status, 200);
        let result = &poll.body["result"];
        assert_eq!(result["resultType"], "complete", "{poll:?}");
        assert_eq!(result["taskId"], id);
        assert_eq!(result["status"], "working");
        assert_eq!(result["createdAt"], task["createdAt"]);
        assert_eq!(envelope(result), hold);
        assert!(result.get("result").is_none());
    }
    assert_eq!(d.runs(), 0, "a held call must not run before approval");
    let pending = d.server.gate.tasks().pending(10).await.unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].id.as_str(), id);
    assert_eq!(pending[0].context_id, context_id);
    assert_eq!(pending[0].call.params["arguments"], json!({"env": "prod"}));
}

#[tokio::test]
async fn approval_runs_the_call_once_and_every_later_poll_returns_its_result() {
    let d = Deployment::start(|b| b).await;
    let task = d.held_deploy("staging").await;
    let id = task["taskId"].as_str().unwrap();
    let approved = d.server.gate.tasks().approve(id, "release-manager").await;
    assert_eq!(approved.unwrap().status, TaskStatus::Approved);
    assert_eq!(d.runs(), 0, "approval alone does not run the call");

    let first = d.task("alice", "tasks/get", id).await;
    let result = &first.body["result"];
    assert_eq!(result["status"], "completed", "{first:?}");
    assert_eq!(
        result["result"]["content"][0]["text"],
        "deployed to staging (deploy run #1 of this server)"
    );
    assert!(
        result
            .pointer("/_meta/io.modelcontextprotocol~1authorization")
            .is_none(),
        "a finished task has no envelope"
    );
    assert_eq!(
        result["_meta"][SERVER_INFO_META]["name"], "rmcp",
        "the layer's own result names the inner server, as rmcp names itself: {first:?}"
    );
    for _ in 0..3 {
        let again = d.task("alice", "tasks/get", id).await;
        assert_eq!(again.body["result"], first.body["result"]);
    }
    assert_eq!(d.runs(), 1);
    // Deciding twice is refused.
    assert!(matches!(
        d.server.gate.tasks().refuse(id, "too late").await,
        Err(DecideError::AlreadyDecided {
            status: TaskStatus::Completed,
            ..
        })
    ));
}

#[tokio::test]
async fn refusal_completes_with_an_unavailable_result_and_the_same_context_id() {
    let d = Deployment::start(|b| b).await;
    let task = d.held_deploy("prod").await;
    let id = task["taskId"].as_str().unwrap();
    d.server
        .gate
        .tasks()
        .refuse(id, "change freeze")
        .await
        .unwrap();
    let poll = d.task("alice", "tasks/get", id).await;
    let result = &poll.body["result"];
    assert_eq!(result["status"], "completed", "a refusal is an outcome");
    let refused = &result["result"];
    assert_eq!(refused["isError"], true);
    assert_eq!(
        refused["content"][0]["text"],
        "The approver refused this request: change freeze"
    );
    let said = envelope(refused);
    assert_eq!(said["remediation"], "unavailable");
    assert_eq!(
        said["authorizationContextId"],
        envelope(&task)["authorizationContextId"]
    );
    assert!(said.get("remediationHints").is_none());
    assert_eq!(d.runs(), 0);
    assert!(matches!(
        d.server.gate.tasks().approve(id, "someone").await,
        Err(DecideError::AlreadyDecided { .. })
    ));
}

#[tokio::test]
async fn strangers_and_unknown_ids_get_the_same_bytes_and_change_nothing() {
    let d = Deployment::start(|b| b).await;
    let task = d.held_deploy("prod").await;
    let id = task["taskId"].as_str().unwrap().to_owned();
    for method in ["tasks/get", "tasks/cancel", "tasks/update"] {
        let theirs = d.task("mallory", method, &id).await;
        let unknown = d.task("mallory", method, &unknown_id()).await;
        let also_unknown = d.task("alice", method, &unknown_id()).await;
        assert_eq!(theirs.status, unknown.status, "{method}");
        assert_eq!(theirs.text, unknown.text, "{method}: bytes differ");
        assert_eq!(theirs.text, also_unknown.text, "{method}");
        assert_eq!(
            theirs.headers.get("content-type"),
            unknown.headers.get("content-type")
        );
        assert_eq!(theirs.body["error"]["code"], -32602, "{method}: {theirs:?}");
    }
    // Another client of the same subject is another owner too.
    let mut other_client = claims(ISSUER, &d.server.url, "mcp:read");
    other_client["sub"] = json!("alice");
    other_client["client_id"] = json!("another-app");
    let reply = d
        .send(
            &d.key.mint(&other_client),
            &task_request(7, "tasks/get", &id, true),
        )
        .await;
    assert_eq!(reply.body["error"]["code"], -32602);
    // Mallory's cancel changed nothing: the task still waits, and Alice still sees it.
    let poll = d.task("alice", "tasks/get", &id).await;
    assert_eq!(poll.body["result"]["status"], "working");
}

#[tokio::test]
async fn the_owner_cancels_a_waiting_task_and_it_is_never_run() {
    let d = Deployment::start(|b| b).await;
    let task = d.held_deploy("prod").await;
    let id = task["taskId"].as_str().unwrap();
    let cancel = d.task("alice", "tasks/cancel", id).await;
    let rmcp = json!({"name": "rmcp", "version": rmcp_version()});
    assert_eq!(
        cancel.body["result"],
        json!({"resultType": "complete", "_meta": {SERVER_INFO_META: rmcp}}),
        "{cancel:?}"
    );
    let poll = d.task("alice", "tasks/get", id).await;
    assert_eq!(poll.body["result"]["status"], "cancelled");
    assert_eq!(
        poll.body["result"]["_meta"],
        json!({SERVER_INFO_META: rmcp})
    );
    assert!(matches!(
        d.server.gate.tasks().approve(id, "ops").await,
        Err(DecideError::AlreadyDecided {
            status: TaskStatus::Cancelled,
            ..
        })
    ));
    let again = d.task("alice", "tasks/cancel", id).await;
    assert_eq!(again.body["error"]["code"], -32602, "{again:?}");
    assert_eq!(d.runs(), 0);

    // An approved task that has not run can still be cancelled.
    let task = d.held_deploy("qa").await;
    let id = task["taskId"].as_str().unwrap();
    d.server.gate.tasks().approve(id, "ops").await.unwrap();
    let cancel = d.task("alice", "tasks/cancel", id).await;
    assert_eq!(
        cancel.body["result"],
        json!({"resultType": "complete", "_meta": {SERVER_INFO_META: rmcp}})
    );
    let poll = d.task("alice", "tasks/get", id).await;
    assert_eq!(poll.body["result"]["status"], "cancelled");
    assert_eq!(d.runs(), 0);
}

#[tokio::test]
async fn task_methods_without_the_extension_get_32021() {
    let d = Deployment::start(|b| b).await;
    let task = d.held_deploy("prod").await;
    let id = task["taskId"].as_str().unwrap();
    for method in ["tasks/get", "tasks/cancel", "tasks/update"] {
        for task_id in [id.to_owned(), unknown_id(), "their-own-task-7".to_owned()] {
            let reply = d
                .send(&d.token("alice"), &task_request(3, method, &task_id, false))
                .await;
            assert_eq!(reply.status, 400, "{method} {task_id}: {reply:?}");
            assert_eq!(reply.body["error"]["code"], -32021);
            assert_eq!(
                reply.body["error"]["data"]["requiredCapabilities"]["extensions"],
                json!({"io.modelcontextprotocol/tasks": {}})
            );
        }
    }
    let poll = d.task("alice", "tasks/get", id).await;
    assert_eq!(poll.body["result"]["status"], "working");
}

#[tokio::test]
async fn clients_that_cannot_follow_a_task_get_undisclosed_and_no_task_is_made() {
    let d = Deployment::start(|b| b).await;
    let reply = d.send(&d.token("alice"), &deploy(1, "prod", false)).await;
    let result = &reply.body["result"];
    assert_eq!(result["isError"], true, "{reply:?}");
    assert_eq!(envelope(result)["remediation"], "undisclosed");
    let text = result["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("out-of-band approval"), "{text}");
    // A legacy call (no `_meta`) likewise.
    let legacy = d
        .server
        .call_tool(Some(&d.token("alice")), "deploy", json!({"env": "prod"}))
        .await;
    assert_eq!(legacy.body["result"]["isError"], true, "{legacy:?}");
    assert!(legacy.body["result"].get("resultType").is_none());
    assert!(d.server.gate.tasks().pending(10).await.unwrap().is_empty());
    assert_eq!(d.runs(), 0);
}

#[tokio::test]
async fn task_ids_of_other_shapes_go_to_the_inner_server_untouched() {
    let key = TestKey::es256("k1");
    let keys = StaticKeys::from_jwks_json(&key.jwks_json()).unwrap();
    let seen: Arc<Mutex<Vec<Value>>> = Arc::default();
    let record = seen.clone();
    let inner = Router::new().route(
        "/mcp",
        axum::routing::post(move |axum::Json(message): axum::Json<Value>| {
            let record = record.clone();
            async move {
                record.lock().unwrap().push(message.clone());
                axum::Json(json!({"jsonrpc": "2.0", "id": message["id"], "result": {
                    "resultType": "complete", "taskId": message["params"]["taskId"], "status": "working",
                    "createdAt": "2026-09-01T10:00:00Z", "lastUpdatedAt": "2026-09-01T10:00:00Z", "ttlMs": null}}))
            }
        }),
    );
    let server = GatedServer::start_with(
        move |_| {
            mcp_gate::Gate::builder()
                .issuer(Issuer::with_keys(ISSUER, keys))
                .evaluate(mcp_gate::policy::allow_all())
        },
        inner,
    )
    .await;
    let token = key.mint(&claims(ISSUER, &server.url, "mcp:read"));
    let (body, headers) = task_request(9, "tasks/get", "app-task-42", true);
    let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let reply = server.post(Some(&token), &headers, &body).await;
    assert_eq!(reply.body["result"]["taskId"], "app-task-42", "{reply:?}");
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].to_string(), body, "forwarded byte for byte");
}

#[tokio::test]
async fn the_policy_is_asked_again_on_approval_and_may_still_refuse() {
    let key = TestKey::es256("k1");
    let keys = StaticKeys::from_jwks_json(&key.jwks_json()).unwrap();
    type Asked = Vec<(Phase, Option<String>)>;
    let asked: Arc<Mutex<Asked>> = Arc::default();
    let log = asked.clone();
    let deploys = DeployCount::default();
    let server = GatedServer::start_with(
        move |_| {
            mcp_gate::Gate::builder()
                .issuer(Issuer::with_keys(ISSUER, keys))
                .evaluate(move |evaluation: Evaluation| {
                    let log = log.clone();
                    async move {
                        let approval = evaluation.approval().map(|a| a.approved_by.clone());
                        log.lock()
                            .unwrap()
                            .push((evaluation.phase(), approval.clone()));
                        Ok::<_, std::convert::Infallible>(match (evaluation.tool(), approval) {
                            // Approvals by interns no longer count.
                            (Some("deploy"), Some(by)) if by == "intern" => {
                                Decision::unavailable("interns cannot approve")
                            }
                            (Some("deploy"), Some(_)) => Decision::allow(),
                            (Some("deploy"), None) => Decision::task("needs approval"),
                            _ => Decision::allow(),
                        })
                    }
                })
        },
        Router::new().nest_service("/mcp", mcp_service_counting(deploys.clone())),
    )
    .await;
    let token = key.mint(&claims(ISSUER, &server.url, "mcp:read"));
    let send = |request: ModernRequest| {
        let (server, token) = (&server, token.clone());
        async move {
            let headers: Vec<(&str, &str)> =
                request.1.iter().map(|(k, v)| (*k, v.as_str())).collect();
            server.post(Some(&token), &headers, &request.0).await
        }
    };
    let task = send(deploy(1, "prod", true)).await;
    let id = task.body["result"]["taskId"].as_str().unwrap().to_owned();
    server.gate.tasks().approve(&id, "intern").await.unwrap();
    let poll = send(task_request(2, "tasks/get", &id, true)).await;
    let result = &poll.body["result"];
    assert_eq!(result["status"], "completed", "{poll:?}");
    assert_eq!(result["result"]["isError"], true);
    assert_eq!(envelope(&result["result"])["remediation"], "unavailable");
    assert_eq!(
        envelope(&result["result"])["authorizationContextId"],
        envelope(&task.body["result"])["authorizationContextId"]
    );
    assert_eq!(deploys.load(Ordering::SeqCst), 0);
    let asked = asked.lock().unwrap().clone();
    assert_eq!(
        asked,
        vec![
            (Phase::Invocation, None),
            (Phase::Approval, Some("intern".to_owned()))
        ]
    );
}

#[tokio::test]
async fn the_start_hook_sees_each_task_and_a_failing_hook_fails_closed() {
    let started: Arc<Mutex<Vec<StartedTask>>> = Arc::default();
    let log = started.clone();
    let d = Deployment::start(move |b| {
        b.on_task_start(move |task: StartedTask| {
            let log = log.clone();
            async move {
                let env = task.call.params["arguments"]["env"].clone();
                log.lock().unwrap().push(task);
                if env == "broken" {
                    Err("the pager is down")
                } else {
                    Ok(())
                }
            }
        })
    })
    .await;
    let task = d.held_deploy("prod").await;
    {
        let started = started.lock().unwrap();
        assert_eq!(started.len(), 1);
        assert_eq!(started[0].id.as_str(), task["taskId"].as_str().unwrap());
        assert_eq!(started[0].owner.subject.as_deref(), Some("alice"));
        assert!(started[0].message.contains("Deploying to prod"));
    }
    let broken = d.send(&d.token("alice"), &deploy(2, "broken", true)).await;
    assert_eq!(broken.body["error"]["code"], -32603, "{broken:?}");
    assert!(broken.body.get("result").is_none());
    let broken_id = started.lock().unwrap()[1].id.to_string();
    // The task the hook could not announce is failed, not left waiting for nobody.
    let record = d
        .server
        .gate
        .tasks()
        .get(&broken_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.status, TaskStatus::Failed);
    assert_eq!(d.server.gate.tasks().pending(10).await.unwrap().len(), 1);
}

#[tokio::test]
async fn expired_tasks_are_never_run() {
    // Expired before anyone decided: unknown to everyone, and no decision lands.
    let d = Deployment::start(|b| b.task_ttl(Duration::from_secs(1))).await;
    let task = d.held_deploy("prod").await;
    let id = task["taskId"].as_str().unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let poll = d.task("alice", "tasks/get", id).await;
    assert_eq!(poll.body["error"]["code"], -32602, "{poll:?}");
    assert!(matches!(
        d.server.gate.tasks().approve(id, "ops").await,
        Err(DecideError::UnknownTask(_))
    ));

    // Approved, but polled only when too little time is left to run it: refused, not run.
    let d = Deployment::start(|b| b.task_ttl(Duration::from_secs(2))).await;
    let task = d.held_deploy("prod").await;
    let id = task["taskId"].as_str().unwrap();
    d.server.gate.tasks().approve(id, "ops").await.unwrap();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let poll = d.task("alice", "tasks/get", id).await;
    let result = &poll.body["result"];
    assert_eq!(result["status"], "completed", "{poll:?}");
    assert_eq!(envelope(&result["result"])["remediation"], "unavailable");
    assert!(
        result["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("too late")
    );
    assert_eq!(d.runs(), 0);
}

#[tokio::test]
async fn concurrent_polls_of_an_approved_task_run_it_once() {
    let d = Arc::new(Deployment::start(|b| b).await);
    for round in 0..10 {
        let task = d.held_deploy(&format!("env-{round}")).await;
        let id = task["taskId"].as_str().unwrap().to_owned();
        d.server.gate.tasks().approve(&id, "ops").await.unwrap();
        let completed = Arc::new(AtomicUsize::new(0));
        let polls: Vec<_> = (0..8)
            .map(|_| {
                let (d, id, completed) = (d.clone(), id.clone(), completed.clone());
                tokio::spawn(async move {
                    let poll = d.task("alice", "tasks/get", &id).await;
                    if poll.body["result"]["status"] == "completed" {
                        completed.fetch_add(1, Ordering::SeqCst);
                    }
                    poll.body["result"]["status"].clone()
                })
            })
            .collect();
        for poll in polls {
            let status = poll.await.unwrap();
            assert!(status == "completed" || status == "working", "{status}");
        }
        assert!(completed.load(Ordering::SeqCst) >= 1);
        let last = d.task("alice", "tasks/get", &id).await;
        assert_eq!(last.body["result"]["status"], "completed");
        assert_eq!(
            d.runs(),
            round + 1,
            "round {round}: the call ran more than once"
        );
    }
}

#[tokio::test]
async fn a_full_store_refuses_new_tasks_with_an_internal_error() {
    let store = Arc::new(MemoryTaskStore::new(1));
    let shared: Arc<dyn TaskStore> = store.clone();
    let d = Deployment::start(move |b| b.task_store(shared)).await;
    d.held_deploy("one").await;
    let reply = d.send(&d.token("alice"), &deploy(2, "two", true)).await;
    assert_eq!(reply.body["error"]["code"], -32603, "{reply:?}");
    assert_eq!(store.len(), 1);
    assert_eq!(d.runs(), 0);
}

#[tokio::test]
async fn python_sdk_cancels_its_own_waiting_task() {
    let d = Deployment::start(|b| b).await;
    let token = d.token("alice");
    let run = common::peers::run_client(
        common::peers::Sdk::Python,
        &d.server.url,
        &[
            "--token",
            &token,
            "--no-list",
            "--tasks",
            "--cancel-task",
            "--call",
            r#"deploy={"env":"prod"}"#,
        ],
    )
    .await;
    assert!(run.success, "{run:#?}");
    let cancel = run
        .steps
        .iter()
        .find_map(|s| s.get("cancel"))
        .expect("the client cancelled");
    assert_eq!(cancel["resultType"], "complete", "{run:#?}");
    let call = run.steps.iter().find(|s| s["step"] == "call").unwrap();
    assert_eq!(call["task_status"], "cancelled", "{run:#?}");
    assert_eq!(d.runs(), 0);
    assert!(d.server.gate.tasks().pending(10).await.unwrap().is_empty());
}

/// The version rmcp names itself with: the one this test was built against.
fn rmcp_version() -> String {
    let lock = include_str!("../../Cargo.lock");
    let at = lock
        .find("name = \"rmcp\"\nversion = \"")
        .expect("rmcp in Cargo.lock");
    let rest = &lock[at + "name = \"rmcp\"\nversion = \"".len()..];
    rest[..rest.find('"').expect("a version")].to_owned()
}
