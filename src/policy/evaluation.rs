//! [`Evaluation`]: everything `evaluate` is told about one request.
//!
//! It holds the verified principal, the method, the target with a snapshot of its arguments
//! (the same values the inner server will receive), the protocol era and version, the client's
//! declared capabilities and the phase. It deliberately holds nothing else: not the token, not
//! the raw `_meta` (so a client cannot steer the policy through `_meta` fields the policy might
//! mistake for facts), not the echoed `authorizationContextId` (a client echo is never
//! authority), and not the gateway's own continuation state.
//!
//! [`Evaluation::builder`] makes one by hand, to unit-test a policy; it refuses combinations
//! the layer never produces (see [`EvaluationBuilder`]).

use std::borrow::Cow;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::answered::Interaction;
use super::answered::{Answered, InputAction};
use crate::auth::Principal;
use crate::mcp::annotations::ListedTool;
use crate::mcp::{
    ClientCapabilities, CompletionReference, EntryKind, Era, METHODS, MODERN_VERSIONS, MethodClass,
    ProtocolContext, SUPPORTED_VERSIONS, Target, method_class,
};

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

impl Phase {
    /// The phase as the decision log and the `mcp_gate::policy` span name it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Invocation => "invocation",
            Self::Discovery => "discovery",
            Self::Approval => "approval",
        }
    }
}

/// The out-of-band approval of a held call, shown to `evaluate` before the call runs.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Approval {
    /// The task that held the call.
    pub task_id: String,
    /// Who approved it, as the approver recorded it.
    pub approved_by: String,
}

/// The context handed to `evaluate`. Cheap to clone.
///
/// The layer makes one for every question it asks the policy. [`Evaluation::builder`] makes
/// one by hand, for tests and for code that calls a policy itself; the layer never takes an
/// `Evaluation` from outside.
#[derive(Clone, Debug)]
pub struct Evaluation(pub(super) Arc<EvaluationData>);

/// What an [`Evaluation`] holds: the layer fills it in, field by field, for each question it
/// asks the policy.
#[derive(Clone, Debug)]
pub(crate) struct EvaluationData {
    pub(crate) principal: Principal,
    pub(crate) method: Cow<'static, str>,
    pub(crate) target: Target,
    pub(crate) protocol: Protocol,
    pub(crate) phase: Phase,
    pub(crate) answered: Option<Answered>,
    pub(crate) listed: Option<Arc<ListedTool>>,
    pub(crate) approval: Option<Approval>,
    /// What the policy said decided it ([`Evaluation::explain`]); empty until then.
    pub(crate) explained: std::sync::OnceLock<super::Explanation>,
    /// The rate limits the policy named for this call ([`Evaluation::limit`]).
    pub(crate) limits: NamedLimits,
    /// The client's address, when the server knows it ([`Evaluation::client_address`]).
    pub(crate) client: Option<std::net::SocketAddr>,
    /// The request extensions the builder asked to show ([`Evaluation::extension`]).
    pub(crate) extensions: http::Extensions,
}

/// The protocol of the request an evaluation is about, as the evaluation keeps it: a version
/// the layer supports is the version table's own `'static` text, so making an evaluation
/// (once per call and once per listed entry) copies no string for it.
#[derive(Debug, Clone)]
pub(crate) struct Protocol {
    pub(crate) era: Era,
    pub(crate) version: Option<Cow<'static, str>>,
    pub(crate) capabilities: ClientCapabilities,
}

impl Protocol {
    /// The protocol of a request's context.
    pub(crate) fn of(context: &ProtocolContext) -> Self {
        let version = context.protocol_version.as_deref();
        Self {
            era: context.era,
            version: version.map(|version| match supported(version) {
                Some(known) => Cow::Borrowed(known),
                None => Cow::Owned(version.to_owned()),
            }),
            capabilities: context.capabilities.clone(),
        }
    }

    /// As [`Protocol::of`], taking the context: a version the layer does not support is
    /// moved, not copied.
    pub(crate) fn owned(context: ProtocolContext) -> Self {
        Self {
            era: context.era,
            version: context
                .protocol_version
                .map(|version| match supported(&version) {
                    Some(known) => Cow::Borrowed(known),
                    None => Cow::Owned(version),
                }),
            capabilities: context.capabilities,
        }
    }
}

/// The version table's own text for `version`, when the layer supports it.
fn supported(version: &str) -> Option<&'static str> {
    SUPPORTED_VERSIONS
        .iter()
        .find(|known| **known == version)
        .copied()
}

/// The rate limits a policy named for one call: kept beside the evaluation, read by the judge
/// once the policy has answered.
#[derive(Debug, Default)]
pub(crate) struct NamedLimits(std::sync::Mutex<Vec<crate::limit::Limit>>);

