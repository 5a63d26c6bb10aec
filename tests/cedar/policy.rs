//! `policy::cedar::CedarPolicy` (feature `cedar`) from the outside: what `build` refuses and how
//! it says so (file, line, variant), reload and watch (an invalid set never replaces a good
//! one, and a good one is seen by every evaluation that starts after the reload returned, also
//! under concurrent load), and a generated test that holds the decisions of a policy set
//! against a reference written in Rust from the documented mapping and remedy precedence.
//!
//! ```text
//! cargo test --features cedar --test cedar policy::
//! ```

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mcp_gate::mcp::{Era, TASKS_EXTENSION};
use mcp_gate::policy::cedar::{CedarError, CedarPolicy, Diagnostic, GATE_SCHEMA_STUB};
use mcp_gate::policy::{Decision, Evaluation, Phase, Policy, Remediation};
use mcp_gate::{ConfigError, Principal};
use proptest::prelude::*;
use proptest::sample::select;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{Map, Value, json};

// ---------------------------------------------------------------------------------------------
// Scratch folders and small helpers
// ---------------------------------------------------------------------------------------------

/// A fresh folder under Cargo's per-target scratch directory (`target/tmp`), one per test.
fn scratch(test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("cedar_policy")
        .join(test);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch folder");
    dir
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write fixture");
    path
}

/// The name diagnostics give a file: its path, as `Path::display` shows it.
fn shown(path: &Path) -> String {
    path.display().to_string()
}

fn principal(subject: &str, scopes: &[&str]) -> Principal {
    Principal::builder()
        .issuer("https://as.example")
        .subject(subject)
        .scopes(scopes.iter().copied())
        .build()
        .expect("a principal")
}

fn call(principal: &Principal, tool: &str, arguments: Value) -> Evaluation {
    Evaluation::builder(principal.clone())
        .tool(tool, arguments)
        .build()
        .expect("an evaluation")
}

/// Builds with the schema `text` (named `name`) and a permit-all policy, and returns the
/// `CedarError::Schema` it must be refused with, as (file, message).
fn schema_refused(name: &str, text: String) -> (String, String) {
    let error = refused(
        CedarPolicy::builder()
            .schema_text(name, text)
            .policies_text("p", "permit(principal, action, resource);")
            .build(),
    );
    match error {
        CedarError::Schema { file, message } => (file, message),
        other => panic!("expected CedarError::Schema, got {other:?}"),
    }
}

/// Writes each case's text into `file`, builds from `dir`, and checks that the error is the
/// variant `fields` picks, names `file`, mentions what the case expects, and reads
/// `"<label> <file>: …"`.
fn refused_for_each(
    dir: &Path,
    file: &Path,
    cases: &[(&str, &str)],
    label: &str,
    fields: fn(&CedarError) -> Option<(&String, &String)>,
) {
    for (text, expected) in cases {
        std::fs::write(file, text).expect("write the case");
        let error = refused(CedarPolicy::builder().directory(dir).build());
        let Some((named, message)) = fields(&error) else {
            panic!("unexpected error for {text}: {error:?}");
        };
        assert_eq!(named, &shown(file));
        assert!(
            message.contains(expected),
            "{text}: {message:?} should mention {expected:?}"
        );
        let prefix = format!("{label} {}: ", shown(file));
        assert!(error.to_string().starts_with(&prefix), "{error}");
    }
}

/// The error `build` gave, as its `CedarError`.
fn refused(built: Result<CedarPolicy, ConfigError>) -> CedarError {
    match built {
        Ok(policy) => panic!("expected a refusal, built {policy:?}"),
        Err(ConfigError::Cedar(error)) => error,
        Err(other) => panic!("expected ConfigError::Cedar, got {other:?}"),
    }
}

/// The diagnostics of a parse error; panics on any other error.
fn parse_diagnostics(error: &CedarError) -> &[Diagnostic] {
    match error {
        CedarError::Parse(diagnostics) => diagnostics,
        other => panic!("expected CedarError::Parse, got {other:?}"),
    }
}

/// The diagnostics of a validation error; panics on any other error.
fn validation_diagnostics(error: &CedarError) -> &[Diagnostic] {
    match error {
        CedarError::Validation(diagnostics) => diagnostics,
        other => panic!("expected CedarError::Validation, got {other:?}"),
    }
}

/// The refusals of the same sources given file by file (`by_file`) and as the folder `dir`.
fn refused_by_file_and_by_dir(
    by_file: Result<CedarPolicy, ConfigError>,
    dir: &Path,
) -> [CedarError; 2] {
    let by_dir = CedarPolicy::builder().directory(dir).build();
    [refused(by_file), refused(by_dir)]
}

fn only(diagnostics: &[Diagnostic]) -> &Diagnostic {
    assert_eq!(diagnostics.len(), 1, "{diagnostics:#?}");
    &diagnostics[0]
}

// ---------------------------------------------------------------------------------------------
// A small hand-written schema (its `app` context is an empty record: no hook needed)
// ---------------------------------------------------------------------------------------------

const SMALL_SCHEMA: &str = r#"namespace R {
    entity Role;
    entity User in [Role] = { issuer: String, subject: String, client_id: String, scopes: Set<String>, claims: {} };
    entity McpServer;
    type Gate = { era: String, phase: String, protocol_version: String, elicitation_form: Bool,
                  elicitation_url: Bool, tasks: Bool, approved_by: String };
    type App = {};
    action "report", "delete_file" appliesTo {
        principal: [User], resource: [McpServer], context: { input: {}, gate: Gate, app: App }
    };
}
"#;

/// A valid policy file, with the typo on line 3.
const ACTION_TYPO: &str = "permit(principal, action == R::Action::\"report\", resource);\n\npermit(principal, acton, resource);\n";

/// A policy file that parses but does not validate: `principal.scops` on line 4.
const ATTRIBUTE_TYPO: &str = "permit(principal, action == R::Action::\"report\", resource);\n\npermit(principal, action == R::Action::\"delete_file\", resource)\n  when { principal.scops.contains(\"mcp:admin\") };\n";

const ALLOW_REPORT: &str = "permit(principal, action == R::Action::\"report\", resource);\n";

// ---------------------------------------------------------------------------------------------
// 1. What build refuses
// ---------------------------------------------------------------------------------------------

/// A parse error names the file and the line of the typo, given as a file or in a folder.
#[test]
fn a_parse_error_names_the_file_and_line() {
    let dir = scratch("parse_error");
    let schema = write(&dir, "schema.cedarschema", SMALL_SCHEMA);
    let file = write(&dir, "typo.cedar", ACTION_TYPO);
    let by_file = CedarPolicy::builder()
        .schema_file(&schema)
        .policies_file(&file)
        .build();
    for error in refused_by_file_and_by_dir(by_file, &dir) {
        let diagnostics = parse_diagnostics(&error);
        let diagnostic = only(diagnostics);
        assert_eq!(diagnostic.file, shown(&file));
        assert_eq!(diagnostic.line, Some(3), "{diagnostic}");
        assert_eq!(diagnostic.column, Some(19), "{diagnostic}");
        assert!(diagnostic.message.contains("acton"), "{diagnostic}");
        let text = error.to_string();
        assert!(
            text.contains(&format!("{}:3:19: ", shown(&file))),
            "the message shows file:line:column: {text}"
        );
    }
}

/// A typo that parses but fails strict validation names the file, the line and the policy.
#[test]
fn a_validation_error_names_the_file_line_and_policy() {
    let dir = scratch("validation_error");
    let schema = write(&dir, "schema.cedarschema", SMALL_SCHEMA);
    write(&dir, "a_good.cedar", ALLOW_REPORT);
    let file = write(&dir, "b_typo.cedar", ATTRIBUTE_TYPO);
    let by_file = CedarPolicy::builder()
        .schema_file(&schema)
        .policies_file(dir.join("a_good.cedar"))
        .policies_file(&file)
        .build();
    for error in refused_by_file_and_by_dir(by_file, &dir) {
        let diagnostics = validation_diagnostics(&error);
        let diagnostic = only(diagnostics);
        assert_eq!(
            diagnostic.file,
            shown(&file),
            "the second file, not the first"
        );
        assert_eq!(diagnostic.line, Some(4), "{diagnostic}");
        assert_eq!(
            diagnostic.policy.as_deref(),
            Some(format!("{}#1", shown(&file)).as_str()),
            "ids are <file>#<index in the file>"
        );
        assert!(diagnostic.message.contains("scops"), "{diagnostic}");
        assert!(
            diagnostic.message.contains("did you mean `scopes`"),
            "{diagnostic}"
        );
        assert!(
            error.to_string().contains(&format!("{}:4:", shown(&file))),
            "{error}"
        );
    }
}

