//! Signed continuation state: the `requestState` the layer issues with its own
//! `InputRequiredResult`s (URL approval and confirmation).
//!
//! # Threat model
//!
//! The state travels to the client and comes back on the retry, so **everything in it is
//! attacker-controlled** until proven otherwise. A client may replay it later, replay it for
//! another call, hand it to another principal, flip bytes in it, or forge one from scratch. The
//! state is therefore *integrity-protected, not secret*: anyone can base64-decode it and read
//! it. It must never hold anything the client may not see, and it never holds a token.
//!
//! What the layer does about it:
//! - **Integrity**: HMAC-SHA256 over a domain label (`mcp-gate/request-state/v1`), the key id
//!   and the payload, checked in constant time. A changed byte anywhere fails.
//! - **Binding**: the payload carries keyed digests of who it was issued to (issuer, subject,
//!   client id) and of what it was issued for (resource, protocol version, method, and a digest of the
//!   params without `_meta`, `inputResponses` and `requestState`). Another principal, another
//!   tool, other arguments, another resource or version: refused, each with its own message.
//! - **Expiry**: 10 minutes by default. Expired states are refused.
//! - **Keys**: a keyring signs with its newest key and verifies with any listed key, so keys
//!   can rotate without breaking states in flight. Keys shorter than 32 bytes are refused, and
//!   key bytes are wiped from memory when the keyring is dropped.
//! - **Replay**: single use by default, through a [`ReplayStore`] (in memory, per process;
//!   share one store between replicas, or opt out with `GateBuilder::reusable_state`).
//!
//! Format: `mcpgate1.<kid>.<base64url payload>.<base64url tag>`. The prefix keeps the layer's
//! state apart from the inner application's own `requestState`, which the layer never touches.

use crate::auth::Owner;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::Sha256;
use zeroize::Zeroizing;

use crate::error::ConfigError;

/// The prefix of every state the layer issues.
pub const STATE_PREFIX: &str = "mcpgate1.";
const DOMAIN: &[u8] = b"mcp-gate/request-state/v1";
const MIN_KEY_BYTES: usize = 32;
const MAX_STATE_BYTES: usize = 64 * 1024;

type HmacSha256 = Hmac<Sha256>;

/// Signing keys for continuation state.
///
/// ```
/// use mcp_gate::continuation::Keyring;
///
/// let keys = Keyring::new("2026-11", [7u8; 32]).unwrap()
///     .with_previous("2026-10", [9u8; 32]).unwrap();
/// assert_eq!(keys.signing_key_id(), "2026-11");
/// assert!(Keyring::new("short", [1u8; 16]).is_err());
/// ```
#[derive(Clone)]
pub struct Keyring {
    /// Newest first; the first signs.
    keys: Arc<Vec<(String, Zeroizing<Vec<u8>>)>>,
}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: Vec<&str> = self.keys.iter().map(|(kid, _)| kid.as_str()).collect();
        f.debug_struct("Keyring").field("key_ids", &ids).finish()
    }
}

fn check_key(kid: &str, secret: &[u8]) -> Result<(), ConfigError> {
    if kid.is_empty()
        || kid.len() > 32
        || !kid
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(ConfigError::InvalidOption {
            field: "continuation key id",
            reason: "1 to 32 characters of A-Z, a-z, 0-9, '-' or '_'",
        });
    }
    if secret.len() < MIN_KEY_BYTES {
        return Err(ConfigError::InvalidOption {
            field: "continuation key",
            reason: "at least 32 bytes",
        });
    }
    Ok(())
}

impl Keyring {
    /// A keyring whose signing key is `secret` (at least 32 bytes), named `kid`.
    pub fn new(kid: impl Into<String>, secret: impl Into<Vec<u8>>) -> Result<Self, ConfigError> {
        let (kid, secret) = (kid.into(), Zeroizing::new(secret.into()));
        check_key(&kid, &secret)?;
        Ok(Self {
            keys: Arc::new(vec![(kid, secret)]),
        })
    }

