//! Cache scope (SEP-2549) on the results the layer passes (issue 24): on a 2026-07-28 request,
//! every cacheable result the layer filtered for this caller (the six listings) or whose
//! request the policy judged for this caller (`resources/read`, `skills/get`) leaves with
//! `"cacheScope": "private"`, whatever the inner server said, its `ttlMs` capped; the result
//! of `server/discover`, which depends on no caller, keeps the inner scope.
//! Legacy (2025-11-25) results are given no `cacheScope`.
//!
//! The inner server is scripted (`common::scripted`) so that each result carries exactly the
//! scope and freshness of the row; the gate is in front of it over real HTTP on 127.0.0.1.

use crate::common;

use std::convert::Infallible;
use std::time::Duration;

use common::peers::Reply;
use common::scripted::{Era, Script, ScriptedGate};
use mcp_gate::GateBuilder;
use mcp_gate::policy::{Decision, Evaluation};
use serde_json::{Map, Value, json};

/// The default cap on `ttlMs` (60 s).
const DEFAULT_CAP_MS: u64 = 60_000;

/// A cacheable method, how to ask it, and a result of it.
struct Cacheable {
    method: &'static str,
    /// Whether the result depends on the caller (filtered or judged).
    per_caller: bool,
}

const CACHEABLE: [Cacheable; 9] = [
    Cacheable {
        method: "server/discover",
        per_caller: false,
    },
    Cacheable {
        method: "tools/list",
        per_caller: true,
    },
    Cacheable {
        method: "prompts/list",
        per_caller: true,
    },
    Cacheable {
        method: "resources/list",
        per_caller: true,
    },
    Cacheable {
        method: "resources/templates/list",
        per_caller: true,
    },
    Cacheable {
        method: "resources/directory/read",
        per_caller: true,
    },
    Cacheable {
        method: "skills/list",
        per_caller: true,
    },
    Cacheable {
        method: "resources/read",
        per_caller: true,
    },
    Cacheable {
        method: "skills/get",
        per_caller: true,
    },
];

impl Cacheable {
    /// The request's params and the name a modern request mirrors.
    fn params(&self) -> (Value, Option<&'static str>) {
        match self.method {
            "resources/directory/read" => (json!({"uri": "demo://r/"}), Some("demo://r/")),
            "resources/read" => (json!({"uri": "demo://r/a"}), Some("demo://r/a")),
            "skills/get" => (json!({"uri": "skill://a/SKILL.md"}), None),
            _ => (json!({}), None),
        }
    }

    /// The inner result, without scope or freshness.
    fn result(&self) -> Map<String, Value> {
        let result = match self.method {
            "server/discover" => json!({
                "supportedVersions": ["2026-07-28"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "scripted", "version": "1.0.0"},
            }),
            "tools/list" => json!({"tools": [{"name": "a", "inputSchema": {"type": "object"}}]}),
            "prompts/list" => json!({"prompts": [{"name": "a"}]}),
            "resources/list" | "resources/directory/read" => {
                json!({"resources": [{"uri": "demo://r/a", "name": "a"}]})
            }
            "resources/templates/list" => {
                json!({"resourceTemplates": [{"uriTemplate": "demo://t/{x}", "name": "t"}]})
            }
            "skills/list" => {
                json!({"skills": [{"uri": "skill://a/SKILL.md", "frontmatter": {"name": "a"}}]})
            }
            "resources/read" => {
                json!({"contents": [{"uri": "demo://r/a", "mimeType": "text/plain", "text": "A"}]})
            }
            "skills/get" => json!({"skill": {"uri": "skill://a/SKILL.md", "content": "# a"}}),
            other => panic!("no method {other}"),
        };
        match result {
            Value::Object(result) => result,
            _ => unreachable!(),
        }
    }
}

/// What the inner server says of a result's scope.
const SCOPES: [Option<&str>; 3] = [Some("public"), None, Some("private")];

/// What the inner server says of a result's freshness, and what the layer must make of it
/// under `cap` (milliseconds).
fn freshness(cap: u64) -> Vec<(Option<Value>, Option<Value>)> {
    vec![
        (Some(json!(cap * 60)), Some(json!(cap))),
        (Some(json!(cap / 2)), Some(json!(cap / 2))),
        (None, None),
        (Some(json!(-5)), Some(json!(0))),
        (Some(json!(1.5)), Some(json!(0))),
    ]
}

/// The policy allows everything: the results are still judged per caller.
fn allow_all() -> impl mcp_gate::policy::Policy {
    |_: Evaluation| async move { Ok::<_, Infallible>(Decision::allow()) }
}

