//! What a Cedar policy costs (feature `cedar`), in one run:
//!
//! 1. `CedarPolicy::evaluate` called directly, one call at a time on one thread, with policy
//!    sets of 10, 100 and 1,000 policies generated per tool (a permit on scope and input, a
//!    permit on role and input, and three annotated forbids on input, scope and era): p50 and
//!    p99 microseconds of one evaluation, for a call the set allows and for one it denies with
//!    a remedy (two forbids match; the scopes one wins). Every tool's policies are scoped to
//!    its action, as in a real set; Cedar does not index policies by action, so each request
//!    is still checked against every policy of the set.
//! 2. Allowed `tools/call echo` requests through the real layer (the example rmcp server called
//!    through `tower::ServiceExt::oneshot` behind `gate.layer()`, cached ES256 token, as
//!    `benches/pipeline.rs` does), once with a closure policy and once with a `CedarPolicy`
//!    that decides the same (its schema generated from the server's own `tools/list`, which is
//!    also its tool list, so the drift check runs): requests per second of each, interleaved
//!    in rounds, and the ratio cedar/closure against the goal of 0.95. A third layer, the
//!    evaluator floor, runs Cedar's `Authorizer::is_authorized` on the echo request built once
//!    (part 3's) and then the closure policy: what no Cedar policy can go below, since every
//!    one runs the evaluator. It prints floor/closure (the most a Cedar policy could reach)
//!    and cedar/floor (what building the request costs through the layer).
//! 3. The allowed echo decision of part 2 without the layer, one call at a time: the closure
//!    policy, `CedarPolicy::evaluate`, and Cedar's own `Authorizer::is_authorized` on a request
//!    built once with Cedar's API (the same principal, action, resource, context and sliced
//!    policies): nanoseconds per call of each, and what `CedarPolicy` adds to the evaluator.
//!    Under callgrind, the inclusive instructions of `decide` and `is_authorized` divided by
//!    their calls are the same figures in instructions (recipe in `docs/cedar.md`, "Cost").
//!
//! ```text
//! cargo bench --features cedar --bench cedar
//! CEDAR_EVALUATIONS=2000 CEDAR_CELL_SECONDS=1 CEDAR_REQUESTS=2000 CEDAR_ROUNDS=2 \
//!   cargo bench --features cedar --bench cedar                                  # short (CI)
//! ```
//!
//! Environment (all optional):
//! - `CEDAR_EVALUATIONS` timed evaluations per policy-set size and request (default 20,000;
//!   a tenth as many are run first as a warm-up)
//! - `CEDAR_CELL_SECONDS` upper bound on the timed evaluations of one cell (default 8; the
//!   count actually timed is printed)
//! - `CEDAR_REQUESTS`    sequential requests per round and policy in part 2 (default 10,000)
//! - `CEDAR_ROUNDS`      rounds of part 2, each running both policies, in alternating order
//!   (default 5; the medians are reported; 0 skips part 2)
//! - `CEDAR_LAYER`       `closure`, `cedar` or `floor`: part 2 runs that layer alone, one round
//!   (for callgrind: `CEDAR_SIZES= CEDAR_DECISIONS=0 CEDAR_ROUNDS=1 CEDAR_LAYER=cedar
//!   CEDAR_REQUESTS=<n>` at two values of n; per request = the change over 1.1 times the
//!   requests added, the warm-up being a tenth)
//! - `CEDAR_SIZES`       the policy-set sizes of part 1, multiples of 5 separated by commas
//!   (default `10,100,1000`; empty skips part 1), e.g. one size under a profiler
//! - `CEDAR_DECISIONS`   timed calls of each of part 3's three (default 20,000; a tenth as many
//!   are run first; 0 skips part 3). Part 3 alone under callgrind:
//!   `CEDAR_SIZES= CEDAR_ROUNDS=0 CEDAR_DECISIONS=2000 valgrind --tool=callgrind target/release/deps/cedar-*`
//!
//! The exit status is 1 if a decision or a response was not the expected one.

