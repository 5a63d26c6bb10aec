//! Rendering a denial: revision x era x capabilities x method -> the exact HTTP response.
//!
//! | remediation | answer |
//! |---|---|
//! | `Scope` | 403 `insufficient_scope` challenge listing every scope the operation needs |
//! | `Credential` | by default a challenge: `error="insufficient_authorization"` with a base64url `authorization_remediation`; or a result / JSON-RPC error with an `authorization_remediation` hint; or both where the revision allows it |
//! | `Unavailable`, `Undisclosed` | `tools/call`: a `CallToolResult` with `isError: true` and the envelope; other methods: a JSON-RPC error (configurable code, default `-32003`) with the envelope in `error.data` |
//! | `Url` | under an error-based revision, for a legacy session that declared `elicitation.url`: the 2025-11-25 `-32042` URL elicitation error; for anyone the layer's URL round trip cannot reach: `Undisclosed`, the approval page in the text |
//! | `Task` | for a request that cannot hold a task: `Undisclosed`, the remedy in the text |
//! | `Ask` (and a confirmation not given) | for a client that cannot be asked: `Undisclosed`, the remedy in the text |
//!
//! The flows themselves are built elsewhere, and call back here for their answers: a modern
//! URL approval or confirmation is an `input_required` result (`DenialContext::input_required`,
//! with the signed state from `continuation`), asked by the layer's interactive round trip; a
//! held call is a task (`tasks::wire`). This module renders only what is said on the wire.
//!
//! Modern requests get `resultType: "complete"` on results; legacy requests never see
//! `resultType`. Error-based revisions answer every policy denial with a JSON-RPC error.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use serde_json::{Map, Value, json};

use super::envelope::{Envelope, RemediationState};
use super::reference::derive_reference;
use super::revision::{Family, Revision};
use crate::auth::challenge::{Challenge, ErrorCode};
use crate::auth::{AuthError, ScopeSet};
use crate::mcp::request::McpRequest;
use crate::mcp::{Era, ProtocolContext};
use crate::policy::{CredentialReference, Remediation};

/// Default JSON-RPC code for policy denials carried as errors (non-tool methods, and every
/// denial under error-based revisions). Outside the range MCP reserves (`-32020..-32099`).
pub const DEFAULT_DENIAL_CODE: i64 = -32003;

/// The MCP 2025-11-25 `URLElicitationRequiredError` code, which the error-based revision
/// composes URL remedies with on legacy sessions. MCP 2026-07-28 has no such error.
pub const URL_ELICITATION_REQUIRED: i64 = -32042;

/// The longest `authorization_remediation` (base64url characters) a `WWW-Authenticate`
/// challenge carries. Clients and proxies commonly refuse response headers past 8 KiB; a
/// longer remedy is delivered in the result on modern requests, and only in the JSON body of
/// the challenge on legacy ones.
pub const MAX_CHALLENGE_REMEDIATION: usize = 4096;

/// How a credential remedy is delivered over HTTP.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum CredentialDelivery {
    /// A `WWW-Authenticate` challenge with `authorization_remediation` (the default).
    #[default]
    Challenge,
    /// A result (or JSON-RPC error) with an `authorization_remediation` hint, HTTP 200, for
    /// modern requests; legacy requests still get the challenge.
    Result,
    /// The challenge, with the result as its body. Only where the revision allows an envelope
    /// beside a challenge.
    Both,
}

/// Denial settings fixed when the layer is built.
#[derive(Clone, Debug)]
pub(crate) struct DenialSettings {
    pub revision: Revision,
    pub error_code: i64,
    pub credential_delivery: CredentialDelivery,
    pub credential_status: StatusCode,
}