/// Diagnostics of several files are all reported, each in its own file; text sources are named
/// by the name given.
#[test]
fn every_broken_file_is_reported() {
    let dir = scratch("several_errors");
    let first = write(
        &dir,
        "one.cedar",
        "\n\nforbid(principal, action, resourc);\n",
    );
    let second = write(&dir, "two.cedar", "permit(principal action, resource);\n");
    let error = refused(
        CedarPolicy::builder()
            .schema_text("inline.cedarschema", SMALL_SCHEMA)
            .policies_file(&first)
            .policies_text("inline.cedar", ALLOW_REPORT)
            .policies_file(&second)
            .build(),
    );
    let diagnostics = parse_diagnostics(&error);
    let places: Vec<(String, Option<usize>)> = diagnostics
        .iter()
        .map(|d| (d.file.clone(), d.line))
        .collect();
    assert!(places.contains(&(shown(&first), Some(3))), "{places:?}");
    assert!(places.contains(&(shown(&second), Some(1))), "{places:?}");
    assert!(
        places.iter().all(|(file, _)| file != "inline.cedar"),
        "{places:?}"
    );

    let error = refused(
        CedarPolicy::builder()
            .schema_text("inline.cedarschema", SMALL_SCHEMA)
            .policies_text("inline.cedar", ATTRIBUTE_TYPO)
            .build(),
    );
    let diagnostics = validation_diagnostics(&error);
    let diagnostic = only(diagnostics);
    assert_eq!(
        (diagnostic.file.as_str(), diagnostic.line),
        ("inline.cedar", Some(4))
    );
}

/// Two policies with the same `@id` and a policy template are parse errors.
#[test]
fn duplicate_ids_and_templates_are_refused() {
    let error = refused(
        CedarPolicy::builder()
            .schema_text("s", SMALL_SCHEMA)
            .policies_text(
                "ids.cedar",
                "@id(\"same\") permit(principal, action, resource);\n@id(\"same\") forbid(principal, action, resource);\n",
            )
            .build(),
    );
    let diagnostics = parse_diagnostics(&error);
    let diagnostic = only(diagnostics);
    assert_eq!(diagnostic.file, "ids.cedar");
    assert_eq!(diagnostic.policy.as_deref(), Some("same"));

    let error = refused(
        CedarPolicy::builder()
            .schema_text("s", SMALL_SCHEMA)
            .policies_text(
                "template.cedar",
                "permit(principal == ?principal, action, resource);",
            )
            .build(),
    );
    let diagnostics = parse_diagnostics(&error);
    assert!(
        only(diagnostics).message.contains("policy templates"),
        "{error}"
    );
}

/// A schema that does not parse names the file and line; one without `User` or `McpServer`
/// says which is missing.
#[test]
fn a_bad_schema_is_refused_with_its_file() {
    let dir = scratch("bad_schema");
    write(&dir, "p.cedar", ALLOW_REPORT);
    let broken = SMALL_SCHEMA.replace("entity McpServer;", "entity McpServer");
    let schema = write(&dir, "schema.cedarschema", &broken);
    let error = refused(CedarPolicy::builder().directory(&dir).build());
    let CedarError::Schema { file, message } = &error else {
        panic!("expected CedarError::Schema, got {error:?}");
    };
    assert_eq!(file, &shown(&schema));
    assert!(message.starts_with("line 5: "), "{message}");
    assert!(
        error
            .to_string()
            .starts_with(&format!("Cedar schema {}: line 5", shown(&schema))),
        "{error}"
    );

    let no_user = SMALL_SCHEMA
        .replace("entity User in [Role]", "entity Person in [Role]")
        .replace("[User]", "[Person]");
    let (file, message) = schema_refused("no_user.cedarschema", no_user);
    assert_eq!(file, "no_user.cedarschema");
    assert!(
        message.contains("exactly one entity type User"),
        "{message}"
    );

    let no_server = SMALL_SCHEMA
        .replace("entity McpServer;", "entity Server;")
        .replace("[McpServer]", "[Server]");
    let (_, message) = schema_refused("no_server.cedarschema", no_server);
    assert!(message.contains("R::McpServer"), "{message}");

    // A folder without `schema.cedarschema`: the file it looked for is named.
    let empty = scratch("bad_schema_missing");
    write(&empty, "p.cedar", ALLOW_REPORT);
    let error = refused(CedarPolicy::builder().directory(&empty).build());
    let CedarError::Read { file, .. } = &error else {
        panic!("expected CedarError::Read, got {error:?}");
    };
    assert_eq!(file, &shown(&empty.join("schema.cedarschema")));
}

/// An unreadable folder, no schema and no policies are each refused, with what is missing.
#[test]
fn missing_sources_are_refused() {
    let dir = scratch("missing_sources").join("absent");
    let error = refused(CedarPolicy::builder().directory(&dir).build());
    assert!(
        matches!(&error, CedarError::Read { file, .. } if *file == shown(&dir)),
        "{error:?}"
    );
    let error = refused(
        CedarPolicy::builder()
            .policies_text("p", "permit(principal, action, resource);")
            .build(),
    );
    assert!(
        matches!(error, CedarError::Missing("a schema")),
        "{error:?}"
    );
    let error = refused(
        CedarPolicy::builder()
            .schema_text("s", SMALL_SCHEMA)
            .build(),
    );
    assert!(matches!(error, CedarError::Missing(_)), "{error:?}");
    assert!(error.to_string().contains("policy"), "{error}");
}

/// An entities file that is not JSON, names an undeclared type, or holds a user without the
/// schema's attributes is refused with the file's name.
#[test]
fn bad_entities_are_refused() {
    let dir = scratch("bad_entities");
    write(&dir, "schema.cedarschema", SMALL_SCHEMA);
    write(&dir, "p.cedar", ALLOW_REPORT);
    let entities = dir.join("entities.json");
    let cases: [(&str, &str); 3] = [
        ("[{\"uid\": ", "deserialization"),
        (
            r#"[{"uid": {"type": "R::Group", "id": "ops"}, "attrs": {}, "parents": []}]"#,
            "deserialization",
        ),
        (
            r#"[{"uid": {"type": "R::User", "id": "alice"}, "attrs": {}, "parents": [{"type": "R::Role", "id": "admin"}]}]"#,
            "does not conform to the schema",
        ),
    ];
    refused_for_each(
        &dir,
        &entities,
        &cases,
        "Cedar entities",
        |error| match error {
            CedarError::Entities { file, message } => Some((file, message)),
            _ => None,
        },
    );
    // The same user with every attribute (placeholders: the request's own replace them).
    std::fs::write(
        &entities,
        r#"[{"uid": {"type": "R::Role", "id": "admin"}, "attrs": {}, "parents": []},
            {"uid": {"type": "R::User", "id": "alice"}, "attrs": {"issuer": "", "subject": "", "client_id": "", "scopes": [], "claims": {}}, "parents": [{"type": "R::Role", "id": "admin"}]}]"#,
    )
    .expect("write entities");
    CedarPolicy::builder()
        .directory(&dir)
        .build()
        .expect("conforming entities load");
}

/// What is wrong with an entities file is said to the entity and attribute (Cedar's error's
/// causes are kept, not only its top-level message).
#[test]
fn entity_errors_say_which_entity_and_why() {
    let dir = scratch("entity_errors");
    write(&dir, "schema.cedarschema", SMALL_SCHEMA);
    write(&dir, "p.cedar", ALLOW_REPORT);
    let cases = [
        (
            r#"[{"uid": {"type": "R::Group", "id": "ops"}, "attrs": {}, "parents": []}]"#,
            "R::Group",
        ),
        (
            r#"[{"uid": {"type": "R::User", "id": "alice"}, "attrs": {}, "parents": []}]"#,
            r#"expected entity `R::User::"alice"` to have attribute"#,
        ),
    ];
    for (text, expected) in cases {
        write(&dir, "entities.json", text);
        let error = refused(CedarPolicy::builder().directory(&dir).build());
        assert!(error.to_string().contains(expected), "{error}");
    }
}

/// A tool list that is not JSON, not a `tools/list` result, has a nameless tool or a tool
/// listed twice is refused with the file's name and what is wrong.
#[test]
fn bad_tool_lists_are_refused() {
    let dir = scratch("bad_tools");
    write(&dir, "schema.cedarschema", SMALL_SCHEMA);
    write(&dir, "p.cedar", ALLOW_REPORT);
    let tools = dir.join("tools.json");
    let cases: [(&str, &str); 4] = [
        ("{\"tools\": [", "EOF"),
        (
            r#"{"tools": {"report": {}}}"#,
            "expected a tools/list result",
        ),
        (
            r#"{"tools": [{"inputSchema": {}}]}"#,
            "a tool without a name",
        ),
        (
            r#"{"result": {"tools": [{"name": "report"}, {"name": "report"}]}}"#,
            "tool \"report\" is listed twice",
        ),
    ];
    refused_for_each(&dir, &tools, &cases, "tool list", |error| match error {
        CedarError::Tools { file, message } => Some((file, message)),
        _ => None,
    });
    // A bare array of tools and a JSON-RPC response are both accepted.
    for text in [
        r#"[{"name": "report", "inputSchema": {"type": "object"}}]"#,
        r#"{"jsonrpc": "2.0", "id": 1, "result": {"tools": [{"name": "report", "inputSchema": {"type": "object"}}]}}"#,
    ] {
        std::fs::write(&tools, text).expect("write tools");
        CedarPolicy::builder()
            .directory(&dir)
            .build()
            .unwrap_or_else(|e| panic!("{text}: {e}"));
    }
}

