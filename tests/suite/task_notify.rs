//! Task notifications on real parts: oidc-provider tokens, the example's rmcp server behind
//! two gateway replicas sharing one real `redis-server` (task store and `RedisTaskFeed`), and
//! the official Python SDK client's listen (tests/peers/py_listen.py says exactly which SDK
//! calls drive it).
//!
//! Without a `redis-server` binary these tests print why and pass, unless `CI` is set: then
//! they fail. `scripts/setup-peers.sh` installs it.
#![cfg(feature = "redis")]

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use common::clients::demo_gate;
use common::modern::{ModernRequest, modern, tasks_capabilities};
use common::peers::{AuthServer, GatedServer, Reply, SECRET, ensure_peers, peers_dir};
use common::py_listen::{Listener, task};
use common::redis_server::RedisServer;
use common::tools::{DeployCount, mcp_service_counting};
use mcp_gate::GateBuilder;
use mcp_gate::tasks::{RedisTaskFeed, TaskNotifications, TaskStore};
use serde_json::{Value, json};

const STRANGER: &str = "mcp-client-post";

/// A replica keeping tasks in Redis under `namespace` and telling their transitions through
/// a `RedisTaskFeed` on the same server, with at most `per_owner` task listens per owner.
async fn replica(
    auth: &AuthServer,
    resource: Option<&str>,
    redis: &RedisServer,
    namespace: &str,
    per_owner: usize,
) -> GatedServer {
    let feed = RedisTaskFeed::connect(&redis.url(), namespace)
        .await
        .expect("the feed subscribes");
    let notifications = TaskNotifications::through(Arc::new(feed)).listens_per_owner(per_owner);
    let store = redis.store(namespace).await;
    let configure = deployment(auth.issuer.clone(), Some(store), notifications);
    let mcp = Router::new().nest_service("/mcp", mcp_service_counting(DeployCount::default()));
    match resource {
        Some(resource) => GatedServer::start_replica(resource, configure, mcp).await,
        None => GatedServer::start_with(configure, mcp).await,
    }
}

/// The example deployment trusting `issuer`, holding deploys for approval in `store` (the
/// memory store if none), with `notifications`.
fn deployment(
    issuer: String,
    store: Option<Arc<dyn TaskStore>>,
    notifications: TaskNotifications,
) -> impl FnOnce(&str) -> GateBuilder {
    move |resource: &str| {
        let gate = demo_gate(resource)
            .development_mode()
            .issuer(issuer.as_str())
            .required_scopes(["mcp:read"])
            .task_poll_interval(Duration::from_millis(50))
            .task_notifications(notifications);
        match store {
            Some(store) => gate.task_store(store),
            None => gate,
        }
    }
}

/// Two replicas behind one resource (the second's is the first's), as behind a load balancer.
async fn pair(
    auth: &AuthServer,
    redis: &RedisServer,
    namespace: &str,
    per_owner: usize,
) -> (GatedServer, GatedServer) {
    let a = replica(auth, None, redis, namespace, per_owner).await;
    let b = replica(auth, Some(&a.url), redis, namespace, per_owner).await;
    (a, b)
}

async fn send(server: &GatedServer, token: &str, request: ModernRequest) -> Reply {
    let headers: Vec<(&str, &str)> = request.1.iter().map(|(k, v)| (*k, v.as_str())).collect();
    server.post(Some(token), &headers, &request.0).await
}

/// Holds a `deploy` call for `token`'s owner; its task id.
async fn hold(server: &GatedServer, token: &str) -> String {
    let params = json!({"name": "deploy", "arguments": {"env": "prod"}});
    let call = modern(1, "tools/call", params, "deploy", tasks_capabilities());
    let reply = send(server, token, call).await;
    assert_eq!(reply.body["result"]["resultType"], "task", "{reply:?}");
    reply.body["result"]["taskId"].as_str().unwrap().to_owned()
}

async fn task_request(server: &GatedServer, token: &str, method: &str, id: &str) -> Reply {
    let request = modern(2, method, json!({"taskId": id}), id, tasks_capabilities());
    send(server, token, request).await
}

/// The Python SDK client listening for `ids` on `server`.
fn listen(server: &GatedServer, token: &str, ids: &[&str]) -> Listener {
    ensure_peers();
    Listener::start(&peers_dir(), &server.url, token, ids)
}

