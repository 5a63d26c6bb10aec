//! The built configuration: plain values sorted by concern.
//!
//! [`GateBuilder::build`](crate::GateBuilder::build) checks every option and makes these
//! structs one concern at a time; the layer reads them. Nothing here acts on a request, and
//! nothing here depends on the layer: refusing, rendering and forwarding live in
//! [`crate::layer`], verification in [`crate::auth`], the wire shapes in [`crate::denial`].

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::auth::authenticator::Authenticator;
use crate::auth::metadata::ProtectedResourceMetadata;
use crate::continuation::StateCodec;
use crate::denial::render::DenialSettings;
use crate::judge::{Judge, Observers, RequestId};
use crate::mcp::SessionStore;
use crate::mcp::annotations::ToolAnnotations;
use crate::mcp::identity::ServerIdentity;
use crate::policy::Policy;
use crate::resource::ResourceUri;
use crate::tasks::{TaskStart, TaskStore};

/// Everything a [`Gate`](crate::Gate) holds, shared by its clones.
pub(crate) struct Settings {
    pub resource: ResourceSettings,
    pub authenticator: Authenticator,
    pub body: BodySettings,
    /// Which `Origin`s may call the endpoint.
    pub origins: Origins,
    /// Legacy session bindings.
    pub sessions: Arc<dyn SessionStore>,
    pub answers: AnswerSettings,
    pub policy: PolicySettings,
    pub denial: DenialSettings,
    pub continuation: ContinuationSettings,
    pub discovery: DiscoverySettings,
    pub tasks: TaskSettings,
    /// The revocation set (`None`: revocation not configured). The authenticator holds the
    /// same set as its check.
    pub revocations: Option<Arc<crate::revocation::Revocations>>,
}

/// The protected resource and what is published about it.
pub(crate) struct ResourceSettings {
    pub uri: ResourceUri,
    /// The absolute URL of the metadata document, as every challenge names it.
    pub metadata_url: String,
    pub metadata: ProtectedResourceMetadata,
    pub metadata_bytes: Bytes,
    pub metadata_paths: Vec<String>,
    /// The endpoint-wide scopes, space-separated, as challenges name them.
    pub endpoint_scope: String,
}

/// What a request's body must be to be read at all.
pub(crate) struct BodySettings {
    /// The largest body the layer reads.
    pub max_bytes: usize,
    /// Longest the client may take to send it.
    pub timeout: Duration,
}

/// The inner answers the layer reads whole (a list, a probe, a discovery, a side request, a
/// result it must judge or rewrite).
pub(crate) struct AnswerSettings {
    /// The largest inner answer the layer reads whole.
    pub max_bytes: usize,
    /// Longest the layer waits for such an answer; tool calls are not timed.
    pub read_timeout: Duration,
}

impl AnswerSettings {
    /// The bounds of an inner answer the layer reads whole: its size and its time.
    pub fn bounds(&self) -> (usize, Option<Duration>) {
        (self.max_bytes, Some(self.read_timeout))
    }
}

/// Which `Origin` headers the endpoint accepts.
#[derive(Clone, Debug)]
pub(crate) enum Origins {
    /// Every origin (`allow_any_origin`).
    Any,
    /// These origins (scheme, host and port, no trailing slash): the resource's own first.
    Only(Vec<String>),
}

/// The application's policy and what it may read.
pub(crate) struct PolicySettings {
    pub policy: Arc<dyn Policy>,
    /// A candidate asked beside the policy and never acted on (`GateBuilder::shadow_policy`).
    pub shadow: Option<Arc<dyn Policy>>,
    pub evaluate_timeout: Duration,
    /// Whether methods outside the method table go to `evaluate` instead of `-32601`.
    pub evaluate_unknown_methods: bool,
    /// Tool annotations learned from `tools/list` answers, by tool name.
    pub tool_annotations: ToolAnnotations,
    /// Who is told of every decision: the decision log first.
    pub observers: Observers,
    /// The rate limits counted before the policy is asked, and the store of those a policy
    /// names.
    pub limits: crate::limit::Limits,
    /// The request extension types `evaluate` sees (`GateBuilder::evaluation_extension`).
    pub extension_copies: Vec<crate::policy::ExtensionCopy>,
}

impl PolicySettings {
    /// The one decision point, for this policy, judging in request `request`.
    pub fn judge(&self, request: RequestId) -> Judge<'_> {
        Judge::new(
            &*self.policy,
            self.shadow.as_deref(),
            self.evaluate_timeout,
            &self.observers,
            request,
        )
        .limited(&self.limits, &self.tool_annotations)
        .seeing(&self.extension_copies)
    }
}

/// The layer's own round trips: signed states, their rounds, list cursors.
pub(crate) struct ContinuationSettings {
    pub state: StateCodec,
    pub max_rounds: u32,
    /// Plain-http loopback approval URLs allowed.
    pub development_mode: bool,
    pub cursor_ttl: Duration,
}

/// What the layer says about the inner server's components.
pub(crate) struct DiscoverySettings {
    /// Conceal mode: refusals answered as the inner server answers unknown components.
    pub conceal: bool,
    /// Entries whose discovery decision is a remedy the client can act on stay listed.
    pub list_remediable: bool,
    /// The inner server's identity, for the results the layer writes.
    pub server_identity: ServerIdentity,
    /// The longest `ttlMs` a result judged per caller leaves with (SEP-2549).
    pub cache_ttl_cap: Duration,
    /// The last answer read per listing, so that the same answer is not read twice.
    pub lists: crate::mcp::listings::ListMemo,
}

/// How the layer keeps the calls it holds for approval.
pub(crate) struct TaskSettings {
    pub store: Arc<dyn TaskStore>,
    /// The open task listens, when task notifications are on.
    pub notifications: Option<Arc<crate::tasks::listeners::Listeners>>,
    pub ttl_ms: u64,
    pub poll_interval_ms: u64,
    pub start: Option<Arc<dyn TaskStart>>,
    /// Calls one owner may have waiting for approval at once.
    pub per_owner: usize,
    /// The largest call (its params as JSON) the layer holds.
    pub max_call_bytes: usize,
}

impl TaskSettings {
    /// The time a claimed call must have left to run and record its outcome: 10 s, or half
    /// the lifetime of short-lived tasks.
    pub fn run_margin_ms(&self) -> u64 {
        (self.ttl_ms / 2).min(10_000)
    }
}