    /// Adds an older key that still verifies states but no longer signs.
    pub fn with_previous(
        self,
        kid: impl Into<String>,
        secret: impl Into<Vec<u8>>,
    ) -> Result<Self, ConfigError> {
        let (kid, secret) = (kid.into(), Zeroizing::new(secret.into()));
        check_key(&kid, &secret)?;
        if self.keys.iter().any(|(k, _)| *k == kid) {
            return Err(ConfigError::InvalidOption {
                field: "continuation key id",
                reason: "key ids must be unique",
            });
        }
        let mut keys: Vec<_> = self.keys.iter().cloned().collect();
        keys.push((kid, secret));
        Ok(Self {
            keys: Arc::new(keys),
        })
    }

    /// A fresh random key, good for one process: states do not survive a restart and are not
    /// accepted by other replicas.
    pub fn random() -> Result<Self, ConfigError> {
        let no_randomness = || ConfigError::InvalidOption {
            field: "continuation key",
            reason: "no random source to generate one",
        };
        let mut secret = Zeroizing::new(vec![0u8; 32]);
        getrandom::fill(&mut secret).map_err(|_| no_randomness())?;
        // A random id too: a state signed by another process's generated key then names a key
        // this one does not hold (`UnknownKey`), instead of one it holds with other bytes,
        // which would read as tampering.
        let mut id = [0u8; 9];
        getrandom::fill(&mut id).map_err(|_| no_randomness())?;
        Self::new(
            format!("gen-{}", URL_SAFE_NO_PAD.encode(id)),
            secret.to_vec(),
        )
    }

    /// A keyring from configuration text: one key per line (or per comma),
    /// `<id>:<base64url secret>`, the first one signing and every one verifying. Ids are 1 to
    /// 32 characters of `A-Z a-z 0-9 - _`, unique; secrets decode to at least 32 bytes. Blank
    /// lines and lines starting with `#` are ignored. To rotate, put the new key first and
    /// keep the old one listed until the states it signed have expired (the continuation
    /// lifetime, 10 minutes by default).
    ///
    /// ```
    /// use mcp_gate::continuation::Keyring;
    ///
    /// let text = "k2:MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY\n\
    ///             k1:ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA";
    /// let keys = Keyring::from_config(text).unwrap();
    /// assert_eq!(keys.signing_key_id(), "k2");
    /// assert!(Keyring::from_config("k1:dG9vLXNob3J0").is_err());
    /// ```
    pub fn from_config(text: &str) -> Result<Self, ConfigError> {
        let invalid = |reason: &'static str| ConfigError::InvalidOption {
            field: "continuation keys",
            reason,
        };
        let mut keyring: Option<Self> = None;
        for entry in text
            .split(['\n', ','])
            .map(str::trim)
            .filter(|e| !e.is_empty() && !e.starts_with('#'))
        {
            let (kid, secret) = entry
                .split_once(':')
                .ok_or_else(|| invalid("each key is <id>:<base64url secret>"))?;
            let secret = Zeroizing::new(
                URL_SAFE_NO_PAD
                    .decode(secret.trim().trim_end_matches('='))
                    .map_err(|_| invalid("a secret is not base64url"))?,
            );
            keyring = Some(match keyring {
                None => Self::new(kid.trim(), secret.to_vec())?,
                Some(keys) => keys.with_previous(kid.trim(), secret.to_vec())?,
            });
        }
        keyring.ok_or_else(|| invalid("no key listed"))
    }

    /// [`Keyring::from_config`] on the value of the environment variable `name`.
    pub fn from_env(name: &str) -> Result<Self, ConfigError> {
        let text = std::env::var(name).map_err(|_| ConfigError::InvalidOption {
            field: "continuation keys",
            reason: "the environment variable is not set, or not UTF-8",
        })?;
        Self::from_config(&text)
    }

    /// [`Keyring::from_config`] on the contents of the file at `path`.
    pub fn from_file(path: impl AsRef<std::path::Path>) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|error| ConfigError::InvalidOption {
            field: "continuation keys",
            reason: match error.kind() {
                std::io::ErrorKind::NotFound => "the key file does not exist",
                std::io::ErrorKind::PermissionDenied => "the key file may not be read",
                std::io::ErrorKind::InvalidData => "the key file is not UTF-8 text",
                _ => "the key file could not be read",
            },
        })?;
        Self::from_config(&text)
    }

    /// The id of the key that signs.
    pub fn signing_key_id(&self) -> &str {
        &self.keys[0].0
    }

    fn key(&self, kid: &str) -> Option<&[u8]> {
        self.keys
            .iter()
            .find(|(k, _)| k == kid)
            .map(|(_, s)| s.as_slice())
    }
}

