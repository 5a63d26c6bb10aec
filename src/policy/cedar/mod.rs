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

mod actions;
mod evaluate;
mod gate;
mod json_text;
mod limits;
mod load;
mod mapping;
mod number;
mod remedy;
mod schema;
mod shape;
mod template;
mod values;

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use serde_json::Value;

pub use crate::error::{CedarError, Diagnostic};
pub use load::Source;
pub use schema::{GATE_SCHEMA_STUB, generate_schema};

use self::load::{Loaded, Sources};
use super::{BoxError, EvaluateFuture, Evaluation, Policy};
use crate::error::ConfigError;

/// A boxed future of the context hook.
pub type HookFuture = Pin<Box<dyn Future<Output = Result<Value, BoxError>> + Send>>;

type Hook = Arc<dyn Fn(Evaluation) -> HookFuture + Send + Sync>;

/// What a context hook's future may produce: the `context.app` value, or a
/// `Result<Value, E>` whose error converts into a [`BoxError`].
///
/// Sealed, like [`IntoDecision`](crate::policy::IntoDecision): these two shapes are the only
/// ones.
///
/// ```
/// use mcp_gate::policy::cedar::IntoContext;
/// use serde_json::json;
///
/// assert_eq!(json!({"on_call": true}).into_context().ok(), Some(json!({"on_call": true})));
/// let failed: Result<serde_json::Value, std::io::Error> = Err(std::io::Error::other("down"));
/// assert!(failed.into_context().is_err());
/// ```
pub trait IntoContext: sealed::Sealed {
    /// The value, or the error that fails the request.
    fn into_context(self) -> Result<Value, BoxError>;
}

impl IntoContext for Value {
    fn into_context(self) -> Result<Value, BoxError> {
        Ok(self)
    }
}

impl<E: Into<BoxError>> IntoContext for Result<Value, E> {
    fn into_context(self) -> Result<Value, BoxError> {
        self.map_err(Into::into)
    }
}

mod sealed {
    use serde_json::Value;

    /// Keeps [`IntoContext`](super::IntoContext) to the shapes this crate names.
    pub trait Sealed {}

    impl Sealed for Value {}
    impl<E> Sealed for Result<Value, E> {}
}

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
    /// One reload at a time, so the set last read is the set kept.
    reloading: Arc<Mutex<()>>,
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
}

impl CedarPolicyBuilder {
    /// Reads a folder: every `*.cedar` file in it (in name order), `schema.cedarschema`, and,
    /// when present, `entities.json` and `tools.json`. The folder is listed again at every
    /// reload, so a policy file added or removed counts. A file given by itself
    /// (`schema_file`, …) wins over the folder's.
    pub fn directory(mut self, dir: impl Into<PathBuf>) -> Self {
        self.sources.directories.push(dir.into());
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
    /// context type, as a plain [`Value`] or as a `Result<Value, E>` ([`IntoContext`], the
    /// same two shapes as a policy's [`IntoDecision`](crate::policy::IntoDecision)); an error
    /// fails the request with an internal error.
    ///
    /// ```
    /// # use mcp_gate::policy::cedar::CedarPolicy;
    /// # use serde_json::json;
    /// // A plain value:
    /// let infallible = CedarPolicy::builder()
    ///     .context_hook(|_evaluation| async move { json!({"on_call": false}) });
    /// // A lookup that can fail:
    /// async fn on_call() -> Result<bool, std::io::Error> { Ok(true) }
    /// let fallible = CedarPolicy::builder()
    ///     .context_hook(|_evaluation| async move { Ok::<_, std::io::Error>(json!({"on_call": on_call().await?})) });
    /// # let _ = (infallible, fallible);
    /// ```
    pub fn context_hook<F, Fut>(mut self, hook: F) -> Self
    where
        F: Fn(Evaluation) -> Fut + Send + Sync + 'static,
        Fut: Future + Send + 'static,
        Fut::Output: IntoContext,
    {
        self.hook = Some(Arc::new(move |evaluation| {
            let future = hook(evaluation);
            Box::pin(async move { future.await.into_context() })
        }));
        self
    }

    /// Reads, parses and validates everything.
    pub fn build(self) -> Result<CedarPolicy, ConfigError> {
        let hooked = self.hook.is_some();
        let loaded = load_checked(&self.sources, hooked)?;
        crate::measure::policy_in_force(None, &loaded.version);
        Ok(CedarPolicy {
            settings: Arc::new(Settings {
                sources: self.sources,
                hook: self.hook,
                server: self.server.unwrap_or_else(|| "server".into()),
                claims: self.claims,
            }),
            current: Arc::new(RwLock::new(Arc::new(loaded))),
            reloading: Arc::new(Mutex::new(())),
        })
    }
}

/// Loads, and refuses a context hook whose values no action's context would carry.
fn load_checked(sources: &Sources, hooked: bool) -> Result<Loaded, CedarError> {
    let loaded = load::load(sources)?;
    if hooked && !loaded.actions.values().any(|action| action.declares_app) {
        return Err(CedarError::Schema {
            file: sources
                .schema
                .as_ref()
                .map_or_else(|| "schema".into(), Source::name),
            message: "a context hook is set, but no action's context declares `app` \
                      (declare it with @mcp_context(\"app\") in the stub)"
                .into(),
        });
    }
    Ok(loaded)
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
        let _one_at_a_time = self
            .reloading
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match load_checked(&self.settings.sources, self.settings.hook.is_some()) {
            Ok(loaded) => {
                let mut current = self.current.write().unwrap_or_else(PoisonError::into_inner);
                let version = Arc::clone(&loaded.version);
                let policies = loaded.policies.policies().count();
                crate::measure::policy_reload(true);
                crate::measure::policy_in_force(Some(&current.version), &version);
                *current = Arc::new(loaded);
                tracing::info!(target: "mcp_gate::cedar", %version, policies, "Cedar policy set reloaded");
                Ok(())
            }
            Err(error) => {
                crate::measure::policy_reload(false);
                tracing::warn!(target: "mcp_gate::cedar", %error, "Cedar reload refused; the last good set stays");
                Err(error.into())
            }
        }
    }

