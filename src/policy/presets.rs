//! Ready-made policies, and combinators to compose them with your own.
//!
//! ```
//! use mcp_gate::policy::{all_of, allowlist, first_match, scopes_per_tool, deny_all};
//!
//! // Only these tools, each with the scopes it needs; anything else is denied.
//! let policy = first_match([
//!     Box::new(all_of([
//!         Box::new(allowlist(["echo", "admin_report"])) as Box<dyn mcp_gate::policy::Policy>,
//!         Box::new(scopes_per_tool([("admin_report", vec!["mcp:admin"])])),
//!     ])) as Box<dyn mcp_gate::policy::Policy>,
//!     Box::new(deny_all("Not available.")),
//! ]);
//! # let _ = policy;
//! ```

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::{Decision, EvaluateFuture, Evaluation, Policy};

/// Allows everything that passes authentication: an open server, so it must be named. The
/// builder logs a warning when an open policy guards a non-loopback resource.
///
/// Tools whose annotations (from the inner server's `tools/list`) mark them destructive
/// (`destructiveHint: true`), and tools the server does not list at all, are still refused
/// (`undisclosed`) unless [`AllowAll::including_destructive`] says otherwise. A process that
/// has not seen a `tools/list` (a new replica) lists the tools itself before judging a call.
pub fn allow_all() -> AllowAll {
    AllowAll { destructive: false }
}

/// The [`allow_all`] policy.
#[derive(Clone, Copy, Debug)]
pub struct AllowAll {
    destructive: bool,
}

impl AllowAll {
    /// Lets destructive tools through as well.
    pub fn including_destructive(mut self) -> Self {
        self.destructive = true;
        self
    }
}

impl Policy for AllowAll {
    fn evaluate(&self, evaluation: Evaluation) -> EvaluateFuture {
        // A tool the server does not list (its annotations unknown even after the layer
        // listed the tools) may be anything: refused like a destructive one.
        let unlisted = evaluation.tool().is_some() && evaluation.tool_annotations().is_none();
        let decision = if self.destructive {
            Decision::Allow
        } else if unlisted {
            Decision::undisclosed("This tool is not listed by the server and is not allowed.")
        } else if evaluation.is_destructive_tool() {
            Decision::undisclosed("This tool is destructive and the server does not allow it.")
        } else {
            Decision::Allow
        };
        Box::pin(async move { Ok(decision) })
    }

    fn is_open(&self) -> bool {
        true
    }

    fn needs_tool_annotations(&self) -> bool {
        !self.destructive
    }
}

/// Denies every guarded operation as `unavailable`, with `message`.
pub fn deny_all(message: impl Into<String>) -> DenyAll {
    DenyAll(Arc::from(message.into()))
}

/// The [`deny_all`] policy.
#[derive(Clone, Debug)]
pub struct DenyAll(Arc<str>);

impl Policy for DenyAll {
    fn evaluate(&self, _evaluation: Evaluation) -> EvaluateFuture {
        let message = self.0.to_string();
        Box::pin(async move { Ok(Decision::unavailable(message)) })
    }
}

/// Allows the named tools; denies other tools as `undisclosed`; has no opinion on anything
/// that is not a tool ([`Decision::Abstain`]).
pub fn allowlist<I, S>(tools: I) -> Allowlist
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    Allowlist(Arc::new(tools.into_iter().map(Into::into).collect()))
}

/// The [`allowlist`] policy.
#[derive(Clone, Debug)]
pub struct Allowlist(Arc<HashSet<String>>);

impl Policy for Allowlist {
    fn evaluate(&self, evaluation: Evaluation) -> EvaluateFuture {
        let decision = match evaluation.tool() {
            Some(tool) if self.0.contains(tool) => Decision::Allow,
            Some(_) => Decision::undisclosed("This tool is not available."),
            None => Decision::Abstain,
        };
        Box::pin(async move { Ok(decision) })
    }
}

