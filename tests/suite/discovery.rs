//! Discovery filtering and the guarded surfaces, with rmcp (JSON and SSE answers), an inner
//! application that paginates, and the official SDK clients.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use common::peers::{AuthServer, GatedServer, Sdk, run_client};
use common::tokens::{TestKey, claims};
use mcp_gate::policy::{Decision, Evaluation, Phase, deny_all};
use mcp_gate::{Gate, Issuer, StaticKeys};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Value, json};

const ISSUER: &str = "https://as.example";

fn keys(key: &TestKey) -> StaticKeys {
    StaticKeys::from_jwks_json(&key.jwks_json()).unwrap()
}

fn list(id: u64, method: &str, cursor: Option<&str>) -> String {
    let params = match cursor {
        Some(cursor) => json!({"cursor": cursor}),
        None => json!({}),
    };
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
}

fn names(result: &Value, key: &str) -> Vec<String> {
    result[key]
        .as_array()
        .unwrap_or_else(|| panic!("no {key} in {result}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn principals_with_different_scopes_see_different_tool_lists() {
    // Real tokens from oidc-provider, the example rmcp server and policy.
    let auth = AuthServer::start(&[]).await;
    let issuer = auth.issuer.clone();
    let server = GatedServer::start_demo(|b| b.issuer(issuer.as_str())).await;
    let reader = auth.client_token("mcp:read", &server.url).await;
    let admin = auth.client_token("mcp:read mcp:admin", &server.url).await;
    let seen = |token: String| {
        let server = &server;
        async move {
            let reply = server
                .post(Some(&token), &[], &list(1, "tools/list", None))
                .await;
            assert_eq!(reply.status, 200, "{reply:?}");
            names(&reply.body["result"], "tools")
        }
    };
    let reader_tools = seen(reader).await;
    let admin_tools = seen(admin).await;
    assert!(
        !reader_tools.contains(&"admin_report".to_owned()),
        "{reader_tools:?}"
    );
    assert!(
        admin_tools.contains(&"admin_report".to_owned()),
        "{admin_tools:?}"
    );
    for hidden in ["secret_sauce", "delete_everything"] {
        assert!(
            !admin_tools.contains(&hidden.to_owned()),
            "{hidden} is never listed"
        );
    }
    assert!(reader_tools.contains(&"echo".to_owned()));
    assert_eq!(admin_tools.len(), reader_tools.len() + 1);
}

/// The example's rmcp server with rmcp's defaults: legacy sessions, answers as SSE streams.
fn sse_demo_service() -> StreamableHttpService<common::tools::DemoServer, LocalSessionManager> {
    StreamableHttpService::new(
        || Ok(common::tools::DemoServer::default()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    )
}

#[tokio::test]
async fn sse_list_answers_are_filtered_too() {
    let key = TestKey::es256("k1");
    let issuer_keys = keys(&key);
    let service = sse_demo_service();
    let server = GatedServer::start_with(
        move |_| {
            Gate::builder()
                .issuer(Issuer::with_keys(ISSUER, issuer_keys))
                .evaluate(|e: Evaluation| async move {
                    Ok::<_, std::convert::Infallible>(match (e.phase(), e.tool()) {
                        (Phase::Discovery, Some("whoami")) => Decision::undisclosed(""),
                        _ => Decision::allow(),
                    })
                })
        },
        Router::new().nest_service("/mcp", service),
    )
    .await;
    let token = key.mint(&claims(ISSUER, &server.url, "mcp:read"));
    let tools = legacy_session_tools(&server, &token).await;
    assert!(tools.contains(&"echo".to_owned()));
    assert!(!tools.contains(&"whoami".to_owned()), "{tools:?}");
}

#[tokio::test]
async fn paging_through_a_filtered_catalogue_returns_each_permitted_entry_once() {
    let key = TestKey::es256("k1");
    let issuer_keys = keys(&key);
    let server = GatedServer::start_with(
        move |_| {
            Gate::builder()
                .issuer(Issuer::with_keys(ISSUER, issuer_keys))
                .evaluate(|e: Evaluation| async move {
                    // Even-numbered tools only, for everyone.
                    let even = e
                        .tool()
                        .and_then(|t| t[1..].parse::<u32>().ok())
                        .is_some_and(|n| n % 2 == 0);
                    Ok::<_, std::convert::Infallible>(if even {
                        Decision::allow()
                    } else {
                        Decision::undisclosed("")
                    })
                })
        },
        common::paging::paginating_inner(),
    )
    .await;
    let alice = key.mint(&claims(ISSUER, &server.url, "mcp:read"));
    let mut bob_claims = claims(ISSUER, &server.url, "mcp:read");
    bob_claims["sub"] = json!("bob");
    let bob = key.mint(&bob_claims);

    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut first_cursor = None;
    for page in 0..10 {
        let reply = server
            .post(
                Some(&alice),
                &[],
                &list(page, "tools/list", cursor.as_deref()),
            )
            .await;
        assert_eq!(reply.status, 200, "{reply:?}");
        seen.extend(names(&reply.body["result"], "tools"));
        cursor = reply.body["result"]["nextCursor"]
            .as_str()
            .map(str::to_owned);
        if let Some(c) = &cursor {
            assert!(
                c.starts_with("mcpgatec1."),
                "the inner cursor is wrapped: {c}"
            );
            first_cursor.get_or_insert_with(|| c.clone());
        } else {
            break;
        }
    }
    assert_eq!(
        seen,
        ["t0", "t2", "t4", "t6", "t8"],
        "every permitted entry exactly once"
    );

    let cursor = first_cursor.unwrap();
    let replay = server
        .post(Some(&bob), &[], &list(20, "tools/list", Some(&cursor)))
        .await;
    assert_eq!(replay.status, 400);
    assert_eq!(replay.body["error"]["code"], -32602);
    assert!(
        replay.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("another caller")
    );
    let other_list = server
        .post(Some(&alice), &[], &list(21, "prompts/list", Some(&cursor)))
        .await;
    assert_eq!(other_list.body["error"]["code"], -32602);
    let raw = server
        .post(Some(&alice), &[], &list(22, "tools/list", Some("page-3")))
        .await;
    assert_eq!(raw.body["error"]["message"], "invalid cursor");
    let mut tampered = cursor.clone();
    tampered.insert(
        12,
        if tampered.as_bytes()[12] == b'A' {
            'B'
        } else {
            'A'
        },
    );
    let tampered = server
        .post(Some(&alice), &[], &list(23, "tools/list", Some(&tampered)))
        .await;
    assert_eq!(tampered.body["error"]["message"], "invalid cursor");
}

#[tokio::test]
async fn a_policy_that_panics_on_one_entry_fails_the_list_and_nothing_else() {
    let key = TestKey::es256("k1");
    let issuer_keys = keys(&key);
    let server = GatedServer::start(move |_| {
        Gate::builder()
            .issuer(Issuer::with_keys(ISSUER, issuer_keys))
            .evaluate(|e: Evaluation| async move {
                if e.tool() == Some("whoami") {
                    panic!("policy bug on whoami");
                }
                Ok::<_, std::convert::Infallible>(Decision::allow())
            })
    })
    .await;
    let token = key.mint(&claims(ISSUER, &server.url, "mcp:read"));
    let reply = server
        .post(Some(&token), &[], &list(1, "tools/list", None))
        .await;
    assert_eq!(
        reply.body["error"]["code"], -32603,
        "the list fails, it is not emptied: {reply:?}"
    );
    assert!(reply.body.get("result").is_none());
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "still fine"}}});
    let reply = server.post(Some(&token), &[], &call.to_string()).await;
    assert_eq!(reply.tool_text(), "still fine");
}

