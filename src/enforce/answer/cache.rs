//! Cache hints (SEP-2549) on results the layer judged for one caller.
//!
//! On 2026-07-28 a cacheable result carries `cacheScope` and `ttlMs`. `"public"` lets any
//! client or intermediary serve the result across authorization contexts, and some clients
//! (rmcp's) read an absent scope as public. A list the layer filtered for this caller, or a
//! read the policy judged for this caller, is therefore marked `"private"`, whatever the inner
//! server said; its `ttlMs` is the inner one, capped so that a changed policy reaches a
//! client's cache within the cap.

use std::time::Duration;

use serde_json::{Map, Value};

/// The methods whose results are cacheable in the 2026-07-28 schema (`CacheableResult`):
/// `server/discover`, the six listings, `resources/read` and `skills/get`.
pub const CACHEABLE: [&str; 9] = [
    "server/discover",
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/directory/read",
    "skills/list",
    "resources/read",
    "skills/get",
];

/// Whether a result of `method` is cacheable, and one the policy judges per caller (every
/// cacheable method but `server/discover`, which the layer answers alike for everyone).
pub(crate) fn judged_per_caller(method: &str) -> bool {
    method != "server/discover" && CACHEABLE.contains(&method)
}

/// Marks `result` private to the caller, its `ttlMs` capped at `cap`: an absent `ttlMs` stays
/// absent, and one that is not a non-negative integer becomes `0` (stale at once).
pub(crate) fn mark_private(result: &mut Map<String, Value>, cap: Duration) {
    result.insert("cacheScope".into(), Value::String("private".into()));
    if let Some(ttl) = result.get_mut("ttlMs") {
        *ttl = Value::from(capped_ttl(ttl.as_u64(), cap));
    }
}

/// A result's `ttlMs` capped at `cap`: `ttl` is the member read as a non-negative integer, and
/// `None` (any other value) becomes `0`, stale at once.
pub(crate) fn capped_ttl(ttl: Option<u64>, cap: Duration) -> u64 {
    let cap_ms = u64::try_from(cap.as_millis()).unwrap_or(u64::MAX);
    ttl.map_or(0, |ms| ms.min(cap_ms))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn marked(result: Value) -> Value {
        let mut result = result.as_object().cloned().unwrap();
        mark_private(&mut result, Duration::from_secs(60));
        Value::Object(result)
    }

    #[test]
    fn every_scope_becomes_private_and_the_ttl_is_capped() {
        for scope in [json!("public"), json!("private"), json!(""), json!(7)] {
            let out = marked(json!({"tools": [], "cacheScope": scope, "ttlMs": 600_000}));
            assert_eq!(
                out,
                json!({"tools": [], "cacheScope": "private", "ttlMs": 60_000})
            );
        }
        assert_eq!(
            marked(json!({"tools": []})),
            json!({"tools": [], "cacheScope": "private"})
        );
        assert_eq!(marked(json!({"ttlMs": 5}))["ttlMs"], 5);
        for odd in [json!(-1), json!(1.5), json!("60"), json!(null)] {
            assert_eq!(marked(json!({"ttlMs": odd}))["ttlMs"], 0);
        }
    }

    #[test]
    fn discover_is_cacheable_but_not_judged_per_caller() {
        assert!(CACHEABLE.contains(&"server/discover"));
        assert!(!judged_per_caller("server/discover"));
        assert!(judged_per_caller("resources/read"));
        assert!(!judged_per_caller("tools/call"));
    }
}