/// Requires scopes per tool: a listed tool is allowed when the token holds every scope it
/// needs (directly or through the scope hierarchy), and otherwise answered with a 403
/// step-up naming all of them (the endpoint-wide scopes are added by the layer). Tools not
/// listed, and everything that is not a tool, get [`Decision::Abstain`].
pub fn scopes_per_tool<I, T, S>(map: I) -> ScopesPerTool
where
    I: IntoIterator<Item = (T, Vec<S>)>,
    T: Into<String>,
    S: Into<String>,
{
    ScopesPerTool(Arc::new(
        map.into_iter()
            .map(|(tool, scopes)| (tool.into(), scopes.into_iter().map(Into::into).collect()))
            .collect(),
    ))
}

/// The [`scopes_per_tool`] policy.
#[derive(Clone, Debug)]
pub struct ScopesPerTool(Arc<HashMap<String, Vec<String>>>);

impl Policy for ScopesPerTool {
    fn evaluate(&self, evaluation: Evaluation) -> EvaluateFuture {
        let decision = match evaluation.tool().and_then(|tool| self.0.get(tool)) {
            Some(needed) if needed.iter().all(|s| evaluation.principal().has_scope(s)) => {
                Decision::Allow
            }
            Some(needed) => Decision::scopes(needed.clone()),
            None => Decision::Abstain,
        };
        Box::pin(async move { Ok(decision) })
    }
}

/// Every policy must agree: the first decision other than `Allow` or `Abstain` wins; all
/// `Allow` (or abstaining) gives `Allow`, unless all abstain, which gives `Abstain`.
pub fn all_of<I: IntoIterator<Item = Box<dyn Policy>>>(policies: I) -> AllOf {
    AllOf(Arc::new(policies.into_iter().collect()))
}

/// The [`all_of`] combinator.
#[derive(Clone)]
pub struct AllOf(Arc<Vec<Box<dyn Policy>>>);

impl Policy for AllOf {
    fn evaluate(&self, evaluation: Evaluation) -> EvaluateFuture {
        let policies = self.0.clone();
        Box::pin(async move {
            let mut allowed = false;
            for policy in policies.iter() {
                match policy.evaluate(evaluation.clone()).await? {
                    Decision::Allow => allowed = true,
                    Decision::Abstain => {}
                    other => return Ok(other),
                }
            }
            Ok(if allowed {
                Decision::Allow
            } else {
                Decision::Abstain
            })
        })
    }

    fn is_open(&self) -> bool {
        !self.0.is_empty() && self.0.iter().all(|p| p.is_open())
    }

    fn needs_tool_annotations(&self) -> bool {
        self.0.iter().any(|p| p.needs_tool_annotations())
    }
}

/// The first policy with an opinion decides: the first decision that is not `Abstain`.
pub fn first_match<I: IntoIterator<Item = Box<dyn Policy>>>(policies: I) -> FirstMatch {
    FirstMatch(Arc::new(policies.into_iter().collect()))
}

/// The [`first_match`] combinator.
#[derive(Clone)]
pub struct FirstMatch(Arc<Vec<Box<dyn Policy>>>);

impl Policy for FirstMatch {
    fn evaluate(&self, evaluation: Evaluation) -> EvaluateFuture {
        let policies = self.0.clone();
        Box::pin(async move {
            for policy in policies.iter() {
                match policy.evaluate(evaluation.clone()).await? {
                    Decision::Abstain => {}
                    decided => return Ok(decided),
                }
            }
            Ok(Decision::Abstain)
        })
    }

    fn is_open(&self) -> bool {
        self.0.iter().any(|p| p.is_open())
    }

