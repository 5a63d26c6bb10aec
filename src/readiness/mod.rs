//! Whether the gate can serve: keys loaded for every issuer, every store reachable, the policy
//! loaded ([`Gate::readiness`](crate::Gate::readiness)), and the key prefetch before serving
//! ([`Gate::load_keys`](crate::Gate::load_keys)).
//!
//! Threat: a gate that starts serving before it can verify answers every caller `503` (keys
//! not loaded) or refuses every held call (a store unreachable), and the operator learns of it
//! from the callers. A readiness probe that asks this report keeps such a replica out of the
//! load balancer until it can serve. The report names what is not ready and why, in the
//! crate's own words; its [`detail`](CheckStatus::NotReady::detail) texts (a fetch error, a
//! store error) are for the operator's log, and the axum [`handler`] does not serve them.

#[cfg(feature = "axum")]
mod handler;

use std::fmt;
use std::sync::Arc;

#[cfg(feature = "axum")]
pub use handler::handler;

use crate::settings::Settings;
use crate::store::StoreKind;

/// The readiness report: one [`Check`] per issuer with remote keys, per store and for the
/// policy.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Readiness {
    /// Every check, issuers first, then the stores, then the policy.
    pub checks: Vec<Check>,
}

impl Readiness {
    /// Whether every check is ready.
    pub fn is_ready(&self) -> bool {
        self.checks.iter().all(Check::is_ready)
    }

    /// The checks that are not ready.
    pub fn not_ready(&self) -> impl Iterator<Item = &Check> {
        self.checks.iter().filter(|check| !check.is_ready())
    }
}

impl fmt::Display for Readiness {
    /// `ready`, or `not ready: ` and each failing check.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_ready() {
            return f.write_str("ready");
        }
        f.write_str("not ready")?;
        let mut separator = ": ";
        for check in self.not_ready() {
            write!(f, "{separator}{check}")?;
            separator = "; ";
        }
        Ok(())
    }
}

/// One thing the gate needs in order to serve.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Check {
    /// What is checked.
    pub component: Component,
    /// Which one: the issuer's identifier, the store's backend (`memory`, `redis`, `custom`),
    /// or the policy's version (`policy` when it has none).
    pub name: String,
    /// Whether it is ready.
    pub status: CheckStatus,
}

impl Check {
    /// Whether this check is ready.
    pub fn is_ready(&self) -> bool {
        matches!(self.status, CheckStatus::Ready)
    }
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.component, self.name)?;
        match &self.status {
            CheckStatus::Ready => f.write_str(" ready"),
            CheckStatus::NotReady { why, detail } => write!(f, " {why} ({detail})"),
        }
    }
}

/// What a [`Check`] is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Component {
    /// A trusted issuer's remote keys (issuers with static keys are always ready).
    Issuer,
    /// One of the gate's stores.
    Store(StoreKind),
    /// The policy.
    Policy,
}

impl Component {
    /// The component in the report: `issuer`, `session_store`, `replay_store`, `task_store`,
    /// `limit_store`, `revocation_feed` or `policy`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Issuer => "issuer",
            Self::Store(StoreKind::Sessions) => "session_store",
            Self::Store(StoreKind::Replay) => "replay_store",
            Self::Store(StoreKind::Tasks) => "task_store",
            Self::Store(StoreKind::Limits) => "limit_store",
            Self::Store(StoreKind::Revocations) => "revocation_feed",
            Self::Policy => "policy",
        }
    }
}

impl fmt::Display for Component {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A check's result: ready, or not and why (two states, for good).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CheckStatus {
    /// Ready.
    Ready,
    /// Not ready.
    NotReady {
        /// Why, in the crate's words.
        why: NotReadyReason,
        /// What failed, for the operator's log: a fetch or store error's text. The axum
        /// [`handler`] leaves it out.
        detail: String,
    },
}

/// Why a [`Check`] is not ready.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NotReadyReason {
    /// No fetch of the issuer's keys has finished yet (one is started by asking).
    KeysNotFetched,
    /// The issuer's keys could not be fetched, and none are held.
    KeysUnavailable,
    /// The store did not answer.
    StoreUnreachable,
    /// The revocation feed's copy may not be used now (`docs/revocation.md`): requests are
    /// refused until it syncs.
    RevocationFeedDown,
}

impl NotReadyReason {
    /// The reason in the report: `keys_not_fetched`, `keys_unavailable`,
    /// `store_unreachable` or `revocation_feed_down`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::KeysNotFetched => "keys_not_fetched",
            Self::KeysUnavailable => "keys_unavailable",
            Self::StoreUnreachable => "store_unreachable",
            Self::RevocationFeedDown => "revocation_feed_down",
        }
    }
}

