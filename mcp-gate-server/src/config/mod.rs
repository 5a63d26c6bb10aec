//! The gateway's configuration: one TOML file, documented key by key in
//! `mcp-gate-server/gateway.example.toml` (which the tests load) and `docs/gateway.md`.
//!
//! Reading a file checks everything that can be checked without the network: the TOML, every
//! key's name and type (an unknown key is refused, so a typo never silently leaves a default
//! in force), every value's form (URLs, durations, addresses), the settings that exclude each
//! other, and that each secret's environment variable is set. A refusal names the file, the
//! line and the key ([`ConfigError`]). Relative paths are taken from the file's folder.
//! Secrets are never written in the file: it names the environment variables that hold them.

mod error;
mod identity;
mod values;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

pub use error::{ConfigError, ConfigErrorKind};
pub use identity::Identity;
pub use values::{HttpUrl, SecretVariable, Span};

/// A configuration file, read and checked.
#[derive(Debug)]
pub struct Config {
    /// The file it was read from.
    pub path: PathBuf,
    /// The folder relative paths are taken from.
    pub base: PathBuf,
    /// What the file says.
    pub file: File,
}

/// Everything a configuration file may say. Each table is optional unless said otherwise.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct File {
    /// Where MCP clients connect (`127.0.0.1:8080` by default).
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// The MCP server behind the gateway. Required.
    pub upstream: Upstream,
    /// What the gateway protects: the resource URI clients connect to. Required.
    pub resource: Resource,
    /// The trusted authorization servers (`[[issuer]]`, at least one).
    #[serde(default, rename = "issuer")]
    pub issuers: Vec<Spanned<IssuerEntry>>,
    /// A development issuer in the process, instead of `[[issuer]]` (loopback only).
    pub development_issuer: Option<Spanned<DevelopmentIssuer>>,
    /// How access tokens are checked.
    #[serde(default)]
    pub tokens: Tokens,
    /// What decides.
    pub policy: Spanned<PolicySection>,
    /// How denials are said.
    #[serde(default)]
    pub denials: Denials,
    /// Bounds on what clients send and how long answers are read and kept.
    #[serde(default)]
    pub requests: Requests,
    /// Legacy (stateful) sessions kept in memory.
    #[serde(default)]
    pub sessions: Sessions,
    /// DPoP-bound tokens (RFC 9449).
    pub dpop: Option<Spanned<DpopEntry>>,
    /// Continuation-state keys.
    #[serde(default)]
    pub continuation: Continuation,
    /// Held calls (tasks).
    #[serde(default)]
    pub tasks: Tasks,
    /// Shared state for replicas.
    pub redis: Option<Spanned<Redis>>,
    /// Rate and concurrency limits.
    #[serde(default)]
    pub limits: Limits,
    /// Revocation.
    pub revocation: Option<Revocation>,
    /// The operations listener: health, readiness, metrics, revocation, the task console.
    pub operations: Option<Spanned<Operations>>,
    /// TLS termination.
    pub tls: Option<Tls>,
    /// `X-Forwarded-*` from a load balancer in front.
    #[serde(default)]
    pub forwarded: Forwarded,
    /// Audit records.
    pub audit: Option<Audit>,
    /// Reloading.
    #[serde(default)]
    pub reload: Reload,
    /// The signed identity the upstream gets for each caller (`[identity]`, opt-in).
    pub identity: Option<Spanned<Identity>>,
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 8080))
}

/// `[upstream]`: the MCP server the gateway forwards allowed requests to.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Upstream {
    /// The upstream's MCP endpoint (`http://127.0.0.1:3000/mcp`).
    pub url: HttpUrl,
    /// How long opening a connection may take (default 5 s).
    #[serde(default = "default_connect_timeout")]
    pub connect_timeout: Span,
    /// How long the upstream may take to start its answer (its status and headers; a
    /// stream may then stay open). Default 60 s.
    #[serde(default = "default_response_timeout")]
    pub response_timeout: Span,
    /// How long an idle pooled connection is kept (default 90 s).
    #[serde(default = "default_idle_timeout")]
    pub idle_timeout: Span,
    /// Idle connections kept per upstream host (default 64).
    #[serde(default = "default_max_idle")]
    pub max_idle_connections: usize,
    /// The upstream speaks legacy MCP only (2025-11-25 and earlier, as the TypeScript SDK's
    /// server does): the gateway answers modern clients' `server/discover` itself and carries
    /// each modern request to the upstream in a legacy session of its own
    /// ([`crate::proxy::bridge`]). Off by default: every request goes as it came.
    #[serde(default)]
    pub legacy_only: bool,
}

