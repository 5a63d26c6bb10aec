//! Cedar schemas made from a server's own `tools/list`, offline, with cedar-for-agents'
//! generator (`cedar-policy-mcp-schema-generator`): one action per tool, the tool's
//! `inputSchema` as the action's `context.input`, principals and resources from the stub's
//! `@mcp_principal` / `@mcp_resource` annotations, and one context field per `@mcp_context`
//! type (the gate's `gate`, the hook's `app`).
//!
//! The generator runs with one setting changed from its default: objects become records
//! (`objects_as_records`), so that a tool's nested arguments are plain Cedar records the layer
//! can type from the call's JSON without minting entities for them. Policies written for its
//! tooling with the same setting apply unchanged.

use cedar_policy_mcp_schema_generator::{SchemaGenerator, SchemaGeneratorConfig};
use mcp_tools_sdk::description::ServerDescription;

use super::load::CedarError;

/// A stub with what the layer's mapping needs, to copy and extend: `User` (with the claims
/// you select), `McpServer`, `Resource`, `Prompt`, `Task`, the `gate` context, an empty `app`
/// context for the hook's attributes, and the non-tool methods as actions. Rename the
/// namespace at will.
pub const GATE_SCHEMA_STUB: &str = include_str!("stub.cedarschema");

/// Generates a Cedar schema from `stub` (Cedar schema syntax, one namespace) and
/// `tools_list` (a `tools/list` result or response, as JSON text).
///
/// ```
/// use mcp_gate::policy::cedar::{GATE_SCHEMA_STUB, generate_schema};
///
/// let tools = r#"{"tools": [{"name": "echo", "description": "Echo", "inputSchema": {"type": "object",
///     "properties": {"text": {"type": "string"}}, "required": ["text"]}}]}"#;
/// let schema = generate_schema(GATE_SCHEMA_STUB, tools)?;
/// assert!(schema.contains(r#"action "echo""#), "{schema}");
/// # Ok::<_, mcp_gate::policy::cedar::CedarError>(())
/// ```
pub fn generate_schema(stub: &str, tools_list: &str) -> Result<String, CedarError> {
    let failed = |file: &str, message: String| CedarError::Schema {
        file: file.to_owned(),
        message,
    };
    // The generator reads a JSON-RPC response; accept the bare result too.
    let value: serde_json::Value =
        serde_json::from_str(tools_list).map_err(|e| failed("tools/list", e.to_string()))?;
    let result = value.get("result").unwrap_or(&value);
    let tools = result.get("tools").ok_or_else(|| {
        failed(
            "tools/list",
            "expected a tools/list result: {\"tools\": [...]}".into(),
        )
    })?;
    let response = serde_json::json!({"result": {"tools": tools}});
    let description = ServerDescription::from_json_str(&response.to_string())
        .map_err(|e| failed("tools/list", e.to_string()))?;
    let config = SchemaGeneratorConfig::default().objects_as_records(true);
    let mut generator = SchemaGenerator::from_cedarschema_str_with_config(stub, config)
        .map_err(|e| failed("stub", e.to_string()))?;
    generator
        .add_actions_from_server_description(&description)
        .map_err(|e| failed("generated", e.to_string()))?;
    generator
        .get_schema()
        .clone()
        .to_cedarschema()
        .map_err(|e| failed("generated", e.to_string()))
}
