//! A DPoP presentation admitted: the token and its proof checked by the authenticator
//! (`auth/dpop_bind.rs`), then the proof's `jti` recorded once in the gate's replay store.
//!
//! **Threat.** A proof replayed within its window, here or on another replica. The store is the
//! gate's one replay store (the one continuation states use: memory, or Redis shared by every
//! replica), so a proof used on one replica is refused on all of them. Each proof is recorded
//! under its key's owner (`dpop:<jkt>`) until it can no longer be accepted; the store's bounds
//! (total and per owner) hold for proofs as for states, and a store that cannot record one
//! (unreachable, full, the key's quota used) refuses the request: a proof is never let through
//! unrecorded.

use std::sync::Arc;

use http::request::Parts;

use crate::auth::dpop::DpopError;
use crate::auth::dpop_bind::ProofUse;
use crate::auth::token_cache::TokenDigest;
use crate::auth::{AuthError, Principal};
use crate::settings::Settings;
use crate::store::StoreError;
use crate::store::replay::{FirstUse, ReplayStore, StateUse};

/// The caller of a DPoP presentation, or why it is refused.
pub(crate) async fn prove(
    settings: &Settings,
    parts: &Parts,
    token: &str,
    key: TokenDigest,
    cached: Option<Principal>,
) -> Result<Principal, AuthError> {
    let (principal, proof) = settings
        .authenticator
        .prove(&parts.method, &parts.headers, token, key, cached)
        .await?;
    // The builder refuses DPoP without a replay store; none here is refused all the same.
    let store = settings.continuation.state.replay.as_ref();
    record(store, &proof).await?;
    Ok(principal)
}

/// Records `proof` as used in `store`: `Ok` only for its first use.
pub(crate) async fn record(
    store: Option<&Arc<dyn ReplayStore>>,
    proof: &ProofUse,
) -> Result<(), AuthError> {
    let Some(store) = store else {
        return Err(AuthError::DpopReplayUnavailable { full: false });
    };
    let used = StateUse::new(&proof.owner, &proof.key, proof.issued, proof.until);
    match store.first_use(used).await {
        Ok(FirstUse::Yes) => Ok(()),
        Ok(FirstUse::AlreadyUsed) => Err(AuthError::InvalidDpopProof(DpopError::Replayed)),
        Ok(_) => Err(AuthError::InvalidDpopProof(DpopError::ReplayUnknowable)),
        Err(StoreError::Full { .. } | StoreError::OwnerQuota { .. }) => {
            Err(AuthError::DpopReplayUnavailable { full: true })
        }
        Err(_) => Err(AuthError::DpopReplayUnavailable { full: false }),
    }
}

#[cfg(test)]
mod tests {
    //! The bindings and the single use, broken one at a time through the layer's own path
    //! (`Authenticator`'s checks as `prove` makes them, then [`record`]), 10,000 cases unless
    //! `PROPTEST_CASES` says otherwise: each case is refused with the error of its check.
    use std::sync::LazyLock;
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    use base64::Engine as _;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use http::{HeaderMap, HeaderValue, Method};
    use proptest::prelude::*;
    use serde_json::{Map, Value, json};
    use sha2::Digest as _;

    use super::*;
    use crate::auth::Dpop;
    use crate::auth::dpop::test_key::Key;
    use crate::auth::dpop_bind::{DpopSettings, admit_bearer};
    use crate::auth::rejection::InvalidToken;
    use crate::store::replay::MemoryReplayStore;

    const HTU: &str = "https://mcp.example.com/mcp";
    const TOKEN: &str = "eyJhbGciOiJFUzI1NiJ9.a-bound-token.sig";
    const NONCE_KEY: [u8; 32] = [0x33; 32];
    const NONCE_LIFETIME: Duration = Duration::from_secs(60);

    /// A proof over `claims`, signed by `key` with its own `jwk`.
    fn signed(key: &Key, claims: &Map<String, Value>) -> String {
        let Value::Object(header) = json!({"typ": "dpop+jwt", "alg": "ES256", "jwk": key.jwk})
        else {
            unreachable!()
        };
        key.sign(&header, claims)
    }

    static KEY: LazyLock<Key> = LazyLock::new(|| Key::fixed(0x41));
    static OTHER_KEY: LazyLock<Key> = LazyLock::new(|| Key::fixed(0x42));
    static SETTINGS: LazyLock<DpopSettings> = LazyLock::new(|| {
        Dpop::new()
            .nonce(NONCE_KEY.to_vec(), NONCE_LIFETIME)
            .settings(HTU, true)
            .expect("settings")
    });
    /// The nonces another gate (another key) issues.
    static STRANGER: LazyLock<DpopSettings> = LazyLock::new(|| {
        Dpop::new()
            .nonce(vec![0x34; 32], NONCE_LIFETIME)
            .settings(HTU, true)
            .expect("settings")
    });

