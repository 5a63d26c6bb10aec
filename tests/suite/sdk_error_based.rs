//! The error-based SEP-2643 revision (`1c5b0cec…`) through the real stack: `oidc-provider`
//! tokens, the layer with the example policy in front of rmcp, and the official SDK clients
//! (TypeScript SDK 1.32.2 speaking legacy 2025-11-25, Python SDK 2.3.0 speaking modern
//! 2026-07-28 or, with `--mode legacy`, 2025-11-25). Every denial is now a JSON-RPC error
//! (`-32003`, or `-32042` for a URL remedy in a legacy session that declared
//! `elicitation.url`) with `error.data.authorization`; each test asserts what the client
//! itself surfaces for it, and the raw exchange where the SDK hides part of it.
//!
//! A legacy session's capabilities reach the layer only through the `Mcp-Session-Id` the inner
//! server hands out. The example server (`GatedServer::start_demo`) runs rmcp without
//! sessions, so the URL-elicitation tests serve the same demo policy and tools with rmcp in its
//! default session mode (and check that, without a session, the same client gets the plain
//! error).

use crate::common;

use std::sync::Arc;

use axum::Router;
use common::clients::{
    EVERY_DECISION, assert_admin_report, assert_echo_allowed, calling, credentials_args,
};
use common::peers::{
    AuthServer, ClientRun, GatedServer, Sdk, assert_credential_challenge, run_client,
};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Value, json};

const REVISION: &str = "1c5b0cec97691cb9db3d880474a71d604d6addee";
const SHARE: &str = r#"share_folder={"folder":"reports"}"#;
/// The demo policy's message for `share_folder {"folder":"reports"}`.
const SHARE_MESSAGE: &str = "Approve sharing folder reports, then try again.";
const SCOPE_MESSAGE: &str = "the token lacks scopes this resource needs";
const TRANSFER_MESSAGE: &str = "This transfer needs a payment-specific authorization.";
/// The 2025-11-25 `URLElicitationRequiredError` code.
const URL_ELICITATION_REQUIRED: i64 = -32042;
/// The denial code of this revision (the text's placeholder, as the crate fills it by default).
const DENIAL: i64 = -32003;

/// The example server (rmcp stateless, JSON answers), in the error-based revision.
async fn demo_server(auth: &AuthServer) -> GatedServer {
    let issuer = auth.issuer.clone();
    GatedServer::start_demo(|builder| {
        builder
            .issuer(issuer.as_str())
            .required_scopes(["mcp:read"])
            .revision(REVISION)
    })
    .await
}

/// [`demo_server`] with rmcp in its default mode: legacy sessions (`Mcp-Session-Id`), answers
/// as Server-Sent Events. Otherwise what `GatedServer::start_demo` builds.
async fn demo_server_with_sessions(auth: &AuthServer) -> GatedServer {
    let issuer = auth.issuer.clone();
    let approvals = common::approvals::Approvals::default();
    let pages = approvals.clone();
    let service = StreamableHttpService::new(
        || Ok(common::tools::DemoServer::default()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    GatedServer::start_full(
        |resource| {
            let origin = resource.trim_end_matches("/mcp").to_owned();
            mcp_gate::Gate::builder()
                .evaluate(common::policy::DemoPolicy::new(approvals, origin))
                .development_mode()
                .issuer(issuer.as_str())
                .required_scopes(["mcp:read"])
                .revision(REVISION)
        },
        Router::new().nest_service("/mcp", service),
        move |gate| pages.router(gate.clone()),
    )
    .await
}

/// client_credentials through discovery, no `tools/list`, then `extra`.
fn client_args<'a>(auth: &'a AuthServer, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = credentials_args(auth, &["--no-list"]);
    args.extend_from_slice(extra);
    args
}

/// The demo policy's two refusals without a remedy, with their messages.
const REFUSED_OUTRIGHT: [(&str, &str); 2] = [
    ("delete_everything", "Deleting everything is never allowed."),
    ("secret_sauce", "You cannot use this tool."),
];

/// The first call of `tool` in `run`, which failed with an error and no result.
fn failed_call<'a>(run: &'a ClientRun, tool: &str) -> &'a Value {
    let step = run.calls(tool)[0];
    assert_eq!(step["ok"], false, "{step}");
    assert!(step.get("result").is_none(), "{step}");
    step
}

