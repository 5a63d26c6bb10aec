//! A gate and its router, built from a checked configuration: every key of the file turned
//! into the library's builder option it names.
//!
//! Building performs no network I/O beyond what the library's builder does (none); the key
//! prefetch happens after, so that a reload can wait for the new gate to be ready before it
//! takes traffic.

use std::path::PathBuf;

use axum::Router;
use mcp_gate::continuation::Keyring;
use mcp_gate::limit::{ConcurrencyLimit, Limit, LimitScope};
use mcp_gate::policy::Policy;
use mcp_gate::policy::cedar::CedarPolicy;
use mcp_gate::store::limits::RateLimit;
use mcp_gate::{Gate, Issuer, StaticKeys};

use crate::config::{Config, DeliveryEntry, DpopEntry, RateScope, TypEntry};
use crate::proxy::Upstream;
use crate::stores::Stores;
use mcp_gate::CredentialDelivery;
use mcp_gate::auth::{Dpop, KeyRefresh, ScopeHierarchy, TypPolicy};

/// Why a gate could not be built from a file that read well.
#[derive(Debug, thiserror::Error)]
pub enum AssembleError {
    /// The library refused an option (its own words, which name it).
    #[error("{file}: {source}")]
    Gate {
        /// The configuration file.
        file: String,
        /// The library's refusal (boxed: it is large, and rare).
        #[source]
        source: Box<mcp_gate::ConfigError>,
    },
    /// A file the configuration names could not be used (keys, policies, the audit log).
    #[error("{file}: {key}: {message}")]
    Referenced {
        /// The configuration file.
        file: String,
        /// The key naming the file.
        key: &'static str,
        /// Why.
        message: String,
    },
    /// The upstream's HTTP client could not be made.
    #[error(transparent)]
    Client(#[from] crate::proxy::ClientError),
}

/// What the process keeps from start to stop, whatever the file says later.
#[derive(Clone)]
pub struct Lasting {
    /// The stores.
    pub stores: Stores,
    /// The continuation keys made at start when the file names none (so that a reload does
    /// not invalidate every state in flight).
    pub random_keys: Keyring,
    /// The audit log, opened once (a reload that names another file is refused).
    pub audit: Option<mcp_gate::audit::JsonLines>,
    /// The development issuer's identifier, when one runs in the process.
    pub development_issuer: Option<String>,
    /// The identity signing key made at start, used when `[identity]` names no key file (so
    /// that a reload does not change the key upstreams verify with).
    pub identity_key: crate::identity::SigningKey,
}

/// A gate built from the file, ready to serve.
pub struct Assembled {
    /// The gate.
    pub gate: Gate,
    /// `/mcp` (at the resource's path) behind the gate, and the metadata routes.
    pub router: Router,
    /// The Cedar policy, when one decides (the watcher reloads it).
    pub cedar: Option<CedarPolicy>,
    /// How the banner and the logs name what decides.
    pub policy_name: String,
    /// The minter of upstream identity tokens, with `[identity]`.
    pub identity: Option<crate::identity::Minter>,
}

/// Builds the gate for `config`, over the process's `lasting` state.
pub fn assemble(config: &Config, lasting: &Lasting) -> Result<Assembled, AssembleError> {
    let file = &config.file;
    let name = config.path.display().to_string();
    let gate_error = |source| AssembleError::Gate {
        file: name.clone(),
        source: Box::new(source),
    };
    let referenced = |key: &'static str, message: String| AssembleError::Referenced {
        file: name.clone(),
        key,
        message,
    };

