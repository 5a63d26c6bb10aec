//! The gateway binary with the example Cedar policy set (`mcp-gate-server/cedar/`), in front of
//! the official Python SDK's server (`tests/peers/py_upstream.py`) and of the TypeScript SDK's
//! (`tests/peers/ts-upstream.mjs`), driven by both official SDK clients with real
//! `oidc-provider` tokens: every denial kind as each client surfaces it, the held call approved
//! on the operations console and run once, list filtering, and conceal mode.
//!
//! Which era a client speaks decides what can be offered: the TypeScript client speaks legacy
//! MCP (2025-11-25) only; the Python client speaks modern MCP (2026-07-28) when `server/discover`
//! is answered. The Python server answers it; in front of the TypeScript server, which speaks
//! legacy MCP only, the gateway answers it (`[upstream] legacy-only`) and carries each modern
//! request to the upstream in a legacy session of its own, closed after it. A URL approval
//! round trip, a confirmation and a held task need modern MCP; on legacy sessions the gateway
//! says them as `undisclosed`, the remedy in the text, as the layer does.

mod common;

use std::sync::{Arc, Mutex};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use common::sdk::{ClientRun, Console, Sdk, run, run_client};
use common::{AuthServer, CLIENT, Gateway, SECRET, UpstreamServer, free_port};
use mcp_gate::denial::ENVELOPE_KEY;
use serde_json::{Value, json};

/// The example policy set, by absolute path.
fn cedar_folder() -> String {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("cedar")
        .display()
        .to_string()
}

/// A gateway configuration in front of `upstream`, trusting `issuer`, deciding with the
/// example Cedar set; `conceal` says refusals as unknown tools; `legacy_only` bridges modern
/// clients to an upstream that speaks legacy MCP only.
fn config(port: u16, upstream: &str, issuer: &str, conceal: bool, legacy_only: bool) -> String {
    format!(
        r#"listen = "127.0.0.1:{port}"
[upstream]
url = "{upstream}"
legacy-only = {legacy_only}
[resource]
uri = "http://127.0.0.1:{port}/mcp"
[[issuer]]
url = "{issuer}"
[tokens]
required-scopes = ["mcp:read"]
[policy]
cedar = "{cedar}"
[denials]
conceal-refusals = {conceal}
[tasks]
poll-interval = "200ms"
[operations]
listen = "127.0.0.1:0"
metrics = false
[reload]
watch-interval = "0s"
"#,
        cedar = cedar_folder(),
    )
}

/// One upstream behind two gateways (one saying refusals, one concealing them), and the
/// authorization server both trust.
struct Deployment {
    auth: AuthServer,
    upstream: UpstreamServer,
    gateway: Gateway,
    resource: String,
    /// Kept running for as long as the deployment.
    _concealing: Gateway,
    concealing_resource: String,
}

impl Deployment {
    async fn start(upstream: UpstreamServer, legacy_only: bool) -> Self {
        let auth = AuthServer::start(&[]).await;
        let (port, concealing_port) = (free_port(), free_port());
        let gateway = Gateway::start(
            &config(port, &upstream.url, &auth.issuer, false, legacy_only),
            &[],
        )
        .await;
        let concealing = Gateway::start(
            &config(
                concealing_port,
                &upstream.url,
                &auth.issuer,
                true,
                legacy_only,
            ),
            &[],
        )
        .await;
        Self {
            auth,
            upstream,
            gateway,
            resource: format!("http://127.0.0.1:{port}/mcp"),
            _concealing: concealing,
            concealing_resource: format!("http://127.0.0.1:{concealing_port}/mcp"),
        }
    }

    /// The held-call console of the (non-concealing) gateway.
    fn console(&self) -> Console {
        Console::new(
            self.gateway
                .operations
                .as_deref()
                .expect("an operations listener"),
        )
    }
}

/// A call of each demo tool; `transfer` last, as its credential challenge ends the client's
/// authorization (the SDK re-authorizes once, then gives up).
const CALLS: [&str; 8] = [
    r#"echo={"text":"allowed"}"#,
    "admin_report",
    r#"share_folder={"folder":"team-docs"}"#,
    r#"delete_file={"path":"notes.txt"}"#,
    r#"deploy={"service":"web"}"#,
    "delete_everything",
    "secret_sauce",
    r#"transfer={"amount":"40.00","currency":"EUR","iban":"DE00TEST"}"#,
];

