//! The layer's own round trips through the real stack: URL approval and confirmation (ask),
//! with `oidc-provider` tokens, rmcp behind the layer, the Python SDK as a modern client that
//! declares URL and form elicitation, and the TypeScript SDK as a legacy client that can take
//! neither. Also: the inner application's own multi-round-trip requests pass untouched.

use crate::common;

use std::sync::{Arc, Mutex};

use axum::Router;
use common::clients::{
    Visit, calling, credentials_args, demo_server, read_scope_args, the_one_visit,
};
use common::peers::{
    AuthServer, ClientRun, GatedServer, SECRET, Sdk, run_client, run_client_visiting,
};
use common::tokens::{TestKey, claims};
use mcp_gate::denial::ENVELOPE_KEY;
use mcp_gate::policy::{Decision, Evaluation};
use mcp_gate::{Gate, Issuer, StaticKeys};
use serde_json::{Value, json};

fn call<'a>(run: &'a ClientRun, name: &str) -> &'a Value {
    run.steps
        .iter()
        .rev()
        .find(|s| s["step"] == "call" && s["name"] == name)
        .unwrap_or_else(|| panic!("no call step for {name}: {run:#?}"))
}

/// The Python client's arguments: no listing, URL and form elicitation declared, then `extra`.
fn python_args<'a>(auth: &'a AuthServer, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = credentials_args(auth, &["--no-list", "--elicit"]);
    args.extend_from_slice(extra);
    args
}

#[tokio::test]
async fn python_sdk_completes_a_url_approval_visited_by_the_same_subject() {
    let auth = AuthServer::start(&[]).await;
    let server = demo_server(&auth).await;
    let own = auth.client_token("mcp:read", &server.url).await;
    let stranger = auth
        .token(
            "mcp-client-post",
            SECRET,
            Some("mcp:read"),
            Some(&server.url),
        )
        .await;
    let visits: Arc<Mutex<Vec<Visit>>> = Arc::default();
    let record = visits.clone();
    let run = run_client_visiting(
        Sdk::Python,
        &server.url,
        &python_args(
            &auth,
            &[
                "--wait-url",
                "--call",
                r#"share_folder={"folder":"team-docs"}"#,
            ],
        ),
        |url| {
            let (own, stranger, record) = (own.clone(), stranger.clone(), record.clone());
            async move {
                let http = reqwest::Client::new();
                // Someone else opening the page cannot approve for this user.
                let theirs = http
                    .post(&url)
                    .bearer_auth(&stranger)
                    .send()
                    .await
                    .unwrap()
                    .status()
                    .as_u16();
                let mine = http
                    .post(&url)
                    .bearer_auth(&own)
                    .send()
                    .await
                    .unwrap()
                    .status()
                    .as_u16();
                record.lock().unwrap().push((url, theirs, mine));
            }
        },
    )
    .await;
    let (url, theirs, mine) = the_one_visit(&visits, &run);
    assert!(
        url.starts_with(server.url.trim_end_matches("/mcp")),
        "{url}"
    );
    assert_eq!(
        (theirs, mine),
        (403, 200),
        "only the same subject may approve"
    );
    let result = &call(&run, "share_folder")["result"];
    assert_eq!(result["content"][0]["text"], "shared folder team-docs");
    assert_eq!(result["isError"], false);
}