fn default_connect_timeout() -> Span {
    Span(std::time::Duration::from_secs(5))
}
fn default_response_timeout() -> Span {
    Span(std::time::Duration::from_secs(60))
}
fn default_idle_timeout() -> Span {
    Span(std::time::Duration::from_secs(90))
}
fn default_max_idle() -> usize {
    64
}

/// `[resource]`: what clients see of the protected server.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Resource {
    /// The resource URI (RFC 8707) clients connect to and tokens must name as audience; its
    /// path is where the gateway serves MCP.
    pub uri: Spanned<HttpUrl>,
    /// A human-readable name in the metadata document.
    pub name: Option<String>,
    /// A documentation URL in the metadata document.
    pub documentation: Option<HttpUrl>,
    /// Browser origins allowed besides the resource's own.
    #[serde(default)]
    pub allowed_origins: Vec<String>,
    /// Plain `http` issuers and resource off loopback (development only).
    #[serde(default)]
    pub allow_insecure_http: bool,
    /// The server's name and version stamped on results the gateway writes itself.
    pub server_info: Option<ServerInfo>,
    /// `authorization_servers` in the metadata document (default: the trusted issuers).
    pub authorization_servers: Option<Vec<HttpUrl>>,
    /// Accept every browser `Origin` (no DNS-rebinding check); excludes `allowed-origins`.
    #[serde(default)]
    pub allow_any_origin: bool,
}

/// `[resource.server-info]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ServerInfo {
    /// `serverInfo.name`.
    pub name: String,
    /// `serverInfo.version`.
    pub version: String,
}

/// `[[issuer]]`: one trusted authorization server.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct IssuerEntry {
    /// The issuer identifier (`iss`); its keys are found by discovery unless `jwks-uri` or
    /// `jwks-file`.
    pub url: HttpUrl,
    /// The JWK set URL, instead of discovery.
    pub jwks_uri: Option<HttpUrl>,
    /// A file holding the issuer's public JWK set, instead of fetching it (read again on
    /// reload), relative to this file.
    pub jwks_file: Option<PathBuf>,
}

/// `[development-issuer]`: an OAuth issuer inside the gateway, for trying it out with no
/// authorization server: `client_credentials` for one fixed client (`dev-client` /
/// `dev-secret`), JWTs signed with a key made at start. Loopback only; never for real data.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct DevelopmentIssuer {
    /// Where it listens (a loopback address; port 0 picks a free one). Default
    /// `127.0.0.1:0`.
    #[serde(default = "default_dev_listen")]
    pub listen: SocketAddr,
    /// The scopes it grants (default `mcp:read mcp:write mcp:admin`).
    #[serde(default = "default_dev_scopes")]
    pub scopes: Vec<String>,
}

fn default_dev_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

fn default_dev_scopes() -> Vec<String> {
    ["mcp:read", "mcp:write", "mcp:admin"]
        .map(String::from)
        .to_vec()
}

/// `[tokens]`: how access tokens are checked.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Tokens {
    /// Scopes every request needs.
    #[serde(default)]
    pub required_scopes: Vec<String>,
    /// Clock leeway for `exp` and `nbf`.
    pub leeway: Option<Span>,
    /// Verified tokens kept in memory.
    pub cache_capacity: Option<usize>,
    /// How long a verified token is kept at most.
    pub cache_max_age: Option<Span>,
    /// The largest token accepted, in bytes.
    pub max_token_bytes: Option<usize>,
    /// Scopes listed in the metadata document.
    pub scopes_supported: Option<Vec<String>>,
    /// `authorization_details` types listed in the metadata document.
    pub authorization_details_types: Option<Vec<String>>,
    /// Which JWT `typ` headers are accepted.
    pub typ: Option<TypEntry>,
    /// Scopes that imply others: `"mcp:admin" = ["mcp:read", "mcp:write"]`.
    #[serde(default)]
    pub scope_hierarchy: BTreeMap<String, Vec<String>>,
    /// How remote key sets are fetched and refreshed.
    pub key_refresh: Option<KeyRefreshEntry>,
    /// Opaque tokens through RFC 7662 introspection.
    pub introspection: Option<Spanned<IntrospectionEntry>>,
}

