//! Confirmed `deploy` calls, for the tests of single use: a policy that asks before every
//! deploy, the modern request that can be asked (it declares form elicitation), and the
//! answer that confirms.

use std::convert::Infallible;

use mcp_gate::policy::{Decision, Evaluation};
use serde_json::{Value, json};

use super::peers::{GatedServer, Reply};

/// Every `deploy` needs the user's confirmation; everything else is allowed.
pub async fn confirm_deploys(evaluation: Evaluation) -> Result<Decision, Infallible> {
    Ok(match evaluation.tool() {
        Some("deploy") => Decision::ask("Deploy now?"),
        _ => Decision::allow(),
    })
}

/// A modern `deploy` to `prod` declaring form elicitation, with `extra` params.
pub async fn deploy(server: &GatedServer, token: &str, extra: Value) -> Reply {
    let mut params = json!({"name": "deploy", "arguments": {"env": "prod"},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}}}});
    if let (Some(params), Value::Object(extra)) = (params.as_object_mut(), extra) {
        params.extend(extra);
    }
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
    let headers = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "deploy"),
    ];
    server.post(Some(token), &headers, &body.to_string()).await
}

/// The params of the retry that confirms with `state`.
pub fn confirmed(state: &str) -> Value {
    json!({"requestState": state,
           "inputResponses": {"mcp-gate/confirm": {"action": "accept", "content": {"approve": true}}}})
}