/// Why a signed value did not open.
enum SealError {
    Malformed,
    UnknownKey,
    BadTag,
}

impl Keyring {
    /// `<prefix><kid>.<base64url JSON payload>.<base64url tag>`, signed with the newest key
    /// under `domain`.
    fn seal(&self, domain: &[u8], prefix: &str, payload: &impl Serialize) -> String {
        let (kid, secret) = (&self.keys[0].0, &self.keys[0].1);
        let encoded = URL_SAFE_NO_PAD.encode(serde_json::to_vec(payload).unwrap_or_default());
        let tag = mac_in(domain, secret, kid, &encoded)
            .finalize()
            .into_bytes();
        format!("{prefix}{kid}.{encoded}.{}", URL_SAFE_NO_PAD.encode(tag))
    }

    /// Checks the shape, the key and the tag (in constant time) of a sealed value; returns the
    /// key that verified it and the payload bytes.
    fn open(
        &self,
        domain: &[u8],
        prefix: &str,
        sealed: &str,
    ) -> Result<(&[u8], Vec<u8>), SealError> {
        if sealed.len() > MAX_STATE_BYTES {
            return Err(SealError::Malformed);
        }
        let rest = sealed.strip_prefix(prefix).ok_or(SealError::Malformed)?;
        let mut parts = rest.split('.');
        let (Some(kid), Some(encoded), Some(tag), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(SealError::Malformed);
        };
        let tag = URL_SAFE_NO_PAD
            .decode(tag)
            .map_err(|_| SealError::Malformed)?;
        let secret = self.key(kid).ok_or(SealError::UnknownKey)?;
        mac_in(domain, secret, kid, encoded)
            .verify_slice(&tag)
            .map_err(|_| SealError::BadTag)?;
        let json = URL_SAFE_NO_PAD
            .decode(encoded)
            .map_err(|_| SealError::Malformed)?;
        Ok((secret, json))
    }
}

fn mac_in(domain: &[u8], key: &[u8], kid: &str, payload: &str) -> HmacSha256 {
    // Keys are at least 32 bytes; HMAC accepts any length, so this cannot fail.
    let mut mac = <HmacSha256 as KeyInit>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("HMAC takes any key length"));
    mac.update(domain);
    mac.update(&[0]);
    mac.update(kid.as_bytes());
    mac.update(&[0]);
    mac.update(payload.as_bytes());
    mac
}

/// What a state is bound to.
pub(crate) struct Binding<'a> {
    /// Who it was issued to: the same owner key as sessions and tasks.
    pub owner: Owner,
    pub resource: &'a str,
    /// Whether the request is modern: part of what a state is bound to, so that a state
    /// issued in one era is never accepted in the other, whatever version either names.
    pub modern: bool,
    pub protocol_version: Option<&'a str>,
    pub method: &'a str,
    pub params: &'a Map<String, Value>,
}

/// A keyed digest of `parts` under `label`: the payload is readable by the client, so the
/// binding is keyed too, and a guessed user id cannot be checked against it.
fn digest_parts(key: &[u8], label: &str, parts: &[&str]) -> String {
    let mut mac = <HmacSha256 as KeyInit>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("HMAC takes any key length"));
    mac.update(DOMAIN);
    mac.update(label.as_bytes());
    for part in parts {
        mac.update(&(part.len() as u64).to_be_bytes());
        mac.update(part.as_bytes());
    }
    URL_SAFE_NO_PAD.encode(&mac.finalize().into_bytes()[..16])
}

