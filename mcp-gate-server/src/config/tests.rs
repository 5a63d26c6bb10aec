//! The file's refusals: each names the file, the line to blame and the key, and the file that
//! documents every key (`gateway.example.toml`) reads.

use std::path::Path;

use super::*;

/// A file that reads: one key per line, so that a test can swap a line and know its number.
const GOOD: &str = r#"listen = "127.0.0.1:8080"
[upstream]
url = "http://127.0.0.1:3000/mcp"
connect-timeout = "5s"
[resource]
uri = "http://127.0.0.1:8080/mcp"
[[issuer]]
url = "http://127.0.0.1:9000"
[policy]
allow-all = true
"#;

/// A variable no test sets (the tests never set the environment: it is shared by threads).
const UNSET: &str = "MCP_GATE_SERVER_TEST_NEVER_SET_4C1D";

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::parse(Path::new("conf/gateway.toml"), text)
}

/// `GOOD` with its 1-based line `line` replaced by `with` (which may span lines).
fn with_line(line: usize, with: &str) -> String {
    GOOD.lines()
        .enumerate()
        .map(|(index, text)| if index + 1 == line { with } else { text })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// The refusal of `text`, checked to name the file and `line`, and to contain `key`; its
/// `Display`.
#[track_caller]
fn refused(text: &str, line: Option<usize>, key: &str) -> String {
    let error = match parse(text) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(error) => error,
    };
    let shown = error.to_string();
    assert_eq!(error.line, line, "{shown}");
    let prefix = match line {
        Some(line) => format!("conf/gateway.toml:{line}: "),
        None => "conf/gateway.toml: ".to_owned(),
    };
    assert!(shown.starts_with(&prefix), "{shown} (expected {prefix})");
    assert!(shown.contains(key), "{shown} (expected the key {key})");
    shown
}

#[test]
fn the_good_file_and_the_documented_example_read() {
    let config = parse(GOOD).expect("GOOD reads");
    assert!(config.file.policy.get_ref().allow_all);
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("gateway.example.toml");
    if let Err(error) = Config::load(&example) {
        panic!("gateway.example.toml: {error}");
    }
}

#[test]
fn toml_syntax() {
    let shown = refused(
        &with_line(3, "url = \"http://127.0.0.1:3000/mcp"),
        Some(3),
        "[upstream] url",
    );
    assert!(!shown.contains('\n'), "one line: {shown}");
}

#[test]
fn unknown_key_at_the_top_and_in_a_table() {
    let shown = refused(
        &with_line(1, "listne = \"127.0.0.1:8080\""),
        Some(1),
        "listne",
    );
    assert!(shown.contains("unknown key"), "{shown}");
    assert!(
        shown.contains("listen"),
        "the known keys are listed: {shown}"
    );

    let shown = refused(
        &with_line(4, "conect-timeout = \"5s\""),
        Some(4),
        "[upstream] conect-timeout",
    );
    assert!(shown.contains("unknown key"), "{shown}");

    // An unknown table is an unknown key of the top.
    refused(
        &format!("{GOOD}[upstrem]\nurl = \"http://x\"\n"),
        Some(11),
        "upstrem",
    );
}

#[test]
fn wrong_type() {
    let shown = refused(
        &with_line(4, "connect-timeout = 5"),
        Some(4),
        "[upstream] connect-timeout",
    );
    assert!(shown.contains("invalid type"), "{shown}");
    refused(
        &with_line(10, "allow-all = \"yes\""),
        Some(10),
        "[policy] allow-all",
    );
}

#[test]
fn bad_duration() {
    let shown = refused(
        &with_line(4, "connect-timeout = \"soon\""),
        Some(4),
        "[upstream] connect-timeout",
    );
    assert!(shown.contains("`soon` is not a duration"), "{shown}");
}

#[test]
fn bad_url() {
    let shown = refused(&with_line(3, "url = \"/mcp\""), Some(3), "[upstream] url");
    assert!(shown.contains("not an absolute URL"), "{shown}");
    let shown = refused(
        &with_line(6, "uri = \"ftp://127.0.0.1/mcp\""),
        Some(6),
        "[resource] uri",
    );
    assert!(shown.contains("not an http(s) URL"), "{shown}");
    refused(
        &with_line(6, "uri = \"http://127.0.0.1:8080/mcp?x=1\""),
        Some(6),
        "[resource] uri",
    );
}

