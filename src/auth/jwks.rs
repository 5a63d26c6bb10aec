//! Remote key sets: issuer discovery, JWKS fetches, refresh on unknown `kid`, stale-if-error.
//!
//! Threats this module answers:
//! - **Amplification.** A token with a made-up `kid` must not make the layer hammer the issuer.
//!   Unknown-`kid` refreshes are single-flight (one fetch however many requests wait on it) and
//!   rate-limited by a cooldown; within the cooldown an unknown `kid` is refused at once.
//! - **Outage.** An issuer that is down, slow or answering garbage must not take the resource
//!   down: the last good key set keeps serving, and a failed fetch never replaces it.
//! - **Lock convoys.** No lock is held across a fetch. Readers clone an `Arc` of the current
//!   set; the fetch runs in its own task, so a cancelled request cannot abandon it half-way.
//! - **Oversized documents.** Discovery and JWKS bodies are read up to a cap, and the number of
//!   keys taken from a set is capped.
//!
//! Besides unknown-`kid` refreshes, a set older than [`KeyRefresh::interval`] is refreshed in the
//! background on the next lookup, so rotations that reuse no `kid` are still picked up.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use jsonwebtoken::Algorithm;
use jsonwebtoken::jwk::JwkSet;
use tokio::sync::watch;
use url::Url;

use super::keys::{KeySet, Lookup, VerificationKey};
use super::rejection::{AuthError, InvalidToken};
use crate::http_client::{FetchError, get_json};

/// How remote key sets are refreshed.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct KeyRefresh {
    /// Minimum time between two fetches triggered by unknown `kid`s (default 10 s).
    pub cooldown: Duration,
    /// Age after which the set is refreshed in the background on the next lookup (default 5 min).
    pub interval: Duration,
    /// Timeout of one discovery or JWKS request (default 5 s).
    pub timeout: Duration,
    /// Largest number of keys taken from one JWK set (default 32).
    pub max_keys: usize,
    /// Largest discovery or JWKS document read, in bytes (default 256 KiB).
    pub max_document_bytes: usize,
}

impl Default for KeyRefresh {
    fn default() -> Self {
        Self {
            cooldown: Duration::from_secs(10),
            interval: Duration::from_secs(300),
            timeout: Duration::from_secs(5),
            max_keys: 32,
            max_document_bytes: 256 * 1024,
        }
    }
}

impl KeyRefresh {
    /// Sets [`KeyRefresh::cooldown`].
    pub fn cooldown(mut self, cooldown: Duration) -> Self {
        self.cooldown = cooldown;
        self
    }

    /// Sets [`KeyRefresh::interval`].
    pub fn interval(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }

    /// Sets [`KeyRefresh::timeout`].
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets [`KeyRefresh::max_keys`].
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys;
        self
    }
}

/// Where the JWK set of an issuer lives.
#[derive(Clone, Debug)]
pub(crate) enum JwksLocation {
    /// Found through RFC 8414 / OpenID discovery from the issuer identifier.
    Discover,
    /// Given explicitly.
    Uri(Url),
}

#[derive(Default)]
struct RefreshState {
    in_flight: bool,
    last_attempt: Option<Instant>,
    discovered: Option<Url>,
    /// The last refresh's failure, until one succeeds: what a readiness report says.
    failure: Option<String>,
}

/// Whether one issuer's keys are loaded, for a readiness report.
pub(crate) enum KeyState {
    /// A set of usable keys is held.
    Loaded,
    /// No fetch has finished yet.
    NotFetched,
    /// No key is held, and the last fetch failed for this reason.
    Failed(String),
}

/// The JWK set of one issuer, fetched and refreshed over HTTP.
pub(crate) struct RemoteJwks {
    issuer: String,
    location: JwksLocation,
    client: reqwest::Client,
    settings: KeyRefresh,
    keys: RwLock<Arc<KeySet>>,
    state: Mutex<RefreshState>,
    done: watch::Sender<u64>,
    epoch: Instant,
    last_success_ms: AtomicU64,
    jwks_fetches: AtomicU64,
}

enum Next {
    Wait,
    Start,
    GiveUp,
}

impl RemoteJwks {
    pub fn new(
        issuer: String,
        location: JwksLocation,
        client: reqwest::Client,
        settings: KeyRefresh,
    ) -> Self {
        Self {
            issuer,
            location,
            client,
            settings,
            keys: RwLock::new(Arc::new(KeySet::default())),
            state: Mutex::new(RefreshState::default()),
            done: watch::Sender::new(0),
            epoch: Instant::now(),
            last_success_ms: AtomicU64::new(u64::MAX),
            jwks_fetches: AtomicU64::new(0),
        }
    }

