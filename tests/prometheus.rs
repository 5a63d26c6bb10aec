//! The decision counters as a real Prometheus sees them (feature `metrics`).
//!
//! The example's tools and policy run behind a gate on 127.0.0.1, with the `metrics` crate's
//! Prometheus recorder installed and its text served on `/metrics`. A real `prometheus`
//! (Debian's package, installed by `scripts/setup-peers.sh`) scrapes it every second while a
//! scripted run makes every kind of decision and refusal the demo policy and the layer know.
//! Prometheus's HTTP query API must then count, per phase, decision and remediation, exactly
//! the decision records (`mcp_gate::decision` events) of the run, and per reason exactly the
//! authentication refusals (`mcp_gate::auth` events).
//!
//! ```text
//! cargo test --features introspection,redis,metrics --test prometheus
//! ```
//!
//! Its own binary: it installs the global metrics recorder and the global tracing subscriber.

#![cfg(feature = "metrics")]

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use common::clients::demo_gate;
use common::peers::GatedServer;
use common::ports::free_port;
use common::tokens::{TestKey, claims};
use mcp_gate::{Issuer, StaticKeys};
use serde_json::{Value, json};
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};

const ISSUER: &str = "https://as.example";

/// Counted records: (target, label set) -> how many.
type Tally = Arc<Mutex<BTreeMap<(String, Vec<(String, String)>), u64>>>;

/// Counts the decision and authentication records, keyed as the metrics label them.
#[derive(Clone, Default)]
struct Records(Tally);

/// The fields of one event, as text.
#[derive(Default)]
struct Fields(BTreeMap<String, String>);

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().to_owned(), value.to_string());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Records {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        let target = event.metadata().target();
        let mut fields = Fields::default();
        event.record(&mut fields);
        let refused = fields
            .0
            .get("message")
            .is_some_and(|m| m == "request refused");
        let wanted: &[&str] = match target {
            "mcp_gate::auth" if !refused => return,
            "mcp_gate::decision" => &["phase", "decision", "remediation"],
            "mcp_gate::auth" => &["reason", "status"],
            _ => return,
        };
        // In label-name order, as Prometheus answers.
        let mut labels: Vec<(String, String)> = wanted
            .iter()
            .map(|name| {
                let value = fields
                    .0
                    .get(*name)
                    .cloned()
                    .unwrap_or_else(|| "none".into());
                (name.to_string(), value)
            })
            .collect();
        labels.sort();
        let mut tally = self.0.lock().expect("tally");
        *tally.entry((target.to_owned(), labels)).or_default() += 1;
    }
}

impl Records {
    /// An audit sink tallying each record as the metrics label it: decisions under
    /// `audit:decision`, authentication refusals under `audit:authentication`.
    fn audit_sink(&self) -> impl mcp_gate::audit::AuditSink {
        let tally = self.0.clone();
        move |record: &mcp_gate::audit::AuditRecord| {
            let json: Value = serde_json::from_str(&record.to_json()).expect("JSON");
            let data = &json["data"];
            let (target, wanted): (&str, &[&str]) = match json["type"].as_str() {
                Some("dev.mcp-gate.decision.v1") => {
                    ("audit:decision", &["phase", "decision", "remediation"])
                }
                _ => ("audit:authentication", &["refusal", "status"]),
            };
            let mut labels: Vec<(String, String)> = wanted
                .iter()
                .map(|name| {
                    let label = if *name == "refusal" { "reason" } else { name };
                    let value = match &data[*name] {
                        Value::String(text) => text.clone(),
                        Value::Null => "none".into(),
                        other => other.to_string(),
                    };
                    (label.to_owned(), value)
                })
                .collect();
            labels.sort();
            *tally
                .lock()
                .expect("tally")
                .entry((target.to_owned(), labels))
                .or_default() += 1;
        }
    }
}

/// A `prometheus` server on loopback scraping `target` every second, in a scratch folder.
struct Prometheus {
    child: tokio::process::Child,
    api: String,
    _dir: TempDir,
}

