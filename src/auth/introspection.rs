//! Opaque access tokens, checked with RFC 7662 token introspection through the `oauth2` crate.
//!
//! The layer authenticates to the introspection endpoint with its own client credentials
//! (`client_secret_basic` by default, `client_secret_post` on request), posts the token, and
//! accepts it only if the answer says `active: true`, names a configured issuer (when it names
//! one), lists the canonical resource in `aud`, and has not expired. An `active: false` answer
//! is a 401 `invalid_token`; an unreachable or nonsensical endpoint is a 503, never an allow.
//! Results are cached by the shared verified-token cache, for at most
//! [`Introspection::cache_max_age`] and never past the token's `exp`.
//!
//! **Amplification.** Verifying one token is single-flight, as key refreshes are: requests
//! that bear the same token while its introspection is under way wait for that one call and
//! share its answer, an accepted token or a refusal alike. Nothing is kept once the call ends:
//! an accepted token goes to the verified-token cache as above, and a refusal (inactive,
//! unreachable) is not remembered, so the next request asks again. The calls under way are
//! keyed by the token's SHA-256 digest, never the token, and at most [`MAX_IN_FLIGHT`] tokens
//! share a call at once; past that, a request introspects on its own. A call whose every
//! waiting request was dropped is abandoned; the next request bearing the token starts it
//! again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use oauth2::basic::{
    BasicErrorResponse, BasicRevocationErrorResponse, BasicTokenResponse, BasicTokenType,
};
use oauth2::{
    AccessToken, AuthType, ClientId, ClientSecret, EndpointNotSet, EndpointSet, HttpRequest,
    HttpResponse, IntrospectionUrl, StandardRevocableToken, StandardTokenIntrospectionResponse,
    TokenIntrospectionResponse,
};
use serde_json::{Map, Value};

use super::claims::principal_from_claims;
use super::principal::{Principal, TokenKind};
use super::rejection::{AuthError, InvalidToken};
use super::scope::ScopeHierarchy;
use super::token_cache::TokenDigest;
use crate::error::ConfigError;
use crate::http_client::{FetchError, read_bounded};

/// How the layer calls an RFC 7662 introspection endpoint.
///
/// ```
/// use std::time::Duration;
/// use mcp_gate::Introspection;
///
/// let introspection = Introspection::new("https://as.example/introspect", "gateway", "s3cret")
///     .cache_max_age(Duration::from_secs(30));
/// # let _ = introspection;
/// ```
#[derive(Clone)]
pub struct Introspection {
    endpoint: String,
    client_id: String,
    client_secret: String,
    send_secret_in_body: bool,
    cache_max_age: Duration,
    timeout: Duration,
    require_audience: bool,
}

impl std::fmt::Debug for Introspection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Introspection")
            .field("endpoint", &self.endpoint)
            .field("client_id", &self.client_id)
            .field("client_secret", &"<redacted>")
            .field("cache_max_age", &self.cache_max_age)
            .finish()
    }
}

impl Introspection {
    /// Introspection at `endpoint`, authenticating as `client_id` with `client_secret`.
    pub fn new(
        endpoint: impl Into<String>,
        client_id: impl Into<String>,
        client_secret: impl Into<String>,
    ) -> Self {
        Self {
            endpoint: endpoint.into(),
            client_id: client_id.into(),
            client_secret: client_secret.into(),
            send_secret_in_body: false,
            cache_max_age: Duration::from_secs(60),
            timeout: Duration::from_secs(5),
            require_audience: true,
        }
    }

    /// Sends the client credentials in the form body (`client_secret_post`) instead of HTTP Basic.
    pub fn client_secret_post(mut self) -> Self {
        self.send_secret_in_body = true;
        self
    }

    /// The longest an introspection result is reused (default 60 s). Zero disables caching.
    pub fn cache_max_age(mut self, max_age: Duration) -> Self {
        self.cache_max_age = max_age;
        self
    }

    /// Timeout of one introspection call (default 5 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Accepts answers without an `aud` member. By default `aud` must be present and list the
    /// resource: an introspection answer that does not say which resource the token is for
    /// could belong to any resource of the same authorization server.
    pub fn allow_missing_audience(mut self) -> Self {
        self.require_audience = false;
        self
    }
}

