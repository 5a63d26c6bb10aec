//! Pinned revisions of SEP-2643 (Structured Authorization Denials).
//!
//! The SEP is a draft that changed its wire shape several times. A deployment pins one
//! revision when it builds the layer, by the name `current` or by an exact 40-hex commit id,
//! and every denial is rendered in that revision's shape. `spec/` holds, for each revision, a
//! page in our own words and golden fixtures of every response.
//!
//! | id | family | differences |
//! |---|---|---|
//! | `c74b0c9321e89a904780d1024d895232fbb03820` (`current`) | result-based | envelope in `result._meta`; an HTTP challenge may be accompanied by a result carrying the envelope (credential delivery `Both`) |
//! | `6bff817cb884f7065fd5b3d37c4973d1f8b3fa87` | result-based | as `current`, but a challenge is never accompanied by an envelope |
//! | `1c5b0cec97691cb9db3d880474a71d604d6addee` | error-based | JSON-RPC error (default code `-32003`) with `error.data.authorization`; no `remediation` member |
//!
//! ```
//! use mcp_gate::Revision;
//!
//! let current = Revision::select("current").unwrap();
//! assert_eq!(current.id(), "c74b0c9321e89a904780d1024d895232fbb03820");
//! assert!(Revision::select("0000000000000000000000000000000000000000").is_err());
//!
//! // Typed: a constant per pinned revision, and `FromStr` with the same rules as `select`.
//! assert_eq!(current, Revision::RESULT_BASED_C74B0C9);
//! let old: Revision = "1c5b0cec97691cb9db3d880474a71d604d6addee".parse().unwrap();
//! assert_eq!(old, Revision::ERROR_BASED_1C5B0CE);
//! ```

use std::fmt;
use std::str::FromStr;

use crate::error::ConfigError;

/// The revision `current` names.
pub const CURRENT: &str = "c74b0c9321e89a904780d1024d895232fbb03820";

/// How a revision carries denials.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Family {
    /// The envelope rides in `result._meta["io.modelcontextprotocol/authorization"]`, with a
    /// `remediation` of `available`, `unavailable` or `undisclosed`.
    ResultBased {
        /// Whether an HTTP challenge may also carry an envelope in its body.
        envelope_beside_challenge: bool,
    },
    /// The envelope rides in a JSON-RPC error's `error.data.authorization`.
    ErrorBased,
}

/// One pinned SEP-2643 revision.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Revision(&'static RevisionSpec);

#[derive(PartialEq, Eq, Hash)]
struct RevisionSpec {
    id: &'static str,
    family_tag: u8,
    summary: &'static str,
}

static REVISIONS: [RevisionSpec; 3] = [
    RevisionSpec {
        id: CURRENT,
        family_tag: 0,
        summary: "result-based; a challenge may carry an envelope beside it",
    },
    RevisionSpec {
        id: "6bff817cb884f7065fd5b3d37c4973d1f8b3fa87",
        family_tag: 1,
        summary: "result-based; no envelope beside a challenge",
    },
    RevisionSpec {
        id: "1c5b0cec97691cb9db3d880474a71d604d6addee",
        family_tag: 2,
        summary: "error-based; envelope in error.data.authorization",
    },
];

impl Revision {
    /// Revision `c74b0c9321e89a904780d1024d895232fbb03820`, the one `current` names in this
    /// release: result-based, and a challenge may carry an envelope beside it.
    ///
    /// The constants are named by family and short commit id (an identifier cannot start with
    /// a digit, and the family is what tells the revisions apart to a reader). Unlike
    /// [`Revision::current`], a constant never moves to another revision in a later release.
    pub const RESULT_BASED_C74B0C9: Revision = Revision(&REVISIONS[0]);
    /// Revision `6bff817cb884f7065fd5b3d37c4973d1f8b3fa87`: result-based, and a challenge is
    /// never accompanied by an envelope.
    pub const RESULT_BASED_6BFF817: Revision = Revision(&REVISIONS[1]);
    /// Revision `1c5b0cec97691cb9db3d880474a71d604d6addee`: error-based, the envelope in
    /// `error.data.authorization`.
    pub const ERROR_BASED_1C5B0CE: Revision = Revision(&REVISIONS[2]);

    /// Selects a revision by `current` or its exact 40-hex id.
    pub fn select(name: &str) -> Result<Self, ConfigError> {
        let wanted = if name == "current" { CURRENT } else { name };
        REVISIONS
            .iter()
            .find(|r| r.id == wanted)
            .map(Revision)
            .ok_or_else(|| ConfigError::UnknownRevision {
                given: name.to_owned(),
                supported: Self::supported().collect::<Vec<_>>().join(", "),
            })
    }

    /// The revision `current` resolves to.
    pub fn current() -> Self {
        Self::RESULT_BASED_C74B0C9
    }