/// Each unusable remediation annotation is refused as `CedarError::Annotation`, naming the
/// file, the policy and what is wrong.
#[test]
fn bad_annotations_are_refused() {
    let dir = scratch("bad_annotations");
    write(&dir, "schema.cedarschema", SMALL_SCHEMA);
    let file = dir.join("remedies.cedar");
    let forbid = "forbid(principal, action == R::Action::\"delete_file\", resource);";
    let cases: Vec<(String, &str, &str)> = vec![
        (
            format!("@remediation(\"maybe\") {forbid}"),
            "#0",
            "unknown @remediation(\"maybe\")",
        ),
        (
            format!("{ALLOW_REPORT}@remediation(\"url\")\n{forbid}"),
            "#1",
            "@remediation(\"url\") needs @url",
        ),
        (
            format!("@remediation(\"scopes\") @scopes(\"\") {forbid}"),
            "#0",
            "@scopes(\"\") must list scopes",
        ),
        (
            format!("@remediation(\"credential\") {forbid}"),
            "#0",
            "needs @authorization_details",
        ),
        (
            format!(
                "@remediation(\"credential\") @authorization_details(\"[{{\\\"type\\\":\\\"x-{{context.input.a}}\\\"}}]\") {forbid}"
            ),
            "#0",
            "@authorization_details: placeholder inside the JSON string",
        ),
        (
            format!("@remediation(\"url\") @url(\"https://{{context.input.host}}/a\") {forbid}"),
            "#0",
            "@url: URL template",
        ),
        (
            format!("@message(\"{{input.path}}\") {forbid}"),
            "#0",
            "@message: placeholder \"input.path\"",
        ),
        (
            "@remediation(\"ask\") permit(principal, action, resource);".to_owned(),
            "#0",
            "@remediation on a permit policy",
        ),
        (
            "@default_remediation(\"ask\") permit(principal, action, resource);".to_owned(),
            "#0",
            "@default_remediation(\"ask\"): expected unavailable or undisclosed",
        ),
    ];
    for (text, id, expected) in cases {
        std::fs::write(&file, &text).expect("write policies");
        let error = refused(CedarPolicy::builder().directory(&dir).build());
        let CedarError::Annotation(diagnostic) = &error else {
            panic!("expected CedarError::Annotation for {text}, got {error:?}");
        };
        assert_eq!(diagnostic.file, shown(&file), "{text}");
        assert_eq!(
            diagnostic.policy.as_deref(),
            Some(format!("{}{id}", shown(&file)).as_str()),
            "{text}"
        );
        assert!(
            diagnostic.message.contains(expected),
            "{text}: {:?} should contain {expected:?}",
            diagnostic.message
        );
        assert!(
            error
                .to_string()
                .starts_with("Cedar remediation annotation:\n  "),
            "{error}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// 2. Reload and watch
// ---------------------------------------------------------------------------------------------

/// Two valid sets, each in two files, that give different decisions for both tools, so that a
/// set made of one file of each would show: A allows `report` and asks for scopes
/// `a:1 a:2` for `delete_file`; B makes `report` unavailable and asks for `b:1 b:2`.
struct Set {
    first: &'static str,
    second: &'static str,
}

const SET_A: Set = Set {
    first: "permit(principal, action == R::Action::\"report\", resource);\n@remediation(\"scopes\") @scopes(\"a:1\")\nforbid(principal, action == R::Action::\"delete_file\", resource);\n",
    second: "@remediation(\"scopes\") @scopes(\"a:2\")\nforbid(principal, action == R::Action::\"delete_file\", resource);\n",
};

const SET_B: Set = Set {
    first: "@remediation(\"unavailable\") @message(\"B\")\nforbid(principal, action == R::Action::\"report\", resource);\n@remediation(\"scopes\") @scopes(\"b:1\")\nforbid(principal, action == R::Action::\"delete_file\", resource);\n",
    second: "permit(principal, action, resource);\n@remediation(\"scopes\") @scopes(\"b:2\")\nforbid(principal, action == R::Action::\"delete_file\", resource);\n",
};

/// Set B's first file with a set A-style second file that does not validate.
const SET_INVALID: Set = Set {
    first: SET_B.first,
    second: "permit(principal, action, resource) when { principal.scops.isEmpty() };\n",
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Which {
    A,
    B,
}

fn decision(which: Which, tool: &str) -> Decision {
    match (which, tool) {
        (Which::A, "report") => Decision::allow(),
        (Which::A, _) => Decision::scopes(["a:1", "a:2"]),
        (Which::B, "report") => Decision::unavailable("B"),
        (Which::B, _) => Decision::scopes(["b:1", "b:2"]),
    }
}

fn which(decision: &Decision, tool: &str) -> Option<Which> {
    [Which::A, Which::B]
        .into_iter()
        .find(|w| self::decision(*w, tool) == *decision)
}

/// Writes `set` into the folder (through a rename, as an editor or a deployment would).
fn install(dir: &Path, set: &Set) {
    for (name, text) in [("1.cedar", set.first), ("2.cedar", set.second)] {
        let staging = dir.join(format!("{name}.new"));
        std::fs::write(&staging, text).expect("write policies");
        std::fs::rename(&staging, dir.join(name)).expect("rename policies");
    }
}

fn reload_folder(test: &str) -> PathBuf {
    let dir = scratch(test);
    write(&dir, "schema.cedarschema", SMALL_SCHEMA);
    install(&dir, &SET_A);
    dir
}

async fn decide(policy: &CedarPolicy, evaluation: Evaluation) -> Decision {
    policy
        .evaluate(evaluation)
        .await
        .expect("no evaluation error")
}

/// An invalid set is refused by `reload` and the old one stays; a valid one replaces it.
#[tokio::test]
async fn reload_keeps_the_last_good_set() {
    let dir = reload_folder("reload");
    let policy = CedarPolicy::builder()
        .directory(&dir)
        .build()
        .expect("set A builds");
    let bob = principal("bob", &[]);
    let report = || call(&bob, "report", json!({}));
    assert_eq!(
        decide(&policy, report()).await,
        decision(Which::A, "report")
    );
    assert_eq!(policy.policy_count(), 3);

    install(&dir, &SET_INVALID);
    let error = policy.reload().expect_err("an invalid set is refused");
    assert!(
        matches!(&error, ConfigError::Cedar(CedarError::Validation(d)) if d[0].file == shown(&dir.join("2.cedar"))),
        "{error:?}"
    );
    assert_eq!(
        decide(&policy, report()).await,
        decision(Which::A, "report")
    );
    assert_eq!(
        decide(&policy, call(&bob, "delete_file", json!({}))).await,
        decision(Which::A, "delete_file"),
        "not half of the invalid set either"
    );

    install(&dir, &SET_B);
    policy.reload().expect("set B reloads");
    let clone = policy.clone();
    assert_eq!(
        decide(&policy, report()).await,
        decision(Which::B, "report")
    );
    assert_eq!(
        decide(&clone, call(&bob, "delete_file", json!({}))).await,
        decision(Which::B, "delete_file"),
        "clones share the set"
    );

    // A file of the set removed: the folder is listed again at reload, so the set without it
    // loads (nothing stale is kept from the removed file).
    let before = policy.policy_count();
    std::fs::remove_file(dir.join("2.cedar")).expect("remove");
    policy.reload().expect("the folder without 2.cedar reloads");
    assert!(
        policy.policy_count() < before,
        "the removed file's policies are gone"
    );
    // A schema removed: reload fails on reading it, and the set stays.
    let kept = policy.policy_count();
    std::fs::remove_file(dir.join("schema.cedarschema")).expect("remove");
    let error = policy.reload().expect_err("a missing schema is refused");
    assert!(
        matches!(&error, ConfigError::Cedar(CedarError::Read { file, .. }) if *file == shown(&dir.join("schema.cedarschema"))),
        "{error:?}"
    );
    assert_eq!(policy.policy_count(), kept);
}

/// Evaluations running on 8 tasks while another task reloads A, an invalid set, B, an invalid
/// set, ... : every decision is wholly A's or wholly B's, never an error, and never older than
/// the last reload that had returned when the evaluation started.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reload_under_concurrent_load() {
    const EVALUATORS: usize = 8;
    const MAX_EVALUATIONS: usize = 20_000;
    const RELOAD_CYCLES: usize = 12;

    let dir = reload_folder("reload_concurrent");
    let policy = CedarPolicy::builder()
        .directory(&dir)
        .build()
        .expect("set A builds");
    // `log[k]` is the set in force after the k-th good reload; `epoch` is the number of good
    // reloads that have returned. The set of reload k is logged before reload k starts.
    let log = Arc::new(Mutex::new(vec![Which::A]));
    let epoch = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let seen = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);

    let run = async {
        let mut evaluators = Vec::new();
        for task in 0..EVALUATORS {
            let (policy, log, epoch, done, seen) = (
                policy.clone(),
                Arc::clone(&log),
                Arc::clone(&epoch),
                Arc::clone(&done),
                Arc::clone(&seen),
            );
            evaluators.push(tokio::spawn(async move {
                let bob = principal("bob", &["mcp:read"]);
                let mut count = 0;
                while !done.load(Ordering::SeqCst) && count < MAX_EVALUATIONS {
                    let tool = if (task + count) % 2 == 0 {
                        "report"
                    } else {
                        "delete_file"
                    };
                    let evaluation = call(&bob, tool, json!({}));
                    let before = epoch.load(Ordering::SeqCst) as usize;
                    let result = policy.evaluate(evaluation).await;
                    let after = epoch.load(Ordering::SeqCst) as usize;
                    let decision = result.unwrap_or_else(|e| panic!("evaluation failed: {e}"));
                    let got = which(&decision, tool)
                        .unwrap_or_else(|| panic!("{tool}: {decision:?} is neither A's nor B's"));
                    let allowed: Vec<Which> = {
                        let log = log.lock().expect("log");
                        log[before..log.len().min(after + 2)].to_vec()
                    };
                    assert!(
                        allowed.contains(&got),
                        "{tool}: set {got:?} seen by an evaluation that started after reload \
                         {before} (sets in force since: {allowed:?})"
                    );
                    seen[got as usize].fetch_add(1, Ordering::Relaxed);
                    count += 1;
                    if count % 16 == 0 {
                        tokio::task::yield_now().await;
                    }
                }
                count
            }));
        }
        let reloader = {
            let (policy, log, epoch, dir) = (
                policy.clone(),
                Arc::clone(&log),
                Arc::clone(&epoch),
                dir.clone(),
            );
            tokio::spawn(async move {
                let mut refused = 0;
                for cycle in 0..RELOAD_CYCLES {
                    let next = if cycle % 2 == 0 { Which::B } else { Which::A };
                    for step in [None, Some(next)] {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        match step {
                            None => {
                                install(&dir, &SET_INVALID);
                                assert!(policy.reload().is_err(), "the invalid set reloads");
                                refused += 1;
                            }
                            Some(which) => {
                                install(&dir, if which == Which::A { &SET_A } else { &SET_B });
                                let k = {
                                    let mut log = log.lock().expect("log");
                                    log.push(which);
                                    log.len() - 1
                                };
                                policy.reload().expect("a valid set reloads");
                                epoch.store(k as u64, Ordering::SeqCst);
                                // Right after the reload returned, this task sees the new set.
                                let bob = principal("bob", &[]);
                                let now = decide(&policy, call(&bob, "report", json!({}))).await;
                                assert_eq!(now, decision(which, "report"));
                            }
                        }
                    }
                }
                refused
            })
        };
        let refused = reloader.await.expect("reloader");
        done.store(true, Ordering::SeqCst);
        let mut total = 0;
        for evaluator in evaluators {
            total += evaluator.await.expect("evaluator");
        }
        (refused, total)
    };
    let (refused, total) = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("the test finishes within 120 s");
    assert_eq!(refused, RELOAD_CYCLES);
    let (a, b) = (
        seen[0].load(Ordering::Relaxed),
        seen[1].load(Ordering::Relaxed),
    );
    assert_eq!(a + b, total);
    eprintln!("{total} evaluations during {RELOAD_CYCLES} x 2 reloads: A {a}, B {b}");
    assert!(a > 0 && b > 0, "both sets were observed: A {a}, B {b}");
}

/// Polls `policy` for up to `limit` until `report` gives `which`'s decision.
async fn eventually(policy: &CedarPolicy, which: Which, limit: Duration) -> bool {
    let bob = principal("bob", &[]);
    let start = Instant::now();
    while start.elapsed() < limit {
        if decide(policy, call(&bob, "report", json!({}))).await == decision(which, "report") {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// `watch` reloads when a file's content changes, ignores an invalid change, and picks up the
/// next valid one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_picks_up_changes() {
    let dir = reload_folder("watch");
    let policy = CedarPolicy::builder()
        .directory(&dir)
        .build()
        .expect("set A builds");
    let watcher = policy.watch(Duration::from_millis(50));
    // Let the watcher take its first look at the files before they change.
    tokio::time::sleep(Duration::from_millis(200)).await;

    install(&dir, &SET_B);
    assert!(
        eventually(&policy, Which::B, Duration::from_secs(5)).await,
        "set B within 5 s"
    );

    install(&dir, &SET_INVALID);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        eventually(&policy, Which::B, Duration::from_millis(1)).await,
        "the invalid change is ignored"
    );

    install(&dir, &SET_A);
    assert!(
        eventually(&policy, Which::A, Duration::from_secs(5)).await,
        "set A within 5 s"
    );
    watcher.abort();
}

/// A change made after `build` read the files but before the watcher's first look is picked
/// up: `watch` compares the files with what the current set was loaded from, not with what
/// they were when its task first ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_sees_a_change_made_before_it_started() {
    let dir = reload_folder("watch_gap");
    let policy = CedarPolicy::builder()
        .directory(&dir)
        .build()
        .expect("set A builds");
    install(&dir, &SET_B);
    let watcher = policy.watch(Duration::from_millis(50));
    let seen = eventually(&policy, Which::B, Duration::from_secs(2)).await;
    watcher.abort();
    assert!(
        seen,
        "set B, written after build and before watch, within 2 s"
    );
}

// ---------------------------------------------------------------------------------------------
// 3. Generated: CedarPolicy against a reference written from the documented mapping
// ---------------------------------------------------------------------------------------------

/// The server's `tools/list`, from which the model's schema is generated.
const MODEL_TOOLS: &str = r#"{"tools": [
  {"name": "admin_report", "inputSchema": {"type": "object", "properties": {}}},
  {"name": "transfer", "inputSchema": {"type": "object",
    "properties": {"amount": {"type": "integer"}, "currency": {"type": "string"},
                   "urgent": {"type": "boolean"}, "memo": {"type": "string"}},
    "required": ["amount", "currency", "urgent"]}},
  {"name": "deploy", "inputSchema": {"type": "object",
    "properties": {"env": {"type": "string"}, "force": {"type": "boolean"}},
    "required": ["env", "force"]}},
  {"name": "delete_file", "inputSchema": {"type": "object",
    "properties": {"path": {"type": "string"}}, "required": ["path"]}}
]}"#;

