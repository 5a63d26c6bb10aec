//! Allowed answers stream through the gateway as the upstream writes them: the first event of
//! a call's answer reaches the client while the upstream is still working on the rest.

mod common;

use std::time::{Duration, Instant};

use common::{AuthServer, Gateway, UpstreamServer, free_port};

/// How long the upstream's `slow` call waits after its first event.
const WAIT_MS: u64 = 3000;

#[tokio::test]
async fn the_first_event_arrives_before_the_upstream_has_finished() {
    let auth = AuthServer::start(&[]).await;
    let upstream = UpstreamServer::ts_plain().await;
    let port = free_port();
    let resource = format!("http://127.0.0.1:{port}/mcp");
    let config = format!(
        "listen = \"127.0.0.1:{port}\"\n[upstream]\nurl = \"{}\"\n[resource]\nuri = \"{resource}\"\n\
         [[issuer]]\nurl = \"{}\"\n[policy]\nallow-all = true\nallow-destructive = true\n",
        upstream.url, auth.issuer
    );
    let gateway = Gateway::start(&config, &[]).await;
    let token = auth.token("mcp:read", &resource).await;
    let client = reqwest::Client::new();
    let post = |body: String, session: Option<String>| {
        let mut request = client
            .post(&resource)
            .bearer_auth(&token)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body);
        if let Some(session) = session {
            request = request
                .header("mcp-session-id", session)
                .header("mcp-protocol-version", "2025-11-25");
        }
        request.send()
    };
    let opened = post(
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"stream","version":"1"}}}"#.into(),
        None,
    )
    .await
    .expect("initialize");
    assert_eq!(opened.status(), 200, "{}", gateway.log());
    let session = opened.headers()["mcp-session-id"]
        .to_str()
        .expect("session")
        .to_owned();
    let _ = opened.text().await;
    let initialized = post(
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.into(),
        Some(session.clone()),
    )
    .await
    .expect("initialized");
    assert!(initialized.status().is_success());

    let started = Instant::now();
    let call = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"slow","arguments":{{"ms":{WAIT_MS}}},"_meta":{{"progressToken":"p1"}}}}}}"#
    );
    let mut answer = post(call, Some(session)).await.expect("call");
    assert_eq!(answer.status(), 200);
    let mut seen = String::new();
    let mut first_event_at = None;
    while let Some(chunk) = tokio::time::timeout(Duration::from_secs(20), answer.chunk())
        .await
        .expect("the answer kept coming")
        .expect("read the answer")
    {
        seen.push_str(&String::from_utf8_lossy(&chunk));
        if first_event_at.is_none() && seen.contains("notifications/progress") {
            first_event_at = Some(started.elapsed());
        }
    }
    let finished_at = started.elapsed();
    let first_event_at = first_event_at.unwrap_or_else(|| panic!("no progress event in {seen}"));
    println!("first event after {first_event_at:?}, the whole answer after {finished_at:?}");
    assert!(seen.contains(&format!("slept {WAIT_MS} ms")), "{seen}");
    assert!(
        finished_at >= Duration::from_millis(WAIT_MS),
        "the call did not wait: {finished_at:?}"
    );
    // Held back until the end, the first event would arrive with the result, after the wait.
    assert!(
        first_event_at + Duration::from_millis(WAIT_MS / 2) < finished_at,
        "the first event came only {first_event_at:?} into a {finished_at:?} answer: buffered"
    );
}
