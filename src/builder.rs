//! [`GateBuilder`]: every option of the layer, checked once when it is built.

use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;
use url::Url;

use crate::audit::{AuditObserver, AuditSink};
use crate::auth::authenticator::Authenticator;
use crate::auth::jwt::{JwtVerifier, TrustedIssuer, TypPolicy};
use crate::auth::keys::{KeySource, StaticKeys};
use crate::auth::metadata::ProtectedResourceMetadata;
use crate::auth::scope::{ScopeHierarchy, ScopeSet, is_valid_scope_token};
use crate::auth::token_cache::TokenCache;
use crate::denial::render::{CredentialDelivery, DEFAULT_DENIAL_CODE, DenialSettings};
use crate::denial::{Family, IntoRevision, Revision};
use crate::error::ConfigError;
use crate::gate::Gate;
use crate::mcp::annotations::ToolAnnotations;
use crate::mcp::identity::ServerIdentity;
use crate::policy::Policy;
use crate::resource::{
    METADATA_WELL_KNOWN, PlainHttp, ResourceUri, TransportProblem, transport_rule,
};
use crate::settings::{
    AnswerSettings, BodySettings, ContinuationSettings, DiscoverySettings, Origins, PolicySettings,
    ResourceSettings, Settings, TaskSettings,
};
use crate::store::IntoShared;
use crate::store::replay::{MemoryReplayStore, ReplayStore};
use crate::store::sessions::{MemorySessionStore, SessionStore};
use crate::store::tasks::{MemoryTaskStore, TaskStore};

/// The largest inner answer the layer reads whole (a list, a probe, a judged result).
const MAX_ANSWER_BYTES: usize = 16 * 1024 * 1024;

/// A trusted token issuer and where its verification keys come from.
///
/// ```
/// use mcp_gate::{Issuer, StaticKeys};
///
/// let discovered = Issuer::discover("https://auth.example.com");
/// let explicit = Issuer::with_jwks_uri("https://auth.example.com", "https://auth.example.com/keys");
/// # let _ = (discovered, explicit);
/// ```
#[derive(Clone, Debug)]
pub struct Issuer {
    id: String,
    keys: IssuerKeys,
}

#[derive(Clone, Debug)]
enum IssuerKeys {
    Discover,
    JwksUri(#[cfg_attr(not(feature = "jwks"), allow(dead_code))] String),
    Static(StaticKeys),
}

impl Issuer {
    /// Keys found through the issuer's metadata: RFC 8414
    /// `/.well-known/oauth-authorization-server`, then OpenID `/.well-known/openid-configuration`.
    pub fn discover(id: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            keys: IssuerKeys::Discover,
        }
    }

    /// Keys fetched from an explicit JWK set URL.
    pub fn with_jwks_uri(id: impl Into<String>, jwks_uri: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            keys: IssuerKeys::JwksUri(jwks_uri.into()),
        }
    }

    /// Keys fixed in the configuration.
    pub fn with_keys(id: impl Into<String>, keys: StaticKeys) -> Self {
        Self {
            id: id.into(),
            keys: IssuerKeys::Static(keys),
        }
    }

    /// The issuer identifier, compared exactly with the `iss` claim.
    pub fn id(&self) -> &str {
        &self.id
    }
}

impl From<&str> for Issuer {
    fn from(id: &str) -> Self {
        Issuer::discover(id)
    }
}

impl From<String> for Issuer {
    fn from(id: String) -> Self {
        Issuer::discover(id)
    }
}

/// The audit sinks, counted in `Debug` output.
#[derive(Clone, Default)]
struct AuditSinks(Vec<Arc<dyn AuditSink>>);

impl std::fmt::Debug for AuditSinks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} audit sink(s)", self.0.len())
    }
}

/// The application's policy, kept opaque in `Debug` output.
#[derive(Clone, Default)]
struct PolicySlot(Option<Arc<dyn Policy>>);

impl std::fmt::Debug for PolicySlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Some(<policy>)"
        } else {
            "None"
        })
    }
}

/// A replay store, kept opaque in `Debug` output.
#[derive(Clone)]
struct ReplaySlot(Arc<dyn ReplayStore>);

/// The rate limits, the concurrency limit, and the store their counters are kept in, kept
/// opaque in `Debug` output.
#[derive(Clone, Default)]
struct LimitSlot {
    rules: Vec<crate::limit::Limit>,
    concurrency: Option<crate::limit::ConcurrencyLimit>,
    store: Option<Arc<dyn crate::store::limits::LimitStore>>,
}

impl std::fmt::Debug for LimitSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LimitSlot")
            .field("rules", &self.rules)
            .field("concurrency", &self.concurrency)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for ReplaySlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<replay store>")
    }
}

/// A session store, kept opaque in `Debug` output.
#[derive(Clone)]
struct SessionStoreSlot(Arc<dyn SessionStore>);

impl std::fmt::Debug for SessionStoreSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<session store>")
    }
}

/// A task store, kept opaque in `Debug` output.
#[derive(Clone)]
struct TaskStoreSlot(Option<Arc<dyn TaskStore>>);

impl std::fmt::Debug for TaskStoreSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "<task store>"
        } else {
            "<memory task store>"
        })
    }
}

/// A task start hook, kept opaque in `Debug` output.
#[derive(Clone)]
struct TaskStartSlot(Arc<dyn crate::tasks::TaskStart>);

impl std::fmt::Debug for TaskStartSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<task start hook>")
    }
}