impl Binding<'_> {
    fn principal_digest(&self, key: &[u8]) -> String {
        // Each optional part is preceded by whether it is present, so that an absent subject
        // and a subject of any value (even empty, even NUL) never digest alike.
        let presence = |part: Option<&str>| if part.is_some() { "1" } else { "0" };
        let owner = &self.owner;
        let (subject, client_id) = (owner.subject.as_deref(), owner.client_id.as_deref());
        digest_parts(
            key,
            "who",
            &[
                &owner.issuer,
                presence(subject),
                subject.unwrap_or(""),
                presence(client_id),
                client_id.unwrap_or(""),
            ],
        )
    }

    fn request_digest(&self, key: &[u8]) -> String {
        let mut params = Map::clone(self.params);
        for name in ["_meta", "inputResponses", "requestState"] {
            params.remove(name);
        }
        let mut canonical = String::new();
        crate::denial::canonical_json(&Value::Object(params), &mut canonical);
        digest_parts(
            key,
            "what",
            &[
                self.resource,
                if self.modern { "modern" } else { "legacy" },
                if self.protocol_version.is_some() {
                    "1"
                } else {
                    "0"
                },
                self.protocol_version.unwrap_or(""),
                self.method,
                &canonical,
            ],
        )
    }
}

pub use crate::policy::Interaction;

/// The signed content of a state.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Payload {
    /// Expiry, seconds since the Unix epoch.
    pub exp: u64,
    /// Random, unique per state (replay detection).
    pub nonce: String,
    /// When it was issued, in milliseconds since the Unix epoch (0 in states of older builds,
    /// which a replay store then cannot judge).
    #[serde(default)]
    pub iat_ms: u64,
    pub interaction: Interaction,
    /// The wire input key the gateway asked under.
    pub key: String,
    /// How many gateway rounds this call has had.
    pub round: u32,
    pub who: String,
    pub what: String,
    /// The inner application's own state and responses, carried through a gateway round.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub app_state: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub app_inputs: Option<Map<String, Value>>,
}

/// Why a state was refused. Each becomes a `-32602` error with HTTP 400, except
/// [`StateError::ReplayStore`] (`-32603`, with 429 or 503).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// Not in the layer's format, or unreadable.
    #[error("the request state is malformed")]
    Malformed,
    /// Signed with a key the layer does not hold.
    #[error("the request state was signed with an unknown key")]
    UnknownKey,
    /// The signature does not match: the state was changed or forged.
    #[error("the request state was tampered with")]
    Tampered,
    /// Past its expiry.
    #[error("the request state has expired")]
    Expired,
    /// Issued to another principal.
    #[error("the request state belongs to another principal")]
    OtherPrincipal,
    /// Issued for another request (tool, arguments, method, resource or version).
    #[error("the request state was issued for another request")]
    OtherRequest,
    /// Already used, and single use is on.
    #[error("the request state was already used")]
    Replayed,
    /// Issued before the replay store's memory began (a restart of the process, or of a
    /// Redis without persistence): whether it was used cannot be known, so it is refused.
    #[error(
        "the request state predates the replay store's memory (a restart); start the call again"
    )]
    Unknowable,
    /// The replay store could not record the use (full, over the owner's quota, or
    /// unreachable): the state is refused, since its single use cannot be guaranteed.
    #[error("the request state cannot be accepted now: {0}")]
    ReplayStore(StoreError),
    /// Issued to an owner whose grant was revoked after it (`docs/revocation.md`).
    #[error(
        "the request state was issued before its owner's grant was revoked; start the call again"
    )]
    OwnerRevoked,
}

use crate::store::StoreError;
/// The replay stores, now found at `mcp_gate::store::replay`.
#[cfg(feature = "redis")]
pub use crate::store::replay::RedisReplayStore;
/// The replay stores, now found at `mcp_gate::store::replay`.
#[allow(deprecated)]
pub use crate::store::replay::{
    FirstUse, MemoryReplayStore, ReplayError, ReplayFuture, ReplayStore, StateUse,
};

