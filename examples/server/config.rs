//! The example server's configuration file (`--config FILE`): TOML, one key per long flag of
//! [`Options`], named as the flag without its leading `--` (`listen`, `dev-issuer-listen`,
//! `issuer = [...]` for a repeatable flag). `examples/server/server.example.toml` lists every
//! key with its default.
//!
//! Precedence: a flag given on the command line wins over the file (a repeatable flag given
//! once replaces the file's whole list), and the file wins over the built-in default. A key
//! the example does not know, a value of the wrong type, a file that cannot be read or is not
//! TOML, and two settings that exclude each other (`dev-issuer-listen` and `issuer`, wherever
//! each comes from) are refused with a sentence naming the file and the key.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, FromArgMatches};
use serde::Deserialize;

use crate::options::Options;

/// What a configuration file may set: each key is optional, and an absent key leaves the
/// flag's default (or the command line's value) in place.
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct FileOptions {
    /// `--listen`.
    pub listen: Option<SocketAddr>,
    /// `--resource`.
    pub resource: Option<String>,
    /// `--issuer`, every one.
    pub issuer: Option<Vec<String>>,
    /// `--dev-issuer-listen`.
    pub dev_issuer_listen: Option<SocketAddr>,
    /// `--jwks-uri`.
    pub jwks_uri: Option<String>,
    /// `--required-scope`, every one.
    pub required_scope: Option<Vec<String>>,
    /// `--revision`.
    pub revision: Option<String>,
    /// `--redis`.
    pub redis: Option<String>,
    /// `--console-listen`.
    pub console_listen: Option<SocketAddr>,
    /// `--continuation-keys-file`, relative to the configuration file's folder.
    pub continuation_keys_file: Option<PathBuf>,
    /// `--allowed-origin`, every one.
    pub allowed_origin: Option<Vec<String>>,
    /// `--cedar`, relative to the configuration file's folder.
    pub cedar: Option<PathBuf>,
    /// `--audit-log`, relative to the configuration file's folder.
    pub audit_log: Option<PathBuf>,
    /// `--shadow-cedar`, relative to the configuration file's folder.
    pub shadow_cedar: Option<PathBuf>,
}

/// Why the configuration file was refused. Its `Display` is one sentence naming the file.
#[derive(Debug)]
pub enum ConfigFileError {
    /// The file could not be read (missing, unreadable, not UTF-8).
    Read {
        /// The file, as given to `--config`.
        path: PathBuf,
        /// What reading it said.
        error: std::io::Error,
    },
    /// The file is not TOML.
    Syntax {
        /// The file.
        path: PathBuf,
        /// The line the parser stopped at (1-based), when it says.
        line: Option<usize>,
        /// What the parser said.
        message: String,
    },
    /// A key that is not one of the example's options.
    UnknownKey {
        /// The file.
        path: PathBuf,
        /// The key.
        key: String,
    },
    /// A known key with a value of the wrong type or form.
    Value {
        /// The file.
        path: PathBuf,
        /// The key.
        key: String,
        /// What deserializing the value said.
        message: String,
    },
    /// Two settings that exclude each other, one of them at least from the file.
    Conflict(String),
}

impl fmt::Display for ConfigFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Read { path, error } => write!(
                f,
                "cannot read the configuration file {} (--config): {error}",
                path.display()
            ),
            Self::Syntax {
                path,
                line,
                message,
            } => {
                write!(
                    f,
                    "the configuration file {} is not valid TOML",
                    path.display()
                )?;
                if let Some(line) = line {
                    write!(f, " (line {line})")?;
                }
                write!(f, ": {}", one_line(message))
            }
            Self::UnknownKey { path, key } => write!(
                f,
                "the configuration file {} sets `{key}`, which is not an option of the example \
                 server; the keys are the long flags without `--`: {}",
                path.display(),
                keys().join(", ")
            ),
            Self::Value { path, key, message } => {
                write!(
                    f,
                    "the configuration file {} gives `{key}` a value it cannot take: {}",
                    path.display(),
                    one_line(message)
                )?;
                if message.ends_with("expected a sequence") {
                    // A repeatable flag given a single value.
                    write!(f, " (a list: {key} = [\"...\"])")?;
                }
                Ok(())
            }
            Self::Conflict(sentence) => f.write_str(sentence),
        }
    }
}

impl std::error::Error for ConfigFileError {}

/// The line (1-based) of the byte at `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    let before = text.as_bytes().get(..offset).unwrap_or(text.as_bytes());
    before.iter().filter(|byte| **byte == b'\n').count() + 1
}

/// A parser's message on one line.
fn one_line(message: &str) -> String {
    message.trim().replace('\n', "; ")
}

/// The keys a file may set: every long flag of [`Options`] but `config` (a file names no
/// other file) and `help`.
pub fn keys() -> Vec<String> {
    Options::command()
        .get_arguments()
        .filter_map(|arg| arg.get_long())
        .filter(|long| !matches!(*long, "config" | "help"))
        .map(str::to_owned)
        .collect()
}

