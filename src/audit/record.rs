//! [`AuditRecord`]: one decision, as the audit trail keeps it.
//!
//! A CloudEvents 1.0 event in its JSON form (`specversion`, `id`, `source`, `type`, `time`,
//! `datacontenttype`, `dataschema`) whose `data` is an [`AuditData`]. The JSON Schema is
//! `schemas/audit-record.v1.json`; a change that removes or renames a field is a new schema
//! version (`v2`), a new `dataschema` and a new `type`.

use serde::Serialize;

use crate::auth::Principal;
use crate::judge::{DecisionEvent, RequestId, micros};
use crate::mcp::{CompletionReference, Target};
use crate::policy::Explanation;

/// The `dataschema` of every record this version writes: the JSON Schema's `$id`.
pub const SCHEMA_URI: &str =
    "https://github.com/mcp-gate/mcp-gate/blob/main/schemas/audit-record.v1.json";

/// The CloudEvents `type` of a decision's record.
const DECISION_TYPE: &str = "dev.mcp-gate.decision.v1";
/// The CloudEvents `type` of the record of a request authentication refused.
const AUTHENTICATION_TYPE: &str = "dev.mcp-gate.authentication.v1";

/// The longest target name or URI a record keeps, in bytes; longer ones are cut (on a
/// character boundary) and marked `truncated`.
const MAX_TARGET_BYTES: usize = 256;

/// One audit record: a CloudEvents 1.0 envelope around the decision's [`AuditData`].
#[derive(Clone, Debug, Serialize)]
pub struct AuditRecord {
    specversion: &'static str,
    id: String,
    source: String,
    #[serde(rename = "type")]
    kind: &'static str,
    time: String,
    datacontenttype: &'static str,
    dataschema: &'static str,
    data: AuditData,
}

/// What a record says about one decision. Closed words are the decision log's
/// (`mcp_gate::decision`); ids are the layer's own or the token's.
#[derive(Clone, Debug, Serialize)]
#[non_exhaustive]
pub struct AuditData {
    /// The HTTP request's id (32 hex digits, the layer's own): every decision of one request
    /// shares it.
    pub request_id: String,
    /// `invocation`, `discovery` (one listed entry), `approval` (a held call, re-judged before
    /// it runs), or `authentication` (a request refused before any decision).
    pub phase: &'static str,
    /// `allow`, `ask`, `deny`, `abstain`, or `refused` (the layer refused: see `refusal`).
    pub decision: &'static str,
    /// Who asked, from the verified token; absent on an authentication refusal.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub principal: Option<AuditPrincipal>,
    /// The JSON-RPC method (`other` outside the method table); absent on an authentication
    /// refusal.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub method: Option<&'static str>,
    /// What the method acts on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<AuditTarget>,
    /// The remedy's kind (`scope`, `credential`, `url`, `task`, `unavailable`, `undisclosed`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remediation: Option<&'static str>,
    /// How the answer was said (`scope`, `credential`, `undisclosed`, `task`, `confirmed`,
    /// `shown`, `hidden`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expressed_as: Option<&'static str>,
    /// The `authorizationContextId` the client received.
    #[serde(
        rename = "authorizationContextId",
        skip_serializing_if = "Option::is_none"
    )]
    pub authorization_context_id: Option<String>,
    /// The held call's task.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// Why the layer refused: a decision it could not make (`error`, `panic`, `timeout`,
    /// `unusable_remediation`, `no_randomness`, `limit_store`), or the authentication
    /// failure's reason code.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refusal: Option<&'static str>,
    /// The HTTP status of an authentication refusal.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// The scope of the rate limit a `limited` call was past (`principal`, `principal_tool`,
    /// `client`, `tool`), or `concurrency` for the limit on a principal's calls in flight.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit_scope: Option<&'static str>,
    /// What the policy said decided it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<AuditPolicy>,
    /// What a shadow policy ruled on the same question.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shadow: Option<AuditShadow>,
    /// Microseconds from the question to the answer said.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_us: Option<u64>,
    /// Of them, the policy's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy_latency_us: Option<u64>,
}