/// Builds a [`Gate`].
///
/// ```
/// use mcp_gate::{Gate, Issuer, StaticKeys};
///
/// let keys = StaticKeys::from_jwks_json(r#"{"keys":[{"kty":"EC","crv":"P-256","kid":"k1",
///   "x":"MKBCTNIcKUSDii11ySs3526iDZ8AiTo7Tu6KPAqv7D4","y":"4Etl6SRW2YiLUrN5vfvVHuhp7x8PxltmWWlbbM4IFyM"}]}"#).unwrap();
/// let gate = Gate::builder()
///     .evaluate(mcp_gate::policy::allow_all())
///     .resource("https://mcp.example.com/mcp")
///     .issuer(Issuer::with_keys("https://auth.example.com", keys))
///     .required_scopes(["mcp:read"])
///     .build()
///     .unwrap();
/// assert_eq!(gate.resource().as_str(), "https://mcp.example.com/mcp");
///
/// // Mistakes are found here, not at the first request.
/// let error = Gate::builder()
///     .evaluate(mcp_gate::policy::allow_all())
///     .resource("https://mcp.example.com/mcp#x")
///     .issuer("https://auth.example.com")
///     .build();
/// assert!(error.is_err());
/// ```
#[derive(Debug)]
#[must_use]
pub struct GateBuilder {
    resource: Option<String>,
    issuers: Vec<Issuer>,
    required_scopes: Vec<String>,
    hierarchy: ScopeHierarchy,
    leeway: Duration,
    typ: TypPolicy,
    cache_capacity: u64,
    cache_max_age: Duration,
    max_token_bytes: usize,
    resource_name: Option<String>,
    resource_documentation: Option<String>,
    authorization_details_types: Vec<String>,
    scopes_supported: Option<Vec<String>>,
    authorization_servers: Option<Vec<String>>,
    allow_insecure_http: bool,
    policy: PolicySlot,
    shadow: PolicySlot,
    audit: AuditSinks,
    evaluate_timeout: Duration,
    revision: Result<Revision, ConfigError>,
    denial_error_code: i64,
    credential_delivery: CredentialDelivery,
    credential_status: StatusCode,
    max_body_bytes: usize,
    body_timeout: Duration,
    session_capacity: u64,
    session_idle: Duration,
    sessions_per_owner: u64,
    session_store: Option<SessionStoreSlot>,
    /// Options given that only one other choice can honour: refused together at build.
    conflicts: Conflicts,
    evaluate_unknown_methods: bool,
    inner_read_timeout: Duration,
    server_info: Option<serde_json::Value>,
    allowed_origins: Option<Vec<String>>,
    tasks_per_owner: u64,
    max_held_call_bytes: usize,
    continuation_keys: Option<crate::continuation::Keyring>,
    continuation_ttl: Duration,
    replay: Option<ReplaySlot>,
    limits: LimitSlot,
    extension_copies: Vec<crate::policy::ExtensionCopy>,
    max_rounds: u32,
    development_mode: bool,
    conceal: bool,
    list_remediable: bool,
    cache_ttl_cap: Duration,
    task_store: TaskStoreSlot,
    task_ttl: Duration,
    task_poll_interval: Duration,
    task_start: Option<TaskStartSlot>,
    // Task notifications (notifications/tasks over subscriptions/listen).
    task_notifications: Option<crate::tasks::TaskNotifications>,
    #[cfg(feature = "jwks")]
    key_refresh: crate::auth::jwks::KeyRefresh,
    #[cfg(feature = "jwks")]
    http_client: Option<reqwest::Client>,
    #[cfg(feature = "introspection")]
    introspection: Option<crate::auth::introspection::Introspection>,
    // DPoP (issue 28): `dpop`.
    dpop: Option<crate::auth::Dpop>,
    revocation: crate::revocation::RevocationOptions,
}

impl Default for GateBuilder {
    fn default() -> Self {
        Self {
            resource: None,
            issuers: Vec::new(),
            required_scopes: Vec::new(),
            hierarchy: ScopeHierarchy::new(),
            leeway: Duration::from_secs(30),
            typ: TypPolicy::default(),
            cache_capacity: 10_000,
            cache_max_age: Duration::from_secs(300),
            max_token_bytes: 8 * 1024,
            resource_name: None,
            resource_documentation: None,
            authorization_details_types: Vec::new(),
            scopes_supported: None,
            authorization_servers: None,
            allow_insecure_http: false,
            policy: PolicySlot::default(),
            shadow: PolicySlot::default(),
            audit: AuditSinks::default(),
            evaluate_timeout: Duration::from_secs(5),
            revision: Ok(Revision::current()),
            denial_error_code: DEFAULT_DENIAL_CODE,
            credential_delivery: CredentialDelivery::Challenge,
            credential_status: StatusCode::UNAUTHORIZED,
            max_body_bytes: 4 * 1024 * 1024,
            body_timeout: Duration::from_secs(30),
            session_capacity: 10_000,
            session_idle: Duration::from_secs(3600),
            sessions_per_owner: 100,
            session_store: None,
            conflicts: Conflicts::default(),
            evaluate_unknown_methods: false,
            inner_read_timeout: Duration::from_secs(30),
            server_info: None,
            allowed_origins: Some(Vec::new()),
            tasks_per_owner: 100,
            max_held_call_bytes: 1024 * 1024,
            continuation_keys: None,
            continuation_ttl: Duration::from_secs(600),
            replay: Some(ReplaySlot(Arc::new(MemoryReplayStore::new(
                MemoryReplayStore::DEFAULT_CAPACITY,
                MemoryReplayStore::DEFAULT_PER_OWNER,
            )))),
            limits: LimitSlot::default(),
            extension_copies: Vec::new(),
            max_rounds: 3,
            development_mode: false,
            conceal: false,
            list_remediable: false,
            cache_ttl_cap: Duration::from_secs(60),
            task_store: TaskStoreSlot(None),
            task_ttl: Duration::from_secs(86_400),
            task_poll_interval: Duration::from_secs(5),
            task_start: None,
            task_notifications: None,
            #[cfg(feature = "jwks")]
            key_refresh: Default::default(),
            #[cfg(feature = "jwks")]
            http_client: None,
            #[cfg(feature = "introspection")]
            introspection: None,
            dpop: None,
            revocation: crate::revocation::RevocationOptions::default(),
        }
    }
}

// Written here rather than in `gate.rs`, so that the gate never names its builder (the
// builder makes the gate, not the other way round).
impl Gate {
    /// Starts a configuration.
    ///
    /// With both JWT crypto features on (`crypto-rust` and `crypto-aws-lc`), this installs
    /// aws-lc-rs as jsonwebtoken's process-wide provider, unless the application installed
    /// one first.
    pub fn builder() -> GateBuilder {
        crate::crypto_backend::select();
        GateBuilder::default()
    }
}

impl GateBuilder {
    /// The URI clients connect to, which tokens must carry in `aud` (required). It is
    /// canonicalised (see [`ResourceUri`]).
    pub fn resource(mut self, uri: impl Into<String>) -> Self {
        self.resource = Some(uri.into());
        self
    }

    /// Trusts an issuer; a plain string means [`Issuer::discover`]. Repeat for several issuers.
    pub fn issuer(mut self, issuer: impl Into<Issuer>) -> Self {
        self.issuers.push(issuer.into());
        self
    }

    /// Scopes every request must carry (403 `insufficient_scope` otherwise).
    pub fn required_scopes<I, S>(mut self, scopes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.required_scopes
            .extend(scopes.into_iter().map(Into::into));
        self
    }

    /// Lets broader scopes imply narrower ones.
    pub fn scope_hierarchy(mut self, hierarchy: ScopeHierarchy) -> Self {
        self.hierarchy = hierarchy;
        self
    }

    /// Clock-skew tolerance for `exp` and `nbf` (default 30 s, at most 5 min).
    pub fn leeway(mut self, leeway: Duration) -> Self {
        self.leeway = leeway;
        self
    }

    /// Which JWT `typ` values are accepted (default: `at+jwt`, `JWT` or none).
    pub fn typ_policy(mut self, policy: TypPolicy) -> Self {
        self.typ = policy;
        self
    }

    /// Size of the verified-token cache (default 10,000 entries; 0 disables it).
    pub fn token_cache_capacity(mut self, capacity: u64) -> Self {
        self.cache_capacity = capacity;
        self
    }

    /// Longest a verified JWT stays cached (default 5 min; never past its `exp`).
    pub fn token_cache_max_age(mut self, max_age: Duration) -> Self {
        self.cache_max_age = max_age;
        self
    }

    /// Longest token accepted, in bytes (default 8 KiB).
    pub fn max_token_bytes(mut self, max: usize) -> Self {
        self.max_token_bytes = max;
        self
    }

    /// `resource_name` in the metadata document.
    pub fn resource_name(mut self, name: impl Into<String>) -> Self {
        self.resource_name = Some(name.into());
        self
    }

