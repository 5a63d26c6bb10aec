//! JWS headers, really signed by the trusted key over valid claims: only ES256 naming the
//! trusted `kid`, with an access-token `typ` (or none) and no `crit`, may be admitted.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mcp_gate_fuzz::{KID, b64, claims, harness};
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let h = harness();
    let token = h
        .key
        .sign_segments(&b64(data), &b64(claims("alice").to_string()));
    if h.token(&token).is_ok() {
        let header: Value = serde_json::from_slice(data).expect("an admitted header is JSON");
        assert_eq!(header["alg"], "ES256", "{header}");
        assert_eq!(header["kid"], KID, "{header}");
        assert!(header.get("crit").is_none_or(Value::is_null), "{header}");
        let typ = header["typ"].as_str().map(str::to_ascii_lowercase);
        assert!(
            matches!(
                typ.as_deref(),
                None | Some("at+jwt" | "application/at+jwt" | "jwt")
            ),
            "{header}"
        );
    }
});
