//! How the Redis stores name their keys: every key starts with the store's namespace, checked
//! once when the store is made (for the state stores, as a hash tag: [`slot_prefix`]), and an
//! owner is named by a digest, never spelled out.

use sha2::{Digest, Sha256};

use crate::store::{StoreError, StoreKind};

/// Checks that `namespace` may prefix a store's keys: 1 to 64 characters of
/// `A-Z a-z 0-9 - _ .` (no `:`, which separates the parts of a key, no space, no glob or hash
/// tag characters).
pub(crate) fn check_namespace(namespace: &str, store: StoreKind) -> Result<(), StoreError> {
    let usable = !namespace.is_empty()
        && namespace.len() <= 64
        && namespace
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if usable {
        Ok(())
    } else {
        Err(StoreError::unusable(
            store,
            "the namespace must be 1 to 64 characters of A-Z, a-z, 0-9, '-', '_' or '.'",
        ))
    }
}

/// The start of every key of a session, replay or task store on `namespace`: `{namespace}`.
/// The braces make the namespace the key's Redis Cluster hash tag, so that all of a store's
/// keys share one slot and each of its scripts (which counts the store's bounds across every
/// owner) runs on one shard. The limit store's keys do not use it: each caller's counters
/// carry their own tag, so that limits spread over the shards.
pub(crate) fn slot_prefix(namespace: &str) -> std::sync::Arc<str> {
    format!("{{{namespace}}}").into()
}

/// What names an owner in a Redis key: 32 hex digits of its SHA-256, so no identity is
/// spelled in a key and any text makes a valid key.
pub(crate) fn key_digest(owner: &str) -> String {
    let digest = Sha256::digest(owner.as_bytes());
    digest[..16].iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_are_checked() {
        for good in ["mcp-gate", "prod.eu_1", "a", &"x".repeat(64)] {
            assert!(check_namespace(good, StoreKind::Tasks).is_ok(), "{good}");
        }
        for bad in ["", "a b", "a:b", "ns*", "{ns}", &"x".repeat(65)] {
            assert!(check_namespace(bad, StoreKind::Tasks).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_owner_digest_is_fixed_length_hex() {
        let digest = key_digest("{\"issuer\":\"https://as.example\"}");
        assert_eq!(digest.len(), 32);
        assert!(digest.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(digest, key_digest("another owner"));
    }
}