    let resource = file.resource.uri.get_ref().as_str().to_owned();
    let policy_section = file.policy.get_ref();
    let (policy, cedar, policy_name): (Box<dyn Policy>, _, _) = match &policy_section.cedar {
        Some(folder) => {
            let folder = config.resolve(folder);
            let policy = cedar_set(
                &folder,
                policy_section.cedar_server.as_deref(),
                &policy_section.claims,
            )
            .map_err(|error| referenced("[policy] cedar", error.to_string()))?;
            let name = format!(
                "Cedar, {} ({} policies)",
                folder.display(),
                policy.policy_count()
            );
            (Box::new(policy.clone()), Some(policy), name)
        }
        None if policy_section.allow_destructive => (
            Box::new(mcp_gate::policy::allow_all().including_destructive()),
            None,
            "allow-all, destructive tools included".to_owned(),
        ),
        None => (
            Box::new(mcp_gate::policy::allow_all()),
            None,
            "allow-all (tools the upstream marks destructive, or does not list, refused)"
                .to_owned(),
        ),
    };

    let mut builder = Gate::builder()
        .evaluate(policy)
        .resource(&resource)
        .required_scopes(file.tokens.required_scopes.clone())
        .task_store(lasting.stores.tasks.clone())
        .replay_store(lasting.stores.replay.clone())
        .session_store(lasting.stores.sessions.clone())
        .limit_store(lasting.stores.limits.clone());
    // Named only when listed: the library refuses a list (even empty) beside any origin.
    if !file.resource.allowed_origins.is_empty() {
        builder = builder.allowed_origins(file.resource.allowed_origins.iter().cloned());
    }
    if let Some(folder) = &policy_section.shadow_cedar {
        let folder = config.resolve(folder);
        let shadow = cedar_set(
            &folder,
            policy_section.cedar_server.as_deref(),
            &policy_section.claims,
        )
        .map_err(|error| referenced("[policy] shadow-cedar", error.to_string()))?;
        builder = builder.shadow_policy(shadow);
    }
    for issuer in &file.issuers {
        let issuer = issuer.get_ref();
        builder = match (&issuer.jwks_uri, &issuer.jwks_file) {
            (Some(jwks), _) => {
                builder.issuer(Issuer::with_jwks_uri(issuer.url.as_str(), jwks.as_str()))
            }
            (None, Some(path)) => {
                let path = config.resolve(path);
                let keys = std::fs::read_to_string(&path)
                    .map_err(|error| error.to_string())
                    .and_then(|json| {
                        StaticKeys::from_jwks_json(&json).map_err(|error| error.to_string())
                    })
                    .map_err(|message| {
                        referenced(
                            "[[issuer]] jwks-file",
                            format!("{}: {message}", path.display()),
                        )
                    })?;
                builder.issuer(Issuer::with_keys(issuer.url.as_str(), keys))
            }
            (None, None) => builder.issuer(issuer.url.as_str()),
        };
    }
    if let Some(issuer) = &lasting.development_issuer {
        builder = builder.issuer(issuer.as_str());
    }
    if let Some(name) = &file.resource.name {
        builder = builder.resource_name(name.clone());
    }
    if let Some(url) = &file.resource.documentation {
        builder = builder.resource_documentation(url.as_str());
    }
    if file.resource.allow_insecure_http {
        builder = builder.allow_insecure_http();
    }
    if let Some(info) = &file.resource.server_info {
        builder = builder.server_info(info.name.clone(), info.version.clone());
    }
    if let Some(servers) = &file.resource.authorization_servers {
        builder = builder.authorization_servers(servers.iter().map(|url| url.as_str()));
    }
    if file.resource.allow_any_origin {
        builder = builder.allow_any_origin();
    }
    if policy_section.development_mode {
        builder = builder.development_mode();
    }
    builder = requests(builder, config);
    if let Some(dpop) = &file.dpop {
        builder = builder.dpop(dpop_options(dpop.get_ref()));
    }
    builder = tokens(builder, config);
    builder = denials(builder, config);
    if let Some(timeout) = policy_section.evaluate_timeout {
        builder = builder.evaluate_timeout(timeout.0);
    }
    if policy_section.evaluate_unknown_methods {
        builder = builder.evaluate_unknown_methods();
    }
    builder = builder.continuation_keys(
        keys(config, lasting).map_err(|(key, message)| referenced(key, message))?,
    );
    if let Some(ttl) = file.continuation.ttl {
        builder = builder.continuation_ttl(ttl.0);
    }
    if file.continuation.reusable_state {
        builder = builder.reusable_state();
    }
    builder = tasks(builder, config, lasting);
    builder = limits(builder, config).map_err(|message| referenced("[[limits.rate]]", message))?;
    if let Some(revocation) = &file.revocation {
        builder = builder.revocations(lasting.stores.revocations.clone());
        if let Some(stale) = revocation.accept_stale_for {
            builder = builder
                .revocation_feed_outage(mcp_gate::revocation::FeedOutage::AcceptStale(stale.0));
        }
        if let Some(lifetime) = revocation.max_token_lifetime {
            builder = builder.max_token_lifetime(lifetime.0);
        }
    }
    if let Some(audit) = &lasting.audit {
        builder = builder.audit(audit.clone());
    }
    let gate = builder.build().map_err(gate_error)?;