    /// Every selectable revision id.
    pub fn supported() -> impl Iterator<Item = &'static str> {
        REVISIONS.iter().map(|r| r.id)
    }

    /// The 40-hex commit id.
    pub fn id(&self) -> &'static str {
        self.0.id
    }

    /// Whether this is the revision `current` names.
    pub fn is_current(&self) -> bool {
        self.0.id == CURRENT
    }

    /// How this revision carries denials.
    pub fn family(&self) -> Family {
        match self.0.family_tag {
            0 => Family::ResultBased {
                envelope_beside_challenge: true,
            },
            1 => Family::ResultBased {
                envelope_beside_challenge: false,
            },
            _ => Family::ErrorBased,
        }
    }

    /// One line on what sets this revision apart.
    pub fn summary(&self) -> &'static str {
        self.0.summary
    }
}

/// Parses `current` or an exact 40-hex revision id, by the rules of [`Revision::select`].
impl FromStr for Revision {
    type Err = ConfigError;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Self::select(name)
    }
}

/// What chooses a revision: a [`Revision`], or its name (`current` or an exact 40-hex id) as
/// `&str` or `String`, read by [`Revision::select`].
///
/// `GateBuilder::revision` takes any of them, so a configuration string and a typed constant
/// are both accepted, and an unknown name surfaces as [`ConfigError::UnknownRevision`] when the
/// gate is built. Sealed: these are the only choosers.
///
/// ```
/// use mcp_gate::Revision;
/// use mcp_gate::denial::IntoRevision;
///
/// assert_eq!(Revision::ERROR_BASED_1C5B0CE.into_revision().ok(), Some(Revision::ERROR_BASED_1C5B0CE));
/// assert_eq!("current".into_revision().ok(), Some(Revision::current()));
/// assert!(String::from("c74b0c9").into_revision().is_err());
/// ```
pub trait IntoRevision: sealed::Sealed {
    /// The revision, or [`ConfigError::UnknownRevision`] for a name that is not pinned.
    fn into_revision(self) -> Result<Revision, ConfigError>;
}

impl IntoRevision for Revision {
    fn into_revision(self) -> Result<Revision, ConfigError> {
        Ok(self)
    }
}

impl IntoRevision for &str {
    fn into_revision(self) -> Result<Revision, ConfigError> {
        Revision::select(self)
    }
}

impl IntoRevision for String {
    fn into_revision(self) -> Result<Revision, ConfigError> {
        Revision::select(&self)
    }
}

impl IntoRevision for &String {
    fn into_revision(self) -> Result<Revision, ConfigError> {
        Revision::select(self)
    }
}

mod sealed {
    /// Keeps [`IntoRevision`](super::IntoRevision) to the choosers this crate names.
    pub trait Sealed {}

    impl Sealed for super::Revision {}
    impl Sealed for &str {}
    impl Sealed for String {}
    impl Sealed for &String {}
}

impl Default for Revision {
    fn default() -> Self {
        Self::current()
    }
}

impl fmt::Debug for Revision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Revision").field(&self.0.id).finish()
    }
}

impl fmt::Display for Revision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selection() {
        assert!(Revision::select("current").unwrap().is_current());
        let old = Revision::select("1c5b0cec97691cb9db3d880474a71d604d6addee").unwrap();
        assert_eq!(old.family(), Family::ErrorBased);
        let error = Revision::select("c74b0c9").unwrap_err().to_string();
        assert!(
            error.contains("6bff817cb884f7065fd5b3d37c4973d1f8b3fa87"),
            "{error}"
        );
        assert!(Revision::select("CURRENT").is_err());
    }

    #[test]
    fn constants_name_the_pinned_revisions() {
        let constants = [
            Revision::RESULT_BASED_C74B0C9,
            Revision::RESULT_BASED_6BFF817,
            Revision::ERROR_BASED_1C5B0CE,
        ];
        assert_eq!(
            constants.map(|r| r.id()).to_vec(),
            Revision::supported().collect::<Vec<_>>()
        );
        for (revision, short) in constants.into_iter().zip(["c74b0c9", "6bff817", "1c5b0ce"]) {
            assert_eq!(Revision::select(revision.id()).unwrap(), revision);
            assert!(revision.id().starts_with(short), "{revision:?}");
        }
        assert_eq!(Revision::current(), Revision::RESULT_BASED_C74B0C9);
        assert_eq!(
            Revision::RESULT_BASED_6BFF817.family(),
            Family::ResultBased {
                envelope_beside_challenge: false
            }
        );
        assert_eq!(Revision::ERROR_BASED_1C5B0CE.family(), Family::ErrorBased);
    }

    #[test]
    fn from_str_and_into_revision_follow_select() {
        for name in [
            "current",
            CURRENT,
            "6bff817cb884f7065fd5b3d37c4973d1f8b3fa87",
        ] {
            let selected = Revision::select(name).unwrap();
            assert_eq!(name.parse::<Revision>().unwrap(), selected);
            assert_eq!(name.into_revision().unwrap(), selected);
            assert_eq!(name.to_owned().into_revision().unwrap(), selected);
            assert_eq!((&name.to_owned()).into_revision().unwrap(), selected);
        }
        for name in ["CURRENT", "c74b0c9", "", " current"] {
            assert!(matches!(
                name.parse::<Revision>(),
                Err(ConfigError::UnknownRevision { .. })
            ));
            assert!(name.into_revision().is_err());
        }
        assert_eq!(
            Revision::RESULT_BASED_6BFF817.into_revision().unwrap(),
            Revision::RESULT_BASED_6BFF817
        );
    }
}
