//! Context validation once per shape: a request's context is checked against its action's
//! context type by Cedar the first time its *shape* is seen, and a context of a shape the
//! schema already accepted for that action is not checked again.
//!
//! **Why that keeps Cedar's guarantee.** `Request::new` with a schema runs two checks: the scope
//! (principal, action, resource types; asked of Cedar on every request, see
//! `evaluate::cedar_request`) and the context. The context check (Cedar 4's
//! `validate_context`) does two things, and each depends on the context's shape alone:
//!
//! - it checks the entity uids the context holds (enum ids, declared actions): the layer puts
//!   none there (its values are strings, booleans, longs, decimals, sets and records; see
//!   [`super::values`]), so this part never refuses;
//! - it typechecks the value against the action's context type, walking both: a string
//!   against `String`, a long against `Long`, a boolean against `Bool` (or `True`/`False`), a
//!   `decimal(…)` call against the extension type (by the function's name and its argument's
//!   type), each member of a set against the element type, and a record's attribute names
//!   (extra ones refused by a closed record, required ones needed) and each attribute against
//!   its type. Which string, which long, how many times the same member shape repeats in a
//!   set: none of it changes the outcome.
//!
//! A [`Shape`] writes down exactly what the typecheck reads: the kind of every value, a
//! boolean's value (so even a `True` type is judged right), every record key with its length,
//! and each member's shape of a set (a member shaped like the one before it is written once).
//! Two contexts with the same written shape typecheck alike, so the verdict for one is the
//! verdict for the other. Only acceptances are kept, keyed by the action's id and the shape;
//! a context never seen is checked by Cedar, as before; a refused one is refused every time.
//!
//! The store is bounded ([`SHAPES_KEPT`] shapes of at most [`MAX_SHAPE`] bytes each) and
//! belongs to the loaded set (a reload starts empty, so a changed schema is asked afresh).
//! When it is full, the least recently used shape is forgotten: a caller who sends many
//! shapes makes others' contexts be checked by Cedar again, never refused. Shapes hold
//! attribute names a request chose; they are never logged.

use std::ops::Range;

/// How many accepted shapes a loaded set keeps.
pub(super) const SHAPES_KEPT: usize = 1024;

/// The longest shape kept, in bytes; a longer one is checked by Cedar every time.
pub(super) const MAX_SHAPE: usize = 2048;

/// The shape of one value, or of a whole context, as it is written.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct Shape(Vec<u8>);

/// Where a set's members are written; see [`Shape::member`].
#[derive(Debug, Default)]
pub(super) struct Members {
    previous: Option<Range<usize>>,
}

impl Shape {
    /// An empty shape, with room for a small context.
    pub fn new() -> Self {
        Self(Vec::with_capacity(128))
    }

    /// A string.
    pub fn string(&mut self) {
        self.0.push(b's');
    }

    /// A long.
    pub fn long(&mut self) {
        self.0.push(b'l');
    }

    /// A decimal.
    pub fn decimal(&mut self) {
        self.0.push(b'd');
    }

    /// A boolean, with its value.
    pub fn bool(&mut self, flag: bool) {
        self.0.push(if flag { b't' } else { b'f' });
    }

    /// The start of a set; each member follows, closed by [`Shape::member`].
    pub fn open_set(&mut self) -> Members {
        self.0.push(b'[');
        Members::default()
    }

    /// The position where the next member's shape starts (pass it to [`Shape::member`]).
    pub fn mark(&self) -> usize {
        self.0.len()
    }

    /// Ends a member that started at `start`: one shaped like the member before it is
    /// dropped (a set's typecheck reads each member alone, so a repeat adds nothing).
    pub fn member(&mut self, members: &mut Members, start: usize) {
        let end = self.0.len();
        if let Some(previous) = &members.previous
            && self.0[previous.clone()] == self.0[start..end]
        {
            self.0.truncate(start);
            return;
        }
        members.previous = Some(start..end);
    }

    /// The end of a set.
    pub fn close_set(&mut self) {
        self.0.push(b']');
    }

    /// The start of a record.
    pub fn open_record(&mut self) {
        self.0.push(b'{');
    }

    /// A record's key; its value's shape follows.
    pub fn key(&mut self, key: &str) {
        self.0.extend_from_slice(&(key.len() as u64).to_le_bytes());
        self.0.extend_from_slice(key.as_bytes());
    }

    /// The end of a record.
    pub fn close_record(&mut self) {
        self.0.push(b'}');
    }
}

/// The shapes the schema accepted, by action: see the module's doc.
pub(super) struct AcceptedShapes(quick_cache::sync::Cache<Vec<u8>, ()>);

impl AcceptedShapes {
    /// An empty store of [`SHAPES_KEPT`] shapes.
    pub fn new() -> Self {
        Self(quick_cache::sync::Cache::new(SHAPES_KEPT))
    }

    /// The key of `shape` for the action with id `action`, when it is short enough to keep.
    fn key(action: &str, shape: &Shape) -> Option<Vec<u8>> {
        if shape.0.len() > MAX_SHAPE {
            return None;
        }
        let mut key = Vec::with_capacity(8 + action.len() + shape.0.len());
        key.extend_from_slice(&(action.len() as u64).to_le_bytes());
        key.extend_from_slice(action.as_bytes());
        key.extend_from_slice(&shape.0);
        Some(key)
    }

