//! Two real gateway replicas sharing one real `redis-server`, behind a small front that
//! alternates modern requests between them (and keeps legacy sessions sticky): any replica
//! serves any 2026-07-28 request (docs/replicas.md).
//!
//! Each replica is built as the checklist says: the same issuer and resource (the front's
//! URL), the same continuation keys, and the task, replay and session stores in one Redis
//! namespace; the example's policy with one approval store shared by both (as an application
//! shares its database), its own inner rmcp server, and the approval pages outside the layer.
//! Tool runs are counted across both replicas by a counting wrapper around the example server.
//! The confirmation (Python SDK), the task and the legacy session (TypeScript SDK) run again
//! with the stores on a three-master Redis Cluster and through three sentinels.
//!
//! Without a `redis-server` binary these tests print why and pass, unless `CI` is set: then
//! they fail. `scripts/setup-peers.sh` installs it.
#![cfg(feature = "redis")]

use crate::common;

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use common::approvals::Approvals;
use common::clients::{Visit, the_one_visit};
use common::modern::{envelope, modern, tasks_capabilities};
use common::peers::{Reply, Sdk, run_client, run_client_visiting};
use common::policy::DemoPolicy;
use common::redis_server::RedisServer;
use common::tokens::{TestKey, claims};
use common::tools::{DemoServer, DeployCount};
use mcp_gate::store::RedisConnection;
use mcp_gate::store::replay::RedisReplayStore;
use mcp_gate::store::sessions::RedisSessionStore;
use mcp_gate::store::tasks::RedisTaskStore;
use mcp_gate::{Gate, Issuer, StaticKeys};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ListToolsResult, PaginatedRequestParams, ServerConfig,
    Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};

const ISSUER: &str = "https://as.example";
/// The longest any one test may take, start to end.
const TEST_LIMIT: Duration = Duration::from_secs(150);
/// The longest one raw HTTP exchange may take.
const REQUEST_LIMIT: Duration = Duration::from_secs(30);

/// Runs a test body within [`TEST_LIMIT`].
async fn bounded<F: Future>(what: &str, body: F) -> F::Output {
    tokio::time::timeout(TEST_LIMIT, body)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within {TEST_LIMIT:?}"))
}

// ---------------------------------------------------------------------------------------------
// The inner servers
// ---------------------------------------------------------------------------------------------

/// How many times each tool ran, over every replica.
#[derive(Clone, Default)]
struct Runs(Arc<Mutex<HashMap<String, u64>>>);

impl Runs {
    fn of(&self, tool: &str) -> u64 {
        self.0.lock().unwrap().get(tool).copied().unwrap_or(0)
    }
}

/// The example server, counting every tool run in [`Runs`] before running it.
#[derive(Clone)]
struct CountingServer {
    inner: DemoServer,
    runs: Runs,
}

impl ServerHandler for CountingServer {
    fn get_info(&self) -> ServerConfig {
        self.inner.get_info()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        *self
            .runs
            .0
            .lock()
            .unwrap()
            .entry(request.name.to_string())
            .or_default() += 1;
        self.inner.call_tool(request, context).await
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.inner.list_tools(request, context).await
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.inner.get_tool(name)
    }
}

/// What each replica serves behind its gate.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Inner {
    /// The counting example server, stateless and answering in JSON (as the example server).
    Stateless,
    /// The counting example server with legacy sessions (each replica its own session
    /// manager, so a legacy session lives in one replica only).
    Sessions,
    /// Ten tools `t0`..`t9`, three per page (tests/suite/discovery.rs).
    Paging,
}

fn inner_router(inner: Inner, runs: &Runs, deploys: &DeployCount) -> Router {
    let (runs, deploys) = (runs.clone(), deploys.clone());
    let factory = move || {
        Ok(CountingServer {
            inner: DemoServer::counting(deploys.clone()),
            runs: runs.clone(),
        })
    };
    match inner {
        Inner::Stateless => Router::new().nest_service(
            "/mcp",
            StreamableHttpService::new(
                factory,
                Arc::new(LocalSessionManager::default()),
                StreamableHttpServerConfig::default()
                    .with_legacy_session_mode(false)
                    .with_json_response(true),
            ),
        ),
        Inner::Sessions => Router::new().nest_service(
            "/mcp",
            StreamableHttpService::new(
                factory,
                Arc::new(LocalSessionManager::default()),
                StreamableHttpServerConfig::default(),
            ),
        ),
        Inner::Paging => common::paging::paginating_inner(),
    }
}

// ---------------------------------------------------------------------------------------------
// The front: a reverse proxy in front of the replicas
// ---------------------------------------------------------------------------------------------

