//! Rate limits: how fast one caller, one client, or everyone together may call.
//!
//! **Threat.** One token can run an expensive tool thousands of times a second, keep the
//! policy busy with calls it denies, or flood the inner server for everyone. Quotas bound how
//! much *state* a caller holds, not how often it calls. A [`Limit`] bounds the calls, at a
//! [`RateLimit`] enforced with GCRA, counted per principal (issuer, subject and client id
//! together), per principal and tool, per client id, or over every caller for one tool.
//!
//! **Where.** Limits are checked by the one decision point, before the policy is asked, for
//! every operation the policy would judge (`tools/call`, `resources/read`, `prompts/get`,
//! `completion/complete`, subscriptions, ...). So a call the policy would deny counts against
//! its caller (a flood of denied calls is held to the rate and never reaches the policy), and
//! a refused call costs one counter look-up. Listings and lifecycle messages (`initialize`,
//! `ping`, `tools/list`, notifications) are not counted: they are not judged per call, and a
//! caller held at its limit can still list and reconnect.
//!
//! **Keys.** A caller's counters are keyed by its principal and the limit; a tool is named
//! in a key only when the inner server lists it or the limit names it, any other name counts
//! as `other`: a caller sending new tool names cannot make new counters. The counters live in
//! a [`LimitStore`], in memory or in Redis; a store that
//! cannot answer refuses the call.
//!
//! **Calls in flight.** A [`ConcurrencyLimit`] bounds how many calls one principal has
//! under way at once, however slowly it sends them: a call takes a place where the rate limits
//! are checked (after them, before the policy) and gives it back when its answer is complete
//! (a streamed answer when its stream ends or is dropped), or when the request is dropped at
//! any point before. The place is held by a guard that gives it back when it is dropped, so a
//! cancelled request or a panicking inner service gives it back too. A call past the limit
//! gets the rate-limit answer with the scope `concurrency` and a retry after one second.
//!
//! ```
//! use mcp_gate::limit::{ConcurrencyLimit, Limit, RateLimit};
//!
//! // Every caller: 600 calls a minute, 20 at once; `transfer`: 10 a minute per caller.
//! let everything = Limit::per_principal(RateLimit::per_minute(600)?.with_burst(20)?);
//! let transfer = Limit::per_principal("10/minute".parse()?).for_tool("transfer");
//! // And at most 4 calls of one caller under way at a time.
//! let in_flight = ConcurrencyLimit::per_principal(4);
//! # let _ = (everything, transfer, in_flight);
//! # Ok::<(), mcp_gate::limit::RateError>(())
//! ```

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};
use smallvec::SmallVec;

pub use crate::store::limits::{RateError, RateLimit};

use crate::auth::Principal;
use crate::mcp::Target;
use crate::store::StoreError;
use crate::store::limits::{Lease, LimitStore, Taken, Tally};

/// Whose calls one limit counts together.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LimitScope {
    /// One principal's calls (issuer, subject and client id together).
    Principal,
    /// One principal's calls of one tool (or, for an operation that is not a tool call, of
    /// one method).
    PrincipalAndTool,
    /// Every call made through one client id, whoever the user; a token without a client id
    /// is counted per principal.
    Client,
    /// Every caller's calls of one tool (or method) together.
    Tool,
}

impl LimitScope {
    /// The scope's word in answers, logs and metric labels: `principal`, `principal_tool`,
    /// `client` or `tool`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Principal => "principal",
            Self::PrincipalAndTool => "principal_tool",
            Self::Client => "client",
            Self::Tool => "tool",
        }
    }
}

impl fmt::Display for LimitScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One rate limit: whose calls it counts, at what rate, and optionally for one tool only.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limit {
    scope: LimitScope,
    rate: RateLimit,
    tool: Option<String>,
}

impl Limit {
    /// Each principal's calls, all operations together.
    pub fn per_principal(rate: RateLimit) -> Self {
        Self::new(LimitScope::Principal, rate)
    }