#[tokio::test]
async fn python_sdk_url_accept_without_a_visit_is_not_an_approval() {
    let auth = AuthServer::start(&[]).await;
    let server = demo_server(&auth).await;
    // The client says "accept" at once but nobody approves: the policy's own record decides,
    // so the layer asks again until its round limit, then answers undisclosed.
    let run = run_client(
        Sdk::Python,
        &server.url,
        &python_args(&auth, &["--call", r#"share_folder={"folder":"secret"}"#]),
    )
    .await;
    let step = call(&run, "share_folder");
    let rounds = run
        .steps
        .iter()
        .filter(|s| s["elicit"]["mode"] == "url")
        .count();
    assert_eq!(
        rounds, 3,
        "one URL request per round, three rounds: {run:#?}"
    );
    assert_eq!(step["ok"], true, "{step}");
    assert_eq!(step["result"]["isError"], true);
    assert_eq!(
        step["result"]["_meta"][ENVELOPE_KEY]["remediation"],
        "undisclosed"
    );
}

#[tokio::test]
async fn python_sdk_confirms_an_ask_and_gets_the_result() {
    let auth = AuthServer::start(&[]).await;
    let server = demo_server(&auth).await;
    let run = run_client(
        Sdk::Python,
        &server.url,
        &python_args(
            &auth,
            &[
                "--form-action",
                "accept",
                "--call",
                r#"delete_file={"path":"notes.txt"}"#,
            ],
        ),
    )
    .await;
    assert!(run.success, "{run:#?}");
    let asked = run
        .steps
        .iter()
        .find(|s| s["elicit"]["mode"] == "form")
        .expect("a confirmation request");
    assert_eq!(asked["elicit"]["message"], "Delete notes.txt?");
    assert_eq!(
        call(&run, "delete_file")["result"]["content"][0]["text"],
        "deleted notes.txt"
    );
}

#[tokio::test]
async fn python_sdk_declining_or_not_approving_gets_a_denial() {
    let auth = AuthServer::start(&[]).await;
    let server = demo_server(&auth).await;
    for answer in [
        &["--form-action", "decline"][..],
        &["--form-action", "cancel"],
        &["--approve", "false"],
    ] {
        let mut extra = answer.to_vec();
        extra.extend(["--call", r#"delete_file={"path":"notes.txt"}"#]);
        let run = run_client(Sdk::Python, &server.url, &python_args(&auth, &extra)).await;
        let result = &call(&run, "delete_file")["result"];
        assert_eq!(result["isError"], true, "{answer:?}: {run:#?}");
        assert_eq!(
            result["_meta"][ENVELOPE_KEY]["remediation"], "undisclosed",
            "{answer:?}"
        );
        assert!(
            result["content"][0]["text"]
                .as_str()
                .unwrap()
                .contains("not confirmed")
        );
    }
}

#[tokio::test]
async fn typescript_sdk_legacy_client_gets_undisclosed_for_both_never_input_required() {
    let auth = AuthServer::start(&[]).await;
    let server = demo_server(&auth).await;
    let calls = [
        r#"share_folder={"folder":"team-docs"}"#,
        r#"delete_file={"path":"notes.txt"}"#,
    ];
    let args = calling(read_scope_args(&auth, &["--no-list"]), &calls);
    let run = run_client(Sdk::TypeScript, &server.url, &args).await;
    for (tool, hint) in [
        ("share_folder", "approval page: http://"),
        ("delete_file", "needs your confirmation"),
    ] {
        let step = call(&run, tool);
        assert_eq!(step["ok"], true, "{step}");
        let result = &step["result"];
        assert_eq!(result["isError"], true);
        assert!(
            result.get("resultType").is_none(),
            "legacy clients never see resultType: {result}"
        );
        assert_eq!(result["_meta"][ENVELOPE_KEY]["remediation"], "undisclosed");
        assert!(
            result["content"][0]["text"]
                .as_str()
                .unwrap()
                .contains(hint),
            "{result}"
        );
    }
    assert!(!format!("{:?}", run.steps).contains("input_required"));
}

/// An inner application that does its own multi-round-trip request: the first call asks for
/// `app_pin` with state `app-state-1`; the retry must bring both back, untouched.
fn inner_app(seen: Arc<Mutex<Vec<Value>>>) -> Router {
    Router::new().route(
        "/mcp",
        axum::routing::post(move |body: axum::body::Bytes| {
            let seen = seen.clone();
            async move {
                let message: Value = serde_json::from_slice(&body).unwrap();
                seen.lock().unwrap().push(message.clone());
                let params = &message["params"];
                let answer = if params["requestState"] == "app-state-1" && params["inputResponses"]["app_pin"]["action"] == "accept" {
                    json!({"resultType": "complete", "content": [{"type": "text", "text": "app says done"}], "isError": false})
                } else {
                    json!({
                        "resultType": "input_required",
                        "inputRequests": {"app_pin": {"method": "elicitation/create", "params": {"mode": "form", "message": "PIN?", "requestedSchema": {"type": "object", "properties": {}}}}},
                        "requestState": "app-state-1",
                    })
                };
                axum::Json(json!({"jsonrpc": "2.0", "id": message["id"], "result": answer}))
            }
        }),
    )
}

fn modern_call(id: u64, tool: &str, extra: Value) -> (String, Vec<(&'static str, String)>) {
    let mut params = json!({
        "name": tool, "arguments": {},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}, "url": {}}},
        },
    });
    if let (Value::Object(params), Value::Object(extra)) = (&mut params, extra) {
        params.extend(extra);
    }
    let body =
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}).to_string();
    let headers = vec![
        ("mcp-protocol-version", "2026-07-28".to_owned()),
        ("mcp-method", "tools/call".to_owned()),
        ("mcp-name", tool.to_owned()),
    ];
    (body, headers)
}

