//! Request paths against the metadata router: only the exact documented paths serve the
//! document.
#![no_main]

use http::{StatusCode, Uri};
use libfuzzer_sys::fuzz_target;
use mcp_gate_fuzz::harness;

fuzz_target!(|data: &[u8]| {
    let h = harness();
    let Ok(uri) = Uri::try_from(data) else { return };
    if uri.scheme().is_some() || !uri.path().starts_with('/') {
        return;
    }
    let exact = h.gate.metadata_paths().iter().any(|p| p == uri.path());
    let (status, body) = h.metadata(uri.clone());
    let document = serde_json::to_vec(h.gate.metadata()).unwrap();
    if exact {
        assert_eq!(status, StatusCode::OK, "{uri}");
        assert_eq!(body, document);
    } else {
        assert_eq!(status, StatusCode::NOT_FOUND, "{uri}");
        assert_ne!(body, document);
    }
});
