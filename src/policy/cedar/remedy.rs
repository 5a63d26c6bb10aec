//! Which SEP-2643 remediation a Cedar denial carries: read from annotations on the `forbid`
//! policies that matched, compiled once at load.
//!
//! | annotation | meaning |
//! |---|---|
//! | `@remediation("scopes")` + `@scopes("a b")` | a token with these scopes (every matching scopes forbid adds its own) |
//! | `@remediation("credential")` + `@authorization_details("[…]")` (JSON, its quotes escaped as Cedar strings need) | a credential for exactly this call (JSON template) |
//! | `@remediation("url")` + `@url("…")` | approve at a URL (URL template) |
//! | `@remediation("task")` | hold the call until someone approves it |
//! | `@remediation("ask")` | ask the user to confirm |
//! | `@remediation("unavailable")` | never allowed |
//! | `@remediation("undisclosed")`, or no `@remediation` | denied, no remedy said |
//! | `@message("…")` | the text shown (text template) |
//!
//! When several annotated forbids match, the most final wins: `unavailable`, then
//! `undisclosed`, then `scopes`, `credential`, `url`, `task`, `ask` (a remedy is offered only
//! when nothing forbids the call for good, and a new token comes before an approval that would
//! have to be asked for again with it). Among forbids of the same kind, the one whose policy id
//! sorts first gives the message and template; scopes are the union of all.
//!
//! A denial that no forbid explains (no permit matched) is `undisclosed`, unless one policy of
//! the set carries `@default_remediation("unavailable")` (or `"undisclosed"`) and, optionally,
//! `@default_message("…")`.

use std::collections::BTreeMap;

use cedar_policy::{Effect, PolicyId, PolicySet};
use serde_json::Value;

use super::template::{JsonTemplate, TemplateError, TextTemplate, UrlTemplate};
use crate::policy::{Decision, Remediation};

/// What a remedy asks for, in the order of precedence (the first wins).
#[derive(Debug, Clone, PartialEq)]
enum Kind {
    Unavailable,
    Undisclosed,
    Scopes(Vec<String>),
    Credential(JsonTemplate),
    Url(UrlTemplate),
    Task,
    Ask,
}

impl Kind {
    fn rank(&self) -> u8 {
        match self {
            Kind::Unavailable => 0,
            Kind::Undisclosed => 1,
            Kind::Scopes(_) => 2,
            Kind::Credential(_) => 3,
            Kind::Url(_) => 4,
            Kind::Task => 5,
            Kind::Ask => 6,
        }
    }
}

/// One forbid's remedy.
#[derive(Debug, Clone, PartialEq)]
struct Remedy {
    kind: Kind,
    message: Option<TextTemplate>,
}

/// Why a policy's annotations were refused at load.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum AnnotationError {
    /// `@remediation` names no kind this crate knows.
    #[error(
        "unknown @remediation({0:?}): expected scopes, credential, url, task, ask, unavailable or undisclosed"
    )]
    UnknownKind(String),
    /// A kind that needs a second annotation lacks it.
    #[error("@remediation({kind:?}) needs @{needs}")]
    Missing {
        /// The kind.
        kind: &'static str,
        /// The annotation it needs.
        needs: &'static str,
    },
    /// `@scopes` with no scope, or with a character RFC 6749 does not allow in a scope.
    #[error("@scopes({0:?}) must list scopes separated by spaces")]
    BadScopes(String),
    /// A remediation annotation on a `permit`, where it would never apply.
    #[error("@{0} on a permit policy: remedies belong on forbid policies")]
    OnPermit(&'static str),
    /// More than one policy declares the default denial.
    #[error("@default_remediation is declared by more than one policy")]
    TwoDefaults,
    /// `@default_remediation` is not `unavailable` or `undisclosed`.
    #[error("@default_remediation({0:?}): expected unavailable or undisclosed")]
    BadDefault(String),
    /// A template is unusable.
    #[error("@{annotation}: {error}")]
    Template {
        /// Which annotation.
        annotation: &'static str,
        /// Why.
        error: TemplateError,
    },
    /// `@rate_limit` is not a rate (`10/minute`, `5/s burst 2`).
    #[error("@rate_limit({text:?}): {error}")]
    BadRate {
        /// The annotation's text.
        text: String,
        /// Why it is not a rate.
        error: crate::limit::RateError,
    },
    /// `@rate_limit_per` names no scope.
    #[error("@rate_limit_per({0:?}): expected principal, principal_tool, client or tool")]
    BadLimitScope(String),
    /// `@rate_limit_per` without `@rate_limit`.
    #[error("@rate_limit_per needs @rate_limit")]
    ScopeWithoutRate,
    /// A rate limit on a `forbid`, where it would never apply (a forbidden call does not run).
    #[error("@rate_limit on a forbid policy: rate limits belong on permit policies")]
    LimitOnForbid,
}