impl Clone for NamedLimits {
    fn clone(&self) -> Self {
        Self(std::sync::Mutex::new(self.taken_copy()))
    }
}

impl NamedLimits {
    /// The limits named so far.
    pub(crate) fn taken_copy(&self) -> Vec<crate::limit::Limit> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn push(&self, limit: crate::limit::Limit) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(limit);
    }
}

impl Evaluation {
    // Inlined: the caller's literal then goes to the heap in one copy, not two.
    #[inline(always)]
    pub(crate) fn new(data: EvaluationData) -> Self {
        Self(Arc::new(data))
    }

    /// A second evaluation of the same question with nothing explained yet: what a shadow
    /// policy is asked, so that its explanation never mixes with the live policy's.
    pub(crate) fn twin(&self) -> Self {
        let mut data = EvaluationData::clone(&self.0);
        data.explained = std::sync::OnceLock::new();
        data.limits = NamedLimits::default();
        Self::new(data)
    }

    /// Starts an evaluation by hand, for `principal`: to unit-test a policy, or to ask one
    /// outside the layer. See [`EvaluationBuilder`] for the defaults and what `build` refuses.
    ///
    /// ```
    /// use mcp_gate::Principal;
    /// use mcp_gate::policy::{Evaluation, Phase};
    /// use serde_json::json;
    ///
    /// let principal = Principal::builder().issuer("https://auth.example.com").build()?;
    /// let evaluation = Evaluation::builder(principal)
    ///     .tool("transfer", json!({"amount": 40}))
    ///     .build()?;
    /// assert_eq!(evaluation.method(), "tools/call");
    /// assert_eq!(evaluation.tool(), Some("transfer"));
    /// assert_eq!(evaluation.arguments().unwrap()["amount"], 40);
    /// assert_eq!(evaluation.phase(), Phase::Invocation);
    /// # Ok::<_, Box<dyn std::error::Error>>(())
    /// ```
    pub fn builder(principal: Principal) -> EvaluationBuilder {
        EvaluationBuilder::new(principal)
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
            Target::Tool { arguments, .. } => Some(arguments),
            Target::Prompt { arguments, .. } => Some(arguments),
            _ => None,
        }
    }

    /// Modern or legacy MCP.
    pub fn era(&self) -> Era {
        self.0.protocol.era
    }

    /// The protocol version, when known.
    pub fn protocol_version(&self) -> Option<&str> {
        self.0.protocol.version.as_deref()
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
        self.0.listed.as_deref().map(|listed| &listed.annotations)
    }

    /// The tool's `inputSchema` as the inner server last listed it (`tools/list`), if any
    /// list that named the tool passed through the layer since it started. A declarative
    /// policy compares it with the schema its rules were written against
    /// (`CedarPolicy`, feature `cedar`, refuses a tool whose listed schema
    /// changed).
    pub fn tool_input_schema(&self) -> Option<&serde_json::Value> {
        self.0.listed.as_deref()?.input_schema.as_ref()
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

    /// The client's address: axum's `ConnectInfo<SocketAddr>` (a server made with
    /// `into_make_service_with_connect_info::<SocketAddr>()`), or a `SocketAddr` extension
    /// another server put on the request. `None` when the server does not say, and for a held
    /// call's approval. Behind a proxy it is the proxy's: a forwarded address is the
    /// application's to trust, through [`extension`](Self::extension).
    pub fn client_address(&self) -> Option<std::net::SocketAddr> {
        self.0.client
    }

    /// A request extension of type `T` that outer middleware set, if the builder asked
    /// `evaluate` to see that type (`GateBuilder::evaluation_extension::<T>()`): a tenant, a
    /// verified forwarded address, a risk score. `None` for any other type, and for a held
    /// call's approval.
    pub fn extension<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.0.extensions.get::<T>()
    }

    /// The limits the policy named for this call.
    pub(crate) fn named_limits(&self) -> Vec<crate::limit::Limit> {
        self.0.limits.taken_copy()
    }

    /// Names a rate limit for this call: if the answer allows it, the call is also counted on
    /// `limit` (beside the builder's limits, which are counted before the policy is asked),
    /// and refused with the limit answer past its rate. A limit for one tool
    /// ([`Limit::for_tool`](crate::limit::Limit::for_tool)) counts only calls of that tool;
    /// call it once per limit. Named on a denial, it counts nothing: the call does not run.
    ///
    /// ```
    /// use mcp_gate::limit::Limit;
    /// use mcp_gate::policy::{Decision, Evaluation};
    ///
    /// fn evaluate(evaluation: &Evaluation) -> Decision {
    ///     if evaluation.tool() == Some("transfer") {
    ///         // `transfer`: 10 a minute per principal.
    ///         evaluation.limit(Limit::per_principal("10/minute".parse().unwrap()).for_tool("transfer"));
    ///     }
    ///     Decision::allow()
    /// }
    /// # let _ = evaluate;
    /// ```
    pub fn limit(&self, limit: crate::limit::Limit) {
        self.0.limits.push(limit);
    }
}