/// The `data` of a `-32042`: the envelope with its url hint, beside the elicitations, which
/// point at `server`'s approval pages.
async fn assert_url_required_data(data: &Value, server: &GatedServer) {
    assert_eq!(
        sorted_keys(data),
        ["authorization", "elicitations"],
        "{data}"
    );
    let context_id = assert_envelope(&data["authorization"], Some(json!([{"type": "url"}])));
    assert_url_elicitations(&data["elicitations"], &context_id, server).await;
}

/// The layer asked for nothing over the session: no `elicitation/create` reached the client.
fn assert_nothing_elicited(run: &ClientRun) {
    assert!(
        run.steps.iter().all(|s| s.get("elicit").is_none()),
        "{run:#?}"
    );
}

/// `run`'s `share_folder` step in a legacy session, which failed.
fn legacy_share_failed(run: &ClientRun) -> &Value {
    assert_connected(run, "2025-11-25");
    let step = run.calls("share_folder")[0];
    assert_eq!(step["ok"], false, "{run:#?}");
    step
}

/// The error of `run`'s `share_folder` in a legacy session: a `-32042` raised as `class`.
fn url_elicitation_error<'a>(run: &'a ClientRun, class: &str) -> &'a Value {
    let error = &legacy_share_failed(run)["error"];
    assert_eq!(error["class"], class, "{error}");
    assert_eq!(error["code"], URL_ELICITATION_REQUIRED);
    error
}

fn assert_connected(run: &ClientRun, protocol_version: &str) {
    let connect = run
        .steps
        .iter()
        .find(|s| s["step"] == "connect")
        .unwrap_or_else(|| panic!("no connect step: {run:#?}"));
    assert_eq!(connect["ok"], true, "{run:#?}");
    assert_eq!(connect["protocol_version"], protocol_version, "{run:#?}");
}

fn sorted_keys(value: &Value) -> Vec<&str> {
    let mut keys: Vec<&str> = value
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {value}"))
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    keys
}

/// `error.data.authorization` of this revision: exactly `reason` and an `actx_` context id,
/// plus `remediationHints` equal to `hints` when given; never `remediation`. Returns the id.
fn assert_envelope(authorization: &Value, hints: Option<Value>) -> String {
    let mut expected = vec!["authorizationContextId", "reason"];
    if hints.is_some() {
        expected.push("remediationHints");
    }
    assert_eq!(sorted_keys(authorization), expected, "{authorization}");
    assert_eq!(authorization["reason"], "insufficient_authorization");
    if let Some(hints) = hints {
        assert_eq!(authorization["remediationHints"], hints);
    }
    let id = authorization["authorizationContextId"]
        .as_str()
        .expect("authorizationContextId is a string");
    assert!(id.starts_with("actx_") && id.len() > "actx_".len(), "{id}");
    id.to_owned()
}

/// A JSON-RPC error as the SDK surfaced it (`class`, `code`, `message`, `data`): the denial
/// code and `data` holding only the envelope, without hints.
fn assert_denial_error(error: &Value, class: &str, message: &str) {
    assert_eq!(error["class"], class, "{error}");
    assert_eq!(error["code"], DENIAL, "{error}");
    assert_eq!(error["message"], message, "{error}");
    assert_eq!(sorted_keys(&error["data"]), ["authorization"], "{error}");
    assert_envelope(&error["data"]["authorization"], None);
}

/// The message a legacy TypeScript `McpError` carries for a JSON-RPC error.
fn ts_message(code: i64, message: &str) -> String {
    format!("MCP error {code}: {message}")
}