/// The annotations this module reads.
const REMEDY_KEYS: [&str; 5] = [
    "remediation",
    "scopes",
    "authorization_details",
    "url",
    "message",
];

/// Remedies by forbid policy id, and the default denial.
#[derive(Debug, Clone)]
pub(super) struct Remedies {
    by_policy: BTreeMap<PolicyId, Remedy>,
    default: Remedy,
}

/// A template error named after its annotation.
fn template<T>(
    annotation: &'static str,
    parsed: Result<T, TemplateError>,
) -> Result<T, AnnotationError> {
    parsed.map_err(|error| AnnotationError::Template { annotation, error })
}

fn scopes(text: &str) -> Result<Vec<String>, AnnotationError> {
    let scopes: Vec<String> = text
        .split(' ')
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    // RFC 6749 §3.3: %x21 / %x23-5B / %x5D-7E.
    let legal = |c: char| c == '!' || ('#'..='[').contains(&c) || (']'..='~').contains(&c);
    if scopes.is_empty() || scopes.iter().any(|s| !s.chars().all(legal)) {
        return Err(AnnotationError::BadScopes(text.to_owned()));
    }
    Ok(scopes)
}

/// Reads one forbid's annotations (`annotation` looks one up by key).
fn read_remedy<'a>(
    annotation: impl Fn(&str) -> Option<&'a str>,
) -> Result<Remedy, AnnotationError> {
    let message = annotation("message")
        .map(|text| template("message", TextTemplate::parse(text)))
        .transpose()?;
    let needs = |kind: &'static str, needs: &'static str| {
        annotation(needs).ok_or(AnnotationError::Missing { kind, needs })
    };
    let kind = match annotation("remediation") {
        None | Some("undisclosed") => Kind::Undisclosed,
        Some("unavailable") => Kind::Unavailable,
        Some("scopes" | "scope") => Kind::Scopes(scopes(needs("scopes", "scopes")?)?),
        Some("credential") => Kind::Credential(template(
            "authorization_details",
            JsonTemplate::parse(needs("credential", "authorization_details")?),
        )?),
        Some("url") => Kind::Url(template("url", UrlTemplate::parse(needs("url", "url")?))?),
        Some("task") => Kind::Task,
        Some("ask") => Kind::Ask,
        Some(other) => return Err(AnnotationError::UnknownKind(other.to_owned())),
    };
    Ok(Remedy { kind, message })
}

impl Remedies {
    /// Compiles the remedies of every policy in `set`; the error names the policy.
    pub fn compile(set: &PolicySet) -> Result<Self, (PolicyId, AnnotationError)> {
        let mut by_policy = BTreeMap::new();
        let mut default: Option<(PolicyId, Remedy)> = None;
        for policy in set.policies() {
            let id = policy.id().clone();
            let fail = |error| (id.clone(), error);
            if let Some(kind) = policy.annotation("default_remediation") {
                if default.is_some() {
                    return Err(fail(AnnotationError::TwoDefaults));
                }
                let kind = match kind {
                    "unavailable" => Kind::Unavailable,
                    "undisclosed" => Kind::Undisclosed,
                    other => return Err(fail(AnnotationError::BadDefault(other.to_owned()))),
                };
                let message = policy
                    .annotation("default_message")
                    .map(|text| template("default_message", TextTemplate::parse(text)))
                    .transpose()
                    .map_err(fail)?;
                default = Some((id.clone(), Remedy { kind, message }));
            }
            match policy.effect() {
                Effect::Forbid => {
                    let remedy = read_remedy(|key| policy.annotation(key)).map_err(fail)?;
                    by_policy.insert(id, remedy);
                }
                Effect::Permit => {
                    if let Some(key) = REMEDY_KEYS.iter().find(|k| policy.annotation(k).is_some()) {
                        return Err(fail(AnnotationError::OnPermit(key)));
                    }
                }
            }
        }
        let default = default.map(|(_, remedy)| remedy).unwrap_or(Remedy {
            kind: Kind::Undisclosed,
            message: None,
        });
        Ok(Self { by_policy, default })
    }

