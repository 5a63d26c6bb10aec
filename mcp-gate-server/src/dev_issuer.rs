//! A development OAuth issuer, embedded in the example server and in the gateway
//! (`[development-issuer]`) so that either runs with no other process. One file, compiled into
//! both (the example includes it with `#[path]`).
//!
//! It generates a fresh ES256 key at start, publishes it as a JWK set, answers RFC 8414 and
//! OpenID discovery, and issues RFC 9068 JWT access tokens through the `client_credentials`
//! grant for one fixed client. It binds loopback only and is for development: never use it to
//! protect real data.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::{Form, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine;
use jsonwebtoken::{Algorithm, Header};
use serde::Deserialize;
use serde_json::{Value, json};

/// The development client's credentials.
pub const CLIENT_ID: &str = "dev-client";
/// The development client's secret.
pub const CLIENT_SECRET: &str = "dev-secret";

/// A running development issuer.
pub struct DevIssuer {
    /// The issuer identifier (`http://` and the address it listens on).
    pub issuer: String,
    /// The token endpoint.
    pub token_endpoint: String,
}

struct IssuerState {
    issuer: String,
    default_resource: String,
    scopes: Vec<String>,
    key: crate::signing_key::SigningKey,
    jwks: Value,
}

impl DevIssuer {
    /// Starts the issuer on `listen`, a loopback address (port 0 picks a free port); any other
    /// address is refused. Tokens requested without a `resource` parameter are issued for
    /// `default_resource`.
    pub async fn start(
        listen: SocketAddr,
        default_resource: &str,
        scopes: Vec<String>,
    ) -> std::io::Result<Self> {
        if !listen.ip().is_loopback() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "the development issuer listens on loopback only, not {listen}: it gives a \
                     token to anyone who knows its fixed client secret"
                ),
            ));
        }
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .map_err(|error| {
                std::io::Error::new(
                    error.kind(),
                    format!("the development issuer cannot listen on {listen}: {error}"),
                )
            })?;
        let issuer = format!("http://{}", listener.local_addr()?);
        let key = crate::signing_key::SigningKey::generate().map_err(std::io::Error::other)?;
        let jwks = serde_json::to_value(key.jwks()).map_err(std::io::Error::other)?;
        let state = Arc::new(IssuerState {
            issuer: issuer.clone(),
            default_resource: default_resource.to_owned(),
            scopes,
            key,
            jwks,
        });
        let app = Router::new()
            .route("/.well-known/oauth-authorization-server", get(metadata))
            .route("/.well-known/openid-configuration", get(metadata))
            .route("/jwks", get(serve_jwks))
            .route("/token", post(token))
            .route("/authorize", get(authorize))
            .with_state(state);
        tokio::spawn(async move {
            if let Err(error) = axum::serve(listener, app).await {
                eprintln!("development issuer stopped: {error}");
            }
        });
        Ok(Self {
            token_endpoint: format!("{issuer}/token"),
            issuer,
        })
    }
}

async fn metadata(State(state): State<Arc<IssuerState>>) -> Json<Value> {
    Json(json!({
        "issuer": state.issuer,
        // RFC 8414 requires an authorization endpoint whenever a grant could use one, and
        // some clients (the MCP Python SDK) refuse metadata without it. This issuer serves only
        // `client_credentials`, so the endpoint exists only to say so.
        "authorization_endpoint": format!("{}/authorize", state.issuer),
        "token_endpoint": format!("{}/token", state.issuer),
        "jwks_uri": format!("{}/jwks", state.issuer),
        "grant_types_supported": ["client_credentials"],
        "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
        "response_types_supported": [],
        "scopes_supported": state.scopes,
    }))
}

async fn authorize() -> Response {
    oauth_error(
        StatusCode::BAD_REQUEST,
        "unsupported_response_type",
        "this development issuer serves only the client_credentials grant",
    )
}

async fn serve_jwks(State(state): State<Arc<IssuerState>>) -> Json<Value> {
    Json(state.jwks.clone())
}

