//! The example policy as a Cedar policy set (`--cedar examples/server/cedar`, feature `cedar`):
//! the same decisions as [`DemoPolicy`](super::policy::DemoPolicy), written as data in
//! `cedar/policies.cedar`, validated against `cedar/schema.cedarschema`.
//!
//! Cedar judges the request; what it cannot know is the application's own state. The context
//! hook here supplies it as `context.app`, computed exactly as `DemoPolicy` computes it:
//!
//! | attribute | for | value |
//! |---|---|---|
//! | `payment_covered` | `transfer` | the token's `authorization_details` cover [`payment_details`] of this call |
//! | `share_approved` | `share_folder` | the caller approved sharing this folder ([`Approvals::is_approved`]) |
//! | `approval_url` | `share_folder`, not approved | `<origin>/approve/<id>` of the pending approval ([`Approvals::request`]) |
//!
//! Outside a call of its tool (other tools, lists) an attribute holds its default: `false`,
//! `false`, `""`. `tests/cedar/equivalence.rs` proves the two policies answer alike.

use std::path::Path;

use mcp_gate::ConfigError;
use mcp_gate::policy::cedar::CedarPolicy;
use mcp_gate::policy::{Evaluation, Phase, authorization_details_cover};
use serde_json::{Value, json};

use super::approvals::Approvals;
use super::policy::payment_details;

/// The id of the `McpServer` resource the example's tool calls are made on.
pub const SERVER: &str = "example";

/// The policy set in `dir`, with the context hook over `approvals`; approval pages live at
/// `origin` (`http://127.0.0.1:8080`).
pub fn cedar_policy(
    dir: &Path,
    approvals: Approvals,
    origin: impl Into<String>,
) -> Result<CedarPolicy, ConfigError> {
    let origin = origin.into();
    CedarPolicy::builder()
        .directory(dir)
        .server(SERVER)
        .context_hook(move |evaluation| {
            let app = app_context(&evaluation, &approvals, &origin);
            std::future::ready(app)
        })
        .build()
}

/// `context.app` for one evaluation.
pub fn app_context(evaluation: &Evaluation, approvals: &Approvals, origin: &str) -> Value {
    let (mut payment_covered, mut share_approved, mut approval_url) = (false, false, String::new());
    // Lists (phase discovery) carry no arguments: every attribute keeps its default there.
    if evaluation.phase() == Phase::Discovery {
        return app(payment_covered, share_approved, approval_url);
    }
    let empty = serde_json::Map::new();
    let arguments = evaluation.arguments().unwrap_or(&empty);
    let principal = evaluation.principal();
    match evaluation.tool() {
        Some("transfer") => {
            // The token must cover this very payment: one minted for 40 EUR does not cover 400.
            let needed = [payment_details(arguments)];
            payment_covered =
                authorization_details_cover(principal.authorization_details(), &needed);
        }
        Some("share_folder") => {
            let subject = principal.subject().unwrap_or("");
            let folder = arguments
                .get("folder")
                .and_then(Value::as_str)
                .unwrap_or("");
            // Whatever the client answered, only our own record counts.
            share_approved = approvals.is_approved(subject, folder);
            if !share_approved {
                // As DemoPolicy does: a pending approval is registered (or found) only when
                // the call is not approved yet.
                let id = approvals.request(subject, folder);
                approval_url = format!("{origin}/approve/{id}");
            }
        }
        _ => {}
    }
    app(payment_covered, share_approved, approval_url)
}

fn app(payment_covered: bool, share_approved: bool, approval_url: String) -> Value {
    json!({
        "payment_covered": payment_covered,
        "share_approved": share_approved,
        "approval_url": approval_url,
    })
}
