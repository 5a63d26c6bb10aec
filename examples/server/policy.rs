//! The example policy: one tool per kind of decision.
//!
//! | tool | decision |
//! |---|---|
//! | `echo`, `whoami` | allowed |
//! | `transfer` | allowed only with a token whose `authorization_details` cover this exact payment; otherwise a credential remedy for it |
//! | `admin_report` | needs scope `mcp:admin` |
//! | `delete_everything` | `unavailable`: never allowed |
//! | `secret_sauce` | `undisclosed` |
//! | anything else | allowed (the inner server answers unknown tools itself) |

use std::convert::Infallible;

use mcp_gate::policy::{Decision, Evaluation, Remediation, authorization_details_cover};
use serde_json::{Value, json};

/// The payment details a `transfer` call needs, built from its own arguments.
pub fn payment_details(arguments: &serde_json::Map<String, Value>) -> Value {
    json!({
        "type": "payment_initiation",
        "actions": ["initiate"],
        "instructedAmount": {"currency": arguments.get("currency"), "amount": arguments.get("amount")},
        "creditorAccount": {"iban": arguments.get("iban")},
    })
}

/// Decides one request.
pub async fn demo_policy(evaluation: Evaluation) -> Result<Decision, Infallible> {
    let principal = evaluation.principal();
    Ok(match evaluation.tool() {
        Some("transfer") => {
            let empty = serde_json::Map::new();
            let needed = [payment_details(evaluation.arguments().unwrap_or(&empty))];
            // The token must cover this very payment: one minted for 40 EUR does not cover 400.
            if authorization_details_cover(principal.authorization_details(), &needed) {
                Decision::allow()
            } else {
                Remediation::credential(needed)
                    .message("This transfer needs a payment-specific authorization.")
                    .into()
            }
        }
        Some("admin_report") if !principal.has_scope("mcp:admin") => {
            Decision::scopes(["mcp:admin"])
        }
        Some("delete_everything") => Decision::unavailable("Deleting everything is never allowed."),
        Some("secret_sauce") => Decision::undisclosed("You cannot use this tool."),
        _ => Decision::allow(),
    })
}
