//! Why a Cedar policy set could not be loaded (feature `cedar`): [`CedarError`], with Cedar's
//! messages placed in their files ([`Diagnostic`]).
//!
//! These types live beside [`ConfigError`](super::ConfigError), which carries them, and import
//! nothing else of the crate, so that the configuration error does not depend on the policy
//! module that raises them. They are public as `mcp_gate::policy::cedar::{CedarError,
//! Diagnostic}`.

use std::fmt;

/// One message from Cedar, placed in its file.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Diagnostic {
    /// The file (or text name).
    pub file: String,
    /// The line, from 1, when Cedar pointed at one.
    pub line: Option<usize>,
    /// The column, from 1, when Cedar pointed at one.
    pub column: Option<usize>,
    /// The policy, when the message is about one.
    pub policy: Option<String>,
    /// Cedar's message.
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
            if let Some(column) = self.column {
                write!(f, ":{column}")?;
            }
        }
        if let Some(policy) = &self.policy {
            write!(f, " (policy {policy})")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// Lists diagnostics one per line.
struct Lines<'a>(&'a [Diagnostic]);

impl fmt::Display for Lines<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for diagnostic in self.0 {
            write!(f, "\n  {diagnostic}")?;
        }
        Ok(())
    }
}

/// Why a Cedar policy set could not be loaded (at build, or on reload).
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum CedarError {
    /// A file could not be read.
    #[error("cannot read {file}: {reason}")]
    Read {
        /// The file.
        file: String,
        /// Why.
        reason: String,
    },
    /// No policy source, or no schema, was given.
    #[error("a Cedar policy needs {0}")]
    Missing(&'static str),
    /// Policies that do not parse.
    #[error("Cedar policies do not parse:{}", Lines(.0))]
    Parse(Vec<Diagnostic>),
    /// The schema does not parse, or lacks what the mapping needs.
    #[error("Cedar schema {file}: {message}")]
    Schema {
        /// The schema file.
        file: String,
        /// Cedar's message, or what is missing.
        message: String,
    },
    /// Policies that do not validate against the schema (strict mode).
    #[error("Cedar policies do not validate against the schema:{}", Lines(.0))]
    Validation(Vec<Diagnostic>),
    /// A remediation annotation that cannot be used.
    #[error("Cedar remediation annotation:{}", Lines(std::slice::from_ref(.0)))]
    Annotation(Diagnostic),
    /// The entities file does not parse or does not conform to the schema.
    #[error("Cedar entities {file}: {message}")]
    Entities {
        /// The entities file.
        file: String,
        /// Cedar's message.
        message: String,
    },
    /// The tool list is not a `tools/list` result.
    #[error("tool list {file}: {message}")]
    Tools {
        /// The tool list file.
        file: String,
        /// What is wrong.
        message: String,
    },
}