#[path = "../tests/common/tokens.rs"]
mod tokens;

#[path = "../examples/server/tools.rs"]
#[allow(dead_code)]
mod tools;

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::body::Body;
use common::env_or;
use http::{Request, StatusCode};
use mcp_gate::policy::cedar::{CedarPolicy, GATE_SCHEMA_STUB, generate_schema};
use mcp_gate::policy::{Decision, Evaluation, Policy};
use mcp_gate::{Gate, Issuer, Principal, StaticKeys};
use serde_json::{Value, json};

const ISSUER: &str = "https://issuer.bench.example";
const RESOURCE: &str = "http://127.0.0.1:9/mcp";
const ECHO: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"mcp-gate-bench-ping"}}}"#;
const LIST: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
/// Policies generated per tool in part 1.
const PER_TOOL: usize = 5;

fn fail(message: impl std::fmt::Display) -> ! {
    eprintln!("!!! {message}");
    std::process::exit(1);
}

/// A scratch folder under the target directory.
fn folder(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target")
        .join("bench-cedar")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch folder");
    dir
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).expect("write");
}

// ---------------------------------------------------------------------------------------------
// Part 1: generated policy sets
// ---------------------------------------------------------------------------------------------

fn tool_name(i: usize) -> String {
    format!("tool_{i:03}")
}

fn input_schema() -> Value {
    json!({"type": "object", "properties": {
        "target": {"type": "string"}, "count": {"type": "integer"}, "dry_run": {"type": "boolean"}
    }, "required": ["target", "count", "dry_run"]})
}

fn tools_list(tools: usize) -> String {
    let tools: Vec<Value> = (0..tools)
        .map(|i| json!({"name": tool_name(i), "description": "generated", "inputSchema": input_schema()}))
        .collect();
    json!({ "tools": tools }).to_string()
}

/// Five policies for tool `i`, in the style of a hand-written set.
fn tool_policies(i: usize) -> String {
    let (tool, service) = (tool_name(i), i % 10);
    format!(
        r#"
@id("{tool}-use")
permit(principal, action == Bench::Action::"{tool}", resource)
when {{ principal.scopes.contains("svc{service}:use") && context.input.count <= 100 }};

@id("{tool}-ops")
permit(principal in Bench::Role::"ops", action == Bench::Action::"{tool}", resource)
when {{ context.input.dry_run }};

@id("{tool}-many") @remediation("scopes") @scopes("svc{service}:admin")
forbid(principal, action == Bench::Action::"{tool}", resource)
when {{ context.input.count > 50 && !principal.scopes.contains("svc{service}:admin") }};

@id("{tool}-prod") @remediation("url") @url("https://approve.example/{tool}/{{context.input.target}}")
@message("Approve {tool} on {{context.input.target}} for {{principal.subject}}.")
forbid(principal, action == Bench::Action::"{tool}", resource)
when {{ context.input.target like "prod-*" && !context.input.dry_run }};

@id("{tool}-never") @remediation("unavailable") @message("{tool} is closed.")
forbid(principal, action == Bench::Action::"{tool}", resource)
when {{ context.input.target == "forbidden-{i}" || context.gate.era == "legacy" }};
"#
    )
}

const BENCH_ENTITIES: &str = r#"[
  {"uid": {"type": "Bench::Role", "id": "ops"}, "attrs": {}, "parents": []},
  {"uid": {"type": "Bench::User", "id": "olga"}, "attrs": {"issuer": "", "subject": "", "client_id": "", "scopes": [], "claims": {}},
   "parents": [{"type": "Bench::Role", "id": "ops"}]}
]"#;