/// Roles of the known users. Users in the entities file need every attribute of `User`; the
/// layer replaces them with the token's and keeps the parents.
const MODEL_ENTITIES: &str = r#"[
  {"uid": {"type": "T::Role", "id": "admin"}, "attrs": {}, "parents": []},
  {"uid": {"type": "T::Role", "id": "finance"}, "attrs": {}, "parents": []},
  {"uid": {"type": "T::User", "id": "alice"}, "attrs": {"issuer": "", "subject": "", "client_id": "", "scopes": [], "claims": {}},
   "parents": [{"type": "T::Role", "id": "admin"}]},
  {"uid": {"type": "T::User", "id": "bob"}, "attrs": {"issuer": "", "subject": "", "client_id": "", "scopes": [], "claims": {}},
   "parents": [{"type": "T::Role", "id": "finance"}]},
  {"uid": {"type": "T::User", "id": "carol"}, "attrs": {"issuer": "", "subject": "", "client_id": "", "scopes": [], "claims": {}},
   "parents": [{"type": "T::Role", "id": "admin"}, {"type": "T::Role", "id": "finance"}]}
]"#;

const MODEL_PERMITS: &str = r#"
@id("p-report")
permit(principal, action == T::Action::"admin_report", resource)
when { principal.scopes.contains("mcp:read") };

@id("p-transfer")
permit(principal, action == T::Action::"transfer", resource)
when { principal.scopes.contains("pay:transfer") && context.input.amount <= 1000 };

@id("p-transfer-finance")
permit(principal in T::Role::"finance", action == T::Action::"transfer", resource)
when { context.input.currency == "EUR" };

