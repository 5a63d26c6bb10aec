//! The golden fixtures' normalisation: what varies from run to run (continuation states,
//! context ids, task ids, timestamps) replaced with fixed placeholders, and nothing else, so
//! that a malformed value still fails a comparison. Shared by `tests/suite/golden.rs` and the
//! Cedar equivalence suite.
#![allow(dead_code)]

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::Value;

/// What every context id is replaced with before comparison.
pub const CONTEXT_ID_PLACEHOLDER: &str = "actx_<random>";
/// What every task id is replaced with before comparison.
pub const TASK_ID_PLACEHOLDER: &str = "tsk_<random>";
/// What every timestamp (`createdAt`, `lastUpdatedAt`) is replaced with before comparison.
pub const TIMESTAMP_PLACEHOLDER: &str = "<timestamp>";

pub fn is_base64url(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_'
}

/// Whether `s` is exactly `actx_` and 22 base64url characters.
pub fn is_context_id(s: &str) -> bool {
    s.len() == 27 && s.starts_with("actx_") && s.bytes().skip(5).all(is_base64url)
}

/// Whether `s` is exactly `tsk_` and 22 base64url characters.
pub fn is_task_id(s: &str) -> bool {
    s.len() == 26 && s.starts_with("tsk_") && s.bytes().skip(4).all(is_base64url)
}

/// Replaces every `prefix` followed by a run of exactly 22 base64url characters with
/// `placeholder`. Anything else starting with `prefix` (a shorter or longer run) is left
/// alone, so a malformed handle fails the comparison.
pub fn normalize_handles(text: &str, prefix: &str, placeholder: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i..].starts_with(prefix.as_bytes()) {
            let tail = &bytes[i + prefix.len()..];
            let run = tail.iter().take_while(|b| is_base64url(**b)).count();
            if run == 22 {
                out.push_str(placeholder);
                i += prefix.len() + 22;
                continue;
            }
        }
        let ch = text[i..].chars().next().expect("char boundary");
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

/// Replaces every `actx_` + exactly 22 base64url characters with `actx_<random>`. Anything
/// else starting with `actx_` is left alone, so a malformed handle fails the comparison.
pub fn normalize_context_ids(text: &str) -> String {
    normalize_handles(text, "actx_", CONTEXT_ID_PLACEHOLDER)
}

/// Replaces every `tsk_` + exactly 22 base64url characters with `tsk_<random>`. Anything else
/// starting with `tsk_` is left alone, so a malformed task id fails the comparison.
pub fn normalize_task_ids(text: &str) -> String {
    normalize_handles(text, "tsk_", TASK_ID_PLACEHOLDER)
}

/// The length of a timestamp as the layer writes it: `YYYY-MM-DDTHH:MM:SSZ`.
pub const TIMESTAMP_LEN: usize = 20;

/// Whether `s` is exactly an RFC 3339 UTC timestamp in the one form the layer writes
/// (`mcp_gate::tasks::rfc3339`): `YYYY-MM-DDTHH:MM:SSZ`, whole seconds, upper-case `T` and
/// `Z`, and a real date and time of day (month 01-12, a day that exists in that month, hour
/// 00-23, minute and second 00-59). No fraction, no offset, no lower case.
pub fn is_timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() != TIMESTAMP_LEN {
        return false;
    }
    let digits = |range: std::ops::Range<usize>| -> Option<u32> {
        b[range].iter().try_fold(0u32, |n, d| {
            d.is_ascii_digit().then(|| n * 10 + u32::from(d - b'0'))
        })
    };
    let separators = [
        (4, b'-'),
        (7, b'-'),
        (10, b'T'),
        (13, b':'),
        (16, b':'),
        (19, b'Z'),
    ];
    if separators.iter().any(|&(at, byte)| b[at] != byte) {
        return false;
    }
    let (Some(year), Some(month), Some(day), Some(hour), Some(minute), Some(second)) = (
        digits(0..4),
        digits(5..7),
        digits(8..10),
        digits(11..13),
        digits(14..16),
        digits(17..19),
    ) else {
        return false;
    };
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days_in_month = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    (1..=days_in_month).contains(&day) && hour < 24 && minute < 60 && second < 60
}