/// Parses the text of the configuration file `source` (named in errors; relative paths in the
/// file are taken from its folder). Reads nothing from disk.
pub fn load(text: &str, source: &Path) -> Result<FileOptions, ConfigFileError> {
    let table: toml::Table =
        text.parse()
            .map_err(|error: toml::de::Error| ConfigFileError::Syntax {
                path: source.to_owned(),
                line: error.span().map(|span| line_of(text, span.start)),
                message: error.message().to_owned(),
            })?;
    let known = keys();
    // Key by key, so that a refusal names the key it is about.
    for (key, value) in &table {
        if !known.iter().any(|k| k == key) {
            return Err(ConfigFileError::UnknownKey {
                path: source.to_owned(),
                key: key.clone(),
            });
        }
        let mut one = toml::Table::new();
        one.insert(key.clone(), value.clone());
        one.try_into::<FileOptions>()
            .map_err(|error| ConfigFileError::Value {
                path: source.to_owned(),
                key: key.clone(),
                message: error.message().to_owned(),
            })?;
    }
    let mut file: FileOptions =
        table
            .try_into()
            .map_err(|error: toml::de::Error| ConfigFileError::Syntax {
                path: source.to_owned(),
                line: None,
                message: error.message().to_owned(),
            })?;
    let folder = source.parent().unwrap_or(Path::new(""));
    for path in [
        &mut file.continuation_keys_file,
        &mut file.cedar,
        &mut file.audit_log,
        &mut file.shadow_cedar,
    ]
    .into_iter()
    .flatten()
    {
        if path.is_relative() {
            *path = folder.join(&*path);
        }
    }
    Ok(file)
}

/// Completes `options` (parsed from `matches`) with `file` (read from `source`): each key the
/// file sets replaces the flag's value unless the flag was given on the command line. Refuses
/// the conflicts clap refuses between flags, wherever each value comes from.
pub fn apply(
    options: &mut Options,
    matches: &ArgMatches,
    file: FileOptions,
    source: &Path,
) -> Result<(), ConfigFileError> {
    let on_line = |id: &str| matches.value_source(id) == Some(ValueSource::CommandLine);
    // `dev-issuer-listen` and `issuer` exclude each other when both are set, as clap has it.
    let dev_from = if on_line("dev_issuer_listen") {
        Some("--dev-issuer-listen on the command line".to_owned())
    } else {
        file.dev_issuer_listen
            .map(|_| format!("`dev-issuer-listen` in {}", source.display()))
    };
    let issuer_from = if on_line("issuers") {
        Some("--issuer on the command line".to_owned())
    } else {
        file.issuer
            .as_ref()
            .filter(|issuers| !issuers.is_empty())
            .map(|_| format!("`issuer` in {}", source.display()))
    };
    if let (Some(dev), Some(issuer)) = (dev_from, issuer_from) {
        return Err(ConfigFileError::Conflict(format!(
            "{dev} and {issuer} exclude each other: the development issuer starts only when no \
             issuer is given; drop one of them"
        )));
    }

    // `fill!(id, field, value)`: the file's `value`, when it has one, unless the argument
    // `id` (clap's id, the field's name) was given on the command line.
    macro_rules! fill {
        ($id:literal, $field:ident, $value:expr) => {
            if !on_line($id)
                && let Some(value) = $value
            {
                options.$field = value;
            }
        };
    }
    fill!("listen", listen, file.listen);
    fill!("resource", resource, file.resource.map(Some));
    fill!("issuers", issuers, file.issuer);
    fill!(
        "dev_issuer_listen",
        dev_issuer_listen,
        file.dev_issuer_listen
    );
    fill!("jwks_uri", jwks_uri, file.jwks_uri.map(Some));
    fill!("required_scopes", required_scopes, file.required_scope);
    fill!("revision", revision, file.revision);
    fill!("redis", redis, file.redis.map(Some));
    fill!("console_listen", console_listen, file.console_listen);
    fill!(
        "continuation_keys_file",
        continuation_keys_file,
        file.continuation_keys_file.map(Some)
    );
    fill!("allowed_origins", allowed_origins, file.allowed_origin);
    fill!("cedar", cedar, file.cedar.map(Some));
    fill!("audit_log", audit_log, file.audit_log.map(Some));
    fill!("shadow_cedar", shadow_cedar, file.shadow_cedar.map(Some));
    Ok(())
}

/// The options of this run from the command line `matches`, completed from the file that
/// `--config` names, if any.
pub fn resolve(matches: &ArgMatches) -> Result<Options, ConfigFileError> {
    // `matches` come from `Options::command()`, so this cannot fail; if it did, it would be
    // a command-line error, reported as clap reports those (status 2).
    let mut options = Options::from_arg_matches(matches).unwrap_or_else(|error| error.exit());
    if let Some(path) = options.config.clone() {
        let text = std::fs::read_to_string(&path).map_err(|error| ConfigFileError::Read {
            path: path.clone(),
            error,
        })?;
        let file = load(&text, &path)?;
        apply(&mut options, matches, file, &path)?;
    }
    Ok(options)
}
