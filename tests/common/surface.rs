//! An rmcp server that serves every surface the layer has to guard, and a recorder of what
//! reaches it.
//!
//! The server really implements each method (it is not a stub that answers anything): tools
//! `echo` and `delete_everything` (whose runs are counted), three resources, the 2026-07-28
//! `subscriptions/listen` (the requested filter is accepted, so rmcp acknowledges it), the
//! legacy `resources/subscribe` / `unsubscribe`, `resources/directory/read` of `demo://`, and
//! the Skills extension (`skills/list`, `skills/get`). It runs in rmcp's legacy session mode,
//! so 2025-11-25 clients get an `Mcp-Session-Id` and 2026-07-28 requests are served
//! statelessly.
//!
//! Between the layer and the rmcp service sits a recorder: every request that gets that far
//! is written down (`POST <json-rpc method>` for a POST, the bare HTTP method otherwise), with
//! the body of every POST and each session id rmcp hands out. A test then says what reached
//! the inner service, not what the layer claims it forwarded.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use axum::routing::any_service;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, GetSkillRequestParams,
    GetSkillResult, JsonObject, ListResourcesResult, ListSkillsResult, ListToolsResult,
    PaginatedRequestParams, ReadResourceDirectoryRequestParams, ReadResourceDirectoryResult,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Resource,
    ResourceContents, ServerCapabilities, ServerConfig, Skill, SkillFrontmatter, SkillResource,
    SkillResources, SubscribeRequestParams, SubscriptionFilter, Tool, UnsubscribeRequestParams,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};

/// A resource anyone may read.
pub const PUBLIC: &str = "demo://public";
/// A resource the tests' policy hides.
pub const SECRET: &str = "demo://secret";
/// Another resource the tests' policy hides.
pub const PAYROLL: &str = "demo://payroll";
/// The directory that holds the three resources (`resources/directory/read`).
pub const DIRECTORY: &str = "demo://";
/// A skill anyone may use.
pub const PUBLIC_SKILL: &str = "skill://public/SKILL.md";
/// A skill the tests' policy hides.
pub const SECRET_SKILL: &str = "skill://secret/SKILL.md";

/// `(uri, name, text)` of each resource.
const RESOURCES: [(&str, &str, &str); 3] = [
    (PUBLIC, "public", "Opening hours: 9 to 5."),
    (SECRET, "secret", "The launch code is 0000."),
    (PAYROLL, "payroll", "Everyone's salary, line by line."),
];

/// `(SKILL.md uri, name, description)` of each skill.
const SKILLS: [(&str, &str, &str); 2] = [
    (
        PUBLIC_SKILL,
        "public",
        "Answer questions about opening hours",
    ),
    (SECRET_SKILL, "secret", "Operate the launch console"),
];

/// The MCP server itself. Every instance rmcp makes shares the same counter.
#[derive(Clone, Default)]
pub struct SurfaceServer {
    deletions: Arc<AtomicU64>,
}

/// `value` as a JSON object (a tool's input schema); panics on anything else.
pub fn object(value: Value) -> JsonObject {
    match value {
        Value::Object(map) => map,
        other => panic!("not a JSON object: {other}"),
    }
}

/// The string argument `text` of a tool call, when it has one.
pub fn text_argument(call: &CallToolRequestParams) -> Option<&str> {
    let arguments = call.arguments.as_ref()?;
    arguments.get("text").and_then(Value::as_str)
}

/// What an rmcp server answers for a tool it does not have.
pub fn no_such_tool(name: &str) -> ErrorData {
    ErrorData::invalid_params(format!("no tool named {name}"), None)
}

/// A tool result holding one text block.
pub fn text_answer(text: String) -> CallToolResponse {
    CallToolResult::success(vec![ContentBlock::text(text)]).into()
}