/// One request the front forwarded, as its log keeps it.
#[derive(Clone, Debug)]
struct Hop {
    /// 0 for replica A, 1 for replica B.
    replica: usize,
    http_method: String,
    path: String,
    /// The JSON-RPC method of a POST body.
    rpc: Option<String>,
    /// `params.name` (tools) or `params.taskId` (tasks).
    name: Option<String>,
    /// `params.requestState`, when the request carries one.
    state: Option<String>,
    /// The request's `Mcp-Session-Id`.
    session: Option<String>,
    status: u16,
    /// The `Mcp-Session-Id` the answer handed out (an `initialize`).
    opened: Option<String>,
}

struct FrontState {
    /// The replicas' origins (`http://127.0.0.1:port`), A first.
    replicas: Vec<String>,
    /// Round-robin over requests to `/mcp` without a known session.
    next_mcp: AtomicUsize,
    /// Round-robin over every other path (approval pages, metadata), on its own so a visit to
    /// an approval page does not shift the alternation of MCP requests.
    next_other: AtomicUsize,
    /// Session id -> the replica that answered its `initialize`.
    sticky: Mutex<HashMap<String, usize>>,
    log: Mutex<Vec<Hop>>,
    http: reqwest::Client,
}

/// The front: clients talk only to it. Requests bearing an `Mcp-Session-Id` it has seen
/// handed out go to the replica that handed it out; every other request alternates A, B, A...
/// Bodies of requests are buffered; answers stream through (SSE included).
struct Front {
    /// `http://127.0.0.1:port/mcp`: the resource URI of the deployment.
    url: String,
    origin: String,
    state: Arc<FrontState>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Front {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn forward(State(front): State<Arc<FrontState>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let Ok(body) = axum::body::to_bytes(body, 16 << 20).await else {
        return (StatusCode::BAD_REQUEST, "front: unreadable body").into_response();
    };
    let path = parts.uri.path().to_owned();
    let session = parts
        .headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let sticky = session
        .as_ref()
        .and_then(|s| front.sticky.lock().unwrap().get(s).copied());
    let replica = sticky.unwrap_or_else(|| {
        let counter = if path == "/mcp" {
            &front.next_mcp
        } else {
            &front.next_other
        };
        counter.fetch_add(1, Ordering::SeqCst) % front.replicas.len()
    });
    let message: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let text = |v: &Value| v.as_str().map(str::to_owned);
    let params = &message["params"];

    let target = format!(
        "{}{}",
        front.replicas[replica],
        parts
            .uri
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("/")
    );
    let upstream = front.http.request(parts.method.clone(), target);
    let upstream = common::proxy::forwarding(upstream, &parts.headers, body);
    let answer = match upstream.send().await {
        Ok(answer) => answer,
        Err(e) => return (StatusCode::BAD_GATEWAY, format!("front: {e}")).into_response(),
    };
    let opened = answer
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if let Some(id) = &opened {
        front.sticky.lock().unwrap().insert(id.clone(), replica);
    }
    front.log.lock().unwrap().push(Hop {
        replica,
        http_method: parts.method.to_string(),
        path,
        rpc: text(&message["method"]),
        name: text(&params["name"]).or_else(|| text(&params["taskId"])),
        state: text(&params["requestState"]),
        session,
        status: answer.status().as_u16(),
        opened,
    });

    common::proxy::streamed(answer)
}

impl Front {
    /// Binds the front's port first: its URL is the resource the replicas are built with.
    async fn bind() -> (tokio::net::TcpListener, String) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the front");
        let url = format!("http://{}/mcp", listener.local_addr().expect("addr"));
        (listener, url)
    }

    fn serve(listener: tokio::net::TcpListener, url: String, replicas: Vec<String>) -> Self {
        let state = Arc::new(FrontState {
            replicas,
            next_mcp: AtomicUsize::new(0),
            next_other: AtomicUsize::new(0),
            sticky: Mutex::default(),
            log: Mutex::default(),
            http: reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(5))
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .expect("front client"),
        });
        let app = Router::new().fallback(forward).with_state(state.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        let origin = url.trim_end_matches("/mcp").to_owned();
        Self {
            url,
            origin,
            state,
            task,
        }
    }

    fn log(&self) -> Vec<Hop> {
        self.state.log.lock().unwrap().clone()
    }
}

// ---------------------------------------------------------------------------------------------
// The replicas and the deployment
// ---------------------------------------------------------------------------------------------

/// One gateway replica on its own loopback port: the inner server behind the gate, the
/// metadata and the approval pages outside it.
struct Replica {
    /// `http://127.0.0.1:port/mcp`, this replica's own address (not the resource).
    url: String,
    gate: Gate,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Two replicas of one deployment, their Redis, and the front.
struct Deployment {
    key: TestKey,
    front: Front,
    replicas: [Replica; 2],
    runs: Runs,
    deploys: DeployCount,
    http: reqwest::Client,
    // Dropped last: the replicas' stores talk to it until they stop.
    _redis: Backing,
}

/// Where the replicas' Redis runs.
#[derive(Clone, Copy, Debug)]
enum Topology {
    /// One `redis-server`.
    Server,
    /// A Redis Cluster of three masters and three replicas.
    Cluster,
    /// A master and two replicas behind three sentinels.
    Sentinel,
}

/// The Redis of a deployment, of its [`Topology`].
enum Backing {
    Server(RedisServer),
    Cluster(crate::common::redis_topology::RedisCluster),
    Sentinel(crate::common::redis_topology::RedisSentinels),
}

impl Backing {
    /// Starts it; `None` when its binaries are missing (outside CI).
    fn start(topology: Topology) -> Option<Self> {
        use crate::common::redis_topology::{RedisCluster, RedisSentinels};
        Some(match topology {
            Topology::Server => Self::Server(RedisServer::start_or_skip()?),
            Topology::Cluster => Self::Cluster(RedisCluster::start_or_skip()?),
            Topology::Sentinel => Self::Sentinel(RedisSentinels::start_or_skip()?),
        })
    }