    let identity = crate::identity::minter(config, &lasting.identity_key)
        .map_err(|(key, message)| referenced(key, message))?;
    let upstream = crate::identity::Stamp::new(identity.clone(), Upstream::new(&file.upstream)?);
    let path = file.resource.uri.get_ref().url.path().to_owned();
    let router = Router::new()
        .route_service(&path, upstream)
        .layer(gate.layer())
        .merge(gate.metadata_router())
        .merge(crate::identity::jwks_router(identity.as_ref()));
    Ok(Assembled {
        gate,
        router,
        cedar,
        policy_name,
        identity,
    })
}

/// The Cedar policy set in `folder`.
fn cedar_set(
    folder: &PathBuf,
    server: Option<&str>,
    claims: &[String],
) -> Result<CedarPolicy, mcp_gate::ConfigError> {
    let mut builder = CedarPolicy::builder().directory(folder);
    if let Some(server) = server {
        builder = builder.server(server);
    }
    if !claims.is_empty() {
        builder = builder.claims(claims.iter().cloned());
    }
    builder.build()
}

/// `[tokens]`.
fn tokens(mut builder: mcp_gate::GateBuilder, config: &Config) -> mcp_gate::GateBuilder {
    let tokens = &config.file.tokens;
    if let Some(leeway) = tokens.leeway {
        builder = builder.leeway(leeway.0);
    }
    if let Some(capacity) = tokens.cache_capacity {
        builder = builder.token_cache_capacity(capacity as u64);
    }
    if let Some(age) = tokens.cache_max_age {
        builder = builder.token_cache_max_age(age.0);
    }
    if let Some(bytes) = tokens.max_token_bytes {
        builder = builder.max_token_bytes(bytes);
    }
    if let Some(scopes) = &tokens.scopes_supported {
        builder = builder.scopes_supported(scopes.iter().cloned());
    }
    if let Some(types) = &tokens.authorization_details_types {
        builder = builder.authorization_details_types(types.iter().cloned());
    }
    if let Some(typ) = tokens.typ {
        builder = builder.typ_policy(match typ {
            TypEntry::AtJwtOrJwt => TypPolicy::AccessTokenOrJwt,
            TypEntry::AtJwt => TypPolicy::AccessTokenOnly,
        });
    }
    if !tokens.scope_hierarchy.is_empty() {
        let hierarchy = tokens.scope_hierarchy.iter().fold(
            ScopeHierarchy::new(),
            |hierarchy, (broader, narrower)| {
                hierarchy.implies(broader.clone(), narrower.iter().cloned())
            },
        );
        builder = builder.scope_hierarchy(hierarchy);
    }
    if let Some(entry) = &tokens.key_refresh {
        let mut refresh = KeyRefresh::default();
        if let Some(cooldown) = entry.cooldown {
            refresh = refresh.cooldown(cooldown.0);
        }
        if let Some(interval) = entry.interval {
            refresh = refresh.interval(interval.0);
        }
        if let Some(timeout) = entry.timeout {
            refresh = refresh.timeout(timeout.0);
        }
        if let Some(keys) = entry.max_keys {
            refresh = refresh.max_keys(keys);
        }
        if let Some(bytes) = entry.max_document_bytes {
            refresh.max_document_bytes = bytes;
        }
        builder = builder.key_refresh(refresh);
    }
    if let Some(entry) = &tokens.introspection {
        let entry = entry.get_ref();
        // Checked when the file was read; an unset variable here means it was unset since.
        let secret = entry.client_secret_env.read().unwrap_or_default();
        let mut introspection =
            mcp_gate::Introspection::new(entry.endpoint.as_str(), entry.client_id.clone(), secret);
        if entry.client_secret_post {
            introspection = introspection.client_secret_post();
        }
        builder = builder.introspection(introspection);
    }
    builder
}

