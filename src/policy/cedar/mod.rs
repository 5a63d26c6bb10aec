//! Declarative policies in [Cedar](https://www.cedarpolicy.com): whether a request is allowed,
//! and, when it is not, which SEP-2643 remediation the client is told (feature `cedar`).
//!
//! **The threat.** A policy written as data is reviewed as data; the layer must not let the
//! data mean something other than what the reviewer read. So: the set is validated against
//! its schema (strict mode) before it is used, and an invalid set never replaces a good one;
//! a request that does not fit the schema (arguments of the wrong type, a tool whose listed
//! input schema changed since the Cedar schema was generated, a tool the schema does not
//! know) is denied, never judged against a stale shape; a remedy's URL and
//! `authorization_details` are templates whose placeholders are whole values or
//! percent-encoded path pieces, so nothing from a request can add a URL component or a JSON
//! member; and every id (subject, tool, URI) is passed to Cedar as an id, never parsed as
//! Cedar text.
//!
//! **The API.** [`CedarPolicy::builder`] reads a policy set, a schema, optional entities
//! (groups, roles) and an optional tool list (the `tools/list` result the schema was generated
//! from), and an optional context hook that adds application state as `context.app`. Permit
//! allows; a denial's remedy comes from annotations on the `forbid` policies that matched
//! (see the table in the guide): `@remediation("scopes") @scopes("mcp:admin")`,
//! `@remediation("url") @url("…")`, `@remediation("credential")
//! @authorization_details("[…]")`, `@remediation("task")`, `@remediation("ask")`,
//! `@remediation("unavailable")`; no annotated forbid means `undisclosed`.
//!
//! ```
//! use mcp_gate::Principal;
//! use mcp_gate::policy::{Decision, Evaluation, Policy};
//! use mcp_gate::policy::cedar::CedarPolicy;
//! use serde_json::json;
//!
//! let schema = r#"namespace Demo {
//!     @mcp_principal("User")
//!     entity User = { issuer: String, subject: String, client_id: String, scopes: Set<String>, claims: {} };
//!     @mcp_resource("McpServer")
//!     entity McpServer;
//!     @mcp_context("gate")
//!     type Gate = { era: String, phase: String, protocol_version: String, elicitation_form: Bool,
//!                   elicitation_url: Bool, tasks: Bool, approved_by: String };
//!     type App = {};
//!     action "admin_report" appliesTo {
//!         principal: [User], resource: [McpServer], context: { input: {}, gate: Gate, app: App }
//!     };
//! }"#;
//! let policies = r#"
//!     permit(principal, action, resource);
//!     @remediation("scopes") @scopes("mcp:admin")
//!     forbid(principal, action == Demo::Action::"admin_report", resource)
//!     unless { principal.scopes.contains("mcp:admin") };
//! "#;
//! let policy = CedarPolicy::builder()
//!     .schema_text("schema.cedarschema", schema)
//!     .policies_text("admin.cedar", policies)
//!     .build()?;
//!
//! # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
//! let principal = Principal::builder().issuer("https://as.example").subject("bob").build()?;
//! let evaluation = Evaluation::builder(principal).tool("admin_report", json!({})).build()?;
//! assert_eq!(policy.evaluate(evaluation).await?, Decision::scopes(["mcp:admin"]));
//! # Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
//! # }).map_err(|e| e.to_string())?;
//! # Ok::<_, Box<dyn std::error::Error>>(())
//! ```

mod load;
mod mapping;
mod remedy;
mod schema;
mod template;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use cedar_policy::{Authorizer, Context, Decision as CedarDecision, Entity, Request};
use serde_json::{Value, json};

pub use load::{CedarError, Diagnostic, Source};
pub use remedy::AnnotationError;
pub use schema::{GATE_SCHEMA_STUB, generate_schema};
pub use template::{TemplateError, UrlFillError};

use self::load::{Loaded, Sources};
use self::mapping::{Mapped, map};
use super::{BoxError, Decision, EvaluateFuture, Evaluation, Policy};
use crate::error::ConfigError;
use crate::mcp::Target;

/// A boxed future of the context hook.
pub type HookFuture = Pin<Box<dyn Future<Output = Result<Value, BoxError>> + Send>>;

type Hook = Arc<dyn Fn(Evaluation) -> HookFuture + Send + Sync>;

