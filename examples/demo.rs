//! A scripted tour of every decision the layer can take, over loopback, in one process.
//!
//! It starts the example MCP server (rmcp) behind the layer with the example policy, the
//! embedded development issuer, and a plain HTTP client, then prints a short legend of what to
//! look for and each exchange: the request, the status line, any `WWW-Authenticate`
//! challenge, and the body, compacted (no `jsonrpc` member nor rmcp's `serverInfo`, long
//! opaque strings cut to `head…tail`, short objects on one line).
//!
//! ```text
//! cargo run --example demo
//! ```

#[path = "server/approvals.rs"]
mod approvals;
#[path = "../mcp-gate-server/src/dev_issuer.rs"]
mod dev_issuer;
#[path = "server/policy.rs"]
mod policy;
#[path = "../mcp-gate-server/src/signing_key.rs"]
#[allow(
    dead_code,
    reason = "the development issuer makes a key; it never reads one from a file"
)]
mod signing_key;
#[path = "server/tools.rs"]
mod tools;

use axum::Router;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use mcp_gate::Gate;
use serde_json::{Value, json};

struct Tour {
    http: reqwest::Client,
    mcp: String,
    token_endpoint: String,
    resource: String,
}

type Failure = Box<dyn std::error::Error>;

/// What the reader is about to see, printed before the first request.
const LEGEND: &str = "\
How to read this tour: `>` lines are what the client sends, `<` lines what it gets back.
Bodies are compact: `jsonrpc` and rmcp's `serverInfo` are left out, tokens show their first
characters, longer opaque strings (requestState, authorization_remediation) `head…tail`.

WWW-Authenticate   the OAuth challenge of a 401/403: the scope to ask for, the metadata
                   document (resource_metadata), the error (insufficient_scope, ...).
envelope           the SEP-2643 denial: result._meta[\"io.modelcontextprotocol/authorization\"]
                   in the result-based revisions (this tour), error.data.authorization in the
                   error-based one. Present only when the call did not run.
  reason           why the call was refused: insufficient_authorization.
  remediation      (result-based only) available (a remedy is described), unavailable
                   (do not retry), undisclosed (the server does not say whether one exists).
  remediationHints how to get access: authorization_remediation (a token for exactly this
                   operation), url (approve at a page), task (wait for an approver). A missing
                   scope is a 403 insufficient_scope challenge instead.
  authorizationContextId  names this denial; a retry may echo it under
                   params._meta[\"io.modelcontextprotocol/authorization-context-id\"].
resultType         (2026-07-28 clients) complete, input_required (answer the inputRequests
                   and retry) or task (the call is held: poll tasks/get).
requestState       the layer's signed state of an input_required round trip, sent back as is;
inputResponses     with the client's answers, under the inputRequests' `mcp-gate/...` keys.";

/// Members left out of printed bodies: the JSON-RPC version and rmcp's own server info.
const ELIDED: [&str; 2] = ["jsonrpc", "io.modelcontextprotocol/serverInfo"];

/// The width a printed body tries to fit (after its `> ` or `< `): an object or array that
/// fits stays on one line.
const WIDTH: usize = 94;

impl Tour {
    fn title(&self, text: &str) {
        println!("\n{}\n{text}\n{}", "=".repeat(78), "=".repeat(78));
    }

    async fn token(&self, scope: &str, details: Option<&Value>) -> Result<String, Failure> {
        let mut form = vec![
            ("grant_type", "client_credentials".to_owned()),
            ("scope", scope.to_owned()),
            ("resource", self.resource.clone()),
        ];
        if let Some(details) = details {
            form.push(("authorization_details", details.to_string()));
        }
        println!(
            "\n> POST {} (client_credentials, scope: {scope}{})",
            self.token_endpoint,
            if details.is_some() {
                ", with authorization_details"
            } else {
                ""
            }
        );
        let answer: Value = self
            .http
            .post(&self.token_endpoint)
            .basic_auth(dev_issuer::CLIENT_ID, Some(dev_issuer::CLIENT_SECRET))
            .form(&form)
            .send()
            .await?
            .json()
            .await?;
        let token = answer["access_token"]
            .as_str()
            .ok_or("no access_token")?
            .to_owned();
        println!(
            "< access token {}... (scope: {})",
            &token[..24.min(token.len())],
            answer["scope"].as_str().unwrap_or("none")
        );
        Ok(token)
    }

    /// Sends one JSON-RPC request and prints the exchange; returns status and body.
    async fn send(
        &self,
        token: Option<&str>,
        headers: &[(&str, &str)],
        body: Value,
    ) -> Result<(u16, Value), Failure> {
        println!("\n> POST {}", self.mcp);
        if let Some(token) = token {
            println!(
                "> Authorization: Bearer {}...",
                &token[..16.min(token.len())]
            );
        }
        for (name, value) in headers {
            println!("> {name}: {value}");
        }
        println!("{}", show(&body, "> "));
        let mut request = self
            .http
            .post(&self.mcp)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body.to_string());
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await?;
        let status = response.status();
        println!("< HTTP/1.1 {status}");
        if let Some(value) = response.headers().get("www-authenticate") {
            let value = value.to_str().unwrap_or("<binary>");
            println!("< www-authenticate: {}", shorten_quoted(value));
        }
        let text = response.text().await?;
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        println!("{}", show(&body, "< "));
        Ok((status.as_u16(), body))
    }
}

/// A body as the tour prints it: each line behind `prefix`, noise left out, opaque strings
/// shortened, and every object or array that fits the width on one line.
fn show(value: &Value, prefix: &str) -> String {
    let mut out = String::new();
    layout(&tidy(value), 0, 0, &mut out);
    indent(&out, prefix)
}

/// The value without the [`ELIDED`] members (nor a `_meta` left empty by them), its opaque
/// strings shortened.
fn tidy(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(key, _)| !ELIDED.contains(&key.as_str()))
                .map(|(key, value)| (key.clone(), tidy(value)))
                .filter(|(key, tidied)| {
                    !(key == "_meta" && tidied.as_object().is_some_and(|m| m.is_empty()))
                        || map[key.as_str()].as_object().is_some_and(|m| m.is_empty())
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(tidy).collect()),
        Value::String(text) => Value::String(shorten(text)),
        other => other.clone(),
    }
}

