//! What the inner server said about its tools: the `annotations` and `inputSchema` of each
//! tool in the last `tools/list` answer that passed through the layer, kept for `evaluate`
//! ([`Evaluation::tool_annotations`](crate::policy::Evaluation::tool_annotations),
//! [`Evaluation::tool_input_schema`](crate::policy::Evaluation::tool_input_schema)).
//!
//! Looked up on every `tools/call`, so it is a plain map behind a read-write lock rather than a
//! cache with admission and eviction bookkeeping. Bounded: once it holds `capacity` tool names,
//! new names are not remembered (known names are still updated). The annotations are the
//! server's hints, never facts.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use serde_json::Value;

use crate::deadline::OncePer;

/// What one `tools/list` entry said of its tool, beside the name.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct ListedTool {
    /// The entry's `annotations` (an empty object for an entry that has none).
    pub annotations: Value,
    /// The entry's `inputSchema`, as listed.
    pub input_schema: Option<Value>,
}

impl ListedTool {
    /// Reads one `tools/list` entry.
    pub fn from_entry(entry: &Value) -> Self {
        Self::from_parts(
            entry.get("annotations").cloned(),
            entry.get("inputSchema").cloned(),
        )
    }

    /// What an entry said, from its `annotations` and `inputSchema` members as read (an
    /// `annotations` that is not an object counts as none).
    pub fn from_parts(annotations: Option<Value>, input_schema: Option<Value>) -> Self {
        Self {
            annotations: annotations
                .filter(Value::is_object)
                .unwrap_or_else(|| Value::Object(Default::default())),
            input_schema,
        }
    }
}

/// Listed tools by name.
pub(crate) struct ToolAnnotations {
    by_name: RwLock<HashMap<String, Arc<ListedTool>>>,
    capacity: usize,
    /// The layer lists the tools itself at most once per ten seconds.
    learn: OncePer,
    /// One listing at a time: callers that meet an unknown tool meanwhile wait for it.
    pub learning: tokio::sync::Mutex<()>,
}

/// How often, at most, the layer lists the inner server's tools itself.
const LEARN_INTERVAL_MS: u64 = 10_000;

impl ToolAnnotations {
    /// Remembers at most `capacity` tool names.
    pub fn new(capacity: usize) -> Self {
        Self {
            by_name: RwLock::new(HashMap::new()),
            capacity,
            learn: OncePer::new(Duration::from_millis(LEARN_INTERVAL_MS)),
            learning: tokio::sync::Mutex::new(()),
        }
    }

    /// Whether this caller should list the tools now: at most once per ten seconds per
    /// process, so a tool the server never lists costs at most that, however often it is
    /// called.
    pub fn may_learn(&self) -> bool {
        self.learn.try_now()
    }

    /// What the last list said of `name`.
    pub fn get(&self, name: &str) -> Option<Arc<ListedTool>> {
        let by_name = self.by_name.read().unwrap_or_else(PoisonError::into_inner);
        by_name.get(name).cloned()
    }

    /// Whether the last list named `name`.
    pub fn contains(&self, name: &str) -> bool {
        let by_name = self.by_name.read().unwrap_or_else(PoisonError::into_inner);
        by_name.contains_key(name)
    }

    /// Records what a list said of `name`.
    pub fn remember(&self, name: &str, annotations: Arc<ListedTool>) {
        let mut by_name = self.by_name.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(known) = by_name.get_mut(name) {
            *known = annotations;
        } else if by_name.len() < self.capacity {
            by_name.insert(name.to_owned(), annotations);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_and_updated() {
        let annotations = ToolAnnotations::new(2);
        let hint = |destructive: bool| {
            let entry = serde_json::json!({"annotations": {"destructiveHint": destructive}});
            Arc::new(ListedTool::from_entry(&entry))
        };
        annotations.remember("a", hint(false));
        annotations.remember("b", hint(false));
        annotations.remember("c", hint(true));
        assert!(
            annotations.get("c").is_none(),
            "over capacity: not remembered"
        );
        annotations.remember("a", hint(true));
        assert_eq!(
            annotations.get("a"),
            Some(hint(true)),
            "a known name is updated"
        );
        assert_eq!(annotations.get("b"), Some(hint(false)));
    }
}