#[tokio::test]
async fn the_inner_apps_own_round_trip_passes_through_and_composes_with_the_layers() {
    let key = TestKey::es256("k1");
    let keys = StaticKeys::from_jwks_json(&key.jwks_json()).unwrap();
    let seen: Arc<Mutex<Vec<Value>>> = Arc::default();
    let server = GatedServer::start_with(
        move |_| {
            Gate::builder()
                .issuer(Issuer::with_keys("https://as.example", keys))
                .evaluate(|evaluation: Evaluation| async move {
                    Ok::<_, std::convert::Infallible>(match evaluation.tool() {
                        Some("guarded") => Decision::ask("Run the guarded tool?"),
                        _ => Decision::allow(),
                    })
                })
        },
        inner_app(seen.clone()),
    )
    .await;
    let token = key.mint(&claims("https://as.example", &server.url, "mcp:read"));
    let post = |body: String, headers: Vec<(&'static str, String)>| {
        let (server, token) = (&server, token.clone());
        async move {
            let refs: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
            server.post(Some(&token), &refs, &body).await
        }
    };

    // 1. The app's own round trip on an allowed tool: its state and inputs pass untouched.
    let (body, headers) = modern_call(1, "plain", json!({}));
    let first = post(body, headers).await;
    assert_eq!(first.body["result"]["requestState"], "app-state-1");
    let (body, headers) = modern_call(
        2,
        "plain",
        json!({"requestState": "app-state-1", "inputResponses": {"app_pin": {"action": "accept"}}}),
    );
    let second = post(body, headers).await;
    assert_eq!(
        second.body["result"]["content"][0]["text"], "app says done",
        "{second:?}"
    );

    // 2. The layer's confirmation on top of the app's round trip: the app's state travels
    //    inside the layer's, and comes back to the app unchanged once the user confirms.
    let (body, headers) = modern_call(
        3,
        "guarded",
        json!({"requestState": "app-state-1", "inputResponses": {"app_pin": {"action": "accept"}}}),
    );
    let asked = post(body, headers).await;
    let result = &asked.body["result"];
    assert_eq!(result["resultType"], "input_required", "{asked:?}");
    let state = result["requestState"].as_str().unwrap().to_owned();
    assert!(
        state.starts_with("mcpgate1."),
        "the layer's own state: {state}"
    );
    assert!(result["inputRequests"].get("mcp-gate/confirm").is_some());
    let reached_before = seen.lock().unwrap().len();
    let confirm = json!({"requestState": state, "inputResponses": {"mcp-gate/confirm": {"action": "accept", "content": {"approve": true}}}});
    let (body, headers) = modern_call(4, "guarded", confirm);
    let done = post(body, headers).await;
    assert_eq!(
        done.body["result"]["content"][0]["text"], "app says done",
        "{done:?}"
    );
    let seen = seen.lock().unwrap();
    assert_eq!(
        seen.len(),
        reached_before + 1,
        "the app ran once, after the confirmation"
    );
    let forwarded = &seen.last().unwrap()["params"];
    assert_eq!(
        forwarded["requestState"], "app-state-1",
        "the app gets its own state back"
    );
    assert_eq!(
        forwarded["inputResponses"],
        json!({"app_pin": {"action": "accept"}}),
        "and only its own inputs"
    );
}