    /// `resource_documentation` in the metadata document.
    pub fn resource_documentation(mut self, url: impl Into<String>) -> Self {
        self.resource_documentation = Some(url.into());
        self
    }

    /// `authorization_details_types_supported` in the metadata document.
    pub fn authorization_details_types<I, S>(mut self, types: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.authorization_details_types
            .extend(types.into_iter().map(Into::into));
        self
    }

    /// `scopes_supported` in the metadata document (default: the required scopes and every
    /// scope named in the hierarchy).
    pub fn scopes_supported<I, S>(mut self, scopes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.scopes_supported = Some(scopes.into_iter().map(Into::into).collect());
        self
    }

    /// `authorization_servers` in the metadata document (default: the trusted issuers).
    pub fn authorization_servers<I, S>(mut self, servers: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.authorization_servers = Some(servers.into_iter().map(Into::into).collect());
        self
    }

    /// Allows plain `http` resource, issuer, JWKS and introspection URLs on non-loopback hosts.
    /// Loopback hosts are always allowed; anything else should be HTTPS.
    pub fn allow_insecure_http(mut self) -> Self {
        self.allow_insecure_http = true;
        self
    }

    /// The application's authorization callback (required). See [`crate::policy`];
    /// [`crate::policy::allow_all`] makes an open server, on purpose.
    pub fn evaluate(mut self, policy: impl Policy) -> Self {
        self.policy = PolicySlot(Some(Arc::new(policy)));
        self
    }

    /// A candidate policy, asked every question the live one is asked and never acted on:
    /// where its ruling differs from the live one (the decision, or the remedy's kind), the
    /// decision log says so (`shadow_differs`), the audit record keeps both, and with feature
    /// `metrics` `mcp_gate_shadow_decisions_total` counts it. Every answer stays the live
    /// policy's. Try a rule change on live traffic before turning it on: for Cedar, a second
    /// `CedarPolicy` from the changed files.
    ///
    /// Both are asked at once, each in its own containment with the same timeout, so a
    /// request waits for the slower of the two.
    pub fn shadow_policy(mut self, policy: impl Policy) -> Self {
        self.shadow = PolicySlot(Some(Arc::new(policy)));
        self
    }

    /// Writes an audit record for every decision, and for every request authentication
    /// refused, to `sink` (see [`crate::audit`]). Repeatable: each sink gets every record.
    pub fn audit(mut self, sink: impl AuditSink) -> Self {
        self.audit.0.push(Arc::new(sink));
        self
    }

    /// Longest `evaluate` may run before the request fails with an internal error (default 5 s).
    pub fn evaluate_timeout(mut self, timeout: Duration) -> Self {
        self.evaluate_timeout = timeout;
        self
    }

    /// The SEP-2643 revision denials are rendered in: a [`Revision`] (for example
    /// `Revision::ERROR_BASED_1C5B0CE`), or its name, `"current"` (the default) or an exact
    /// 40-hex id. An unknown name is [`ConfigError::UnknownRevision`] from
    /// [`build`](Self::build).
    ///
    /// ```
    /// use mcp_gate::{Gate, Revision};
    ///
    /// let by_constant = Gate::builder().revision(Revision::ERROR_BASED_1C5B0CE);
    /// let by_name = Gate::builder().revision("1c5b0cec97691cb9db3d880474a71d604d6addee");
    /// # let _ = (by_constant, by_name);
    /// ```
    pub fn revision(mut self, revision: impl IntoRevision) -> Self {
        self.revision = revision.into_revision();
        self
    }

    /// JSON-RPC error code of denials carried as errors (default `-32003`). Must lie outside
    /// the codes JSON-RPC and MCP reserve (`-32768..=-32020`).
    pub fn denial_error_code(mut self, code: i64) -> Self {
        self.denial_error_code = code;
        self
    }

    /// How credential remedies are delivered (default: a challenge).
    pub fn credential_delivery(mut self, delivery: CredentialDelivery) -> Self {
        self.credential_delivery = delivery;
        self
    }

    /// HTTP status of the credential challenge: 401 (default, as the RAR remediation draft's
    /// examples) or 403.
    pub fn credential_status(mut self, status: StatusCode) -> Self {
        self.credential_status = status;
        self
    }

    /// Largest request body read, in bytes (default 4 MiB, rmcp's own limit); larger ones get 413.
    pub fn max_body_bytes(mut self, max: usize) -> Self {
        self.max_body_bytes = max;
        self
    }

    /// Longest the whole request body may take to arrive (default 30 s); slower ones get 408.
    pub fn body_read_timeout(mut self, timeout: Duration) -> Self {
        self.body_timeout = timeout;
        self
    }

    /// Bounds of the in-memory legacy session store: at most `capacity` sessions, each
    /// forgotten after `idle` without a request (defaults 10,000 and one hour). When the store
    /// is full a new session is refused (`503`); no session is evicted to make room.
    pub fn legacy_sessions(mut self, capacity: u64, idle: Duration) -> Self {
        self.session_capacity = capacity;
        self.session_idle = idle;
        self.conflicts.session_bounds = true;
        self
    }

    /// At most `quota` open legacy sessions per owner (issuer, subject, client id) in the
    /// in-memory store (default 100). Over quota, a new session is refused (`429`) and no
    /// other owner is affected.
    pub fn legacy_sessions_per_owner(mut self, quota: u64) -> Self {
        self.sessions_per_owner = quota;
        self.conflicts.session_bounds = true;
        self
    }

    /// Keeps legacy session bindings in `store` instead of the in-memory store. The bounds of
    /// the in-memory store ([`legacy_sessions`](Self::legacy_sessions),
    /// [`legacy_sessions_per_owner`](Self::legacy_sessions_per_owner)) do not apply to it:
    /// setting them too is refused at build ([`ConfigError::InvalidOption`]).
    ///
    /// `store` is a store of your own, an `Arc` of one, or an `Arc<dyn SessionStore>`
    /// ([`IntoShared`]).
    pub fn session_store(mut self, store: impl IntoShared<dyn SessionStore>) -> Self {
        self.session_store = Some(SessionStoreSlot(store.into_shared()));
        self
    }

    /// Browser origins (`scheme://host[:port]`) allowed to call the endpoint besides the
    /// resource's own. A request whose `Origin` header is present and not allowed is refused
    /// with 403 before anything else (DNS rebinding, as the Streamable HTTP transport says);
    /// requests without `Origin` (every non-browser client) are not affected. By default only
    /// the resource's own origin is allowed, so a browser client served from another origin
    /// (an inspector on another port, say) must be listed here.
    pub fn allowed_origins<I, S>(mut self, origins: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.conflicts.origins_listed = true;
        let list = self.allowed_origins.get_or_insert_with(Vec::new);
        list.extend(
            origins
                .into_iter()
                .map(|o| o.into().trim_end_matches('/').to_owned()),
        );
        self
    }

    /// Accepts every `Origin` (no DNS-rebinding check). Only for an endpoint that is never
    /// reachable from a browser on another site, or that another layer protects. Together with
    /// [`allowed_origins`](Self::allowed_origins) it is refused at build.
    pub fn allow_any_origin(mut self) -> Self {
        self.conflicts.any_origin = true;
        self.allowed_origins = None;
        self
    }