    /// Each principal's calls of each tool (each method, for other operations).
    pub fn per_principal_and_tool(rate: RateLimit) -> Self {
        Self::new(LimitScope::PrincipalAndTool, rate)
    }

    /// Each client id's calls, all users together.
    pub fn per_client(rate: RateLimit) -> Self {
        Self::new(LimitScope::Client, rate)
    }

    /// Each tool's calls (each method's, for other operations), all callers together.
    pub fn per_tool(rate: RateLimit) -> Self {
        Self::new(LimitScope::Tool, rate)
    }

    /// `scope`'s calls at `rate`.
    pub fn new(scope: LimitScope, rate: RateLimit) -> Self {
        Self {
            scope,
            rate,
            tool: None,
        }
    }

    /// The same limit, counting only calls of the tool `name` (`tools/call`).
    pub fn for_tool(mut self, name: impl Into<String>) -> Self {
        self.tool = Some(name.into());
        self
    }

    /// Whose calls it counts.
    pub fn scope(&self) -> LimitScope {
        self.scope
    }

    /// Its rate.
    pub fn rate(&self) -> RateLimit {
        self.rate
    }

    /// The one tool it counts, if it names one.
    pub fn tool(&self) -> Option<&str> {
        self.tool.as_deref()
    }

    /// The limit's id in counter names: a digest of what it is, the same on every replica
    /// configured alike, and new when the limit changes.
    fn id(&self) -> String {
        let text = format!(
            "{}\u{0}{}\u{0}{}",
            self.scope,
            self.tool.as_deref().unwrap_or(""),
            self.rate
        );
        Sha256::digest(text.as_bytes())[..8]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

/// At most `max` calls of one principal (issuer, subject and client id together) in flight at
/// once, counted on the operations rate limits count (listings and lifecycle messages are not,
/// nor `subscriptions/listen`, a standing stream rather than a call). Set with
/// [`GateBuilder::concurrency_limit`](crate::GateBuilder::concurrency_limit).
///
/// Each call's place is a lease that expires after [`lease`](Self::lease) (default
/// [`DEFAULT_LEASE`](Self::DEFAULT_LEASE)) in a shared store: a replica that stops while its
/// calls run cannot hold their places for longer. A call running longer than its lease stops
/// being counted then; give the lease more time than the longest call you expect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConcurrencyLimit {
    max: u32,
    lease: Duration,
}

impl ConcurrencyLimit {
    /// The lease of a call's place unless [`with_lease`](Self::with_lease) says otherwise: five
    /// minutes.
    pub const DEFAULT_LEASE: Duration = Duration::from_secs(300);

    /// At most `max` calls of each principal in flight at once (the builder refuses 0).
    pub const fn per_principal(max: u32) -> Self {
        Self {
            max,
            lease: Self::DEFAULT_LEASE,
        }
    }

    /// The same limit, each place leased for `lease` (the builder takes 1 second to 1 day).
    pub const fn with_lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// The most calls of one principal in flight at once.
    pub const fn max(&self) -> u32 {
        self.max
    }

    /// How long a call's place is held at most.
    pub const fn lease(&self) -> Duration {
        self.lease
    }
}

/// The limit a refused call was past: a rate limit of some scope, or the concurrency limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reached {
    /// A rate limit, counting calls of this scope.
    Rate(LimitScope),
    /// The principal's calls in flight.
    Concurrency,
}

impl Reached {
    /// The word in answers, logs and metric labels: the rate limit's scope, or `concurrency`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Rate(scope) => scope.as_str(),
            Self::Concurrency => "concurrency",
        }
    }
}

/// A call refused by a limit: which one, and when to come back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Limited {
    pub scope: Reached,
    pub retry_after: Duration,
}

