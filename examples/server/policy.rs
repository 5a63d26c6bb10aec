//! The example policy: one tool per kind of decision.
//!
//! | tool | decision |
//! |---|---|
//! | `echo`, `whoami` | allowed |
//! | `transfer` | allowed only with a token whose `authorization_details` cover this exact payment; otherwise a credential remedy for it |
//! | `admin_report` | needs scope `mcp:admin` |
//! | `delete_everything` | `unavailable`: never allowed |
//! | `secret_sauce` | `undisclosed` |
//! | `share_folder` | URL approval: allowed once the caller approved it at `/approve/{id}` |
//! | `delete_file` | asks the user to confirm |
//! | `deploy` | held in a durable task until someone approves it on `/tasks` (clients without the Tasks extension get `undisclosed`) |
//! | prompt `layoffs`, resource `demo://payroll` | need scope `mcp:admin` |
//! | anything else | allowed (the inner server answers unknown tools itself) |
//!
//! In `tools/list` the caller sees every tool except `secret_sauce` and `delete_everything`,
//! and `admin_report` only with `mcp:admin`.

use mcp_gate::mcp::Target;
use mcp_gate::policy::{
    Decision, EvaluateFuture, Evaluation, Phase, Policy, Remediation, authorization_details_cover,
};
use serde_json::{Value, json};

use super::approvals::Approvals;

/// The payment details a `transfer` call needs, built from its own arguments.
pub fn payment_details(arguments: &serde_json::Map<String, Value>) -> Value {
    json!({
        "type": "payment_initiation",
        "actions": ["initiate"],
        "instructedAmount": {"currency": arguments.get("currency"), "amount": arguments.get("amount")},
        "creditorAccount": {"iban": arguments.get("iban")},
    })
}

/// The example policy, with the approval store behind `share_folder` and the origin approval
/// pages are served from.
#[derive(Clone)]
pub struct DemoPolicy {
    approvals: Approvals,
    origin: String,
}

impl DemoPolicy {
    /// A policy whose approval pages live at `origin` (`http://127.0.0.1:8080`).
    pub fn new(approvals: Approvals, origin: impl Into<String>) -> Self {
        Self {
            approvals,
            origin: origin.into(),
        }
    }

    fn decide(&self, evaluation: &Evaluation) -> Decision {
        let principal = evaluation.principal();
        let admin_only = match evaluation.target() {
            Target::Prompt { name, .. } => name == "layoffs",
            Target::Resource { uri } => uri == "demo://payroll",
            _ => false,
        };
        if admin_only && !principal.has_scope("mcp:admin") {
            return match evaluation.phase() {
                Phase::Discovery => Decision::undisclosed(""),
                _ => Decision::scopes(["mcp:admin"]),
            };
        }
        if evaluation.phase() == Phase::Discovery {
            // Lists show what the caller could use: not the secret, not what is never
            // allowed, and the admin report only to admins.
            return match evaluation.tool() {
                Some("secret_sauce") | Some("delete_everything") => Decision::undisclosed(""),
                Some("admin_report") if !principal.has_scope("mcp:admin") => {
                    Decision::undisclosed("")
                }
                _ => Decision::allow(),
            };
        }
        let empty = serde_json::Map::new();
        let arguments = evaluation.arguments().unwrap_or(&empty);
        let text = |key: &str| {
            arguments
                .get(key)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        };
        match evaluation.tool() {
            Some("transfer") => {
                let needed = [payment_details(arguments)];
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
            Some("delete_everything") => {
                Decision::unavailable("Deleting everything is never allowed.")
            }
            Some("secret_sauce") => Decision::undisclosed("You cannot use this tool."),
            Some("share_folder") => {
                let (subject, folder) = (principal.subject().unwrap_or(""), text("folder"));
                // Whatever the client answered, only our own record counts.
                if self.approvals.is_approved(subject, &folder) {
                    Decision::allow()
                } else {
                    let id = self.approvals.request(subject, &folder);
                    Decision::url(
                        format!("{}/approve/{id}", self.origin),
                        format!("Approve sharing folder {folder}, then try again."),
                    )
                }
            }
            // Held until an approver decides; asked again once approved, it is allowed.
            Some("deploy") if evaluation.approval().is_some() => Decision::allow(),
            Some("deploy") => Decision::task(format!(
                "Deploying to {} needs an approval from the release manager.",
                text("env")
            )),
            // The layer lets the call through only after an explicit confirmation.
            Some("delete_file") => Decision::ask(format!("Delete {}?", text("path"))),
            _ => Decision::allow(),
        }
    }
}

impl Policy for DemoPolicy {
    fn evaluate(&self, evaluation: Evaluation) -> EvaluateFuture {
        let decision = self.decide(&evaluation);
        Box::pin(async move { Ok(decision) })
    }
}
