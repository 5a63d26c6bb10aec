//! The example server's configuration file (`examples/server/config.rs`) through the example's
//! own clap `Options` (`examples/server/options.rs`): the committed example file lists every
//! option and parses to the defaults, unknown keys and wrong types are refused naming the key,
//! a flag beats the file and the file beats the default, and clap's conflicts hold across the
//! two sources.

#[path = "../examples/server/config.rs"]
mod config;
#[path = "../examples/server/options.rs"]
mod options;

use std::path::{Path, PathBuf};

use clap::{CommandFactory, FromArgMatches, Parser};
use config::{ConfigFileError, FileOptions};
use options::Options;

/// The committed example file.
fn example_file() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/server/server.example.toml")
}

/// The options of the command line `args` (after the program name) with the file `text`
/// (named `server.toml` in errors) applied.
fn with_file(args: &[&str], text: &str) -> Result<Options, ConfigFileError> {
    let matches = Options::command()
        .try_get_matches_from(std::iter::once("server").chain(args.iter().copied()))
        .expect("the tests give valid flags");
    let mut options = Options::from_arg_matches(&matches).expect("the tests give valid flags");
    let source = Path::new("server.toml");
    config::apply(&mut options, &matches, config::load(text, source)?, source)?;
    Ok(options)
}

/// The options of the command line `args` alone.
fn flags(args: &[&str]) -> Options {
    Options::parse_from(std::iter::once("server").chain(args.iter().copied()))
}

#[test]
fn the_example_file_parses_to_the_defaults() {
    let path = example_file();
    let matches = Options::command()
        .try_get_matches_from(["server", "--config", &path.display().to_string()])
        .expect("--config is a flag");
    let options = config::resolve(&matches).expect("the example file is valid");
    let defaults = Options {
        config: Some(path),
        ..flags(&[])
    };
    assert_eq!(options, defaults);
}

#[test]
fn the_example_file_lists_every_key_and_each_commented_value_is_valid() {
    let text = std::fs::read_to_string(example_file()).expect("the example file is readable");
    // Every key, set or commented out (`# key = value`), uncommented.
    let uncommented: String = text
        .lines()
        .map(|line| match line.strip_prefix("# ") {
            Some(rest)
                if rest
                    .split_once(" = ")
                    .is_some_and(|(key, _)| !key.contains(' ')) =>
            {
                rest
            }
            _ => line,
        })
        .map(|line| format!("{line}\n"))
        .collect();
    let table: toml::Table = uncommented.parse().expect("the uncommented file is TOML");
    let mut in_file: Vec<&str> = table.keys().map(String::as_str).collect();
    let mut keys = config::keys();
    in_file.sort_unstable();
    keys.sort_unstable();
    assert_eq!(in_file, keys, "the example file names every option once");
    let all = config::load(&uncommented, Path::new("server.example.toml"))
        .expect("every commented value is valid");
    assert!(all.resource.is_some() && all.redis.is_some() && all.cedar.is_some());
}

#[test]
fn an_unknown_key_is_refused_naming_it() {
    let error = with_file(&[], "listen = \"127.0.0.1:8080\"\nlisten-address = \"x\"\n")
        .expect_err("an unknown key is refused");
    let text = error.to_string();
    assert!(
        matches!(error, ConfigFileError::UnknownKey { ref key, .. } if key == "listen-address")
    );
    assert!(
        text.contains("`listen-address`") && text.contains("server.toml"),
        "{text}"
    );
    // The file cannot name another file.
    let error = with_file(&[], "config = \"other.toml\"\n").expect_err("`config` is no key");
    assert!(error.to_string().contains("`config`"), "{error}");
}

