//! Server-chosen DPoP nonces (RFC 9449 §8, §9), stateless: any replica that holds the same key
//! accepts a nonce another replica issued.
//!
//! A nonce names a time window (`now / lifetime`) and carries an HMAC-SHA256 of that window
//! under the configured key: `base64url(window as 8 bytes big-endian || first 16 bytes of the
//! MAC)`. A nonce is accepted while its window is the current one or the one before, so it
//! lives between one and two lifetimes; the client is then told `use_dpop_nonce` with a fresh
//! one. Nothing is stored, and nothing is shared but the key: give every replica the same key
//! (32 bytes or more, from a secret store). A nonce says nothing about who asked for it; the
//! proof that carries it is still bound to its token, key, method, URL and `jti`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// Separates these MACs from every other use of the key.
const DOMAIN: &[u8] = b"mcp-gate dpop-nonce v1\0";

/// How many bytes of the MAC a nonce carries.
const MAC_BYTES: usize = 16;

/// The shortest key accepted, in bytes.
pub(crate) const MIN_KEY_BYTES: usize = 32;

/// Issues and checks nonces (see the module documentation).
pub(crate) struct DpopNonces {
    key: Vec<u8>,
    lifetime_secs: u64,
}

impl std::fmt::Debug for DpopNonces {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DpopNonces")
            .field("lifetime_secs", &self.lifetime_secs)
            .finish_non_exhaustive()
    }
}

impl DpopNonces {
    /// Nonces under `key`, each window `lifetime` long (at least one second).
    pub fn new(key: Vec<u8>, lifetime: Duration) -> Self {
        Self {
            key,
            lifetime_secs: lifetime.as_secs().max(1),
        }
    }

    fn window(&self, now: SystemTime) -> u64 {
        now.duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0)
            / self.lifetime_secs
    }

    fn mac(&self, window: u64) -> Hmac<Sha256> {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.key)
            .unwrap_or_else(|_| unreachable!("HMAC takes any key length"));
        mac.update(DOMAIN);
        mac.update(&window.to_be_bytes());
        mac
    }

    /// The nonce of the current window.
    pub fn issue(&self, now: SystemTime) -> String {
        let window = self.window(now);
        let tag = self.mac(window).finalize().into_bytes();
        let mut bytes = [0u8; 8 + MAC_BYTES];
        bytes[..8].copy_from_slice(&window.to_be_bytes());
        bytes[8..].copy_from_slice(&tag[..MAC_BYTES]);
        URL_SAFE_NO_PAD.encode(bytes)
    }

    /// Whether `nonce` was issued under this key in the current window or the one before.
    pub fn accepts(&self, nonce: &str, now: SystemTime) -> bool {
        let mut bytes = [0u8; 8 + MAC_BYTES];
        match URL_SAFE_NO_PAD.decode_slice(nonce, &mut bytes) {
            Ok(len) if len == bytes.len() => {}
            _ => return false,
        }
        let mut window = [0u8; 8];
        window.copy_from_slice(&bytes[..8]);
        let window = u64::from_be_bytes(window);
        let current = self.window(now);
        if window != current && window.checked_add(1) != Some(current) {
            return false;
        }
        self.mac(window).verify_truncated_left(&bytes[8..]).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: [u8; 32] = [7; 32];

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn a_nonce_lives_its_window_and_the_next() {
        let nonces = DpopNonces::new(KEY.to_vec(), Duration::from_secs(60));
        let nonce = nonces.issue(at(6_000));
        assert!(nonces.accepts(&nonce, at(6_000)));
        assert!(nonces.accepts(&nonce, at(6_059)));
        assert!(nonces.accepts(&nonce, at(6_119)));
        assert!(!nonces.accepts(&nonce, at(6_120)), "two windows later");
        assert!(!nonces.accepts(&nonce, at(5_999)), "from a later window");
    }

    #[test]
    fn another_replica_with_the_key_accepts_it_and_no_other_key_does() {
        let a = DpopNonces::new(KEY.to_vec(), Duration::from_secs(60));
        let b = DpopNonces::new(KEY.to_vec(), Duration::from_secs(60));
        let other = DpopNonces::new(vec![8; 32], Duration::from_secs(60));
        let nonce = a.issue(at(6_000));
        assert!(b.accepts(&nonce, at(6_030)));
        assert!(!other.accepts(&nonce, at(6_030)));
    }

    #[test]
    fn forged_and_malformed_nonces_are_refused() {
        let nonces = DpopNonces::new(KEY.to_vec(), Duration::from_secs(60));
        let nonce = nonces.issue(at(6_000));
        let mut bytes = URL_SAFE_NO_PAD.decode(&nonce).unwrap();
        // The current window's number with the MAC of another window.
        bytes[7] ^= 1;
        assert!(!nonces.accepts(&URL_SAFE_NO_PAD.encode(&bytes), at(6_000)));
        bytes[7] ^= 1;
        bytes[20] ^= 0x40;
        assert!(!nonces.accepts(&URL_SAFE_NO_PAD.encode(&bytes), at(6_000)));
        for bad in ["", "abc", &nonce[1..], &format!("{nonce}AA"), "!!!!"] {
            assert!(!nonces.accepts(bad, at(6_000)), "{bad:?}");
        }
    }
}