/// `[tokens] typ`: which JWT `typ` headers are accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TypEntry {
    /// `at+jwt`, `JWT`, or none (the default: many issuers omit it).
    AtJwtOrJwt,
    /// Only `at+jwt`, as RFC 9068 requires.
    AtJwt,
}

/// `[tokens.key-refresh]`: how remote key sets are fetched and refreshed.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct KeyRefreshEntry {
    /// The least time between two fetches an unknown `kid` sets off.
    pub cooldown: Option<Span>,
    /// The age after which a key set is refreshed in the background.
    pub interval: Option<Span>,
    /// How long one discovery or key set request may take.
    pub timeout: Option<Span>,
    /// The most keys taken from one key set.
    pub max_keys: Option<usize>,
    /// The largest discovery or key set document read, in bytes.
    pub max_document_bytes: Option<usize>,
}

/// `[tokens.introspection]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct IntrospectionEntry {
    /// The introspection endpoint.
    pub endpoint: HttpUrl,
    /// The gateway's client id at the authorization server.
    pub client_id: String,
    /// The environment variable holding the client secret.
    pub client_secret_env: SecretVariable,
    /// Send the credentials in the form body (`client_secret_post`) instead of HTTP Basic.
    #[serde(default)]
    pub client_secret_post: bool,
}

/// `[policy]`: what decides. Exactly one of `cedar` and `allow-all`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct PolicySection {
    /// A Cedar policy folder (`*.cedar`, `schema.cedarschema`, optional `entities.json` and
    /// `tools.json`), relative to this file.
    pub cedar: Option<PathBuf>,
    /// The id of the `McpServer` resource tool calls are made on, in Cedar.
    pub cedar_server: Option<String>,
    /// Token claims copied into Cedar's `principal.claims`.
    #[serde(default)]
    pub claims: Vec<String>,
    /// A Cedar folder asked beside the live policy, never acted on (differences are logged,
    /// audited and counted).
    pub shadow_cedar: Option<PathBuf>,
    /// Allow every request whose token is valid and carries the required scopes, except calls
    /// of tools the upstream lists as destructive (`destructiveHint`) or does not list. Must be
    /// said explicitly when there is no `cedar`.
    #[serde(default)]
    pub allow_all: bool,
    /// With `allow-all`: destructive tools too.
    #[serde(default)]
    pub allow_destructive: bool,
    /// How long a decision may take before the request is refused.
    pub evaluate_timeout: Option<Span>,
    /// Ask the policy about methods the method table does not know.
    #[serde(default)]
    pub evaluate_unknown_methods: bool,
    /// Approval URLs the policy gives may be plain `http` on loopback hosts (development).
    #[serde(default)]
    pub development_mode: bool,
}

/// `[denials]`: how refusals are said.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Denials {
    /// The SEP-2643 revision denials are rendered in: `"current"` or a 40-hex revision id.
    pub revision: Option<String>,
    /// The JSON-RPC error code of a denial.
    pub error_code: Option<i64>,
    /// Say a refusal the caller cannot act on as an unknown tool (`conceal`).
    #[serde(default)]
    pub conceal_refusals: bool,
    /// List entries a remedy would unlock (a new token, an approval) instead of hiding them.
    #[serde(default)]
    pub list_remediable_entries: bool,
    /// How many elicitation rounds one call may take.
    pub max_input_rounds: Option<u32>,
    /// How a credential remedy is delivered: `"challenge"`, `"result"` or `"both"`.
    pub credential_delivery: Option<DeliveryEntry>,
    /// The HTTP status of the credential challenge: 401 or 403.
    pub credential_status: Option<u16>,
}

/// `[denials] credential-delivery`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DeliveryEntry {
    /// A `WWW-Authenticate` challenge (the default).
    Challenge,
    /// A result with the remedy, HTTP 200, on modern requests (legacy ones get the challenge).
    Result,
    /// The challenge, with the result as its body, where the revision allows it.
    Both,
}

