//! Rate limits named in a Cedar set: `@rate_limit("10/minute")` on a `permit` policy, and
//! optionally `@rate_limit_per("principal" | "principal_tool" | "client" | "tool")` (default
//! `principal`). When a policy with a limit determines an allow, the call is also counted on
//! that limit, for the tool it calls (the method, for an operation that is not a tool call):
//!
//! ```cedar
//! @rate_limit("10/minute")
//! permit (principal, action == Action::"transfer", resource);
//! ```
//!
//! says "`transfer`: 10 a minute per principal". Checked when the set loads: a rate that does
//! not parse, an unknown scope, or a limit on a `forbid` refuses the set.

use std::collections::BTreeMap;

use cedar_policy::{Effect, PolicyId, PolicySet};

use super::remedy::AnnotationError;
use crate::limit::{Limit, LimitScope, RateLimit};
use crate::policy::Evaluation;

/// The limits of the set's permit policies, by policy id.
#[derive(Debug, Clone, Default)]
pub(super) struct SetLimits(BTreeMap<PolicyId, (LimitScope, RateLimit)>);

impl SetLimits {
    /// Reads every policy's `@rate_limit` and `@rate_limit_per`; the error names the policy.
    pub fn compile(set: &PolicySet) -> Result<Self, (PolicyId, AnnotationError)> {
        let mut limits = BTreeMap::new();
        for policy in set.policies() {
            let id = policy.id().clone();
            let fail = |error| (id.clone(), error);
            let rate = policy.annotation("rate_limit");
            let per = policy.annotation("rate_limit_per");
            let Some(text) = rate else {
                if per.is_some() {
                    return Err(fail(AnnotationError::ScopeWithoutRate));
                }
                continue;
            };
            if policy.effect() == Effect::Forbid {
                return Err(fail(AnnotationError::LimitOnForbid));
            }
            let rate: RateLimit = text.parse().map_err(|error| {
                fail(AnnotationError::BadRate {
                    text: text.to_owned(),
                    error,
                })
            })?;
            let scope = match per.unwrap_or("principal") {
                "principal" => LimitScope::Principal,
                "principal_tool" => LimitScope::PrincipalAndTool,
                "client" => LimitScope::Client,
                "tool" => LimitScope::Tool,
                other => return Err(fail(AnnotationError::BadLimitScope(other.to_owned()))),
            };
            limits.insert(id, (scope, rate));
        }
        Ok(Self(limits))
    }

    /// Names on `evaluation` the limit of each policy in `reasons` that has one, for the tool
    /// the call names (or its method).
    pub fn name<'a>(&self, reasons: impl Iterator<Item = &'a PolicyId>, evaluation: &Evaluation) {
        for id in reasons {
            let Some((scope, rate)) = self.0.get(id) else {
                continue;
            };
            let limit = match evaluation.tool() {
                // Counted for this tool only, as the policy's own limit.
                Some(tool) => Limit::new(*scope, *rate).for_tool(tool),
                // Per method: a principal-wide counter would mix every operation.
                None if *scope == LimitScope::Principal => {
                    Limit::new(LimitScope::PrincipalAndTool, *rate)
                }
                None => Limit::new(*scope, *rate),
            };
            evaluation.limit(limit);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    use super::*;
    use crate::Principal;

    fn compile(text: &str) -> Result<SetLimits, String> {
        let set = PolicySet::from_str(text).map_err(|e| e.to_string())?;
        SetLimits::compile(&set).map_err(|(_, error)| error.to_string())
    }

    #[test]
    fn bad_limits_refuse_the_set_with_their_reason() {
        let forbid = r#"@rate_limit("1/s") forbid (principal, action, resource);"#;
        assert!(compile(forbid).unwrap_err().contains("forbid policy"));
        let rate = r#"@rate_limit("ten a minute") permit (principal, action, resource);"#;
        assert!(
            compile(rate)
                .unwrap_err()
                .contains("@rate_limit(\"ten a minute\")")
        );
        let scope =
            r#"@rate_limit("1/s") @rate_limit_per("planet") permit (principal, action, resource);"#;
        assert!(compile(scope).unwrap_err().contains("planet"));
        let alone = r#"@rate_limit_per("client") permit (principal, action, resource);"#;
        assert!(compile(alone).unwrap_err().contains("needs @rate_limit"));
    }

    #[test]
    fn a_determining_policy_names_its_limit_for_the_tool_called() {
        let limits = compile(
            r#"@id("transfer") @rate_limit("10/minute") permit (principal, action, resource);"#,
        )
        .expect("a set");
        let principal = Principal::builder()
            .issuer("https://as.example")
            .build()
            .expect("a principal");
        let evaluation = Evaluation::builder(principal)
            .tool("transfer", serde_json::json!({}))
            .build()
            .expect("an evaluation");
        let id = limits.0.keys().next().expect("one limit").clone();
        limits.name(std::iter::once(&id), &evaluation);
        let named = evaluation.named_limits();
        let expected =
            Limit::per_principal("10/minute".parse().expect("a rate")).for_tool("transfer");
        assert_eq!(named, [expected]);
        // A policy without a limit names none.
        let other = PolicyId::new("other");
        limits.name(std::iter::once(&other), &evaluation);
        assert_eq!(evaluation.named_limits().len(), 1);
    }
}