/// The approval page the example set names for the folder `team-docs`.
const SHARE_URL: &str = "https://approvals.example.com/folders/team-docs/share";

/// The arguments of `sdk`'s client getting a `mcp:read` token by `client_credentials` through
/// the gateway's metadata, then `extra`: the TypeScript SDK asks for the scope it is given
/// and steps up when told (`--step-up`); the Python SDK asks for the challenge's scope and
/// steps up by itself, and here declares elicitation and tasks.
fn reader_args<'a>(sdk: Sdk, auth: &'a AuthServer, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["--client-id", CLIENT, "--client-secret", SECRET];
    args.extend(["--issuer", auth.issuer.as_str()]);
    match sdk {
        Sdk::TypeScript => args.extend(["--scope", "mcp:read", "--step-up"]),
        Sdk::Python => args.extend(["--elicit", "--tasks", "--wait-task"]),
    }
    args.extend_from_slice(extra);
    args
}

/// `args`, then a `--call` for each of `calls`.
fn calling<'a>(mut args: Vec<&'a str>, calls: &[&'a str]) -> Vec<&'a str> {
    for call in calls {
        args.extend(["--call", call]);
    }
    args
}

fn envelope(step: &Value) -> &Value {
    &step["result"]["_meta"][ENVELOPE_KEY]
}

/// A tool error carrying the envelope with `remediation`, whose text contains `text`.
fn assert_refused(run: &ClientRun, tool: &str, remediation: &str, text: &str) {
    let step = run.call(tool);
    assert_eq!(step["ok"], true, "{tool}: {run:#?}");
    assert_eq!(step["result"]["isError"], true, "{tool}: {step}");
    assert_eq!(envelope(step)["reason"], "insufficient_authorization");
    assert_eq!(envelope(step)["remediation"], remediation, "{tool}: {step}");
    assert!(
        envelope(step)["authorizationContextId"]
            .as_str()
            .is_some_and(|id| id.starts_with("actx_")),
        "{step}"
    );
    let said = step["result"]["content"][0]["text"].as_str().unwrap_or("");
    assert!(said.contains(text), "{tool}: {said:?} lacks {text:?}");
}

/// The credential challenge for the transfer of 40.00 EUR, as the client saw it: the
/// details the policy's template built from the call's arguments.
fn assert_credential_challenge(run: &ClientRun) {
    let transfer = run.call("transfer");
    assert_eq!(transfer["ok"], false, "{run:#?}");
    assert_eq!(transfer["error"]["http_status"], 401, "{transfer}");
    let challenge = run
        .http
        .iter()
        .filter_map(|exchange| exchange["www_authenticate"].as_str())
        .find(|challenge| challenge.contains("insufficient_authorization"))
        .unwrap_or_else(|| panic!("no credential challenge: {run:#?}"));
    let encoded = challenge
        .split("authorization_remediation=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("authorization_remediation");
    let remedy: Value =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(encoded).expect("base64url")).expect("JSON");
    assert_eq!(
        remedy["authorization_details"],
        json!([{
            "type": "payment_initiation",
            "actions": ["initiate"],
            "instructedAmount": {"currency": "EUR", "amount": "40.00"},
            "creditorAccount": {"iban": "DE00TEST"},
        }]),
        "{remedy}"
    );
}

/// How many more times each of `tools` ran between `before` and `after`.
fn ran(before: &Value, after: &Value, tools: &[&str]) -> Vec<(String, u64)> {
    let count = |runs: &Value, tool: &str| runs[tool].as_u64().unwrap_or(0);
    tools
        .iter()
        .map(|tool| ((*tool).to_owned(), count(after, tool) - count(before, tool)))
        .collect()
}

/// A held call the test approved on the console: its id, what the console listed as waiting
/// just before, and the approval's HTTP status.
struct Decided {
    task: String,
    waiting: Vec<Value>,
    status: u16,
}

/// Every denial kind, for `sdk`'s client through `deployment`'s gateway. `modern` is the era
/// this pair is expected to speak.
async fn every_denial_kind(deployment: &Deployment, sdk: Sdk, modern: bool) {
    let console = deployment.console();
    let decided: Arc<Mutex<Vec<Decided>>> = Arc::default();
    let before = deployment.upstream.runs().await;
    let args = calling(reader_args(sdk, &deployment.auth, &[]), &CALLS);
    let record = decided.clone();
    let run = run_client(sdk, &deployment.resource, &args, |task| {
        let (console, record) = (&console, record.clone());
        async move {
            // The approver sees the call waiting, then approves it.
            let waiting = console.waiting().await;
            let (status, _) = console.approve(&task, "release-manager").await;
            record.lock().expect("lock").push(Decided {
                task,
                waiting,
                status,
            });
        }
    })
    .await;
    let after = deployment.upstream.runs().await;
    let connect = run.step("connect");
    assert_eq!(connect["ok"], true, "{run:#?}");
    let version = if modern { "2026-07-28" } else { "2025-11-25" };
    assert_eq!(connect["protocol_version"], version, "{sdk:?}");

    // Allowed.
    assert_eq!(
        run.call("echo")["result"]["content"][0]["text"],
        "allowed",
        "{run:#?}"
    );

    // List filtering, with the reader's token: neither the hidden tools nor the admin's.
    assert_eq!(
        run.listed(),
        ["delete_file", "deploy", "echo", "share_folder", "transfer"],
        "{sdk:?}"
    );

    // Scope step-up: a 403 naming mcp:admin, a token with it, and the call runs.
    let forbidden = run
        .http
        .iter()
        .find(|exchange| exchange["status"] == 403)
        .unwrap_or_else(|| panic!("a 403 before the step-up: {run:#?}"));
    assert!(
        forbidden["www_authenticate"]
            .as_str()
            .is_some_and(|c| c.contains("insufficient_scope") && c.contains("mcp:admin")),
        "{forbidden}"
    );
    assert!(
        run.asked_for_scopes(&deployment.auth.token_endpoint, &["mcp:read", "mcp:admin"]),
        "{run:#?}"
    );
    if sdk == Sdk::TypeScript {
        let admin = run.calls("admin_report");
        assert_eq!(admin[0]["ok"], false);
        assert_eq!(admin[0]["error"]["http_status"], 403);
        assert_eq!(run.step("step-up")["scope"], "mcp:read mcp:admin");
    }
    assert_eq!(
        run.call("admin_report")["result"]["content"][0]["text"],
        "admin report: all systems nominal",
        "{run:#?}"
    );

    // Credential: the challenge with the details built from the call.
    assert_credential_challenge(&run);

    // Unavailable and undisclosed.
    assert_refused(
        &run,
        "delete_everything",
        "unavailable",
        "Deleting everything is never allowed.",
    );
    assert_refused(
        &run,
        "secret_sauce",
        "undisclosed",
        "You cannot use this tool.",
    );

    if modern {
        // URL approval: the client is sent to the page, in every round the gateway allows;
        // nothing records a visit, so the call ends refused.
        let urls: Vec<&Value> = run
            .lines_of("elicit")
            .into_iter()
            .filter(|line| line["elicit"]["mode"] == "url")
            .collect();
        assert!(!urls.is_empty(), "{run:#?}");
        for line in &urls {
            assert_eq!(line["elicit"]["url"], SHARE_URL, "{line}");
        }
        assert_refused(&run, "share_folder", "undisclosed", SHARE_URL);

        // Confirmation: the user is asked, accepts, and the call runs.
        let asked = run
            .lines_of("elicit")
            .into_iter()
            .find(|line| line["elicit"]["mode"] == "form")
            .unwrap_or_else(|| panic!("a confirmation request: {run:#?}"));
        assert_eq!(asked["elicit"]["message"], "Delete notes.txt?");
        assert_eq!(
            run.call("delete_file")["result"]["content"][0]["text"],
            "deleted notes.txt"
        );

        // The held task: listed on the console (its tool and owner, not its arguments),
        // approved there, and the client's poll gets the result of its one run.
        let decided = std::mem::take(&mut *decided.lock().expect("lock"));
        assert_eq!(decided.len(), 1, "one held call: {run:#?}");
        let Decided {
            task,
            waiting,
            status,
        } = &decided[0];
        assert_eq!(*status, 200);
        let listed = waiting
            .iter()
            .find(|entry| entry["id"] == task.as_str())
            .unwrap_or_else(|| panic!("{task} waits on the console: {waiting:?}"));
        assert_eq!(listed["tool"], "deploy");
        assert_eq!(listed["owner"]["client_id"], CLIENT);
        assert!(!listed.to_string().contains("web"), "{listed}");
        let deploy = run.call("deploy");
        assert_eq!(deploy["ok"], true, "{run:#?}");
        assert_eq!(deploy["task_status"], "completed", "{deploy}");
        assert_eq!(deploy["result"]["content"][0]["text"], "deployed web");
        // Decided once: a second decision is refused, and nothing waits any more.
        let (again, answer) = console.approve(task, "someone-else").await;
        assert_eq!(again, 409, "{answer}");
        assert_eq!(answer["error"], "already_decided");
        assert!(console.waiting().await.is_empty());
        assert_eq!(
            ran(&before, &after, &["deploy", "delete_file", "admin_report"]),
            [
                ("deploy".to_owned(), 1),
                ("delete_file".to_owned(), 1),
                ("admin_report".to_owned(), 1)
            ]
        );
    } else {
        // Legacy sessions cannot take the gateway's round trips: each remedy is said as
        // undisclosed, with what would have helped in the text, and nothing is held or run.
        assert_refused(&run, "share_folder", "undisclosed", SHARE_URL);
        assert_refused(
            &run,
            "delete_file",
            "undisclosed",
            "needs your confirmation",
        );
        assert_refused(
            &run,
            "deploy",
            "undisclosed",
            "Deploying web needs an approval.",
        );
        assert!(decided.lock().expect("lock").is_empty(), "{run:#?}");
        assert!(run.lines_of("task").is_empty());
        assert_eq!(
            ran(&before, &after, &["deploy", "delete_file", "admin_report"]),
            [
                ("deploy".to_owned(), 0),
                ("delete_file".to_owned(), 0),
                ("admin_report".to_owned(), 1)
            ]
        );
    }
    // What is refused never reaches the upstream.
    assert_eq!(
        ran(
            &before,
            &after,
            &[
                "transfer",
                "share_folder",
                "delete_everything",
                "secret_sauce"
            ]
        ),
        [
            ("transfer".to_owned(), 0),
            ("share_folder".to_owned(), 0),
            ("delete_everything".to_owned(), 0),
            ("secret_sauce".to_owned(), 0)
        ]
    );
}

/// A held call refused on the console completes with the approver's reason, and never runs
/// (modern MCP: the Python client following its task).
async fn a_refused_task_ends_with_the_reason_and_never_runs(deployment: &Deployment) {
    let console = deployment.console();
    let before = deployment.upstream.runs().await;
    let args = calling(
        reader_args(Sdk::Python, &deployment.auth, &["--no-list"]),
        &[r#"deploy={"service":"web"}"#],
    );
    let refused: Arc<Mutex<Vec<u16>>> = Arc::default();
    let record = refused.clone();
    let run = run_client(Sdk::Python, &deployment.resource, &args, |task| {
        let (console, record) = (&console, record.clone());
        async move {
            let (status, _) = console.refuse(&task, "change freeze").await;
            record.lock().expect("lock").push(status);
        }
    })
    .await;
    let after = deployment.upstream.runs().await;
    assert_eq!(*refused.lock().expect("lock"), [200], "{run:#?}");
    let deploy = run.call("deploy");
    assert_eq!(deploy["task_status"], "completed", "{run:#?}");
    assert_eq!(deploy["result"]["isError"], true, "{deploy}");
    let said = deploy["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or("");
    assert!(said.contains("change freeze"), "{said}");
    assert_eq!(
        ran(&before, &after, &["deploy"]),
        [("deploy".to_owned(), 0)]
    );
}

/// An administrator's list shows the administrators' report, never the hidden tools.
async fn admins_see_the_admin_report(deployment: &Deployment, sdk: Sdk) {
    let token = deployment
        .auth
        .token("mcp:read mcp:admin", &deployment.resource)
        .await;
    let run = run(sdk, &deployment.resource, &["--token", &token]).await;
    assert_eq!(
        run.listed(),
        [
            "admin_report",
            "delete_file",
            "deploy",
            "echo",
            "share_folder",
            "transfer"
        ],
        "{sdk:?}: {run:#?}"
    );
}

/// With `conceal-refusals`, a refusal the caller cannot act on reads exactly as the
/// upstream's own answer for a tool it does not have.
async fn refusals_are_concealed_as_unknown_tools(deployment: &Deployment, sdk: Sdk) {
    let token = deployment
        .auth
        .token("mcp:read", &deployment.concealing_resource)
        .await;
    let concealed = run(
        sdk,
        &deployment.concealing_resource,
        &[
            "--token",
            &token,
            "--no-list",
            "--call",
            "secret_sauce",
            "--call",
            "delete_everything",
        ],
    )
    .await;
    // The upstream itself, asked directly (it has no authentication), about tools it lacks.
    let unknown = run(
        sdk,
        &deployment.upstream.url,
        &[
            "--no-list",
            "--call",
            "no_such_tool_1",
            "--call",
            "no_such_tool_2",
        ],
    )
    .await;
    for (tool, missing) in [
        ("secret_sauce", "no_such_tool_1"),
        ("delete_everything", "no_such_tool_2"),
    ] {
        let said = concealed.call(tool).to_string();
        let upstream = unknown.call(missing).to_string().replace(missing, tool);
        assert_eq!(said, upstream, "{sdk:?}: {concealed:#?}");
        assert!(!said.contains(ENVELOPE_KEY), "{said}");
    }
}

/// The modern client's calls each went in a legacy session of their own, and every one of
/// them was closed: the upstream's open sessions are back to what they were before the run.
async fn bridged_sessions_were_each_closed(deployment: &Deployment, before: &Value) {
    let opened_before = before["opened"].as_u64().expect("opened");
    let mut now = Value::Null;
    // Sessions close after the answer, in the background: allow them a moment.
    for _ in 0..50 {
        now = deployment.upstream.sessions().await.expect("sessions");
        if now["open"] == before["open"] {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(
        now["open"], before["open"],
        "bridged sessions left open: {now}"
    );
    let opened = now["opened"].as_u64().expect("opened") - opened_before;
    assert!(
        opened >= 7,
        "one legacy session per bridged request: {opened} opened"
    );
}

/// Everything, for both clients through gateways in front of `upstream`; `legacy_only` when
/// the upstream speaks legacy MCP only, so that the gateway bridges the modern client to it.
/// The Python client speaks modern MCP through either gateway; the TypeScript client speaks
/// legacy MCP everywhere.
async fn both_clients_in_front_of(upstream: UpstreamServer, legacy_only: bool) {
    let deployment = Deployment::start(upstream, legacy_only).await;
    for sdk in Sdk::BOTH {
        let modern = sdk == Sdk::Python;
        let sessions = deployment.upstream.sessions().await;
        every_denial_kind(&deployment, sdk, modern).await;
        if modern {
            a_refused_task_ends_with_the_reason_and_never_runs(&deployment).await;
        }
        if let (true, Some(before)) = (modern && legacy_only, sessions) {
            bridged_sessions_were_each_closed(&deployment, &before).await;
        }
        admins_see_the_admin_report(&deployment, sdk).await;
        refusals_are_concealed_as_unknown_tools(&deployment, sdk).await;
    }
}

#[tokio::test]
async fn the_python_sdk_server_behind_the_gateway_with_both_sdk_clients() {
    both_clients_in_front_of(UpstreamServer::python_demo().await, false).await;
}

#[tokio::test]
async fn the_typescript_sdk_server_behind_the_gateway_with_both_sdk_clients() {
    both_clients_in_front_of(UpstreamServer::typescript_demo().await, true).await;
}