/// Issues and verifies states.
#[derive(Clone)]
pub(crate) struct StateCodec {
    pub keys: Keyring,
    pub ttl: Duration,
    pub replay: Option<Arc<dyn ReplayStore>>,
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl StateCodec {
    /// Signs a new state. Fails only without a random source.
    pub fn issue(
        &self,
        binding: &Binding<'_>,
        interaction: Interaction,
        key: &str,
        round: u32,
        app_state: Option<String>,
        app_inputs: Option<Map<String, Value>>,
    ) -> Result<String, getrandom::Error> {
        let mut nonce = [0u8; 16];
        getrandom::fill(&mut nonce)?;
        let payload = Payload {
            exp: now() + self.ttl.as_secs(),
            nonce: URL_SAFE_NO_PAD.encode(nonce),
            iat_ms: crate::clock::now_ms(),
            interaction,
            key: key.to_owned(),
            round,
            who: binding.principal_digest(&self.keys.keys[0].1),
            what: binding.request_digest(&self.keys.keys[0].1),
            app_state,
            app_inputs,
        };
        Ok(self.keys.seal(DOMAIN, STATE_PREFIX, &payload))
    }

    /// Verifies a state presented on a retry, and records its use when single use is on.
    pub async fn verify(&self, state: &str, binding: &Binding<'_>) -> Result<Payload, StateError> {
        let (secret, json) = self
            .keys
            .open(DOMAIN, STATE_PREFIX, state)
            .map_err(|e| match e {
                SealError::Malformed => StateError::Malformed,
                SealError::UnknownKey => StateError::UnknownKey,
                SealError::BadTag => StateError::Tampered,
            })?;
        let payload: Payload = serde_json::from_slice(&json).map_err(|_| StateError::Malformed)?;
        if payload.exp <= now() {
            return Err(StateError::Expired);
        }
        if payload.who != binding.principal_digest(secret) {
            return Err(StateError::OtherPrincipal);
        }
        if payload.what != binding.request_digest(secret) {
            return Err(StateError::OtherRequest);
        }
        if let Some(replay) = &self.replay {
            let expires_at = UNIX_EPOCH + Duration::from_secs(payload.exp);
            // The owner key is the state's own principal digest: opaque, and the same for
            // every state of one principal under one key.
            let issued_at = UNIX_EPOCH + Duration::from_millis(payload.iat_ms);
            let used = StateUse::new(&payload.who, &payload.nonce, issued_at, expires_at);
            match replay.first_use(used).await {
                Ok(FirstUse::Yes) => {}
                Ok(FirstUse::AlreadyUsed) => return Err(StateError::Replayed),
                Ok(FirstUse::Unknowable) => return Err(StateError::Unknowable),
                Err(error) => return Err(StateError::ReplayStore(error)),
            }
        }
        Ok(payload)
    }
}

/// The prefix of every pagination cursor the layer issues.
pub const CURSOR_PREFIX: &str = "mcpgatec1.";
const CURSOR_DOMAIN: &[u8] = b"mcp-gate/list-cursor/v1";

/// Why a pagination cursor was refused. Each becomes a `-32602` error with HTTP 400.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CursorError {
    /// Not a cursor the layer issued, changed, or signed with a key it no longer holds.
    #[error("invalid cursor")]
    Invalid,
    /// Issued to another principal, or for another list method.
    #[error("the cursor was issued to another caller or for another list")]
    Foreign,
    /// Past its expiry: list again from the start.
    #[error("the cursor has expired; list again from the start")]
    Expired,
}

#[derive(Serialize, Deserialize)]
struct CursorPayload {
    exp: u64,
    who: String,
    method: String,
    inner: String,
}

/// Signs and opens the layer's pagination cursors, which wrap the inner server's cursor and
/// bind it to the caller and the list method.
impl StateCodec {
    /// Wraps the inner server's `nextCursor`.
    pub(crate) fn seal_cursor(&self, binding: &Binding<'_>, inner: &str, ttl: Duration) -> String {
        let secret = &self.keys.keys[0].1;
        let payload = CursorPayload {
            exp: now() + ttl.as_secs(),
            who: binding.principal_digest(secret),
            method: binding.method.to_owned(),
            inner: inner.to_owned(),
        };
        self.keys.seal(CURSOR_DOMAIN, CURSOR_PREFIX, &payload)
    }