/// What does not change on reload.
struct Settings {
    sources: Sources,
    hook: Option<Hook>,
    server: String,
    claims: Vec<String>,
}

/// A [`Policy`] decided by a Cedar policy set. Cheap to clone: clones share the set, so a
/// reload through one is seen by all.
#[derive(Clone)]
pub struct CedarPolicy {
    settings: Arc<Settings>,
    current: Arc<RwLock<Arc<Loaded>>>,
}

impl std::fmt::Debug for CedarPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CedarPolicy")
            .field("policies", &self.current().policies.policies().count())
            .field("server", &self.settings.server)
            .finish_non_exhaustive()
    }
}

/// Builds a [`CedarPolicy`].
#[derive(Default)]
#[must_use]
pub struct CedarPolicyBuilder {
    sources: Sources,
    hook: Option<Hook>,
    server: Option<String>,
    claims: Vec<String>,
    error: Option<CedarError>,
}

impl CedarPolicyBuilder {
    /// Reads a folder: every `*.cedar` file in it (in name order), `schema.cedarschema`, and,
    /// when present, `entities.json` and `tools.json`.
    pub fn directory(mut self, dir: impl AsRef<Path>) -> Self {
        match load::directory(dir.as_ref()) {
            Ok(sources) => {
                self.sources.policies.extend(sources.policies);
                self.sources.schema = sources.schema;
                self.sources.entities = sources.entities.or(self.sources.entities);
                self.sources.tools = sources.tools.or(self.sources.tools);
            }
            Err(error) => {
                self.error.get_or_insert(error);
            }
        }
        self
    }

    /// Adds a policy file (`.cedar`), read again on every reload.
    pub fn policies_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.sources.policies.push(Source::File(path.into()));
        self
    }

    /// Adds policies given as text; `name` is what diagnostics call it.
    pub fn policies_text(mut self, name: impl Into<String>, text: impl Into<String>) -> Self {
        let (name, text) = (name.into(), text.into());
        self.sources.policies.push(Source::Text { name, text });
        self
    }

    /// The schema (Cedar schema syntax), from a file.
    pub fn schema_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.sources.schema = Some(Source::File(path.into()));
        self
    }

    /// The schema (Cedar schema syntax), as text.
    pub fn schema_text(mut self, name: impl Into<String>, text: impl Into<String>) -> Self {
        let (name, text) = (name.into(), text.into());
        self.sources.schema = Some(Source::Text { name, text });
        self
    }

    /// Entities (groups, roles, the users' parents) in Cedar's JSON entity format.
    pub fn entities_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.sources.entities = Some(Source::File(path.into()));
        self
    }

    /// The `tools/list` result the schema was generated from. With it, a tool whose listed
    /// `inputSchema` differs, or that it does not name, is denied.
    pub fn tools_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.sources.tools = Some(Source::File(path.into()));
        self
    }

    /// The id of the `McpServer` resource tool calls are made on (default `"server"`).
    pub fn server(mut self, name: impl Into<String>) -> Self {
        self.server = Some(name.into());
        self
    }

    /// Token claims copied into `principal.claims` (declare them in the schema's `User`).
    pub fn claims<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.claims.extend(names.into_iter().map(Into::into));
        self
    }

    /// Computes `context.app` before each evaluation: application state a policy needs (an
    /// approval already recorded, whether the token's `authorization_details` cover the call,
    /// values for templates). It must return a JSON object matching the schema's `app`
    /// context type; an error fails the request with an internal error.
    pub fn context_hook<F, Fut, E>(mut self, hook: F) -> Self
    where
        F: Fn(Evaluation) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, E>> + Send + 'static,
        E: Into<BoxError>,
    {
        self.hook = Some(Arc::new(move |evaluation| {
            let future = hook(evaluation);
            Box::pin(async move { future.await.map_err(Into::into) })
        }));
        self
    }

    /// Reads, parses and validates everything.
    pub fn build(self) -> Result<CedarPolicy, ConfigError> {
        if let Some(error) = self.error {
            return Err(error.into());
        }
        let loaded = load::load(&self.sources)?;
        Ok(CedarPolicy {
            settings: Arc::new(Settings {
                sources: self.sources,
                hook: self.hook,
                server: self.server.unwrap_or_else(|| "server".into()),
                claims: self.claims,
            }),
            current: Arc::new(RwLock::new(Arc::new(loaded))),
        })
    }
}