#[tokio::test]
async fn every_guarded_surface_is_refused_before_the_inner_handler_runs() {
    let key = TestKey::es256("k1");
    let issuer_keys = keys(&key);
    let reached = Arc::new(AtomicUsize::new(0));
    let counter = reached.clone();
    let inner = Router::new().route(
        "/mcp",
        axum::routing::post(move || {
            counter.fetch_add(1, Ordering::SeqCst);
            async { axum::Json(json!({"jsonrpc": "2.0", "id": 1, "result": {}})) }
        }),
    );
    let server = GatedServer::start_with(
        move |_| {
            Gate::builder()
                .issuer(Issuer::with_keys(ISSUER, issuer_keys))
                .evaluate(deny_all("no"))
        },
        inner,
    )
    .await;
    let token = key.mint(&claims(ISSUER, &server.url, "mcp:read"));
    let surfaces = [
        ("tools/call", json!({"name": "echo", "arguments": {}})),
        (
            "prompts/get",
            json!({"name": "greet", "arguments": {"who": "x"}}),
        ),
        ("resources/read", json!({"uri": "file:///a"})),
        ("resources/subscribe", json!({"uri": "file:///a"})),
        ("resources/unsubscribe", json!({"uri": "file:///a"})),
        (
            "completion/complete",
            json!({"ref": {"type": "ref/prompt", "name": "greet"}, "argument": {"name": "who", "value": "a"}}),
        ),
        ("tasks/get", json!({"taskId": "t1"})),
        ("tasks/cancel", json!({"taskId": "t1"})),
    ];
    for (id, (method, params)) in surfaces.into_iter().enumerate() {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let reply = server.post(Some(&token), &[], &body.to_string()).await;
        assert_eq!(reply.status, 200, "{method}");
        let refused =
            reply.body["result"]["isError"] == true || reply.body["error"]["code"] == -32003;
        assert!(refused, "{method}: {reply:?}");
    }
    assert_eq!(
        reached.load(Ordering::SeqCst),
        0,
        "no guarded call reached the inner handler"
    );
}

