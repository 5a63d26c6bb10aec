//! Why a configuration file was refused: always the file, the line when one is to blame, the
//! key, and what is wrong, in one sentence.

use std::fmt;
use std::path::{Path, PathBuf};

/// A configuration file that cannot be used. Its `Display` reads
/// `gateway.toml:12: [upstream] url: not an absolute http(s) URL`.
#[derive(Debug)]
pub struct ConfigError {
    /// The file.
    pub path: PathBuf,
    /// The 1-based line to blame, when one is.
    pub line: Option<usize>,
    /// What is wrong.
    pub kind: ConfigErrorKind,
}

/// What is wrong with a configuration file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigErrorKind {
    /// The file could not be read.
    #[error("cannot read it: {0}")]
    Read(#[source] std::io::Error),
    /// Not TOML, an unknown key, a missing key, a value of the wrong type or out of its range
    /// (the TOML reader's words, with the key it was reading when one is found).
    #[error("{}{message}", key.as_deref().map(|key| format!("{key}: ")).unwrap_or_default())]
    Syntax {
        /// The key, with its table (`[upstream] url`), when the reader was on one.
        key: Option<String>,
        /// What is wrong.
        message: String,
    },
    /// A value of the right type that the gateway cannot use.
    #[error("{key}: {message}")]
    Invalid {
        /// The key, with its table (`[upstream] url`).
        key: String,
        /// Why.
        message: String,
    },
    /// An environment variable the file names for a secret is not set, or empty.
    #[error("{key}: the environment variable {variable} is not set (or empty)")]
    MissingSecret {
        /// The key that names the variable.
        key: String,
        /// The variable.
        variable: String,
    },
    /// A referenced file (keys, policies, certificates) could not be used.
    #[error("{key}: {message}")]
    Referenced {
        /// The key that names the file.
        key: String,
        /// What went wrong, from the library that read it.
        message: String,
    },
}

impl ConfigError {
    /// An error in `path` at `line`.
    pub fn new(path: impl Into<PathBuf>, line: Option<usize>, kind: ConfigErrorKind) -> Self {
        Self {
            path: path.into(),
            line,
            kind,
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}: {}", self.path.display(), self.kind),
            None => write!(f, "{}: {}", self.path.display(), self.kind),
        }
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&self.kind)
    }
}

/// The TOML reader's refusal of `text` (the file at `path`), with its line and the key it was
/// reading: the table in force at that line and the key the line sets.
pub(super) fn from_toml(path: &Path, text: &str, error: &toml::de::Error) -> ConfigError {
    let message = error.message().trim_end();
    let line = error.span().map(|span| super::line_of(text, span.start));
    let lines: Vec<&str> = text.lines().collect();
    let table = line.and_then(|line| table_at(&lines, line));
    let within = |key: &str| match &table {
        Some(table) => format!("{table} {key}"),
        None => key.to_owned(),
    };
    let (key, message) = if let Some(field) = quoted_after(message, "missing field ") {
        match &table {
            Some(_) => (Some(within(field)), "required, and missing".to_owned()),
            // Every required key at the top is a table.
            None => (
                Some(format!("[{field}]")),
                "a required table, and missing".to_owned(),
            ),
        }
    } else if let Some(field) = quoted_after(message, "unknown field ") {
        let known = message
            .split_once("expected one of ")
            .or_else(|| message.split_once("expected "))
            .map(|(_, known)| format!(" (the keys here: {known})"))
            .unwrap_or_default();
        // An unknown table is blamed on its header, which names it whole.
        let header = line
            .and_then(|line| lines.get(line - 1))
            .map(|here| here.trim())
            .filter(|here| here.starts_with('[') && here.contains(field));
        let key = match header {
            Some(_) => table.clone().unwrap_or_else(|| field.to_owned()),
            None => within(field),
        };
        (Some(key), format!("unknown key{known}"))
    } else {
        let key = line
            .and_then(|line| lines.get(line - 1))
            .and_then(|here| key_of(here));
        let key = match key {
            Some(key) => Some(within(key)),
            None => table.clone(),
        };
        (key, message.replace('\n', "; "))
    };
    ConfigError::new(path, line, ConfigErrorKind::Syntax { key, message })
}

/// The text between the backquotes after `prefix` at the start of `message`.
fn quoted_after<'a>(message: &'a str, prefix: &str) -> Option<&'a str> {
    let rest = message.strip_prefix(prefix)?.strip_prefix('`')?;
    rest.split_once('`').map(|(quoted, _)| quoted)
}

/// The table header (`[upstream]`, `[[limits.rate]]`) in force at 1-based `line`, the line
/// itself included.
fn table_at(lines: &[&str], line: usize) -> Option<String> {
    lines
        .iter()
        .take(line)
        .rev()
        .map(|text| text.trim())
        .find(|text| text.starts_with('['))
        .map(|header| {
            // A header may carry a comment after it.
            let end = header.rfind(']').map_or(header.len(), |end| end + 1);
            header[..end].to_owned()
        })
}

/// The bare key a line sets (`connect-timeout` in `connect-timeout = "5s"`), if it sets one.
pub(super) fn key_of(line: &str) -> Option<&str> {
    let (key, _) = line.split_once('=')?;
    let key = key.trim().trim_matches('"');
    let bare = !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    bare.then_some(key)
}