    /// The decision for a denial whose determining policies are `reasons`, with templates
    /// filled from `scope` (`{"context": …, "principal": …}`). A URL template that yields no
    /// URL turns the denial into `undisclosed` (and says why in the returned note).
    pub fn decide<'a>(
        &self,
        reasons: impl Iterator<Item = &'a PolicyId>,
        scope: &Value,
    ) -> (Decision, Option<&'static str>) {
        let mut matched: Vec<(&PolicyId, &Remedy)> = reasons
            .filter_map(|id| self.by_policy.get_key_value(id))
            .collect();
        matched.sort_by(|(a_id, a), (b_id, b)| {
            let key = |rank: u8, id: &PolicyId| (rank, AsRef::<str>::as_ref(id).to_owned());
            key(a.kind.rank(), a_id).cmp(&key(b.kind.rank(), b_id))
        });
        let remedy = matched.first().map_or(&self.default, |(_, remedy)| remedy);
        let message = |fallback: &str| {
            remedy
                .message
                .as_ref()
                .map_or_else(|| fallback.to_owned(), |m| m.fill(scope))
        };
        let decision = match &remedy.kind {
            Kind::Unavailable => Decision::unavailable(message("This operation is not available.")),
            Kind::Undisclosed => Decision::undisclosed(message("You are not allowed to do this.")),
            Kind::Scopes(_) => {
                let mut all: Vec<String> = Vec::new();
                for (_, other) in &matched {
                    if let Kind::Scopes(scopes) = &other.kind {
                        for scope in scopes {
                            if !all.contains(scope) {
                                all.push(scope.clone());
                            }
                        }
                    }
                }
                Decision::scopes(all)
            }
            Kind::Credential(details) => {
                let details = match details.fill(scope) {
                    Value::Array(items) => items,
                    single => vec![single],
                };
                let remediation = Remediation::credential(details);
                match &remedy.message {
                    Some(text) => remediation.message(text.fill(scope)).into(),
                    None => remediation.into(),
                }
            }
            Kind::Url(url) => match url.fill(scope) {
                Ok(url) => Decision::url(url, message("Approve this request, then try again.")),
                Err(_) => {
                    return (
                        Decision::undisclosed(message("You are not allowed to do this.")),
                        Some("the @url template gave no usable URL"),
                    );
                }
            },
            Kind::Task => Decision::task(message("This operation needs an approval.")),
            Kind::Ask => Decision::ask(message("Do you want to do this?")),
        };
        (decision, None)
    }
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    use serde_json::json;

    use super::*;

    fn set(text: &str) -> PolicySet {
        PolicySet::from_str(text).expect("policies parse")
    }

    fn ids(names: &[&str]) -> Vec<PolicyId> {
        names.iter().map(|n| PolicyId::new(*n)).collect()
    }

    const SET: &str = r#"
        @remediation("scopes") @scopes("mcp:admin")
        forbid(principal, action, resource);
        @remediation("scopes") @scopes("mcp:audit mcp:admin")
        forbid(principal, action, resource);
        @remediation("ask") @message("Delete {context.input.path}?")
        forbid(principal, action, resource);
        @remediation("unavailable") @message("Never.")
        forbid(principal, action, resource);
        forbid(principal, action, resource);
        @remediation("url") @url("https://app.example/approve/{context.input.path}")
        forbid(principal, action, resource);
        @remediation("credential") @authorization_details("[{\"type\":\"pay\",\"amount\":\"{context.input.amount}\"}]") @message("Pay?")
        forbid(principal, action, resource);
        @remediation("task") @message("Waiting for {principal.subject}.")
        forbid(principal, action, resource);
        permit(principal, action, resource);
    "#;

    fn scope() -> Value {
        json!({"context": {"input": {"path": "a b/c", "amount": 7}}, "principal": {"subject": "bob"}})
    }

    #[test]
    fn precedence_and_scope_union() {
        let remedies = Remedies::compile(&set(SET)).expect("compiles");
        let decide = |names: &[&str]| remedies.decide(ids(names).iter(), &scope()).0;
        assert_eq!(
            decide(&["policy0", "policy2", "policy3"]),
            Decision::unavailable("Never.")
        );
        assert_eq!(
            decide(&["policy2", "policy4", "policy0"]),
            Decision::undisclosed("You are not allowed to do this."),
            "an unannotated forbid is undisclosed, and beats a remedy"
        );
        assert_eq!(
            decide(&["policy2", "policy1", "policy0"]),
            Decision::scopes(["mcp:admin", "mcp:audit"]),
            "scopes of every matching forbid, in policy order"
        );
        assert_eq!(decide(&["policy2"]), Decision::ask("Delete a b/c?"));
        assert_eq!(
            decide(&["policy5", "policy7"]),
            Decision::url(
                "https://app.example/approve/a%20b%2Fc",
                "Approve this request, then try again."
            )
        );
        assert_eq!(
            decide(&["policy7", "policy6"]),
            Remediation::credential([json!({"type": "pay", "amount": 7})])
                .message("Pay?")
                .into()
        );
        assert_eq!(decide(&["policy7"]), Decision::task("Waiting for bob."));
        assert_eq!(
            decide(&[]),
            Decision::undisclosed("You are not allowed to do this.")
        );
        assert_eq!(
            decide(&["policy8"]),
            Decision::undisclosed("You are not allowed to do this."),
            "a permit id explains nothing"
        );
    }

    #[test]
    fn default_declared_in_the_set() {
        let remedies = Remedies::compile(&set(
            r#"@default_remediation("unavailable") @default_message("Not here.") permit(principal, action, resource) when { false };"#,
        ))
        .expect("compiles");
        assert_eq!(
            remedies.decide(std::iter::empty(), &scope()).0,
            Decision::unavailable("Not here.")
        );
    }

    #[test]
    fn refused_annotations_name_the_policy() {
        let refused = |text: &str| {
            Remedies::compile(&set(text))
                .err()
                .map(|(id, e)| (id.to_string(), e))
        };
        assert_eq!(
            refused(r#"@remediation("maybe") forbid(principal, action, resource);"#),
            Some((
                "policy0".into(),
                AnnotationError::UnknownKind("maybe".into())
            ))
        );
        assert_eq!(
            refused(
                r#"permit(principal, action, resource); @remediation("url") forbid(principal, action, resource);"#
            ),
            Some((
                "policy1".into(),
                AnnotationError::Missing {
                    kind: "url",
                    needs: "url"
                }
            ))
        );
        assert!(matches!(
            refused(
                r#"@remediation("scopes") @scopes("a\"b") forbid(principal, action, resource);"#
            ),
            Some((_, AnnotationError::BadScopes(_)))
        ));
        assert_eq!(
            refused(r#"@remediation("ask") permit(principal, action, resource);"#),
            Some(("policy0".into(), AnnotationError::OnPermit("remediation")))
        );
        assert!(matches!(
            refused(
                r#"@remediation("url") @url("https://{context.input.host}/") forbid(principal, action, resource);"#
            ),
            Some((
                _,
                AnnotationError::Template {
                    annotation: "url",
                    ..
                }
            ))
        ));
        assert_eq!(
            refused(r#"@default_remediation("ask") forbid(principal, action, resource);"#),
            Some(("policy0".into(), AnnotationError::BadDefault("ask".into())))
        );
        assert_eq!(
            refused(
                r#"@default_remediation("unavailable") forbid(principal, action, resource); @default_remediation("undisclosed") forbid(principal, action, resource);"#
            ),
            Some(("policy1".into(), AnnotationError::TwoDefaults))
        );
    }
}