#[derive(Deserialize)]
struct TokenRequest {
    grant_type: Option<String>,
    client_id: Option<String>,
    client_secret: Option<String>,
    scope: Option<String>,
    resource: Option<String>,
    authorization_details: Option<String>,
}

fn oauth_error(status: StatusCode, error: &str, description: &str) -> Response {
    (
        status,
        [(header::CACHE_CONTROL, "no-store")],
        Json(json!({"error": error, "error_description": description})),
    )
        .into_response()
}

/// The client named by HTTP Basic or by the form, if its secret is right.
fn authenticated_client(headers: &HeaderMap, form: &TokenRequest) -> Option<String> {
    let basic = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Basic "))
        .and_then(|b64| base64::engine::general_purpose::STANDARD.decode(b64).ok())
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .and_then(|pair| {
            pair.split_once(':')
                .map(|(id, secret)| (id.to_owned(), secret.to_owned()))
        });
    let (id, secret) = match basic {
        Some(pair) => pair,
        None => (form.client_id.clone()?, form.client_secret.clone()?),
    };
    (id == CLIENT_ID && secret == CLIENT_SECRET).then_some(id)
}

async fn token(
    State(state): State<Arc<IssuerState>>,
    headers: HeaderMap,
    Form(form): Form<TokenRequest>,
) -> Response {
    let Some(client_id) = authenticated_client(&headers, &form) else {
        return oauth_error(
            StatusCode::UNAUTHORIZED,
            "invalid_client",
            "unknown client or wrong secret",
        );
    };
    if form.grant_type.as_deref() != Some("client_credentials") {
        return oauth_error(
            StatusCode::BAD_REQUEST,
            "unsupported_grant_type",
            "only client_credentials",
        );
    }
    let requested: Vec<String> = match form.scope.as_deref() {
        Some(scope) => scope
            .split(' ')
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect(),
        None => state.scopes.clone(),
    };
    if let Some(unknown) = requested.iter().find(|s| !state.scopes.contains(s)) {
        return oauth_error(
            StatusCode::BAD_REQUEST,
            "invalid_scope",
            &format!("unknown scope {unknown}"),
        );
    }
    // RFC 9396: a JSON array of objects, each with a string `type`, copied into the token.
    let details = match form
        .authorization_details
        .as_deref()
        .map(serde_json::from_str::<Value>)
    {
        None => None,
        Some(Ok(Value::Array(items)))
            if items
                .iter()
                .all(|d| d.get("type").is_some_and(Value::is_string)) =>
        {
            Some(Value::Array(items))
        }
        Some(_) => {
            return oauth_error(
                StatusCode::BAD_REQUEST,
                "invalid_authorization_details",
                "authorization_details must be a JSON array of objects with a type",
            );
        }
    };
    let resource = form
        .resource
        .clone()
        .unwrap_or_else(|| state.default_resource.clone());
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let scope = requested.join(" ");
    let mut claims = json!({
        "iss": state.issuer,
        "sub": client_id,
        "client_id": client_id,
        "aud": resource,
        "iat": now,
        "exp": now + 3600,
        "scope": scope,
        "jti": format!("{now}-{}", rand_suffix()),
    });
    if let Some(details) = details {
        claims["authorization_details"] = details;
    }
    let mut header = Header::new(Algorithm::ES256);
    header.typ = Some("at+jwt".into());
    header.kid = Some(state.key.kid().to_owned());
    match jsonwebtoken::encode(&header, &claims, state.key.encoding()) {
        Ok(access_token) => (
            [(header::CACHE_CONTROL, "no-store")],
            Json(json!({"access_token": access_token, "token_type": "Bearer", "expires_in": 3600, "scope": scope})),
        )
            .into_response(),
        Err(error) => oauth_error(StatusCode::INTERNAL_SERVER_ERROR, "server_error", &error.to_string()),
    }
}

fn rand_suffix() -> String {
    let mut bytes = [0u8; 8];
    let _ = getrandom::fill(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