    /// The name and version the results the layer writes itself carry in
    /// `_meta["io.modelcontextprotocol/serverInfo"]` on 2026-07-28 requests (denials carried as
    /// results, confirmations, approval tasks). Without it the layer uses the identity the
    /// inner server gives in its `server/discover` answer, asking for it the first time it
    /// needs it.
    ///
    /// ```
    /// let builder = mcp_gate::Gate::builder().server_info("files", "1.4.0");
    /// # let _ = builder;
    /// ```
    pub fn server_info(mut self, name: impl Into<String>, version: impl Into<String>) -> Self {
        self.server_info =
            Some(serde_json::json!({"name": name.into(), "version": version.into()}));
        self
    }

    /// Longest the layer waits for an inner answer it must read whole before passing it on (a
    /// list it filters, the answer to a conceal probe; default 30 s), from the call to the
    /// answer's last byte. A slower one is refused
    /// (`-32603`), never passed on unfiltered. Answers the layer passes on as they stream (an
    /// allowed call, an event stream) have no such limit.
    pub fn inner_read_timeout(mut self, limit: Duration) -> Self {
        self.inner_read_timeout = limit;
        self
    }

    /// Hands methods in no row of the [method table](crate::mcp::METHODS) to `evaluate`, with
    /// [`Target::Other`](crate::mcp::Target::Other) carrying the method and its params, instead
    /// of answering them `-32601` without forwarding (the default). For servers that add
    /// methods of their own. A policy that allows them must name them: the presets that name
    /// what they allow ([`allowlist`](crate::policy::allowlist),
    /// [`scopes_per_tool`](crate::policy::scopes_per_tool)) do not allow them.
    pub fn evaluate_unknown_methods(mut self) -> Self {
        self.evaluate_unknown_methods = true;
        self
    }

    /// Keys that sign the layer's continuation state (`requestState`). Without them the layer
    /// makes a random key at build: fine for one process, but states then do not survive a
    /// restart and are not accepted by other replicas.
    pub fn continuation_keys(mut self, keys: crate::continuation::Keyring) -> Self {
        self.continuation_keys = Some(keys);
        self
    }

    /// How long a continuation state stays valid (default 10 minutes, at most one day).
    pub fn continuation_ttl(mut self, ttl: Duration) -> Self {
        self.continuation_ttl = ttl;
        self
    }

    /// Where used continuation states are remembered, so each is accepted once. The default
    /// is an in-memory [`MemoryReplayStore`](crate::store::replay::MemoryReplayStore) of
    /// 100,000 live states, 1,000 per owner, which protects one process and refuses new states
    /// when full rather than forget a live one; give replicas a shared store
    /// (`store::replay::RedisReplayStore`, feature `redis`).
    ///
    /// `store` is a store of your own, an `Arc` of one, or an `Arc<dyn ReplayStore>`
    /// ([`IntoShared`]).
    pub fn replay_store(mut self, store: impl IntoShared<dyn ReplayStore>) -> Self {
        self.replay = Some(ReplaySlot(store.into_shared()));
        self
    }

    /// Adds a rate limit ([`Limit`](crate::limit::Limit)); call it once per limit. Every
    /// operation the policy would judge is counted on each limit that applies to it, before
    /// the policy is asked, and refused past its rate: HTTP 200 with the limit answer and
    /// `Retry-After` (`docs/limits.md` says the answer's shape in each era and revision).
    /// Listings and lifecycle messages are not counted. The counters are kept in memory unless
    /// [`limit_store`](Self::limit_store) says otherwise.
    pub fn rate_limit(mut self, limit: crate::limit::Limit) -> Self {
        self.limits.rules.push(limit);
        self
    }

    /// Caps the calls one principal (issuer, subject and client id together) has in flight at
    /// once ([`ConcurrencyLimit`](crate::limit::ConcurrencyLimit)); a second call replaces the
    /// first limit. Counted on the operations rate limits count, before the policy is asked
    /// (after the rate limits); a call's place is given back when its answer is complete (a
    /// streamed answer when it ends or is dropped) or the request is dropped. Past the limit:
    /// the rate-limit answer with the scope `concurrency` and `Retry-After: 1`. Without this
    /// option nothing is counted. The places are kept in the limits' store
    /// ([`limit_store`](Self::limit_store)); a store of the application's own must count calls
    /// in flight ([`LimitStore::counts_in_flight`](crate::store::limits::LimitStore::counts_in_flight)),
    /// or the gate does not build.
    pub fn concurrency_limit(mut self, limit: crate::limit::ConcurrencyLimit) -> Self {
        self.limits.concurrency = Some(limit);
        self
    }