    /// The URL the stores connect with.
    fn url(&self) -> String {
        match self {
            Self::Server(server) => server.url(),
            Self::Cluster(cluster) => cluster.url(),
            Self::Sentinel(sentinels) => sentinels.url(),
        }
    }

    /// The one server, for a test that reads its keys.
    fn server(&self) -> &RedisServer {
        match self {
            Self::Server(server) => server,
            _ => panic!("this test reads one server's keys"),
        }
    }
}

/// A fresh continuation keyring text, `k1:<base64url of 32 random bytes>`.
fn shared_keyring() -> String {
    use base64::Engine as _;
    let mut secret = [0u8; 32];
    getrandom::fill(&mut secret).expect("random bytes");
    format!(
        "k1:{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(secret)
    )
}

/// How a replica's Redis stores reach Redis.
#[derive(Clone, Copy, Debug)]
enum Connect {
    /// Each store from the URL, a connection of its own (`RedisTaskStore::new(url, ns)`).
    Url,
    /// One connection per replica, shared by its three stores, made from what the
    /// application owns: replica A's from its `redis::Client`, replica B's from its
    /// `ConnectionManager`.
    Owned,
}

/// The three Redis stores of replica `replica` on `namespace`, connected as `connect` says.
async fn redis_stores(
    url: &str,
    namespace: &str,
    connect: Connect,
    replica: usize,
) -> (RedisTaskStore, RedisReplayStore, RedisSessionStore) {
    let idle = Duration::from_secs(60);
    let Connect::Owned = connect else {
        return (
            RedisTaskStore::new(url, namespace)
                .await
                .expect("task store"),
            RedisReplayStore::new(url, namespace)
                .await
                .expect("replay store"),
            RedisSessionStore::new(url, namespace, 1000, 100, idle)
                .await
                .expect("session store"),
        );
    };
    let client = redis::Client::open(url).expect("the application's client");
    let connection = if replica == 0 {
        RedisConnection::from_client(client).await
    } else {
        let manager = redis::aio::ConnectionManager::new(client)
            .await
            .expect("the application's connection manager");
        RedisConnection::from_connection_manager(manager).await
    }
    .expect("a connection");
    (
        RedisTaskStore::with_connection(connection.clone(), namespace)
            .await
            .expect("task store"),
        RedisReplayStore::with_connection(connection.clone(), namespace)
            .await
            .expect("replay store"),
        RedisSessionStore::with_connection(connection, namespace, 1000, 100, idle)
            .await
            .expect("session store"),
    )
}

impl Deployment {
    /// Starts Redis, binds the front, starts replicas A and B serving `inner`, then the
    /// front. `None` when `redis-server` is not installed (outside CI).
    async fn start(namespace: &str, inner: Inner) -> Option<Self> {
        Self::start_with(namespace, inner, Connect::Url, Topology::Server).await
    }

    /// [`start`](Self::start) on a Redis of `topology`.
    async fn start_on(namespace: &str, inner: Inner, topology: Topology) -> Option<Self> {
        Self::start_with(namespace, inner, Connect::Url, topology).await
    }