/// What is being denied.
pub(crate) enum Denial<'a> {
    Deny(&'a Remediation),
    /// A confirmation the client cannot be asked for.
    Ask(&'a str),
    /// A confirmation that was asked and not given.
    Unconfirmed(&'a str),
}

/// Everything about the request a denial's shape depends on.
pub(crate) struct DenialContext<'a> {
    pub settings: &'a DenialSettings,
    pub request: &'a McpRequest,
    pub protocol: &'a ProtocolContext,
    pub resource_metadata: &'a str,
    pub endpoint_scopes: &'a ScopeSet,
    pub context_id: &'a str,
    /// The accepted DPoP proof algorithms, when the caller presented a DPoP-bound token: its
    /// challenges then use the `DPoP` scheme (RFC 9449 §7.1).
    pub dpop_algs: Option<&'a str>,
}

/// A rendered denial and how it was expressed, for the decision log.
pub(crate) struct Rendered {
    pub response: Response<Bytes>,
    pub expressed_as: Expressed,
}

/// How the layer said a decision to the client: the decision event's `expressed_as`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Expressed {
    /// A scope challenge (`insufficient_scope`).
    Scope,
    /// A credential remedy (RFC 9396 authorization details).
    Credential,
    /// A URL approval: the 2025-11-25 URL elicitation error.
    Url,
    /// An `InputRequiredResult`: the layer's own confirmation or URL round trip.
    InputRequired,
    /// A plain denial: `unavailable` or `undisclosed`.
    State(RemediationState),
    /// A durable approval task.
    Task,
    /// Allowed once the user confirmed.
    Confirmed,
    /// Answered as the inner server answers for a component it does not have.
    Concealed,
    /// A listed entry kept in the list.
    Shown,
    /// A listed entry taken out of the list.
    Hidden,
    /// The layer's own error instead (the task store refused the held call).
    Refused,
}

impl Expressed {
    /// The log's word for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Scope => "scope",
            Self::Credential => "credential",
            Self::Url => "url",
            Self::InputRequired => "input_required",
            Self::State(state) => state.as_str(),
            Self::Task => "task",
            Self::Confirmed => "confirmed",
            Self::Concealed => "concealed",
            Self::Shown => "shown",
            Self::Hidden => "hidden",
            Self::Refused => "refused",
        }
    }

    /// Whether this is a denial that says nothing a client could act on, which conceal mode
    /// answers as the inner server answers an unknown component.
    pub fn is_plain_refusal(self) -> bool {
        matches!(
            self,
            Self::State(RemediationState::Unavailable | RemediationState::Undisclosed)
        )
    }
}

const DEFAULT_CREDENTIAL_MESSAGE: &str = "This operation needs an additional authorization.";