    /// Shows `evaluate` the request extension of type `T` that outer middleware set
    /// ([`Evaluation::extension`](crate::policy::Evaluation::extension)); call it once per
    /// type. Only the types named here are copied, once per judged call: a policy sees what
    /// the application chose to show it. The client's address needs no call
    /// ([`Evaluation::client_address`](crate::policy::Evaluation::client_address)).
    pub fn evaluation_extension<T: Clone + Send + Sync + 'static>(mut self) -> Self {
        self.extension_copies.push(crate::policy::copy_of::<T>());
        self
    }

    /// Where the rate limits' counters are kept (default: a
    /// [`MemoryLimitStore`](crate::store::limits::MemoryLimitStore) of this process; share a
    /// `RedisLimitStore`, feature `redis`, between replicas, or each replica counts alone).
    pub fn limit_store(
        mut self,
        store: impl IntoShared<dyn crate::store::limits::LimitStore>,
    ) -> Self {
        self.limits.store = Some(store.into_shared());
        self
    }

    /// The name [`replay_store`](Self::replay_store) had before the three stores were named
    /// alike.
    #[deprecated(since = "0.1.0", note = "use replay_store")]
    pub fn single_use_state(self, store: impl ReplayStore) -> Self {
        self.replay_store(store)
    }

    /// Lets a continuation state be presented again until it expires. A confirmed call can
    /// then be repeated without a new confirmation for the state's lifetime: opt in only if
    /// clients legitimately resend retries.
    pub fn reusable_state(mut self) -> Self {
        self.replay = None;
        self
    }

    /// How many URL-approval or confirmation rounds one call may go through before the layer
    /// answers `undisclosed` (default 3).
    pub fn max_input_rounds(mut self, rounds: u32) -> Self {
        self.max_rounds = rounds;
        self
    }

    /// Conceal mode: an `unavailable` or `undisclosed` refusal of `tools/call`, `prompts/get`
    /// or `resources/read` is answered exactly as the inner server answers for a component
    /// that does not exist, so a caller cannot tell hidden from missing. The decision is still
    /// logged with its context id. Remedies that need the client's cooperation (scope step-up,
    /// credential, URL approval, confirmation) are never concealed.
    pub fn conceal_refusals(mut self) -> Self {
        self.conceal = true;
        self
    }

    /// Keeps listed an entry of `tools/list` (and the other listings) whose discovery decision
    /// is a remedy the client can act on: a scope step-up, a credential, a URL approval, a
    /// task or a confirmation. By default only `Decision::Allow` keeps an entry listed, so a
    /// tool that needs a step-up vanishes from the list of a token that lacks the scope: a
    /// list is a disclosure too, and hiding is the choice that fails closed. `unavailable`,
    /// `undisclosed` and an abstaining policy hide the entry either way. (A policy can also
    /// show an entry by returning `Decision::allow()` in
    /// [`Phase::Discovery`](crate::policy::Phase::Discovery).)
    pub fn list_remediable_entries(mut self) -> Self {
        self.list_remediable = true;
        self
    }

    /// The longest time a client may keep a result the layer judged for it (default 60 s).
    ///
    /// On 2026-07-28, list and read results carry cache hints (SEP-2549): `cacheScope` and
    /// `ttlMs`. Every result the layer filtered for the caller (the six listings) or whose
    /// request the policy judged (`resources/read`, `skills/get`) leaves with `cacheScope:
    /// "private"`, whatever the inner server said, and with the inner `ttlMs` capped at this.
    /// A changed policy (a Cedar reload, say) therefore reaches a client's cache within the
    /// cap. `Duration::ZERO` makes every such result stale at once.
    pub fn cache_ttl_cap(mut self, cap: Duration) -> Self {
        self.cache_ttl_cap = cap;
        self
    }

    /// Where calls held for approval (the `task` remediation) are kept. The default is an
    /// in-memory [`MemoryTaskStore`](crate::store::tasks::MemoryTaskStore) of 10,000 tasks:
    /// tasks then die with the process and are invisible to other replicas. Give production
    /// replicas a shared store (`store::tasks::RedisTaskStore`, feature `redis`).
    ///
    /// `store` is a store of your own, an `Arc` of one, or an `Arc<dyn TaskStore>` already
    /// shared, say with an approval worker ([`IntoShared`]).
    pub fn task_store(mut self, store: impl IntoShared<dyn TaskStore>) -> Self {
        self.task_store = TaskStoreSlot(Some(store.into_shared()));
        self
    }

    /// The name [`task_store`](Self::task_store) had for a store already shared; it takes
    /// an `Arc<dyn TaskStore>` itself now.
    #[deprecated(since = "0.1.0", note = "use task_store")]
    pub fn shared_task_store(self, store: Arc<dyn TaskStore>) -> Self {
        self.task_store(store)
    }

    /// At most `quota` calls of one owner (issuer, subject, client id) waiting for approval at
    /// once (default 100). Over it, a call the policy would hold gets 429 and is not held;
    /// other owners are not affected. The task store counts them as it stores the task
    /// ([`TaskStore::create_within`]): for a Redis
    /// store, across every replica.
    pub fn tasks_per_owner(mut self, quota: u64) -> Self {
        self.tasks_per_owner = quota;
        self
    }

    /// The largest call, its params as JSON, the layer holds for approval (default 1 MiB).
    /// A larger one gets 413 and is not held. The task stores also bound the bytes of all held
    /// calls together ([`MemoryTaskStore::byte_budget`],
    /// and `RedisTaskStore::byte_budget`).
    pub fn max_held_call_bytes(mut self, bytes: usize) -> Self {
        self.max_held_call_bytes = bytes;
        self
    }

    /// How long a held call waits for a decision (default one day; 1 second to 30 days).
    /// An undecided task then expires, and an expired task is never run.
    pub fn task_ttl(mut self, ttl: Duration) -> Self {
        self.task_ttl = ttl;
        self
    }

    /// How often owners are told to poll their tasks (default 5 seconds; at least 10 ms and
    /// at most the task lifetime).
    pub fn task_poll_interval(mut self, interval: Duration) -> Self {
        self.task_poll_interval = interval;
        self
    }

    /// Tells the owners of held tasks of each transition, as `notifications/tasks` on the
    /// `subscriptions/listen` streams that name the tasks (`docs/tasks.md`). Off by default:
    /// a listen is then forwarded as it came. With a shared task store, give every replica a
    /// feed they share (`TaskNotifications::through(RedisTaskFeed)`).
    pub fn task_notifications(mut self, notifications: crate::tasks::TaskNotifications) -> Self {
        self.task_notifications = Some(notifications);
        self
    }

    /// Called once for each task created, before its owner is answered: notify an approver,
    /// open a ticket. A hook that fails, panics or runs past the evaluate timeout fails the
    /// task, and the owner gets an internal error.
    pub fn on_task_start(mut self, hook: impl crate::tasks::TaskStart) -> Self {
        self.task_start = Some(TaskStartSlot(Arc::new(hook)));
        self
    }

    /// Development mode: approval URLs may use plain http on loopback hosts.
    pub fn development_mode(mut self) -> Self {
        self.development_mode = true;
        self
    }

    /// How remote key sets are refreshed. Refused at build when no issuer fetches its keys.
    #[cfg(feature = "jwks")]
    pub fn key_refresh(mut self, refresh: crate::auth::jwks::KeyRefresh) -> Self {
        self.conflicts.key_refresh = true;
        self.key_refresh = refresh;
        self
    }

    /// The HTTP client for discovery, JWKS and introspection (default: a new client on the TLS
    /// stack the features chose, following no redirects).
    ///
    /// It takes reqwest's own `Client`, not a type of this crate, on purpose: what a caller
    /// brings here is a client already built with reqwest's builder (its proxy, root
    /// certificates, TLS provider, connection pool), and a wrapper could not hide reqwest: its
    /// `From<reqwest::Client>` would name reqwest in this API all the same, so a reqwest major
    /// release is a breaking change either way. Remote keys are fetched over reqwest by
    /// definition (the `jwks` feature), so the type is the point of the option.
    #[cfg(feature = "jwks")]
    pub fn http_client(mut self, client: reqwest::Client) -> Self {
        self.http_client = Some(client);
        self
    }

    /// Accepts opaque tokens through RFC 7662 introspection.
    #[cfg(feature = "introspection")]
    pub fn introspection(
        mut self,
        introspection: crate::auth::introspection::Introspection,
    ) -> Self {
        self.introspection = Some(introspection);
        self
    }

    /// Accepts DPoP-bound tokens (RFC 9449), with the given options: a token whose `cnf` names
    /// a key (`jkt`) is then accepted only as `Authorization: DPoP <token>` with a valid proof
    /// in one `DPoP` header, each proof used once through the [replay
    /// store](Self::replay_store). The challenges name the `DPoP` scheme and its algorithms,
    /// and the metadata document `dpop_signing_alg_values_supported`. Without this option a
    /// DPoP-bound token is refused, whatever the scheme. See `docs/dpop.md`.
    pub fn dpop(mut self, dpop: crate::auth::Dpop) -> Self {
        self.dpop = Some(dpop);
        self
    }

    /// Checks every option and builds the gate. Performs no I/O: keys are fetched on first use.
    pub fn build(mut self) -> Result<Gate, ConfigError> {
        crate::crypto_backend::select();
        if jsonwebtoken::crypto::CryptoProvider::try_get_default().is_none() {
            return Err(ConfigError::CryptoBackend);
        }
        self.check_limits()?;
        self.check_conflicts()?;
        let uri = self.resource_uri()?;
        let policy = self.policy_settings(&uri)?;
        let revision = std::mem::replace(&mut self.revision, Ok(Revision::current()))?;
        let denial = self.denial_settings(revision)?;
        let (mut authenticator, issuer_ids) = self.authenticator(&uri)?;
        let revocations = self.revocation.build();
        authenticator.revocations = revocations
            .clone()
            .map(|set| set as Arc<dyn crate::auth::revocation::RevocationCheck>);
        let settings = Settings {
            body: BodySettings {
                max_bytes: self.max_body_bytes,
                timeout: self.body_timeout,
            },
            origins: self.origins(&uri),
            sessions: crate::telemetry::measured_sessions(self.built_session_store()),
            answers: AnswerSettings {
                max_bytes: MAX_ANSWER_BYTES,
                read_timeout: self.inner_read_timeout,
            },
            resource: self.resource_settings(uri, issuer_ids)?,
            authenticator,
            policy,
            denial,
            continuation: self.continuation_settings()?,
            discovery: DiscoverySettings {
                conceal: self.conceal,
                list_remediable: self.list_remediable,
                cache_ttl_cap: self.cache_ttl_cap,
                server_identity: ServerIdentity::new(self.server_info.clone()),
                lists: Default::default(),
            },
            tasks: self.task_settings(),
            revocations,
        };
        let resource = &settings.resource.uri;
        if settings.policy.policy.is_open() && !resource.is_loopback() {
            tracing::warn!(
                target: "mcp_gate",
                resource = %resource,
                "an open policy (allow_all) guards a resource that is not on loopback: every authenticated caller may do everything"
            );
        }
        tracing::info!(
            target: "mcp_gate",
            resource = %resource,
            revision = %settings.denial.revision,
            issuers = self.issuers.len(),
            "gate built"
        );
        Ok(Gate::from_settings(settings))
    }

    /// Options that would do nothing with the others given: each is refused, never ignored.
    fn check_conflicts(&self) -> Result<(), ConfigError> {
        let invalid = |field: &'static str, reason: &'static str| {
            Err(ConfigError::InvalidOption { field, reason })
        };
        if self.conflicts.session_bounds && self.session_store.is_some() {
            return invalid(
                "legacy_sessions / legacy_sessions_per_owner",
                "bounds of the in-memory session store; set them on the store given to session_store",
            );
        }
        if self.conflicts.any_origin && self.conflicts.origins_listed {
            return invalid(
                "allowed_origins / allow_any_origin",
                "either a list of origins or any origin, not both",
            );
        }
        let fetches_keys = self
            .issuers
            .iter()
            .any(|issuer| !matches!(issuer.keys, IssuerKeys::Static(_)));
        if self.conflicts.key_refresh && !fetches_keys {
            return invalid(
                "key_refresh",
                "no issuer fetches its keys (all have static keys)",
            );
        }
        Ok(())
    }

    /// The bounds every duration and size option must keep.
    fn check_limits(&self) -> Result<(), ConfigError> {
        let invalid = |field: &'static str, reason: &'static str| {
            Err(ConfigError::InvalidOption { field, reason })
        };
        if self.leeway > Duration::from_secs(300) {
            return invalid("leeway", "at most 300 seconds");
        }
        if self.max_token_bytes == 0 {
            return invalid("max_token_bytes", "must be positive");
        }
        if self.continuation_ttl.is_zero() || self.continuation_ttl > Duration::from_secs(86_400) {
            return invalid("continuation_ttl", "between 1 second and one day");
        }
        if self.task_ttl < Duration::from_secs(1)
            || self.task_ttl > Duration::from_secs(30 * 86_400)
        {
            return invalid("task_ttl", "between 1 second and 30 days");
        }
        if self.task_poll_interval < Duration::from_millis(10)
            || self.task_poll_interval > self.task_ttl
        {
            return invalid(
                "task_poll_interval",
                "at least 10 ms and at most the task lifetime",
            );
        }
        if self.tasks_per_owner == 0 || self.max_held_call_bytes == 0 {
            return invalid("tasks_per_owner / max_held_call_bytes", "must be positive");
        }
        if let Some(notifications) = &self.task_notifications
            && (notifications.per_owner == 0
                || notifications.queue == 0
                || notifications.most < notifications.per_owner)
        {
            return invalid(
                "task_notifications",
                "listens per owner and the queue at least 1, the most listens at least those per owner",
            );
        }
        if self.inner_read_timeout.is_zero() {
            return invalid("inner_read_timeout", "must be positive");
        }
        if self.max_body_bytes == 0 || self.session_capacity == 0 || self.sessions_per_owner == 0 {
            return invalid(
                "max_body_bytes / legacy_sessions / legacy_sessions_per_owner",
                "must be positive",
            );
        }
        Ok(())
    }

    /// The resource URI, canonical, under the transport rule.
    fn resource_uri(&self) -> Result<ResourceUri, ConfigError> {
        let given = self
            .resource
            .as_deref()
            .ok_or(ConfigError::MissingResource)?;
        let resource = ResourceUri::parse(given)?;
        let url = Url::parse(resource.as_str()).map_err(|_| ConfigError::InvalidResource {
            value: resource.as_str().to_owned(),
            reason: "not an absolute URL",
        })?;
        if transport_rule(&url, self.plain_http()).is_err() {
            return Err(ConfigError::InvalidResource {
                value: resource.as_str().to_owned(),
                reason: "plain http is allowed only on loopback hosts (see allow_insecure_http)",
            });
        }
        Ok(resource)
    }

    fn policy_settings(&self, resource: &ResourceUri) -> Result<PolicySettings, ConfigError> {
        let store = self
            .limits
            .store
            .clone()
            .unwrap_or_else(|| Arc::new(crate::store::limits::MemoryLimitStore::default()));
        self.check_concurrency(&*store)?;
        Ok(PolicySettings {
            policy: self.policy.0.clone().ok_or(ConfigError::MissingPolicy)?,
            shadow: self.shadow.0.clone(),
            evaluate_timeout: self.evaluate_timeout,
            evaluate_unknown_methods: self.evaluate_unknown_methods,
            tool_annotations: ToolAnnotations::new(10_000),
            observers: observers(resource, &self.audit.0),
            extension_copies: self.extension_copies.clone(),
            limits: crate::limit::Limits::new(
                self.limits.rules.clone(),
                self.limits.concurrency,
                crate::telemetry::measured_limits(store),
            ),
        })
    }

    /// The concurrency limit, if any: at least one call, a lease of 1 second to 1 day, kept in
    /// a store that counts calls in flight.
    fn check_concurrency(
        &self,
        store: &dyn crate::store::limits::LimitStore,
    ) -> Result<(), ConfigError> {
        let Some(limit) = self.limits.concurrency else {
            return Ok(());
        };
        let invalid = |reason| {
            Err(ConfigError::InvalidOption {
                field: "concurrency_limit",
                reason,
            })
        };
        if limit.max() == 0 {
            return invalid("at least one call in flight");
        }
        if limit.lease() < Duration::from_secs(1) || limit.lease() > Duration::from_secs(86_400) {
            return invalid("a lease between 1 second and one day");
        }
        if !store.counts_in_flight() {
            return invalid("the limit store does not count calls in flight");
        }
        Ok(())
    }

    /// The token verifiers (one per trusted issuer, and introspection) and the issuer ids.
    fn authenticator(
        &self,
        resource: &ResourceUri,
    ) -> Result<(Authenticator, Vec<String>), ConfigError> {
        let required_scopes: ScopeSet = self.required_scopes.iter().cloned().collect();
        #[cfg(feature = "jwks")]
        let http_client = match self.http_client.clone() {
            Some(client) => client,
            None => default_http_client()?,
        };
        let leeway = self.leeway.as_secs();
        let mut trusted = Vec::with_capacity(self.issuers.len());
        for issuer in &self.issuers {
            self.check_url("issuer", &issuer.id)?;
            if trusted
                .iter()
                .any(|t: &TrustedIssuer| t.issuer == issuer.id)
            {
                return Err(ConfigError::DuplicateIssuer(issuer.id.clone()));
            }
            #[cfg(feature = "jwks")]
            let keys = self.key_source(issuer, &http_client)?;
            #[cfg(not(feature = "jwks"))]
            let keys = self.key_source(issuer)?;
            trusted.push(TrustedIssuer::new(
                issuer.id.clone(),
                keys,
                resource.as_str(),
                leeway,
            ));
        }
        let issuer_ids: Vec<String> = self.issuers.iter().map(|i| i.id.clone()).collect();
        #[cfg(feature = "introspection")]
        let introspector = match self.introspection.clone() {
            Some(config) => Some(crate::auth::introspection::Introspector::new(
                config,
                http_client.clone(),
                issuer_ids.clone(),
                resource.as_str().to_owned(),
                leeway,
            )?),
            None => None,
        };
        #[cfg(feature = "introspection")]
        let has_introspection = introspector.is_some();
        #[cfg(not(feature = "introspection"))]
        let has_introspection = false;
        if trusted.is_empty() && !has_introspection {
            return Err(ConfigError::NoTokenSource);
        }
        let authenticator = Authenticator {
            jwt: (!trusted.is_empty()).then(|| JwtVerifier::new(trusted, self.typ)),
            #[cfg(feature = "introspection")]
            introspector,
            cache: (self.cache_capacity > 0).then(|| TokenCache::new(self.cache_capacity)),
            cache_max_age: self.cache_max_age,
            required_scopes,
            hierarchy: self.hierarchy.clone(),
            max_token_bytes: self.max_token_bytes,
            dpop: self.dpop_settings(resource)?,
            revocations: None,
        };
        Ok((authenticator, issuer_ids))
    }

    /// Where one issuer's keys come from: given, or fetched from its JWK set.
    fn key_source(
        &self,
        issuer: &Issuer,
        #[cfg(feature = "jwks")] http_client: &reqwest::Client,
    ) -> Result<KeySource, ConfigError> {
        match &issuer.keys {
            IssuerKeys::Static(keys) => {
                if keys.is_empty() {
                    return Err(ConfigError::NoUsableKey(issuer.id.clone()));
                }
                Ok(KeySource::Static(Arc::new(keys.clone().into_key_set())))
            }
            #[cfg(feature = "jwks")]
            remote => {
                use crate::auth::jwks::{JwksLocation, RemoteJwks};
                let location = match remote {
                    IssuerKeys::JwksUri(uri) => JwksLocation::Uri(self.check_url("jwks_uri", uri)?),
                    _ => JwksLocation::Discover,
                };
                Ok(KeySource::Remote(Arc::new(RemoteJwks::new(
                    issuer.id.clone(),
                    location,
                    http_client.clone(),
                    self.key_refresh.clone(),
                ))))
            }
            #[cfg(not(feature = "jwks"))]
            _ => Err(ConfigError::JwksFeatureDisabled(issuer.id.clone())),
        }
    }

    /// The resource, its metadata document and where it is served.
    /// DPoP, checked: its proofs' `htu` is the resource, their `jti` go to the replay store.
    fn dpop_settings(
        &self,
        resource: &ResourceUri,
    ) -> Result<Option<crate::auth::dpop_bind::DpopSettings>, ConfigError> {
        let Some(dpop) = &self.dpop else {
            return Ok(None);
        };
        dpop.settings(resource.as_str(), self.replay.is_some())
            .map(Some)
    }

    fn resource_settings(
        &self,
        uri: ResourceUri,
        issuer_ids: Vec<String>,
    ) -> Result<ResourceSettings, ConfigError> {
        let required_scopes: ScopeSet = self.required_scopes.iter().cloned().collect();
        let supported = self.scopes_supported.clone().unwrap_or_else(|| {
            let mut all: ScopeSet = required_scopes.clone();
            all.extend(self.hierarchy.scopes().map(str::to_owned));
            all.into_iter().collect()
        });
        for scope in required_scopes
            .iter()
            .chain(&supported)
            .map(String::as_str)
            .chain(self.hierarchy.scopes())
        {
            if !is_valid_scope_token(scope) {
                return Err(ConfigError::InvalidScope(scope.to_owned()));
            }
        }
        if let Some(doc) = &self.resource_documentation {
            self.check_url("resource_documentation", doc)?;
        }
        let metadata = ProtectedResourceMetadata {
            resource: uri.as_str().to_owned(),
            authorization_servers: self.authorization_servers.clone().unwrap_or(issuer_ids),
            scopes_supported: supported,
            bearer_methods_supported: vec!["header".to_owned()],
            resource_name: self.resource_name.clone(),
            resource_documentation: self.resource_documentation.clone(),
            authorization_details_types_supported: self.authorization_details_types.clone(),
            dpop_signing_alg_values_supported: self
                .dpop
                .as_ref()
                .map(crate::auth::Dpop::algorithm_names)
                .unwrap_or_default(),
            dpop_bound_access_tokens_required: self
                .dpop
                .as_ref()
                .filter(|dpop| dpop.is_required())
                .map(|_| true),
        };
        let mut metadata_paths = vec![uri.metadata_path()];
        if !uri.path().is_empty() {
            metadata_paths.push(METADATA_WELL_KNOWN.to_owned());
        }
        Ok(ResourceSettings {
            metadata_url: uri.metadata_url(),
            metadata_bytes: metadata.to_bytes(),
            metadata,
            metadata_paths,
            endpoint_scope: required_scopes
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join(" "),
            uri,
        })
    }

    fn origins(&self, resource: &ResourceUri) -> Origins {
        match &self.allowed_origins {
            None => Origins::Any,
            Some(extra) => {
                let mut list = vec![resource.origin().to_owned()];
                list.extend(extra.iter().cloned());
                Origins::Only(list)
            }
        }
    }

    fn built_session_store(&self) -> Arc<dyn SessionStore> {
        match &self.session_store {
            Some(slot) => slot.0.clone(),
            None => Arc::new(MemorySessionStore::new(
                usize::try_from(self.session_capacity).unwrap_or(usize::MAX),
                usize::try_from(self.sessions_per_owner).unwrap_or(usize::MAX),
                self.session_idle,
            )),
        }
    }

    fn continuation_settings(&self) -> Result<ContinuationSettings, ConfigError> {
        Ok(ContinuationSettings {
            state: crate::continuation::StateCodec {
                keys: match self.continuation_keys.clone() {
                    Some(keys) => keys,
                    None => crate::continuation::Keyring::random()?,
                },
                ttl: self.continuation_ttl,
                replay: self
                    .replay
                    .clone()
                    .map(|slot| crate::telemetry::measured_replay(slot.0)),
            },
            max_rounds: self.max_rounds,
            development_mode: self.development_mode,
            cursor_ttl: Duration::from_secs(3600),
        })
    }

    fn task_settings(&self) -> TaskSettings {
        let store = crate::telemetry::measured_tasks(
            self.task_store
                .0
                .clone()
                .unwrap_or_else(|| Arc::new(MemoryTaskStore::default())),
        );
        let (store, notifications) = self.task_notifications_settings(store);
        TaskSettings {
            store,
            notifications,
            ttl_ms: duration_ms(self.task_ttl),
            poll_interval_ms: duration_ms(self.task_poll_interval),
            start: self.task_start.clone().map(|slot| slot.0),
            per_owner: usize::try_from(self.tasks_per_owner).unwrap_or(usize::MAX),
            max_call_bytes: self.max_held_call_bytes,
        }
    }

    /// With task notifications: the store publishing its transitions, and the listens that
    /// hear them. Without: the store as it is, and none.
    fn task_notifications_settings(
        &self,
        store: Arc<dyn TaskStore>,
    ) -> (
        Arc<dyn TaskStore>,
        Option<Arc<crate::tasks::listeners::Listeners>>,
    ) {
        let Some(notifications) = &self.task_notifications else {
            return (store, None);
        };
        let listeners = Arc::new(crate::tasks::listeners::Listeners::new(
            notifications.per_owner,
            notifications.most,
            notifications.queue,
        ));
        notifications.feed.deliver_to(listeners.clone());
        let feed = Arc::clone(&notifications.feed);
        let store = Arc::new(crate::store::tasks::Announcing::new(store, feed));
        (store, Some(listeners))
    }

    /// Where plain `http` URLs are accepted in configuration.
    fn plain_http(&self) -> PlainHttp {
        if self.allow_insecure_http {
            PlainHttp::Anywhere
        } else {
            PlainHttp::OnLoopback
        }
    }

    fn denial_settings(&self, revision: Revision) -> Result<DenialSettings, ConfigError> {
        if (-32768..=-32020).contains(&self.denial_error_code) {
            return Err(ConfigError::InvalidOption {
                field: "denial_error_code",
                reason: "codes -32768..=-32020 are reserved by JSON-RPC and MCP",
            });
        }
        if !matches!(self.credential_status.as_u16(), 401 | 403) {
            return Err(ConfigError::InvalidOption {
                field: "credential_status",
                reason: "401 or 403",
            });
        }
        let beside = matches!(
            revision.family(),
            Family::ResultBased {
                envelope_beside_challenge: true
            }
        );
        if self.credential_delivery == CredentialDelivery::Both && !beside {
            return Err(ConfigError::NotInRevision(
                "credential delivery Both needs a revision that allows an envelope beside a challenge",
            ));
        }
        Ok(DenialSettings {
            revision,
            error_code: self.denial_error_code,
            credential_delivery: self.credential_delivery,
            credential_status: self.credential_status,
        })
    }

    /// Parses a URL option and enforces HTTPS except on loopback (or when allowed).
    fn check_url(&self, field: &'static str, value: &str) -> Result<Url, ConfigError> {
        let invalid = |reason: &'static str| {
            if field == "issuer" {
                ConfigError::InvalidIssuer {
                    value: value.to_owned(),
                    reason,
                }
            } else {
                ConfigError::InvalidUrl {
                    field,
                    value: value.to_owned(),
                    reason,
                }
            }
        };
        let url = Url::parse(value).map_err(|_| invalid("not an absolute URL"))?;
        if url.fragment().is_some() {
            return Err(invalid("a fragment is not allowed"));
        }
        if field == "issuer" && url.query().is_some() {
            return Err(invalid("a query is not allowed"));
        }
        match transport_rule(&url, self.plain_http()) {
            Ok(()) => Ok(url),
            Err(TransportProblem::NoHost) => Err(invalid("a host is required")),
            Err(TransportProblem::PlainHttp) => Err(invalid(
                "plain http is allowed only on loopback hosts (see allow_insecure_http)",
            )),
            Err(TransportProblem::OtherScheme) => Err(invalid("scheme must be https")),
        }
    }
}

