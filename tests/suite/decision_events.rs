//! One decision, one event: through a real gate in front of the example rmcp server (over HTTP
//! on 127.0.0.1), every judged request and every listed entry writes exactly one event on
//! `mcp_gate::decision`, and a request the layer refuses before any judgement writes none.
//!
//! The events are counted by a tracing subscriber installed for this test's thread only: the
//! test runs on a current-thread runtime, so the server task that writes them runs there too.

use std::sync::{Arc, LazyLock, Mutex};

use crate::common;
use common::peers::GatedServer;
use common::tokens::{TestKey, claims};
use mcp_gate::policy::{Decision, Evaluation, Phase};
use mcp_gate::{Issuer, StaticKeys};
use serde_json::{Value, json};
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};

const ISSUER: &str = "https://as.example";

/// A dispatcher that lives as long as the test binary, so that this test's is never the only
/// one registered. With exactly one, tracing-core 0.1.36 settles a callsite's interest from the
/// thread that first reaches it (tokio-rs/tracing#3611): a gate callsite first reached by
/// another test's thread, which has no subscriber, would be cached as never enabled, and this
/// test would miss its events. With two, every callsite asks every registered dispatcher.
static SECOND_DISPATCH: LazyLock<tracing::Dispatch> =
    LazyLock::new(|| tracing::Dispatch::new(tracing_subscriber::registry()));

/// The fields of one decision event this test reads.
#[derive(Debug, Default, Clone, PartialEq)]
struct Seen {
    phase: String,
    decision: String,
    method: String,
    reason: String,
}

impl Visit for Seen {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "phase" => self.phase = value.to_owned(),
            "decision" => self.decision = value.to_owned(),
            "method" => self.method = value.to_owned(),
            "reason" => self.reason = value.to_owned(),
            _ => {}
        }
    }

    fn record_debug(&mut self, _: &Field, _: &dyn std::fmt::Debug) {}
}

/// Collects every event on `mcp_gate::decision`, at every level.
#[derive(Clone, Default)]
struct Events(Arc<Mutex<Vec<Seen>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Events {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        if event.metadata().target() == "mcp_gate::decision" {
            let mut seen = Seen::default();
            event.record(&mut seen);
            self.0.lock().expect("events").push(seen);
        }
    }
}

impl Events {
    /// Takes the events seen since the last call.
    fn take(&self) -> Vec<Seen> {
        std::mem::take(&mut *self.0.lock().expect("events"))
    }
}

fn seen(phase: &str, method: &str, decision: &str, reason: &str) -> Seen {
    Seen {
        phase: phase.into(),
        decision: decision.into(),
        method: method.into(),
        reason: reason.into(),
    }
}

/// `secret_sauce` is denied (and hidden from listings), a call of `add` makes the policy fail,
/// everything else is allowed.
async fn policy(evaluation: Evaluation) -> Result<Decision, std::io::Error> {
    match (evaluation.tool(), evaluation.phase()) {
        (Some("secret_sauce"), _) => Ok(Decision::undisclosed("Not for you.")),
        (Some("add"), Phase::Invocation) => Err(std::io::Error::other("the store is down")),
        _ => Ok(Decision::allow()),
    }
}

fn call(tool: &str, arguments: Value) -> String {
    json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
           "params": {"name": tool, "arguments": arguments}})
    .to_string()
}

#[tokio::test]
async fn every_judged_request_and_listed_entry_writes_one_decision_event() {
    let events = Events::default();
    LazyLock::force(&SECOND_DISPATCH);
    let _subscriber =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(events.clone()));
    let key = TestKey::es256("events");
    let keys = StaticKeys::from_jwks_json(&key.jwks_json()).expect("jwks");
    let server = GatedServer::start(|_| {
        mcp_gate::Gate::builder()
            .issuer(Issuer::with_keys(ISSUER, keys))
            .evaluate(policy)
    })
    .await;
    let token = key.mint(&claims(ISSUER, &server.url, "mcp:read"));
    let legacy = [("mcp-protocol-version", "2025-11-25")];

    let allowed = server
        .post(Some(&token), &legacy, &call("echo", json!({"text": "hi"})))
        .await;
    assert_eq!(allowed.tool_text(), "hi", "{allowed:?}");
    assert_eq!(
        events.take(),
        [seen("invocation", "tools/call", "allow", "")]
    );

    let denied = server
        .post(Some(&token), &legacy, &call("secret_sauce", json!({})))
        .await;
    assert_eq!(
        denied.body["result"]["_meta"]["io.modelcontextprotocol/authorization"]["remediation"],
        "undisclosed",
        "{denied:?}"
    );
    assert_eq!(
        events.take(),
        [seen("invocation", "tools/call", "deny", "")]
    );

    let failed = server
        .post(Some(&token), &legacy, &call("add", json!({"a": 1, "b": 2})))
        .await;
    assert!(failed.body.get("result").is_none(), "{failed:?}");
    assert_eq!(
        events.take(),
        [seen("invocation", "tools/call", "refused", "error")]
    );

    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).to_string();
    let listed = server.post(Some(&token), &legacy, &list).await;
    let shown = listed.body["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("a tool list: {listed:?}"))
        .len();
    let listing = events.take();
    // A listing is judged entry by entry: one event per entry the inner server listed, every
    // shown tool and the hidden one, and none for the listing request itself.
    assert!(
        listing
            .iter()
            .all(|e| e.phase == "discovery" && e.method == "tools/list"),
        "{listing:?}"
    );
    assert_eq!(listing.len(), shown + 1, "{listing:?}");
    let hidden = listing.iter().filter(|e| e.decision == "deny").count();
    assert_eq!(hidden, 1, "{listing:?}");

    let unauthenticated = server
        .post(None, &legacy, &call("echo", json!({"text": "hi"})))
        .await;
    assert_eq!(unauthenticated.status, 401);
    let malformed = server.post(Some(&token), &legacy, "{not json").await;
    assert_eq!(malformed.status, 400, "{malformed:?}");
    assert_eq!(events.take(), [], "nothing judged, nothing written");
}