/// `[requests]`: bounds on what clients send and how long the gate reads.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Requests {
    /// The largest request body read, in bytes (larger: 413).
    pub max_body_bytes: Option<usize>,
    /// How long a whole request body may take to arrive (slower: 408).
    pub body_read_timeout: Option<Span>,
    /// How long the gate waits for an upstream answer it must read whole (a list it filters).
    pub inner_read_timeout: Option<Span>,
    /// The longest a client may keep a result the gate judged for it (SEP-2549 `ttlMs`).
    pub cache_ttl_cap: Option<Span>,
}

/// `[sessions]`: legacy (stateful) sessions. Their store is made at start: changing this table
/// takes a restart.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Sessions {
    /// Sessions kept at most (a new one past it: 503).
    pub capacity: Option<usize>,
    /// Sessions one owner may have open (a new one past it: 429).
    pub per_owner: Option<usize>,
    /// How long a session without a request is kept.
    pub idle: Option<Span>,
}

/// `[dpop]`: DPoP-bound tokens (RFC 9449).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct DpopEntry {
    /// The proof algorithms accepted (asymmetric JWS names: `"ES256"`, `"EdDSA"`, ...).
    pub algorithms: Option<Vec<String>>,
    /// Accept only DPoP-bound tokens.
    #[serde(default)]
    pub required: bool,
    /// The environment variable holding the nonce key (32 bytes or more, the same on every
    /// replica): every proof must then carry a nonce the gateway issued.
    pub nonce_key_env: Option<SecretVariable>,
    /// How long a nonce window lasts (1 s to 1 h; default 5 min).
    pub nonce_lifetime: Option<Span>,
    /// How old a proof may be (default 60 s, at most 5 min).
    pub max_age: Option<Span>,
    /// How far ahead of this clock a proof may be (default 5 s, at most 1 min).
    pub leeway: Option<Span>,
}

/// `[continuation]`: the keys that sign continuation states (a retry's proof that it
/// continues a denial). Every replica needs the same.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Continuation {
    /// The environment variable holding the keys, `<id>:<base64url secret>` separated by
    /// commas or new lines, the first signing (default `MCP_GATE_CONTINUATION_KEYS`). Read
    /// when set; without it (and without `keys-file`) a random key is made at start.
    #[serde(default = "default_keys_env")]
    pub keys_env: SecretVariable,
    /// A file holding the keys instead, relative to this file.
    pub keys_file: Option<PathBuf>,
    /// How long a continuation state is good for.
    pub ttl: Option<Span>,
    /// Refuse to start without shared keys (set it on replicas).
    #[serde(default)]
    pub require_keys: bool,
    /// Accept a continuation state more than once until it expires (a confirmed call can then
    /// be repeated without a new confirmation).
    #[serde(default)]
    pub reusable_state: bool,
}

impl Default for Continuation {
    fn default() -> Self {
        Self {
            keys_env: default_keys_env(),
            keys_file: None,
            ttl: None,
            require_keys: false,
            reusable_state: false,
        }
    }
}

fn default_keys_env() -> SecretVariable {
    SecretVariable("MCP_GATE_CONTINUATION_KEYS".to_owned())
}

/// `[tasks]`: calls held until someone approves them.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Tasks {
    /// How long a held call waits for a decision.
    pub ttl: Option<Span>,
    /// Held calls one owner may have at once.
    pub per_owner: Option<u64>,
    /// The largest call that may be held, in bytes.
    pub max_held_call_bytes: Option<usize>,
    /// How often clients are told to poll.
    pub poll_interval: Option<Span>,
    /// `[tasks.notifications]`: held tasks' owners told of each transition as
    /// `notifications/tasks` on their `subscriptions/listen` streams. Off without the table.
    pub notifications: Option<TaskNotifications>,
}