/// Why [`EvaluationBuilder::build`] made no evaluation: the layer never asks `evaluate` such a
/// question, so a test built on it would test nothing real.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EvaluationError {
    /// Tool arguments, prompt arguments, `Target::Other` params or client capabilities that
    /// are not a JSON object (`null` stands for no arguments).
    #[error("{0} must be a JSON object")]
    NotAnObject(&'static str),
    /// A prompt argument that is not a string; the layer refuses such a `prompts/get`.
    #[error("prompt arguments must be strings")]
    PromptArgumentNotString,
    /// No method was given and the target names none (`Target::None`, or a discovery target
    /// that no listing shows).
    #[error("no method: call EvaluationBuilder::method")]
    MissingMethod,
    /// The layer never asks `evaluate` about this method with this target in this phase (see
    /// the [method table](crate::mcp::METHODS)).
    #[error("the layer never evaluates {method:?} with this target in phase {phase:?}")]
    MethodMismatch {
        /// The method.
        method: String,
        /// The phase.
        phase: Phase,
    },
    /// Phase [`Phase::Approval`] without an approval, an approval in another phase, or an
    /// approval on legacy MCP (the layer holds calls only on modern MCP).
    #[error("phase Approval goes with an approval of a tools/call on modern MCP, and only it")]
    ApprovalMismatch,
    /// An answered input request outside what the layer answers: only in phase
    /// [`Phase::Invocation`], on modern MCP, for `tools/call`, `prompts/get` or
    /// `resources/read`, in round 1 or later.
    #[error(
        "an answer to the layer's input request goes only with a modern tools/call, \
         prompts/get or resources/read invocation, in round 1 or later"
    )]
    AnsweredMismatch,
    /// Tool annotations or an input schema on a target that is not a tool.
    #[error("tool annotations and input schemas go only with a tool target")]
    AnnotationsWithoutTool,
    /// A modern protocol version the layer does not serve (see
    /// [`MODERN_VERSIONS`](crate::mcp::MODERN_VERSIONS)).
    #[error("the layer does not serve the modern protocol version {0:?}")]
    UnsupportedVersion(String),
}

/// Builds an [`Evaluation`] by hand; made by [`Evaluation::builder`].
///
/// Set the target with [`tool`](Self::tool), [`prompt`](Self::prompt),
/// [`resource`](Self::resource), [`completion`](Self::completion), [`task`](Self::task),
/// [`skill`](Self::skill), [`other`](Self::other) or [`target`](Self::target); each implies
/// the usual method for its phase (`tools/call`, or `tools/list` in [`Phase::Discovery`], ...),
/// which [`method`](Self::method) overrides. Defaults: no target (`Target::None`, which needs a
/// method), phase [`Phase::Invocation`], modern MCP at the newest version the layer serves with
/// no declared capabilities, no annotations, no answer, no approval.
///
/// [`build`](Self::build) refuses what the layer never produces (an [`EvaluationError`]): a
/// method the layer does not evaluate with that target in that phase, arguments that are not
/// an object, phase [`Phase::Approval`] without [`approval`](Self::approval), and so on. So a
/// policy tested on built evaluations is tested on questions it can really be asked.
///
/// ```
/// use mcp_gate::Principal;
/// use mcp_gate::mcp::Era;
/// use mcp_gate::policy::{Evaluation, InputAction, Phase};
/// use serde_json::json;
///
/// let principal = Principal::builder().issuer("https://auth.example.com").build()?;
///
/// // One entry of a `tools/list` answer, with the annotations the server listed.
/// let listed = Evaluation::builder(principal.clone())
///     .tool("rm", serde_json::Value::Null)
///     .phase(Phase::Discovery)
///     .annotations(json!({"destructiveHint": true}))
///     .build()?;
/// assert_eq!(listed.method(), "tools/list");
/// assert!(listed.is_destructive_tool());
///
/// // A retry that confirms the layer's own question, from a client that declared forms.
/// let confirmed = Evaluation::builder(principal.clone())
///     .tool("deploy", json!({"env": "prod"}))
///     .capabilities(json!({"elicitation": {"form": {}}}))
///     .answered_confirmation(InputAction::Accept, true)
///     .build()?;
/// assert!(confirmed.answered().unwrap().confirmed());
///
/// // A held call, approved out of band.
/// let approved = Evaluation::builder(principal.clone())
///     .tool("deploy", json!({"env": "prod"}))
///     .approval("task-1", "ops@example.com")
///     .build()?;
/// assert_eq!(approved.phase(), Phase::Approval);
///
/// // Legacy MCP, a resource subscription.
/// let legacy = Evaluation::builder(principal.clone())
///     .resource("file:///etc/motd")
///     .method("resources/subscribe")
///     .era(Era::Legacy)
///     .build()?;
/// assert_eq!(legacy.protocol_version(), None);
///
/// // Questions the layer never asks.
/// assert!(Evaluation::builder(principal.clone()).resource("file:///x").method("tools/call").build().is_err());
/// assert!(Evaluation::builder(principal).tool("t", json!(["no"])).build().is_err());
/// # Ok::<_, Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
#[must_use]
pub struct EvaluationBuilder {
    principal: Principal,
    method: Option<String>,
    target: Target,
    phase: Phase,
    /// The era, the version as given (resolved by `build`) and the capabilities.
    protocol: ProtocolContext,
    answered: Option<Answered>,
    round: Option<u32>,
    listed: Option<ListedTool>,
    approval: Option<Approval>,
    /// The first setter that was given something unusable.
    error: Option<EvaluationError>,
}