    fn needs_tool_annotations(&self) -> bool {
        self.0.iter().any(|p| p.needs_tool_annotations())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::auth::{Principal, PrincipalParts, TokenKind};
    use crate::mcp::{ClientCapabilities, Era, ProtocolContext, Target};
    use crate::policy::{EvaluationData, Phase};

    fn evaluation(
        tool: &str,
        scopes: &[&str],
        annotations: Option<serde_json::Value>,
    ) -> Evaluation {
        let scopes: crate::auth::ScopeSet = scopes.iter().map(|s| s.to_string()).collect();
        let principal = Principal::new(PrincipalParts {
            issuer: "i".into(),
            subject: Some("s".into()),
            client_id: None,
            scopes: scopes.clone(),
            effective_scopes: scopes,
            authorization_details: Vec::new(),
            claims: Default::default(),
            expires_at: None,
            kind: TokenKind::Jwt,
            dpop_jkt: None,
        });
        let protocol = ProtocolContext {
            era: Era::Legacy,
            protocol_version: None,
            capabilities: ClientCapabilities::default(),
        };
        let target = Target::Tool {
            name: tool.into(),
            arguments: Default::default(),
        };
        Evaluation::new(EvaluationData {
            principal,
            method: "tools/call".into(),
            target,
            protocol: crate::policy::Protocol::owned(protocol),
            phase: Phase::Invocation,
            answered: None,
            listed: annotations.map(|annotations| {
                Arc::new(crate::mcp::annotations::ListedTool {
                    annotations,
                    input_schema: None,
                })
            }),
            approval: None,
            explained: std::sync::OnceLock::new(),
            limits: Default::default(),
            client: None,
            extensions: http::Extensions::new(),
        })
    }

    async fn decide(policy: &dyn Policy, evaluation: Evaluation) -> Decision {
        policy.evaluate(evaluation).await.unwrap()
    }

    #[tokio::test]
    async fn allowlist_and_scopes_per_tool() {
        let list = allowlist(["echo"]);
        assert_eq!(
            decide(&list, evaluation("echo", &[], None)).await,
            Decision::Allow
        );
        assert!(matches!(
            decide(&list, evaluation("rm", &[], None)).await,
            Decision::Deny(_)
        ));
        let scopes = scopes_per_tool([("admin", vec!["mcp:admin", "mcp:read"])]);
        assert_eq!(
            decide(
                &scopes,
                evaluation("admin", &["mcp:admin", "mcp:read"], None)
            )
            .await,
            Decision::Allow
        );
        assert_eq!(
            decide(&scopes, evaluation("admin", &["mcp:read"], None)).await,
            Decision::scopes(["mcp:admin", "mcp:read"]),
            "the step-up names every scope the tool needs"
        );
        assert_eq!(
            decide(&scopes, evaluation("echo", &[], None)).await,
            Decision::Abstain
        );
    }

    #[tokio::test]
    async fn combinators() {
        let both = all_of([
            Box::new(allowlist(["admin"])) as Box<dyn Policy>,
            Box::new(scopes_per_tool([("admin", vec!["mcp:admin"])])),
        ]);
        assert_eq!(
            decide(&both, evaluation("admin", &["mcp:admin"], None)).await,
            Decision::Allow
        );
        assert_eq!(
            decide(&both, evaluation("admin", &[], None)).await,
            Decision::scopes(["mcp:admin"])
        );
        let first = first_match([
            Box::new(scopes_per_tool([("admin", vec!["mcp:admin"])])) as Box<dyn Policy>,
            Box::new(deny_all("no")),
        ]);
        assert_eq!(
            decide(&first, evaluation("echo", &[], None)).await,
            Decision::unavailable("no")
        );
        assert_eq!(
            decide(&first, evaluation("admin", &["mcp:admin"], None)).await,
            Decision::Allow
        );
        let nobody = first_match(Vec::new());
        assert_eq!(
            decide(&nobody, evaluation("echo", &[], None)).await,
            Decision::Abstain
        );
        assert!(first_match([Box::new(allow_all()) as Box<dyn Policy>]).is_open());
        assert!(
            !all_of([
                Box::new(allow_all()) as Box<dyn Policy>,
                Box::new(deny_all("x"))
            ])
            .is_open()
        );
    }

    #[tokio::test]
    async fn allow_all_and_destructive_tools() {
        let destructive = || Some(json!({"destructiveHint": true}));
        assert!(matches!(
            decide(&allow_all(), evaluation("rm", &[], destructive())).await,
            Decision::Deny(_)
        ));
        assert_eq!(
            decide(
                &allow_all().including_destructive(),
                evaluation("rm", &[], destructive())
            )
            .await,
            Decision::Allow
        );
        assert_eq!(
            decide(
                &allow_all(),
                evaluation("ls", &[], Some(json!({"readOnlyHint": true})))
            )
            .await,
            Decision::Allow
        );
        assert!(allow_all().is_open());
        assert!(!deny_all("x").is_open());
    }
}
