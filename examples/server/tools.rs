//! The MCP server behind the layer in the example: an rmcp server with two tools.

use rmcp::handler::server::tool::Extension;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
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

/// The example's MCP server.
#[derive(Clone, Default)]
pub struct DemoServer;

#[tool_router(server_handler)]
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
    StreamableHttpService::new(
        || Ok(DemoServer),
        Default::default(),
        StreamableHttpServerConfig::default()
            .with_legacy_session_mode(false)
            .with_json_response(true),
    )
}
