//! Metric keys made once per label set and kept (feature `metrics`).
//!
//! The `metrics` macros put a key's labels in a new list at every count unless every label is
//! a literal, and the gate counts on every request. Its labels are the crate's own words
//! (closed sets) and the names of listed tools, so the label sets a process can meet are
//! bounded: each is made the first time it is met, kept for the life of the process, and
//! every later count reuses it without allocating.
//!
//! Both bounds are hard: at most [`MAX_KEYS`] keys per metric (a set met after that is made
//! for the one count, as the macros would), and at most [`MAX_TOOL_NAMES`] tool names (later
//! names count as `other`, which a listed name that the inner server stops listing would too).

use std::collections::{HashMap, HashSet};
use std::sync::{LazyLock, PoisonError, RwLock};

use metrics::{Counter, Histogram, Key, Label, Level, Metadata};

/// The most keys kept per metric.
pub(crate) const MAX_KEYS: usize = 4_096;

/// The most tool names kept as labels.
pub(crate) const MAX_TOOL_NAMES: usize = 1_024;

/// What the gate's metrics say of where they come from.
static METADATA: Metadata<'static> =
    Metadata::new("mcp_gate::metrics", Level::INFO, Some(module_path!()));

/// The keys of one metric, by the values of its `N` labels.
pub(crate) struct Keys<const N: usize> {
    name: &'static str,
    labels: [&'static str; N],
    made: LazyLock<RwLock<HashMap<[&'static str; N], &'static Key>>>,
}

impl<const N: usize> Keys<N> {
    /// The keys of the metric `name` with the labels named `labels`, none made yet.
    pub(crate) const fn new(name: &'static str, labels: [&'static str; N]) -> Self {
        Self {
            name,
            labels,
            made: LazyLock::new(|| RwLock::new(HashMap::new())),
        }
    }

    /// The counter with the label values `values`, from the installed recorder.
    pub(crate) fn counter(&self, values: [&'static str; N]) -> Counter {
        self.with(values, |key| {
            metrics::with_recorder(|recorder| recorder.register_counter(key, &METADATA))
        })
    }

    /// The histogram with the label values `values`, from the installed recorder.
    pub(crate) fn histogram(&self, values: [&'static str; N]) -> Histogram {
        self.with(values, |key| {
            metrics::with_recorder(|recorder| recorder.register_histogram(key, &METADATA))
        })
    }

    /// Calls `use_key` with the key of `values`: the kept one, else one made now (and kept
    /// while there is room).
    fn with<T>(&self, values: [&'static str; N], use_key: impl FnOnce(&Key) -> T) -> T {
        let kept = self
            .made
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&values)
            .copied();
        if let Some(key) = kept {
            return use_key(key);
        }
        let labels: Vec<Label> = self
            .labels
            .iter()
            .zip(values)
            .map(|(name, value)| Label::from_static_parts(name, value))
            .collect();
        let key = Key::from_parts(self.name, labels);
        let mut made = self.made.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(kept) = made.get(&values) {
            return use_key(kept);
        }
        if made.len() >= MAX_KEYS {
            drop(made);
            return use_key(&key);
        }
        // Kept for the life of the process: at most MAX_KEYS per metric, by the bound above.
        let kept: &'static Key = Box::leak(Box::new(key));
        made.insert(values, kept);
        use_key(kept)
    }
}

/// The names of listed tools met as labels, each kept once.
static TOOL_NAMES: LazyLock<RwLock<HashSet<&'static str>>> =
    LazyLock::new(|| RwLock::new(HashSet::new()));

/// `name` as a label that lives as long as the process: the kept copy, a new one while there
/// is room, else `other`.
pub(crate) fn tool_name(name: &str) -> &'static str {
    let kept = TOOL_NAMES
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .get(name)
        .copied();
    if let Some(kept) = kept {
        return kept;
    }
    let mut names = TOOL_NAMES.write().unwrap_or_else(PoisonError::into_inner);
    if let Some(kept) = names.get(name) {
        return kept;
    }
    if names.len() >= MAX_TOOL_NAMES {
        return "other";
    }
    // Kept for the life of the process: at most MAX_TOOL_NAMES, by the bound above.
    let kept: &'static str = Box::leak(name.to_owned().into_boxed_str());
    names.insert(kept);
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_label_set_is_made_once() {
        static KEYS: Keys<2> = Keys::new("test_total", ["a", "b"]);
        let first = KEYS.with(["x", "y"], std::ptr::from_ref);
        let again = KEYS.with(["x", "y"], std::ptr::from_ref);
        let other = KEYS.with(["x", "z"], std::ptr::from_ref);
        assert_eq!(first, again);
        assert_ne!(first, other);
        KEYS.with(["x", "z"], |key| {
            let labels: Vec<(&str, &str)> = key.labels().map(|l| (l.key(), l.value())).collect();
            assert_eq!(key.name(), "test_total");
            assert_eq!(labels, [("a", "x"), ("b", "z")]);
        });
    }

    #[test]
    fn past_the_bound_a_key_is_made_for_the_one_count() {
        static KEYS: Keys<1> = Keys::new("bounded_total", ["n"]);
        let values: Vec<&'static str> = (0..=MAX_KEYS)
            .map(|n| &*Box::leak(n.to_string().into_boxed_str()))
            .collect();
        for value in &values {
            KEYS.with([value], |_| ());
        }
        let kept = KEYS
            .made
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .len();
        assert_eq!(kept, MAX_KEYS);
        // The one past the bound is still counted, under its own labels.
        let last = values[MAX_KEYS];
        KEYS.with([last], |key| {
            assert_eq!(key.labels().next().map(Label::value), Some(last));
        });
    }

    #[test]
    fn tool_names_are_kept_once() {
        let name = String::from("a-listed-tool");
        let first = tool_name(&name);
        let again = tool_name("a-listed-tool");
        assert_eq!(first, "a-listed-tool");
        assert!(std::ptr::eq(first, again));
    }
}