/// How long a call past the concurrency limit is told to wait: a place frees when any of the
/// caller's calls ends, which the layer cannot foresee.
const IN_FLIGHT_RETRY_AFTER: Duration = Duration::from_secs(1);

/// A call's place among its principal's calls in flight: given back to the store when this is
/// dropped, wherever that happens (the answer's body ended or dropped, the request cancelled,
/// the inner service panicked). Boxed, so a response holding none costs one word.
pub(crate) struct InFlight(Box<Held>);

struct Held {
    store: Arc<dyn LimitStore>,
    lease: Option<Lease>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let Some(lease) = self.0.lease.take() else {
            return;
        };
        let Some(release) = self.0.store.release(lease) else {
            return;
        };
        // The store gives the place back asynchronously (Redis): on the runtime if there is
        // one; without one, the lease expires by itself.
        let give_back = async move {
            if let Err(error) = release.await {
                tracing::warn!(target: "mcp_gate::limits", error = %error, "a call's place in flight was not given back; it is held until its lease expires");
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn(give_back)),
            Err(_) => {
                tracing::warn!(target: "mcp_gate::limits", "a call's place in flight was dropped outside a runtime; it is held until its lease expires")
            }
        }
    }
}

impl fmt::Debug for InFlight {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InFlight").finish_non_exhaustive()
    }
}

impl Limited {
    /// The wait in whole seconds, rounded up and at least 1: a retry after that many seconds
    /// passes (unless other calls took the room first).
    pub fn retry_after_secs(&self) -> u64 {
        let wait = self.retry_after;
        let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        secs.max(1)
    }
}

/// The limits a gate enforces, their ids, and where their counters are kept (also those a
/// policy names for one call).
pub(crate) struct Limits {
    rules: Vec<(Limit, String)>,
    concurrency: Option<ConcurrencyLimit>,
    store: Arc<dyn LimitStore>,
}

impl Limits {
    /// `rules` (perhaps none) and perhaps a `concurrency` limit, counted in `store`.
    pub fn new(
        rules: Vec<Limit>,
        concurrency: Option<ConcurrencyLimit>,
        store: Arc<dyn LimitStore>,
    ) -> Self {
        let rules = rules
            .into_iter()
            .map(|rule| {
                let id = rule.id();
                (rule, id)
            })
            .collect();
        Self {
            rules,
            concurrency,
            store,
        }
    }

    /// Whether the builder configured any limit (a rate or a concurrency limit).
    pub fn configured(&self) -> bool {
        !self.rules.is_empty() || self.concurrency.is_some()
    }

    /// Whether the builder configured a rate limit.
    pub fn rated(&self) -> bool {
        !self.rules.is_empty()
    }

    /// Takes a place among `principal`'s calls in flight for an operation (`method`), when a
    /// concurrency limit is configured and counts it (`None` otherwise: nothing is counted).
    /// The future's answer: the place, held until the guard drops, or the refusal.
    pub fn in_flight(
        &self,
        principal: &Principal,
        method: &str,
    ) -> Option<impl Future<Output = Result<Result<InFlight, Limited>, StoreError>> + Send + use<>>
    {
        let limit = self.concurrency?;
        // A standing stream of updates, not a call: it would hold a place for as long as the
        // client listens.
        if method == "subscriptions/listen" {
            return None;
        }
        let holder = caller(principal);
        let store = Arc::clone(&self.store);
        Some(async move {
            let lease = store.acquire(&holder, limit.max, limit.lease).await?;
            Ok(match lease {
                Some(lease) => Ok(InFlight(Box::new(Held {
                    store,
                    lease: Some(lease),
                }))),
                None => Err(Limited {
                    scope: Reached::Concurrency,
                    retry_after: IN_FLIGHT_RETRY_AFTER,
                }),
            })
        })
    }