#[tokio::test]
async fn the_owner_hears_each_transition_on_the_other_replica_and_a_stranger_none() {
    let Some(redis) = RedisServer::start_or_skip() else {
        return;
    };
    let auth = AuthServer::start(&[]).await;
    let (a, b) = pair(&auth, &redis, "notify", 8).await;
    let owner = auth.client_token("mcp:read", &a.url).await;
    let stranger = auth
        .token(STRANGER, SECRET, Some("mcp:read"), Some(&a.url))
        .await;
    let owned = hold(&a, &owner).await;
    let theirs = hold(&b, &stranger).await;

    // The owner listens on B; the stranger on both, naming the owner's task as well as its own.
    let mut listening = listen(&b, &owner, &[&owned]);
    let mut others = [
        listen(&a, &stranger, &[&owned, &theirs]),
        listen(&b, &stranger, &[&owned, &theirs]),
    ];
    assert_eq!(listening.next().await["ack"], json!({"taskIds": [owned]}));
    for other in &mut others {
        assert_eq!(other.next().await["ack"], json!({"taskIds": [theirs]}));
        assert_eq!(task(&other.next().await)["taskId"], theirs.as_str());
    }
    let first = listening.next().await;
    assert_eq!(task(&first)["taskId"], owned.as_str());
    assert_eq!(task(&first)["status"], "working");

    // Approved on A: heard on B. The owner's poll on A runs the call: running, then done.
    a.gate
        .tasks()
        .approve(&owned, "release-manager")
        .await
        .expect("approved");
    let approved = listening.next().await;
    assert_eq!(task(&approved)["status"], "working");
    let poll = task_request(&a, &owner, "tasks/get", &owned).await;
    assert_eq!(poll.body["result"]["status"], "completed", "{poll:?}");
    let running = listening.next().await;
    let completed = listening.next().await;
    assert_eq!(task(&running)["status"], "working");
    assert_eq!(task(&completed)["status"], "completed");
    assert_eq!(
        task(&completed)["result"]["content"][0]["text"],
        poll.body["result"]["result"]["content"][0]["text"]
    );
    let heard = [&first, &approved, &running, &completed];
    for pair in heard.windows(2) {
        let (before, after) = (task(pair[0]), task(pair[1]));
        assert!(before["lastUpdatedAt"].as_str() <= after["lastUpdatedAt"].as_str());
    }
    for line in heard {
        assert_eq!(
            task(line)["_meta"]["io.modelcontextprotocol/subscriptionId"],
            "listen-tasks-1"
        );
    }
    let (rest, closed) = listening.rest().await;
    assert!(closed, "{rest:?}");
    assert_eq!(rest.len(), 1, "{rest:?}");
    assert_eq!(rest[0]["closed"]["resultType"], "complete");

    // Every transition of the owner's task was published before this cancel (Redis runs one
    // command at a time): when a stranger's stream has closed on it, it has heard everything
    // it ever could, and none of it was the owner's.
    let cancel = task_request(&b, &stranger, "tasks/cancel", &theirs).await;
    assert!(cancel.body.get("result").is_some(), "{cancel:?}");
    for other in others {
        let (rest, closed) = other.rest().await;
        assert!(closed, "{rest:?}");
        let notes: Vec<&Value> = rest.iter().filter_map(|l| l.get("task")).collect();
        assert_eq!(notes.len(), 1, "{rest:?}");
        assert_eq!(notes[0]["taskId"], theirs.as_str());
        assert_eq!(notes[0]["status"], "cancelled");
    }
}

#[tokio::test]
async fn listens_per_owner_are_bounded_and_need_the_tasks_extension() {
    let Some(redis) = RedisServer::start_or_skip() else {
        return;
    };
    let auth = AuthServer::start(&[]).await;
    let (a, b) = pair(&auth, &redis, "bound", 2).await;
    let owner = auth.client_token("mcp:read", &a.url).await;
    let id = hold(&a, &owner).await;

    // Without the Tasks extension declared: -32021, as the extension says.
    let filter = json!({"notifications": {"taskIds": [id]}});
    let bare = modern(3, "subscriptions/listen", filter, "", json!({}));
    let refused = send(&a, &owner, bare).await;
    assert_eq!(refused.body["error"]["code"], -32021, "{refused:?}");

    let mut first = listen(&a, &owner, &[&id]);
    let mut second = listen(&a, &owner, &[&id]);
    for listener in [&mut first, &mut second] {
        assert_eq!(listener.next().await["ack"], json!({"taskIds": [id]}));
    }
    // A third on the same replica is refused; the two open ones are kept.
    let (third, ok) = listen(&a, &owner, &[&id]).rest().await;
    assert!(!ok, "{third:?}");
    let error = third
        .iter()
        .find_map(|l| l.get("error"))
        .unwrap_or_else(|| panic!("{third:?}"));
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.contains("At most 2 task listens")),
        "{error}"
    );
    // The bound is per replica: the other one takes the owner's listen.
    let mut elsewhere = listen(&b, &owner, &[&id]);
    assert_eq!(elsewhere.next().await["ack"], json!({"taskIds": [id]}));

    let cancel = task_request(&a, &owner, "tasks/cancel", &id).await;
    assert!(cancel.body.get("result").is_some(), "{cancel:?}");
    for listener in [first, second, elsewhere] {
        let (lines, closed) = listener.rest().await;
        assert!(closed, "{lines:?}");
        let statuses: Vec<&Value> = lines
            .iter()
            .filter_map(|l| l.get("task"))
            .map(|t| &t["status"])
            .collect();
        assert_eq!(statuses, ["working", "cancelled"], "{lines:?}");
    }
}

#[tokio::test]
async fn in_one_process_with_the_memory_store_the_owner_hears_its_cancel() {
    let auth = AuthServer::start(&[]).await;
    let configure = deployment(auth.issuer.clone(), None, TaskNotifications::in_process());
    let mcp = Router::new().nest_service("/mcp", mcp_service_counting(DeployCount::default()));
    let server = GatedServer::start_with(configure, mcp).await;
    let owner = auth.client_token("mcp:read", &server.url).await;
    let id = hold(&server, &owner).await;
    let mut listening = listen(&server, &owner, &[&id]);
    assert_eq!(listening.next().await["ack"], json!({"taskIds": [id]}));
    assert_eq!(task(&listening.next().await)["status"], "working");
    let cancel = task_request(&server, &owner, "tasks/cancel", &id).await;
    assert!(cancel.body.get("result").is_some(), "{cancel:?}");
    let (rest, closed) = listening.rest().await;
    assert!(closed, "{rest:?}");
    assert_eq!(task(&rest[0])["status"], "cancelled");
    assert_eq!(rest[1]["closed"]["resultType"], "complete");
}