@id("p-deploy")
permit(principal, action == T::Action::"deploy", resource)
when { context.input.env != "prod" || principal.scopes.containsAll(["deploy:prod", "mcp:write"]) };

@id("p-delete")
permit(principal in T::Role::"admin", action == T::Action::"delete_file", resource);

@id("p-listing")
permit(principal, action, resource) when { context.gate.phase == "discovery" };
"#;

const MODEL_FORBIDS: &str = r#"
@id("f-admin-a") @remediation("scopes") @scopes("mcp:admin")
forbid(principal, action == T::Action::"admin_report", resource)
unless { principal.scopes.contains("mcp:admin") };

@id("f-admin-b") @remediation("scopes") @scopes("mcp:read mcp:audit")
forbid(principal, action == T::Action::"admin_report", resource)
unless { principal.scopes.contains("mcp:read") && principal.scopes.contains("mcp:audit") };

@id("f-admin-legacy") @remediation("undisclosed") @message("Reports are modern-only.")
forbid(principal, action == T::Action::"admin_report", resource)
when { context.gate.era == "legacy" && !(principal in T::Role::"admin") };

@id("f-memo") @remediation("scopes") @scopes("pay:memo mcp:write")
forbid(principal, action == T::Action::"transfer", resource)
when { context.input has memo && !principal.scopes.contains("pay:memo") };

@id("f-pay-big") @remediation("credential")
@authorization_details("[{\"type\": \"payment\", \"amount\": \"{context.input.amount}\", \"currency\": \"{context.input.currency}\", \"by\": \"{principal.subject}\"}]")
@message("Transfer {context.input.amount} {context.input.currency}?")
forbid(principal, action == T::Action::"transfer", resource)
when { context.input.amount > 1000 };

@id("f-pay-urgent") @remediation("ask") @message("Urgent transfer for {principal.subject}?")
forbid(principal, action == T::Action::"transfer", resource)
when { context.input.urgent && context.gate.phase == "invocation" };

@id("f-pay-huge") @remediation("unavailable")
forbid(principal, action == T::Action::"transfer", resource)
when { context.input.amount > 1000000 };

@id("f-deploy-legacy") @remediation("unavailable") @message("Not on legacy sessions.")
forbid(principal, action == T::Action::"deploy", resource)
when { context.gate.era == "legacy" };

@id("f-deploy-prod") @remediation("task") @message("A prod deploy by {principal.subject} needs approval.")
forbid(principal, action == T::Action::"deploy", resource)
when { context.input.env == "prod" && !(context.gate.phase == "approval" && context.gate.approved_by == "ops-lead") };

@id("f-deploy-force") @remediation("url") @url("https://approve.example/deploy/{context.input.env}?by={principal.subject}")
forbid(principal, action == T::Action::"deploy", resource)
when { context.input.force && !context.app.trusted_client };

@id("f-deploy-tasks") @remediation("task")
forbid(principal, action == T::Action::"deploy", resource)
when { context.input.force && context.gate.tasks };

@id("f-delete-ops")
forbid(principal, action == T::Action::"delete_file", resource)
when { principal.claims has dept && principal.claims.dept == "ops" };

@id("f-delete-root") @remediation("unavailable")
forbid(principal, action == T::Action::"delete_file", resource)
when { context.input.path == "/" || context.input.path like "/etc/passwd*" };

@id("f-delete-system") @remediation("unavailable") @message("System files stay.")
forbid(principal, action == T::Action::"delete_file", resource)
when { context.input.path like "/etc/*" };

@id("f-delete-ask") @remediation("ask")
forbid(principal, action == T::Action::"delete_file", resource)
when { context.gate.elicitation_form && context.input.path like "*.md" };
"#;

const SCHEMA_MISMATCH: &str = "The request does not match the authorization schema.";
const NOT_ALLOWED: &str = "You are not allowed to do this.";

/// The model's folder: the schema generated from the stub (namespace `T`, a `dept` claim, an
/// `app.trusted_client` the hook fills) and `MODEL_TOOLS`, the tool list, the entities and
/// the policies in two files, in a scratch folder of `test`'s own: two tests building it at
/// once in one folder would delete each other's files.
fn model_policy(test: &str) -> CedarPolicy {
    let dir = scratch(&format!("model-{test}"));
    let stub = GATE_SCHEMA_STUB
        .replace("namespace Gate", "namespace T")
        .replace("type Claims = {};", "type Claims = { dept?: String };")
        .replace(
            "type AppContext = {};",
            "type AppContext = { trusted_client: Bool };",
        );
    assert!(stub.contains("dept?") && stub.contains("trusted_client"));
    let schema = mcp_gate::policy::cedar::generate_schema(&stub, MODEL_TOOLS).expect("schema");
    write(&dir, "schema.cedarschema", &schema);
    write(&dir, "tools.json", MODEL_TOOLS);
    write(&dir, "entities.json", MODEL_ENTITIES);
    write(&dir, "forbids.cedar", MODEL_FORBIDS);
    write(&dir, "permits.cedar", MODEL_PERMITS);
    CedarPolicy::builder()
        .directory(&dir)
        .claims(["dept"])
        .context_hook(|evaluation: Evaluation| async move {
            let trusted = evaluation.principal().client_id() == Some("cli-trusted");
            json!({ "trusted_client": trusted })
        })
        .build()
        .unwrap_or_else(|e| panic!("the model builds: {e}"))
}

/// The input schema `MODEL_TOOLS` lists for `tool`.
fn listed_schema(tool: &str) -> Option<Value> {
    let tools: Value = serde_json::from_str(MODEL_TOOLS).expect("tools");
    tools["tools"]
        .as_array()?
        .iter()
        .find(|t| t["name"] == tool)
        .map(|t| t["inputSchema"].clone())
}

#[derive(Clone, Debug)]
enum Tool {
    AdminReport,
    Transfer {
        amount: i64,
        currency: &'static str,
        urgent: bool,
        memo: Option<&'static str>,
    },
    Deploy {
        env: &'static str,
        force: bool,
    },
    DeleteFile {
        path: &'static str,
    },
    /// A tool neither the tool list nor the schema knows.
    Ghost,
}

/// The plain production deploy (`force` off).
const PROD_DEPLOY: Tool = Tool::Deploy {
    env: "prod",
    force: false,
};

impl Tool {
    fn name(&self) -> &'static str {
        match self {
            Tool::AdminReport => "admin_report",
            Tool::Transfer { .. } => "transfer",
            Tool::Deploy { .. } => "deploy",
            Tool::DeleteFile { .. } => "delete_file",
            Tool::Ghost => "ghost",
        }
    }

    /// The arguments, as the schema types them.
    fn arguments(&self) -> Map<String, Value> {
        let value = match self {
            Tool::AdminReport | Tool::Ghost => json!({}),
            Tool::Transfer {
                amount,
                currency,
                urgent,
                memo: None,
            } => json!({"amount": amount, "currency": currency, "urgent": urgent}),
            Tool::Transfer {
                amount,
                currency,
                urgent,
                memo: Some(memo),
            } => json!({"amount": amount, "currency": currency, "urgent": urgent, "memo": memo}),
            Tool::Deploy { env, force } => json!({"env": env, "force": force}),
            Tool::DeleteFile { path } => json!({"path": path}),
        };
        match value {
            Value::Object(map) => map,
            _ => unreachable!(),
        }
    }
}

/// How the call's arguments relate to the schema.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    /// As typed.
    Typed,
    /// The first argument holds a value of another type.
    WrongType,
    /// The first argument is left out.
    Missing,
    /// An argument the schema does not declare is added.
    Extra,
}

/// What the evaluation says about the tool's listed `inputSchema`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Listed {
    /// The schema the Cedar schema was generated from.
    Same,
    /// Another schema: the server changed the tool.
    Drifted,
    /// None: the server did not list the tool.
    Unlisted,
}