    fn principal(jkt: Option<&str>) -> Principal {
        let mut claims = json!({"iss": "https://as.example", "sub": "alice"});
        if let Some(jkt) = jkt {
            claims["cnf"] = json!({ "jkt": jkt });
        }
        Principal::builder()
            .claims(claims)
            .build()
            .expect("principal")
    }

    /// The nonce `settings` answers a proof without one with, at `now`.
    fn nonce_of(settings: &DpopSettings, now: SystemTime) -> String {
        let principal = principal(Some(&KEY.jkt));
        let proof = signed(&KEY, &claims(now, None, "j0"));
        match settings.check(&Method::POST, &headers(&[&proof]), TOKEN, &principal, now) {
            Err(AuthError::UseDpopNonce { nonce }) => nonce,
            other => panic!("no nonce asked for: {other:?}"),
        }
    }

    fn claims(now: SystemTime, nonce: Option<&str>, jti: &str) -> Map<String, Value> {
        let iat = now
            .duration_since(UNIX_EPOCH)
            .expect("after 1970")
            .as_secs();
        let ath = URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(TOKEN.as_bytes()));
        let Value::Object(mut c) =
            json!({"jti": jti, "htm": "POST", "htu": HTU, "iat": iat, "ath": ath})
        else {
            unreachable!()
        };
        if let Some(nonce) = nonce {
            c.insert("nonce".into(), json!(nonce));
        }
        c
    }

    fn headers(proofs: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for proof in proofs {
            headers.append(
                "dpop",
                HeaderValue::from_str(proof).expect("a header value"),
            );
        }
        headers
    }

    /// One way to break a presentation's bindings or its single use.
    #[derive(Debug, Clone)]
    enum Mutation {
        Replayed,
        AsBearer,
        Unbound,
        AthOf(String),
        BoundToOtherKey,
        SignedByOtherKey,
        Htu(String),
        Htm(&'static str),
        NoProof,
        TwoProofs,
        NoNonce,
        StaleNonce(u64),
        ForeignNonce,
        OwnNonceTampered(usize),
    }

    fn mutation() -> impl Strategy<Value = Mutation> {
        prop_oneof![
            Just(Mutation::Replayed),
            Just(Mutation::AsBearer),
            Just(Mutation::Unbound),
            "[ -~]{0,64}"
                .prop_filter("another token", |t| t != TOKEN)
                .prop_map(Mutation::AthOf),
            Just(Mutation::BoundToOtherKey),
            Just(Mutation::SignedByOtherKey),
            "[a-z0-9]{1,12}"
                .prop_filter("another path", |p| p != "mcp")
                .prop_map(|p| Mutation::Htu(format!("https://mcp.example.com/{p}"))),
            prop::sample::select(vec!["GET", "PUT", "DELETE", "post", "PATCH"])
                .prop_map(Mutation::Htm),
            Just(Mutation::NoProof),
            Just(Mutation::TwoProofs),
            Just(Mutation::NoNonce),
            (2u64..1_000).prop_map(Mutation::StaleNonce),
            Just(Mutation::ForeignNonce),
            (0usize..32).prop_map(Mutation::OwnNonceTampered),
        ]
    }

    static RUNTIME: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime")
    });

    /// The presentation as the layer takes it: the bearer rule or the proof's checks, then its
    /// single use in `store`.
    fn present(
        store: &Arc<dyn ReplayStore>,
        bearer: bool,
        principal: Principal,
        proofs: &[&str],
        now: SystemTime,
    ) -> Result<(), AuthError> {
        if bearer {
            return admit_bearer(Some(&SETTINGS), principal).map(|_| ());
        }
        let proof = SETTINGS.check(&Method::POST, &headers(proofs), TOKEN, &principal, now)?;
        RUNTIME.block_on(record(Some(store), &proof))
    }

    /// 10,000 cases unless `PROPTEST_CASES` says otherwise.
    fn cases() -> u32 {
        std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(10_000)
    }

    fn fresh_store() -> Arc<dyn ReplayStore> {
        Arc::new(MemoryReplayStore::new(100, 100))
    }

    #[test]
    fn an_unbroken_presentation_is_accepted_once() {
        let now = SystemTime::now();
        let store = fresh_store();
        let nonce = nonce_of(&SETTINGS, now);
        let proof = signed(&KEY, &claims(now, Some(&nonce), "once"));
        let bound = || principal(Some(&KEY.jkt));
        assert_eq!(present(&store, false, bound(), &[&proof], now), Ok(()));
        assert_eq!(
            present(&store, false, bound(), &[&proof], now),
            Err(AuthError::InvalidDpopProof(DpopError::Replayed))
        );
        // The same jti under another key is another proof.
        let stranger = signed(&OTHER_KEY, &claims(now, Some(&nonce), "once"));
        let other = principal(Some(&OTHER_KEY.jkt));
        assert_eq!(present(&store, false, other, &[&stranger], now), Ok(()));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(cases()))]

        /// Every presentation broken in one way is refused, with the error of that check.
        #[test]
        fn broken_bindings_and_replays_are_refused_with_their_error(
            mutation in mutation(),
            jti in "[A-Za-z0-9_-]{8,24}",
        ) {
            let now = SystemTime::now();
            let store = fresh_store();
            let nonce = nonce_of(&SETTINGS, now);
            let mut c = claims(now, Some(&nonce), &jti);
            let mut signer: &Key = &KEY;
            let mut bound = Some(KEY.jkt.clone());
            let mut bearer = false;
            let mut count = 1;
            let proof_nonce = |c: &mut Map<String, Value>, n: String| {
                c.insert("nonce".into(), json!(n));
            };
            let expected = match &mutation {
                Mutation::Replayed => {
                    let first = signed(&KEY, &c);
                    prop_assert_eq!(present(&store, false, principal(Some(&KEY.jkt)), &[&first], now), Ok(()));
                    AuthError::InvalidDpopProof(DpopError::Replayed)
                }
                Mutation::AsBearer => {
                    bearer = true;
                    AuthError::InvalidToken(InvalidToken::DpopBound)
                }
                Mutation::Unbound => {
                    bound = None;
                    AuthError::InvalidToken(InvalidToken::NotDpopBound)
                }
                Mutation::AthOf(token) => {
                    let ath = URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(token.as_bytes()));
                    c.insert("ath".into(), json!(ath));
                    AuthError::InvalidDpopProof(DpopError::AthMismatch)
                }
                Mutation::BoundToOtherKey => {
                    bound = Some(OTHER_KEY.jkt.clone());
                    AuthError::InvalidDpopProof(DpopError::JktMismatch)
                }
                Mutation::SignedByOtherKey => {
                    signer = &OTHER_KEY;
                    AuthError::InvalidDpopProof(DpopError::JktMismatch)
                }
                Mutation::Htu(htu) => {
                    c.insert("htu".into(), json!(htu));
                    AuthError::InvalidDpopProof(DpopError::UriMismatch)
                }
                Mutation::Htm(htm) => {
                    c.insert("htm".into(), json!(htm));
                    AuthError::InvalidDpopProof(DpopError::MethodMismatch)
                }
                Mutation::NoProof => {
                    count = 0;
                    AuthError::InvalidDpopProof(DpopError::MissingProof)
                }
                Mutation::TwoProofs => {
                    count = 2;
                    AuthError::InvalidDpopProof(DpopError::MultipleProofs)
                }
                Mutation::NoNonce => {
                    c.remove("nonce");
                    AuthError::UseDpopNonce { nonce: nonce.clone() }
                }
                Mutation::StaleNonce(windows) => {
                    let then = now - NONCE_LIFETIME * u32::try_from(*windows).unwrap_or(2);
                    proof_nonce(&mut c, nonce_of(&SETTINGS, then));
                    AuthError::UseDpopNonce { nonce: nonce.clone() }
                }
                Mutation::ForeignNonce => {
                    proof_nonce(&mut c, nonce_of(&STRANGER, now));
                    AuthError::UseDpopNonce { nonce: nonce.clone() }
                }
                Mutation::OwnNonceTampered(i) => {
                    let mut bytes = URL_SAFE_NO_PAD.decode(&nonce).expect("a nonce decodes");
                    let at = i % bytes.len();
                    bytes[at] ^= 0x01;
                    proof_nonce(&mut c, URL_SAFE_NO_PAD.encode(&bytes));
                    AuthError::UseDpopNonce { nonce: nonce.clone() }
                }
            };
            let proof = signed(signer, &c);
            let second = signed(&KEY, &claims(now, Some(&nonce), "another-jti"));
            let proofs: Vec<&str> = match count {
                0 => vec![],
                1 => vec![&proof],
                _ => vec![&proof, &second],
            };
            let outcome = present(&store, bearer, principal(bound.as_deref()), &proofs, now);
            // A nonce refusal carries a fresh nonce: the current window's, as `nonce` is
            // (unless the window turned in between, which the comparison then allows).
            match (&outcome, &expected) {
                (Err(AuthError::UseDpopNonce { nonce: got }), AuthError::UseDpopNonce { .. }) => {
                    prop_assert!(accepted_now(got, now));
                }
                _ => prop_assert_eq!(outcome, Err(expected)),
            }
        }
    }

    /// Whether `nonce` is one the gate accepts now: a proof carrying it passes the nonce check.
    fn accepted_now(nonce: &str, now: SystemTime) -> bool {
        let proof = signed(&KEY, &claims(now, Some(nonce), "probe"));
        SETTINGS
            .check(
                &Method::POST,
                &headers(&[&proof]),
                TOKEN,
                &principal(Some(&KEY.jkt)),
                now,
            )
            .is_ok()
    }
}
