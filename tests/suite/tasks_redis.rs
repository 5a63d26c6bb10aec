//! Durable approval tasks on real parts: oidc-provider tokens, the example's rmcp server behind
//! the layer, the official Python SDK declaring the Tasks extension, and gateway replicas that
//! share one real `redis-server` (started by each test on a free loopback port).
//!
//! Without a `redis-server` binary these tests print why and pass, unless `CI` is set: then
//! they fail. `scripts/setup-peers.sh` installs it.
#![cfg(feature = "redis")]

use crate::common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::Router;
use common::clients::credentials_args;
use common::modern::{ModernRequest, envelope, modern, tasks_capabilities};
use common::peers::{AuthServer, GatedServer, Reply, SECRET, Sdk, run_client_visiting};
use common::redis_server::RedisServer;
use common::tools::{DeployCount, mcp_service_counting};
use mcp_gate::tasks::{Approvals, DecideError, TaskStore};
use mcp_gate::{Gate, GateBuilder};
use serde_json::{Value, json};

const STRANGER: &str = "mcp-client-post";

/// A replica of the example deployment whose resource is `resource` (`None`: its own URL),
/// trusting `auth`, keeping tasks in `store` and counting `deploy` runs in `deploys`.
async fn replica(
    auth: &AuthServer,
    resource: Option<&str>,
    store: Arc<dyn TaskStore>,
    deploys: &DeployCount,
) -> GatedServer {
    let issuer = auth.issuer.clone();
    let configure = move |resource: &str| -> GateBuilder {
        let origin = resource.trim_end_matches("/mcp").to_owned();
        Gate::builder()
            .evaluate(common::policy::DemoPolicy::new(
                common::approvals::Approvals::default(),
                origin,
            ))
            .development_mode()
            .issuer(issuer.as_str())
            .required_scopes(["mcp:read"])
            .task_store(store)
            .task_poll_interval(Duration::from_millis(50))
    };
    let mcp = Router::new().nest_service("/mcp", mcp_service_counting(deploys.clone()));
    match resource {
        Some(resource) => GatedServer::start_replica(resource, configure, mcp).await,
        None => GatedServer::start_with(configure, mcp).await,
    }
}

async fn send(server: &GatedServer, token: &str, request: ModernRequest) -> Reply {
    let headers: Vec<(&str, &str)> = request.1.iter().map(|(k, v)| (*k, v.as_str())).collect();
    server.post(Some(token), &headers, &request.0).await
}

async fn hold_deploy(server: &GatedServer, token: &str, env: &str) -> Value {
    let params = json!({"name": "deploy", "arguments": {"env": env}});
    let reply = send(
        server,
        token,
        modern(1, "tools/call", params, "deploy", tasks_capabilities()),
    )
    .await;
    assert_eq!(reply.body["result"]["resultType"], "task", "{reply:?}");
    reply.body["result"].clone()
}

async fn get_task(server: &GatedServer, token: &str, id: &str) -> Reply {
    send(
        server,
        token,
        modern(
            2,
            "tasks/get",
            json!({"taskId": id}),
            id,
            tasks_capabilities(),
        ),
    )
    .await
}

/// The Python client's arguments to call `deploy` in prod, declaring the Tasks extension.
fn deploy_args(auth: &AuthServer) -> Vec<&str> {
    credentials_args(auth, &["--no-list", "--tasks", "--call", DEPLOY_PROD])
}

/// The `deploy` call every SDK run here makes.
const DEPLOY_PROD: &str = r#"deploy={"env":"prod"}"#;

/// Two replicas on one Redis task store (under `prefix`): the second's resource is the
/// first's, as behind one load balancer.
async fn replica_pair(
    auth: &AuthServer,
    redis: &RedisServer,
    prefix: &str,
    deploys: &DeployCount,
) -> (GatedServer, GatedServer) {
    let a = replica(auth, None, redis.store(prefix).await, deploys).await;
    let b = replica(auth, Some(&a.url), redis.store(prefix).await, deploys).await;
    (a, b)
}