    /// The store's backend, for start-up lines.
    pub fn backend(&self) -> &'static str {
        self.store.backend()
    }

    /// The store, for a readiness report.
    pub fn store(&self) -> &dyn LimitStore {
        &*self.store
    }

    /// Counts one operation of `principal` (`method`, on `target`) on every configured limit
    /// that applies; `listed` says whether the inner server lists a tool of that name.
    /// `Ok(None)`: admitted (or no limit applies).
    pub async fn check(
        &self,
        principal: &Principal,
        method: &str,
        target: &Target,
        listed: impl Fn(&str) -> bool,
    ) -> Result<Option<Limited>, StoreError> {
        let rules = self.rules.iter().map(|(rule, id)| (rule, id.clone()));
        self.count(principal, method, target, listed, rules).await
    }

    /// Counts one operation on the limits a policy named for it (`named`).
    pub async fn check_named(
        &self,
        principal: &Principal,
        method: &str,
        target: &Target,
        listed: impl Fn(&str) -> bool,
        named: &[Limit],
    ) -> Result<Option<Limited>, StoreError> {
        let rules = named.iter().map(|rule| (rule, rule.id()));
        self.count(principal, method, target, listed, rules).await
    }

    async fn count<'r>(
        &self,
        principal: &Principal,
        method: &str,
        target: &Target,
        listed: impl Fn(&str) -> bool,
        rules: impl Iterator<Item = (&'r Limit, String)>,
    ) -> Result<Option<Limited>, StoreError> {
        let tool = match target {
            Target::Tool { name, .. } => Some(name.as_str()),
            _ => None,
        };
        // A call counts on a few limits: kept inline, no allocation for the lists themselves.
        let mut tallies: SmallVec<[Tally; 4]> = SmallVec::new();
        let mut scopes: SmallVec<[LimitScope; 4]> = SmallVec::new();
        for (rule, id) in rules {
            if let Some(only) = &rule.tool
                && tool != Some(only.as_str())
            {
                continue;
            }
            // What a per-tool counter is named by: the tool if it is known, else `other`; the
            // method's table name for an operation that is not a tool call.
            let what = match tool {
                Some(name) if rule.tool.is_some() || listed(name) => name,
                Some(_) => "other",
                None => crate::mcp::method_label(method),
            };
            let (group, name) = match rule.scope {
                LimitScope::Principal => (caller(principal), id),
                LimitScope::PrincipalAndTool => (caller(principal), format!("{id}:{what}")),
                LimitScope::Client => match principal.client_id() {
                    Some(client) => (
                        format!("client\u{0}{}\u{0}{client}", principal.issuer()),
                        id,
                    ),
                    None => (caller(principal), id),
                },
                LimitScope::Tool => (format!("tool\u{0}{what}"), id),
            };
            tallies.push(Tally::new(group, name, rule.rate));
            scopes.push(rule.scope);
        }
        if tallies.is_empty() {
            return Ok(None);
        }
        Ok(match self.store.take(&tallies).await? {
            Taken::Admitted => None,
            Taken::Limited { tally, retry_after } => Some(Limited {
                scope: Reached::Rate(scopes.get(tally).copied().unwrap_or(LimitScope::Principal)),
                retry_after,
            }),
        })
    }
}