/// Every HTTP answer of `status` whose challenge names `error`: its body must be the JSON-RPC
/// error of this revision (denial code, `message`, the envelope without hints). Returns how many.
fn assert_challenge_bodies(run: &ClientRun, status: u16, error: &str, message: &str) -> usize {
    let answers: Vec<&Value> = run
        .http
        .iter()
        .filter(|h| {
            h["status"] == status
                && h["www_authenticate"]
                    .as_str()
                    .is_some_and(|c| c.contains(&format!("error=\"{error}\"")))
        })
        .collect();
    assert!(!answers.is_empty(), "no {status} {error}: {run:#?}");
    for answer in &answers {
        let text = answer["body"].as_str().expect("the client logged the body");
        let body: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"));
        assert_eq!(sorted_keys(&body), ["error", "id", "jsonrpc"], "{body}");
        assert_eq!(body["jsonrpc"], "2.0");
        assert!(body["id"].is_number(), "{body}");
        assert_eq!(sorted_keys(&body["error"]), ["code", "data", "message"]);
        assert_eq!(body["error"]["code"], DENIAL);
        assert_eq!(body["error"]["message"], message);
        assert_eq!(sorted_keys(&body["error"]["data"]), ["authorization"]);
        assert_envelope(&body["error"]["data"]["authorization"], None);
    }
    answers.len()
}

/// The scope challenge: `403 insufficient_scope` naming every scope `admin_report` needs, with
/// the JSON-RPC error as its body.
fn assert_scope_challenge(run: &ClientRun) {
    assert_challenge_bodies(run, 403, "insufficient_scope", SCOPE_MESSAGE);
    let challenge = run
        .http
        .iter()
        .find(|h| h["status"] == 403)
        .and_then(|h| h["www_authenticate"].as_str())
        .expect("a 403 challenge");
    assert!(
        challenge.starts_with("Bearer error=\"insufficient_scope\", scope=\"mcp:admin mcp:read\""),
        "{challenge}"
    );
    assert!(challenge.contains("resource_metadata=\""), "{challenge}");
    assert!(
        challenge.contains(&format!("error_description=\"{SCOPE_MESSAGE}\"")),
        "{challenge}"
    );
}

/// `data.elicitations` of a `-32042`: one URL elicitation whose id is the denial's context id
/// and whose URL is the demo's approval page for the folder (fetched: it exists).
async fn assert_url_elicitations(elicitations: &Value, context_id: &str, server: &GatedServer) {
    let all = elicitations
        .as_array()
        .unwrap_or_else(|| panic!("elicitations: {elicitations}"));
    assert_eq!(all.len(), 1, "{elicitations}");
    let elicitation = &all[0];
    assert_eq!(
        sorted_keys(elicitation),
        ["elicitationId", "message", "mode", "url"]
    );
    assert_eq!(elicitation["mode"], "url");
    assert_eq!(elicitation["elicitationId"], context_id);
    assert_eq!(elicitation["message"], SHARE_MESSAGE);
    let url = elicitation["url"].as_str().expect("url");
    let pages = format!("{}/approve/", server.url.trim_end_matches("/mcp"));
    assert!(url.starts_with(&pages), "{url} is not under {pages}");
    let page = reqwest::get(url).await.expect("approval page");
    assert_eq!(page.status(), 200, "{url}");
    assert!(
        page.text()
            .await
            .expect("page")
            .contains("Share folder reports?")
    );
}

/// The plain URL denial (no `-32042`): the URL in the message, the envelope without hints.
fn assert_plain_url_denial(error: &Value, class: &str, prefix: &str, server: &GatedServer) {
    let message = error["message"].as_str().expect("message");
    let pages = format!(
        "{prefix}{SHARE_MESSAGE} (approval page: {}/approve/",
        server.url.trim_end_matches("/mcp")
    );
    assert!(
        message.starts_with(&pages) && message.ends_with(')'),
        "{error}"
    );
    assert_denial_error(error, class, message);
    assert_eq!(error["http_status"], 200);
}