    /// Opens a cursor a client sent back, returning the inner server's cursor.
    pub(crate) fn open_cursor(
        &self,
        binding: &Binding<'_>,
        cursor: &str,
    ) -> Result<String, CursorError> {
        let (secret, json) = self
            .keys
            .open(CURSOR_DOMAIN, CURSOR_PREFIX, cursor)
            .map_err(|_| CursorError::Invalid)?;
        let payload: CursorPayload =
            serde_json::from_slice(&json).map_err(|_| CursorError::Invalid)?;
        if payload.who != binding.principal_digest(secret) || payload.method != binding.method {
            return Err(CursorError::Foreign);
        }
        if payload.exp <= now() {
            return Err(CursorError::Expired);
        }
        Ok(payload.inner)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    fn verify(
        codec: &StateCodec,
        state: &str,
        binding: &Binding<'_>,
    ) -> Result<Payload, StateError> {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(codec.verify(state, binding))
    }

    fn codec(keys: Keyring) -> StateCodec {
        StateCodec {
            keys,
            ttl: Duration::from_secs(600),
            replay: None,
        }
    }

    fn keys() -> Keyring {
        Keyring::new("k1", [1u8; 32]).unwrap()
    }

    struct Fields {
        issuer: String,
        subject: String,
        client: String,
        resource: String,
        version: String,
        method: String,
        params: Map<String, Value>,
    }

    fn fields() -> Fields {
        let Value::Object(params) = json!({"name": "share", "arguments": {"folder": "f1"}}) else {
            unreachable!()
        };
        Fields {
            issuer: "https://as.example".into(),
            subject: "alice".into(),
            client: "app".into(),
            resource: "https://mcp.example/mcp".into(),
            version: "2026-07-28".into(),
            method: "tools/call".into(),
            params,
        }
    }

    fn binding(f: &Fields) -> Binding<'_> {
        Binding {
            owner: Owner::new(
                f.issuer.clone(),
                Some(f.subject.clone()),
                Some(f.client.clone()),
            ),
            resource: &f.resource,
            modern: true,
            protocol_version: Some(&f.version),
            method: &f.method,
            params: &f.params,
        }
    }

    fn issue(codec: &StateCodec, f: &Fields) -> String {
        codec
            .issue(
                &binding(f),
                Interaction::Url,
                "mcp-gate/approval",
                1,
                None,
                None,
            )
            .unwrap()
    }

    #[test]
    fn round_trip_and_gateway_only_fields_do_not_change_the_binding() {
        let codec = codec(keys());
        let f = fields();
        let state = issue(&codec, &f);
        assert!(state.starts_with(STATE_PREFIX));
        let mut retry = fields();
        retry.params.insert("_meta".into(), json!({"x": 1}));
        retry.params.insert(
            "inputResponses".into(),
            json!({"mcp-gate/approval": {"action": "accept"}}),
        );
        retry
            .params
            .insert("requestState".into(), json!(state.clone()));
        let payload = verify(&codec, &state, &binding(&retry)).unwrap();
        assert_eq!(payload.key, "mcp-gate/approval");
        assert_eq!(payload.round, 1);
    }

    #[test]
    fn every_binding_change_is_refused_with_its_reason() {
        let codec = codec(keys());
        let state = issue(&codec, &fields());
        type Change = fn(&mut Fields);
        let cases: Vec<(Change, StateError)> = vec![
            (|f| f.subject = "mallory".into(), StateError::OtherPrincipal),
            (
                |f| f.client = "other-app".into(),
                StateError::OtherPrincipal,
            ),
            (
                |f| f.issuer = "https://other.example".into(),
                StateError::OtherPrincipal,
            ),
            (
                |f| f.resource = "https://other.example/mcp".into(),
                StateError::OtherRequest,
            ),
            (
                |f| f.version = "2099-01-01".into(),
                StateError::OtherRequest,
            ),
            (
                |f| f.method = "prompts/get".into(),
                StateError::OtherRequest,
            ),
            (
                |f| {
                    f.params.insert("name".into(), json!("delete"));
                },
                StateError::OtherRequest,
            ),
            (
                |f| {
                    f.params.insert("arguments".into(), json!({"folder": "f2"}));
                },
                StateError::OtherRequest,
            ),
        ];
        for (change, expected) in cases {
            let mut f = fields();
            change(&mut f);
            assert_eq!(verify(&codec, &state, &binding(&f)).unwrap_err(), expected);
        }
    }