#[tokio::test]
async fn sdk_clients_list_only_the_tools_their_token_permits() {
    let auth = AuthServer::start(&[]).await;
    let issuer = auth.issuer.clone();
    // Requires mcp:read: both SDKs get a token for exactly that.
    let narrow =
        GatedServer::start_demo(|b| b.issuer(issuer.as_str()).required_scopes(["mcp:read"])).await;
    // Requires nothing and advertises all three: the Python SDK asks for every advertised scope.
    let issuer = auth.issuer.clone();
    let wide = GatedServer::start_demo(|b| {
        b.issuer(issuer.as_str())
            .scopes_supported(["mcp:read", "mcp:write", "mcp:admin"])
    })
    .await;
    let listed = |run: &common::peers::ClientRun| -> Vec<String> {
        let step = run
            .steps
            .iter()
            .find(|s| s["step"] == "list")
            .unwrap_or_else(|| panic!("{run:#?}"));
        step["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap().to_owned())
            .collect()
    };
    let base = common::clients::credentials_args(&auth, &[]);
    let ts_narrow = run_client(
        Sdk::TypeScript,
        &narrow.url,
        &[&base[..], &["--scope", "mcp:read"]].concat(),
    )
    .await;
    let ts_wide = run_client(
        Sdk::TypeScript,
        &wide.url,
        &[&base[..], &["--scope", "mcp:read mcp:write mcp:admin"]].concat(),
    )
    .await;
    let py_narrow = run_client(Sdk::Python, &narrow.url, &base).await;
    let py_wide = run_client(Sdk::Python, &wide.url, &base).await;
    for (narrow, wide, sdk) in [
        (listed(&ts_narrow), listed(&ts_wide), "TypeScript"),
        (listed(&py_narrow), listed(&py_wide), "Python"),
    ] {
        assert!(narrow.len() < wide.len(), "{sdk}: {narrow:?} vs {wide:?}");
        assert!(!narrow.contains(&"admin_report".to_owned()), "{sdk}");
        assert!(wide.contains(&"admin_report".to_owned()), "{sdk}");
        assert!(!wide.contains(&"secret_sauce".to_owned()), "{sdk}");
    }
}

#[tokio::test]
async fn allow_all_refuses_tools_the_server_marks_destructive_unless_told_otherwise() {
    for including_destructive in [false, true] {
        let key = TestKey::es256("k1");
        let issuer_keys = keys(&key);
        let server = GatedServer::start(move |_| {
            let open = mcp_gate::policy::allow_all();
            let builder = Gate::builder().issuer(Issuer::with_keys(ISSUER, issuer_keys));
            if including_destructive {
                builder.evaluate(open.including_destructive())
            } else {
                builder.evaluate(open)
            }
        })
        .await;
        let token = key.mint(&claims(ISSUER, &server.url, "mcp:read"));
        let reply = server
            .post(Some(&token), &[], &list(1, "tools/list", None))
            .await;
        let tools = names(&reply.body["result"], "tools");
        assert_eq!(
            tools.contains(&"delete_file".to_owned()),
            including_destructive,
            "{tools:?}"
        );
        assert!(tools.contains(&"echo".to_owned()));
        let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "delete_file", "arguments": {"path": "a"}}});
        let reply = server.post(Some(&token), &[], &call.to_string()).await;
        if including_destructive {
            assert_eq!(reply.tool_text(), "deleted a");
        } else {
            assert_eq!(reply.body["result"]["isError"], true, "{reply:?}");
            assert_eq!(
                reply.body["result"]["_meta"]["io.modelcontextprotocol/authorization"]["remediation"],
                "undisclosed"
            );
        }
    }
}

