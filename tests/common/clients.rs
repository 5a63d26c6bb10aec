//! Shared steps of the suites that drive SDK clients and real peers.
#![allow(dead_code)]

use axum::body::Bytes;
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

/// The upstream request of a test's reverse proxy: `upstream` with every end-to-end header
/// of `headers` (an `Authorization` header, had the gate let one through, included) and
/// `body` when there is one.
pub fn forwarding(
    mut upstream: reqwest::RequestBuilder,
    headers: &http::HeaderMap,
    body: Bytes,
) -> reqwest::RequestBuilder {
    for (name, value) in headers {
        if !super::proxy::is_hop_by_hop(name) {
            upstream = upstream.header(name, value);
        }
    }
    if !body.is_empty() {
        upstream = upstream.body(body);
    }
    upstream
}
