//! Why a configuration file was refused: always the file, the line when one is to blame, the
//! key, and what is wrong, in one sentence.

use std::fmt;
use std::path::PathBuf;

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
    /// Not TOML, an unknown key, a value of the wrong type or out of its range (the TOML
    /// reader's own words, which name the key).
    #[error("{0}")]
    Syntax(String),
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