    /// [`start`](Self::start), the replicas' stores connected as `connect` says, to a Redis of
    /// `topology`.
    async fn start_with(
        namespace: &str,
        inner: Inner,
        connect: Connect,
        topology: Topology,
    ) -> Option<Self> {
        let redis = Backing::start(topology)?;
        let key = TestKey::es256("k1");
        let keyring = shared_keyring();
        let approvals = Approvals::default();
        let (runs, deploys) = (Runs::default(), DeployCount::default());
        let (listener, resource) = Front::bind().await;
        let origin = resource.trim_end_matches("/mcp").to_owned();
        let mut replicas = Vec::new();
        for replica in 0..2 {
            let url = redis.url();
            let (tasks, replay, sessions) = redis_stores(&url, namespace, connect, replica).await;
            let keys = StaticKeys::from_jwks_json(&key.jwks_json()).expect("keys");
            let builder = Gate::builder()
                .issuer(Issuer::with_keys(ISSUER, keys))
                .required_scopes(["mcp:read"])
                .continuation_keys(
                    mcp_gate::continuation::Keyring::from_config(&keyring).expect("keyring"),
                )
                .task_store(tasks)
                .replay_store(replay)
                .session_store(sessions)
                .evaluate(DemoPolicy::new(approvals.clone(), origin.clone()))
                .development_mode()
                .task_poll_interval(Duration::from_millis(50))
                .resource(resource.as_str());
            let gate = builder.build().expect("gate builds");
            let app = inner_router(inner, &runs, &deploys)
                .layer(gate.layer())
                .merge(gate.metadata_router())
                .merge(approvals.clone().router(gate.clone()));
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind a replica");
            let url = format!("http://{}/mcp", listener.local_addr().expect("addr"));
            let task = tokio::spawn(async move {
                let _ = axum::serve(listener, app).await;
            });
            replicas.push(Replica { url, gate, task });
        }
        let front = Front::serve(
            listener,
            resource,
            replicas
                .iter()
                .map(|r| r.url.trim_end_matches("/mcp").to_owned())
                .collect(),
        );
        let Ok(replicas) = <[Replica; 2]>::try_from(replicas) else {
            panic!("two replicas");
        };
        Some(Self {
            key,
            front,
            replicas,
            runs,
            deploys,
            http: reqwest::Client::builder()
                .timeout(REQUEST_LIMIT)
                .build()
                .expect("client"),
            _redis: redis,
        })
    }

    /// A token of `subject` for the deployment's resource (the front's URL).
    fn token(&self, subject: &str) -> String {
        let mut claims = claims(ISSUER, &self.front.url, "mcp:read");
        claims["sub"] = json!(subject);
        self.key.mint(&claims)
    }

    /// POSTs `body` with `headers` to `url` (the front, or one replica directly).
    async fn post(&self, url: &str, token: &str, headers: &[(&str, String)], body: &str) -> Reply {
        let mut request = self
            .http
            .post(url)
            .bearer_auth(token)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body.to_owned());
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        Reply::from(request.send().await.expect("post")).await
    }
}

/// The hops of `tools/call` for `tool`, in order.
fn calls_of(log: &[Hop], tool: &str) -> Vec<Hop> {
    log.iter()
        .filter(|h| h.rpc.as_deref() == Some("tools/call") && h.name.as_deref() == Some(tool))
        .cloned()
        .collect()
}

/// Asserts the log shows `tool` called twice, the retry bearing the layer's state, on two
/// different replicas.
fn assert_started_and_completed_apart(log: &[Hop], tool: &str) {
    let calls = calls_of(log, tool);
    assert_eq!(calls.len(), 2, "a first call and one retry: {log:#?}");
    let (first, retry) = (&calls[0], &calls[1]);
    assert_eq!(first.state, None, "{first:?}");
    assert!(
        retry
            .state
            .as_deref()
            .is_some_and(|s| s.starts_with("mcpgate1.")),
        "the retry carries the layer's state: {retry:?}"
    );
    assert_eq!((first.status, retry.status), (200, 200), "{calls:#?}");
    assert_ne!(
        first.replica, retry.replica,
        "started on one replica, completed on the other: {log:#?}"
    );
}

fn step<'a>(run: &'a common::peers::ClientRun, tool: &str) -> &'a Value {
    run.steps
        .iter()
        .rev()
        .find(|s| s["step"] == "call" && s["name"] == tool)
        .unwrap_or_else(|| panic!("no call step for {tool}: {run:#?}"))
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

/// 1. A confirmation started on one replica and confirmed on the other (the Python SDK through
///    the front) runs the call exactly once.
#[tokio::test]
async fn a_confirmation_started_on_one_replica_completes_on_the_other_and_runs_once() {
    confirmation_on(Topology::Server).await;
}

/// 1, on a Redis Cluster and through Sentinel.
#[tokio::test]
async fn a_confirmation_on_a_redis_cluster_runs_once() {
    confirmation_on(Topology::Cluster).await;
}

#[tokio::test]
async fn a_confirmation_through_sentinel_runs_once() {
    confirmation_on(Topology::Sentinel).await;
}

async fn confirmation_on(topology: Topology) {
    let Some(deployment) = Deployment::start_on("confirm", Inner::Stateless, topology).await else {
        return;
    };
    bounded("the confirmation", async {
        let token = deployment.token("alice");
        let run = run_client(
            Sdk::Python,
            &deployment.front.url,
            &[
                "--token",
                &token,
                "--no-list",
                "--elicit",
                "--form-action",
                "accept",
                "--approve",
                "true",
                "--call",
                r#"delete_file={"path":"notes.txt"}"#,
            ],
        )
        .await;
        assert!(run.success, "{run:#?}");
        let asked: Vec<_> = run
            .steps
            .iter()
            .filter(|s| s["elicit"]["mode"] == "form")
            .collect();
        assert_eq!(asked.len(), 1, "one confirmation: {run:#?}");
        assert_eq!(asked[0]["elicit"]["message"], "Delete notes.txt?");
        let result = &step(&run, "delete_file")["result"];
        assert_eq!(
            result["content"][0]["text"], "deleted notes.txt",
            "{run:#?}"
        );
        assert_eq!(result["isError"], false);
        assert_started_and_completed_apart(&deployment.front.log(), "delete_file");
        assert_eq!(deployment.runs.of("delete_file"), 1, "the call ran once");
    })
    .await;
}

