//! What happens to an authenticated request, in order: read the body, classify it, work out
//! its era, ask the policy, then forward it or answer with a denial.

use bytes::Bytes;
use http::request::Parts;
use http::{Method, Request, Response, StatusCode, header};
use tower_service::Service;

use super::body::GateBody;
use super::buffer::read_body;
use crate::auth::Principal;
use crate::denial::new_context_id;
use crate::denial::render::{Denial, DenialContext, json_rpc};
use crate::gate::Gate;
use crate::mcp::era::protocol_context;
use crate::mcp::request::{McpRequest, Message, classify};
use crate::mcp::{INTERNAL_ERROR, ProtocolContext, ProtocolError};
use crate::policy::{self, Decision, Evaluation, Phase, Remediation};

/// The bounds every request and response body of the layer meets.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Methods `evaluate` guards. Everything else passes after authentication.
pub(crate) fn is_guarded(method: &str) -> bool {
    matches!(
        method,
        "tools/call"
            | "resources/read"
            | "resources/subscribe"
            | "resources/unsubscribe"
            | "prompts/get"
            | "completion/complete"
            | "tasks/get"
            | "tasks/update"
            | "tasks/cancel"
            | "tasks/result"
    )
}

/// Hands the request to the inner service: the principal goes in, the token goes out.
pub(crate) fn admit(parts: &mut Parts, principal: Principal) {
    parts.headers.remove(header::AUTHORIZATION);
    parts.extensions.insert(principal);
}

async fn call<S, ReqBody, ResBody>(
    inner: &mut S,
    parts: Parts,
    body: ReqBody,
) -> Result<Response<GateBody<ResBody>>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
{
    let response = inner.call(Request::from_parts(parts, body)).await?;
    Ok(response.map(GateBody::inner))
}

fn local<B>(response: Response<Bytes>) -> Response<GateBody<B>> {
    response.map(GateBody::local)
}

fn protocol_error<B>(error: &ProtocolError) -> Response<GateBody<B>> {
    tracing::info!(target: "mcp_gate::request", status = error.status.as_u16(), code = error.code, message = %error.message, "request refused");
    local(json_rpc(error.status, error.to_json(), false))
}

/// Everything after authentication.
pub(crate) async fn after_authentication<S, ReqBody, ResBody>(
    gate: Gate,
    mut inner: S,
    mut parts: Parts,
    body: ReqBody,
    principal: Principal,
) -> Result<Response<GateBody<ResBody>>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    ReqBody: http_body::Body + From<Bytes>,
    ReqBody::Error: Into<BoxError>,
{
    admit(&mut parts, principal.clone());
    if parts.method != Method::POST {
        // GET (the SSE stream) and DELETE (end of session) carry no operation.
        return call(&mut inner, parts, body).await;
    }
    let settings = &gate.inner.mcp;
    let bytes = match read_body(
        &parts.headers,
        body,
        settings.max_body_bytes,
        settings.body_timeout,
    )
    .await
    {
        Ok(bytes) => bytes,
        Err(error) => return Ok(protocol_error(&error)),
    };
    let request = match classify(&bytes) {
        Err(error) => return Ok(protocol_error(&error)),
        Ok(Message::Notification | Message::Response) => {
            return call(&mut inner, parts, ReqBody::from(bytes)).await;
        }
        Ok(Message::Request(request)) => request,
    };
    let owner = (
        principal.issuer().to_owned(),
        principal.subject().map(str::to_owned),
    );
    let protocol = match protocol_context(&request, &parts.headers, &settings.sessions, &owner) {
        Ok(protocol) => protocol,
        Err(error) => return Ok(protocol_error(&error)),
    };
    if request.method == "initialize" {
        let response = call(&mut inner, parts, ReqBody::from(bytes)).await?;
        if let Some(session) = response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
        {
            settings.sessions.remember(session, owner, &request);
        }
        return Ok(response);
    }
    if !is_guarded(&request.method) {
        return call(&mut inner, parts, ReqBody::from(bytes)).await;
    }
    let evaluation = Evaluation::new(
        principal.clone(),
        request.method.clone(),
        request.target.clone(),
        protocol.clone(),
        Phase::Invocation,
    );
    let decision = policy::run(&*settings.policy, evaluation, settings.evaluate_timeout).await;
    match decision {
        Ok(Decision::Allow) => {
            log_decision(&principal, &request, "allow", None, None, None);
            call(&mut inner, parts, ReqBody::from(bytes)).await
        }
        Ok(Decision::Ask { message }) => Ok(deny(
            &gate,
            &principal,
            &request,
            &protocol,
            Denial::Ask(&message),
            "ask",
        )),
        Ok(Decision::Deny(remediation)) => match check_remediation(&remediation) {
            Ok(()) => Ok(deny(
                &gate,
                &principal,
                &request,
                &protocol,
                Denial::Deny(&remediation),
                "deny",
            )),
            Err(problem) => {
                tracing::error!(target: "mcp_gate::decision", method = %request.method, problem, "the policy returned an unusable remediation");
                Ok(internal_error(&request))
            }
        },
        Err(failure) => {
            tracing::error!(target: "mcp_gate::decision", method = %request.method, failure = failure.kind(), error = %failure, "the policy failed; refusing");
            Ok(internal_error(&request))
        }
    }
}