    /// Watches the files: every `every`, reads them, and reloads when their content changed
    /// (an invalid change is logged and the last good set stays; it is tried again when the
    /// files change again). Runs until the returned task is aborted. Needs a Tokio runtime.
    ///
    /// The handle is Tokio's own: the watch is a task spawned on the application's runtime
    /// (which the layer needs anyway), and the handle is how the application stops it
    /// (`abort`) or awaits it. Dropping it detaches the task, which keeps watching.
    pub fn watch(&self, every: Duration) -> tokio::task::JoinHandle<()> {
        let policy = self.clone();
        tokio::spawn(async move {
            // Compared with what the current set was loaded from, so a change made before the
            // watch started is seen at its first look; a refused change is not retried until
            // the files change again.
            let mut refused: Option<Vec<_>> = None;
            let mut ticks = tokio::time::interval(every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                let now = policy.settings.sources.fingerprint();
                if now == policy.current().fingerprint || refused.as_ref() == Some(&now) {
                    continue;
                }
                refused = policy.reload().is_err().then_some(now);
            }
        })
    }

    /// How many policies the current set holds.
    pub fn policy_count(&self) -> usize {
        self.current().policies.policies().count()
    }
}

impl Policy for CedarPolicy {
    fn evaluate(&self, evaluation: Evaluation) -> EvaluateFuture {
        Box::pin(evaluate::decide(
            self.current(),
            Arc::clone(&self.settings),
            evaluation,
        ))
    }

    fn needs_tool_annotations(&self) -> bool {
        // The drift check compares the listed input schema.
        self.current().tools.is_some()
    }

    fn version(&self) -> Option<Arc<str>> {
        Some(Arc::clone(&self.current().version))
    }
}

/// The Rust recipes of `docs/cedar.md`, run as doctests with this module's own (so that
/// `cargo test --doc policy::cedar` runs them).
#[cfg(doctest)]
mod recipes {
    #![doc = include_str!("../../../docs/cedar.md")]
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::Principal;
    use crate::policy::Decision;

    const SCHEMA: &str = r#"namespace Demo {
        @mcp_principal("User")
        entity User = { issuer: String, subject: String, client_id: String, scopes: Set<String>, claims: {} };
        @mcp_resource("McpServer")
        entity McpServer;
        @mcp_context("gate")
        type Gate = { era: String, phase: String, protocol_version: String, elicitation_form: Bool,
                      elicitation_url: Bool, tasks: Bool, approved_by: String };
        type App = { on_call: Bool };
        action "page" appliesTo {
            principal: [User], resource: [McpServer], context: { input: {}, gate: Gate, app: App }
        };
    }"#;

    /// Permits a page only to whoever the hook says is on call.
    const POLICIES: &str = "permit(principal, action, resource) when { context.app.on_call };";

    fn evaluation() -> Evaluation {
        let principal = Principal::builder()
            .issuer("https://as.example")
            .subject("alice")
            .build()
            .expect("a principal");
        Evaluation::builder(principal)
            .tool("page", json!({}))
            .build()
            .expect("an evaluation")
    }

    fn with_hook(builder: CedarPolicyBuilder) -> CedarPolicy {
        builder
            .schema_text("schema.cedarschema", SCHEMA)
            .policies_text("page.cedar", POLICIES)
            .build()
            .expect("the policy builds")
    }

    #[tokio::test]
    async fn a_hook_returns_a_value_or_a_result() {
        let plain = with_hook(
            CedarPolicy::builder().context_hook(|_| async { json!({ "on_call": true }) }),
        );
        assert_eq!(
            plain.evaluate(evaluation()).await.ok(),
            Some(Decision::Allow)
        );
        let off = with_hook(
            CedarPolicy::builder().context_hook(|_| async { json!({ "on_call": false }) }),
        );
        assert!(matches!(
            off.evaluate(evaluation()).await,
            Ok(Decision::Deny(_))
        ));

        let fallible = with_hook(
            CedarPolicy::builder()
                .context_hook(|_| async { Ok::<_, std::io::Error>(json!({ "on_call": true })) }),
        );
        assert_eq!(
            fallible.evaluate(evaluation()).await.ok(),
            Some(Decision::Allow)
        );
        let failing = with_hook(CedarPolicy::builder().context_hook(|_| async {
            Err::<Value, _>(std::io::Error::other("the roster is unreachable"))
        }));
        let error = failing.evaluate(evaluation()).await.err();
        assert_eq!(
            error.map(|e| e.to_string()),
            Some("the roster is unreachable".to_owned())
        );
    }
}