/// 2. A URL approval started on one replica (the page visited through the front, approved by
///    the same subject) completes on the other.
#[tokio::test]
async fn a_url_approval_started_on_one_replica_completes_on_the_other() {
    let Some(deployment) = Deployment::start("url", Inner::Stateless).await else {
        return;
    };
    bounded("the URL approval", async {
        let (own, stranger) = (deployment.token("alice"), deployment.token("mallory"));
        let visits: Arc<Mutex<Vec<Visit>>> = Arc::default();
        let record = visits.clone();
        let http = deployment.http.clone();
        let run = run_client_visiting(
            Sdk::Python,
            &deployment.front.url,
            &[
                "--token",
                &own,
                "--no-list",
                "--elicit",
                "--wait-url",
                "--call",
                r#"share_folder={"folder":"team-docs"}"#,
            ],
            |url| {
                let (own, stranger, record, http) =
                    (own.clone(), stranger.clone(), record.clone(), http.clone());
                async move {
                    // Someone else opening the page cannot approve for this user.
                    let status = |token: String| {
                        let (http, url) = (http.clone(), url.clone());
                        async move {
                            http.post(&url)
                                .bearer_auth(token)
                                .send()
                                .await
                                .expect("visit")
                                .status()
                                .as_u16()
                        }
                    };
                    let theirs = status(stranger).await;
                    let mine = status(own).await;
                    record.lock().unwrap().push((url, theirs, mine));
                }
            },
        )
        .await;
        let (url, theirs, mine) = the_one_visit(&visits, &run);
        assert!(
            url.starts_with(&format!("{}/approve/", deployment.front.origin)),
            "the approval page is the deployment's, behind the front: {url}"
        );
        assert_eq!((theirs, mine), (403, 200), "only the same subject approves");
        let result = &step(&run, "share_folder")["result"];
        assert_eq!(result["content"][0]["text"], "shared folder team-docs");
        assert_eq!(result["isError"], false);
        let log = deployment.front.log();
        assert_started_and_completed_apart(&log, "share_folder");
        let pages: Vec<_> = log
            .iter()
            .filter(|h| h.path.starts_with("/approve/"))
            .collect();
        assert_eq!(
            pages.len(),
            2,
            "both visits went through the front: {log:#?}"
        );
        assert_eq!(deployment.runs.of("share_folder"), 1);
    })
    .await;
}

/// 3. A confirmation state used once (asked on A, confirmed on B) is refused on both replicas
///    when replayed by hand.
#[tokio::test]
async fn a_used_request_state_is_refused_on_both_replicas() {
    let Some(deployment) = Deployment::start("replay", Inner::Stateless).await else {
        return;
    };
    bounded("the replay", async {
        let token = deployment.token("alice");
        let [a, b] = &deployment.replicas;
        let (body, headers) = delete_notes(1, None);
        let asked = deployment.post(&a.url, &token, &headers, &body).await;
        assert_eq!(
            asked.body["result"]["resultType"], "input_required",
            "{asked:?}"
        );
        let state = asked.body["result"]["requestState"]
            .as_str()
            .expect("a request state")
            .to_owned();
        let (body, headers) = delete_notes(2, Some(&state));
        let confirmed = deployment.post(&b.url, &token, &headers, &body).await;
        assert_eq!(
            confirmed.body["result"]["content"][0]["text"], "deleted notes.txt",
            "{confirmed:?}"
        );
        assert_eq!(deployment.runs.of("delete_file"), 1);
        for (name, replica) in [("A", a), ("B", b)] {
            let replayed = deployment.post(&replica.url, &token, &headers, &body).await;
            assert_eq!(replayed.status, 400, "{name}: {replayed:?}");
            assert_eq!(
                replayed.body["error"]["code"], -32602,
                "{name}: {replayed:?}"
            );
            assert_eq!(
                replayed.body["error"]["message"], "the request state was already used",
                "{name}"
            );
        }
        assert_eq!(
            deployment.runs.of("delete_file"),
            1,
            "no replay ran it again"
        );
    })
    .await;
}