    /// An absent subject or client id never digests like any present value, NUL included,
    /// and a state issued to a modern request is never accepted on a legacy one.
    #[test]
    fn absent_parts_and_the_era_are_part_of_the_binding() {
        let codec = codec(keys());
        let f = fields();
        let mut anonymous = binding(&f);
        anonymous.owner.subject = None;
        let state = codec
            .issue(
                &anonymous,
                Interaction::Url,
                "mcp-gate/approval",
                1,
                None,
                None,
            )
            .unwrap();
        for subject in ["\u{0}", "", "0"] {
            let mut other = binding(&f);
            other.owner.subject = Some(subject.to_owned());
            assert_eq!(
                verify(&codec, &state, &other).unwrap_err(),
                StateError::OtherPrincipal,
                "{subject:?}"
            );
        }
        let mut no_client = binding(&f);
        no_client.owner.client_id = None;
        let mut empty_client = binding(&f);
        empty_client.owner.client_id = Some(String::new());
        let state = codec
            .issue(
                &no_client,
                Interaction::Url,
                "mcp-gate/approval",
                1,
                None,
                None,
            )
            .unwrap();
        assert_eq!(
            verify(&codec, &state, &empty_client).unwrap_err(),
            StateError::OtherPrincipal
        );
        let state = issue(&codec, &f);
        let mut legacy = binding(&f);
        legacy.modern = false;
        assert_eq!(
            verify(&codec, &state, &legacy).unwrap_err(),
            StateError::OtherRequest
        );
    }

    #[test]
    fn keys_from_configuration() {
        let secret = URL_SAFE_NO_PAD.encode([7u8; 32]);
        let text = format!("# rotated 2026-12\n\nnew:{secret}\nold:{secret}==\n");
        let keys = Keyring::from_config(&text).unwrap();
        assert_eq!(keys.signing_key_id(), "new");
        assert!(keys.key("old").is_some());
        for bad in [
            String::new(),
            "# only a comment".to_owned(),
            format!("no-colon{secret}"),
            format!("a:{secret},a:{secret}"),
            "a:not base64!".to_owned(),
            format!("a:{}", URL_SAFE_NO_PAD.encode([7u8; 31])),
            format!("bad id:{secret}"),
        ] {
            assert!(Keyring::from_config(&bad).is_err(), "{bad:?}");
        }
    }

    /// Two processes with generated keys: a state of one is an unknown key to the other, not
    /// a forgery.
    #[test]
    fn generated_keys_have_their_own_ids() {
        let (one, other) = (Keyring::random().unwrap(), Keyring::random().unwrap());
        assert_ne!(one.signing_key_id(), other.signing_key_id());
        let f = fields();
        let state = issue(&codec(one), &f);
        assert_eq!(
            verify(&codec(other), &state, &binding(&f)).unwrap_err(),
            StateError::UnknownKey
        );
    }

    #[test]
    fn expiry_unknown_keys_and_rotation() {
        let f = fields();
        let expired = StateCodec {
            ttl: Duration::ZERO,
            ..codec(keys())
        };
        let state = issue(&expired, &f);
        assert_eq!(
            verify(&expired, &state, &binding(&f)).unwrap_err(),
            StateError::Expired
        );

        let old = codec(keys());
        let state = issue(&old, &f);
        let rotated = codec(
            Keyring::new("k2", [2u8; 32])
                .unwrap()
                .with_previous("k1", [1u8; 32])
                .unwrap(),
        );
        assert!(
            verify(&rotated, &state, &binding(&f)).is_ok(),
            "old states verify after a rotation"
        );
        assert!(
            issue(&rotated, &f).starts_with("mcpgate1.k2."),
            "the newest key signs"
        );
        let dropped = codec(Keyring::new("k2", [2u8; 32]).unwrap());
        assert_eq!(
            verify(&dropped, &state, &binding(&f)).unwrap_err(),
            StateError::UnknownKey
        );
        let impostor = codec(Keyring::new("k1", [3u8; 32]).unwrap());
        assert_eq!(
            verify(&impostor, &state, &binding(&f)).unwrap_err(),
            StateError::Tampered
        );
    }

