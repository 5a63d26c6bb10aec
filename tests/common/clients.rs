//! Shared steps of the suites that drive SDK clients and real peers.
#![allow(dead_code)]

use mcp_gate::GateBuilder;

use super::peers::{AuthServer, CLIENT, ClientRun, GatedServer, SECRET};

/// The demo policy's `transfer` of 40.00 EUR, which needs a payment-specific credential.
pub const TRANSFER: &str = r#"transfer={"amount":"40.00","currency":"EUR","iban":"DE00TEST"}"#;

/// One call for each kind of decision the demo policy makes, in this order: allowed (`echo`),
/// a scope step-up (`admin_report`), unavailable (`delete_everything`), undisclosed
/// (`secret_sauce`) and a credential remedy ([`TRANSFER`]).
pub const EVERY_DECISION: [&str; 5] = [
    r#"echo={"text":"allowed"}"#,
    "admin_report",
    "delete_everything",
    "secret_sauce",
    TRANSFER,
];

/// `builder` trusting the tokens of `auth` and requiring `mcp:read`, as the SDK suites'
/// deployments do.
pub fn trusting(builder: GateBuilder, auth: &AuthServer) -> GateBuilder {
    builder
        .issuer(auth.issuer.as_str())
        .required_scopes(["mcp:read"])
}

/// The example server as `cargo run --example server` runs it ([`GatedServer::start_demo`]),
/// [`trusting`] `auth`.
pub async fn demo_server(auth: &AuthServer) -> GatedServer {
    GatedServer::start_demo(|builder| trusting(builder, auth)).await
}

/// An SDK client's arguments to get its token by `client_credentials` through OAuth discovery
/// at `auth` as [`CLIENT`], then `extra`. Without `--scope` the Python SDK asks for the scope
/// the challenge names.
pub fn credentials_args<'a>(auth: &'a AuthServer, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["--client-id", CLIENT, "--client-secret", SECRET];
    args.extend(["--issuer", auth.issuer.as_str()]);
    args.extend_from_slice(extra);
    args
}

/// [`credentials_args`] asking for `mcp:read`: the TypeScript SDK's `client_credentials`
/// provider asks only for the scope it is configured with.
pub fn read_scope_args<'a>(auth: &'a AuthServer, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["--client-id", CLIENT, "--client-secret", SECRET];
    args.extend(["--scope", "mcp:read", "--issuer", auth.issuer.as_str()]);
    args.extend_from_slice(extra);
    args
}

/// `args`, then a `--call` for each of `calls`, in order.
pub fn calling<'a>(mut args: Vec<&'a str>, calls: &[&'a str]) -> Vec<&'a str> {
    for call in calls {
        args.extend(["--call", call]);
    }
    args
}

/// The allowed `echo` of [`EVERY_DECISION`] came back as the tool's own answer.
pub fn assert_echo_allowed(run: &ClientRun) {
    assert_eq!(
        run.calls("echo")[0]["result"]["content"][0]["text"],
        "allowed",
        "{run:#?}"
    );
}

/// The gate allowing everything, trusting `auth` (by discovery), in front of the example's
/// tools; `configure` adds options.
pub async fn start_allowing(
    auth: &AuthServer,
    configure: impl FnOnce(GateBuilder) -> GateBuilder,
) -> GatedServer {
    let issuer = auth.issuer.clone();
    GatedServer::start(move |_| {
        configure(
            mcp_gate::Gate::builder()
                .evaluate(mcp_gate::policy::allow_all())
                .issuer(issuer.as_str()),
        )
    })
    .await
}

/// `times` concurrent authentications of `token` against `gate` (a request to `/mcp`); each
/// must be accepted. Returns the principals.
pub async fn authenticate_concurrently(
    gate: &mcp_gate::Gate,
    token: &str,
    times: usize,
) -> Vec<mcp_gate::Principal> {
    let uri: http::Uri = "/mcp".parse().expect("a path is a URI");
    let mut headers = http::HeaderMap::new();
    let bearer = format!("Bearer {token}")
        .parse()
        .expect("a token is a header value");
    headers.insert(http::header::AUTHORIZATION, bearer);
    let tasks: Vec<_> = (0..times)
        .map(|_| {
            let (gate, headers, uri) = (gate.clone(), headers.clone(), uri.clone());
            tokio::spawn(async move { gate.authenticate(&headers, &uri).await })
        })
        .collect();
    let mut principals = Vec::with_capacity(times);
    for task in tasks {
        principals.push(task.await.expect("task").expect("token accepted"));
    }
    principals
}

/// The status of an `echo` of `text` through `server` with `token`.
pub async fn echo_status(server: &GatedServer, token: &str, text: &str) -> u16 {
    let arguments = serde_json::json!({ "text": text });
    server
        .call_tool(Some(token), "echo", arguments)
        .await
        .status
}

/// A visit of an approval page: its URL, then the status the page gave another subject and
/// the one it gave the approval's own subject.
pub type Visit = (String, u16, u16);

/// The one approval page `run` was sent to, as recorded in `visits`; the run succeeded.
pub fn the_one_visit(visits: &std::sync::Mutex<Vec<Visit>>, run: &ClientRun) -> Visit {
    assert!(run.success, "{run:#?}");
    let visits = visits.lock().expect("visits").clone();
    assert_eq!(visits.len(), 1, "one URL elicitation: {run:#?}");
    visits.into_iter().next().expect("one visit")
}

/// The demo's `admin_report`, called again after the scope step-up, answered in full.
pub fn assert_admin_report(step: &serde_json::Value, run: &ClientRun) {
    assert_eq!(step["ok"], true, "{run:#?}");
    assert_eq!(
        step["result"]["content"][0]["text"],
        "admin report: all systems nominal"
    );
}

/// A gate with the example's policy for the deployment at `resource` (its approval pages at
/// the resource's origin) and nothing else yet.
pub fn demo_gate(resource: &str) -> GateBuilder {
    let origin = resource.trim_end_matches("/mcp").to_owned();
    let approvals = super::approvals::Approvals::default();
    mcp_gate::Gate::builder().evaluate(super::policy::DemoPolicy::new(approvals, origin))
}
