//! A request's `params`, read once on the way in and whole only when a path asks.
//!
//! Classification reads the body in one strict pass ([`json`](super::json)). Of `params` it
//! keeps the members the layer reads on every request (`_meta`, `requestState`,
//! `inputResponses`) and the target's; everything else is checked in place and not built. A
//! path that needs the whole object (a rewrite of the body, a method without a row, a policy
//! reading a tool's arguments) reads it again from the same bytes, once, strictly: the
//! allowed call of a policy that never looks at the arguments builds no tree of them.

use std::sync::{Arc, LazyLock, OnceLock};

use bytes::Bytes;
use serde_json::{Map, Value};

use super::json::{ParamsSeen, parse_strict};

/// The `params` object of a classified request.
#[derive(Clone, Debug, Default)]
pub(crate) struct Params {
    /// `params._meta`, as sent.
    meta: Option<Value>,
    /// `params.requestState`, as sent.
    request_state: Option<Value>,
    /// `params.inputResponses`, as sent.
    input_responses: Option<Value>,
    /// The whole object.
    whole: WholeParams,
}

impl Params {
    /// The params of a message whose strict pass saw `seen` (taken: its values move here),
    /// read whole from `message` when asked.
    /// The pass built the whole object when it could; then the body is not read again.
    pub(crate) fn seen(seen: &mut ParamsSeen<'_>, message: Bytes) -> Self {
        let whole = match seen.whole.take() {
            Some(whole) if whole.is_empty() => WholeParams::whole_at_once(Arc::clone(&EMPTY)),
            Some(whole) => WholeParams::whole_at_once(Arc::new(whole)),
            None => WholeParams::in_message(message),
        };
        Self {
            meta: seen.meta.take(),
            request_state: seen.request_state.take(),
            input_responses: seen.input_responses.take(),
            whole,
        }
    }

    /// One member.
    pub(crate) fn get(&self, key: &str) -> Option<&Value> {
        let kept = match key {
            "_meta" => &self.meta,
            "requestState" => &self.request_state,
            "inputResponses" => &self.input_responses,
            _ => return self.whole.get().get(key),
        };
        // Kept apart by the pass, or (the object built whole in it) read from the whole.
        match (kept, self.whole.built()) {
            (Some(value), _) => Some(value),
            (None, Some(whole)) => whole.get(key),
            (None, None) => None,
        }
    }

    /// The whole object (read from the body the first time).
    pub(crate) fn whole(&self) -> &Map<String, Value> {
        self.whole.get()
    }

    /// The whole object, shared.
    pub(crate) fn whole_shared(&self) -> Arc<Map<String, Value>> {
        self.whole.shared()
    }

    /// The body kept to read the whole object from, when it was not built in the first pass.
    #[cfg(test)]
    pub(crate) fn kept_body(&self) -> Option<&Bytes> {
        self.whole.message()
    }

    /// The lazily read whole, for a tool's arguments to share.
    pub(crate) fn lazy(&self) -> WholeParams {
        self.whole.clone()
    }
}

/// The whole `params` object: built, or read from the message body on first use.
#[derive(Clone, Debug, Default)]
pub(crate) struct WholeParams {
    /// The body the object is read from; `None` when it was given built.
    message: Option<Bytes>,
    read: OnceLock<Arc<Map<String, Value>>>,
}

/// What a message without params reads as.
static EMPTY: LazyLock<Arc<Map<String, Value>>> = LazyLock::new(Arc::default);

impl WholeParams {
    fn in_message(message: Bytes) -> Self {
        Self {
            message: Some(message),
            read: OnceLock::new(),
        }
    }

    fn whole_at_once(params: Arc<Map<String, Value>>) -> Self {
        Self {
            message: None,
            read: OnceLock::from(params),
        }
    }

    /// The object, when it was built in the classifying pass (never read from the body).
    fn built(&self) -> Option<&Map<String, Value>> {
        match self.message {
            None => self.read.get().map(|whole| &**whole),
            Some(_) => None,
        }
    }

    /// The object.
    pub(crate) fn get(&self) -> &Map<String, Value> {
        self.read.get_or_init(|| self.read_whole())
    }

    fn shared(&self) -> Arc<Map<String, Value>> {
        Arc::clone(self.read.get_or_init(|| self.read_whole()))
    }

    /// The body's `params`, read strictly. The body passed the same grammar when it was
    /// classified (`json::Checked` accepts exactly what `StrictValue` builds, a property
    /// tested below), so the read cannot fail; were it to, the object reads as empty and the
    /// failure is logged.
    fn read_whole(&self) -> Arc<Map<String, Value>> {
        let Some(message) = &self.message else {
            return Arc::clone(&EMPTY);
        };
        match parse_strict(message) {
            Ok(Value::Object(mut top)) => match top.remove("params") {
                Some(Value::Object(params)) => Arc::new(params),
                None => Arc::clone(&EMPTY),
                Some(_) => unreadable(),
            },
            _ => unreadable(),
        }
    }

    /// The message body the object is read from, if it was read from one.
    pub(crate) fn message(&self) -> Option<&Bytes> {
        self.message.as_ref()
    }
}

#[cold]
fn unreadable() -> Arc<Map<String, Value>> {
    tracing::error!(
        target: "mcp_gate::request",
        "a classified body could not be read again; its params read as empty"
    );
    Arc::clone(&EMPTY)
}
