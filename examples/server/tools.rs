//! The MCP server behind the layer in the example: an rmcp server with a dozen tools, three
//! prompts and three resources.

use rmcp::handler::server::router::prompt::PromptRouter;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::Extension;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    ListResourcesResult, PaginatedRequestParams, PromptMessage, ReadResourceRequestParams,
    ReadResourceResponse, ReadResourceResult, Resource, ResourceContents, Role, ServerCapabilities,
    ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{
    ErrorData, RoleServer, ServerHandler, prompt, prompt_handler, prompt_router, tool_handler,
};
use rmcp::{schemars, tool, tool_router};
use serde::Deserialize;

/// Arguments of `echo`.
#[derive(Deserialize, schemars::JsonSchema)]
pub struct EchoArgs {
    /// The text to send back.
    pub text: String,
}

/// Arguments of `transfer`.
#[derive(Deserialize, schemars::JsonSchema)]
pub struct TransferArgs {
    /// Amount, as a decimal string ("40.00").
    pub amount: String,
    /// ISO 4217 currency code.
    pub currency: String,
    /// The creditor's IBAN.
    pub iban: String,
}

/// Arguments of `add`.
#[derive(Deserialize, schemars::JsonSchema)]
pub struct AddArgs {
    /// First term.
    pub a: i64,
    /// Second term.
    pub b: i64,
}

/// Arguments of `share_folder`.
#[derive(Deserialize, schemars::JsonSchema)]
pub struct ShareArgs {
    /// The folder to share.
    pub folder: String,
}

/// Arguments of `delete_file`.
#[derive(Deserialize, schemars::JsonSchema)]
pub struct DeleteArgs {
    /// The file to delete.
    pub path: String,
}

/// Arguments of `deploy`.
#[derive(Deserialize, schemars::JsonSchema)]
pub struct DeployArgs {
    /// The environment to deploy to (`staging`, `prod`, ...).
    pub env: String,
}

/// How many times `deploy` has run, shared by every server a service makes.
pub type DeployCount = std::sync::Arc<std::sync::atomic::AtomicU64>;

/// Arguments of the `greet` prompt.
#[derive(Deserialize, schemars::JsonSchema)]
pub struct GreetArgs {
    /// Who to greet.
    pub who: String,
}

/// The example's MCP server.
#[derive(Clone)]
pub struct DemoServer {
    tool_router: ToolRouter<Self>,
    prompt_router: PromptRouter<Self>,
    deploys: DeployCount,
}

impl Default for DemoServer {
    fn default() -> Self {
        Self::counting(DeployCount::default())
    }
}

impl DemoServer {
    /// A server whose `deploy` runs are counted in `deploys`.
    pub fn counting(deploys: DeployCount) -> Self {
        Self {
            tool_router: Self::tool_router(),
            prompt_router: Self::prompt_router(),
            deploys,
        }
    }
}

/// The resources the example serves: `(uri, name, text)`.
const RESOURCES: [(&str, &str, &str); 3] = [
    ("demo://readme", "readme", "This is the example server."),
    ("demo://changelog", "changelog", "0.1.0: first release."),
    ("demo://payroll", "payroll", "Salaries: confidential."),
];

#[prompt_router]
impl DemoServer {
    /// A greeting.
    #[prompt(description = "Greet someone")]
    async fn greet(
        &self,
        Parameters(GreetArgs { who }): Parameters<GreetArgs>,
    ) -> Vec<PromptMessage> {
        vec![PromptMessage::new_text(
            Role::User,
            format!("Say hello to {who}."),
        )]
    }

    /// A summary request.
    #[prompt(description = "Summarize the day")]
    async fn summarize(&self) -> Vec<PromptMessage> {
        vec![PromptMessage::new_text(
            Role::User,
            "Summarize today's work.",
        )]
    }

    /// Only for administrators under the example policy.
    #[prompt(description = "Draft a layoff announcement")]
    async fn layoffs(&self) -> Vec<PromptMessage> {
        vec![PromptMessage::new_text(
            Role::User,
            "Draft the announcement.",
        )]
    }
}

#[tool_handler(router = self.tool_router)]
#[prompt_handler(router = self.prompt_router)]
impl ServerHandler for DemoServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_prompts()
                .enable_resources()
                .build(),
        )
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Ok(ListResourcesResult::with_all_items(
            RESOURCES
                .iter()
                .map(|(uri, name, _)| Resource::new(*uri, *name))
                .collect(),
        ))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        match RESOURCES.iter().find(|(uri, _, _)| *uri == request.uri) {
            Some((uri, _, text)) => {
                Ok(ReadResourceResult::new(vec![ResourceContents::text(*text, *uri)]).into())
            }
            None => Err(ErrorData::resource_not_found("no such resource", None)),
        }
    }
}

