//! The Authorization header, query and Content-Type carriers, through `Gate::authenticate`.
//!
//! Input: newline-separated fields; a field starting with `?` is the query, one starting with
//! `ct:` the Content-Type, every other one an Authorization value. Only the harness's valid
//! token, alone in one well-formed `Bearer` header, may be admitted.
#![no_main]

use http::{HeaderMap, HeaderValue, Uri, header};
use libfuzzer_sys::fuzz_target;
use mcp_gate_fuzz::harness;

fuzz_target!(|data: &[u8]| {
    let h = harness();
    let mut headers = HeaderMap::new();
    let mut uri = Uri::from_static("/mcp");
    let mut authorizations = Vec::new();
    for field in data.split(|b| *b == b'\n') {
        if let Some(query) = field.strip_prefix(b"?") {
            let Ok(parsed) = format!("/mcp?{}", String::from_utf8_lossy(query)).parse() else {
                return;
            };
            uri = parsed;
        } else if let Some(content_type) = field.strip_prefix(b"ct:") {
            let Ok(value) = HeaderValue::from_bytes(content_type) else {
                return;
            };
            headers.append(header::CONTENT_TYPE, value);
        } else {
            let Ok(value) = HeaderValue::from_bytes(field) else {
                return;
            };
            authorizations.push(field.to_vec());
            headers.append(header::AUTHORIZATION, value);
        }
    }
    if let Ok(principal) = h.authenticate(&headers, &uri) {
        assert_eq!(
            authorizations.len(),
            1,
            "admitted with {} headers",
            authorizations.len()
        );
        let text = String::from_utf8(authorizations.remove(0)).expect("an admitted header is text");
        let (scheme, token) = text.split_once(' ').expect("a scheme and a token");
        assert!(scheme.eq_ignore_ascii_case("bearer"), "{text:?}");
        assert_eq!(
            token.trim_start_matches(' '),
            h.alice,
            "admitted another token"
        );
        assert_eq!(principal.subject(), Some("alice"));
    }
});