/// The inner server answers every request with the row's result: the scope and freshness
/// of the row come in the `x-scope` and `x-ttl` members of the request's params, which the
/// script reads back (and the inner result does not carry).
fn script(request: &Value) -> Script {
    let method = request["method"].as_str().unwrap_or_default();
    let cacheable = CACHEABLE
        .iter()
        .find(|c| c.method == method)
        .unwrap_or_else(|| panic!("no script for {method}"));
    let mut result = cacheable.result();
    let params = &request["params"];
    if let Some(scope) = params.get("x-scope") {
        result.insert("cacheScope".into(), scope.clone());
    }
    if let Some(ttl) = params.get("x-ttl") {
        result.insert("ttlMs".into(), ttl.clone());
    }
    Script::json(json!({"jsonrpc": "2.0", "id": request["id"], "result": result}).to_string())
}

async fn start(configure: impl FnOnce(GateBuilder) -> GateBuilder) -> ScriptedGate {
    ScriptedGate::start(script, |b| {
        configure(
            b.evaluate(allow_all())
                .server_info("scripted", "1.0.0")
                .inner_read_timeout(Duration::from_secs(5)),
        )
    })
    .await
}

/// Asks `cacheable` in `era`, the inner server told to answer with `scope` and `ttl`.
async fn ask(
    gated: &ScriptedGate,
    era: Era,
    id: u64,
    cacheable: &Cacheable,
    (scope, ttl): (Option<&str>, Option<&Value>),
) -> Reply {
    let (mut params, name) = cacheable.params();
    if let Some(scope) = scope {
        params["x-scope"] = json!(scope);
    }
    if let Some(ttl) = ttl {
        params["x-ttl"] = ttl.clone();
    }
    gated.send(era, id, cacheable.method, params, name).await
}

/// Every row of the table on modern requests, under `cap` (milliseconds); every row that is
/// not as the contract says is reported.
async fn modern_table(gated: &ScriptedGate, cap: u64) {
    let (mut id, mut wrong) = (0, Vec::new());
    for cacheable in &CACHEABLE {
        for scope in SCOPES {
            for (ttl, capped) in freshness(cap) {
                id += 1;
                let reply = ask(gated, Era::Modern, id, cacheable, (scope, ttl.as_ref())).await;
                let result = &reply.body["result"];
                // Not caller-dependent, `server/discover` keeps the inner scope; what it does
                // with the freshness the contract leaves open, so it is not checked.
                let (want_scope, want_ttl) = if cacheable.per_caller {
                    (Some("private"), Some(capped.as_ref()))
                } else {
                    (scope, None)
                };
                let as_said = reply.status == 200
                    && reply.body["id"] == id
                    && result.is_object()
                    && result.get("cacheScope").and_then(Value::as_str) == want_scope
                    && want_ttl.is_none_or(|want| result.get("ttlMs") == want);
                if !as_said {
                    wrong.push(format!(
                        "{} scope {scope:?} ttlMs {ttl:?}: want {want_scope:?} {want_ttl:?}, got {}",
                        cacheable.method, reply.text
                    ));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {id} rows not as the contract says (cap {cap} ms): {wrong:#?}",
        wrong.len()
    );
}

/// Each cacheable method x inner `public` / absent / `private` x `ttlMs` above, below the
/// default cap, absent, negative and not an integer, on modern requests: every
/// caller-dependent result leaves `private` with its `ttlMs` capped at 60 s (a negative or
/// non-integer one as 0, an absent one absent); `server/discover` keeps the inner scope.
/// Before: every result left as the inner server said it.
#[tokio::test]
async fn caller_dependent_results_leave_private_with_the_default_cap() {
    let gated = start(|b| b).await;
    modern_table(&gated, DEFAULT_CAP_MS).await;
}

/// Legacy results are given no `cacheScope` and no `ttlMs` where the inner server gave none.
#[tokio::test]
async fn legacy_results_are_given_no_cache_scope() {
    let gated = start(|b| b).await;
    for (id, cacheable) in (1..).zip(&CACHEABLE) {
        if cacheable.method == "server/discover" {
            continue;
        }
        let reply = ask(&gated, Era::Legacy, id, cacheable, (None, None)).await;
        let case = cacheable.method;
        assert_eq!(reply.status, 200, "{case}: {reply:?}");
        let result = &reply.body["result"];
        assert!(result.is_object(), "{case}: {reply:?}");
        assert!(result.get("cacheScope").is_none(), "{case}: {reply:?}");
        assert!(result.get("ttlMs").is_none(), "{case}: {reply:?}");
    }
}

/// The same table under `GateBuilder::cache_ttl_cap`: a cap below the default (5 s) and one
/// above it (200 s, so an inner 100 s is kept, which the default would have cut to 60 s).
#[tokio::test]
async fn the_ttl_cap_is_the_configured_one() {
    for cap in [5_000, 200_000] {
        let gated = start(|b| b.cache_ttl_cap(Duration::from_millis(cap))).await;
        modern_table(&gated, cap).await;
    }
}
