//! The evaluate seam through the real stack: `oidc-provider` tokens, the layer with the example
//! policy in front of rmcp, and the official SDK clients. The TypeScript SDK speaks legacy MCP
//! (2025-11-25, `initialize`); the Python SDK speaks modern MCP (2026-07-28, per-request
//! `_meta`). Each test asserts what the client itself surfaces for every kind of decision.

use crate::common;

use common::clients::{
    EVERY_DECISION, assert_admin_report, assert_echo_allowed, calling, credentials_args,
    demo_server, read_scope_args,
};
use common::peers::{AuthServer, Sdk, assert_credential_challenge, run_client};
use mcp_gate::denial::ENVELOPE_KEY;
use serde_json::Value;

fn envelope(step: &Value) -> &Value {
    &step["result"]["_meta"][ENVELOPE_KEY]
}

#[tokio::test]
async fn typescript_sdk_legacy_client_sees_every_decision() {
    let auth = AuthServer::start(&[]).await;
    let server = demo_server(&auth).await;
    let args = read_scope_args(&auth, &["--step-up", "--no-list"]);
    let run = run_client(
        Sdk::TypeScript,
        &server.url,
        &calling(args, &EVERY_DECISION),
    )
    .await;
    assert_eq!(run.step("connect")["ok"], true, "{run:#?}");

    // Allowed.
    assert_echo_allowed(&run);

    // Scope step-up: a 403 naming every scope the call needs, then, with the wider token, success.
    let admin = run.calls("admin_report");
    assert_eq!(admin[0]["ok"], false);
    assert_eq!(admin[0]["error"]["http_status"], 403);
    assert_eq!(run.step("step-up")["scope"], "mcp:read mcp:admin");
    assert_eq!(admin[1]["ok"], true, "{run:#?}");
    assert_eq!(
        admin[1]["result"]["content"][0]["text"],
        "admin report: all systems nominal"
    );

    // unavailable and undisclosed: a tool error the SDK hands back, with the envelope and no
    // `resultType` (a legacy client never sees one).
    for (tool, remediation, text) in [
        (
            "delete_everything",
            "unavailable",
            "Deleting everything is never allowed.",
        ),
        ("secret_sauce", "undisclosed", "You cannot use this tool."),
    ] {
        let step = run.calls(tool)[0];
        assert_eq!(step["ok"], true, "{step}");
        assert_eq!(step["result"]["isError"], true);
        assert_eq!(step["result"]["content"][0]["text"], text);
        assert!(step["result"].get("resultType").is_none(), "{step}");
        let envelope = envelope(step);
        assert_eq!(envelope["reason"], "insufficient_authorization");
        assert_eq!(envelope["remediation"], remediation);
        assert!(
            envelope["authorizationContextId"]
                .as_str()
                .is_some_and(|id| id.starts_with("actx_"))
        );
        assert!(envelope.get("remediationHints").is_none());
    }

    // Credential remedy: the SDK re-authorizes once, gets the same challenge, and surfaces a 401.
    let transfer = run.calls("transfer")[0];
    assert_eq!(transfer["ok"], false);
    assert_eq!(transfer["error"]["http_status"], 401);
    assert_credential_challenge(&run);
}

#[tokio::test]
async fn python_sdk_modern_client_sees_every_decision() {
    let auth = AuthServer::start(&[]).await;
    let server = demo_server(&auth).await;
    let args = credentials_args(&auth, &["--no-list"]);
    let run = run_client(Sdk::Python, &server.url, &calling(args, &EVERY_DECISION)).await;
    let connect = run.step("connect");
    assert_eq!(connect["ok"], true, "{run:#?}");
    assert_eq!(
        connect["protocol_version"], "2026-07-28",
        "the Python SDK speaks modern MCP"
    );

    assert_echo_allowed(&run);

    // Scope step-up, completed by the SDK itself: 403, a token for the union, then success.
    let admin = run.calls("admin_report")[0];
    assert_admin_report(admin, &run);
    let forbidden = run
        .http
        .iter()
        .find(|h| h["status"] == 403)
        .expect("a 403 before the step-up");
    assert!(
        forbidden["www_authenticate"]
            .as_str()
            .is_some_and(|c| c.contains("scope=\"mcp:admin mcp:read\"")),
        "{forbidden}"
    );
    let stepped_up = run.asked_for_scopes(&auth.token_endpoint, &["mcp:admin", "mcp:read"]);
    assert!(
        stepped_up,
        "the SDK asked for the union of scopes: {run:#?}"
    );

    // unavailable and undisclosed, with `resultType: "complete"` (modern).
    for (tool, remediation) in [
        ("delete_everything", "unavailable"),
        ("secret_sauce", "undisclosed"),
    ] {
        let step = run.calls(tool)[0];
        assert_eq!(step["ok"], true, "{step}");
        assert_eq!(step["result"]["isError"], true);
        assert_eq!(step["result"]["resultType"], "complete");
        assert_eq!(envelope(step)["remediation"], remediation);
    }

    let transfer = run.calls("transfer")[0];
    assert_eq!(transfer["ok"], false);
    assert_eq!(transfer["error"]["http_status"], 401);
    assert_credential_challenge(&run);
}