#[derive(Clone, Debug)]
enum Dept {
    Text(&'static str),
    /// A claim of the wrong type for the schema's `dept?: String`.
    Number,
}

#[derive(Clone, Debug)]
struct Case {
    subject: Option<&'static str>,
    client_id: Option<&'static str>,
    scopes: Vec<&'static str>,
    dept: Option<Dept>,
    /// A claim the policy does not select.
    other_claim: bool,
    tool: Tool,
    shape: Shape,
    listed: Listed,
    phase: Phase,
    approved_by: &'static str,
    era: Era,
    form: bool,
    url: bool,
    tasks: bool,
}

const SCOPES: [&str; 7] = [
    "mcp:read",
    "mcp:write",
    "mcp:admin",
    "mcp:audit",
    "pay:transfer",
    "pay:memo",
    "deploy:prod",
];

fn tool_strategy() -> impl Strategy<Value = Tool> {
    let amount = prop_oneof![
        3 => select(vec![
            -5i64, 0, 1, 999, 1000, 1001, 5000, 1_000_000, 1_000_001
        ]),
        1 => any::<i64>(),
    ];
    let transfer = (
        amount,
        select(vec!["EUR", "USD", "eur"]),
        any::<bool>(),
        proptest::option::weighted(0.25, select(vec!["rent", "a b/c"])),
    )
        .prop_map(|(amount, currency, urgent, memo)| Tool::Transfer {
            amount,
            currency,
            urgent,
            memo,
        });
    let deploy = (
        select(vec!["prod", "prod", "staging", "dev", "qa env/1"]),
        any::<bool>(),
    )
        .prop_map(|(env, force)| Tool::Deploy { env, force });
    let delete = select(vec![
        "/",
        "/etc/passwd",
        "/etc/passwd.bak",
        "/etc/hosts",
        "/home/notes.md",
        "notes.md",
        "/tmp/x",
    ])
    .prop_map(|path| Tool::DeleteFile { path });
    prop_oneof![
        2 => Just(Tool::AdminReport),
        4 => transfer,
        4 => deploy,
        3 => delete,
        1 => Just(Tool::Ghost),
    ]
}

fn case_strategy() -> impl Strategy<Value = Case> {
    let who = (
        proptest::option::of(select(vec!["alice", "bob", "carol", "dave", "e\"ve/1"])),
        proptest::option::of(select(vec!["cli-trusted", "cli-other"])),
        proptest::sample::subsequence(SCOPES.to_vec(), 0..=SCOPES.len()),
        proptest::option::of(prop_oneof![
            4 => select(vec!["eng", "ops"]).prop_map(Dept::Text),
            1 => Just(Dept::Number),
        ]),
        any::<bool>(),
    );
    let what = (
        tool_strategy(),
        prop_oneof![
            12 => Just(Shape::Typed),
            1 => Just(Shape::WrongType),
            1 => Just(Shape::Missing),
            1 => Just(Shape::Extra),
        ],
        prop_oneof![
            12 => Just(Listed::Same),
            1 => Just(Listed::Drifted),
            1 => Just(Listed::Unlisted),
        ],
    );
    let how = (
        prop_oneof![
            3 => Just(Phase::Invocation),
            1 => Just(Phase::Discovery),
            1 => Just(Phase::Approval),
        ],
        select(vec!["ops-lead", "bob"]),
        prop_oneof![3 => Just(Era::Modern), 1 => Just(Era::Legacy)],
        any::<(bool, bool, bool)>(),
    );
    (who, what, how).prop_map(
        |(
            (subject, client_id, scopes, dept, other_claim),
            (tool, shape, listed),
            (phase, approved_by, era, (form, url, tasks)),
        )| {
            // The layer evaluates approvals on modern MCP only.
            let era = if phase == Phase::Approval {
                Era::Modern
            } else {
                era
            };
            Case {
                subject,
                client_id,
                scopes,
                dept,
                other_claim,
                tool,
                shape,
                listed,
                phase,
                approved_by,
                era,
                form,
                url,
                tasks,
            }
        },
    )
}

impl Case {
    /// The arguments sent: the typed ones, bent to `shape`.
    fn sent_arguments(&self) -> Map<String, Value> {
        let mut args = self.tool.arguments();
        let first = args.keys().next().cloned();
        match (self.shape, first) {
            (Shape::Typed, _) => {}
            (Shape::WrongType, Some(key)) => {
                let wrong = match &args[&key] {
                    Value::String(_) => json!(7),
                    _ => json!("seven"),
                };
                args.insert(key, wrong);
            }
            (Shape::Missing, Some(key)) => {
                args.remove(&key);
            }
            (Shape::Extra, _) => {
                args.insert("undeclared".into(), json!(true));
            }
            (Shape::WrongType | Shape::Missing, None) => {}
        }
        args
    }

    /// Whether the sent arguments fit the action's `context.input` type.
    fn arguments_fit(&self) -> bool {
        match self.shape {
            Shape::Typed => true,
            Shape::Extra => false,
            Shape::WrongType => self.tool.arguments().is_empty(),
            // Every tool's first argument is required ("amount", "env", "path").
            Shape::Missing => self.tool.arguments().is_empty(),
        }
    }

    fn evaluation(&self) -> Evaluation {
        let mut claims = Map::new();
        match &self.dept {
            Some(Dept::Text(dept)) => {
                claims.insert("dept".into(), json!(dept));
            }
            Some(Dept::Number) => {
                claims.insert("dept".into(), json!(42));
            }
            None => {}
        }
        if self.other_claim {
            claims.insert("secret".into(), json!({"not": "selected"}));
        }
        let mut principal = Principal::builder()
            .issuer("https://as.example")
            .scopes(self.scopes.iter().copied())
            .claims(Value::Object(claims));
        if let Some(subject) = self.subject {
            principal = principal.subject(subject);
        }
        if let Some(client_id) = self.client_id {
            principal = principal.client_id(client_id);
        }
        let principal = principal.build().expect("a principal");
        let arguments = match self.phase {
            Phase::Discovery => Value::Null,
            _ => Value::Object(self.sent_arguments()),
        };
        let mut elicitation = Map::new();
        if self.form {
            elicitation.insert("form".into(), json!({}));
        }
        if self.url {
            elicitation.insert("url".into(), json!({}));
        }
        let mut capabilities = Map::new();
        if self.form || self.url {
            capabilities.insert("elicitation".into(), Value::Object(elicitation));
        }
        if self.tasks {
            capabilities.insert("extensions".into(), json!({ TASKS_EXTENSION: {} }));
        }
        let mut builder = Evaluation::builder(principal)
            .tool(self.tool.name(), arguments)
            .era(self.era)
            .capabilities(Value::Object(capabilities));
        builder = match self.phase {
            Phase::Approval => builder.approval("task-1", self.approved_by),
            phase => builder.phase(phase),
        };
        let listed = listed_schema(self.tool.name()).unwrap_or_else(|| json!({"type": "object"}));
        match self.listed {
            Listed::Same => builder = builder.input_schema(listed),
            Listed::Drifted => {
                let mut drifted = listed;
                drifted["properties"]["added"] = json!({"type": "string"});
                builder = builder.input_schema(drifted);
            }
            Listed::Unlisted => {}
        }
        builder.build().expect("an evaluation")
    }
}

/// A forbid's remedy, as `remedy.rs` documents the annotations.
#[derive(Clone, Debug)]
enum Remedy {
    Unavailable(Option<String>),
    Undisclosed(Option<String>),
    Scopes(&'static [&'static str]),
    Credential(Value, String),
    Url(String),
    Task(Option<String>),
    Ask(Option<String>),
}

impl Remedy {
    /// The documented precedence: unavailable, undisclosed, scopes, credential, url, task, ask.
    fn rank(&self) -> u8 {
        match self {
            Remedy::Unavailable(_) => 0,
            Remedy::Undisclosed(_) => 1,
            Remedy::Scopes(_) => 2,
            Remedy::Credential(..) => 3,
            Remedy::Url(_) => 4,
            Remedy::Task(_) => 5,
            Remedy::Ask(_) => 6,
        }
    }
}