    /// Whether a context of `shape` was accepted for `action` before.
    pub fn accepted(&self, action: &str, shape: &Shape) -> bool {
        Self::key(action, shape).is_some_and(|key| self.0.get(&key).is_some())
    }

    /// Remembers that Cedar accepted a context of `shape` for `action`.
    pub fn accept(&self, action: &str, shape: &Shape) {
        if let Some(key) = Self::key(action, shape) {
            self.0.insert(key, ());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set_of(members: &[&dyn Fn(&mut Shape)]) -> Shape {
        let mut shape = Shape::new();
        let mut set = shape.open_set();
        for member in members {
            let start = shape.mark();
            member(&mut shape);
            shape.member(&mut set, start);
        }
        shape.close_set();
        shape
    }

    #[test]
    fn repeated_members_are_written_once_and_others_kept() {
        let string: &dyn Fn(&mut Shape) = &|s| s.string();
        let long: &dyn Fn(&mut Shape) = &|s| s.long();
        assert_eq!(set_of(&[string, string, string]), set_of(&[string]));
        assert_ne!(set_of(&[string, long]), set_of(&[string]));
        assert_ne!(
            set_of(&[string, long]),
            set_of(&[long, string]),
            "order is kept"
        );
        assert_eq!(set_of(&[string, long, long]), set_of(&[string, long]));
        assert_ne!(
            set_of(&[]),
            set_of(&[string]),
            "an empty set is its own shape"
        );
    }

    #[test]
    fn keys_and_booleans_are_part_of_the_shape() {
        let record = |key: &str, flag: bool| {
            let mut shape = Shape::new();
            shape.open_record();
            shape.key(key);
            shape.bool(flag);
            shape.close_record();
            shape
        };
        assert_eq!(record("a", true), record("a", true));
        assert_ne!(record("a", true), record("a", false));
        assert_ne!(record("a", true), record("b", true));
        // A key cannot run into the next value's shape: its length comes first.
        assert_ne!(record("as", true), record("a", true));
    }

    #[test]
    fn acceptance_is_per_action_and_bounded_in_size() {
        let shapes = AcceptedShapes::new();
        let mut shape = Shape::new();
        shape.string();
        assert!(!shapes.accepted("echo", &shape));
        shapes.accept("echo", &shape);
        assert!(shapes.accepted("echo", &shape));
        assert!(!shapes.accepted("echo2", &shape), "another action");
        assert!(
            !shapes.accepted("ech", &shape),
            "the action's length is in the key"
        );
        let mut long = Shape::new();
        long.open_record();
        for _ in 0..MAX_SHAPE {
            long.string();
        }
        long.close_record();
        shapes.accept("echo", &long);
        assert!(!shapes.accepted("echo", &long), "too long to keep");
    }

    /// End to end: a context of a shape already accepted for the action passes without
    /// Cedar's check; any other shape is still checked, and refused when it does not fit.
    #[tokio::test]
    async fn only_the_accepted_shape_skips_the_check() {
        use serde_json::json;

        use crate::Principal;
        use crate::policy::cedar::CedarPolicy;
        use crate::policy::{Decision, Evaluation, Policy};

        let schema = r#"namespace Demo {
            @mcp_principal("User")
            entity User = { issuer: String, subject: String, client_id: String, scopes: Set<String>, claims: {} };
            @mcp_resource("McpServer")
            entity McpServer;
            type Gate = { era: String, phase: String, protocol_version: String, elicitation_form: Bool,
                          elicitation_url: Bool, tasks: Bool, approved_by: String };
            action "t" appliesTo {
                principal: [User], resource: [McpServer],
                context: { input: { text: String, count: Long, tags?: Set<String> }, gate: Gate }
            };
        }"#;
        let policy = CedarPolicy::builder()
            .schema_text("schema.cedarschema", schema)
            .policies_text("all.cedar", "permit(principal, action, resource);")
            .build()
            .expect("the policy builds");
        let principal = Principal::builder()
            .issuer("https://as.example")
            .subject("alice")
            .build()
            .expect("a principal");
        let decide = |arguments: serde_json::Value| {
            let evaluation = Evaluation::builder(principal.clone())
                .tool("t", arguments)
                .build()
                .expect("an evaluation");
            let policy = policy.clone();
            async move { policy.evaluate(evaluation).await.expect("decides") }
        };
        let refused = Decision::undisclosed("The request does not match the authorization schema.");
        for _ in 0..2 {
            assert_eq!(
                decide(json!({"text": "a", "count": 1})).await,
                Decision::allow()
            );
            assert_eq!(
                decide(json!({"text": "b", "count": 2})).await,
                Decision::allow()
            );
            assert_eq!(decide(json!({"text": "a", "count": "1"})).await, refused);
            assert_eq!(
                decide(json!({"text": "a"})).await,
                refused,
                "count is required"
            );
            let extra = json!({"text": "a", "count": 1, "other": 1});
            assert_eq!(decide(extra).await, refused, "the record is closed");
            let renamed = json!({"text": "a", "other": 1});
            assert_eq!(
                decide(renamed).await,
                refused,
                "the same kinds under another key"
            );
            let tags = json!({"text": "a", "count": 1, "tags": ["x", "y"]});
            assert_eq!(decide(tags).await, Decision::allow());
            let mixed = json!({"text": "a", "count": 1, "tags": ["x", 1]});
            assert_eq!(decide(mixed).await, refused, "a member of another type");
            let empty = json!({"text": "a", "count": 1, "tags": []});
            assert_eq!(decide(empty).await, Decision::allow());
        }
    }
}