/// A long token-like string (base64url, dots, dashes) as `head…tail`; anything else as is.
fn shorten(text: &str) -> String {
    let opaque = text
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-_.=".contains(&b));
    if opaque && text.len() > 40 {
        format!("{}…{}", &text[..16], &text[text.len() - 8..])
    } else {
        text.to_owned()
    }
}

/// A header value with its quoted parameters [`shorten`]ed.
fn shorten_quoted(value: &str) -> String {
    value
        .split('"')
        .enumerate()
        .map(|(i, part)| {
            if i % 2 == 1 {
                shorten(part)
            } else {
                part.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\"")
}

/// Writes `value`, which starts at `column` of a line indented by `margin` spaces: on one
/// line if it fits [`WIDTH`], else one member a line.
fn layout(value: &Value, margin: usize, column: usize, out: &mut String) {
    let flat = value.to_string();
    let fits = column + flat.len() <= WIDTH;
    let (open, close, members): (char, char, Vec<(String, &Value)>) = match value {
        Value::Object(map) if !fits && !map.is_empty() => (
            '{',
            '}',
            map.iter()
                .map(|(key, value)| (format!("{}: ", Value::from(key.as_str())), value))
                .collect(),
        ),
        Value::Array(items) if !fits && !items.is_empty() => (
            '[',
            ']',
            items.iter().map(|item| (String::new(), item)).collect(),
        ),
        _ => {
            out.push_str(&flat);
            return;
        }
    };
    let inner = margin + 2;
    out.push(open);
    let count = members.len();
    for (i, (key, member)) in members.into_iter().enumerate() {
        out.push('\n');
        out.push_str(&" ".repeat(inner));
        out.push_str(&key);
        layout(member, inner, inner + key.len(), out);
        if i + 1 < count {
            out.push(',');
        }
    }
    out.push('\n');
    out.push_str(&" ".repeat(margin));
    out.push(close);
}

fn indent(text: &str, prefix: &str) -> String {
    text.lines()
        .map(|l| format!("{prefix}{l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn call(id: u64, tool: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": arguments}})
}

/// A modern (2026-07-28) `tools/call`: the version and capabilities travel in `_meta`.
fn modern_call(id: u64, tool: &str, arguments: Value, capabilities: &Value, extra: Value) -> Value {
    let mut message = call(id, tool, arguments);
    message["params"]["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    });
    if let (Some(params), Value::Object(extra)) = (message["params"].as_object_mut(), extra) {
        params.extend(extra);
    }
    message
}

/// The headers a modern request mirrors its body in.
fn modern_headers(tool: &'static str) -> [(&'static str, &'static str); 3] {
    [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", tool),
    ]
}

fn expect(what: &str, ok: bool) -> Result<(), Failure> {
    if ok {
        Ok(())
    } else {
        Err(format!("unexpected answer: {what}").into())
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    println!("{LEGEND}");
    // Bounded: the tour finishes by itself, or fails after a minute.
    let outcome = tokio::time::timeout(std::time::Duration::from_secs(60), tour())
        .await
        .unwrap_or_else(|_| Err("the tour did not finish within 60 s".into()));
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("demo failed: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn tour() -> Result<(), Failure> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let origin = format!("http://{}", listener.local_addr()?);
    let resource = format!("{origin}/mcp");
    let approvals = approvals::Approvals::default();
    let scopes = ["mcp:read", "mcp:write", "mcp:admin"]
        .map(String::from)
        .to_vec();
    let loopback = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    let issuer = dev_issuer::DevIssuer::start(loopback, &resource, scopes).await?;
    let gate = Gate::builder()
        .evaluate(policy::DemoPolicy::new(approvals.clone(), origin))
        .development_mode()
        .resource(&resource)
        .issuer(issuer.issuer.as_str())
        .required_scopes(["mcp:read"])
        .build()?;
    let app = Router::new()
        .nest_service("/mcp", tools::mcp_service())
        .layer(gate.layer())
        .merge(gate.metadata_router())
        .merge(approvals.router(gate.clone()));
    tokio::spawn(async move { axum::serve(listener, app).await });
    println!(
        "\nmcp-gate demo: MCP server {resource}, issuer {}\nSEP-2643 revision {} ({})",
        issuer.issuer,
        gate.revision(),
        gate.revision().summary()
    );

    let tour = Tour {
        http: reqwest::Client::new(),
        mcp: resource.clone(),
        token_endpoint: issuer.token_endpoint.clone(),
        resource,
    };

    tour.title("1. No token: a challenge pointing at the metadata, naming the scope to ask for");
    let (status, _) = tour
        .send(None, &[], call(1, "echo", json!({"text": "hello"})))
        .await?;
    expect("401 without a token", status == 401)?;

    tour.title("2. The Protected Resource Metadata document (served outside authentication)");
    println!("\n> GET {}", gate.metadata_url());
    let document: Value = tour
        .http
        .get(gate.metadata_url())
        .send()
        .await?
        .json()
        .await?;
    println!("{}", show(&document, "< "));

    tour.title("3. Allowed: echo, with a token for mcp:read");
    let token = tour.token("mcp:read", None).await?;
    let (status, body) = tour
        .send(Some(&token), &[], call(2, "echo", json!({"text": "hello"})))
        .await?;
    expect(
        "echo allowed",
        status == 200 && body["result"]["content"][0]["text"] == "hello",
    )?;

    tour.title("4. Scope step-up: admin_report needs mcp:admin; the 403 names every scope needed");
    let (status, _) = tour
        .send(Some(&token), &[], call(3, "admin_report", json!({})))
        .await?;
    expect("403 insufficient_scope", status == 403)?;
    let admin = tour.token("mcp:read mcp:admin", None).await?;
    let (status, _) = tour
        .send(Some(&admin), &[], call(4, "admin_report", json!({})))
        .await?;
    expect("admin_report allowed after the step-up", status == 200)?;

    tour.title(
        "5. unavailable: delete_everything is never allowed (a tool error with the envelope)",
    );
    let (_, body) = tour
        .send(Some(&token), &[], call(5, "delete_everything", json!({})))
        .await?;
    expect(
        "unavailable",
        body["result"]["_meta"]["io.modelcontextprotocol/authorization"]["remediation"]
            == "unavailable",
    )?;

    tour.title("6. undisclosed: secret_sauce, without saying how to get access");
    let (_, body) = tour
        .send(Some(&token), &[], call(6, "secret_sauce", json!({})))
        .await?;
    expect(
        "undisclosed",
        body["result"]["_meta"]["io.modelcontextprotocol/authorization"]["remediation"]
            == "undisclosed",
    )?;

    tour.title("7. The same denial to a modern (2026-07-28) client: resultType appears");
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    let mut modern = call(7, "secret_sauce", json!({}));
    modern["params"]["_meta"] = meta;
    let headers = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "secret_sauce"),
    ];
    let (_, body) = tour.send(Some(&token), &headers, modern).await?;
    expect("modern result", body["result"]["resultType"] == "complete")?;

    tour.title("8. Credential remedy: transfer needs a token for exactly this payment");
    let payment = json!({"amount": "40.00", "currency": "EUR", "iban": "DE00TEST"});
    let (status, body) = tour
        .send(Some(&token), &[], call(8, "transfer", payment.clone()))
        .await?;
    expect("401 insufficient_authorization", status == 401)?;
    let remedy: Value = serde_json::from_slice(
        &URL_SAFE_NO_PAD.decode(body["authorization_remediation"].as_str().unwrap_or(""))?,
    )?;
    println!(
        "\nauthorization_remediation, decoded (RFC 9396 details to ask the issuer for):\n{}",
        show(&remedy, "  ")
    );
    let paid = tour
        .token("mcp:read", Some(&remedy["authorization_details"]))
        .await?;
    let (status, _) = tour
        .send(Some(&paid), &[], call(9, "transfer", payment))
        .await?;
    expect(
        "transfer allowed with the payment credential",
        status == 200,
    )?;
    println!("\nThat token covers 40.00 EUR only; asking it for 400.00 is refused again:");
    let (status, _) = tour
        .send(
            Some(&paid),
            &[],
            call(
                10,
                "transfer",
                json!({"amount": "400.00", "currency": "EUR", "iban": "DE00TEST"}),
            ),
        )
        .await?;
    expect("400 EUR refused", status == 401)?;

    tour.title(
        "9. URL approval (modern client with URL elicitation): ask, approve at the page, retry",
    );
    let caps = json!({"elicitation": {"form": {}, "url": {}}});
    let share = modern_call(
        11,
        "share_folder",
        json!({"folder": "team-docs"}),
        &caps,
        json!({}),
    );
    let headers = modern_headers("share_folder");
    let (_, body) = tour.send(Some(&token), &headers, share).await?;
    let result = &body["result"];
    expect("input_required", result["resultType"] == "input_required")?;
    let url = result["inputRequests"]["mcp-gate/approval"]["params"]["url"]
        .as_str()
        .ok_or("no url")?
        .to_owned();
    let state = result["requestState"]
        .as_str()
        .ok_or("no state")?
        .to_owned();
    let context_id =
        result["_meta"]["io.modelcontextprotocol/authorization"]["authorizationContextId"]
            .as_str()
            .ok_or("no authorizationContextId")?
            .to_owned();
    println!("\n(the user opens {url} and approves, signed in as the same subject)");
    let approved = tour.http.post(&url).bearer_auth(&token).send().await?;
    println!(
        "< HTTP/1.1 {}: {}",
        approved.status(),
        approved.text().await?
    );
    let mut retry = modern_call(
        12,
        "share_folder",
        json!({"folder": "team-docs"}),
        &caps,
        json!({"requestState": state, "inputResponses": {"mcp-gate/approval": {"action": "accept"}}}),
    );
    // The retry echoes the denial's context id, for correlation only: the layer trusts the
    // signed requestState, never the echo.
    retry["params"]["_meta"]["io.modelcontextprotocol/authorization-context-id"] =
        json!(context_id);
    let (_, body) = tour.send(Some(&token), &headers, retry).await?;
    expect(
        "shared after approval",
        body["result"]["content"][0]["text"] == "shared folder team-docs",
    )?;

    tour.title("10. Confirmation (ask): the user confirms in the client, the call runs");
    let delete = modern_call(
        13,
        "delete_file",
        json!({"path": "notes.txt"}),
        &caps,
        json!({}),
    );
    let headers = modern_headers("delete_file");
    let (_, body) = tour.send(Some(&token), &headers, delete).await?;
    let state = body["result"]["requestState"]
        .as_str()
        .ok_or("no state")?
        .to_owned();
    let confirmed = modern_call(
        14,
        "delete_file",
        json!({"path": "notes.txt"}),
        &caps,
        json!({"requestState": state, "inputResponses": {"mcp-gate/confirm": {"action": "accept", "content": {"approve": true}}}}),
    );
    let (_, body) = tour.send(Some(&token), &headers, confirmed).await?;
    expect(
        "deleted after confirmation",
        body["result"]["content"][0]["text"] == "deleted notes.txt",
    )?;

    tour.title("11. Confirmation declined: a denial, and the tool never runs");
    let delete = modern_call(
        15,
        "delete_file",
        json!({"path": "notes.txt"}),
        &caps,
        json!({}),
    );
    let (_, body) = tour.send(Some(&token), &headers, delete).await?;
    let state = body["result"]["requestState"]
        .as_str()
        .ok_or("no state")?
        .to_owned();
    let declined = modern_call(
        16,
        "delete_file",
        json!({"path": "notes.txt"}),
        &caps,
        json!({"requestState": state, "inputResponses": {"mcp-gate/confirm": {"action": "decline"}}}),
    );
    let (_, body) = tour.send(Some(&token), &headers, declined).await?;
    expect(
        "undisclosed after decline",
        body["result"]["isError"] == true,
    )?;

    tour.title("12. Held for approval (task): the call waits, an approver decides, it runs once");
    let tasks_caps = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
    let deploy = modern_call(17, "deploy", json!({"env": "prod"}), &tasks_caps, json!({}));
    let (_, body) = tour
        .send(Some(&token), &modern_headers("deploy"), deploy)
        .await?;
    expect("a task", body["result"]["resultType"] == "task")?;
    let task_id = body["result"]["taskId"]
        .as_str()
        .ok_or("no task id")?
        .to_owned();
    let poll = |id: u64| {
        let mut message = json!({"jsonrpc": "2.0", "id": id, "method": "tasks/get", "params": {"taskId": task_id}});
        message["params"]["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": tasks_caps,
        });
        message
    };
    let poll_headers = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tasks/get"),
        ("mcp-name", task_id.as_str()),
    ];
    let (_, body) = tour.send(Some(&token), &poll_headers, poll(18)).await?;
    expect("still waiting", body["result"]["status"] == "working")?;
    println!(
        "\n(the release manager approves {task_id} on the approval console, which calls \
         gate.tasks().approve)"
    );
    gate.tasks().approve(&task_id, "release-manager").await?;
    let (_, body) = tour.send(Some(&token), &poll_headers, poll(19)).await?;
    expect(
        "deployed after approval",
        body["result"]["status"] == "completed"
            && body["result"]["result"]["content"][0]["text"]
                == "deployed to prod (deploy run #1 of this server)",
    )?;

    tour.title("13. Held and refused: the task completes with an unavailable result");
    let deploy = modern_call(20, "deploy", json!({"env": "prod"}), &tasks_caps, json!({}));
    let (_, body) = tour
        .send(Some(&token), &modern_headers("deploy"), deploy)
        .await?;
    let refused_id = body["result"]["taskId"]
        .as_str()
        .ok_or("no task id")?
        .to_owned();
    println!("\n(the release manager refuses {refused_id}: change freeze)");
    gate.tasks().refuse(&refused_id, "change freeze").await?;
    let mut message = poll(21);
    message["params"]["taskId"] = json!(refused_id);
    let refused_headers = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tasks/get"),
        ("mcp-name", refused_id.as_str()),
    ];
    let (_, body) = tour.send(Some(&token), &refused_headers, message).await?;
    expect(
        "refused",
        body["result"]["status"] == "completed" && body["result"]["result"]["isError"] == true,
    )?;

    println!("\nTour complete: every decision answered as expected.");
    Ok(())
}