impl EvaluationBuilder {
    fn new(principal: Principal) -> Self {
        Self {
            principal,
            method: None,
            target: Target::None,
            phase: Phase::Invocation,
            protocol: ProtocolContext {
                era: Era::Modern,
                protocol_version: None,
                capabilities: ClientCapabilities::default(),
            },
            answered: None,
            round: None,
            listed: None,
            approval: None,
            error: None,
        }
    }

    fn fail(&mut self, error: EvaluationError) {
        self.error.get_or_insert(error);
    }

    /// A JSON object, or `null` for an empty one.
    fn object(&mut self, value: Value, what: &'static str) -> Arc<Map<String, Value>> {
        match value {
            Value::Object(map) => Arc::new(map),
            Value::Null => Arc::default(),
            _ => {
                self.fail(EvaluationError::NotAnObject(what));
                Arc::default()
            }
        }
    }

    /// A tool call (`tools/call`), or a listed tool in [`Phase::Discovery`] (`tools/list`,
    /// where `arguments` must be `null` or empty). `arguments` is the JSON object the inner
    /// server would receive, or `null` for none.
    pub fn tool(mut self, name: impl Into<String>, arguments: Value) -> Self {
        let arguments = self.object(arguments, "tool arguments");
        self.target(Target::Tool {
            name: name.into(),
            arguments: arguments.into(),
        })
    }

    /// A prompt (`prompts/get`, or `prompts/list` in discovery); `arguments` is an object of
    /// strings, or `null` for none.
    pub fn prompt(mut self, name: impl Into<String>, arguments: Value) -> Self {
        let arguments = self.object(arguments, "prompt arguments");
        self.target(Target::Prompt {
            name: name.into(),
            arguments,
        })
    }

    /// A resource (`resources/read`, or `resources/list` in discovery). Use
    /// [`method`](Self::method) for `resources/subscribe`, `resources/unsubscribe`,
    /// `subscriptions/listen`, `resources/templates/list` or `resources/directory/read`.
    pub fn resource(self, uri: impl Into<String>) -> Self {
        self.target(Target::Resource { uri: uri.into() })
    }

    /// A completion (`completion/complete`) of `argument` of a prompt or resource template.
    pub fn completion(self, reference: CompletionReference, argument: impl Into<String>) -> Self {
        self.target(Target::Completion {
            reference,
            argument: argument.into(),
        })
    }

    /// A task that is not the layer's own (`tasks/get`; use [`method`](Self::method) for
    /// `tasks/update`, `tasks/cancel` or `tasks/result`).
    pub fn task(self, task_id: impl Into<String>) -> Self {
        self.target(Target::Task {
            task_id: task_id.into(),
        })
    }

    /// A skill (`skills/get`, or `skills/list` in discovery), by the URI of its `SKILL.md`.
    pub fn skill(self, uri: impl Into<String>) -> Self {
        self.target(Target::Skill { uri: uri.into() })
    }

    /// A method outside the [method table](crate::mcp::METHODS), as the layer shows it when
    /// the application opted in (`GateBuilder::evaluate_unknown_methods`): `params` is a JSON
    /// object, or `null` for none.
    pub fn other(mut self, method: impl Into<String>, params: Value) -> Self {
        let params = self.object(params, "params");
        let method = method.into();
        self.method = Some(method.clone());
        self.target(Target::Other { method, params })
    }

    /// Any target, as is; the method is implied as for the other target setters.
    pub fn target(mut self, target: Target) -> Self {
        self.target = target;
        self
    }

    /// The JSON-RPC method, when it is not the one the target implies.
    pub fn method(mut self, method: impl Into<String>) -> Self {
        self.method = Some(method.into());
        self
    }