/// 4. A list cursor issued by A is honoured by B (and back), and paging across both replicas
///    returns each entry once.
#[tokio::test]
async fn a_list_cursor_issued_on_one_replica_is_accepted_on_the_other() {
    let Some(deployment) = Deployment::start("cursor", Inner::Paging).await else {
        return;
    };
    bounded("the paging", async {
        let token = deployment.token("alice");
        let mut seen = Vec::new();
        let mut cursor: Option<String> = None;
        let mut served = Vec::new();
        for page in 0..10u64 {
            // Page 1 through A, page 2 through B, and so on.
            let replica = &deployment.replicas[(page % 2) as usize];
            let params = match &cursor {
                Some(c) => json!({"cursor": c}),
                None => json!({}),
            };
            let (body, headers) = modern(page, "tools/list", params, "", json!({}));
            let headers: Vec<_> = headers
                .into_iter()
                .filter(|(h, _)| *h != "mcp-name")
                .collect();
            let reply = deployment.post(&replica.url, &token, &headers, &body).await;
            assert_eq!(reply.status, 200, "page {page}: {reply:?}");
            served.push(page % 2);
            let tools = reply.body["result"]["tools"]
                .as_array()
                .unwrap_or_else(|| panic!("page {page}: {reply:?}"));
            seen.extend(tools.iter().map(|t| t["name"].as_str().unwrap().to_owned()));
            cursor = reply.body["result"]["nextCursor"]
                .as_str()
                .map(str::to_owned);
            match &cursor {
                Some(c) => assert!(c.starts_with("mcpgatec1."), "the layer's cursor: {c}"),
                None => break,
            }
        }
        assert_eq!(served, [0, 1, 0, 1], "four pages, alternating A and B");
        let expected: Vec<String> = (0..10).map(|i| format!("t{i}")).collect();
        assert_eq!(seen, expected, "every entry once");
    })
    .await;
}

/// 5. A task created through A and approved through B, then polled 20 times at once on A and
///    B, runs once; every poll that sees it finished sees the same result.
#[tokio::test]
async fn a_task_created_on_a_approved_on_b_and_polled_on_both_runs_once() {
    task_on(Topology::Server).await;
}

/// 5, on a Redis Cluster and through Sentinel.
#[tokio::test]
async fn a_task_on_a_redis_cluster_runs_once() {
    task_on(Topology::Cluster).await;
}

#[tokio::test]
async fn a_task_through_sentinel_runs_once() {
    task_on(Topology::Sentinel).await;
}