#[test]
fn missing_required_table_and_key() {
    // Without [policy] (lines 9 and 10): the whole file is to blame.
    let text: String = GOOD
        .lines()
        .take(8)
        .map(|line| format!("{line}\n"))
        .collect();
    let error = parse(&text).expect_err("no [policy]");
    let shown = error.to_string();
    assert!(shown.starts_with("conf/gateway.toml"), "{shown}");
    assert!(shown.contains("[policy]"), "{shown}");
    assert!(shown.contains("required"), "{shown}");

    // [upstream] without its url: the table's line.
    let shown = refused(&with_line(3, ""), Some(2), "[upstream] url");
    assert!(shown.contains("missing"), "{shown}");

    // No [[issuer]].
    let text = with_line(7, "").replace("url = \"http://127.0.0.1:9000\"\n", "");
    refused(&text, None, "[[issuer]]");
}

#[test]
fn policy_with_neither_or_both() {
    let shown = refused(&with_line(10, ""), Some(9), "[policy]");
    assert!(shown.contains("allow-all = true"), "{shown}");
    let shown = refused(
        &with_line(10, "cedar = \"cedar\"\nallow-all = true"),
        Some(11),
        "[policy] allow-all",
    );
    assert!(shown.contains("exclude each other"), "{shown}");
}

#[test]
fn allow_destructive_without_allow_all() {
    refused(
        &with_line(10, "cedar = \"cedar\"\nallow-destructive = true"),
        Some(11),
        "[policy] allow-destructive",
    );
}

#[test]
fn missing_secret_variables() {
    let text = format!(
        "{GOOD}[tokens.introspection]\nendpoint = \"http://127.0.0.1:9000/introspect\"\nclient-id = \"gw\"\nclient-secret-env = \"{UNSET}\"\n"
    );
    let shown = refused(&text, Some(14), "[tokens.introspection] client-secret-env");
    assert!(shown.contains(UNSET), "{shown}");
    assert!(shown.contains("not set"), "{shown}");

    let text =
        format!("{GOOD}[redis]\nurl = \"redis://127.0.0.1:6379/\"\n\npassword-env = \"{UNSET}\"\n");
    let shown = refused(&text, Some(14), "[redis] password-env");
    assert!(shown.contains(UNSET), "{shown}");

    let text = format!("{GOOD}[continuation]\nkeys-env = \"{UNSET}\"\nrequire-keys = true\n");
    let shown = refused(&text, Some(13), "[continuation] require-keys");
    assert!(shown.contains(UNSET), "{shown}");
}

#[test]
fn operations_off_loopback_without_allow_remote() {
    let text = format!("{GOOD}[operations]\nmetrics = false\nlisten = \"0.0.0.0:9090\"\n");
    let shown = refused(&text, Some(13), "[operations] listen");
    assert!(shown.contains("allow-remote"), "{shown}");
    let allowed = format!("{text}allow-remote = true\n");
    assert!(parse(&allowed).is_ok());
    refused(
        &format!("{GOOD}[operations]\nlisten = \"127.0.0.1:8080\"\n"),
        Some(12),
        "[operations] listen",
    );
}

#[test]
fn rate_limit_of_zero_requests() {
    let text = format!(
        "{GOOD}[[limits.rate]]\nscope = \"principal\"\nrequests = 5\nperiod = \"1m\"\n[[limits.rate]]\nscope = \"tool\"\nperiod = \"1m\"\nrequests = 0\n"
    );
    let shown = refused(&text, Some(18), "[[limits.rate]] requests");
    assert!(shown.contains("at least 1"), "{shown}");
    let shown = refused(
        &format!("{GOOD}[[limits.rate]]\nscope = \"everyone\"\nrequests = 5\nperiod = \"1m\"\n"),
        Some(12),
        "[[limits.rate]] scope",
    );
    assert!(shown.contains("everyone"), "{shown}");
}