/// A scratch folder, removed on drop.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Prometheus {
    /// Starts one, or `None` (said on stderr) when `prometheus` is not installed.
    async fn start(target: &str) -> Option<Self> {
        if std::process::Command::new("prometheus")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_err()
        {
            let reason = "prometheus is not installed (scripts/setup-peers.sh installs it)";
            assert!(std::env::var_os("CI").is_none(), "CI is set and {reason}");
            eprintln!("skipping the Prometheus test: {reason}");
            return None;
        }
        let dir = std::env::temp_dir().join(format!("mcp-gate-prometheus-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("scratch folder");
        let config = dir.join("prometheus.yml");
        let scrape = format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: gate\n    \
             static_configs:\n      - targets: ['{target}']\n"
        );
        std::fs::write(&config, scrape).expect("config");
        let port = free_port();
        let child = tokio::process::Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("prometheus starts");
        let prometheus = Self {
            child,
            api: format!("http://127.0.0.1:{port}"),
            _dir: TempDir(dir),
        };
        for _ in 0..300 {
            let ready = reqwest::get(format!("{}/-/ready", prometheus.api)).await;
            if ready.is_ok_and(|r| r.status().is_success()) {
                return Some(prometheus);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("prometheus did not get ready in 30 s");
    }

    /// The instant vector of `query`: each series' labels (without `__name__`, `job` and
    /// `instance`) and value.
    async fn query(&self, query: &str) -> BTreeMap<Vec<(String, String)>, u64> {
        let url = format!("{}/api/v1/query", self.api);
        // The query API takes its parameters as a form too.
        let answer: Value = reqwest::Client::new()
            .post(url)
            .form(&[("query", query)])
            .send()
            .await
            .expect("query")
            .json()
            .await
            .expect("query JSON");
        assert_eq!(answer["status"], "success", "{answer}");
        let mut series = BTreeMap::new();
        for sample in answer["data"]["result"].as_array().expect("a vector") {
            let labels = sample["metric"]
                .as_object()
                .expect("labels")
                .iter()
                .filter(|(name, _)| !matches!(name.as_str(), "__name__" | "job" | "instance"))
                .map(|(name, value)| (name.clone(), value.as_str().expect("a label").to_owned()))
                .collect();
            let value: f64 = sample["value"][1]
                .as_str()
                .and_then(|v| v.parse().ok())
                .expect("a sample value");
            series.insert(labels, value as u64);
        }
        series
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

/// A legacy `tools/call` body.
fn call(tool: &str, arguments: Value) -> String {
    json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
           "params": {"name": tool, "arguments": arguments}})
    .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_counts_what_the_decision_records_say() {
    let records = Records::default();
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(records.clone()))
        .expect("the only subscriber");
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let series_of = handle.clone();
    metrics::set_global_recorder(recorder).expect("the only recorder");

    let audit = records.audit_sink();
    let key = TestKey::es256("prometheus");
    let keys = StaticKeys::from_jwks_json(&key.jwks_json()).expect("keys");
    let server = GatedServer::start_full(
        |resource| {
            demo_gate(resource)
                .audit(audit)
                .issuer(Issuer::with_keys(ISSUER, keys))
                .required_scopes(["mcp:read"])
                .development_mode()
        },
        Router::new().nest_service("/mcp", common::tools::mcp_service()),
        move |_| Router::new().route("/metrics", get(move || async move { handle.render() })),
    )
    .await;
    let origin = server.url.trim_end_matches("/mcp").to_owned();
    let Some(prometheus) = Prometheus::start(origin.trim_start_matches("http://")).await else {
        return;
    };

    // The scripted run: every decision the demo policy makes on a tool call, a listing (one
    // discovery decision per listed tool), and the refusals authentication makes.
    let token = key.mint(&claims(ISSUER, &server.url, "mcp:read"));
    let calls = [
        ("echo", json!({"text": "allowed"})),
        ("admin_report", json!({})),
        ("delete_everything", json!({})),
        ("secret_sauce", json!({})),
        (
            "transfer",
            json!({"amount": "40.00", "currency": "EUR", "iban": "DE00TEST"}),
        ),
        ("share_folder", json!({"folder": "reports"})),
        ("delete_file", json!({"path": "notes.txt"})),
    ];
    for (tool, arguments) in calls {
        let reply = server.post(Some(&token), &[], &call(tool, arguments)).await;
        assert!(reply.status < 500, "{tool}: {reply:?}");
    }
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).to_string();
    assert_eq!(server.post(Some(&token), &[], &list).await.status, 200);
    let echo = call("echo", json!({"text": "x"}));
    let stranger = TestKey::es256("stranger").mint(&claims(ISSUER, &server.url, "mcp:read"));
    let elsewhere = key.mint(&claims(ISSUER, "https://elsewhere.example/mcp", "mcp:read"));
    let narrow = key.mint(&claims(ISSUER, &server.url, "profile"));
    for bearer in [
        None,
        Some("not-a-jwt"),
        Some(&*stranger),
        Some(&*elsewhere),
        Some(&*narrow),
    ] {
        let reply = server.post(bearer, &[], &echo).await;
        assert!(matches!(reply.status, 401 | 403), "{reply:?}");
    }

    let expected = records.0.lock().expect("tally").clone();
    let by_target = |target: &str| -> BTreeMap<Vec<(String, String)>, u64> {
        expected
            .iter()
            .filter(|((t, _), _)| t == target)
            .map(|((_, labels), n)| (labels.clone(), *n))
            .collect()
    };
    let decisions = by_target("audit:decision");
    let refusals = by_target("audit:authentication");
    assert_eq!(
        decisions,
        by_target("mcp_gate::decision"),
        "the audit records and the decision log say the same"
    );
    assert_eq!(
        refusals,
        by_target("mcp_gate::auth"),
        "the audit records and the authentication log say the same"
    );
    let kinds: std::collections::BTreeSet<&str> = decisions
        .keys()
        .flat_map(|labels| labels.iter().filter(|(n, _)| n == "remediation"))
        .map(|(_, v)| v.as_str())
        .collect();
    for kind in [
        "none",
        "scope",
        "credential",
        "url",
        "unavailable",
        "undisclosed",
    ] {
        assert!(
            kinds.contains(kind),
            "the run decided {kinds:?}, not {kind}"
        );
    }
    assert!(
        refusals.len() >= 4,
        "refusal reasons of the run: {refusals:?}"
    );

    // Scraped once a second: wait (30 s at most) until Prometheus holds the run's totals.
    let decisions_query = "sum by (phase, decision, remediation) (mcp_gate_decisions_total)";
    let refusals_query = "sum by (reason, status) (mcp_gate_auth_refusals_total)";
    let mut seen = (BTreeMap::new(), BTreeMap::new());
    for _ in 0..60 {
        seen = (
            prometheus.query(decisions_query).await,
            prometheus.query(refusals_query).await,
        );
        if seen == (decisions.clone(), refusals.clone()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(seen.0, decisions, "decisions: Prometheus vs the records");
    assert_eq!(
        seen.1, refusals,
        "authentication refusals: Prometheus vs the records"
    );

    // Cardinality: what callers choose is never a label. A flood of calls to tools nobody
    // lists, from distinct subjects, leaves no trace of a subject or a tool name in any
    // series, and a second flood twice as wide adds no series: the count is bounded by the
    // closed label sets (`docs/operations.md`), not by what callers send. The width is
    // `MCP_GATE_FLOOD` (200 by default; the closing note's figure is from 10,000).
    let width: usize = std::env::var("MCP_GATE_FLOOD")
        .ok()
        .and_then(|w| w.parse().ok())
        .unwrap_or(200);
    let count_series = || {
        let text = series_of.render();
        let series: Vec<String> = text
            .lines()
            .filter(|line| !line.is_empty() && !line.starts_with('#'))
            .map(|line| {
                line.rsplit_once(' ')
                    .map_or(line, |(name, _)| name)
                    .to_owned()
            })
            .collect();
        for line in &series {
            assert!(
                !line.contains("subject-") && !line.contains("unknown-tool-"),
                "a caller's words in a label: {line}"
            );
        }
        series.len()
    };
    flood(&server, &key, width / 2, width / 2, 0).await;
    let after_first = count_series();
    flood(&server, &key, width, width, width).await;
    let after_second = count_series();
    eprintln!(
        "series: {after_first} after {} subjects and tools, {after_second} after {width} more",
        width / 2
    );
    assert_eq!(after_first, after_second, "{}", series_of.render());
}

/// `tools` calls of tools nobody lists (a distinct name each), spread over `subjects`
/// distinct subjects, one after another.
/// Names are numbered from `first`, so that each flood's are new.
async fn flood(server: &GatedServer, key: &TestKey, subjects: usize, tools: usize, first: usize) {
    let tokens: Vec<String> = (0..subjects)
        .map(|n| {
            let mut subject = claims(ISSUER, &server.url, "mcp:read");
            subject["sub"] = json!(format!("subject-{}", first + n));
            // Valid for the whole flood: a wide one outlives the usual five minutes, and an
            // expired token is a label set (`expired`) of its own.
            subject["exp"] = subject["iat"]
                .as_u64()
                .map_or(json!(0), |iat| json!(iat + 7200));
            key.mint(&subject)
        })
        .collect();
    for n in 0..tools.max(subjects) {
        let body = call(&format!("unknown-tool-{}", first + n), json!({}));
        let reply = server.post(Some(&tokens[n % subjects]), &[], &body).await;
        assert!(reply.status < 500, "{reply:?}");
    }
}