#[tokio::test]
async fn typescript_sdk_legacy_client_surfaces_error_based_denials() {
    let auth = AuthServer::start(&[]).await;
    let server = demo_server(&auth).await;
    let args = calling(
        client_args(&auth, &["--scope", "mcp:read", "--step-up"]),
        &EVERY_DECISION,
    );
    let run = run_client(Sdk::TypeScript, &server.url, &args).await;
    assert_connected(&run, "2025-11-25");
    assert_echo_allowed(&run);

    // Scope: the SDK acts on the 403 status and challenge, never on the JSON-RPC body; the
    // application steps up to the union the challenge names and the retry succeeds.
    let admin = run.calls("admin_report");
    assert_eq!(admin[0]["ok"], false);
    assert_eq!(admin[0]["error"]["class"], "StreamableHTTPError");
    assert_eq!(admin[0]["error"]["code"], 403);
    assert_eq!(admin[0]["error"]["http_status"], 403);
    assert_scope_challenge(&run);
    let step_up = run
        .steps
        .iter()
        .find(|s| s["step"] == "step-up")
        .expect("step-up");
    assert_eq!(step_up["ok"], true, "{run:#?}");
    assert_eq!(step_up["scope"], "mcp:read mcp:admin");
    assert_admin_report(admin[1], &run);

    // unavailable and undisclosed: an McpError carrying the JSON-RPC error's data as sent
    // (no CallToolResult, no `remediation`: the two cannot be told apart on the wire).
    for (tool, text) in REFUSED_OUTRIGHT {
        let step = failed_call(&run, tool);
        assert_denial_error(&step["error"], "McpError", &ts_message(DENIAL, text));
        assert_eq!(step["error"]["http_status"], 200);
    }

    // Credential: the SDK re-authorizes, gets the same challenge, and surfaces the 401; every
    // 401 carried the JSON-RPC error body.
    let transfer = run.calls("transfer")[0];
    assert_eq!(transfer["ok"], false);
    assert_eq!(transfer["error"]["class"], "StreamableHTTPError");
    assert_eq!(transfer["error"]["code"], 401);
    assert_eq!(transfer["error"]["http_status"], 401);
    assert_credential_challenge(&run);
    assert_challenge_bodies(&run, 401, "insufficient_authorization", TRANSFER_MESSAGE);
}

#[tokio::test]
async fn typescript_sdk_with_url_elicitation_gets_url_elicitation_required() {
    let auth = AuthServer::start(&[]).await;
    let sessions = demo_server_with_sessions(&auth).await;
    let stateless = demo_server(&auth).await;
    let declared = client_args(
        &auth,
        &["--scope", "mcp:read", "--url-elicitation", "--call", SHARE],
    );
    let undeclared = client_args(&auth, &["--scope", "mcp:read", "--call", SHARE]);
    let (run, without_capability, without_session) = tokio::join!(
        run_client(Sdk::TypeScript, &sessions.url, &declared),
        run_client(Sdk::TypeScript, &sessions.url, &undeclared),
        run_client(Sdk::TypeScript, &stateless.url, &declared),
    );

    // A session whose initialize declared elicitation.url: the SDK's own
    // UrlElicitationRequiredError (-32042).
    let error = url_elicitation_error(&run, "UrlElicitationRequiredError");
    assert_eq!(
        error["message"],
        ts_message(URL_ELICITATION_REQUIRED, SHARE_MESSAGE)
    );
    assert_eq!(error["http_status"], 200);
    // The SDK rebuilds `data` from the elicitations alone: `data.authorization` does not reach
    // the application. It is on the wire, as the transport received it.
    assert_eq!(sorted_keys(&error["data"]), ["elicitations"], "{error}");
    let wire = &error["wire"];
    assert_eq!(sorted_keys(wire), ["error", "id", "jsonrpc"], "{wire}");
    assert_eq!(wire["jsonrpc"], "2.0");
    assert_eq!(sorted_keys(&wire["error"]), ["code", "data", "message"]);
    assert_eq!(wire["error"]["code"], URL_ELICITATION_REQUIRED);
    assert_eq!(wire["error"]["message"], SHARE_MESSAGE);
    let data = &wire["error"]["data"];
    assert_url_required_data(data, &sessions).await;
    assert_eq!(error["data"]["elicitations"], data["elicitations"]);
    // The layer asks for nothing over the session: no elicitation/create reached the handler.
    assert_nothing_elicited(&run);

    // The same session without elicitation.url: the plain error, the URL in the message (and,
    // without the flag, the client reports no raw `wire`).
    let step = legacy_share_failed(&without_capability);
    assert!(step["error"].get("wire").is_none(), "{step}");
    assert_plain_url_denial(
        &step["error"],
        "McpError",
        &format!("MCP error {DENIAL}: "),
        &sessions,
    );

    // elicitation.url declared, but the inner server keeps no session, so the layer cannot
    // remember the declaration: the plain error again.
    assert_connected(&without_session, "2025-11-25");
    let step = without_session.calls("share_folder")[0];
    assert_eq!(step["ok"], false);
    assert_plain_url_denial(
        &step["error"],
        "McpError",
        &format!("MCP error {DENIAL}: "),
        &stateless,
    );
    assert_eq!(
        step["error"]["wire"]["error"]["data"],
        step["error"]["data"]
    );
}

