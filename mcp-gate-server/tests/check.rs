//! `mcp-gate-server --config FILE --check`: the real binary reads and checks a file, prints
//! `ok` and exits 0, or prints the refusal with the file and line and exits 1.

use std::process::Command;

/// Runs the binary's `--check` on `text`, written as `gateway.toml` in a folder of its own:
/// its exit code, stdout, stderr and the file's path.
fn check(text: &str) -> (Option<i32>, String, String, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("gateway.toml");
    std::fs::write(&path, text).expect("write");
    let output = Command::new(env!("CARGO_BIN_EXE_mcp-gate-server"))
        .arg("--config")
        .arg(&path)
        .arg("--check")
        .env_remove("RUST_LOG")
        .output()
        .expect("run mcp-gate-server --check");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
        path.display().to_string(),
    )
}

const GOOD: &str = r#"listen = "127.0.0.1:8080"
[upstream]
url = "http://127.0.0.1:3000/mcp"
[resource]
uri = "http://127.0.0.1:8080/mcp"
[[issuer]]
url = "http://127.0.0.1:9000"
[policy]
allow-all = true
"#;

#[test]
fn a_good_file_prints_ok_and_exits_0() {
    let (code, stdout, stderr, path) = check(GOOD);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert_eq!(stdout.trim(), format!("{path}: ok"));
}

#[test]
fn a_bad_file_prints_the_file_line_and_key_and_exits_1() {
    let bad = GOOD.replace(
        "url = \"http://127.0.0.1:3000/mcp\"",
        "url = \"http://127.0.0.1:3000/mcp\"\nresponse-timeout = \"forever\"",
    );
    let (code, stdout, stderr, path) = check(&bad);
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    assert!(!stdout.contains("ok"), "{stdout}");
    assert!(
        stderr.contains(&format!(
            "{path}:4: [upstream] response-timeout: `forever` is not a duration"
        )),
        "{stderr}"
    );
    let (code, _, stderr, path) =
        check(&GOOD.replace("allow-all = true", "allow-all = true\nallow-al = true"));
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("{path}:10: [policy] allow-al: unknown key")),
        "{stderr}"
    );
}

#[test]
fn a_missing_file_is_named_and_exits_1() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("absent.toml");
    let output = Command::new(env!("CARGO_BIN_EXE_mcp-gate-server"))
        .arg("--config")
        .arg(&path)
        .arg("--check")
        .output()
        .expect("run");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("{}: cannot read it", path.display())),
        "{stderr}"
    );
}

#[test]
fn a_busy_address_is_refused_with_the_file_and_key() {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = busy.local_addr().expect("address").port();
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("gateway.toml");
    // The issuer is a closed port: its keys fail fast, and the start goes on to bind.
    let text = GOOD
        .replace("127.0.0.1:8080", &format!("127.0.0.1:{port}"))
        .replace("127.0.0.1:9000", "127.0.0.1:1");
    std::fs::write(&path, text).expect("write");
    let output = Command::new(env!("CARGO_BIN_EXE_mcp-gate-server"))
        .arg("--config")
        .arg(&path)
        .env("RUST_LOG", "error")
        .output()
        .expect("run");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!(
            "{}: listen: cannot listen on 127.0.0.1:{port}",
            path.display()
        )),
        "{stderr}"
    );
    drop(busy);
}