fn internal_error<B>(request: &McpRequest) -> Response<GateBody<B>> {
    let error = ProtocolError::new(
        StatusCode::OK,
        INTERNAL_ERROR,
        "internal error while authorizing the request",
    )
    .with_id(Some(&request.id));
    local(json_rpc(StatusCode::OK, error.to_json(), false))
}

/// Remediations the application built wrongly are internal errors, never sent half-formed.
fn check_remediation(remediation: &Remediation) -> Result<(), &'static str> {
    match remediation {
        Remediation::Scope { scopes } => {
            if scopes
                .iter()
                .all(|s| crate::auth::scope::is_valid_scope_token(s))
            {
                Ok(())
            } else {
                Err("a scope remediation names an invalid scope")
            }
        }
        Remediation::Credential {
            authorization_details,
            ..
        } => {
            let typed =
                |d: &serde_json::Value| d.get("type").is_some_and(serde_json::Value::is_string);
            if authorization_details.is_empty() || !authorization_details.iter().all(typed) {
                Err(
                    "a credential remediation needs authorization details, each an object with a string type",
                )
            } else {
                Ok(())
            }
        }
        _ => Ok(()),
    }
}

fn deny<B>(
    gate: &Gate,
    principal: &Principal,
    request: &McpRequest,
    protocol: &ProtocolContext,
    denial: Denial<'_>,
    decision: &'static str,
) -> Response<GateBody<B>> {
    let Ok(context_id) = new_context_id() else {
        tracing::error!(target: "mcp_gate::decision", method = %request.method, "no random source for a context id; refusing");
        return internal_error(request);
    };
    let settings = &gate.inner.mcp;
    let context = DenialContext {
        settings: &settings.denial,
        request,
        protocol,
        resource_metadata: &gate.inner.resource_metadata_url,
        endpoint_scopes: &gate.inner.authenticator.required_scopes,
        context_id: &context_id,
    };
    let remediation = match &denial {
        Denial::Deny(r) => Some(r.kind()),
        Denial::Ask(_) => None,
    };
    let rendered = context.render(denial);
    log_decision(
        principal,
        request,
        decision,
        remediation,
        Some(rendered.expressed_as),
        Some(&context_id),
    );
    local(rendered.response)
}

/// One structured event per decision. Never arguments, tokens or bodies.
fn log_decision(
    principal: &Principal,
    request: &McpRequest,
    decision: &'static str,
    remediation: Option<&'static str>,
    expressed_as: Option<&'static str>,
    context_id: Option<&str>,
) {
    tracing::info!(
        target: "mcp_gate::decision",
        context_id = context_id.unwrap_or(""),
        subject = principal.subject().unwrap_or(""),
        client_id = principal.client_id().unwrap_or(""),
        method = %request.method,
        target = request.target.name().unwrap_or(""),
        decision,
        remediation = remediation.unwrap_or(""),
        expressed_as = expressed_as.unwrap_or(""),
        "authorization decision"
    );
}