/// `[tasks.notifications]`: the bounds on task listens (the library's defaults when absent).
/// Through `[redis]` when it is set, so that a transition on one replica reaches a listen on
/// another. Turning the table on or off takes a restart; its bounds reload.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct TaskNotifications {
    /// Task listens one owner may have open at once in this process (default 8).
    pub listens_per_owner: Option<usize>,
    /// Task listens this process keeps open at once, all owners together (default 10,000).
    pub most_listens: Option<usize>,
    /// Notifications waiting for one slow stream (default 64); a slower reader loses the
    /// newest.
    pub queue: Option<usize>,
}

/// `[redis]`: state shared by replicas (held calls, used continuation states, legacy session
/// bindings, rate-limit counters, revocations).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Redis {
    /// `redis://host:port/db`, `rediss://…`, any node of a cluster, or
    /// `redis+sentinel://host:port,host:port/master-name`. No password here.
    pub url: String,
    /// The environment variable holding the password, when Redis needs one.
    pub password_env: Option<SecretVariable>,
    /// The prefix of every key (default `mcp-gate`); replicas of one gateway share it.
    #[serde(default = "default_namespace")]
    pub namespace: String,
}

fn default_namespace() -> String {
    "mcp-gate".to_owned()
}

/// `[limits]`: rate limits (`[[limits.rate]]`) and a concurrency cap.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Limits {
    /// Rate limits, each counted on its own.
    #[serde(default)]
    pub rate: Vec<Spanned<RateEntry>>,
    /// At most this many calls of one principal in flight at once.
    pub concurrency: Option<u32>,
    /// How long a call's place in flight is leased.
    pub concurrency_lease: Option<Span>,
}

/// `[[limits.rate]]`: `requests` per `period`, counted per `scope`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct RateEntry {
    /// What is counted apart: `principal`, `principal-and-tool`, `client`, `tool`.
    pub scope: RateScope,
    /// Calls allowed per period.
    pub requests: u32,
    /// The period.
    pub period: Span,
    /// Calls allowed at once above the steady rate (default: `requests`).
    pub burst: Option<u32>,
    /// Count only calls of this tool.
    pub tool: Option<String>,
}

/// What a rate limit counts apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RateScope {
    /// Each principal (issuer, subject, client).
    Principal,
    /// Each principal and tool.
    PrincipalAndTool,
    /// Each client id.
    Client,
    /// Each tool, whoever calls.
    Tool,
}

/// `[revocation]`: withdrawn tokens, subjects and clients refused on every replica.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Revocation {
    /// While the shared feed is down: refuse (absent, the default), or accept for at most
    /// this long since its last confirmed sync.
    pub accept_stale_for: Option<Span>,
    /// The longest lifetime of a token the issuers hand out.
    pub max_token_lifetime: Option<Span>,
}

/// `[operations]`: the listener operators use (keep it off the public network).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Operations {
    /// Where `/healthz`, `/readyz`, `/metrics`, `/revoke` and `/tasks` listen.
    pub listen: SocketAddr,
    /// Serve `/metrics` (Prometheus text). Default on.
    #[serde(default = "yes")]
    pub metrics: bool,
    /// Serve `POST /revoke` (needs `[revocation]`). Default on when `[revocation]` is set.
    pub revoke: Option<bool>,
    /// Serve the held-call console (`/tasks`). Default on.
    #[serde(default = "yes")]
    pub tasks: bool,
    /// Allow a non-loopback address (anyone reaching it can approve held calls and revoke).
    #[serde(default)]
    pub allow_remote: bool,
}

fn yes() -> bool {
    true
}

/// `[tls]`: terminate TLS on the client listener with rustls.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Tls {
    /// The certificate chain, PEM, relative to this file.
    pub certificate: PathBuf,
    /// The private key, PEM (PKCS#8, PKCS#1 or SEC1), relative to this file.
    pub private_key: PathBuf,
}

/// `[forwarded]`: headers a load balancer in front adds. Off by default: a client could
/// otherwise choose the address a policy reads.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Forwarded {
    /// Take the client's address from the last `X-Forwarded-For` entry (the one the
    /// load balancer appended).
    #[serde(default)]
    pub trust: bool,
}

/// `[audit]`: one JSON line per decision and per refused authentication.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Audit {
    /// The file records are appended to, relative to this file.
    pub file: PathBuf,
}