/// A process that never saw a `tools/list` (a fresh replica behind a load balancer) lists the
/// tools itself before `allow_all` judges a call: a destructive tool is refused on the first
/// call, a harmless one runs, and a tool the server does not list is refused too.
#[tokio::test]
async fn a_replica_that_never_saw_a_list_learns_annotations_before_judging() {
    let key = TestKey::es256("k1");
    let issuer_keys = keys(&key);
    let server = GatedServer::start(move |_| {
        Gate::builder()
            .issuer(Issuer::with_keys(ISSUER, issuer_keys))
            .evaluate(mcp_gate::policy::allow_all())
    })
    .await;
    let token = key.mint(&claims(ISSUER, &server.url, "mcp:read"));
    let call = |tool: &str| {
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": tool, "arguments": {"path": "a", "text": "hi"}}}).to_string()
    };
    let refused = |reply: &common::peers::Reply| {
        reply.body["result"]["isError"] == true
            && reply.body["result"]["_meta"]["io.modelcontextprotocol/authorization"]["remediation"]
                == "undisclosed"
    };
    // No list first: the very first call is already judged with the server's annotations.
    let destructive = server.post(Some(&token), &[], &call("delete_file")).await;
    assert!(refused(&destructive), "{destructive:?}");
    let harmless = server.post(Some(&token), &[], &call("echo")).await;
    assert_eq!(harmless.tool_text(), "hi", "{harmless:?}");
    let unlisted = server
        .post(Some(&token), &[], &call("not_a_listed_tool"))
        .await;
    assert!(refused(&unlisted), "{unlisted:?}");
}