/// Extra members of the introspection answer, kept for the principal's claims.
#[derive(Clone, Debug, Default, serde::Deserialize, serde::Serialize)]
struct OtherMembers {
    #[serde(flatten)]
    members: Map<String, Value>,
}

impl oauth2::ExtraTokenFields for OtherMembers {}

type Answer = StandardTokenIntrospectionResponse<OtherMembers, BasicTokenType>;

type IntrospectionClient = oauth2::Client<
    BasicErrorResponse,
    BasicTokenResponse,
    Answer,
    StandardRevocableToken,
    BasicRevocationErrorResponse,
    EndpointNotSet,
    EndpointNotSet,
    EndpointSet,
    EndpointNotSet,
    EndpointNotSet,
>;

/// Largest introspection answer read, in bytes.
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// The most tokens whose introspection is shared at once (see the module docs).
pub(crate) const MAX_IN_FLIGHT: usize = 1024;

/// One introspection call under way, and its answer once it has one.
type Flight = Arc<tokio::sync::OnceCell<Result<Principal, AuthError>>>;

/// The introspection calls under way, by token digest.
type Flights = Mutex<HashMap<TokenDigest, Flight>>;

/// A request's place in a shared call: when the last request waiting on a call leaves, or
/// any leaves after the answer came, the call is forgotten.
struct Seat<'a> {
    flights: &'a Flights,
    key: TokenDigest,
    flight: Option<Flight>,
}

impl Drop for Seat<'_> {
    fn drop(&mut self) {
        let mut flights = lock(self.flights);
        // Dropped under the lock, so that the reference count read here is exact: every
        // clone of a flight is made and dropped under this lock.
        let Some(flight) = self.flight.take() else {
            return;
        };
        let done = flight.initialized();
        let last = Arc::strong_count(&flight) == 2;
        if (done || last)
            && flights
                .get(&self.key)
                .is_some_and(|f| Arc::ptr_eq(f, &flight))
        {
            flights.remove(&self.key);
        }
        drop(flight);
    }
}

fn lock(flights: &Flights) -> std::sync::MutexGuard<'_, HashMap<TokenDigest, Flight>> {
    flights
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A configured introspection client.
pub(crate) struct Introspector {
    client: IntrospectionClient,
    http: reqwest::Client,
    issuers: Vec<String>,
    audience: String,
    pub cache_max_age: Duration,
    timeout: Duration,
    require_audience: bool,
    leeway: u64,
    flights: Flights,
}

impl Introspector {
    pub fn new(
        config: Introspection,
        http: reqwest::Client,
        issuers: Vec<String>,
        audience: String,
        leeway: u64,
    ) -> Result<Self, ConfigError> {
        let url = IntrospectionUrl::new(config.endpoint.clone()).map_err(|_| {
            ConfigError::InvalidUrl {
                field: "introspection endpoint",
                value: config.endpoint.clone(),
                reason: "not an absolute URL",
            }
        })?;
        let auth_type = if config.send_secret_in_body {
            AuthType::RequestBody
        } else {
            AuthType::BasicAuth
        };
        let client = oauth2::Client::new(ClientId::new(config.client_id))
            .set_client_secret(ClientSecret::new(config.client_secret))
            .set_auth_type(auth_type)
            .set_introspection_url(url);
        Ok(Self {
            client,
            http,
            issuers,
            audience,
            cache_max_age: config.cache_max_age,
            timeout: config.timeout,
            require_audience: config.require_audience,
            leeway,
            flights: Mutex::default(),
        })
    }

    /// Introspects `token`, whose digest is `key`, in one call shared with every request that
    /// bears the same token while the call is under way.
    pub async fn introspect_shared(
        &self,
        token: &str,
        key: &TokenDigest,
        hierarchy: &ScopeHierarchy,
    ) -> Result<Principal, AuthError> {
        let seat = self.seat(key);
        match seat.as_ref().and_then(|seat| seat.flight.as_ref()) {
            Some(flight) => flight
                .get_or_init(|| self.introspect(token, hierarchy))
                .await
                .clone(),
            None => self.introspect(token, hierarchy).await,
        }
    }