/// `[denials]`.
fn denials(mut builder: mcp_gate::GateBuilder, config: &Config) -> mcp_gate::GateBuilder {
    let denials = &config.file.denials;
    if let Some(revision) = &denials.revision {
        builder = builder.revision(revision.clone());
    }
    if let Some(code) = denials.error_code {
        builder = builder.denial_error_code(code);
    }
    if denials.conceal_refusals {
        builder = builder.conceal_refusals();
    }
    if denials.list_remediable_entries {
        builder = builder.list_remediable_entries();
    }
    if let Some(rounds) = denials.max_input_rounds {
        builder = builder.max_input_rounds(rounds);
    }
    if let Some(delivery) = denials.credential_delivery {
        builder = builder.credential_delivery(match delivery {
            DeliveryEntry::Challenge => CredentialDelivery::Challenge,
            DeliveryEntry::Result => CredentialDelivery::Result,
            DeliveryEntry::Both => CredentialDelivery::Both,
        });
    }
    // Checked when the file was read: 401 or 403.
    if let Some(status) = denials.credential_status
        && let Ok(status) = http::StatusCode::from_u16(status)
    {
        builder = builder.credential_status(status);
    }
    builder
}

/// `[requests]`.
fn requests(mut builder: mcp_gate::GateBuilder, config: &Config) -> mcp_gate::GateBuilder {
    let requests = &config.file.requests;
    if let Some(bytes) = requests.max_body_bytes {
        builder = builder.max_body_bytes(bytes);
    }
    if let Some(timeout) = requests.body_read_timeout {
        builder = builder.body_read_timeout(timeout.0);
    }
    if let Some(timeout) = requests.inner_read_timeout {
        builder = builder.inner_read_timeout(timeout.0);
    }
    if let Some(cap) = requests.cache_ttl_cap {
        builder = builder.cache_ttl_cap(cap.0);
    }
    builder
}

/// The proof age and clock leeway a DPoP proof gets when the file says neither (the library's
/// defaults, `docs/dpop.md`).
const DPOP_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(60);
const DPOP_LEEWAY: std::time::Duration = std::time::Duration::from_secs(5);
/// A DPoP nonce window when the file names a key and no lifetime.
const DPOP_NONCE_LIFETIME: std::time::Duration = std::time::Duration::from_secs(300);

/// `[dpop]`, checked when the file was read (the algorithms' names, the nonce key).
fn dpop_options(entry: &DpopEntry) -> Dpop {
    let mut dpop = Dpop::new();
    if let Some(names) = &entry.algorithms {
        dpop = dpop.algorithms(names.iter().filter_map(|name| name.parse().ok()));
    }
    if entry.required {
        dpop = dpop.required();
    }
    if let Some(key) = entry.nonce_key_env.as_ref().and_then(|v| v.read()) {
        dpop = dpop.nonce(
            key.into_bytes(),
            entry
                .nonce_lifetime
                .map_or(DPOP_NONCE_LIFETIME, |span| span.0),
        );
    }
    if entry.max_age.is_some() || entry.leeway.is_some() {
        dpop = dpop.iat_window(
            entry.max_age.map_or(DPOP_MAX_AGE, |span| span.0),
            entry.leeway.map_or(DPOP_LEEWAY, |span| span.0),
        );
    }
    dpop
}