/// The caller, as its verified token names it.
#[derive(Clone, Debug, Serialize)]
#[non_exhaustive]
pub struct AuditPrincipal {
    /// The token's issuer.
    pub issuer: String,
    /// The token's subject, when it names one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// The OAuth client, when the token names one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
}

/// What a method acts on: its kind, and its name or URI as the request or listing gave it.
#[derive(Clone, Debug, Serialize)]
#[non_exhaustive]
pub struct AuditTarget {
    /// `tool`, `resource`, `prompt`, `completion`, `task`, `skill`, `other` or `none`.
    pub kind: &'static str,
    /// The tool or prompt name, the resource or skill URI, or the task id; at most 256 bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Whether `name` was cut at 256 bytes.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

/// What a policy said decided: the rule set's version and the ids of the deciding rules.
#[derive(Clone, Debug, Serialize)]
#[non_exhaustive]
pub struct AuditPolicy {
    /// The rule set's version (for Cedar, a digest of its files).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The ids of the rules that determined the decision.
    pub determining: Vec<String>,
}

/// A shadow policy's ruling on the same question, never acted on.
#[derive(Clone, Debug, Serialize)]
#[non_exhaustive]
pub struct AuditShadow {
    /// Its decision, in the words of `decision`.
    pub decision: &'static str,
    /// Its remedy's kind.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remediation: Option<&'static str>,
    /// What the live policy ruled, before the phase said it (a confirmed `ask` is said
    /// `allow`, say): what the shadow is compared with.
    pub live_decision: &'static str,
    /// The live policy's remedy kind.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub live_remediation: Option<&'static str>,
    /// Whether it differs from the live policy's ruling (decision or remedy kind).
    pub differs: bool,
    /// What it said decided.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<AuditPolicy>,
}

impl AuditRecord {
    /// The record of one decision, from the gate serving `source` (its resource URI).
    pub(crate) fn decision(source: &str, event: &DecisionEvent<'_>) -> Self {
        let said = event.said;
        let data = AuditData {
            request_id: event.request.to_string(),
            phase: event.phase(),
            decision: said.decision.as_str(),
            principal: Some(AuditPrincipal::of(event.principal)),
            method: Some(crate::mcp::method_label(event.method)),
            target: Some(AuditTarget::of(event.target)),
            remediation: said.remediation.map(|r| r.as_str()),
            expressed_as: said.expressed_as.map(|e| e.as_str()),
            authorization_context_id: said.context_id.clone(),
            task_id: said.task_id.clone(),
            refusal: said.refusal.as_ref().map(|r| r.as_str()),
            status: None,
            limit_scope: said.limit.map(|scope| scope.as_str()),
            policy: event.explanation.map(AuditPolicy::of),
            shadow: event.shadow.as_ref().map(|shadow| AuditShadow {
                decision: shadow.verdict.decision.as_str(),
                remediation: shadow.verdict.remediation.map(|r| r.as_str()),
                live_decision: event.live.decision.as_str(),
                live_remediation: event.live.remediation.map(|r| r.as_str()),
                differs: shadow.verdict != event.live,
                policy: shadow.explanation.map(AuditPolicy::of),
            }),
            latency_us: Some(micros(event.latency)),
            policy_latency_us: Some(micros(event.policy_time)),
        };
        Self::new(source, DECISION_TYPE, data)
    }

    /// The record of a request refused by authentication: its reason code and HTTP status.
    pub(crate) fn authentication(source: &str, reason: &'static str, status: u16) -> Self {
        let data = AuditData {
            request_id: RequestId::next().to_string(),
            phase: "authentication",
            decision: "refused",
            principal: None,
            method: None,
            target: None,
            remediation: None,
            expressed_as: None,
            authorization_context_id: None,
            task_id: None,
            refusal: Some(reason),
            status: Some(status),
            limit_scope: None,
            policy: None,
            shadow: None,
            latency_us: None,
            policy_latency_us: None,
        };
        Self::new(source, AUTHENTICATION_TYPE, data)
    }