impl CedarPolicy {
    /// Starts a builder.
    pub fn builder() -> CedarPolicyBuilder {
        CedarPolicyBuilder::default()
    }

    fn current(&self) -> Arc<Loaded> {
        let current = self.current.read().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(&current)
    }

    /// Reads every file again, validates, and swaps the new set in at once: requests
    /// already being judged finish on the old set, the next ones see the new. When anything
    /// fails to load, the old set stays and the error says why.
    pub fn reload(&self) -> Result<(), ConfigError> {
        match load::load(&self.settings.sources) {
            Ok(loaded) => {
                let mut current = self.current.write().unwrap_or_else(PoisonError::into_inner);
                *current = Arc::new(loaded);
                tracing::info!(target: "mcp_gate::cedar", "Cedar policy set reloaded");
                Ok(())
            }
            Err(error) => {
                tracing::warn!(target: "mcp_gate::cedar", %error, "Cedar reload refused; the last good set stays");
                Err(error.into())
            }
        }
    }

    /// Watches the files: every `every`, reads them, and reloads when their content changed
    /// (an invalid change is logged and the last good set stays; it is tried again when the
    /// files change again). Runs until the returned task is aborted. Needs a Tokio runtime.
    pub fn watch(&self, every: Duration) -> tokio::task::JoinHandle<()> {
        let policy = self.clone();
        tokio::spawn(async move {
            let mut seen = policy.fingerprint();
            let mut ticks = tokio::time::interval(every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                let now = policy.fingerprint();
                if now != seen {
                    seen = now;
                    let _ = policy.reload();
                }
            }
        })
    }

    /// The content of every file source, hashed.
    fn fingerprint(&self) -> Vec<Option<[u8; 32]>> {
        use sha2::Digest;
        let sources = &self.settings.sources;
        let files = sources
            .policies
            .iter()
            .chain(&sources.schema)
            .chain(&sources.entities)
            .chain(&sources.tools);
        files
            .filter_map(|source| match source {
                Source::File(path) => Some(
                    std::fs::read(path)
                        .ok()
                        .map(|bytes| sha2::Sha256::digest(bytes).into()),
                ),
                Source::Text { .. } => None,
            })
            .collect()
    }

    /// How many policies the current set holds.
    pub fn policy_count(&self) -> usize {
        self.current().policies.policies().count()
    }
}

/// A denial for a request the mapping could not put to Cedar; logged with `why`.
fn refuse(evaluation: &Evaluation, why: &dyn std::fmt::Display, message: &str) -> Decision {
    tracing::warn!(
        target: "mcp_gate::cedar",
        method = evaluation.method(),
        tool = evaluation.tool(),
        reason = %why,
        "request denied before Cedar evaluation"
    );
    Decision::undisclosed(message)
}

/// Whether the called tool is the one the schema was generated for.
fn drifted(loaded: &Loaded, evaluation: &Evaluation) -> Option<String> {
    let (Target::Tool { name, .. }, Some(tools)) = (evaluation.target(), &loaded.tools) else {
        return None;
    };
    let Some(expected) = tools.get(name) else {
        return Some(format!(
            "tool {name:?} is not in the tool list the schema was made from"
        ));
    };
    match evaluation.tool_input_schema() {
        // A held call passed this check when it was held; the process that runs the approval
        // may not have seen a list since it started.
        None if evaluation.phase() == super::Phase::Approval => None,
        None => Some(format!("tool {name:?} was not listed by the server")),
        Some(live) if live != expected => Some(format!(
            "tool {name:?} lists an input schema that differs from the one the Cedar schema was generated from; regenerate the schema"
        )),
        Some(_) => None,
    }
}

/// Types a tool's `number` arguments as Cedar decimals, by the tool's listed input schema
/// (or the tool list's, when this process has not seen one listed).
fn decimals(
    loaded: &Loaded,
    evaluation: &Evaluation,
    mapped: &mut Mapped,
) -> Result<(), mapping::Inexact> {
    let (Target::Tool { name, .. }, Some(input)) =
        (evaluation.target(), mapped.context.get_mut("input"))
    else {
        return Ok(());
    };
    let listed = evaluation.tool_input_schema();
    let known = || loaded.tools.as_ref().and_then(|tools| tools.get(name));
    match listed.or_else(known) {
        Some(schema) => mapping::numbers_as_decimals(input, schema, "input"),
        None => Ok(()),
    }
}