/// The HTTP client the layer makes when none is given: no redirects. reqwest panics when its
/// TLS stack has no crypto provider (the `rustls-no-provider` feature without one installed);
/// that is a configuration error here, not a panic.
#[cfg(feature = "jwks")]
fn default_http_client() -> Result<reqwest::Client, ConfigError> {
    let build = || {
        reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
    };
    match std::panic::catch_unwind(build) {
        Ok(built) => built.map_err(|e| ConfigError::HttpClient(e.to_string())),
        Err(_) => Err(ConfigError::HttpClient(
            "the TLS stack has no crypto provider: with `rustls-no-provider`, install a rustls CryptoProvider before building the gate".into(),
        )),
    }
}

/// Which options were given whose effect depends on others (see `check_conflicts`).
#[derive(Clone, Copy, Debug, Default)]
struct Conflicts {
    session_bounds: bool,
    origins_listed: bool,
    any_origin: bool,
    key_refresh: bool,
}

/// A duration in whole milliseconds, saturating.
fn duration_ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Who is told of every decision: the decision log, then the audit sinks, then (feature
/// `metrics`) the counters.
fn observers(resource: &ResourceUri, audit: &[Arc<dyn AuditSink>]) -> crate::judge::Observers {
    let mut observers = crate::judge::Observers::default();
    if !audit.is_empty() {
        let sinks = audit.to_vec();
        observers.push(Arc::new(AuditObserver::new(resource.as_str(), sinks)));
    }
    #[cfg(feature = "metrics")]
    observers.push(std::sync::Arc::new(crate::telemetry::DecisionMetrics));
    observers
}

// Revocation (`docs/revocation.md`).
impl GateBuilder {
    /// Checks every request against a revocation set (`Gate::revoke` fills it): a
    /// [`MemoryRevocations`](crate::store::revocations::MemoryRevocations) for one process, a
    /// `RedisRevocations` (feature `redis`) shared by replicas. Without this option nothing
    /// is checked and the request path is unchanged.
    pub fn revocations(
        mut self,
        store: impl IntoShared<dyn crate::store::revocations::RevocationStore>,
    ) -> Self {
        self.revocation.store = Some(store.into_shared());
        self
    }

    /// What the gate does while a shared revocation set's feed is down or stale: refuse
    /// (`FeedOutage::Refuse`, the default) or accept within a bounded staleness.
    pub fn revocation_feed_outage(mut self, outage: crate::revocation::FeedOutage) -> Self {
        self.revocation.outage = outage;
        self
    }

    /// The longest lifetime of a token the issuers hand out (24 hours by default): how long
    /// a revocation by subject or client, or of a token whose `exp` was not given, lives.
    pub fn max_token_lifetime(mut self, lifetime: Duration) -> Self {
        self.revocation.max_token_lifetime = lifetime;
        self
    }
}