/// `[reload]`: how changes to this file and the policies are picked up.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Reload {
    /// How often the file and the policy folder are checked for changes (`"0s"`: never;
    /// SIGHUP still reloads). Default 2 s.
    #[serde(default = "default_watch")]
    pub watch_interval: Span,
}

impl Default for Reload {
    fn default() -> Self {
        Self {
            watch_interval: default_watch(),
        }
    }
}

fn default_watch() -> Span {
    Span(std::time::Duration::from_secs(2))
}

impl Config {
    /// Reads and checks the file at `path`.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|error| ConfigError::new(path, None, ConfigErrorKind::Read(error)))?;
        Self::parse(path, &text)
    }

    /// Checks `text`, the content of the file at `path`.
    pub fn parse(path: &Path, text: &str) -> Result<Self, ConfigError> {
        let file: File =
            toml::from_str(text).map_err(|error| error::from_toml(path, text, &error))?;
        let base = path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."));
        let config = Config {
            path: path.to_path_buf(),
            base,
            file,
        };
        config.check(text)?;
        Ok(config)
    }

    /// A path the file names, taken from the file's folder when relative.
    pub fn resolve(&self, path: &Path) -> PathBuf {
        if path.is_absolute() {
            path.to_path_buf()
        } else {
            self.base.join(path)
        }
    }

    /// An error about `key` (`[table] name`), at the line of `name` in the table that starts
    /// at `span` in `text` (the table's own line when the key is the table).
    fn invalid(
        &self,
        text: &str,
        span: std::ops::Range<usize>,
        key: &str,
        message: impl Into<String>,
    ) -> ConfigError {
        ConfigError::new(
            &self.path,
            Some(key_line(text, span.start, key)),
            ConfigErrorKind::Invalid {
                key: key.to_owned(),
                message: message.into(),
            },
        )
    }

    /// An error about `key` of a table that is not spanned (found by its header), at the
    /// key's line, or the table's, or none when the file does not write the table.
    fn invalid_in(&self, text: &str, table: &str, key: &str, kind: ConfigErrorKind) -> ConfigError {
        let line =
            table_offset(text, table).map(|from| key_line(text, from, &format!("{table} {key}")));
        ConfigError::new(&self.path, line, kind)
    }

    /// `[dpop]`: the algorithms' names, and the nonce key's variable and length.
    fn check_dpop(&self, text: &str, dpop: &Spanned<DpopEntry>) -> Result<(), ConfigError> {
        let entry = dpop.get_ref();
        let at = |key: &str, kind| {
            ConfigError::new(
                &self.path,
                Some(key_line(text, dpop.span().start, key)),
                kind,
            )
        };
        for name in entry.algorithms.iter().flatten() {
            if name.parse::<jsonwebtoken::Algorithm>().is_err() {
                return Err(at(
                    "[dpop] algorithms",
                    invalid_kind(
                        "[dpop] algorithms",
                        format!("`{name}` is not a JWS algorithm name (\"ES256\", \"EdDSA\", ...)"),
                    ),
                ));
            }
        }
        match (&entry.nonce_key_env, entry.nonce_lifetime) {
            (None, Some(_)) => Err(at(
                "[dpop] nonce-lifetime",
                invalid_kind("[dpop] nonce-lifetime", "needs `nonce-key-env`"),
            )),
            (Some(variable), _) => match variable.read() {
                None => Err(at(
                    "[dpop] nonce-key-env",
                    ConfigErrorKind::MissingSecret {
                        key: "[dpop] nonce-key-env".to_owned(),
                        variable: variable.0.clone(),
                    },
                )),
                Some(key) if key.len() < DPOP_NONCE_KEY_BYTES => Err(at(
                    "[dpop] nonce-key-env",
                    invalid_kind(
                        "[dpop] nonce-key-env",
                        format!(
                            "the key in {} is shorter than {DPOP_NONCE_KEY_BYTES} bytes",
                            variable.0
                        ),
                    ),
                )),
                Some(_) => Ok(()),
            },
            (None, None) => Ok(()),
        }
    }

    /// The checks that span several keys, and the secrets' variables.
    fn check(&self, text: &str) -> Result<(), ConfigError> {
        let file = &self.file;
        let policy = file.policy.get_ref();
        match (&policy.cedar, policy.allow_all) {
            (None, false) => {
                return Err(self.invalid(text, file.policy.span(), "[policy]", "say what decides: `cedar = \"<folder>\"`, or `allow-all = true` to allow every request with a valid token"));
            }
            (Some(_), true) => {
                return Err(self.invalid(
                    text,
                    file.policy.span(),
                    "[policy] allow-all",
                    "`cedar` and `allow-all` exclude each other: set one",
                ));
            }
            _ => {}
        }
        if policy.allow_destructive && !policy.allow_all {
            return Err(self.invalid(
                text,
                file.policy.span(),
                "[policy] allow-destructive",
                "only means something with `allow-all = true`",
            ));
        }
        if policy.cedar.is_none()
            && (policy.cedar_server.is_some()
                || !policy.claims.is_empty()
                || policy.shadow_cedar.is_some())
        {
            return Err(self.invalid(
                text,
                file.policy.span(),
                "[policy]",
                "`cedar-server`, `claims` and `shadow-cedar` need `cedar`",
            ));
        }
        match (&file.development_issuer, file.issuers.is_empty()) {
            (None, true) => {
                return Err(ConfigError::new(
                    &self.path,
                    None,
                    ConfigErrorKind::Invalid {
                        key: "[[issuer]]".to_owned(),
                        message: "at least one trusted issuer is needed (`[[issuer]]` with `url = ...`, or `[development-issuer]` to try the gateway out)".to_owned(),
                    },
                ));
            }
            (Some(development), false) => {
                return Err(self.invalid(text, development.span(), "[development-issuer]", "a development issuer excludes `[[issuer]]`: trust real issuers, or try it out with the development one"));
            }
            (Some(development), true) if !development.get_ref().listen.ip().is_loopback() => {
                return Err(self.invalid(text, development.span(), "[development-issuer] listen", "not a loopback address: the development issuer gives a token to anyone who knows its fixed client secret"));
            }
            _ => {}
        }
        for issuer in &file.issuers {
            let entry = issuer.get_ref();
            if entry.jwks_uri.is_some() && entry.jwks_file.is_some() {
                return Err(self.invalid(
                    text,
                    issuer.span(),
                    "[[issuer]] jwks-file",
                    "`jwks-uri` and `jwks-file` exclude each other: set one",
                ));
            }
        }
        if let Some(introspection) = &file.tokens.introspection {
            let variable = &introspection.get_ref().client_secret_env;
            if variable.read().is_none() {
                return Err(ConfigError::new(
                    &self.path,
                    Some(key_line(
                        text,
                        introspection.span().start,
                        "[tokens.introspection] client-secret-env",
                    )),
                    ConfigErrorKind::MissingSecret {
                        key: "[tokens.introspection] client-secret-env".to_owned(),
                        variable: variable.0.clone(),
                    },
                ));
            }
        }
        if let Some(redis) = &file.redis
            && let Some(variable) = &redis.get_ref().password_env
            && variable.read().is_none()
        {
            return Err(ConfigError::new(
                &self.path,
                Some(key_line(text, redis.span().start, "[redis] password-env")),
                ConfigErrorKind::MissingSecret {
                    key: "[redis] password-env".to_owned(),
                    variable: variable.0.clone(),
                },
            ));
        }
        if file.continuation.require_keys
            && file.continuation.keys_file.is_none()
            && file.continuation.keys_env.read().is_none()
        {
            return Err(self.invalid_in(
                text,
                "[continuation]",
                "require-keys",
                ConfigErrorKind::Invalid {
                    key: "[continuation] require-keys".to_owned(),
                    message: format!(
                        "no shared keys: the environment variable {} (`keys-env`) is not set (or empty), and there is no `keys-file`",
                        file.continuation.keys_env.0
                    ),
                },
            ));
        }
        if let Some(operations) = &file.operations {
            let ops = operations.get_ref();
            if !ops.listen.ip().is_loopback() && !ops.allow_remote {
                return Err(self.invalid(text, operations.span(), "[operations] listen", "not a loopback address: anyone reaching it can approve held calls and revoke tokens; set `allow-remote = true` if a network policy keeps others out"));
            }
            if ops.revoke == Some(true) && file.revocation.is_none() {
                return Err(self.invalid(
                    text,
                    operations.span(),
                    "[operations] revoke",
                    "needs a `[revocation]` table",
                ));
            }
            if ops.listen == file.listen {
                return Err(self.invalid(
                    text,
                    operations.span(),
                    "[operations] listen",
                    "the same address as `listen`: operations need a listener of their own",
                ));
            }
        }
        if file.resource.allow_any_origin && !file.resource.allowed_origins.is_empty() {
            return Err(self.invalid_in(
                text,
                "[resource]",
                "allow-any-origin",
                invalid_kind(
                    "[resource] allow-any-origin",
                    "excludes `allowed-origins`: set one",
                ),
            ));
        }
        if let Some(status) = file.denials.credential_status
            && !matches!(status, 401 | 403)
        {
            return Err(self.invalid_in(
                text,
                "[denials]",
                "credential-status",
                invalid_kind("[denials] credential-status", "401 or 403"),
            ));
        }
        if let Some(dpop) = &file.dpop {
            self.check_dpop(text, dpop)?;
            if file.continuation.reusable_state {
                return Err(self.invalid_in(
                    text,
                    "[continuation]",
                    "reusable-state",
                    invalid_kind(
                        "[continuation] reusable-state",
                        "excludes `[dpop]`: each DPoP proof must be used once, and the store that remembers them is the one this turns off",
                    ),
                ));
            }
        }
        let resource = file.resource.uri.get_ref();
        if resource.url.query().is_some() {
            return Err(self.invalid(
                text,
                file.resource.uri.span(),
                "[resource] uri",
                "a resource URI has no query",
            ));
        }
        if let Some(identity) = &file.identity {
            identity
                .get_ref()
                .check()
                .map_err(|(key, message)| self.invalid(text, identity.span(), key, message))?;
            if resource.url.path() == crate::identity::JWKS_PATH {
                return Err(self.invalid(
                    text,
                    file.resource.uri.span(),
                    "[resource] uri",
                    "its path is where the identity key set is published; pick another",
                ));
            }
        }
        for rate in &file.limits.rate {
            let entry = rate.get_ref();
            if entry.requests == 0 {
                return Err(self.invalid(
                    text,
                    rate.span(),
                    "[[limits.rate]] requests",
                    "must be at least 1",
                ));
            }
            if entry.tool.is_some() && matches!(entry.scope, RateScope::Client) {
                return Err(self.invalid(
                    text,
                    rate.span(),
                    "[[limits.rate]] tool",
                    "a per-client limit counts every tool; drop `tool` or pick another scope",
                ));
            }
        }
        Ok(())
    }
}