const GENERIC_DENIAL: &str = "You are not allowed to do this.";

/// Parses the mapped request into Cedar's types, with the user's parents from the entities.
fn cedar_request(
    loaded: &Loaded,
    mapped: &Mapped,
) -> Result<(Request, cedar_policy::Entities), String> {
    let schema = &loaded.schema;
    let typed = mapped.typed.then_some(schema);
    let context = Context::from_json_value(
        Value::Object(mapped.context.clone()),
        typed.map(|schema| (schema, &mapped.action)),
    )
    .map_err(|e| format!("the context does not fit the schema: {e}"))?;
    // A token without a subject is nobody in particular: it takes no roles from the file.
    let known = (!mapped.principal.id().unescaped().is_empty())
        .then(|| loaded.entities.get(&mapped.principal))
        .flatten();
    let parents: Vec<Value> = known
        .map(|known| known.clone().into_inner().2)
        .into_iter()
        .flatten()
        .map(|uid| json!({"type": uid.type_name().to_string(), "id": uid.id().unescaped()}))
        .collect();
    let user = json!({
        "uid": {"type": mapped.principal.type_name().to_string(), "id": mapped.principal.id().unescaped()},
        "attrs": mapped.principal_attrs,
        "parents": parents,
    });
    let user = Entity::from_json_value(user, Some(schema))
        .map_err(|e| format!("the principal does not fit the schema's User: {e}"))?;
    let entities = loaded
        .entities
        .clone()
        .upsert_entities([user], Some(schema))
        .map_err(|e| format!("the principal does not fit the schema's User: {e}"))?;
    let request = Request::new(
        mapped.principal.clone(),
        mapped.action.clone(),
        mapped.resource.clone(),
        context,
        typed,
    )
    .map_err(|e| format!("the request does not fit the schema: {e}"))?;
    Ok((request, entities))
}

async fn decide(
    loaded: Arc<Loaded>,
    settings: Arc<Settings>,
    evaluation: Evaluation,
) -> Result<Decision, BoxError> {
    if let Some(why) = drifted(&loaded, &evaluation) {
        return Ok(refuse(&evaluation, &why, GENERIC_DENIAL));
    }
    let mut mapped = match map(
        &loaded.names,
        &evaluation,
        &settings.server,
        &settings.claims,
    ) {
        Ok(mapped) => mapped,
        Err(why) => return Ok(refuse(&evaluation, &why, GENERIC_DENIAL)),
    };
    if !loaded.actions.contains(&mapped.action) {
        let why = format!("the schema declares no action {}", mapped.action);
        return Ok(refuse(&evaluation, &why, GENERIC_DENIAL));
    }
    if let Err(why) = decimals(&loaded, &evaluation, &mut mapped) {
        let message = "The request does not match the authorization schema.";
        return Ok(refuse(&evaluation, &why, message));
    }
    let app = match &settings.hook {
        Some(hook) => hook(evaluation.clone()).await?,
        None => Value::Object(Default::default()),
    };
    if !app.is_object() {
        return Err("the Cedar context hook returned something other than a JSON object".into());
    }
    mapped.context.insert("app".into(), app);
    let (request, entities) = match cedar_request(&loaded, &mapped) {
        Ok(parts) => parts,
        Err(why) => {
            let message = "The request does not match the authorization schema.";
            return Ok(refuse(&evaluation, &why, message));
        }
    };
    let response = Authorizer::new().is_authorized(&request, &loaded.policies, &entities);
    for error in response.diagnostics().errors() {
        tracing::debug!(target: "mcp_gate::cedar", %error, "a Cedar policy errored and was skipped");
    }
    if response.decision() == CedarDecision::Allow {
        return Ok(Decision::allow());
    }
    let (decision, note) = loaded
        .remedies
        .decide(response.diagnostics().reason(), &mapped.scope());
    if let Some(note) = note {
        tracing::warn!(target: "mcp_gate::cedar", tool = evaluation.tool(), note, "remedy not given");
    }
    Ok(decision)
}

impl Policy for CedarPolicy {
    fn evaluate(&self, evaluation: Evaluation) -> EvaluateFuture {
        Box::pin(decide(
            self.current(),
            Arc::clone(&self.settings),
            evaluation,
        ))
    }

    fn needs_tool_annotations(&self) -> bool {
        // The drift check compares the listed input schema.
        self.current().tools.is_some()
    }
}