    /// A seat in the call under way for `key`, or in a new one; `None` when as many tokens
    /// as may are being introspected already.
    fn seat(&self, key: &TokenDigest) -> Option<Seat<'_>> {
        let mut flights = lock(&self.flights);
        let flight = match flights.get(key) {
            Some(flight) => flight.clone(),
            None if flights.len() < MAX_IN_FLIGHT => {
                let flight = Flight::default();
                flights.insert(*key, flight.clone());
                flight
            }
            None => return None,
        };
        Some(Seat {
            flights: &self.flights,
            key: *key,
            flight: Some(flight),
        })
    }

    /// One introspection call, not shared.
    async fn introspect(
        &self,
        token: &str,
        hierarchy: &ScopeHierarchy,
    ) -> Result<Principal, AuthError> {
        let http = self.http.clone();
        let timeout = self.timeout;
        let send = move |request: HttpRequest| {
            let http = http.clone();
            async move { send(&http, request, timeout).await }
        };
        let token = AccessToken::new(token.to_owned());
        let answer = self
            .client
            .introspect(&token)
            .set_token_type_hint("access_token")
            .request_async(&send)
            .await
            .map_err(|error| {
                tracing::warn!(target: "mcp_gate::introspection", %error, "introspection failed");
                AuthError::IntrospectionUnavailable
            })?;
        self.accept(answer, hierarchy)
    }

    fn accept(&self, answer: Answer, hierarchy: &ScopeHierarchy) -> Result<Principal, AuthError> {
        let invalid = AuthError::InvalidToken;
        if !answer.active() {
            return Err(invalid(InvalidToken::Inactive));
        }
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        if answer
            .exp()
            .is_some_and(|exp| (exp.timestamp().max(0) as u64).saturating_add(self.leeway) < now)
        {
            return Err(invalid(InvalidToken::Expired));
        }
        if answer
            .nbf()
            .is_some_and(|nbf| nbf.timestamp().max(0) as u64 > now.saturating_add(self.leeway))
        {
            return Err(invalid(InvalidToken::NotYetValid));
        }
        let issuer = match answer.iss() {
            Some(iss) if self.issuers.iter().any(|i| i == iss) => iss.to_owned(),
            Some(_) => return Err(invalid(InvalidToken::WrongIssuer)),
            None => match self.issuers.as_slice() {
                [only] => only.clone(),
                _ => return Err(invalid(InvalidToken::WrongIssuer)),
            },
        };
        match answer.aud() {
            Some(aud) if aud.contains(&self.audience) => {}
            Some(_) => return Err(invalid(InvalidToken::WrongAudience)),
            None if self.require_audience => return Err(invalid(InvalidToken::WrongAudience)),
            None => {}
        }
        let Ok(Value::Object(claims)) = serde_json::to_value(&answer) else {
            return Err(AuthError::IntrospectionUnavailable);
        };
        principal_from_claims(claims, &issuer, TokenKind::Introspected, hierarchy).map_err(invalid)
    }
}

/// The answer with its `exp`, `iat` and `nbf` in whole seconds. A NumericDate may have a
/// fraction (RFC 7519 §2), which the JWT path accepts but the `oauth2` crate's reader does not;
/// the fraction is dropped (`exp` rounded down, so never later than the issuer said). Anything
/// that is not a JSON object with such numbers is returned as it came, for the reader to judge.
fn whole_second_times(body: Vec<u8>) -> Vec<u8> {
    let Ok(Value::Object(mut answer)) = serde_json::from_slice::<Value>(&body) else {
        return body;
    };
    let mut changed = false;
    for claim in ["exp", "iat", "nbf"] {
        let Some(Value::Number(number)) = answer.get(claim) else {
            continue;
        };
        if number.is_i64() || number.is_u64() {
            continue;
        }
        match number.as_f64().map(f64::floor) {
            // Within the range a timestamp can have; anything else is left for the reader to
            // refuse.
            Some(seconds) if (0.0..=9.0e15).contains(&seconds) => {
                answer.insert(claim.into(), Value::from(seconds as u64));
                changed = true;
            }
            _ => {}
        }
    }
    if !changed {
        return body;
    }
    serde_json::to_vec(&Value::Object(answer)).unwrap_or(body)
}

