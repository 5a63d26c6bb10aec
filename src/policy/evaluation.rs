//! [`Evaluation`]: everything `evaluate` is told about one request.
//!
//! It holds the verified principal, the method, the target with a snapshot of its arguments
//! (the same values the inner server will receive), the protocol era and version, the client's
//! declared capabilities and the phase. It deliberately holds nothing else: not the token, not
//! the raw `_meta` (so a client cannot steer the policy through `_meta` fields the policy might
//! mistake for facts), not the echoed `authorizationContextId` (a client echo is never
//! authority), and not the gateway's own continuation state.

use std::borrow::Cow;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::answered::Answered;
use crate::auth::Principal;
use crate::mcp::{ClientCapabilities, Era, ProtocolContext, Target};

/// Why `evaluate` is being asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Phase {
    /// The client is invoking the operation (first attempt or retry).
    Invocation,
    /// The client is listing (`tools/list`, `prompts/list`, `resources/list`,
    /// `resources/templates/list`): the target is one entry of the inner server's answer, and
    /// anything but `Allow` hides it.
    Discovery,
    /// A call held by an approval task was approved out of band, and is about to run:
    /// [`Evaluation::approval`] says which task and who approved. Only `Allow` runs it; any
    /// other decision completes the task as refused (`unavailable`).
    Approval,
}

/// The out-of-band approval of a held call, shown to `evaluate` before the call runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Approval {
    /// The task that held the call.
    pub task_id: String,
    /// Who approved it, as the approver recorded it.
    pub approved_by: String,
}

/// The context handed to `evaluate`. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Evaluation(Arc<EvaluationData>);

#[derive(Debug)]
struct EvaluationData {
    principal: Principal,
    method: Cow<'static, str>,
    target: Target,
    protocol: ProtocolContext,
    phase: Phase,
    answered: Option<Answered>,
    annotations: Option<Arc<serde_json::Value>>,
    approval: Option<Approval>,
}

impl Evaluation {
    pub(crate) fn new(
        principal: Principal,
        method: Cow<'static, str>,
        target: Target,
        protocol: ProtocolContext,
        phase: Phase,
        answered: Option<Answered>,
        annotations: Option<Arc<serde_json::Value>>,
    ) -> Self {
        Self(Arc::new(EvaluationData {
            principal,
            method,
            target,
            protocol,
            phase,
            answered,
            annotations,
            approval: None,
        }))
    }

    /// The evaluation of a held `tools/call` that was approved (phase [`Phase::Approval`]).
    pub(crate) fn approved(
        principal: Principal,
        target: Target,
        protocol: ProtocolContext,
        annotations: Option<Arc<serde_json::Value>>,
        approval: Approval,
    ) -> Self {
        Self(Arc::new(EvaluationData {
            principal,
            method: Cow::Borrowed("tools/call"),
            target,
            protocol,
            phase: Phase::Approval,
            answered: None,
            annotations,
            approval: Some(approval),
        }))
    }

    /// The verified caller.
    pub fn principal(&self) -> &Principal {
        &self.0.principal
    }

    /// The JSON-RPC method (`tools/call`, `resources/read`, ...).
    pub fn method(&self) -> &str {
        &self.0.method
    }

    /// What the operation acts on.
    pub fn target(&self) -> &Target {
        &self.0.target
    }

    /// The tool name, for `tools/call`.
    pub fn tool(&self) -> Option<&str> {
        match &self.0.target {
            Target::Tool { name, .. } => Some(name),
            _ => None,
        }
    }

    /// The arguments of a tool call or prompt, as the inner server will receive them.
    pub fn arguments(&self) -> Option<&Map<String, Value>> {
        match &self.0.target {
            Target::Tool { arguments, .. } | Target::Prompt { arguments, .. } => Some(arguments),
            _ => None,
        }
    }

    /// Modern or legacy MCP.
    pub fn era(&self) -> Era {
        self.0.protocol.era
    }

    /// The protocol version, when known.
    pub fn protocol_version(&self) -> Option<&str> {
        self.0.protocol.protocol_version.as_deref()
    }

    /// What the client declared it can do, for this request.
    pub fn capabilities(&self) -> &ClientCapabilities {
        &self.0.protocol.capabilities
    }

    /// Why `evaluate` is being asked.
    pub fn phase(&self) -> Phase {
        self.0.phase
    }

    /// The tool's `annotations` as the inner server last listed them (`tools/list`), if any
    /// list passed through the layer since it started. Hints from the server, not facts.
    pub fn tool_annotations(&self) -> Option<&serde_json::Value> {
        self.0.annotations.as_deref()
    }

    /// Whether the tool's annotations mark it destructive (`destructiveHint: true`).
    pub fn is_destructive_tool(&self) -> bool {
        self.tool_annotations()
            .and_then(|a| a.get("destructiveHint"))
            .and_then(serde_json::Value::as_bool)
            .unwrap_or(false)
    }

    /// On a retry that answers the layer's own URL approval or confirmation request: which
    /// one, and how it was answered. `None` on a first attempt, and whenever the client sent
    /// no valid gateway state.
    pub fn answered(&self) -> Option<&Answered> {
        self.0.answered.as_ref()
    }

    /// For phase [`Phase::Approval`]: the task that held this call and who approved it.
    /// `None` otherwise. Set by the layer from its own task store, never from the request.
    pub fn approval(&self) -> Option<&Approval> {
        self.0.approval.as_ref()
    }
}