/// A folder with `policies` generated policies (`PER_TOOL` per tool), its generated schema,
/// tool list and entities.
fn generated_set(policies: usize) -> (CedarPolicy, usize) {
    let tools = policies / PER_TOOL;
    let dir = folder(&format!("set-{policies}"));
    let list = tools_list(tools);
    let stub = GATE_SCHEMA_STUB.replace("namespace Gate", "namespace Bench");
    let schema = generate_schema(&stub, &list).unwrap_or_else(|e| fail(e));
    write(&dir, "schema.cedarschema", &schema);
    write(&dir, "tools.json", &list);
    write(&dir, "entities.json", BENCH_ENTITIES);
    let text: String = (0..tools).map(tool_policies).collect();
    write(&dir, "policies.cedar", &text);
    let policy = CedarPolicy::builder()
        .directory(&dir)
        .build()
        .unwrap_or_else(|e| fail(e));
    (policy, tools)
}

fn evaluation(tool: &str, scopes: &[&str], arguments: Value) -> Evaluation {
    let principal = Principal::builder()
        .issuer(ISSUER)
        .subject("user-1")
        .client_id("client-1")
        .scopes(scopes.iter().copied())
        .build()
        .unwrap_or_else(|e| fail(e));
    Evaluation::builder(principal)
        .tool(tool, arguments)
        .input_schema(input_schema())
        .build()
        .unwrap_or_else(|e| fail(e))
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

/// p50 and p99 microseconds of one evaluation, and how many were timed (at most `count`, for
/// at most `seconds`), after checking its decision.
async fn time_evaluations(
    policy: &CedarPolicy,
    evaluation: &Evaluation,
    expected: &Decision,
    count: usize,
    seconds: f64,
) -> (f64, f64, usize) {
    let decided = policy
        .evaluate(evaluation.clone())
        .await
        .unwrap_or_else(|e| fail(e));
    if &decided != expected {
        fail(format!("expected {expected:?}, got {decided:?}"));
    }
    for _ in 0..count / 10 {
        let _ = policy.evaluate(evaluation.clone()).await;
    }
    let mut samples = Vec::with_capacity(count);
    let cell = Instant::now();
    while samples.len() < count && cell.elapsed().as_secs_f64() < seconds {
        let one = evaluation.clone();
        let start = Instant::now();
        let decision = policy.evaluate(one).await;
        samples.push(start.elapsed().as_secs_f64() * 1e6);
        if !matches!(&decision, Ok(d) if d.kind() == expected.kind()) {
            fail(format!("expected {expected:?}, got {decision:?}"));
        }
    }
    samples.sort_by(f64::total_cmp);
    let timed = samples.len();
    (
        percentile(&samples, 0.50),
        percentile(&samples, 0.99),
        timed,
    )
}

async fn part_one(sizes: &[usize], count: usize, seconds: f64) {
    println!(
        "Cedar evaluation, one call at a time (up to {count} timed per cell, or {seconds} s; {} warm-up)",
        count / 10
    );
    println!(
        "  {:>8}  {:>6}  {:>10}  {:>10}  {:>10}  {:>10}  {:>13}  {:>8}",
        "policies", "tools", "allow p50", "allow p99", "deny p50", "deny p99", "timed", "load ms"
    );
    for &size in sizes {
        let start = Instant::now();
        let (policy, tools) = generated_set(size);
        let load = start.elapsed().as_secs_f64() * 1e3;
        if policy.policy_count() != size {
            fail(format!(
                "{} policies loaded, not {size}",
                policy.policy_count()
            ));
        }
        let middle = tool_name(tools / 2);
        let service = (tools / 2) % 10;
        let scope = format!("svc{service}:use");
        let allow = evaluation(
            &middle,
            &[&scope, "mcp:read"],
            json!({"target": "dev-1", "count": 10, "dry_run": false}),
        );
        // Matches `-many` (scopes) and `-prod` (url): scopes wins.
        let deny = evaluation(
            &middle,
            &[&scope, "mcp:read"],
            json!({"target": "prod-eu", "count": 80, "dry_run": false}),
        );
        let (allow_50, allow_99, allowed) =
            time_evaluations(&policy, &allow, &Decision::allow(), count, seconds).await;
        let denied = Decision::scopes([format!("svc{service}:admin")]);
        let (deny_50, deny_99, denials) =
            time_evaluations(&policy, &deny, &denied, count, seconds).await;
        let timed = format!("{allowed}+{denials}");
        println!(
            "  {size:>8}  {tools:>6}  {allow_50:>8.1}µs  {allow_99:>8.1}µs  {deny_50:>8.1}µs  {deny_99:>8.1}µs  {timed:>13}  {load:>8.1}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Part 2: allowed calls through the layer, closure policy vs CedarPolicy
// ---------------------------------------------------------------------------------------------

/// The example server's policy in Cedar: one permit or forbid per tool, with scope and input
/// conditions and remedies, as an operator would write it.
const LAYER_POLICIES: &str = r#"
@id("read-tools")
permit(principal, action in [Bench::Action::"echo", Bench::Action::"uppercase", Bench::Action::"word_count", Bench::Action::"now", Bench::Action::"add", Bench::Action::"whoami"], resource)
when { principal.scopes.contains("mcp:read") };

@id("echo-size") @remediation("unavailable") @message("Too long.")
forbid(principal, action == Bench::Action::"echo", resource)
when { context.input.text like "*forbidden*" };

@id("admin") @remediation("scopes") @scopes("mcp:admin")
forbid(principal, action == Bench::Action::"admin_report", resource)
unless { principal.scopes.contains("mcp:admin") };
@id("admin-permit")
permit(principal, action == Bench::Action::"admin_report", resource);

@id("secret") @remediation("undisclosed")
forbid(principal, action == Bench::Action::"secret_sauce", resource);

@id("everything") @remediation("unavailable") @message("Deleting everything is never allowed.")
forbid(principal, action == Bench::Action::"delete_everything", resource);

@id("transfer") @remediation("credential")
@authorization_details("[{\"type\": \"payment_initiation\", \"instructedAmount\": {\"amount\": \"{context.input.amount}\", \"currency\": \"{context.input.currency}\"}, \"creditorAccount\": {\"iban\": \"{context.input.iban}\"}}]")
forbid(principal, action == Bench::Action::"transfer", resource);

@id("share")
permit(principal, action == Bench::Action::"share_folder", resource)
when { principal.scopes.contains("mcp:write") };
@id("share-ask") @remediation("ask") @message("Share {context.input.folder}?")
forbid(principal, action == Bench::Action::"share_folder", resource)
when { context.gate.elicitation_form };

@id("delete")
permit(principal, action == Bench::Action::"delete_file", resource)
when { principal.scopes.contains("mcp:write") };

@id("deploy") @remediation("task") @message("Deploying to {context.input.env} needs an approval.")
forbid(principal, action == Bench::Action::"deploy", resource)
when { context.input.env == "prod" && context.gate.phase != "approval" };
@id("deploy-permit")
permit(principal, action == Bench::Action::"deploy", resource)
when { principal.scopes.contains("mcp:write") };
"#;

/// The same decisions as `LAYER_POLICIES`, as a closure.
async fn closure_policy(evaluation: Evaluation) -> Decision {
    let principal = evaluation.principal();
    let input = |key: &str| {
        evaluation
            .arguments()
            .and_then(|a| a.get(key))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let read = principal.has_scope("mcp:read");
    let write = principal.has_scope("mcp:write");
    match evaluation.tool().unwrap_or_default() {
        "echo" if input("text").contains("forbidden") => Decision::unavailable("Too long."),
        "echo" | "uppercase" | "word_count" | "now" | "add" | "whoami" if read => Decision::allow(),
        "admin_report" if !principal.has_scope("mcp:admin") => Decision::scopes(["mcp:admin"]),
        "admin_report" => Decision::allow(),
        "delete_everything" => Decision::unavailable("Deleting everything is never allowed."),
        "share_folder" if evaluation.capabilities().form_elicitation() => {
            Decision::ask(format!("Share {}?", input("folder")))
        }
        "share_folder" | "delete_file" if write => Decision::allow(),
        _ => Decision::undisclosed("You are not allowed to do this."),
    }
}

fn router(gate: Option<&Gate>) -> Router {
    let app = Router::new().nest_service("/mcp", tools::mcp_service());
    match gate {
        Some(gate) => app.layer(gate.layer()),
        None => app,
    }
}

async fn post(app: &Router, token: Option<&str>, body: &'static str) -> (StatusCode, Vec<u8>) {
    let mut request = Request::post("/mcp")
        .header("host", "127.0.0.1:9")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    if let Some(token) = token {
        request = request.header("authorization", token);
    }
    let request = request.body(Body::from(body)).expect("request");
    let (status, bytes) = common::send(app, request).await;
    (status, bytes.to_vec())
}

/// One allowed echo; exits if it was not echoed.
async fn echo(app: &Router, token: &str) {
    let (status, body) = post(app, Some(token), ECHO).await;
    let echoed = body
        .windows(19)
        .any(|w| w == b"mcp-gate-bench-ping" as &[u8]);
    let denied = body.windows(13).any(|w| w == b"authorization" as &[u8]);
    if status != StatusCode::OK || !echoed || denied {
        fail(format!(
            "echo through the gate: {status} {}",
            String::from_utf8_lossy(&body)
        ));
    }
}

/// Requests per second over `requests` sequential echoes.
async fn throughput(app: &Router, token: &str, requests: usize) -> f64 {
    let start = Instant::now();
    for _ in 0..requests {
        echo(app, token).await;
    }
    requests as f64 / start.elapsed().as_secs_f64()
}

/// The server's own `tools/list` result (JSON or a one-event SSE stream).
async fn listed_tools(app: &Router) -> Value {
    let (status, body) = post(app, None, LIST).await;
    let text = String::from_utf8_lossy(&body);
    let json = text
        .lines()
        .find_map(|line| line.strip_prefix("data:"))
        .unwrap_or(&text)
        .trim();
    match serde_json::from_str::<Value>(json) {
        Ok(value) if status == StatusCode::OK && value["result"]["tools"].is_array() => {
            value["result"].clone()
        }
        _ => fail(format!("tools/list of the example server: {status} {text}")),
    }
}

fn gate(keys: &StaticKeys, policy: impl Policy) -> Gate {
    Gate::builder()
        .resource(RESOURCE)
        .issuer(Issuer::with_keys(ISSUER, keys.clone()))
        .required_scopes(["mcp:read"])
        .evaluate(policy)
        .build()
        .unwrap_or_else(|e| fail(e))
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The example server's policy as a `CedarPolicy`, its schema generated from the server's own
/// `tools/list` (which is also its tool list, so the drift check runs); with the schema text
/// and the listed tools.
async fn layer_set() -> (CedarPolicy, String, Value) {
    let listed = listed_tools(&router(None)).await;
    let dir = folder("layer");
    let stub = GATE_SCHEMA_STUB.replace("namespace Gate", "namespace Bench");
    let schema = generate_schema(&stub, &listed.to_string()).unwrap_or_else(|e| fail(e));
    write(&dir, "schema.cedarschema", &schema);
    write(&dir, "tools.json", &listed.to_string());
    write(&dir, "policies.cedar", LAYER_POLICIES);
    let cedar = CedarPolicy::builder()
        .directory(&dir)
        .build()
        .unwrap_or_else(|e| fail(e));
    (cedar, schema, listed)
}

async fn part_two(requests: usize, rounds: usize) {
    let key = tokens::TestKey::es256("bench");
    let keys = StaticKeys::from_jwks_json(&key.jwks_json()).expect("keys");
    let token = format!(
        "Bearer {}",
        key.mint(&tokens::claims(ISSUER, RESOURCE, "mcp:read"))
    );

    let (cedar, schema, listed) = layer_set().await;
    let count = cedar.policy_count();
    let prebuilt = Arc::new(prebuilt_echo(&schema, &echo_evaluation(&listed)));

    let with_closure = router(Some(&gate(&keys, closure_policy)));
    let with_cedar = router(Some(&gate(&keys, cedar)));
    let with_floor = router(Some(&gate(&keys, evaluator_floor(prebuilt))));
    if let Ok(only) = std::env::var("CEDAR_LAYER") {
        // One layer alone, for callgrind: its instructions per request are the change between
        // two values of CEDAR_REQUESTS, over the requests added (1.1 times the change).
        let app = match only.as_str() {
            "closure" => &with_closure,
            "cedar" => &with_cedar,
            "floor" => &with_floor,
            _ => fail(format!(
                "CEDAR_LAYER: {only:?} is not closure, cedar or floor"
            )),
        };
        throughput(app, &token, requests / 10 + 1).await;
        let rate = throughput(app, &token, requests).await;
        println!("  {only} alone: {rate:.0} req/s over {requests} requests");
        return;
    }
    for app in [&with_closure, &with_cedar, &with_floor] {
        throughput(app, &token, requests / 10 + 1).await;
    }
    let (mut closure, mut cedar, mut floor) = (Vec::new(), Vec::new(), Vec::new());
    let (mut ratios, mut floor_ratios) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        // The three in a rotating order, so that no one always runs first or last.
        let mut measured = [0.0; 3];
        for step in 0..3 {
            let which = (round + step) % 3;
            let app = [&with_closure, &with_cedar, &with_floor][which];
            measured[which] = throughput(app, &token, requests).await;
        }
        let [c, d, f] = measured;
        closure.push(c);
        cedar.push(d);
        floor.push(f);
        ratios.push(d / c);
        floor_ratios.push(f / c);
    }
    let per_round: Vec<String> = ratios.iter().map(|r| format!("{r:.3}")).collect();
    let (closure, cedar, ratio) = (median(closure), median(cedar), median(ratios));
    let (floor, floor_ratio) = (median(floor), median(floor_ratios));
    println!();
    println!(
        "Allowed tools/call echo through the layer ({requests} sequential requests per round, {rounds} rounds, medians)"
    );
    println!(
        "  closure policy            {closure:>9.0} req/s  {:>7.1} µs/request",
        1e6 / closure
    );
    println!(
        "  CedarPolicy ({count} policies) {cedar:>9.0} req/s  {:>7.1} µs/request",
        1e6 / cedar
    );
    println!(
        "  cedar/closure             {ratio:>9.3}        (goal >= 0.95: {})",
        if ratio >= 0.95 { "met" } else { "MISSED" }
    );
    println!("  per round                 {}", per_round.join(" "));
    println!(
        "  evaluator floor           {floor:>9.0} req/s  {:>7.1} µs/request  (closure + is_authorized on a prebuilt request)",
        1e6 / floor
    );
    println!(
        "  floor/closure             {floor_ratio:>9.3}        (the most any Cedar policy could reach)"
    );
    println!("  cedar/floor               {:>9.3}", cedar / floor);
}

/// The floor of any Cedar policy through the layer: the closure policy's decision, after
/// Cedar's evaluator has run on the echo call's request built once (`prebuilt_echo`), so that
/// the layer does everything it does for `CedarPolicy` but build the request.
fn evaluator_floor(
    prebuilt: Arc<(
        cedar_policy::Request,
        cedar_policy::PolicySet,
        cedar_policy::Entities,
    )>,
) -> impl Fn(Evaluation) -> std::pin::Pin<Box<dyn std::future::Future<Output = Decision> + Send>>
+ Send
+ Sync
+ 'static {
    move |evaluation| {
        let (request, policies, entities) = &*prebuilt;
        let response = cedar_policy::Authorizer::new().is_authorized(request, policies, entities);
        if response.decision() != cedar_policy::Decision::Allow {
            fail("the prebuilt echo request was not allowed");
        }
        Box::pin(closure_policy(evaluation))
    }
}

// ---------------------------------------------------------------------------------------------
// Part 3: the same allowed decision without the layer, and Cedar's evaluator alone
// ---------------------------------------------------------------------------------------------

/// The allowed `echo` call of part 2 as the layer asks it (the token's principal, the listed
/// input schema).
fn echo_evaluation(listed: &Value) -> Evaluation {
    let principal = Principal::builder()
        .issuer(ISSUER)
        .subject("user-1")
        .client_id("client-1")
        .scopes(["mcp:read"])
        .build()
        .unwrap_or_else(|e| fail(e));
    let input_schema = listed["tools"]
        .as_array()
        .and_then(|tools| tools.iter().find(|tool| tool["name"] == "echo"))
        .map(|tool| tool["inputSchema"].clone())
        .unwrap_or_else(|| fail("the example server lists no echo tool"));
    Evaluation::builder(principal)
        .tool("echo", json!({"text": "mcp-gate-bench-ping"}))
        .input_schema(input_schema)
        .build()
        .unwrap_or_else(|e| fail(e))
}

/// What `CedarPolicy` puts to Cedar for the echo call, built once with Cedar's own API: the
/// request (validated against the schema), the policies whose action scope can match `echo`,
/// and the entities (the schema's actions and the principal).
fn prebuilt_echo(
    schema_text: &str,
    evaluation: &Evaluation,
) -> (
    cedar_policy::Request,
    cedar_policy::PolicySet,
    cedar_policy::Entities,
) {
    use cedar_policy::{
        ActionConstraint, Context, Entities, Entity, EntityUid, PolicySet, Request,
        RestrictedExpression as Rx, Schema,
    };
    use std::str::FromStr;
    let (schema, _) = Schema::from_cedarschema_str(schema_text).unwrap_or_else(|e| fail(e));
    let uid = |text: &str| EntityUid::from_str(text).unwrap_or_else(|e| fail(e));
    let (principal, action) = (
        uid(r#"Bench::User::"user-1""#),
        uid(r#"Bench::Action::"echo""#),
    );
    let string = |text: &str| Rx::new_string(text.to_owned());
    let record = |pairs: Vec<(&str, Rx)>| {
        Rx::new_record(pairs.into_iter().map(|(k, v)| (k.to_owned(), v)))
            .unwrap_or_else(|e| fail(e))
    };
    let gate = record(vec![
        ("era", string("modern")),
        ("phase", string("invocation")),
        (
            "protocol_version",
            string(evaluation.protocol_version().unwrap_or_default()),
        ),
        ("elicitation_form", Rx::new_bool(false)),
        ("elicitation_url", Rx::new_bool(false)),
        ("tasks", Rx::new_bool(false)),
        ("approved_by", string("")),
    ]);
    let input = record(vec![("text", string("mcp-gate-bench-ping"))]);
    let pairs = [("input", input), ("gate", gate), ("app", record(vec![]))];
    let context = Context::from_pairs(pairs.map(|(key, value)| (key.to_owned(), value)))
        .unwrap_or_else(|e| fail(e));
    let request = Request::new(
        principal.clone(),
        action.clone(),
        uid(r#"Bench::McpServer::"server""#),
        context,
        Some(&schema),
    )
    .unwrap_or_else(|e| fail(e));
    let user = Entity::new(
        principal,
        [
            ("issuer".to_owned(), string(ISSUER)),
            ("subject".to_owned(), string("user-1")),
            ("client_id".to_owned(), string("client-1")),
            ("scopes".to_owned(), Rx::new_set([string("mcp:read")])),
            ("claims".to_owned(), record(vec![])),
        ]
        .into_iter()
        .collect(),
        Default::default(),
    )
    .unwrap_or_else(|e| fail(e));
    let actions = schema.action_entities().unwrap_or_else(|e| fail(e));
    let entities = Entities::from_entities(actions.into_iter().chain([user]), Some(&schema))
        .unwrap_or_else(|e| fail(e));
    let all = PolicySet::from_str(LAYER_POLICIES).unwrap_or_else(|e| fail(e));
    let mut policies = PolicySet::new();
    for policy in all.policies() {
        let applies = match policy.action_constraint() {
            ActionConstraint::Any => true,
            ActionConstraint::Eq(only) => only == action,
            ActionConstraint::In(any_of) => any_of.contains(&action),
        };
        if applies {
            policies.add(policy.clone()).unwrap_or_else(|e| fail(e));
        }
    }
    (request, policies, entities)
}

/// Nanoseconds per call of `call`, over `count` calls after `count / 10` unmeasured ones.
async fn per_call<F: std::future::Future<Output = bool>>(
    count: usize,
    mut call: impl FnMut() -> F,
) -> f64 {
    for _ in 0..count / 10 {
        if !call().await {
            fail("a decision was not the expected allow");
        }
    }
    let start = Instant::now();
    for _ in 0..count {
        if !call().await {
            fail("a decision was not the expected allow");
        }
    }
    start.elapsed().as_secs_f64() * 1e9 / count as f64
}

async fn part_three(count: usize) {
    let (cedar, schema, listed) = layer_set().await;
    let evaluation = echo_evaluation(&listed);
    let (request, policies, entities) = prebuilt_echo(&schema, &evaluation);
    let authorizer = cedar_policy::Authorizer::new();
    let closure = per_call(count, || {
        let one = evaluation.clone();
        async move { closure_policy(one).await == Decision::allow() }
    })
    .await;
    let decide = per_call(count, || {
        let one = cedar.evaluate(evaluation.clone());
        async move { matches!(one.await, Ok(Decision::Allow)) }
    })
    .await;
    let evaluator = per_call(count, || {
        let response = authorizer.is_authorized(&request, &policies, &entities);
        std::future::ready(response.decision() == cedar_policy::Decision::Allow)
    })
    .await;
    println!();
    println!(
        "The allowed echo decision alone ({count} calls each, after {} unmeasured)",
        count / 10
    );
    println!("  closure policy                  {:>9.0} ns/call", closure);
    println!("  CedarPolicy::evaluate           {:>9.0} ns/call", decide);
    println!(
        "  Authorizer::is_authorized alone {:>9.0} ns/call  (prebuilt request, same policies)",
        evaluator
    );
    println!(
        "  CedarPolicy beyond the evaluator {:>8.0} ns/call",
        decide - evaluator
    );
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let evaluations = env_or("CEDAR_EVALUATIONS", 20_000usize, 100, 10_000_000);
    let requests = env_or("CEDAR_REQUESTS", 10_000usize, 100, 10_000_000);
    let rounds = env_or("CEDAR_ROUNDS", 5usize, 0, 100);
    let decisions = env_or("CEDAR_DECISIONS", 20_000usize, 0, 10_000_000);
    let seconds = env_or("CEDAR_CELL_SECONDS", 8.0f64, 0.1, 600.0);
    let start = Instant::now();
    let sizes = std::env::var("CEDAR_SIZES").unwrap_or_else(|_| "10,100,1000".into());
    let sizes: Vec<usize> = sizes
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| match s.trim().parse::<usize>() {
            Ok(size) if size >= PER_TOOL && size % PER_TOOL == 0 && size <= 100_000 => size,
            _ => {
                eprintln!("CEDAR_SIZES: {s:?} is not a multiple of {PER_TOOL} in 5..=100000");
                std::process::exit(2);
            }
        })
        .collect();
    if !sizes.is_empty() {
        part_one(&sizes, evaluations, seconds).await;
    }
    if rounds > 0 {
        part_two(requests, rounds).await;
    }
    if decisions > 0 {
        part_three(decisions).await;
    }
    println!("(whole run: {:.1} s)", start.elapsed().as_secs_f64());
}