    #[test]
    fn single_use_refuses_a_replay() {
        let f = fields();
        let codec = StateCodec {
            replay: Some(Arc::new(MemoryReplayStore::new(100, 100))),
            ..codec(keys())
        };
        let state = issue(&codec, &f);
        assert!(verify(&codec, &state, &binding(&f)).is_ok());
        assert_eq!(
            verify(&codec, &state, &binding(&f)).unwrap_err(),
            StateError::Replayed
        );
    }

    #[test]
    fn short_keys_and_bad_ids_are_refused() {
        assert!(Keyring::new("k", [0u8; 31]).is_err());
        assert!(Keyring::new("", [0u8; 32]).is_err());
        assert!(Keyring::new("a.b", [0u8; 32]).is_err());
        assert!(keys().with_previous("k1", [5u8; 32]).is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 10_000, ..ProptestConfig::default() })]

        /// Any change to any byte of a valid state is refused.
        #[test]
        fn any_byte_change_is_refused(index in any::<prop::sample::Index>(), replacement in any::<u8>()) {
            let codec = codec(keys());
            let f = fields();
            let state = issue(&codec, &f);
            let mut bytes = state.clone().into_bytes();
            let at = index.index(bytes.len());
            prop_assume!(bytes[at] != replacement);
            bytes[at] = replacement;
            let changed = String::from_utf8_lossy(&bytes).into_owned();
            prop_assert!(verify(&codec, &changed, &binding(&f)).is_err());
        }

        /// Truncations and extensions are refused too.
        #[test]
        fn truncated_or_extended_states_are_refused(cut in 0usize..400, tail in "[A-Za-z0-9._-]{0,8}") {
            let codec = codec(keys());
            let f = fields();
            let state = issue(&codec, &f);
            let cut = cut.min(state.len());
            let shorter = &state[..state.len() - cut.min(state.len())];
            if cut > 0 {
                prop_assert!(verify(&codec, shorter, &binding(&f)).is_err());
            }
            if !tail.is_empty() {
                let longer = format!("{state}{tail}");
                prop_assert!(verify(&codec, &longer, &binding(&f)).is_err());
            }
        }
    }

    #[test]
    fn cursors_are_bound_to_caller_and_list_and_expire() {
        let codec = codec(keys());
        let list = Fields {
            method: "tools/list".into(),
            ..fields()
        };
        let cursor = codec.seal_cursor(&binding(&list), "inner-page-2", Duration::from_secs(60));
        assert_eq!(
            codec.open_cursor(&binding(&list), &cursor).unwrap(),
            "inner-page-2"
        );
        let other_caller = Fields {
            subject: "mallory".into(),
            method: "tools/list".into(),
            ..fields()
        };
        assert_eq!(
            codec
                .open_cursor(&binding(&other_caller), &cursor)
                .unwrap_err(),
            CursorError::Foreign
        );
        let other_list = Fields {
            method: "prompts/list".into(),
            ..fields()
        };
        assert_eq!(
            codec
                .open_cursor(&binding(&other_list), &cursor)
                .unwrap_err(),
            CursorError::Foreign
        );
        let mut tampered = cursor.clone().into_bytes();
        let last = tampered.len() - 1;
        tampered[last] = if tampered[last] == b'A' { b'B' } else { b'A' };
        let tampered = String::from_utf8(tampered).unwrap();
        assert_eq!(
            codec.open_cursor(&binding(&list), &tampered).unwrap_err(),
            CursorError::Invalid
        );
        assert_eq!(
            codec
                .open_cursor(&binding(&list), "inner-page-2")
                .unwrap_err(),
            CursorError::Invalid
        );
        let expired = codec.seal_cursor(&binding(&list), "x", Duration::ZERO);
        assert_eq!(
            codec.open_cursor(&binding(&list), &expired).unwrap_err(),
            CursorError::Expired
        );
    }
}