#[test]
fn a_wrong_type_is_refused_naming_the_key_and_the_file() {
    for (text, key) in [
        ("listen = 8080\n", "listen"),
        ("listen = \"localhost\"\n", "listen"),
        ("issuer = \"https://auth.example.com\"\n", "issuer"),
        ("redis = true\n", "redis"),
        ("[console-listen]\nport = 1\n", "console-listen"),
    ] {
        let error = with_file(&[], text).expect_err("a wrong type is refused");
        let sentence = error.to_string();
        assert!(
            matches!(error, ConfigFileError::Value { key: ref k, .. } if k == key),
            "{text:?}: {sentence}"
        );
        assert!(
            sentence.contains(&format!("`{key}`")) && sentence.contains("server.toml"),
            "{sentence}"
        );
        assert!(!sentence.contains('\n'), "one line: {sentence:?}");
    }
}

#[test]
fn a_file_that_is_not_toml_is_refused_with_its_line() {
    let error = with_file(&[], "listen = \"127.0.0.1:8080\"\nrevision = \n").expect_err("not TOML");
    assert!(
        matches!(error, ConfigFileError::Syntax { line: Some(2), .. }),
        "{error}"
    );
    assert!(!error.to_string().contains('\n'), "{error:?}");
}

#[test]
fn a_missing_file_is_refused_naming_its_path() {
    let matches = Options::command()
        .try_get_matches_from(["server", "--config", "/nonexistent/mcp-gate/server.toml"])
        .expect("--config is a flag");
    let error = config::resolve(&matches).expect_err("a missing file is refused");
    assert!(matches!(error, ConfigFileError::Read { .. }));
    assert!(
        error
            .to_string()
            .contains("/nonexistent/mcp-gate/server.toml"),
        "{error}"
    );
}

/// Every option as a file line and as flags: different values on each side, so the winner
/// shows. `dev-issuer-listen` excludes `issuer` and has a test of its own.
const EVERY_OPTION: [(&str, &[&str], &[&str]); 13] = [
    (
        "listen = \"127.0.0.1:9100\"",
        &["--listen", "127.0.0.1:9200"],
        &["--listen", "127.0.0.1:9100"],
    ),
    (
        "resource = \"http://file/mcp\"",
        &["--resource", "http://flag/mcp"],
        &["--resource", "http://file/mcp"],
    ),
    (
        "issuer = [\"http://127.0.0.1:1\", \"http://127.0.0.1:2\"]",
        &["--issuer", "http://127.0.0.1:3"],
        &[
            "--issuer",
            "http://127.0.0.1:1",
            "--issuer",
            "http://127.0.0.1:2",
        ],
    ),
    (
        "jwks-uri = \"http://file/jwks\"",
        &["--jwks-uri", "http://flag/jwks"],
        &["--jwks-uri", "http://file/jwks"],
    ),
    (
        "required-scope = [\"file\"]",
        &["--required-scope", "flag"],
        &["--required-scope", "file"],
    ),
    (
        "revision = \"file\"",
        &["--revision", "flag"],
        &["--revision", "file"],
    ),
    (
        "redis = \"redis://file/\"",
        &["--redis", "redis://flag/"],
        &["--redis", "redis://file/"],
    ),
    (
        "console-listen = \"127.0.0.1:9101\"",
        &["--console-listen", "127.0.0.1:9201"],
        &["--console-listen", "127.0.0.1:9101"],
    ),
    (
        "continuation-keys-file = \"/etc/file-keys\"",
        &["--continuation-keys-file", "/etc/flag-keys"],
        &["--continuation-keys-file", "/etc/file-keys"],
    ),
    (
        "allowed-origin = [\"http://file\"]",
        &["--allowed-origin", "http://flag"],
        &["--allowed-origin", "http://file"],
    ),
    (
        "cedar = \"/etc/file-cedar\"",
        &["--cedar", "/etc/flag-cedar"],
        &["--cedar", "/etc/file-cedar"],
    ),
    (
        "audit-log = \"/var/log/file-audit.jsonl\"",
        &["--audit-log", "/var/log/flag-audit.jsonl"],
        &["--audit-log", "/var/log/file-audit.jsonl"],
    ),
    (
        "shadow-cedar = \"/etc/file-shadow\"",
        &["--shadow-cedar", "/etc/flag-shadow"],
        &["--shadow-cedar", "/etc/file-shadow"],
    ),
];