/// Every key that names a builder option of the library beyond the first file's, with a
/// value other than its default.
const EVERY_OPTION: &str = r#"
[requests]
max-body-bytes = 65536
body-read-timeout = "10s"
inner-read-timeout = "20s"
cache-ttl-cap = "30s"
[sessions]
capacity = 500
per-owner = 5
idle = "10m"
[dpop]
algorithms = ["ES256", "EdDSA"]
required = false
max-age = "30s"
leeway = "2s"
[denials]
credential-delivery = "both"
credential-status = 403
[tokens]
typ = "at-jwt"
key-refresh = { cooldown = "5s", interval = "2m", timeout = "3s", max-keys = 8, max-document-bytes = 65536 }
[tokens.scope-hierarchy]
"mcp:admin" = ["mcp:read", "mcp:write"]
"#;

#[tokio::test]
async fn every_builder_option_the_file_names_builds_a_gate() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gateway.toml");
    let text = GOOD.replace(
        "[policy]\nallow-all = true\n",
        "authorization-servers = [\"http://127.0.0.1:9000\"]\nallow-any-origin = true\n[policy]\nallow-all = true\ndevelopment-mode = true\n",
    );
    // `[resource]`'s new keys go in its table, before `[[issuer]]`.
    let text = text.replace(
        "[[issuer]]\nurl = \"http://127.0.0.1:9000\"\nauthorization-servers = [\"http://127.0.0.1:9000\"]\nallow-any-origin = true\n",
        "authorization-servers = [\"http://127.0.0.1:9000\"]\nallow-any-origin = true\n[[issuer]]\nurl = \"http://127.0.0.1:9000\"\n",
    );
    std::fs::write(&path, format!("{text}{EVERY_OPTION}")).unwrap();
    let config = match crate::serve::check(&path) {
        Ok(config) => config,
        Err(error) => panic!("{error}"),
    };
    let file = &config.file;
    assert_eq!(file.sessions.capacity, Some(500));
    assert_eq!(file.tokens.typ, Some(TypEntry::AtJwt));
    assert_eq!(file.tokens.scope_hierarchy["mcp:admin"].len(), 2);
    assert!(file.resource.allow_any_origin);
    assert_eq!(file.denials.credential_delivery, Some(DeliveryEntry::Both));

    // Reusable continuation states, without DPoP (which they exclude).
    std::fs::write(
        &path,
        format!("{GOOD}[continuation]\nreusable-state = true\n"),
    )
    .unwrap();
    match crate::serve::check(&path) {
        Ok(config) => assert!(config.file.continuation.reusable_state),
        Err(error) => panic!("{error}"),
    }
}

#[test]
fn the_new_options_refusals_name_their_line_and_key() {
    let shown = refused(
        &format!("{GOOD}[denials]\ncredential-status = 500\n"),
        Some(12),
        "[denials] credential-status",
    );
    assert!(shown.contains("401 or 403"), "{shown}");
    refused(
        &with_line(
            6,
            "uri = \"http://127.0.0.1:8080/mcp\"\nallowed-origins = [\"http://a.example\"]\nallow-any-origin = true",
        ),
        Some(8),
        "[resource] allow-any-origin",
    );
    let shown = refused(
        &format!("{GOOD}[dpop]\nrequired = true\nalgorithms = [\"ES256\", \"XS999\"]\n"),
        Some(13),
        "[dpop] algorithms",
    );
    assert!(shown.contains("XS999"), "{shown}");
    let shown = refused(
        &format!("{GOOD}[dpop]\nnonce-key-env = \"{UNSET}\"\n"),
        Some(12),
        "[dpop] nonce-key-env",
    );
    assert!(shown.contains(UNSET), "{shown}");
    refused(
        &format!("{GOOD}[dpop]\nrequired = true\n[continuation]\nreusable-state = true\n"),
        Some(14),
        "[continuation] reusable-state",
    );
    refused(
        &format!("{GOOD}[dpop]\nnonce-lifetime = \"5m\"\n"),
        Some(12),
        "[dpop] nonce-lifetime",
    );
    refused(
        &format!("{GOOD}[tokens]\ntyp = \"jwt\"\n"),
        Some(12),
        "[tokens] typ",
    );
    refused(
        &format!("{GOOD}[sessions]\ncapacity = -1\n"),
        Some(12),
        "[sessions] capacity",
    );
}