#[tool_router]
impl DemoServer {
    /// Sends the text back.
    #[tool(description = "Echo the given text back")]
    fn echo(&self, Parameters(EchoArgs { text }): Parameters<EchoArgs>) -> String {
        text
    }

    /// Pretends to move money. The policy lets it run only with a payment-specific credential.
    #[tool(description = "Transfer money to an account")]
    fn transfer(&self, Parameters(args): Parameters<TransferArgs>) -> String {
        format!(
            "transferred {} {} to {}",
            args.amount, args.currency, args.iban
        )
    }

    /// Never allowed by the example policy.
    #[tool(
        description = "Delete every record",
        annotations(destructive_hint = true)
    )]
    fn delete_everything(&self) -> String {
        "everything deleted".to_owned()
    }

    /// Needs scope `mcp:admin` under the example policy.
    #[tool(description = "An administrative report")]
    fn admin_report(&self) -> String {
        "admin report: all systems nominal".to_owned()
    }

    /// Hidden behind an undisclosed denial under the example policy.
    #[tool(description = "The secret recipe")]
    fn secret_sauce(&self) -> String {
        "mayonnaise, ketchup, relish".to_owned()
    }

    /// Shares a folder; the policy wants an approval at a URL first.
    #[tool(description = "Share a folder with the team")]
    fn share_folder(&self, Parameters(ShareArgs { folder }): Parameters<ShareArgs>) -> String {
        format!("shared folder {folder}")
    }

    /// Deletes a file; the policy asks the user to confirm first.
    #[tool(description = "Delete a file", annotations(destructive_hint = true))]
    fn delete_file(&self, Parameters(DeleteArgs { path }): Parameters<DeleteArgs>) -> String {
        format!("deleted {path}")
    }

    /// Upper-cases a text.
    #[tool(description = "Upper-case a text")]
    fn uppercase(&self, Parameters(EchoArgs { text }): Parameters<EchoArgs>) -> String {
        text.to_uppercase()
    }

    /// Counts words.
    #[tool(description = "Count the words of a text")]
    fn word_count(&self, Parameters(EchoArgs { text }): Parameters<EchoArgs>) -> String {
        text.split_whitespace().count().to_string()
    }

    /// The current time, for everyone.
    #[tool(description = "The server's clock")]
    fn now(&self) -> String {
        format!("{:?}", std::time::SystemTime::now())
    }

    /// Adds two numbers.
    #[tool(description = "Add two integers")]
    fn add(&self, Parameters(AddArgs { a, b }): Parameters<AddArgs>) -> String {
        a.saturating_add(b).to_string()
    }

    /// Deploys (pretends to): the policy holds every call for an out-of-band approval.
    #[tool(description = "Deploy the service to an environment")]
    fn deploy(&self, Parameters(DeployArgs { env }): Parameters<DeployArgs>) -> String {
        let run = self
            .deploys
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            + 1;
        format!("deployed to {env} (deploy run #{run} of this server)")
    }

    /// Describes the verified caller, as the layer handed it over.
    #[tool(description = "Who is calling, as verified by the gateway")]
    fn whoami(&self, Extension(parts): Extension<http::request::Parts>) -> String {
        match parts.extensions.get::<mcp_gate::Principal>() {
            Some(principal) => serde_json::json!({
                "issuer": principal.issuer(),
                "subject": principal.subject(),
                "client_id": principal.client_id(),
                "scopes": principal.scopes(),
                "saw_authorization_header": parts.headers.contains_key(http::header::AUTHORIZATION),
            })
            .to_string(),
            None => "no verified principal".to_owned(),
        }
    }
}

/// The rmcp Streamable HTTP service, stateless and answering in JSON.
pub fn mcp_service() -> StreamableHttpService<DemoServer, LocalSessionManager> {
    mcp_service_counting(DeployCount::default())
}

/// [`mcp_service`], counting `deploy` runs in `deploys`.
pub fn mcp_service_counting(
    deploys: DeployCount,
) -> StreamableHttpService<DemoServer, LocalSessionManager> {
    StreamableHttpService::new(
        move || Ok(DemoServer::counting(deploys.clone())),
        Default::default(),
        StreamableHttpServerConfig::default()
            .with_legacy_session_mode(false)
            .with_json_response(true),
    )
}