fn resources() -> Vec<Resource> {
    RESOURCES
        .iter()
        .map(|(uri, name, text)| {
            Resource::new(*uri, *name)
                .with_mime_type("text/plain")
                .with_size(text.len() as u64)
        })
        .collect()
}

/// The text of a skill's `SKILL.md`: frontmatter, then instructions.
fn skill_text(name: &str, description: &str) -> String {
    format!("---\nname: {name}\ndescription: {description}\n---\n\nFollow the house rules.\n")
}

fn skill(uri: &str, name: &str, description: &str) -> Skill {
    let text = skill_text(name, description);
    Skill::new(
        uri,
        SkillFrontmatter::new(name, description),
        SkillResources::Files(vec![SkillResource::from_bytes(uri, text.as_bytes())]),
    )
}

impl ServerHandler for SurfaceServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .enable_resources_subscribe()
                .enable_skills_with_directory_read()
                .build(),
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let echo = object(json!({
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
        }));
        let nothing = object(json!({"type": "object", "properties": {}}));
        Ok(ListToolsResult::with_all_items(vec![
            Tool::new("echo", "Send the text back", echo),
            Tool::new("delete_everything", "Delete every record", nothing),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let text = match &*request.name {
            "echo" => text_argument(&request)
                .ok_or_else(|| ErrorData::invalid_params("echo needs a string `text`", None))?
                .to_owned(),
            "delete_everything" => {
                let runs = self.deletions.fetch_add(1, Ordering::SeqCst) + 1;
                format!("everything deleted (run {runs})")
            }
            other => return Err(no_such_tool(other)),
        };
        Ok(text_answer(text))
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Ok(ListResourcesResult::with_all_items(resources()))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let (uri, _, text) = RESOURCES
            .iter()
            .find(|(uri, _, _)| *uri == request.uri)
            .ok_or_else(|| ErrorData::resource_not_found("no such resource", None))?;
        Ok(ReadResourceResult::new(vec![ResourceContents::text(*text, *uri)]).into())
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        // Everything asked for; rmcp keeps only what the capabilities advertise.
        Some(requested.clone())
    }

    #[allow(deprecated)]
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        if RESOURCES.iter().any(|(uri, _, _)| *uri == request.uri) {
            Ok(())
        } else {
            Err(ErrorData::resource_not_found("no such resource", None))
        }
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        _request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        Ok(())
    }

    async fn list_skills(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListSkillsResult, ErrorData> {
        Ok(ListSkillsResult::with_all_items(
            SKILLS
                .iter()
                .map(|(uri, name, description)| skill(uri, name, description))
                .collect(),
        ))
    }

    async fn get_skill(
        &self,
        request: GetSkillRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetSkillResult, ErrorData> {
        let (uri, name, description) = SKILLS
            .iter()
            .find(|(uri, _, _)| *uri == request.uri)
            .ok_or_else(|| ErrorData::invalid_params("no skill at that uri", None))?;
        Ok(GetSkillResult::new(skill(uri, name, description)))
    }

    async fn read_resource_directory(
        &self,
        request: ReadResourceDirectoryRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceDirectoryResult, ErrorData> {
        if request.uri == DIRECTORY {
            Ok(ListResourcesResult::with_all_items(resources()))
        } else {
            Err(ErrorData::invalid_params("not a directory", None))
        }
    }
}

/// What reached the inner service, in order.
#[derive(Clone, Default)]
pub struct Reached {
    /// `POST <method>` for each POST (`POST response` for a JSON-RPC response, `POST ?` for
    /// a body that is not a JSON-RPC message), the HTTP method alone for anything else.
    pub log: Arc<Mutex<Vec<String>>>,
    /// The body of each POST, as received.
    pub bodies: Arc<Mutex<Vec<String>>>,
    /// Each `Mcp-Session-Id` rmcp handed out in answer to `initialize`.
    pub sessions: Arc<Mutex<Vec<String>>>,
}

impl Reached {
    /// The log so far.
    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    /// How many log entries are exactly `entry`.
    pub fn count(&self, entry: &str) -> usize {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|e| *e == entry)
            .count()
    }

    /// Whether some POST body that reached the server contains `text`.
    pub fn any_body_contains(&self, text: &str) -> bool {
        self.bodies.lock().unwrap().iter().any(|b| b.contains(text))
    }

    /// The session ids handed out so far.
    pub fn sessions(&self) -> Vec<String> {
        self.sessions.lock().unwrap().clone()
    }

    async fn record(self, request: Request, next: Next) -> Response {
        let (parts, body) = request.into_parts();
        let bytes = axum::body::to_bytes(body, 16 << 20)
            .await
            .expect("the recorder reads the forwarded body");
        let mut initialize = false;
        let entry = if parts.method == http::Method::POST {
            let text = String::from_utf8_lossy(&bytes).into_owned();
            let method = match serde_json::from_slice::<Value>(&bytes) {
                Ok(message) => match message.get("method").and_then(Value::as_str) {
                    Some(method) => method.to_owned(),
                    None if message.get("id").is_some() => "response".to_owned(),
                    None => "?".to_owned(),
                },
                Err(_) => "?".to_owned(),
            };
            initialize = method == "initialize";
            self.bodies.lock().unwrap().push(text);
            format!("POST {method}")
        } else {
            parts.method.to_string()
        };
        self.log.lock().unwrap().push(entry);
        let response = next
            .run(Request::from_parts(parts, Body::from(bytes)))
            .await;
        if initialize
            && let Some(id) = response
                .headers()
                .get("mcp-session-id")
                .and_then(|v| v.to_str().ok())
        {
            self.sessions.lock().unwrap().push(id.to_owned());
        }
        response
    }
}

impl Reached {
    /// `router` behind this recorder: for a test that serves its own MCP server and wants to
    /// know what reached it.
    pub fn around(&self, router: Router) -> Router {
        let reached = self.clone();
        router.layer(axum::middleware::from_fn(move |request, next| {
            reached.clone().record(request, next)
        }))
    }
}

/// The server, its recorder, and the count of `delete_everything` runs.
#[derive(Clone, Default)]
pub struct Surface {
    pub reached: Reached,
    pub deletions: Arc<AtomicU64>,
}

impl Surface {
    pub fn new() -> Self {
        Self::default()
    }

    /// How many times `delete_everything` ran.
    pub fn deletions(&self) -> u64 {
        self.deletions.load(Ordering::SeqCst)
    }

    fn service(&self) -> StreamableHttpService<SurfaceServer, LocalSessionManager> {
        let deletions = self.deletions.clone();
        StreamableHttpService::new(
            move || {
                Ok(SurfaceServer {
                    deletions: deletions.clone(),
                })
            },
            Arc::new(LocalSessionManager::default()),
            // Legacy session mode (the default): 2025-11-25 clients get sessions.
            StreamableHttpServerConfig::default(),
        )
    }

    fn recorded(&self, router: Router) -> Router {
        let reached = self.reached.clone();
        router.layer(axum::middleware::from_fn(move |request, next| {
            reached.clone().record(request, next)
        }))
    }

    /// `/mcp`, any HTTP method, to the rmcp service through the recorder.
    pub fn router(&self) -> Router {
        self.recorded(Router::new().route("/mcp", any_service(self.service())))
    }

    /// Like [`Surface::router`], with the application's CORS handling in front of the rmcp
    /// service (behind the recorder): a browser's preflight is answered there.
    pub fn router_with_cors(&self) -> Router {
        let cors = tower_http::cors::CorsLayer::new()
            .allow_origin(tower_http::cors::Any)
            .allow_methods([http::Method::POST, http::Method::GET, http::Method::DELETE])
            .allow_headers(tower_http::cors::Any);
        self.recorded(
            Router::new()
                .route("/mcp", any_service(self.service()))
                .layer(cors),
        )
    }
}
