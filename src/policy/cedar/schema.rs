//! Cedar schemas made from a server's own `tools/list`, offline, with cedar-for-agents'
//! generator (`cedar-policy-mcp-schema-generator`): one action per tool, the tool's
//! `inputSchema` as the action's `context.input`, principals and resources from the stub's
//! `@mcp_principal` / `@mcp_resource` annotations, and one context field per `@mcp_context`
//! type (the gate's `gate`, the hook's `app`).
//!
//! The generator runs with two settings changed from its defaults: objects become records
//! (`objects_as_records`), so that a tool's nested arguments are plain Cedar records the layer
//! can type from the call's JSON without minting entities for them; and JSON `number`s become
//! `decimal`s (`encode_numbers_as_decimal`), which policies can compare (`.greaterThan`). The
//! layer passes a `number` argument as an exact decimal and denies one with more than four
//! decimal places rather than round it. Policies written for cedar-for-agents' tooling with
//! the same settings apply unchanged.

use cedar_policy_mcp_schema_generator::{SchemaGenerator, SchemaGeneratorConfig};
use mcp_tools_sdk::description::ServerDescription;

use crate::error::CedarError;

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
    let config = SchemaGeneratorConfig::default()
        .objects_as_records(true)
        .encode_numbers_as_decimal(true);
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::Principal;
    use crate::policy::cedar::CedarPolicy;
    use crate::policy::{Decision, Evaluation, Policy};

    /// A generated schema types real arguments of every JSON kind the generator maps.
    #[tokio::test]
    async fn generated_schemas_type_real_arguments() {
        let input_schema = json!({"type": "object", "properties": {
            "text": {"type": "string"}, "count": {"type": "integer"}, "flag": {"type": "boolean"}, "price": {"type": "number"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "meta": {"type": "object", "properties": {"note": {"type": "string"}}, "required": ["note"]},
        }, "required": ["text", "count"]});
        let tools =
            json!({"tools": [{"name": "t", "description": "d", "inputSchema": input_schema}]});
        let schema = generate_schema(GATE_SCHEMA_STUB, &tools.to_string()).expect("generates");
        let policy = CedarPolicy::builder()
            .schema_text("schema", schema.clone())
            .policies_text(
                "p.cedar",
                r#"permit(principal, action == Gate::Action::"t", resource)
                   when { context.input.count > 2 && context.input.text like "a*"
                          && context.input has tags && context.input.tags.contains("x")
                          && context.input has meta && context.input.meta.note == "n"
                          && (if context.input has price then context.input.price.greaterThan(decimal("1.0")) else true) };"#,
            )
            .build()
            .unwrap_or_else(|e| panic!("{e}\n{schema}"));
        let principal = Principal::builder()
            .issuer("https://as.example")
            .subject("s")
            .build()
            .unwrap();
        let call = |arguments: serde_json::Value| {
            Evaluation::builder(principal.clone())
                .tool("t", arguments)
                .input_schema(input_schema.clone())
                .build()
                .unwrap()
        };
        let allowed = call(
            json!({"text": "ab", "count": 3, "flag": true, "tags": ["x"], "meta": {"note": "n"}}),
        );
        assert_eq!(policy.evaluate(allowed).await.unwrap(), Decision::allow());
        let denied = call(json!({"text": "ab", "count": 1}));
        assert_eq!(
            policy.evaluate(denied).await.unwrap(),
            Decision::undisclosed("You are not allowed to do this.")
        );
        let priced = call(
            json!({"text": "ab", "count": 3, "tags": ["x"], "meta": {"note": "n"}, "price": 1.5}),
        );
        assert_eq!(
            policy.evaluate(priced).await.unwrap(),
            Decision::allow(),
            "a number is a decimal"
        );
        let too_precise = call(
            json!({"text": "ab", "count": 3, "tags": ["x"], "meta": {"note": "n"}, "price": 1.23456}),
        );
        assert_eq!(
            policy.evaluate(too_precise).await.unwrap(),
            Decision::undisclosed("The request does not match the authorization schema.")
        );
        let mistyped = call(json!({"text": "ab", "count": "3"}));
        assert_eq!(
            policy.evaluate(mistyped).await.unwrap(),
            Decision::undisclosed("The request does not match the authorization schema.")
        );
    }
}
