//! `gateway.example.toml`, the file that documents every key, loads as it is, and the example
//! Cedar policy set it names (`cedar/`) builds into a gate.

use std::path::PathBuf;

use mcp_gate_server::assemble::{Lasting, assemble};
use mcp_gate_server::config::Config;
use mcp_gate_server::stores::Stores;

fn example() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("gateway.example.toml")
}

#[test]
fn the_example_file_loads_and_names_the_example_cedar_folder() {
    let config = Config::load(example()).expect("gateway.example.toml loads");
    let policy = config.file.policy.get_ref();
    assert_eq!(policy.cedar.as_deref(), Some(std::path::Path::new("cedar")));
    assert!(!policy.allow_all);
    let folder = config.resolve(policy.cedar.as_deref().expect("cedar"));
    assert!(
        folder.join("policies.cedar").is_file(),
        "{}",
        folder.display()
    );
    assert!(folder.join("schema.cedarschema").is_file());
}

#[tokio::test]
async fn the_example_cedar_set_builds_into_a_gate() {
    let config = Config::load(example()).expect("gateway.example.toml loads");
    let lasting = Lasting {
        stores: Stores::memory(),
        random_keys: mcp_gate::continuation::Keyring::random().expect("a random key"),
        audit: None,
        development_issuer: None,
        identity_key: mcp_gate_server::identity::SigningKey::generate().expect("a key"),
    };
    let assembled = assemble(&config, &lasting).expect("the example assembles");
    let cedar = assembled.cedar.expect("Cedar decides");
    // The permit and the nine forbids of cedar/policies.cedar.
    assert_eq!(cedar.policy_count(), 10, "{}", assembled.policy_name);
    assert!(assembled.policy_name.starts_with("Cedar"));
}

/// What the example set decides for a caller with `scopes`, calling `tool` in `phase`: the
/// decision's kind, and the remedy's kind when it denies.
async fn decide(
    policy: &mcp_gate::policy::cedar::CedarPolicy,
    scopes: &[&str],
    tool: &str,
    arguments: serde_json::Value,
    phase: mcp_gate::policy::Phase,
) -> String {
    use mcp_gate::Principal;
    use mcp_gate::policy::{Decision, Evaluation, Policy};
    let principal = Principal::builder()
        .issuer("http://127.0.0.1:9000")
        .subject("alice")
        .scopes(scopes.iter().copied())
        .build()
        .expect("principal");
    let mut builder = Evaluation::builder(principal).tool(tool, arguments);
    builder = match phase {
        // An approved held call: the approver's name comes with it.
        mcp_gate::policy::Phase::Approval => builder.approval("tsk_AAAAAAAAAAAAAAAAAAAAAA", "ops"),
        other => builder.phase(other),
    };
    let evaluation = builder.build().expect("evaluation");
    match Policy::evaluate(policy, evaluation).await.expect("decided") {
        Decision::Deny(remedy) => format!("deny {}", remedy.kind()),
        other => other.kind().to_owned(),
    }
}

#[tokio::test]
async fn the_example_cedar_set_says_one_remedy_per_demo_tool() {
    use mcp_gate::policy::Phase::{Approval, Discovery, Invocation};
    use serde_json::{Value, json};
    let config = Config::load(example()).expect("gateway.example.toml loads");
    let folder = config.resolve(
        config
            .file
            .policy
            .get_ref()
            .cedar
            .as_deref()
            .expect("cedar"),
    );
    let policy = mcp_gate::policy::cedar::CedarPolicy::builder()
        .directory(&folder)
        .build()
        .expect("the example set builds");
    let reader = &["mcp:read"][..];
    let admin = &["mcp:read", "mcp:admin"][..];
    let transfer = json!({"amount": "40.00", "currency": "EUR", "iban": "DE00TEST"});
    for (scopes, tool, arguments, phase, expected) in [
        (reader, "echo", json!({"text": "hi"}), Invocation, "allow"),
        (reader, "admin_report", json!({}), Invocation, "deny scope"),
        (admin, "admin_report", json!({}), Invocation, "allow"),
        (admin, "transfer", transfer, Invocation, "deny credential"),
        (
            reader,
            "share_folder",
            json!({"folder": "docs"}),
            Invocation,
            "deny url",
        ),
        (
            reader,
            "delete_file",
            json!({"path": "a.txt"}),
            Invocation,
            "ask",
        ),
        (
            reader,
            "deploy",
            json!({"service": "web"}),
            Invocation,
            "deny task",
        ),
        (
            reader,
            "deploy",
            json!({"service": "web"}),
            Approval,
            "allow",
        ),
        (
            admin,
            "delete_everything",
            json!({}),
            Invocation,
            "deny unavailable",
        ),
        (
            admin,
            "secret_sauce",
            json!({}),
            Invocation,
            "deny undisclosed",
        ),
        // Lists: what each caller is shown.
        (reader, "echo", Value::Null, Discovery, "allow"),
        (reader, "deploy", Value::Null, Discovery, "allow"),
        (
            reader,
            "admin_report",
            Value::Null,
            Discovery,
            "deny undisclosed",
        ),
        (admin, "admin_report", Value::Null, Discovery, "allow"),
        (
            admin,
            "secret_sauce",
            Value::Null,
            Discovery,
            "deny undisclosed",
        ),
        (
            admin,
            "delete_everything",
            Value::Null,
            Discovery,
            "deny undisclosed",
        ),
    ] {
        let decided = decide(&policy, scopes, tool, arguments, phase).await;
        assert_eq!(decided, expected, "{tool} in {phase:?} with {scopes:?}");
    }
}