#[test]
fn the_file_beats_the_defaults_and_a_flag_beats_the_file() {
    let mut covered: Vec<String> = EVERY_OPTION
        .iter()
        .filter_map(|(line, _, _)| line.split_once(" = ").map(|(key, _)| key.to_owned()))
        .chain(["dev-issuer-listen".to_owned()])
        .collect();
    let mut keys = config::keys();
    covered.sort_unstable();
    keys.sort_unstable();
    assert_eq!(covered, keys, "this test covers every option");
    let text: String = EVERY_OPTION
        .iter()
        .map(|(line, _, _)| format!("{line}\n"))
        .collect();
    let file_flags: Vec<&str> = EVERY_OPTION
        .iter()
        .flat_map(|(_, _, file)| file.iter().copied())
        .collect();
    // The file alone: as if its values had been given as flags.
    assert_eq!(with_file(&[], &text).expect("valid"), flags(&file_flags));
    // Every flag on the command line: the file changes nothing.
    let line_flags: Vec<&str> = EVERY_OPTION
        .iter()
        .flat_map(|(_, line, _)| line.iter().copied())
        .collect();
    assert_eq!(
        with_file(&line_flags, &text).expect("valid"),
        flags(&line_flags)
    );
    // One flag at a time: that one from the command line, every other from the file.
    for (index, (_, line, _)) in EVERY_OPTION.iter().enumerate() {
        let mut expected: Vec<&str> = line.to_vec();
        for (other, (_, _, file)) in EVERY_OPTION.iter().enumerate() {
            if other != index {
                expected.extend(file.iter().copied());
            }
        }
        assert_eq!(
            with_file(line, &text).expect("valid"),
            flags(&expected),
            "{line:?}"
        );
    }
}

#[test]
fn the_development_issuer_address_from_the_file_or_a_flag() {
    let text = "dev-issuer-listen = \"127.0.0.1:9000\"\n";
    assert_eq!(
        with_file(&[], text).expect("valid"),
        flags(&["--dev-issuer-listen", "127.0.0.1:9000"])
    );
    assert_eq!(
        with_file(&["--dev-issuer-listen", "127.0.0.1:9001"], text).expect("valid"),
        flags(&["--dev-issuer-listen", "127.0.0.1:9001"])
    );
}

#[test]
fn the_development_issuer_excludes_an_issuer_from_either_source() {
    for (args, text) in [
        (
            &[][..],
            "dev-issuer-listen = \"127.0.0.1:9000\"\nissuer = [\"http://127.0.0.1:1\"]\n",
        ),
        (
            &["--issuer", "http://127.0.0.1:1"][..],
            "dev-issuer-listen = \"127.0.0.1:9000\"\n",
        ),
        (
            &["--dev-issuer-listen", "127.0.0.1:9000"][..],
            "issuer = [\"http://127.0.0.1:1\"]\n",
        ),
    ] {
        let error = with_file(args, text).expect_err("the two exclude each other");
        assert!(matches!(error, ConfigFileError::Conflict(_)), "{error}");
        let sentence = error.to_string();
        assert!(
            sentence.contains("dev-issuer-listen") && sentence.contains("issuer"),
            "{sentence}"
        );
    }
    // An empty list is no issuer.
    assert!(with_file(&[], "dev-issuer-listen = \"127.0.0.1:9000\"\nissuer = []\n").is_ok());
}

#[test]
fn relative_paths_are_taken_from_the_files_folder() {
    let file = config::load(
        "cedar = \"cedar\"\ncontinuation-keys-file = \"/abs/keys\"\naudit-log = \"log/audit.jsonl\"\n",
        Path::new("/etc/mcp-gate/server.toml"),
    )
    .expect("valid");
    assert_eq!(
        file,
        FileOptions {
            cedar: Some(PathBuf::from("/etc/mcp-gate/cedar")),
            continuation_keys_file: Some(PathBuf::from("/abs/keys")),
            audit_log: Some(PathBuf::from("/etc/mcp-gate/log/audit.jsonl")),
            ..FileOptions::default()
        }
    );
}