#[tokio::test]
async fn python_sdk_task_is_approved_on_a_second_replica_and_runs_once() {
    let Some(redis) = RedisServer::start_or_skip() else {
        return;
    };
    let auth = AuthServer::start(&[]).await;
    let deploys = DeployCount::default();
    let (a, b) = replica_pair(&auth, &redis, "sdk", &deploys).await;
    let approver = b.gate.tasks();
    let run = run_client_visiting(Sdk::Python, &a.url, &deploy_args(&auth), |task_id| {
        let approver = approver.clone();
        async move {
            // The client polls meanwhile; the task is in Redis, so the other replica
            // sees it waiting.
            tokio::time::sleep(Duration::from_millis(400)).await;
            let pending = approver
                .pending(10)
                .await
                .expect("the shared store lists pending tasks");
            assert!(pending.iter().any(|t| t.id.as_str() == task_id));
            approver
                .approve(&task_id, "release-manager")
                .await
                .expect("the other replica approves the waiting task");
        }
    })
    .await;
    assert!(run.success, "{run:#?}");
    let task = run
        .steps
        .iter()
        .find_map(|s| s.get("task"))
        .expect("the client printed its task");
    assert_eq!(task["resultType"], "task");
    assert_eq!(
        envelope(task)["remediationHints"],
        json!([{"type": "task"}])
    );
    let call = run
        .steps
        .iter()
        .find(|s| s["step"] == "call")
        .expect("call step");
    assert_eq!(call["task_status"], "completed", "{run:#?}");
    assert_eq!(
        call["result"]["content"][0]["text"],
        "deployed to prod (deploy run #1 of this server)"
    );
    assert_eq!(deploys.load(Ordering::SeqCst), 1, "the held call ran once");
    // The client polled while the task waited; every such poll repeated the same envelope.
    let waiting: Vec<_> = run
        .steps
        .iter()
        .filter_map(|s| s.get("poll"))
        .filter(|p| p["status"] == "working")
        .collect();
    assert!(waiting.len() >= 2, "{run:#?}");
    for poll in waiting {
        assert_eq!(envelope(poll), envelope(task));
        assert_eq!(poll["resultType"], "complete");
    }
}