/// `[tasks]`.
fn tasks(
    mut builder: mcp_gate::GateBuilder,
    config: &Config,
    lasting: &Lasting,
) -> mcp_gate::GateBuilder {
    let tasks = &config.file.tasks;
    if let (Some(bounds), Some(feed)) = (&tasks.notifications, &lasting.stores.task_notifications) {
        let mut notifications = feed.clone();
        if let Some(listens) = bounds.listens_per_owner {
            notifications = notifications.listens_per_owner(listens);
        }
        if let Some(listens) = bounds.most_listens {
            notifications = notifications.most_listens(listens);
        }
        if let Some(queue) = bounds.queue {
            notifications = notifications.queue(queue);
        }
        builder = builder.task_notifications(notifications);
    }
    if let Some(ttl) = tasks.ttl {
        builder = builder.task_ttl(ttl.0);
    }
    if let Some(quota) = tasks.per_owner {
        builder = builder.tasks_per_owner(quota);
    }
    if let Some(bytes) = tasks.max_held_call_bytes {
        builder = builder.max_held_call_bytes(bytes);
    }
    if let Some(every) = tasks.poll_interval {
        builder = builder.task_poll_interval(every.0);
    }
    builder
}

/// `[limits]`.
fn limits(
    mut builder: mcp_gate::GateBuilder,
    config: &Config,
) -> Result<mcp_gate::GateBuilder, String> {
    let limits = &config.file.limits;
    for entry in &limits.rate {
        let entry = entry.get_ref();
        let mut rate =
            RateLimit::new(entry.requests, entry.period.0).map_err(|error| error.to_string())?;
        if let Some(burst) = entry.burst {
            rate = rate.with_burst(burst).map_err(|error| error.to_string())?;
        }
        let scope = match entry.scope {
            RateScope::Principal => LimitScope::Principal,
            RateScope::PrincipalAndTool => LimitScope::PrincipalAndTool,
            RateScope::Client => LimitScope::Client,
            RateScope::Tool => LimitScope::Tool,
        };
        let mut limit = Limit::new(scope, rate);
        if let Some(tool) = &entry.tool {
            limit = limit.for_tool(tool.clone());
        }
        builder = builder.rate_limit(limit);
    }
    if let Some(max) = limits.concurrency {
        let mut limit = ConcurrencyLimit::per_principal(max);
        if let Some(lease) = limits.concurrency_lease {
            limit = limit.with_lease(lease.0);
        }
        builder = builder.concurrency_limit(limit);
    }
    Ok(builder)
}

/// The continuation keys: the file's, the variable's, or the ones made at start.
fn keys(config: &Config, lasting: &Lasting) -> Result<Keyring, (&'static str, String)> {
    let continuation = &config.file.continuation;
    if let Some(path) = &continuation.keys_file {
        return Keyring::from_file(config.resolve(path))
            .map_err(|error| ("[continuation] keys-file", error.to_string()));
    }
    if continuation.keys_env.read().is_some() {
        return Keyring::from_env(&continuation.keys_env.0)
            .map_err(|error| ("[continuation] keys-env", error.to_string()));
    }
    Ok(lasting.random_keys.clone())
}

/// Where continuation keys came from, for the banner.
pub fn keys_source(config: &Config) -> String {
    let continuation = &config.file.continuation;
    match &continuation.keys_file {
        Some(path) => format!("file {}", config.resolve(path).display()),
        None if continuation.keys_env.read().is_some() => {
            format!("environment variable {}", continuation.keys_env.0)
        }
        None => "random at start (states do not survive a restart or cross replicas)".to_owned(),
    }
}