impl fmt::Display for NotReadyReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The report for `settings`, each store asked once and the stores at the same time. With
/// `load`, every remote issuer's keys are fetched now unless held, and waited for (the
/// prefetch); without, issuers are taken as they stand (a set never fetched starts fetching).
pub(crate) async fn report(settings: &Arc<Settings>, load: bool) -> Readiness {
    let mut checks = issuer_checks(settings, load).await;
    checks.extend(store_checks(settings).await);
    checks.extend(revocation_check(settings).await);
    checks.push(policy_check(settings));
    Readiness { checks }
}

#[cfg(feature = "jwks")]
async fn issuer_checks(settings: &Settings, load: bool) -> Vec<Check> {
    use crate::auth::jwks::KeyState;
    use crate::auth::keys::KeySource;
    let remotes = settings
        .authenticator
        .jwt
        .iter()
        .flat_map(|jwt| jwt.issuers())
        .filter_map(|issuer| match &issuer.keys {
            KeySource::Remote(remote) => Some(remote.clone()),
            KeySource::Static(_) => None,
        });
    let states = futures_util::future::join_all(remotes.map(|remote| async move {
        let state = if load {
            remote.load().await
        } else {
            remote.state()
        };
        (remote.issuer().to_owned(), state)
    }))
    .await;
    states
        .into_iter()
        .map(|(issuer, state)| Check {
            component: Component::Issuer,
            name: issuer,
            status: match state {
                KeyState::Loaded => CheckStatus::Ready,
                KeyState::NotFetched => CheckStatus::NotReady {
                    why: NotReadyReason::KeysNotFetched,
                    detail: "no fetch of the key set has finished yet".into(),
                },
                KeyState::Failed(detail) => CheckStatus::NotReady {
                    why: NotReadyReason::KeysUnavailable,
                    detail,
                },
            },
        })
        .collect()
}

#[cfg(not(feature = "jwks"))]
async fn issuer_checks(_: &Settings, _: bool) -> Vec<Check> {
    Vec::new()
}

async fn store_checks(settings: &Settings) -> Vec<Check> {
    let sessions = async {
        let store = &settings.sessions;
        (
            StoreKind::Sessions,
            store.backend(),
            store.reachable().await,
        )
    };
    let replay = async {
        match &settings.continuation.state.replay {
            Some(store) => Some((StoreKind::Replay, store.backend(), store.reachable().await)),
            None => None,
        }
    };
    let tasks = async {
        let store = &settings.tasks.store;
        (StoreKind::Tasks, store.backend(), store.reachable().await)
    };
    let limits = async {
        let limits = &settings.policy.limits;
        if limits.configured() {
            let reached = limits.store().reachable().await;
            Some((StoreKind::Limits, limits.backend(), reached))
        } else {
            None
        }
    };
    let (sessions, replay, tasks, limits) =
        futures_util::future::join4(sessions, replay, tasks, limits).await;
    [Some(sessions), replay, Some(tasks), limits]
        .into_iter()
        .flatten()
        .map(|(kind, backend, reached)| Check {
            component: Component::Store(kind),
            name: backend.to_owned(),
            status: match reached {
                Ok(()) => CheckStatus::Ready,
                Err(error) => CheckStatus::NotReady {
                    why: NotReadyReason::StoreUnreachable,
                    detail: error.to_string(),
                },
            },
        })
        .collect()
}

/// The revocation set, when configured: reachable, and its copy usable now under the
/// configured outage mode (a replica that would refuse every request is not ready).
async fn revocation_check(settings: &Settings) -> Option<Check> {
    let revocations = settings.revocations.as_ref()?;
    let store = &revocations.store;
    let status = match store.reachable().await {
        Err(error) => CheckStatus::NotReady {
            why: NotReadyReason::StoreUnreachable,
            detail: error.to_string(),
        },
        Ok(()) if !revocations.usable_now() => CheckStatus::NotReady {
            why: NotReadyReason::RevocationFeedDown,
            detail: format!("the feed is {}", store.list().state().as_str()),
        },
        Ok(()) => CheckStatus::Ready,
    };
    Some(Check {
        component: Component::Store(StoreKind::Revocations),
        name: store.backend().to_owned(),
        status,
    })
}

/// A built gate holds a loaded policy (a Cedar set that does not load fails the build, and a
/// reload that fails keeps the last good set): the check names its version.
fn policy_check(settings: &Settings) -> Check {
    Check {
        component: Component::Policy,
        name: settings
            .policy
            .policy
            .version()
            .map_or_else(|| "policy".to_owned(), |version| version.to_string()),
        status: CheckStatus::Ready,
    }
}