/// Every byte but RFC 3986's unreserved ones, percent-encoded (what `@url` placeholders get).
fn percent_encoded(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The decision, computed from the documented mapping and precedence rather than by Cedar.
///
/// Each policy's condition is `Option<bool>`: `None` is a Cedar evaluation error (reading
/// `context.input` in discovery, where it is absent), and Cedar skips a policy that errors.
fn reference(case: &Case) -> Decision {
    let tool = case.tool.name();
    // The drift check comes first: the tool list names the tool, with this input schema (an
    // approval may come without a listed schema: the call was checked when it was held).
    let unlisted_ok = case.listed == Listed::Unlisted && case.phase == Phase::Approval;
    if listed_schema(tool).is_none() || !(case.listed == Listed::Same || unlisted_ok) {
        return Decision::undisclosed(NOT_ALLOWED);
    }
    let typed = case.phase != Phase::Discovery;
    if (typed && !case.arguments_fit()) || matches!(case.dept, Some(Dept::Number)) {
        return Decision::undisclosed(SCHEMA_MISMATCH);
    }

    let subject = case.subject.unwrap_or("");
    let has = |scope: &str| case.scopes.contains(&scope);
    let role = |role: &str| match subject {
        "alice" => role == "admin",
        "bob" => role == "finance",
        "carol" => true,
        _ => false,
    };
    let dept = match &case.dept {
        Some(Dept::Text(dept)) => Some(*dept),
        _ => None,
    };
    let phase = match case.phase {
        Phase::Invocation => "invocation",
        Phase::Discovery => "discovery",
        _ => "approval",
    };
    let legacy = case.era == Era::Legacy;
    let trusted = case.client_id == Some("cli-trusted");
    let approved_by = if case.phase == Phase::Approval {
        case.approved_by
    } else {
        ""
    };
    // `context.input` exists only in typed phases.
    let input = typed.then_some(&case.tool);

    let mut permitted = false;
    let mut forbids: Vec<(&str, Remedy)> = Vec::new();
    let mut permit = |condition: Option<bool>| permitted |= condition == Some(true);
    let mut forbid = |id: &'static str, condition: Option<bool>, remedy: Remedy| {
        if condition == Some(true) {
            forbids.push((id, remedy));
        }
    };
    permit(Some(phase == "discovery"));
    match &case.tool {
        Tool::AdminReport => {
            permit(Some(has("mcp:read")));
            forbid(
                "f-admin-a",
                Some(!has("mcp:admin")),
                Remedy::Scopes(&["mcp:admin"]),
            );
            forbid(
                "f-admin-b",
                Some(!(has("mcp:read") && has("mcp:audit"))),
                Remedy::Scopes(&["mcp:read", "mcp:audit"]),
            );
            forbid(
                "f-admin-legacy",
                Some(legacy && !role("admin")),
                Remedy::Undisclosed(Some("Reports are modern-only.".into())),
            );
        }
        Tool::Transfer {
            amount,
            currency,
            urgent,
            memo,
        } => {
            let amount = input.map(|_| *amount);
            permit(amount.map(|amount| has("pay:transfer") && amount <= 1000));
            permit(input.map(|_| role("finance") && *currency == "EUR"));
            forbid(
                "f-memo",
                input.map(|_| memo.is_some() && !has("pay:memo")),
                Remedy::Scopes(&["pay:memo", "mcp:write"]),
            );
            forbid(
                "f-pay-big",
                amount.map(|amount| amount > 1000),
                Remedy::Credential(
                    json!([{"type": "payment", "amount": amount, "currency": currency, "by": subject}]),
                    format!("Transfer {} {currency}?", amount.unwrap_or_default()),
                ),
            );
            forbid(
                "f-pay-urgent",
                input.map(|_| *urgent && phase == "invocation"),
                Remedy::Ask(Some(format!("Urgent transfer for {subject}?"))),
            );
            forbid(
                "f-pay-huge",
                amount.map(|amount| amount > 1_000_000),
                Remedy::Unavailable(None),
            );
        }
        Tool::Deploy { env, force } => {
            let prod = input.map(|_| *env == "prod");
            permit(prod.map(|prod| !prod || (has("deploy:prod") && has("mcp:write"))));
            forbid(
                "f-deploy-legacy",
                Some(legacy),
                Remedy::Unavailable(Some("Not on legacy sessions.".into())),
            );
            forbid(
                "f-deploy-prod",
                prod.map(|prod| prod && !(phase == "approval" && approved_by == "ops-lead")),
                Remedy::Task(Some(format!("A prod deploy by {subject} needs approval."))),
            );
            forbid(
                "f-deploy-force",
                input.map(|_| *force && !trusted),
                Remedy::Url(format!(
                    "https://approve.example/deploy/{}?by={}",
                    percent_encoded(env),
                    percent_encoded(subject)
                )),
            );
            forbid(
                "f-deploy-tasks",
                input.map(|_| *force && case.tasks),
                Remedy::Task(None),
            );
        }
        Tool::DeleteFile { path } => {
            let path = input.map(|_| *path);
            permit(Some(role("admin")));
            forbid(
                "f-delete-ops",
                Some(dept == Some("ops")),
                Remedy::Undisclosed(None),
            );
            forbid(
                "f-delete-root",
                path.map(|p| p == "/" || p.starts_with("/etc/passwd")),
                Remedy::Unavailable(None),
            );
            forbid(
                "f-delete-system",
                path.map(|p| p.starts_with("/etc/")),
                Remedy::Unavailable(Some("System files stay.".into())),
            );
            forbid(
                "f-delete-ask",
                path.map(|p| case.form && p.ends_with(".md")),
                Remedy::Ask(None),
            );
        }
        Tool::Ghost => unreachable!("refused by the drift check"),
    }

    if forbids.is_empty() {
        return if permitted {
            Decision::allow()
        } else {
            Decision::undisclosed(NOT_ALLOWED)
        };
    }
    forbids.sort_by(|(a_id, a), (b_id, b)| (a.rank(), a_id).cmp(&(b.rank(), b_id)));
    let or = |message: &Option<String>, fallback: &str| {
        message.clone().unwrap_or_else(|| fallback.to_owned())
    };
    match &forbids[0].1 {
        Remedy::Unavailable(message) => {
            Decision::unavailable(or(message, "This operation is not available."))
        }
        Remedy::Undisclosed(message) => Decision::undisclosed(or(message, NOT_ALLOWED)),
        Remedy::Scopes(_) => {
            let mut all: Vec<&str> = Vec::new();
            for (_, remedy) in &forbids {
                if let Remedy::Scopes(scopes) = remedy {
                    for scope in *scopes {
                        if !all.contains(scope) {
                            all.push(scope);
                        }
                    }
                }
            }
            Decision::scopes(all)
        }
        Remedy::Credential(details, message) => {
            Remediation::credential(details.as_array().cloned().unwrap_or_default())
                .message(message.clone())
                .into()
        }
        Remedy::Url(url) => Decision::url(url.clone(), "Approve this request, then try again."),
        Remedy::Task(message) => Decision::task(or(message, "This operation needs an approval.")),
        Remedy::Ask(message) => Decision::ask(or(message, "Do you want to do this?")),
    }
}

/// Generated cases; each runs in about 2 ms in a debug build. With 512, every kind of decision
/// the set can give turns up (the rarest, `task`, about 13 times on average).
const CASES: u32 = 512;

