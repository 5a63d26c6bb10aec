//! [`RequestId`]: the id the decision events and audit records of one HTTP request share.
//!
//! A request's decisions (one per listed entry of a `tools/list`, one per URI of a
//! `subscriptions/listen`) carry the same id, so that the records of one request can be put
//! together again. The id is the layer's own, never a header the caller sent: a caller could
//! otherwise make its requests look like someone else's. It is 32 hex digits, a random prefix
//! drawn once per process followed by a counter, so that two replicas do not hand out the same
//! id and a new id costs one atomic add (it is written out only when an observer asks).

use std::fmt;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// This process's prefix: random, or (without a random source) the start time's nanoseconds.
fn prefix() -> u64 {
    static PREFIX: OnceLock<u64> = OnceLock::new();
    *PREFIX.get_or_init(|| {
        let mut bytes = [0u8; 8];
        match crate::random::fill(&mut bytes) {
            Ok(()) => u64::from_be_bytes(bytes),
            Err(_) => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |since| since.as_nanos() as u64),
        }
    })
}

/// The next number of this process's count.
static NEXT: AtomicU64 = AtomicU64::new(1);

/// One request's id: unique in this process, and across replicas with near certainty.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct RequestId {
    prefix: u64,
    number: u64,
}

impl RequestId {
    /// A new id.
    pub fn next() -> Self {
        Self {
            prefix: prefix(),
            number: NEXT.fetch_add(1, Ordering::Relaxed),
        }
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}{:016x}", self.prefix, self.number)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_32_hex_digits_and_never_repeat() {
        let first = RequestId::next();
        let second = RequestId::next();
        assert_ne!(first, second);
        for id in [first, second] {
            let text = id.to_string();
            assert_eq!(text.len(), 32);
            assert!(text.bytes().all(|b| b.is_ascii_hexdigit()));
        }
        assert_eq!(first.to_string()[..16], second.to_string()[..16]);
    }
}