/// An [`ConfigErrorKind::Invalid`] about `key`.
fn invalid_kind(key: &str, message: impl Into<String>) -> ConfigErrorKind {
    ConfigErrorKind::Invalid {
        key: key.to_owned(),
        message: message.into(),
    }
}

/// The 1-based line that sets `key` (its last word: `listen` of `[operations] listen`) in
/// the table whose text starts at byte `from`; the line of `from` when none does.
fn key_line(text: &str, from: usize, key: &str) -> usize {
    let start = line_of(text, from);
    let Some((_, leaf)) = key.rsplit_once(' ') else {
        return start;
    };
    text.lines()
        .enumerate()
        .skip(start - 1)
        .take_while(|(index, line)| *index + 1 == start || !line.trim_start().starts_with('['))
        .find(|(_, line)| error::key_of(line) == Some(leaf))
        .map_or(start, |(index, _)| index + 1)
}

/// The byte offset of the line that opens `table` (`[continuation]`), if the file has one.
fn table_offset(text: &str, table: &str) -> Option<usize> {
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim();
        if trimmed == table
            || trimmed.starts_with(&format!("{table} "))
            || trimmed.starts_with(&format!("{table}#"))
        {
            return Some(offset);
        }
        offset += line.len();
    }
    None
}

/// The shortest DPoP nonce key the library accepts.
pub const DPOP_NONCE_KEY_BYTES: usize = 32;

/// The 1-based line of byte `offset` in `text`.
pub fn line_of(text: &str, offset: usize) -> usize {
    let offset = offset.min(text.len());
    text.as_bytes()[..offset]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

#[cfg(test)]
mod tests;