/// Replaces every timestamp [`is_timestamp`] accepts with `<timestamp>`, where it stands
/// alone: the characters either side may not be ASCII letters or digits, so a longer run
/// (`12026-…`, `…:00ZZ`) is not cut down to a match. Anything else is left alone, so a
/// malformed timestamp fails the comparison.
pub fn normalize_timestamps(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < bytes.len() {
        let end = i + TIMESTAMP_LEN;
        let alone = (i == 0 || !bytes[i - 1].is_ascii_alphanumeric())
            && bytes.get(end).is_none_or(|b| !b.is_ascii_alphanumeric());
        if alone && text.get(i..end).is_some_and(is_timestamp) {
            out.push_str(TIMESTAMP_PLACEHOLDER);
            i = end;
            continue;
        }
        let ch = text[i..].chars().next().expect("char boundary");
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

/// The prefix of every continuation state the layer issues (`mcp_gate::continuation`).
pub const STATE_PREFIX: &str = "mcpgate1.";
/// What every continuation state is replaced with before comparison.
pub const STATE_PLACEHOLDER: &str = "mcpgate1.<state>";

pub fn is_state_byte(byte: u8) -> bool {
    is_base64url(byte) || byte == b'.'
}

/// Whether `s` has the form of the layer's continuation state,
/// `mcpgate1.<kid>.<base64url payload>.<base64url tag>`: a key id of 1 to 32 characters of
/// `A-Z a-z 0-9 - _`, a payload that decodes to a JSON object, and a tag of 32 bytes
/// (HMAC-SHA256), both without padding. Only the form: the key is the layer's.
pub fn is_request_state(s: &str) -> bool {
    let Some(rest) = s.strip_prefix(STATE_PREFIX) else {
        return false;
    };
    let parts: Vec<&str> = rest.split('.').collect();
    let [kid, payload, tag] = parts[..] else {
        return false;
    };
    let base64url = |p: &str| !p.is_empty() && p.bytes().all(is_base64url);
    if !(base64url(kid) && kid.len() <= 32 && base64url(payload) && base64url(tag)) {
        return false;
    }
    let payload_is_an_object = URL_SAFE_NO_PAD
        .decode(payload)
        .ok()
        .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok())
        .is_some_and(|v| v.is_object());
    let tag_is_32_bytes = URL_SAFE_NO_PAD.decode(tag).is_ok_and(|t| t.len() == 32);
    payload_is_an_object && tag_is_32_bytes
}

/// Replaces every continuation state (`mcpgate1.` and a run of base64url characters and dots
/// that [`is_request_state`] accepts) with `mcpgate1.<state>`. A malformed state is left
/// alone, so it fails the comparison.
pub fn normalize_states(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(STATE_PREFIX) {
        out.push_str(&rest[..at]);
        let candidate = &rest[at..];
        let run = STATE_PREFIX.len()
            + candidate[STATE_PREFIX.len()..]
                .bytes()
                .take_while(|b| is_state_byte(*b))
                .count();
        if is_request_state(&candidate[..run]) {
            out.push_str(STATE_PLACEHOLDER);
        } else {
            out.push_str(&candidate[..run]);
        }
        rest = &candidate[run..];
    }
    out.push_str(rest);
    out
}

/// Every normalisation: continuation states first (so that nothing inside a state's payload
/// can be taken for a context id), then context ids, then task ids (after the context ids, so
/// that a `tsk_` inside a context id is never taken for a task id), then timestamps.
pub fn normalize(text: &str) -> String {
    normalize_timestamps(&normalize_task_ids(&normalize_context_ids(
        &normalize_states(text),
    )))
}