#[tokio::test]
async fn python_sdk_modern_client_surfaces_error_based_denials() {
    let auth = AuthServer::start(&[]).await;
    let server = demo_server(&auth).await;
    let args = calling(client_args(&auth, &[]), &EVERY_DECISION);
    let args = calling(args, &[SHARE]);
    let run = run_client(Sdk::Python, &server.url, &args).await;
    assert_connected(&run, "2026-07-28");
    assert_echo_allowed(&run);

    // Scope step-up, completed by the SDK itself from the challenge (the body is a JSON-RPC
    // error now): 403, a token for the union, then success.
    let admin = run.calls("admin_report")[0];
    assert_admin_report(admin, &run);
    assert_scope_challenge(&run);
    let stepped_up = run.asked_for_scopes(&auth.token_endpoint, &["mcp:admin", "mcp:read"]);
    assert!(
        stepped_up,
        "the SDK asked for the union of scopes: {run:#?}"
    );

    // unavailable and undisclosed: an MCPError with the data as sent, never a result.
    for (tool, text) in REFUSED_OUTRIGHT {
        let step = failed_call(&run, tool);
        assert_denial_error(&step["error"], "MCPError", text);
        assert_eq!(step["error"]["http_status"], 200);
    }

    // Credential: the SDK re-authorizes once, gets the same challenge, and then surfaces the
    // JSON-RPC error the last 401 carried (an MCPError with its data), not a bare HTTP error.
    let transfer = run.calls("transfer")[0];
    assert_eq!(transfer["ok"], false);
    assert_eq!(transfer["error"]["http_status"], 401);
    assert_denial_error(&transfer["error"], "MCPError", TRANSFER_MESSAGE);
    assert_credential_challenge(&run);
    assert_challenge_bodies(&run, 401, "insufficient_authorization", TRANSFER_MESSAGE);
    let last_401: Value = run
        .http
        .iter()
        .rev()
        .find(|h| h["status"] == 401 && h["rpc"] == "tools/call")
        .and_then(|h| h["body"].as_str())
        .map(|b| serde_json::from_str(b).expect("JSON body"))
        .expect("a 401 on tools/call");
    assert_eq!(transfer["error"]["data"], last_401["error"]["data"]);

    // A URL remedy on a modern request: the plain error, the URL in the message.
    let share = run.calls("share_folder")[0];
    assert_eq!(share["ok"], false);
    assert_plain_url_denial(&share["error"], "MCPError", "", &server);
}

#[tokio::test]
async fn python_sdk_legacy_session_with_elicitation_gets_url_elicitation_required() {
    let auth = AuthServer::start(&[]).await;
    let sessions = demo_server_with_sessions(&auth).await;
    let declared = client_args(&auth, &["--mode", "legacy", "--elicit", "--call", SHARE]);
    let undeclared = client_args(&auth, &["--mode", "legacy", "--call", SHARE]);
    let (run, without_capability) = tokio::join!(
        run_client(Sdk::Python, &sessions.url, &declared),
        run_client(Sdk::Python, &sessions.url, &undeclared),
    );

    // The SDK raises its generic MCPError for -32042 (not its UrlElicitationRequiredError),
    // keeping `data` whole: the envelope with the url hint beside the elicitations.
    let error = url_elicitation_error(&run, "MCPError");
    assert_eq!(error["message"], SHARE_MESSAGE);
    assert_eq!(error["http_status"], 200);
    assert_url_required_data(&error["data"], &sessions).await;
    assert_nothing_elicited(&run);

    // Without --elicit the session declared no elicitation: the plain error.
    let step = legacy_share_failed(&without_capability);
    assert_plain_url_denial(&step["error"], "MCPError", "", &sessions);
}