#[tokio::test]
async fn conceal_mode_answers_a_refusal_exactly_like_an_unknown_tool() {
    let key = TestKey::es256("k1");
    let issuer_keys = keys(&key);
    let server = GatedServer::start(move |_| {
        Gate::builder()
            .issuer(Issuer::with_keys(ISSUER, issuer_keys))
            .conceal_refusals()
            .evaluate(|e: Evaluation| async move {
                Ok::<_, std::convert::Infallible>(match e.tool() {
                    Some("secret_sauce") => Decision::undisclosed("hidden"),
                    _ => Decision::allow(),
                })
            })
    })
    .await;
    let token = key.mint(&claims(ISSUER, &server.url, "mcp:read"));
    let call = |tool: &str| {
        json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": tool, "arguments": {}}}).to_string()
    };
    let concealed = server.post(Some(&token), &[], &call("secret_sauce")).await;
    let unknown = server.post(Some(&token), &[], &call("no_such_tool")).await;
    assert_eq!(concealed.status, unknown.status);
    assert!(
        !concealed
            .text
            .contains("io.modelcontextprotocol/authorization"),
        "{}",
        concealed.text
    );
    assert!(
        !concealed.text.contains("mcp_gate_absent"),
        "{}",
        concealed.text
    );
    assert_eq!(
        concealed.text.replace("secret_sauce", "no_such_tool"),
        unknown.text,
        "byte for byte what the inner server says of a tool it does not have"
    );
    // The same on modern MCP, whose requests mirror the name in `Mcp-Name`.
    let modern = |tool: &str| {
        json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": tool, "arguments": {},
            "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}}})
        .to_string()
    };
    let headers = |tool: &'static str| {
        [
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", tool),
        ]
    };
    let concealed = server
        .post(
            Some(&token),
            &headers("secret_sauce"),
            &modern("secret_sauce"),
        )
        .await;
    let unknown = server
        .post(
            Some(&token),
            &headers("no_such_tool"),
            &modern("no_such_tool"),
        )
        .await;
    assert_eq!(concealed.status, unknown.status, "{concealed:?}");
    assert_eq!(
        concealed.text.replace("secret_sauce", "no_such_tool"),
        unknown.text
    );
    assert!(!concealed.text.contains("-32020"), "{}", concealed.text);
    // Allowed calls are untouched by conceal mode.
    let reply = server.post(Some(&token), &[], &json!({"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "hi"}}}).to_string()).await;
    assert_eq!(reply.tool_text(), "hi");
}

#[tokio::test]
async fn prompts_and_resources_are_filtered_and_guarded_like_tools() {
    let key = TestKey::es256("k1");
    let issuer_keys = keys(&key);
    let server =
        GatedServer::start_demo(|b| b.issuer(Issuer::with_keys(ISSUER, issuer_keys))).await;
    let reader = key.mint(&claims(ISSUER, &server.url, "mcp:read"));
    let admin = key.mint(&claims(ISSUER, &server.url, "mcp:read mcp:admin"));
    let listed = |token: String, method: &'static str, key: &'static str| {
        let server = &server;
        async move {
            let reply = server.post(Some(&token), &[], &list(1, method, None)).await;
            names(&reply.body["result"], key)
        }
    };
    let reader_prompts = listed(reader.clone(), "prompts/list", "prompts").await;
    let admin_prompts = listed(admin.clone(), "prompts/list", "prompts").await;
    assert!(
        !reader_prompts.contains(&"layoffs".to_owned())
            && admin_prompts.contains(&"layoffs".to_owned())
    );
    let reader_resources = listed(reader.clone(), "resources/list", "resources").await;
    let admin_resources = listed(admin.clone(), "resources/list", "resources").await;
    assert_eq!(reader_resources, ["readme", "changelog"]);
    assert_eq!(admin_resources, ["readme", "changelog", "payroll"]);

    let get =
        json!({"jsonrpc": "2.0", "id": 2, "method": "prompts/get", "params": {"name": "layoffs"}})
            .to_string();
    let reply = server.post(Some(&reader), &[], &get).await;
    assert_eq!(reply.status, 403, "{reply:?}");
    assert!(
        reply
            .www_authenticate
            .unwrap()
            .contains("scope=\"mcp:admin\"")
    );
    let reply = server.post(Some(&admin), &[], &get).await;
    assert_eq!(reply.status, 200);
    assert!(reply.body["result"]["messages"].is_array(), "{reply:?}");
    let read = json!({"jsonrpc": "2.0", "id": 3, "method": "resources/read", "params": {"uri": "demo://payroll"}}).to_string();
    assert_eq!(server.post(Some(&reader), &[], &read).await.status, 403);
    let reply = server.post(Some(&admin), &[], &read).await;
    assert_eq!(
        reply.body["result"]["contents"][0]["text"],
        "Salaries: confidential."
    );
}

/// `list_remediable_entries()`: a tool the client could unlock (a scope step-up, a
/// confirmation) stays listed, while `undisclosed` still hides; by default only an allow
/// lists. The README's quick-start policy answers `admin_report` with a step-up in every
/// phase, which is the case this setting is for.
#[tokio::test]
async fn remediable_entries_are_listed_only_when_asked_for() {
    let key = TestKey::es256("k1");
    let tools_seen = |list_remediable: bool| {
        let issuer_keys = keys(&key);
        let key = &key;
        async move {
            let service = sse_demo_service();
            let server = GatedServer::start_with(
                move |_| {
                    let builder = Gate::builder()
                        .issuer(Issuer::with_keys(ISSUER, issuer_keys))
                        .evaluate(|e: Evaluation| async move {
                            match e.tool() {
                                Some("admin_report") if !e.principal().has_scope("mcp:admin") => {
                                    Decision::scopes(["mcp:admin"])
                                }
                                Some("delete_file") => Decision::ask("Delete it?"),
                                Some("secret_sauce") => Decision::undisclosed(""),
                                _ => Decision::allow(),
                            }
                        });
                    if list_remediable {
                        builder.list_remediable_entries()
                    } else {
                        builder
                    }
                },
                Router::new().nest_service("/mcp", service),
            )
            .await;
            let token = key.mint(&claims(ISSUER, &server.url, "mcp:read"));
            legacy_session_tools(&server, &token).await
        }
    };
    let hidden = tools_seen(false).await;
    let listed = tools_seen(true).await;
    for tool in ["admin_report", "delete_file"] {
        assert!(
            !hidden.contains(&tool.to_owned()),
            "{tool} hidden by default: {hidden:?}"
        );
        assert!(
            listed.contains(&tool.to_owned()),
            "{tool} listed when asked: {listed:?}"
        );
    }
    assert!(
        !listed.contains(&"secret_sauce".to_owned()),
        "undisclosed still hides"
    );
    assert!(hidden.contains(&"echo".to_owned()) && listed.contains(&"echo".to_owned()));
}

/// Opens a legacy session with `token`, lists the tools (rmcp answers with an event stream)
/// and returns their names.
async fn legacy_session_tools(server: &GatedServer, token: &str) -> Vec<String> {
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}});
    let reply = server.post(Some(token), &[], &init.to_string()).await;
    let session = reply.headers["mcp-session-id"].to_str().unwrap().to_owned();
    let headers = [
        ("mcp-session-id", session.as_str()),
        ("mcp-protocol-version", "2025-11-25"),
    ];
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    server.post(Some(token), &headers, initialized).await;
    let reply = server
        .post(Some(token), &headers, &list(1, "tools/list", None))
        .await;
    assert!(
        reply.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let data = reply
        .text
        .lines()
        .find_map(|l| l.strip_prefix("data: ").filter(|d| d.contains("\"tools\"")))
        .unwrap_or_else(|| panic!("no list in {}", reply.text));
    let message: Value = serde_json::from_str(data).unwrap();
    names(&message["result"], "tools")
}