/// `CASES` generated principals and calls: CedarPolicy's decision is the reference's, and
/// every kind of decision turns up among them.
#[test]
fn decisions_match_the_reference() {
    let policy = model_policy("reference");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let mut runner = TestRunner::new(Config {
        cases: CASES,
        failure_persistence: None,
        ..Config::default()
    });
    let kinds = Mutex::new(std::collections::BTreeMap::<String, usize>::new());
    runner
        .run(&case_strategy(), |case| {
            let evaluation = case.evaluation();
            let actual = runtime
                .block_on(policy.evaluate(evaluation))
                .map_err(|e| TestCaseError::fail(format!("evaluation error: {e}")))?;
            let expected = reference(&case);
            prop_assert_eq!(&actual, &expected, "case {:#?}", case);
            let kind = match &actual {
                Decision::Deny(remediation) => remediation.kind(),
                other => other.kind(),
            };
            *kinds.lock().expect("kinds").entry(kind.into()).or_default() += 1;
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
    // The generator reaches every kind of decision the set can give.
    let kinds = kinds.into_inner().expect("kinds");
    for kind in [
        "allow",
        "ask",
        "scope",
        "credential",
        "url",
        "task",
        "unavailable",
        "undisclosed",
    ] {
        assert!(kinds.contains_key(kind), "no {kind} decision in {kinds:?}");
    }
}

/// A few hand-picked cases of the model, to read the reference by example.
#[tokio::test]
async fn model_examples() {
    let policy = model_policy("examples");
    let base = Case {
        subject: Some("alice"),
        client_id: Some("cli-trusted"),
        scopes: vec!["mcp:read"],
        dept: None,
        other_claim: false,
        tool: Tool::AdminReport,
        shape: Shape::Typed,
        listed: Listed::Same,
        phase: Phase::Invocation,
        approved_by: "",
        era: Era::Modern,
        form: false,
        url: false,
        tasks: false,
    };
    let examples = [
        (
            base.clone(),
            Decision::scopes(["mcp:admin", "mcp:read", "mcp:audit"]),
        ),
        (
            Case {
                scopes: vec!["mcp:read", "mcp:admin", "mcp:audit"],
                ..base.clone()
            },
            Decision::allow(),
        ),
        (
            Case {
                tool: Tool::Transfer {
                    amount: 5000,
                    currency: "EUR",
                    urgent: true,
                    memo: None,
                },
                subject: Some("bob"),
                ..base.clone()
            },
            Remediation::credential([
                json!({"type": "payment", "amount": 5000, "currency": "EUR", "by": "bob"}),
            ])
            .message("Transfer 5000 EUR?")
            .into(),
        ),
        (
            Case {
                tool: Tool::Deploy {
                    env: "qa env/1",
                    force: true,
                },
                client_id: None,
                tasks: true,
                ..base.clone()
            },
            Decision::url(
                "https://approve.example/deploy/qa%20env%2F1?by=alice",
                "Approve this request, then try again.",
            ),
        ),
        (
            Case {
                tool: Tool::DeleteFile {
                    path: "/etc/passwd",
                },
                dept: Some(Dept::Text("ops")),
                ..base.clone()
            },
            Decision::unavailable("This operation is not available."),
        ),
        (
            Case {
                tool: Tool::DeleteFile { path: "/tmp/x" },
                phase: Phase::Discovery,
                ..base.clone()
            },
            Decision::allow(),
        ),
        (
            Case {
                tool: PROD_DEPLOY,
                listed: Listed::Drifted,
                ..base.clone()
            },
            Decision::undisclosed(NOT_ALLOWED),
        ),
        (
            Case {
                tool: PROD_DEPLOY,
                shape: Shape::Extra,
                ..base.clone()
            },
            Decision::undisclosed(SCHEMA_MISMATCH),
        ),
    ];
    for (case, expected) in examples {
        assert_eq!(reference(&case), expected, "reference, {case:?}");
        assert_eq!(
            decide(&policy, case.evaluation()).await,
            expected,
            "CedarPolicy, {case:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Numbers through the layer: a policy judges the value the request's JSON text says
// ---------------------------------------------------------------------------------------------

/// An rmcp server with one tool, `buy`, whose `price` is a JSON Schema `number` and whose
/// `count` is an `integer`. A call that reaches it is answered `bought`.
#[derive(Clone, Default)]
struct Shop;

impl rmcp::ServerHandler for Shop {
    fn get_info(&self) -> rmcp::model::ServerConfig {
        rmcp::model::ServerConfig::new(
            rmcp::model::ServerCapabilities::builder()
                .enable_tools()
                .build(),
        )
    }

    async fn list_tools(
        &self,
        _request: Option<rmcp::model::PaginatedRequestParams>,
        _context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::ListToolsResult, rmcp::ErrorData> {
        let Value::Object(schema) = json!({"type": "object", "properties": {
            "price": {"type": "number"}, "count": {"type": "integer"},
        }}) else {
            unreachable!("an object literal")
        };
        Ok(rmcp::model::ListToolsResult::with_all_items(vec![
            rmcp::model::Tool::new("buy", "Buy something", schema),
        ]))
    }

    async fn call_tool(
        &self,
        _request: rmcp::model::CallToolRequestParams,
        _context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::CallToolResponse, rmcp::ErrorData> {
        Ok(
            rmcp::model::CallToolResult::success(vec![rmcp::model::ContentBlock::text("bought")])
                .into(),
        )
    }
}

/// A price cap of 100 and a count cap of 10, every other call permitted.
const SHOP_SCHEMA: &str = r#"namespace Shop {
    @mcp_principal("User")
    entity User = { issuer: String, subject: String, client_id: String, scopes: Set<String>, claims: {} };
    @mcp_resource("McpServer")
    entity McpServer;
    @mcp_context("gate")
    type Gate = { era: String, phase: String, protocol_version: String, elicitation_form: Bool,
                  elicitation_url: Bool, tasks: Bool, approved_by: String };
    type BuyInput = { price?: decimal, count?: Long };
    action "buy" appliesTo {
        principal: [User], resource: [McpServer], context: { input: BuyInput, gate: Gate }
    };
}"#;

const SHOP_POLICIES: &str = r#"
    permit(principal, action, resource);
    forbid(principal, action == Shop::Action::"buy", resource)
    when { context.input has price && context.input.price.greaterThan(decimal("100.0000")) };
    forbid(principal, action == Shop::Action::"buy", resource)
    when { context.input has count && context.input.count > 10 };
"#;

/// The shop behind a gate that judges with [`SHOP_POLICIES`], and a valid token for it.
async fn shop_gate() -> (common::peers::GatedServer, String) {
    let key = common::tokens::TestKey::es256("k1");
    let keys = mcp_gate::StaticKeys::from_jwks_json(&key.jwks_json()).unwrap();
    let policy = CedarPolicy::builder()
        .schema_text("shop.cedarschema", SHOP_SCHEMA)
        .policies_text("shop.cedar", SHOP_POLICIES)
        .build()
        .expect("the shop's policy");
    let service: rmcp::transport::streamable_http_server::StreamableHttpService<
        Shop,
        rmcp::transport::streamable_http_server::session::local::LocalSessionManager,
    > = rmcp::transport::streamable_http_server::StreamableHttpService::new(
        || Ok(Shop),
        Default::default(),
        rmcp::transport::streamable_http_server::StreamableHttpServerConfig::default()
            .with_legacy_session_mode(false)
            .with_json_response(true),
    );
    let mcp = axum::Router::new().route("/mcp", axum::routing::any_service(service));
    let server = common::peers::GatedServer::start_with(
        move |_| {
            mcp_gate::Gate::builder()
                .issuer(mcp_gate::Issuer::with_keys("https://as.example", keys))
                .evaluate(policy)
        },
        mcp,
    )
    .await;
    let token = key.mint(&common::tokens::claims(
        "https://as.example",
        &server.url,
        "mcp:read",
    ));
    // The layer learns `buy`'s input schema from a list, as a client's first list teaches it.
    let listed = server
        .post(
            Some(&token),
            &[],
            r#"{"jsonrpc":"2.0","id":0,"method":"tools/list"}"#,
        )
        .await;
    assert_eq!(
        listed.body["result"]["tools"][0]["name"], "buy",
        "{listed:?}"
    );
    (server, token)
}

/// What became of a call: it reached the shop, a `forbid` denied it, or it was refused before
/// Cedar (the request has no exact Cedar form).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Bought,
    Forbidden,
    Refused,
}

/// What becomes of a `buy` call with `arguments` (JSON text, sent as it is).
async fn fate(server: &common::peers::GatedServer, token: &str, arguments: &str) -> Fate {
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"buy","arguments":{arguments}}}}}"#
    );
    let reply = server.post(Some(token), &[], &body).await;
    match reply.body["result"]["content"][0]["text"].as_str() {
        Some("bought") => Fate::Bought,
        Some("You are not allowed to do this.") => Fate::Forbidden,
        Some("The request does not match the authorization schema.") => Fate::Refused,
        _ => panic!("{arguments}: {reply:?}"),
    }
}

#[tokio::test]
async fn numbers_are_judged_on_their_text() {
    let (server, token) = shop_gate().await;
    use Fate::{Bought, Forbidden, Refused};
    // (arguments as sent, what becomes of the call)
    let cases = [
        // Over the cap by less than a float can tell (it was bought through an f64).
        (r#"{"price": 100.0000000000000001}"#, Refused),
        (r#"{"price": 100.00010}"#, Forbidden),
        (r#"{"price": 1.000001e2}"#, Forbidden),
        // At the cap, however it is spelled.
        (r#"{"price": 100}"#, Bought),
        (r#"{"price": 100.000000000000000000}"#, Bought),
        (r#"{"price": 1e2}"#, Bought),
        (r#"{"price": 10000e-2}"#, Bought),
        (r#"{"price": -0}"#, Bought),
        (r#"{"price": -0.0}"#, Bought),
        // More decimal places than Cedar's decimal holds, or too small to be anything but
        // rounded: refused, never rounded (1e-400 reads as 0 through an f64).
        (r#"{"price": 99.99995}"#, Refused),
        (r#"{"price": 1e-400}"#, Refused),
        // Cedar decimal's range, at its edge and one step beyond.
        (r#"{"price": -922337203685477.5808}"#, Bought),
        (r#"{"price": -922337203685477.5809}"#, Refused),
        // Integers in the JSON Schema sense: a zero fractional part is an integer.
        (r#"{"count": 10}"#, Bought),
        (r#"{"count": 10.0}"#, Bought),
        (r#"{"count": 1e1}"#, Bought),
        (r#"{"count": 1.0e+1}"#, Bought),
        (r#"{"count": 100e-1}"#, Bought),
        (r#"{"count": -0}"#, Bought),
        (r#"{"count": 11.0}"#, Forbidden),
        (r#"{"count": 1.5}"#, Refused),
        (r#"{"count": 1e-400}"#, Refused),
        // The 64-bit range, at its edge and one beyond; an f64 cannot tell them apart.
        (r#"{"count": -9223372036854775808}"#, Bought),
        (r#"{"count": -9223372036854775809}"#, Refused),
        (r#"{"count": -9223372036854775808.0}"#, Bought),
        (r#"{"count": -9.223372036854775809e18}"#, Refused),
        (r#"{"count": -1e19}"#, Refused),
    ];
    let mut wrong = Vec::new();
    for (arguments, expected) in cases {
        let got = fate(&server, &token, arguments).await;
        if got != expected {
            wrong.push(format!("{arguments}: {got:?}, expected {expected:?}"));
        }
    }
    assert!(wrong.is_empty(), "misjudged:\n{}", wrong.join("\n"));
}