#[tokio::test]
async fn python_sdk_task_refused_on_a_second_replica_completes_unavailable() {
    let Some(redis) = RedisServer::start_or_skip() else {
        return;
    };
    let auth = AuthServer::start(&[]).await;
    let deploys = DeployCount::default();
    let (a, b) = replica_pair(&auth, &redis, "refuse", &deploys).await;
    let approver = b.gate.tasks();
    let run = run_client_visiting(Sdk::Python, &a.url, &deploy_args(&auth), |task_id| {
        let approver = approver.clone();
        async move {
            approver
                .refuse(&task_id, "change freeze")
                .await
                .expect("the other replica refuses the waiting task");
        }
    })
    .await;
    assert!(run.success, "{run:#?}");
    let task = run.steps.iter().find_map(|s| s.get("task")).unwrap();
    let call = run.steps.iter().find(|s| s["step"] == "call").unwrap();
    assert_eq!(call["task_status"], "completed", "{run:#?}");
    let result = &call["result"];
    assert_eq!(result["isError"], true);
    assert_eq!(envelope(result)["remediation"], "unavailable");
    assert_eq!(
        envelope(result)["authorizationContextId"],
        envelope(task)["authorizationContextId"]
    );
    assert_eq!(deploys.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_restarted_server_runs_the_held_call_once_and_strangers_still_see_nothing() {
    let Some(redis) = RedisServer::start_or_skip() else {
        return;
    };
    let auth = AuthServer::start(&[]).await;
    let (before, after) = (DeployCount::default(), DeployCount::default());
    let first = replica(&auth, None, redis.store("restart").await, &before).await;
    let resource = first.url.clone();
    let owner = auth.client_token("mcp:read", &resource).await;
    let stranger = auth
        .token(STRANGER, SECRET, Some("mcp:read"), Some(&resource))
        .await;
    let task = hold_deploy(&first, &owner, "prod").await;
    let id = task["taskId"].as_str().unwrap().to_owned();
    drop(first); // The server stops with the task pending.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        reqwest::get(&resource).await.is_err(),
        "the first server is gone"
    );

    let second = replica(&auth, Some(&resource), redis.store("restart").await, &after).await;
    // Still pending, with the same envelope, on the new server.
    let poll = get_task(&second, &owner, &id).await;
    assert_eq!(poll.body["result"]["status"], "working", "{poll:?}");
    assert_eq!(envelope(&poll.body["result"]), envelope(&task));
    // A stranger's poll is the unknown id's answer, byte for byte.
    let theirs = get_task(&second, &stranger, &id).await;
    let unknown = get_task(
        &second,
        &stranger,
        mcp_gate::tasks::TaskId::generate().unwrap().as_str(),
    )
    .await;
    assert_eq!(theirs.text, unknown.text);
    assert_eq!(theirs.body["error"]["code"], -32602);

    // An approval worker in "another process": its own connection to the store.
    let worker = Approvals::new(redis.store("restart").await);
    worker.approve(&id, "release-manager").await.unwrap();
    let done = get_task(&second, &owner, &id).await;
    assert_eq!(done.body["result"]["status"], "completed", "{done:?}");
    assert_eq!(
        done.body["result"]["result"]["content"][0]["text"],
        "deployed to prod (deploy run #1 of this server)"
    );
    let again = get_task(&second, &owner, &id).await;
    assert_eq!(again.body["result"], done.body["result"]);
    assert_eq!(before.load(Ordering::SeqCst), 0);
    assert_eq!(after.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn two_replicas_approving_and_polling_at_once_run_each_call_once() {
    let Some(redis) = RedisServer::start_or_skip() else {
        return;
    };
    let auth = AuthServer::start(&[]).await;
    let deploys = DeployCount::default();
    let a = Arc::new(replica(&auth, None, redis.store("race").await, &deploys).await);
    let b = Arc::new(replica(&auth, Some(&a.url), redis.store("race").await, &deploys).await);
    let owner = auth.client_token("mcp:read", &a.url).await;
    const TASKS: u64 = 12;
    const POLLERS_PER_REPLICA: usize = 3;
    const MAX_POLLS: usize = 200;
    for round in 0..TASKS {
        let task = hold_deploy(&a, &owner, &format!("env-{round}")).await;
        let id = task["taskId"].as_str().unwrap().to_owned();
        let mut pollers = Vec::new();
        for server in [&a, &b] {
            for _ in 0..POLLERS_PER_REPLICA {
                let (server, owner, id) = (Arc::clone(server), owner.clone(), id.clone());
                pollers.push(tokio::spawn(async move {
                    for _ in 0..MAX_POLLS {
                        let poll = get_task(&server, &owner, &id).await;
                        if poll.body["result"]["status"] == "completed" {
                            return poll.body["result"]["result"].clone();
                        }
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    panic!("task {id} did not complete within {MAX_POLLS} polls");
                }));
            }
        }
        let deciders: Vec<_> = [&a, &b]
            .into_iter()
            .map(|server| {
                let (approvals, id) = (server.gate.tasks(), id.clone());
                tokio::spawn(async move { approvals.approve(&id, "ops").await })
            })
            .collect();
        let mut won = 0;
        for decider in deciders {
            match decider.await.unwrap() {
                Ok(_) => won += 1,
                Err(DecideError::AlreadyDecided { .. }) => {}
                Err(other) => panic!("{other}"),
            }
        }
        assert_eq!(won, 1, "round {round}: exactly one approval is recorded");
        let mut results = Vec::new();
        for poller in pollers {
            results.push(poller.await.unwrap());
        }
        assert!(
            results.windows(2).all(|w| w[0] == w[1]),
            "every poller sees the one result: {results:?}"
        );
        assert_eq!(
            deploys.load(Ordering::SeqCst),
            round + 1,
            "round {round}: the held call ran more than once"
        );
    }
}