    /// How many times the JWK set document was requested.
    pub fn jwks_fetches(&self) -> u64 {
        self.jwks_fetches.load(Ordering::Relaxed)
    }

    /// The issuer these keys belong to.
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// Whether keys are loaded now. A set that has never been fetched is fetched in the
    /// background (unless a fetch is running or cooling down), so that asking again later
    /// can find it loaded.
    pub fn state(self: &Arc<Self>) -> KeyState {
        if !self.current().is_empty() {
            return KeyState::Loaded;
        }
        let failure = self.lock_state().failure.clone();
        self.refresh_if_old();
        match failure {
            Some(why) => KeyState::Failed(why),
            None => KeyState::NotFetched,
        }
    }

    /// Fetches the set now unless one is held, and waits for the fetch (at most twice the
    /// request timeout): the key prefetch before serving.
    pub async fn load(self: &Arc<Self>) -> KeyState {
        if !self.current().is_empty() {
            return self.state();
        }
        let mut refreshed = self.done.subscribe();
        self.start_refresh(false);
        let patience = self.settings.timeout * 2 + Duration::from_millis(500);
        let _ = tokio::time::timeout(patience, refreshed.changed()).await;
        self.state()
    }

    fn current(&self) -> Arc<KeySet> {
        match self.keys.read() {
            Ok(guard) => guard.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    fn lock_state(&self) -> std::sync::MutexGuard<'_, RefreshState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Finds the key for a token, fetching the set when the `kid` is unknown.
    pub async fn find(
        self: &Arc<Self>,
        kid: Option<&str>,
        alg: Algorithm,
    ) -> Result<Arc<VerificationKey>, AuthError> {
        let mut refreshed = self.done.subscribe();
        let found = self.current().find(kid, alg);
        crate::measure::jwks_lookup(matches!(found, Lookup::Found(_)));
        match found {
            Lookup::Found(key) => {
                self.refresh_if_old();
                return Ok(key);
            }
            Lookup::DisallowedAlgorithm => {
                return Err(AuthError::InvalidToken(InvalidToken::DisallowedAlgorithm));
            }
            Lookup::NotFound => {}
        }
        let next = {
            let mut state = self.lock_state();
            // A refresh may have landed between the lookup above and taking the lock.
            if let Lookup::Found(key) = self.current().find(kid, alg) {
                return Ok(key);
            }
            if state.in_flight {
                Next::Wait
            } else if state
                .last_attempt
                .is_some_and(|at| at.elapsed() < self.settings.cooldown)
            {
                Next::GiveUp
            } else {
                state.in_flight = true;
                state.last_attempt = Some(Instant::now());
                Next::Start
            }
        };
        match next {
            Next::GiveUp => return Err(self.not_found()),
            Next::Start => {
                tokio::spawn(self.clone().refresh());
            }
            Next::Wait => {}
        }
        // Two request timeouts: discovery and the JWKS fetch may both run.
        let patience = self.settings.timeout * 2 + Duration::from_millis(500);
        let _ = tokio::time::timeout(patience, refreshed.changed()).await;
        match self.current().find(kid, alg) {
            Lookup::Found(key) => Ok(key),
            Lookup::DisallowedAlgorithm => {
                Err(AuthError::InvalidToken(InvalidToken::DisallowedAlgorithm))
            }
            Lookup::NotFound => Err(self.not_found()),
        }
    }

    fn not_found(&self) -> AuthError {
        if self.current().is_empty() {
            AuthError::KeysUnavailable
        } else {
            AuthError::InvalidToken(InvalidToken::UnknownKey)
        }
    }

    /// Starts a background refresh when the set is older than the refresh interval.
    fn refresh_if_old(self: &Arc<Self>) {
        let last = self.last_success_ms.load(Ordering::Relaxed);
        let now = self.epoch.elapsed().as_millis() as u64;
        if last != u64::MAX && now.saturating_sub(last) < self.settings.interval.as_millis() as u64
        {
            return;
        }
        self.start_refresh(true);
    }

    /// Starts a background refresh unless one is running or (when `cooling_counts`) the last
    /// attempt is within the cooldown.
    fn start_refresh(self: &Arc<Self>, cooling_counts: bool) {
        let start = {
            let mut state = self.lock_state();
            let cooling = cooling_counts
                && state
                    .last_attempt
                    .is_some_and(|at| at.elapsed() < self.settings.cooldown);
            if state.in_flight || cooling {
                false
            } else {
                state.in_flight = true;
                state.last_attempt = Some(Instant::now());
                true
            }
        };
        if start {
            tokio::spawn(self.clone().refresh());
        }
    }

    /// One refresh: fetch, replace the set on success, keep it on failure, wake the waiters.
    async fn refresh(self: Arc<Self>) {
        let fetched = self.fetch().await;
        crate::measure::jwks_fetch(fetched.is_ok());
        match fetched {
            Ok(set) => {
                tracing::debug!(target: "mcp_gate::keys", issuer = %self.issuer, keys = set.len(), "key set refreshed");
                match self.keys.write() {
                    Ok(mut guard) => *guard = Arc::new(set),
                    Err(poisoned) => *poisoned.into_inner() = Arc::new(set),
                }
                self.last_success_ms
                    .store(self.epoch.elapsed().as_millis() as u64, Ordering::Relaxed);
                self.lock_state().failure = None;
            }
            Err(error) => {
                tracing::warn!(target: "mcp_gate::keys", issuer = %self.issuer, %error, "key set refresh failed; keeping the last good keys");
                let mut state = self.lock_state();
                state.discovered = None;
                state.failure = Some(error.to_string());
            }
        }
        self.lock_state().in_flight = false;
        self.done.send_modify(|generation| *generation += 1);
    }

    async fn fetch(&self) -> Result<KeySet, FetchError> {
        let uri = match &self.location {
            JwksLocation::Uri(uri) => uri.clone(),
            JwksLocation::Discover => {
                let known = self.lock_state().discovered.clone();
                match known {
                    Some(uri) => uri,
                    None => {
                        let uri =
                            discover_jwks_uri(&self.client, &self.issuer, &self.settings).await?;
                        self.lock_state().discovered = Some(uri.clone());
                        uri
                    }
                }
            }
        };
        self.jwks_fetches.fetch_add(1, Ordering::Relaxed);
        let set: JwkSet = get_json(
            &self.client,
            uri,
            self.settings.timeout,
            self.settings.max_document_bytes,
        )
        .await?;
        let keys = KeySet::from_jwk_set(&set, self.settings.max_keys);
        if keys.is_empty() {
            return Err(FetchError::Invalid("the JWK set holds no usable key"));
        }
        Ok(keys)
    }
}

/// The metadata URLs to try for an issuer, in order: RFC 8414 (well-known part inserted before
/// the issuer's path), then OpenID Connect Discovery (appended to the issuer).
pub(crate) fn discovery_urls(issuer: &Url) -> Vec<Url> {
    let path = issuer.path().trim_end_matches('/');
    let mut origin = issuer.clone();
    origin.set_query(None);
    origin.set_fragment(None);
    let mut urls = Vec::with_capacity(2);
    let mut rfc8414 = origin.clone();
    rfc8414.set_path(&format!("/.well-known/oauth-authorization-server{path}"));
    urls.push(rfc8414);
    let mut oidc = origin;
    oidc.set_path(&format!("{path}/.well-known/openid-configuration"));
    urls.push(oidc);
    urls
}

#[derive(serde::Deserialize)]
struct ServerMetadata {
    issuer: String,
    jwks_uri: Option<String>,
}

/// Finds the issuer's `jwks_uri`. The metadata must name exactly this issuer (RFC 8414 §3.3).
async fn discover_jwks_uri(
    client: &reqwest::Client,
    issuer: &str,
    settings: &KeyRefresh,
) -> Result<Url, FetchError> {
    let issuer_url = Url::parse(issuer).map_err(|_| FetchError::Invalid("issuer is not a URL"))?;
    let mut last_error = FetchError::Invalid("no discovery document");
    for url in discovery_urls(&issuer_url) {
        match get_json::<ServerMetadata>(client, url, settings.timeout, settings.max_document_bytes)
            .await
        {
            Ok(metadata) if metadata.issuer == issuer => {
                let uri = metadata
                    .jwks_uri
                    .ok_or(FetchError::Invalid("the metadata has no jwks_uri"))?;
                return Url::parse(&uri).map_err(|_| FetchError::Invalid("jwks_uri is not a URL"));
            }
            Ok(_) => last_error = FetchError::Invalid("the metadata names another issuer"),
            Err(error) => last_error = error,
        }
    }
    Err(last_error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discovery_order_for_root_and_path_issuers() {
        let root = discovery_urls(&Url::parse("https://as.example").unwrap());
        assert_eq!(
            root[0].as_str(),
            "https://as.example/.well-known/oauth-authorization-server"
        );
        assert_eq!(
            root[1].as_str(),
            "https://as.example/.well-known/openid-configuration"
        );
        let tenant = discovery_urls(&Url::parse("https://as.example/tenant1/").unwrap());
        assert_eq!(
            tenant[0].as_str(),
            "https://as.example/.well-known/oauth-authorization-server/tenant1"
        );
        assert_eq!(
            tenant[1].as_str(),
            "https://as.example/tenant1/.well-known/openid-configuration"
        );
    }
}
