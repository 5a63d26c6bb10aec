//! Checking a token's `authorization_details` against the operation actually requested.
//!
//! A denial suggests details; the token that comes back may carry something that merely
//! resembles them. What counts is whether the token covers *this* call, so policies compare
//! the principal's details with what the operation needs, on every retry.

use serde_json::Value;

/// Whether the granted details cover every needed detail.
///
/// A needed detail is covered by a granted detail of the same `type` in which every member of
/// the needed one is present and equal. Arrays are compared as sets: each needed element must
/// be granted. Objects are compared member by member, recursively; other values must be equal
/// (so `"amount": "40.00"` does not cover `"amount": "400.00"`). Needed details without a
/// string `type` are never covered.
///
/// ```
/// use mcp_gate::policy::authorization_details_cover;
/// use serde_json::json;
///
/// let granted = [json!({"type": "payment_initiation", "instructedAmount": {"currency": "EUR", "amount": "40.00"}})];
/// let same = [json!({"type": "payment_initiation", "instructedAmount": {"amount": "40.00", "currency": "EUR"}})];
/// let more = [json!({"type": "payment_initiation", "instructedAmount": {"currency": "EUR", "amount": "400.00"}})];
/// assert!(authorization_details_cover(&granted, &same));
/// assert!(!authorization_details_cover(&granted, &more));
/// ```
pub fn authorization_details_cover(granted: &[Value], needed: &[Value]) -> bool {
    needed.iter().all(|need| {
        let Some(kind) = need.get("type").and_then(Value::as_str) else {
            return false;
        };
        granted
            .iter()
            .filter(|g| g.get("type").and_then(Value::as_str) == Some(kind))
            .any(|g| covers(g, need))
    })
}

fn covers(granted: &Value, needed: &Value) -> bool {
    match (granted, needed) {
        (Value::Object(g), Value::Object(n)) => n
            .iter()
            .all(|(k, nv)| g.get(k).is_some_and(|gv| covers(gv, nv))),
        (Value::Array(g), Value::Array(n)) => n.iter().all(|nv| g.iter().any(|gv| gv == nv)),
        (g, n) => g == n,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn arrays_are_sets_and_types_must_match() {
        let granted =
            [json!({"type": "mcp_tool", "tools": ["echo", "whoami"], "actions": ["call"]})];
        assert!(authorization_details_cover(
            &granted,
            &[json!({"type": "mcp_tool", "tools": ["whoami"]})]
        ));
        assert!(!authorization_details_cover(
            &granted,
            &[json!({"type": "mcp_tool", "tools": ["delete"]})]
        ));
        assert!(!authorization_details_cover(
            &granted,
            &[json!({"type": "other", "tools": ["echo"]})]
        ));
        assert!(!authorization_details_cover(
            &granted,
            &[json!({"tools": ["echo"]})]
        ));
        assert!(!authorization_details_cover(
            &[],
            &[json!({"type": "mcp_tool"})]
        ));
        assert!(authorization_details_cover(&[], &[]));
    }
}
