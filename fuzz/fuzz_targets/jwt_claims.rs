//! JWT payloads, really signed by the trusted key under the standard header: only claims that
//! satisfy the documented rules (issuer, audience, expiry, not-before, scope) may be admitted.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mcp_gate_fuzz::{ISSUER, RESOURCE, SCOPE, b64, harness, now, standard_header};
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let h = harness();
    let token = h.key.sign_segments(&b64(standard_header()), &b64(data));
    let Ok(principal) = h.token(&token) else {
        return;
    };
    let claims: Value = serde_json::from_slice(data).expect("admitted claims are JSON");
    assert_eq!(claims["iss"], ISSUER, "{claims}");
    let audience_ok = match &claims["aud"] {
        Value::String(aud) => aud == RESOURCE,
        Value::Array(items) => items.iter().any(|a| a == RESOURCE),
        _ => false,
    };
    assert!(audience_ok, "{claims}");
    let exp = claims["exp"].as_f64().expect("an admitted exp is a number");
    assert!(exp + 31.0 >= now() as f64, "{claims}");
    if let Some(nbf) = claims.get("nbf").and_then(Value::as_f64) {
        assert!(nbf <= now() as f64 + 31.0, "{claims}");
    }
    assert!(principal.has_scope(SCOPE), "{claims}");
});