/// The group of a principal's own counters: issuer, subject and client id.
fn caller(principal: &Principal) -> String {
    let parts = [
        "principal",
        principal.issuer(),
        principal.subject().unwrap_or(""),
        principal.client_id().unwrap_or(""),
    ];
    // Sized once: a `format!` would grow its buffer as it goes, one allocation per step.
    let mut group = String::with_capacity(parts.iter().map(|p| p.len() + 1).sum());
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            group.push('\u{0}');
        }
        group.push_str(part);
    }
    group
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::limits::MemoryLimitStore;

    fn principal(subject: &str, client: Option<&str>) -> Principal {
        let mut builder = Principal::builder()
            .issuer("https://as.example")
            .subject(subject);
        if let Some(client) = client {
            builder = builder.client_id(client);
        }
        builder.build().expect("a principal")
    }

    fn tool(name: &str) -> Target {
        Target::Tool {
            name: name.to_owned(),
            arguments: Default::default(),
        }
    }

    /// A `tools/call` of `name` by `who`, where only `echo` is listed.
    async fn call(
        limits: &Limits,
        who: &Principal,
        name: &str,
    ) -> Result<Option<Limited>, StoreError> {
        let listed = |tool: &str| tool == "echo";
        limits.check(who, "tools/call", &tool(name), listed).await
    }

    #[tokio::test]
    async fn a_limit_for_one_tool_counts_only_that_tool() {
        let transfer =
            Limit::per_principal(RateLimit::per_minute(1).expect("rate")).for_tool("transfer");
        let limits = Limits::new(vec![transfer], None, Arc::new(MemoryLimitStore::default()));
        let alice = principal("alice", None);
        assert_eq!(call(&limits, &alice, "transfer").await, Ok(None));
        let second = call(&limits, &alice, "transfer")
            .await
            .expect("an answer")
            .expect("limited");
        assert_eq!(second.scope, Reached::Rate(LimitScope::Principal));
        assert!((50..=60).contains(&second.retry_after_secs()));
        // Other tools are not counted.
        for _ in 0..5 {
            assert_eq!(call(&limits, &alice, "echo").await, Ok(None));
        }
    }

    #[tokio::test]
    async fn unlisted_tool_names_share_one_counter() {
        let each = Limit::per_principal_and_tool(RateLimit::per_minute(1).expect("rate"));
        let limits = Limits::new(vec![each], None, Arc::new(MemoryLimitStore::new(4)));
        let alice = principal("alice", None);
        assert_eq!(call(&limits, &alice, "echo").await, Ok(None));
        assert_eq!(call(&limits, &alice, "made-up-1").await, Ok(None));
        // A second made-up name is `other` too: limited, and no new counter was made.
        assert!(matches!(
            call(&limits, &alice, "made-up-2").await,
            Ok(Some(_))
        ));
    }

    #[tokio::test]
    async fn a_client_limit_counts_every_user_of_the_client() {
        let two = RateLimit::per_minute(2).and_then(|rate| rate.with_burst(2));
        let per_client = Limit::per_client(two.expect("rate"));
        let limits = Limits::new(
            vec![per_client],
            None,
            Arc::new(MemoryLimitStore::default()),
        );
        let none = |_: &str| false;
        let target = Target::None;
        for user in ["alice", "bob"] {
            let who = principal(user, Some("cli"));
            assert_eq!(
                limits.check(&who, "resources/read", &target, none).await,
                Ok(None)
            );
        }
        let carol = principal("carol", Some("cli"));
        let limited = limits.check(&carol, "resources/read", &target, none).await;
        assert!(matches!(
            limited,
            Ok(Some(Limited {
                scope: Reached::Rate(LimitScope::Client),
                ..
            }))
        ));
        // Another client is not touched.
        let dave = principal("dave", Some("web"));
        assert_eq!(
            limits.check(&dave, "resources/read", &target, none).await,
            Ok(None)
        );
    }

    /// A gate's limits with only a concurrency limit of `max`, in `store`.
    fn in_flight(max: u32, store: MemoryLimitStore) -> Limits {
        let limit = ConcurrencyLimit::per_principal(max);
        Limits::new(Vec::new(), Some(limit), Arc::new(store))
    }

    /// `who`'s place for a `tools/call`, or the refusal.
    async fn take(limits: &Limits, who: &Principal) -> Result<InFlight, Limited> {
        let acquire = limits.in_flight(who, "tools/call").expect("counted");
        acquire.await.expect("the store answers")
    }

    #[tokio::test]
    async fn a_principal_holds_at_most_max_places_and_a_dropped_guard_gives_one_back() {
        let limits = in_flight(2, MemoryLimitStore::default());
        let alice = principal("alice", None);
        let first = take(&limits, &alice).await.expect("a place");
        let second = take(&limits, &alice).await.expect("a place");
        let refused = take(&limits, &alice).await.expect_err("limited");
        assert_eq!(refused.scope, Reached::Concurrency);
        assert_eq!(refused.scope.as_str(), "concurrency");
        assert_eq!(refused.retry_after_secs(), 1);
        // Another principal (the same subject through another client is another) has its own.
        let bob = principal("bob", None);
        let his = take(&limits, &bob).await.expect("a place");
        let through_cli = principal("alice", Some("cli"));
        let hers = take(&limits, &through_cli).await.expect("a place");
        // One dropped: one place, not two.
        drop(first);
        let third = take(&limits, &alice).await.expect("a place");
        assert!(take(&limits, &alice).await.is_err());
        drop((second, third, his, hers));
        let again = take(&limits, &alice).await.expect("a place");
        drop(again);
    }

    #[tokio::test]
    async fn listings_listens_and_gates_without_the_limit_take_no_place() {
        let limits = in_flight(1, MemoryLimitStore::default());
        let alice = principal("alice", None);
        assert!(limits.in_flight(&alice, "subscriptions/listen").is_none());
        let unlimited = Limits::new(Vec::new(), None, Arc::new(MemoryLimitStore::default()));
        assert!(!unlimited.configured());
        assert!(unlimited.in_flight(&alice, "tools/call").is_none());
    }

    #[tokio::test]
    async fn a_place_held_by_a_cancelled_call_or_a_panicking_one_is_given_back() {
        let limits = Arc::new(in_flight(1, MemoryLimitStore::default()));
        let alice = principal("alice", None);
        // A call that takes its place and then waits forever, cancelled.
        let (taken, told) = tokio::sync::oneshot::channel();
        let call = {
            let (limits, alice) = (Arc::clone(&limits), alice.clone());
            tokio::spawn(async move {
                let place = take(&limits, &alice).await.expect("a place");
                let _ = taken.send(());
                std::future::pending::<()>().await;
                drop(place);
            })
        };
        told.await.expect("the call took its place");
        assert!(take(&limits, &alice).await.is_err(), "held by the call");
        call.abort();
        assert!(call.await.expect_err("cancelled").is_cancelled());
        let place = take(&limits, &alice).await.expect("given back");
        drop(place);
        // A call that panics while it holds its place.
        let call = {
            let (limits, alice) = (Arc::clone(&limits), alice.clone());
            tokio::spawn(async move {
                let _place = take(&limits, &alice).await.expect("a place");
                panic!("the inner service panicked");
            })
        };
        assert!(call.await.expect_err("panicked").is_panic());
        assert!(take(&limits, &alice).await.is_ok(), "given back");
    }

    #[tokio::test]
    async fn a_full_in_flight_table_refuses_the_call() {
        let limits = in_flight(1, MemoryLimitStore::new(1));
        let alice = take(&limits, &principal("alice", None)).await;
        let bob = principal("bob", None);
        let refused = limits.in_flight(&bob, "tools/call").expect("counted").await;
        assert!(
            matches!(refused, Err(StoreError::Full { capacity: 1, .. })),
            "{refused:?}"
        );
        drop(alice);
        assert!(take(&limits, &bob).await.is_ok());
    }

    #[test]
    fn retry_after_rounds_up_to_whole_seconds() {
        let at = |micros| Limited {
            scope: Reached::Rate(LimitScope::Principal),
            retry_after: Duration::from_micros(micros),
        };
        assert_eq!(at(1).retry_after_secs(), 1);
        assert_eq!(at(1_000_000).retry_after_secs(), 1);
        assert_eq!(at(1_000_001).retry_after_secs(), 2);
        assert_eq!(at(59_999_999).retry_after_secs(), 60);
    }
}