async fn send(
    http: &reqwest::Client,
    request: HttpRequest,
    timeout: Duration,
) -> Result<HttpResponse, FetchError> {
    let request = reqwest::Request::try_from(request)?;
    let response = tokio::time::timeout(timeout, http.execute(request))
        .await
        .map_err(|_| FetchError::Invalid("introspection timed out"))??;
    let status = response.status();
    let content_type = response.headers().get(http::header::CONTENT_TYPE).cloned();
    let body = whole_second_times(read_bounded(response, MAX_ANSWER_BYTES).await?);
    let mut answer = HttpResponse::new(body);
    *answer.status_mut() = status;
    if let Some(value) = content_type {
        answer
            .headers_mut()
            .insert(http::header::CONTENT_TYPE, value);
    }
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An introspector whose endpoint nothing listens on (port 9, discard, is not served on
    /// loopback here): every call fails at once.
    fn unreachable() -> Introspector {
        let config = Introspection::new("http://127.0.0.1:9/introspect", "gateway", "secret");
        Introspector::new(
            config,
            reqwest::Client::new(),
            vec!["https://as.example".into()],
            "https://mcp.example/mcp".into(),
            0,
        )
        .unwrap()
    }

    #[tokio::test]
    async fn a_shared_call_is_forgotten_when_it_ends_failure_included() {
        let introspector = unreachable();
        let key = [7u8; 32];
        let hierarchy = ScopeHierarchy::default();
        let calls = (0..5).map(|_| introspector.introspect_shared("t", &key, &hierarchy));
        for answer in futures_util::future::join_all(calls).await {
            assert_eq!(answer.unwrap_err(), AuthError::IntrospectionUnavailable);
        }
        assert!(lock(&introspector.flights).is_empty(), "no failure is kept");
    }

    #[test]
    fn the_calls_under_way_are_bounded_and_a_left_seat_is_forgotten() {
        let introspector = unreachable();
        let seats: Vec<_> = (0..MAX_IN_FLIGHT)
            .map(|n| {
                let mut key = [0u8; 32];
                key[..8].copy_from_slice(&(n as u64).to_be_bytes());
                introspector.seat(&key).expect("room for this token")
            })
            .collect();
        assert!(introspector.seat(&[0xff; 32]).is_none(), "past the bound");
        // A token already under way still shares its call.
        let mut first = [0u8; 32];
        first[..8].copy_from_slice(&0u64.to_be_bytes());
        let again = introspector.seat(&first).expect("joins the call under way");
        drop(seats);
        assert_eq!(lock(&introspector.flights).len(), 1, "one waiter is left");
        drop(again);
        assert!(lock(&introspector.flights).is_empty());
    }

    fn times(body: &str) -> Value {
        serde_json::from_slice(&whole_second_times(body.as_bytes().to_vec())).unwrap()
    }

    #[test]
    fn fractional_times_become_whole_seconds() {
        let answer = times(r#"{"active":true,"exp":1700000000.75,"iat":1699999000.2,"nbf":5}"#);
        assert_eq!(answer["exp"], 1_700_000_000u64);
        assert_eq!(answer["iat"], 1_699_999_000u64);
        assert_eq!(answer["nbf"], 5);
        assert_eq!(answer["active"], true);
    }

    #[test]
    fn other_answers_are_left_to_the_reader() {
        for body in [
            r#"{"active":true,"exp":-1.5}"#,
            r#"{"active":true,"exp":"soon"}"#,
            r#"{"active":true,"exp":1e300}"#,
            r#"[1.5]"#,
            "not json",
        ] {
            assert_eq!(
                whole_second_times(body.as_bytes().to_vec()),
                body.as_bytes(),
                "{body}"
            );
        }
    }
}