    /// Why `evaluate` is asked ([`Phase::Invocation`] by default). For
    /// [`Phase::Approval`], use [`approval`](Self::approval).
    pub fn phase(mut self, phase: Phase) -> Self {
        self.phase = phase;
        self
    }

    /// The era, version and capabilities, all at once.
    pub fn protocol(mut self, protocol: ProtocolContext) -> Self {
        self.protocol = protocol;
        self
    }

    /// Modern (the default) or legacy MCP. Legacy has no version unless
    /// [`protocol_version`](Self::protocol_version) gives one, as for a session the layer does
    /// not know.
    pub fn era(mut self, era: Era) -> Self {
        self.protocol.era = era;
        self
    }

    /// The protocol version: on modern MCP one of [`MODERN_VERSIONS`] (the newest by
    /// default); on legacy MCP the version the session's `initialize` agreed.
    pub fn protocol_version(mut self, version: impl Into<String>) -> Self {
        self.protocol.protocol_version = Some(version.into());
        self
    }

    /// The capabilities the client declared, as a JSON object (none by default).
    pub fn capabilities(mut self, capabilities: Value) -> Self {
        match capabilities {
            Value::Object(map) => {
                self.protocol.capabilities = ClientCapabilities::from_object(map);
            }
            Value::Null => self.protocol.capabilities = ClientCapabilities::default(),
            _ => self.fail(EvaluationError::NotAnObject("capabilities")),
        }
        self
    }

    /// The tool's annotations, as the inner server listed them (tool targets only).
    pub fn annotations(mut self, annotations: Value) -> Self {
        self.listed.get_or_insert_default().annotations = annotations;
        self
    }

    /// The tool's `inputSchema`, as the inner server listed it (tool targets only).
    pub fn input_schema(mut self, input_schema: Value) -> Self {
        self.listed.get_or_insert_default().input_schema = Some(input_schema);
        self
    }

    /// The out-of-band approval of a held `tools/call`; sets [`Phase::Approval`].
    pub fn approval(mut self, task_id: impl Into<String>, approved_by: impl Into<String>) -> Self {
        self.approval = Some(Approval {
            task_id: task_id.into(),
            approved_by: approved_by.into(),
        });
        self.phase = Phase::Approval;
        self
    }

    /// A retry that answers the layer's URL approval asked under `input_key` (the key the
    /// policy chose, without the layer's prefix).
    pub fn answered_url(mut self, input_key: impl Into<String>, action: InputAction) -> Self {
        self.answered = Some(Answered {
            interaction: Interaction::Url,
            input_key: input_key.into(),
            action,
            confirmed: false,
            round: 1,
        });
        self
    }

    /// A retry that answers the layer's confirmation. It counts as consent
    /// ([`Answered::confirmed`]) only for [`InputAction::Accept`] with `approve: true`, as on
    /// the wire.
    pub fn answered_confirmation(mut self, action: InputAction, approve: bool) -> Self {
        self.answered = Some(Answered {
            interaction: Interaction::Confirmation,
            input_key: CONFIRM_INPUT_KEY.to_owned(),
            action,
            confirmed: action == InputAction::Accept && approve,
            round: 1,
        });
        self
    }

    /// Which gateway round the answer closes (1 by default; needs an answer).
    pub fn answered_round(mut self, round: u32) -> Self {
        self.round = Some(round);
        self
    }

    /// The evaluation, or why the layer would never ask it.
    pub fn build(self) -> Result<Evaluation, EvaluationError> {
        if let Some(error) = self.error {
            return Err(error);
        }
        let phase = self.phase;
        let method = match self.method {
            Some(method) => method,
            None => implied_method(phase, &self.target)
                .ok_or(EvaluationError::MissingMethod)?
                .to_owned(),
        };
        if !evaluated_with(&method, phase, &self.target) {
            return Err(EvaluationError::MethodMismatch { method, phase });
        }
        if let Target::Prompt { arguments, .. } = &self.target
            && !arguments.values().all(Value::is_string)
        {
            return Err(EvaluationError::PromptArgumentNotString);
        }
        if (phase == Phase::Approval) != self.approval.is_some()
            || (phase == Phase::Approval && self.protocol.era != Era::Modern)
        {
            return Err(EvaluationError::ApprovalMismatch);
        }
        if self.listed.is_some() && !matches!(self.target, Target::Tool { .. }) {
            return Err(EvaluationError::AnnotationsWithoutTool);
        }
        let answered = match (self.answered, self.round) {
            (None, None) => None,
            (None, Some(_)) => return Err(EvaluationError::AnsweredMismatch),
            (Some(mut answered), round) => {
                let answerable = phase == Phase::Invocation
                    && self.protocol.era == Era::Modern
                    && matches!(&*method, "tools/call" | "prompts/get" | "resources/read");
                answered.round = round.unwrap_or(1);
                if !answerable || answered.round == 0 {
                    return Err(EvaluationError::AnsweredMismatch);
                }
                Some(answered)
            }
        };
        let protocol_version = match self.protocol.era {
            Era::Modern => {
                let version = self
                    .protocol
                    .protocol_version
                    .or_else(|| MODERN_VERSIONS.first().map(|v| (*v).to_owned()));
                match version {
                    Some(version) if MODERN_VERSIONS.contains(&version.as_str()) => Some(version),
                    other => {
                        return Err(EvaluationError::UnsupportedVersion(
                            other.unwrap_or_default(),
                        ));
                    }
                }
            }
            Era::Legacy => self.protocol.protocol_version,
        };
        // A known method is the table's own `'static` name, as the layer hands it on.
        let method = match METHODS.iter().find(|row| row.method == method) {
            Some(row) => Cow::Borrowed(row.method),
            None => Cow::Owned(method),
        };
        Ok(Evaluation(Arc::new(EvaluationData {
            principal: self.principal,
            method,
            target: self.target,
            protocol: Protocol::owned(ProtocolContext {
                protocol_version,
                ..self.protocol
            }),
            phase,
            answered,
            listed: self.listed.map(Arc::new),
            approval: self.approval,
            explained: std::sync::OnceLock::new(),
            limits: NamedLimits::default(),
            client: None,
            extensions: http::Extensions::new(),
        })))
    }
}