impl DenialContext<'_> {
    pub fn render(&self, denial: Denial<'_>) -> Rendered {
        match denial {
            Denial::Deny(Remediation::Scope { scopes }) => self.scope(scopes),
            Denial::Deny(Remediation::Credential {
                authorization_details,
                reference,
                message,
            }) => self.credential(authorization_details, reference, message.as_deref()),
            Denial::Deny(Remediation::Unavailable { message }) => self.plain(RemediationState::Unavailable, message),
            Denial::Deny(Remediation::Undisclosed { message }) => self.plain(RemediationState::Undisclosed, message),
            Denial::Deny(Remediation::Url { url, message, .. }) => {
                if self.error_based() && self.protocol.era == Era::Legacy && self.protocol.capabilities.url_elicitation() {
                    self.url_elicitation_required(url, message)
                } else {
                    self.plain(RemediationState::Undisclosed, &format!("{message} (approval page: {url})"))
                }
            }
            Denial::Deny(Remediation::Task { message }) => self.plain(
                RemediationState::Undisclosed,
                &format!("{message} (this request waits for an out-of-band approval, which this client cannot follow)"),
            ),
            Denial::Unconfirmed(message) => self.plain(
                RemediationState::Undisclosed,
                &format!("{message} (the call was not confirmed)"),
            ),
            Denial::Ask(message) => self.plain(
                RemediationState::Undisclosed,
                &format!("{message} (this call needs your confirmation, which cannot be asked for here)"),
            ),
        }
    }

    /// A modern multi-round-trip answer asking for one input under `key`, with the layer's
    /// signed `state`; `url_hint` adds the envelope a URL remedy carries.
    pub fn input_required(&self, key: &str, input: Value, state: &str, url_hint: bool) -> Rendered {
        let mut result = Map::new();
        result.insert("resultType".into(), "input_required".into());
        result.insert("inputRequests".into(), json!({ key: input }));
        result.insert("requestState".into(), state.into());
        if url_hint {
            let envelope = Envelope {
                remediation: RemediationState::Available,
                context_id: self.context_id,
                hints: vec![json!({"type": "url"})],
            };
            let revision = self.revision();
            result.insert(
                "_meta".into(),
                json!({ Envelope::key(revision): envelope.to_json(revision) }),
            );
        }
        Rendered {
            response: json_rpc(
                StatusCode::OK,
                json!({"jsonrpc": "2.0", "id": self.request.id, "result": result}),
                false,
            ),
            expressed_as: Expressed::InputRequired,
        }
    }

    fn revision(&self) -> Revision {
        self.settings.revision
    }

    fn error_based(&self) -> bool {
        self.revision().family() == Family::ErrorBased
    }

    /// The `403 insufficient_scope` challenge listing every scope the operation needs. Under
    /// the error-based revision its body is the JSON-RPC error with the envelope (`reason` and
    /// the context id, no hints: the challenge describes the remedy), as that text's scope
    /// example shows; otherwise it is the challenge's parameters as JSON.
    fn scope(&self, scopes: &[String]) -> Rendered {
        let mut required = self.endpoint_scopes.clone();
        required.extend(scopes.iter().cloned());
        let rejection = AuthError::InsufficientScope { required };
        let dpop = self
            .dpop_algs
            .map(|algs| crate::auth::rejection::DpopChallenge {
                algs,
                presented: true,
            });
        let mut response = rejection.to_response_in(self.resource_metadata, "", dpop);
        if self.error_based() {
            let envelope = Envelope {
                remediation: RemediationState::Available,
                context_id: self.context_id,
                hints: Vec::new(),
            };
            let body = self.denial_body(&envelope, rejection.description());
            *response.body_mut() = Bytes::from(body.to_string());
        }
        Rendered {
            response,
            expressed_as: Expressed::Scope,
        }
    }

    /// The 2025-11-25 `URLElicitationRequiredError` (`-32042`) the error-based revision
    /// composes a URL remedy with, for a legacy session that declared `elicitation.url`: the
    /// envelope with a `url` hint, and the elicitation itself in `data.elicitations`, whose
    /// `elicitationId` is the denial's context id. The layer never sends
    /// `notifications/elicitation/complete`: the approval happens in the application, and the
    /// client's retry is judged afresh.
    fn url_elicitation_required(&self, url: &str, message: &str) -> Rendered {
        let envelope = Envelope {
            remediation: RemediationState::Available,
            context_id: self.context_id,
            hints: vec![json!({"type": "url"})],
        };
        let revision = self.revision();
        let body = json!({
            "jsonrpc": "2.0",
            "id": self.request.id,
            "error": {
                "code": URL_ELICITATION_REQUIRED,
                "message": message,
                "data": {
                    Envelope::key(revision): envelope.to_json(revision),
                    "elicitations": [{
                        "mode": "url",
                        "elicitationId": self.context_id,
                        "url": url,
                        "message": message,
                    }],
                },
            },
        });
        Rendered {
            response: json_rpc(StatusCode::OK, body, false),
            expressed_as: Expressed::Url,
        }
    }

    fn is_tool_call(&self) -> bool {
        self.request.method == "tools/call"
    }

    /// `unavailable` / `undisclosed`, no hints.
    fn plain(&self, state: RemediationState, message: &str) -> Rendered {
        let envelope = Envelope {
            remediation: state,
            context_id: self.context_id,
            hints: Vec::new(),
        };
        Rendered {
            response: json_rpc(StatusCode::OK, self.denial_body(&envelope, message), false),
            expressed_as: Expressed::State(state),
        }
    }

    /// The JSON-RPC document that carries an envelope: a tool result where the revision and
    /// method allow it, a JSON-RPC error otherwise.
    fn denial_body(&self, envelope: &Envelope<'_>, message: &str) -> Value {
        let revision = self.revision();
        let key = Envelope::key(revision);
        let envelope_json = envelope.to_json(revision);
        let result_based = matches!(revision.family(), Family::ResultBased { .. });
        if result_based && self.is_tool_call() {
            let mut result = Map::new();
            if self.protocol.era == Era::Modern {
                result.insert("resultType".into(), "complete".into());
            }
            result.insert("isError".into(), true.into());
            result.insert("content".into(), json!([{"type": "text", "text": message}]));
            result.insert("_meta".into(), json!({ key: envelope_json }));
            json!({"jsonrpc": "2.0", "id": self.request.id, "result": result})
        } else {
            json!({
                "jsonrpc": "2.0",
                "id": self.request.id,
                "error": {"code": self.settings.error_code, "message": message, "data": { key: envelope_json }},
            })
        }
    }

    fn credential(
        &self,
        details: &[Value],
        reference: &CredentialReference,
        message: Option<&str>,
    ) -> Rendered {
        let message = message.unwrap_or(DEFAULT_CREDENTIAL_MESSAGE);
        let reference = match reference {
            CredentialReference::Derived => Some(derive_reference(details)),
            CredentialReference::Fixed(fixed) => Some(fixed.clone()),
            CredentialReference::SingleUse => None,
        };
        let mut remedy = Map::new();
        remedy.insert(
            "authorization_details".into(),
            Value::Array(details.to_vec()),
        );
        if let Some(reference) = &reference {
            remedy.insert("authorization_reference".into(), reference.clone().into());
        }
        let mut hint = Map::new();
        hint.insert("type".into(), "authorization_remediation".into());
        hint.extend(remedy.clone());
        let envelope = Envelope {
            remediation: RemediationState::Available,
            context_id: self.context_id,
            hints: vec![Value::Object(hint)],
        };
        let encoded = URL_SAFE_NO_PAD.encode(Value::Object(remedy).to_string());
        let fits_a_header = encoded.len() <= MAX_CHALLENGE_REMEDIATION;
        // Legacy clients get credential remedies by challenge: a result-borne hint is a
        // modern-era shape. A remedy too large for a header goes in the result instead on
        // modern requests, and only in the body of the challenge on legacy ones.
        let delivery = match (self.settings.credential_delivery, self.protocol.era) {
            (CredentialDelivery::Result, Era::Legacy) => CredentialDelivery::Challenge,
            (_, Era::Modern) if !fits_a_header => CredentialDelivery::Result,
            (delivery, _) => delivery,
        };
        let response = match delivery {
            CredentialDelivery::Result => {
                json_rpc(StatusCode::OK, self.denial_body(&envelope, message), false)
            }
            delivery => {
                let in_header = Some(encoded.as_str()).filter(|_| fits_a_header);
                let body = self.challenge_body(delivery, envelope, message, &encoded, in_header);
                self.credential_challenge(body, message, in_header)
            }
        };
        Rendered {
            response,
            expressed_as: Expressed::Credential,
        }
    }
}