async fn task_on(topology: Topology) {
    let Some(deployment) = Deployment::start_on("tasks", Inner::Stateless, topology).await else {
        return;
    };
    bounded("the task", async {
        let deployment = Arc::new(deployment);
        let token = deployment.token("alice");
        let front = deployment.front.url.clone();
        let params = json!({"name": "deploy", "arguments": {"env": "prod"}});
        let (body, headers) = modern(1, "tools/call", params, "deploy", tasks_capabilities());
        let created = deployment.post(&front, &token, &headers, &body).await;
        assert_eq!(created.body["result"]["resultType"], "task", "{created:?}");
        let task = created.body["result"].clone();
        let id = task["taskId"].as_str().expect("a task id").to_owned();
        let get = move |n: u64| {
            modern(
                n,
                "tasks/get",
                json!({"taskId": id.clone()}),
                &id,
                tasks_capabilities(),
            )
        };

        // Through B (the next in turn), before any decision: waiting, same envelope.
        let (body, headers) = get(2);
        let waiting = deployment.post(&front, &token, &headers, &body).await;
        assert_eq!(waiting.body["result"]["status"], "working", "{waiting:?}");
        assert_eq!(envelope(&waiting.body["result"]), envelope(&task));
        let log = deployment.front.log();
        assert_eq!(
            log.iter().map(|h| h.replica).collect::<Vec<_>>(),
            [0, 1],
            "created through A, seen waiting through B: {log:#?}"
        );
        let task_id = task["taskId"].as_str().unwrap();
        deployment.replicas[1]
            .gate
            .tasks()
            .approve(task_id, "release-manager")
            .await
            .expect("B approves");

        // Twenty polls at once through the front: ten reach A, ten reach B.
        let polls: Vec<_> = (0..20u64)
            .map(|n| {
                let (deployment, token, front) = (deployment.clone(), token.clone(), front.clone());
                let (body, headers) = get(10 + n);
                tokio::spawn(async move { deployment.post(&front, &token, &headers, &body).await })
            })
            .collect();
        let mut answers = Vec::new();
        for poll in polls {
            answers.push(poll.await.expect("poll task"));
        }
        let log = deployment.front.log();
        let per_replica = |r| log[2..].iter().filter(|h| h.replica == r).count();
        assert_eq!((per_replica(0), per_replica(1)), (10, 10), "{log:#?}");
        for answer in &answers {
            assert_eq!(answer.status, 200, "{answer:?}");
            let status = answer.body["result"]["status"].as_str().unwrap_or("");
            assert!(matches!(status, "working" | "completed"), "{answer:?}");
        }
        // Then each replica until it reports the task finished.
        for replica in &deployment.replicas {
            for n in 0.. {
                let (body, headers) = get(100 + n);
                let answer = deployment.post(&replica.url, &token, &headers, &body).await;
                let done = answer.body["result"]["status"] == "completed";
                answers.push(answer);
                if done {
                    break;
                }
                assert!(n < 200, "the task did not complete: {:?}", answers.last());
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        let finished: Vec<&Value> = answers
            .iter()
            .map(|a| &a.body["result"])
            .filter(|r| r["status"] == "completed")
            .collect();
        assert!(finished.len() >= 2, "{answers:#?}");
        for result in &finished {
            assert_eq!(
                result["result"], finished[0]["result"],
                "one result for every poll"
            );
        }
        assert_eq!(
            finished[0]["result"]["content"][0]["text"],
            "deployed to prod (deploy run #1 of this server)"
        );
        assert_eq!(deployment.runs.of("deploy"), 1, "the held call ran once");
        assert_eq!(deployment.deploys.load(Ordering::SeqCst), 1);
    })
    .await;
}

/// 6. A legacy TypeScript SDK session through the front stays on the replica that opened it;
///    another principal bearing its id on the other replica gets the fixed 404.
#[tokio::test]
async fn a_legacy_session_sticks_to_its_replica_and_strangers_get_the_fixed_404() {
    legacy_session_on(Topology::Server).await;
}

/// 6, on a Redis Cluster and through Sentinel.
#[tokio::test]
async fn a_legacy_session_on_a_redis_cluster_is_its_owners_alone() {
    legacy_session_on(Topology::Cluster).await;
}

#[tokio::test]
async fn a_legacy_session_through_sentinel_is_its_owners_alone() {
    legacy_session_on(Topology::Sentinel).await;
}

async fn legacy_session_on(topology: Topology) {
    let Some(deployment) = Deployment::start_on("legacy", Inner::Sessions, topology).await else {
        return;
    };
    bounded("the legacy session", async {
        let token = deployment.token("alice");
        let run = run_client(
            Sdk::TypeScript,
            &deployment.front.url,
            &[
                "--token",
                &token,
                "--call",
                r#"echo={"text":"one"}"#,
                "--call",
                r#"uppercase={"text":"two"}"#,
                "--call",
                r#"word_count={"text":"three little words"}"#,
            ],
        )
        .await;
        assert!(run.success, "{run:#?}");
        let connect = run.steps.iter().find(|s| s["step"] == "connect").unwrap();
        assert_eq!(connect["protocol_version"], "2025-11-25", "{run:#?}");
        for (tool, text) in [("echo", "one"), ("uppercase", "TWO"), ("word_count", "3")] {
            assert_eq!(
                step(&run, tool)["result"]["content"][0]["text"],
                text,
                "{run:#?}"
            );
        }

        let log = deployment.front.log();
        let opened: Vec<_> = log.iter().filter(|h| h.opened.is_some()).collect();
        assert_eq!(opened.len(), 1, "one session opened: {log:#?}");
        let (session, home) = (opened[0].opened.clone().unwrap(), opened[0].replica);
        assert_eq!(opened[0].rpc.as_deref(), Some("initialize"));
        let in_session: Vec<_> = log
            .iter()
            .filter(|h| h.session.as_deref() == Some(session.as_str()))
            .collect();
        let calls = in_session
            .iter()
            .filter(|h| h.rpc.as_deref() == Some("tools/call"))
            .count();
        assert_eq!(calls, 3, "every call bore the session: {log:#?}");
        assert!(
            in_session.iter().all(|h| h.replica == home),
            "every request of the session went to the replica that opened it: {log:#?}"
        );
        assert!(
            in_session
                .iter()
                .any(|h| h.http_method == "GET" && h.status == 200),
            "the session's event stream went through the front too: {log:#?}"
        );
        assert_eq!(
            log.len(),
            in_session.len() + 1,
            "nothing but the initialize went without the session: {log:#?}"
        );

        // Another principal bearing that id, sent directly to the other replica.
        let other = &deployment.replicas[1 - home];
        let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();
        let legacy = |id: &str| {
            vec![
                ("mcp-session-id", id.to_owned()),
                ("mcp-protocol-version", "2025-11-25".to_owned()),
            ]
        };
        let mallory = deployment.token("mallory");
        let stolen = deployment
            .post(&other.url, &mallory, &legacy(&session), &ping)
            .await;
        assert_eq!(stolen.status, 404, "{stolen:?}");
        assert_eq!(stolen.body["error"]["code"], -32001, "{stolen:?}");
        assert_eq!(stolen.body["error"]["message"], "Session not found");
        // The fixed answer: byte for byte what an id nobody ever had gets.
        let unknown = deployment
            .post(&other.url, &mallory, &legacy("no-such-session"), &ping)
            .await;
        assert_eq!(
            (stolen.status, &stolen.text),
            (unknown.status, &unknown.text)
        );
        // And the session was alive all along: its owner still uses it on its replica.
        let own = deployment
            .post(
                &deployment.replicas[home].url,
                &token,
                &legacy(&session),
                &ping,
            )
            .await;
        assert_eq!(own.status, 200, "{own:?}");
    })
    .await;
}

/// 7. Stores built from what the application owns: replica A's three stores share one
///    connection made from the application's `redis::Client`, replica B's one made from its
///    `ConnectionManager`. Each store does its job through the gates: a legacy session bound
///    on A is refused to a stranger on B, a state used on B is refused on A, and a call held
///    on A is polled on B.
#[tokio::test]
async fn stores_built_from_the_applications_client_and_manager_serve_both_replicas() {
    let Some(deployment) =
        Deployment::start_with("owned", Inner::Sessions, Connect::Owned, Topology::Server).await
    else {
        return;
    };
    bounded("the owned connections", async {
        let [a, b] = &deployment.replicas;
        // This inner server answers calls in an event stream: its one message.
        let message = |reply: &Reply| -> Value {
            reply
                .text
                .lines()
                .find_map(|line| line.strip_prefix("data: "))
                .and_then(|data| serde_json::from_str(data).ok())
                .unwrap_or_else(|| reply.body.clone())
        };
        let (alice, mallory) = (deployment.token("alice"), deployment.token("mallory"));

        // Sessions: A binds the session its inner server opens; B's store knows its owner.
        let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "owned", "version": "1"}}})
        .to_string();
        let opened = deployment.post(&a.url, &alice, &[], &initialize).await;
        assert_eq!(opened.status, 200, "{opened:?}");
        let session = opened.headers["mcp-session-id"]
            .to_str()
            .expect("a session id")
            .to_owned();
        let mut raw = deployment._redis.server().raw().await;
        let bound: bool = redis::cmd("EXISTS")
            .arg(format!("{{owned}}:session:{session}"))
            .query_async(&mut raw)
            .await
            .expect("EXISTS");
        assert!(bound, "the binding is in Redis");
        let ping = json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}).to_string();
        let legacy = [
            ("mcp-session-id", session.clone()),
            ("mcp-protocol-version", "2025-11-25".to_owned()),
        ];
        let stolen = deployment.post(&b.url, &mallory, &legacy, &ping).await;
        assert_eq!(stolen.status, 404, "{stolen:?}");
        assert_eq!(stolen.body["error"]["message"], "Session not found");
        let own = deployment.post(&a.url, &alice, &legacy, &ping).await;
        assert_eq!(own.status, 200, "{own:?}");

        // Replay: a state asked on A, used on B, is refused on A.
        let (body, headers) = delete_notes(3, None);
        let asked = deployment.post(&a.url, &alice, &headers, &body).await;
        let state = message(&asked)["result"]["requestState"]
            .as_str()
            .unwrap_or_else(|| panic!("a request state: {asked:?}"))
            .to_owned();
        let (body, headers) = delete_notes(4, Some(&state));
        let confirmed = deployment.post(&b.url, &alice, &headers, &body).await;
        assert_eq!(
            message(&confirmed)["result"]["content"][0]["text"],
            "deleted notes.txt",
            "{confirmed:?}"
        );
        let replayed = deployment.post(&a.url, &alice, &headers, &body).await;
        assert_eq!(
            message(&replayed)["error"]["message"],
            "the request state was already used",
            "{replayed:?}"
        );
        assert_eq!(deployment.runs.of("delete_file"), 1);

        // Tasks: a call held on A is waiting when polled on B.
        let params = json!({"name": "deploy", "arguments": {"env": "prod"}});
        let (body, headers) = modern(5, "tools/call", params, "deploy", tasks_capabilities());
        let created = deployment.post(&a.url, &alice, &headers, &body).await;
        assert_eq!(
            message(&created)["result"]["resultType"],
            "task",
            "{created:?}"
        );
        let id = message(&created)["result"]["taskId"]
            .as_str()
            .expect("a task id")
            .to_owned();
        let (body, headers) = modern(
            6,
            "tasks/get",
            json!({"taskId": id.clone()}),
            &id,
            tasks_capabilities(),
        );
        let waiting = deployment.post(&b.url, &alice, &headers, &body).await;
        assert_eq!(
            message(&waiting)["result"]["status"],
            "working",
            "{waiting:?}"
        );
        assert_eq!(deployment.runs.of("deploy"), 0, "a held call does not run");
    })
    .await;
}

/// `tools/call delete_file` on notes.txt from a client that can take a confirmation: the first
/// round, or (with the state it was asked with) the retry that confirms.
fn delete_notes(id: u64, confirming: Option<&str>) -> common::modern::ModernRequest {
    let mut params = json!({"name": "delete_file", "arguments": {"path": "notes.txt"}});
    if let Some(state) = confirming {
        params["requestState"] = json!(state);
        params["inputResponses"] =
            json!({"mcp-gate/confirm": {"action": "accept", "content": {"approve": true}}});
    }
    let form = json!({"elicitation": {"form": {}}});
    modern(id, "tools/call", params, "delete_file", form)
}