/// The input key of the layer's confirmation, as [`Answered::input_key`] shows it.
const CONFIRM_INPUT_KEY: &str = "confirm";

/// The method a target implies in a phase, when it implies one.
fn implied_method(phase: Phase, target: &Target) -> Option<&str> {
    match phase {
        Phase::Invocation | Phase::Approval => Some(match target {
            Target::Tool { .. } => "tools/call",
            Target::Prompt { .. } => "prompts/get",
            Target::Resource { .. } => "resources/read",
            Target::Completion { .. } => "completion/complete",
            Target::Task { .. } => "tasks/get",
            Target::Skill { .. } => "skills/get",
            Target::Other { method, .. } => method,
            Target::None => return None,
        }),
        Phase::Discovery => Some(match target {
            Target::Tool { .. } => "tools/list",
            Target::Prompt { .. } => "prompts/list",
            Target::Resource { .. } => "resources/list",
            Target::Skill { .. } => "skills/list",
            _ => return None,
        }),
    }
}

/// Whether the layer ever asks `evaluate` about `method` with `target` in `phase`: the
/// targets the classifier reads for each method of the [method table](METHODS), the entries of
/// each listing, and held `tools/call`s.
fn evaluated_with(method: &str, phase: Phase, target: &Target) -> bool {
    match phase {
        Phase::Invocation => match (method, target) {
            ("tools/call", Target::Tool { .. })
            | ("prompts/get", Target::Prompt { .. })
            | (
                "resources/read" | "resources/subscribe" | "resources/unsubscribe",
                Target::Resource { .. },
            )
            | ("subscriptions/listen", Target::Resource { .. } | Target::None)
            | ("completion/complete", Target::Completion { .. })
            | ("skills/get", Target::Skill { .. })
            | ("logging/setLevel" | "tasks/list", Target::None)
            | (
                "tasks/get" | "tasks/update" | "tasks/cancel" | "tasks/result",
                Target::Task { .. },
            ) => true,
            (_, Target::Other { method: named, .. }) => {
                named == method && method_class(method) == MethodClass::Unknown
            }
            _ => false,
        },
        Phase::Discovery => {
            let MethodClass::Listing(listing) = method_class(method) else {
                return false;
            };
            match (listing.entry, target) {
                (EntryKind::Tool, Target::Tool { arguments, .. }) => arguments.is_empty(),
                (EntryKind::Prompt, Target::Prompt { arguments, .. }) => arguments.is_empty(),
                (EntryKind::Resource | EntryKind::ResourceTemplate, Target::Resource { .. })
                | (EntryKind::Skill, Target::Skill { .. }) => true,
                _ => false,
            }
        }
        Phase::Approval => method == "tools/call" && matches!(target, Target::Tool { .. }),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_supported_version_is_kept_as_the_tables_text_any_other_as_sent() {
        for version in crate::mcp::SUPPORTED_VERSIONS {
            let context = ProtocolContext {
                era: Era::Modern,
                protocol_version: Some((*version).to_owned()),
                capabilities: ClientCapabilities::default(),
            };
            for protocol in [Protocol::of(&context), Protocol::owned(context.clone())] {
                assert!(matches!(protocol.version, Some(Cow::Borrowed(v)) if v == *version));
            }
        }
        let context = ProtocolContext {
            era: Era::Legacy,
            protocol_version: Some("2025-06-18".to_owned()),
            capabilities: ClientCapabilities::default(),
        };
        for protocol in [Protocol::of(&context), Protocol::owned(context.clone())] {
            assert_eq!(protocol.version.as_deref(), Some("2025-06-18"));
            assert_eq!(protocol.era, Era::Legacy);
        }
        let none = ProtocolContext {
            protocol_version: None,
            ..context
        };
        assert_eq!(Protocol::of(&none).version, None);
    }

    fn principal() -> Principal {
        Principal::builder()
            .issuer("https://as.example")
            .subject("alice")
            .build()
            .unwrap()
    }

    fn builder() -> EvaluationBuilder {
        Evaluation::builder(principal())
    }

    #[test]
    fn defaults_are_a_modern_invocation() {
        let e = builder()
            .tool("echo", json!({"text": "hi"}))
            .build()
            .unwrap();
        assert_eq!(e.method(), "tools/call");
        assert!(matches!(e.0.method, Cow::Borrowed(_)));
        assert_eq!(e.tool(), Some("echo"));
        assert_eq!(e.arguments().unwrap()["text"], "hi");
        assert_eq!(e.phase(), Phase::Invocation);
        assert_eq!(e.era(), Era::Modern);
        assert_eq!(e.protocol_version(), MODERN_VERSIONS.first().copied());
        assert!(e.capabilities().as_map().is_empty());
        assert!(e.answered().is_none() && e.approval().is_none());
        assert!(e.tool_annotations().is_none());
        assert_eq!(e.principal().subject(), Some("alice"));
    }

    #[test]
    fn every_method_the_layer_evaluates_can_be_built() {
        for row in METHODS {
            let phase = match row.class {
                MethodClass::Guarded | MethodClass::Tasks => Phase::Invocation,
                MethodClass::Listing(_) => Phase::Discovery,
                MethodClass::Lifecycle | MethodClass::Unknown => continue,
            };
            let targets = [
                Target::Tool {
                    name: "t".into(),
                    arguments: Default::default(),
                },
                Target::Prompt {
                    name: "p".into(),
                    arguments: Arc::default(),
                },
                Target::Resource { uri: "r".into() },
                Target::Completion {
                    reference: CompletionReference::Prompt { name: "p".into() },
                    argument: "a".into(),
                },
                Target::Task {
                    task_id: "x".into(),
                },
                Target::Skill { uri: "s".into() },
                Target::None,
            ];
            let built = targets
                .into_iter()
                .filter(|target| {
                    builder()
                        .target(target.clone())
                        .method(row.method)
                        .phase(phase)
                        .build()
                        .is_ok()
                })
                .count();
            // Every row but `resources/directory/read` as a listing has exactly one target;
            // `subscriptions/listen` has two (a resource, or none).
            let expected = if row.method == "subscriptions/listen" {
                2
            } else {
                1
            };
            assert_eq!(built, expected, "{}", row.method);
        }
        for row in METHODS.iter().filter(|r| r.class == MethodClass::Lifecycle) {
            assert!(
                builder().method(row.method).build().is_err(),
                "{} is never evaluated",
                row.method
            );
        }
    }

    #[test]
    fn implied_methods_per_phase() {
        let listed = |b: EvaluationBuilder| b.phase(Phase::Discovery).build().unwrap();
        assert_eq!(
            listed(builder().tool("t", Value::Null)).method(),
            "tools/list"
        );
        assert_eq!(
            listed(builder().prompt("p", Value::Null)).method(),
            "prompts/list"
        );
        assert_eq!(listed(builder().resource("r")).method(), "resources/list");
        assert_eq!(listed(builder().skill("s")).method(), "skills/list");
        let templates = builder()
            .resource("file:///{path}")
            .method("resources/templates/list")
            .phase(Phase::Discovery)
            .build()
            .unwrap();
        assert_eq!(
            templates.target(),
            &Target::Resource {
                uri: "file:///{path}".into()
            }
        );
        assert_eq!(
            builder()
                .prompt("p", json!({"a": "b"}))
                .build()
                .unwrap()
                .method(),
            "prompts/get"
        );
        assert_eq!(builder().task("x").build().unwrap().method(), "tasks/get");
        assert_eq!(builder().skill("s").build().unwrap().method(), "skills/get");
        let completion = builder()
            .completion(CompletionReference::Resource { uri: "u".into() }, "a")
            .build()
            .unwrap();
        assert_eq!(completion.method(), "completion/complete");
        let other = builder()
            .other("admin/shutdown", json!({"now": true}))
            .build()
            .unwrap();
        assert_eq!(other.method(), "admin/shutdown");
        assert!(matches!(other.0.method, Cow::Owned(_)));
        let none = builder().method("logging/setLevel").build().unwrap();
        assert_eq!(none.target(), &Target::None);
    }

    #[test]
    fn questions_the_layer_never_asks_are_refused() {
        let mismatch =
            |b: EvaluationBuilder| matches!(b.build(), Err(EvaluationError::MethodMismatch { .. }));
        assert_eq!(
            builder().build().err(),
            Some(EvaluationError::MissingMethod)
        );
        assert!(mismatch(builder().resource("r").method("tools/call")));
        assert!(mismatch(builder().method("initialize")));
        assert!(mismatch(builder().method("tools/list")));
        assert!(mismatch(builder().other("tools/call", Value::Null)));
        assert!(mismatch(
            builder().tool("t", json!({"a": 1})).phase(Phase::Discovery)
        ));
        assert_eq!(
            builder().task("x").phase(Phase::Discovery).build().err(),
            Some(EvaluationError::MissingMethod)
        );
        assert_eq!(
            builder().tool("t", json!(["a"])).build().err(),
            Some(EvaluationError::NotAnObject("tool arguments"))
        );
        assert_eq!(
            builder().prompt("p", json!({"n": 1})).build().err(),
            Some(EvaluationError::PromptArgumentNotString)
        );
        assert_eq!(
            builder()
                .tool("t", Value::Null)
                .capabilities(json!(true))
                .build()
                .err(),
            Some(EvaluationError::NotAnObject("capabilities"))
        );
        assert_eq!(
            builder().resource("r").annotations(json!({})).build().err(),
            Some(EvaluationError::AnnotationsWithoutTool)
        );
        assert_eq!(
            builder()
                .tool("t", Value::Null)
                .protocol_version("2025-11-25")
                .build()
                .err(),
            Some(EvaluationError::UnsupportedVersion("2025-11-25".into()))
        );
    }

    #[test]
    fn approvals_only_in_their_phase() {
        let approved = builder()
            .tool("deploy", Value::Null)
            .approval("task-1", "ops")
            .build()
            .unwrap();
        assert_eq!(approved.phase(), Phase::Approval);
        assert_eq!(
            approved.approval(),
            Some(&Approval {
                task_id: "task-1".into(),
                approved_by: "ops".into()
            })
        );
        for refused in [
            builder().tool("t", Value::Null).phase(Phase::Approval),
            builder()
                .tool("t", Value::Null)
                .approval("x", "y")
                .phase(Phase::Invocation),
            builder()
                .tool("t", Value::Null)
                .approval("x", "y")
                .era(Era::Legacy),
        ] {
            assert_eq!(
                refused.build().err(),
                Some(EvaluationError::ApprovalMismatch)
            );
        }
        assert!(matches!(
            builder().resource("r").approval("x", "y").build(),
            Err(EvaluationError::MethodMismatch { .. })
        ));
    }

    #[test]
    fn answers_only_where_the_layer_asks() {
        let url = builder()
            .resource("file:///x")
            .answered_url("approve-share", InputAction::Accept)
            .answered_round(2)
            .build()
            .unwrap();
        let answered = url.answered().unwrap();
        assert_eq!(answered.interaction(), Interaction::Url);
        assert_eq!(answered.input_key(), "approve-share");
        assert_eq!(answered.action(), InputAction::Accept);
        assert!(!answered.confirmed());
        assert_eq!(answered.round(), 2);
        let declined = builder()
            .tool("t", Value::Null)
            .answered_confirmation(InputAction::Decline, true)
            .build()
            .unwrap();
        assert!(!declined.answered().unwrap().confirmed());
        for refused in [
            builder().tool("t", Value::Null).answered_round(1),
            builder()
                .tool("t", Value::Null)
                .answered_url("k", InputAction::Accept)
                .answered_round(0),
            builder()
                .tool("t", Value::Null)
                .answered_url("k", InputAction::Accept)
                .era(Era::Legacy),
            builder().task("x").answered_url("k", InputAction::Accept),
            builder()
                .tool("t", Value::Null)
                .phase(Phase::Discovery)
                .answered_url("k", InputAction::Accept),
        ] {
            assert_eq!(
                refused.build().err(),
                Some(EvaluationError::AnsweredMismatch)
            );
        }
    }

    #[test]
    fn legacy_and_explicit_protocols() {
        let legacy = builder()
            .tool("t", Value::Null)
            .era(Era::Legacy)
            .protocol_version("2025-06-18")
            .capabilities(json!({"elicitation": {}}))
            .build()
            .unwrap();
        assert_eq!(legacy.era(), Era::Legacy);
        assert_eq!(legacy.protocol_version(), Some("2025-06-18"));
        assert!(legacy.capabilities().form_elicitation());
        let context = ProtocolContext {
            era: Era::Legacy,
            protocol_version: None,
            capabilities: ClientCapabilities::default(),
        };
        let bare = builder()
            .tool("t", Value::Null)
            .protocol(context)
            .build()
            .unwrap();
        assert_eq!(bare.protocol_version(), None);
    }
}
