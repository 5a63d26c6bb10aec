//! Scope sets and an optional scope hierarchy.
//!
//! Tokens carry scopes in `scope` (a space-separated string, RFC 9068 / RFC 8693) or in `scp`
//! (an array or a string, as several issuers emit). A [`ScopeHierarchy`] lets a broader scope
//! imply narrower ones, so a token holding `mcp:admin` can satisfy `mcp:write` without the
//! issuer listing both.
//!
//! ```
//! use mcp_gate::ScopeHierarchy;
//!
//! let hierarchy = ScopeHierarchy::new()
//!     .implies("mcp:admin", ["mcp:write"])
//!     .implies("mcp:write", ["mcp:read"]);
//! let effective = hierarchy.expand(["mcp:admin"]);
//! assert!(effective.contains("mcp:read"));
//! ```

use std::collections::{BTreeSet, HashMap};

/// An ordered set of scope strings.
pub type ScopeSet = BTreeSet<String>;

/// Splits a space-separated scope string (RFC 6749 §3.3) into its scopes.
pub(crate) fn parse_scope_string(value: &str) -> impl Iterator<Item = &str> {
    value.split(' ').filter(|s| !s.is_empty())
}

/// Whether `value` is a valid scope token (RFC 6749 §3.3: printable ASCII, no space, `"` or `\`).
pub(crate) fn is_valid_scope_token(value: &str) -> bool {
    !value.is_empty()
        && value
            .bytes()
            .all(|b| b == 0x21 || (0x23..=0x5B).contains(&b) || (0x5D..=0x7E).contains(&b))
}

/// Which scopes imply which others. Empty by default: every scope stands for itself.
#[derive(Clone, Debug, Default)]
pub struct ScopeHierarchy {
    implied: HashMap<String, Vec<String>>,
}

impl ScopeHierarchy {
    /// An empty hierarchy.
    pub fn new() -> Self {
        Self::default()
    }

    /// Declares that holding `broader` also grants each of `narrower`. Chains are followed.
    pub fn implies<I, S>(mut self, broader: impl Into<String>, narrower: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.implied
            .entry(broader.into())
            .or_default()
            .extend(narrower.into_iter().map(Into::into));
        self
    }

    /// Whether the hierarchy declares nothing.
    pub fn is_empty(&self) -> bool {
        self.implied.is_empty()
    }

    /// All scopes named by the hierarchy, broader and narrower.
    pub(crate) fn scopes(&self) -> impl Iterator<Item = &str> {
        self.implied
            .iter()
            .flat_map(|(k, v)| std::iter::once(k.as_str()).chain(v.iter().map(String::as_str)))
    }

    /// The granted scopes plus everything they imply, transitively. Cycles are harmless.
    pub fn expand<I, S>(&self, granted: I) -> ScopeSet
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut effective = ScopeSet::new();
        let mut pending: Vec<String> = granted.into_iter().map(|s| s.as_ref().to_owned()).collect();
        while let Some(scope) = pending.pop() {
            if let Some(narrower) = self.implied.get(&scope) {
                pending.extend(narrower.iter().filter(|n| !effective.contains(*n)).cloned());
            }
            effective.insert(scope);
        }
        effective
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_on_single_and_repeated_spaces() {
        let scopes: Vec<_> = parse_scope_string(" a  b c ").collect();
        assert_eq!(scopes, ["a", "b", "c"]);
    }

    #[test]
    fn scope_token_grammar() {
        assert!(is_valid_scope_token("mcp:read"));
        assert!(!is_valid_scope_token("a b"));
        assert!(!is_valid_scope_token("a\"b"));
        assert!(!is_valid_scope_token("a\\b"));
        assert!(!is_valid_scope_token(""));
        assert!(!is_valid_scope_token("caf\u{e9}"));
    }

    #[test]
    fn hierarchy_is_transitive_and_tolerates_cycles() {
        let h = ScopeHierarchy::new()
            .implies("admin", ["write"])
            .implies("write", ["read"])
            .implies("read", ["admin"]);
        let all = h.expand(["write"]);
        assert_eq!(
            all.into_iter().collect::<Vec<_>>(),
            ["admin", "read", "write"]
        );
        let h = ScopeHierarchy::new().implies("admin", ["write"]);
        assert!(!h.expand(["write"]).contains("admin"));
    }
}
