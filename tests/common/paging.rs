//! An inner server that paginates: ten tools, `t0`..`t9`, three per page, its own cursors
//! `page-<n>`.

use axum::Router;
use axum::body::Bytes;
use serde_json::{Value, json};

/// The paginating inner server, on `/mcp`.
pub fn paginating_inner() -> Router {
    Router::new().route(
        "/mcp",
        axum::routing::post(|body: Bytes| async move {
            let message: Value = serde_json::from_slice(&body).unwrap();
            let start: usize = match message["params"]["cursor"].as_str() {
                Some(cursor) => cursor
                    .strip_prefix("page-")
                    .and_then(|n| n.parse().ok())
                    .expect("the inner cursor comes back"),
                None => 0,
            };
            let result = page_from(start);
            axum::Json(json!({"jsonrpc": "2.0", "id": message["id"], "result": result}))
        }),
    )
}

/// The `tools/list` result of the page that starts at tool `start`: three tools at most, and
/// the cursor of the next page while there is one.
pub fn page_from(start: usize) -> Value {
    let tools: Vec<Value> = (start..(start + 3).min(10))
        .map(|i| json!({"name": format!("t{i}"), "inputSchema": {"type": "object"}}))
        .collect();
    let mut result = json!({"tools": tools});
    if start + 3 < 10 {
        result["nextCursor"] = json!(format!("page-{}", start + 3));
    }
    result
}