impl DenialContext<'_> {
    /// The body of a credential challenge: the result beside it (`Both`), the error-based
    /// text's JSON-RPC error with the envelope (the hint only when the header could not carry
    /// it), or the challenge's parameters as JSON.
    fn challenge_body(
        &self,
        delivery: CredentialDelivery,
        envelope: Envelope<'_>,
        message: &str,
        encoded: &str,
        in_header: Option<&str>,
    ) -> Value {
        if delivery == CredentialDelivery::Both {
            return self.denial_body(&envelope, message);
        }
        if self.error_based() {
            let hints = if in_header.is_some() {
                Vec::new()
            } else {
                envelope.hints
            };
            return self.denial_body(&Envelope { hints, ..envelope }, message);
        }
        json!({
            "error": "insufficient_authorization",
            "error_description": message,
            "authorization_remediation": encoded,
            "resource_metadata": self.resource_metadata,
        })
    }

    /// The `insufficient_authorization` challenge (the configured status) with `body`.
    fn credential_challenge(
        &self,
        body: Value,
        message: &str,
        in_header: Option<&str>,
    ) -> Response<Bytes> {
        let mut response = json_rpc(self.settings.credential_status, body, true);
        let challenge = Challenge {
            scheme: if self.dpop_algs.is_some() {
                crate::auth::challenge::DPOP
            } else {
                crate::auth::challenge::BEARER
            },
            algs: self.dpop_algs,
            resource_metadata: self.resource_metadata,
            scope: None,
            error: Some(ErrorCode::InsufficientAuthorization),
            error_description: Some(message),
            authorization_remediation: in_header,
        };
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, challenge.to_header_value());
        response
    }
}

/// A JSON response; `no_store` adds `Cache-Control: no-store`.
pub(crate) fn json_rpc(status: StatusCode, body: Value, no_store: bool) -> Response<Bytes> {
    let mut response = Response::new(Bytes::from(body.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if no_store {
        response
            .headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}