    fn new(source: &str, kind: &'static str, data: AuditData) -> Self {
        Self {
            specversion: "1.0",
            // Unique per source: a fresh id of the same kind as the request's.
            id: RequestId::next().to_string(),
            source: source.to_owned(),
            kind,
            time: crate::clock::rfc3339_ms(crate::clock::now_ms()),
            datacontenttype: "application/json",
            dataschema: SCHEMA_URI,
            data,
        }
    }

    /// The record's id (CloudEvents `id`): unique among the records of its source.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The CloudEvents `type`: `dev.mcp-gate.decision.v1` or
    /// `dev.mcp-gate.authentication.v1`.
    pub fn kind(&self) -> &str {
        self.kind
    }

    /// When the record was written, RFC 3339 UTC with milliseconds.
    pub fn time(&self) -> &str {
        &self.time
    }

    /// The decision's fields.
    pub fn data(&self) -> &AuditData {
        &self.data
    }

    /// The record as one line of JSON (no line end).
    pub fn to_json(&self) -> String {
        // Every field is a string, a number, a boolean or a list of strings: it serializes.
        serde_json::to_string(self).unwrap_or_default()
    }
}

impl AuditPrincipal {
    fn of(principal: &Principal) -> Self {
        Self {
            issuer: principal.issuer().to_owned(),
            subject: principal.subject().map(str::to_owned),
            client_id: principal.client_id().map(str::to_owned),
        }
    }
}

impl AuditTarget {
    fn of(target: &Target) -> Self {
        let name = match target {
            Target::Tool { name, .. } | Target::Prompt { name, .. } => Some(name.as_str()),
            Target::Resource { uri } | Target::Skill { uri } => Some(uri.as_str()),
            Target::Completion { reference, .. } => Some(match reference {
                CompletionReference::Prompt { name } => name.as_str(),
                CompletionReference::Resource { uri } => uri.as_str(),
            }),
            Target::Task { task_id } => Some(task_id.as_str()),
            _ => None,
        };
        let (name, truncated) = match name {
            Some(name) => {
                let kept = cut(name, MAX_TARGET_BYTES);
                (Some(kept.to_owned()), kept.len() < name.len())
            }
            None => (None, false),
        };
        Self {
            kind: target.kind(),
            name,
            truncated,
        }
    }
}

impl AuditPolicy {
    fn of(explanation: &Explanation) -> Self {
        Self {
            version: explanation.set_version().map(str::to_owned),
            determining: explanation.determining().to_vec(),
        }
    }
}

/// The longest prefix of `text` of at most `max` bytes that ends on a character boundary.
fn cut(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_names_are_cut_on_a_character_boundary() {
        let name = "é".repeat(200);
        let target = AuditTarget::of(&Target::Resource { uri: name });
        let kept = target.name.expect("a name");
        assert!(kept.len() <= MAX_TARGET_BYTES);
        assert!(kept.chars().all(|c| c == 'é'));
        assert!(target.truncated);
    }

    #[test]
    fn an_authentication_record_is_a_cloudevent() {
        let record = AuditRecord::authentication("https://mcp.example/mcp", "invalid_token", 401);
        let json: serde_json::Value = serde_json::from_str(&record.to_json()).expect("JSON");
        assert_eq!(json["specversion"], "1.0");
        assert_eq!(json["type"], AUTHENTICATION_TYPE);
        assert_eq!(json["dataschema"], SCHEMA_URI);
        assert_eq!(json["data"]["refusal"], "invalid_token");
        assert_eq!(json["data"]["status"], 401);
        assert!(json["data"].get("principal").is_none());
    }
}
