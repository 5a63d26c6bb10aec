//! The task record: what a store keeps for one held call (its id, owner, status, the call and
//! its outcome), how it is written, and how it is checked when it comes back.

use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::clock::{now_ms, rfc3339};
use crate::random::RandomnessUnavailable;
use crate::store::StoreError;

/// The record format this build writes and reads. A record with any other version is refused
/// with [`StoreError::UnsupportedSchema`].
pub const SCHEMA_VERSION: u32 = 1;

/// Request params the gateway never stores: client echoes, continuation state, and a legacy
/// task request (`task`), which would make the replayed call a task of the inner server's.
const UNSTORED_PARAMS: [&str; 4] = ["_meta", "inputResponses", "requestState", "task"];

const ID_PREFIX: &str = "tsk_";
/// 16 random bytes, base64url without padding.
const ID_RANDOM_CHARS: usize = 22;
const MAX_CONTEXT_ID: usize = 256;

/// A task id: `tsk_` and 22 base64url characters (128 random bits), unguessable.
///
/// ```
/// use mcp_gate::tasks::TaskId;
///
/// let id = TaskId::generate().unwrap();
/// assert!(id.as_str().starts_with("tsk_") && id.as_str().len() == 26);
/// assert_eq!(TaskId::parse(id.as_str()), Some(id));
/// assert_eq!(TaskId::parse("tsk_5c0e"), None); // not one of ours
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TaskId(String);

impl TaskId {
    /// A fresh id from the operating system's random source.
    pub fn generate() -> Result<Self, RandomnessUnavailable> {
        let mut bytes = [0u8; 16];
        crate::random::fill(&mut bytes)?;
        Ok(Self(format!(
            "{ID_PREFIX}{}",
            URL_SAFE_NO_PAD.encode(bytes)
        )))
    }

    /// `Some` if `value` has the shape of an id this crate generates. Anything else (another
    /// server's task id, a typo, an attack) is `None`.
    pub fn parse(value: &str) -> Option<Self> {
        let random = value.strip_prefix(ID_PREFIX)?;
        let well_formed = random.len() == ID_RANDOM_CHARS
            && random
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        well_formed.then(|| Self(value.to_owned()))
    }

    /// The id as it appears on the wire.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TaskId({})", self.0)
    }
}

impl TryFrom<String> for TaskId {
    type Error = &'static str;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(&value).ok_or("not a task id (tsk_ and 22 base64url characters)")
    }
}

impl From<TaskId> for String {
    fn from(id: TaskId) -> Self {
        id.0
    }
}

/// Who a task belongs to: the principal that made the held call. Only the owner may read,
/// poll or cancel it; the store keeps the key, the caller compares it. The same
/// [`Owner`](crate::auth::Owner) triple binds legacy sessions and continuation states.
pub type TaskOwner = crate::auth::Owner;

/// Where a task is in its life. Statuses only move forward ([`can_become`](Self::can_become)).
///
/// ```text
/// Working ──> Approved ──> Executing ──> Completed | Failed
///    │           │
///    └───────────┴──> Completed (refused, or denied again) | Cancelled | Failed
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum TaskStatus {
    /// Waiting for a decision.
    Working,
    /// Approved, not yet run.
    Approved,
    /// Claimed by one replica, which is running the held call.
    Executing,
    /// Finished with a result: the tool's, or the refusal's.
    Completed,
    /// Cancelled by its owner before it ran.
    Cancelled,
    /// Finished with an error instead of a result.
    Failed,
}

impl TaskStatus {
    /// The status's name in records and messages.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Working => "working",
            Self::Approved => "approved",
            Self::Executing => "executing",
            Self::Completed => "completed",
            Self::Cancelled => "cancelled",
            Self::Failed => "failed",
        }
    }

    /// The Tasks extension status a client sees: `Approved` and `Executing` are still
    /// `working` to the client.
    pub const fn wire_status(self) -> &'static str {
        match self {
            Self::Working | Self::Approved | Self::Executing => "working",
            Self::Completed => "completed",
            Self::Cancelled => "cancelled",
            Self::Failed => "failed",
        }
    }

    /// No transition leaves a terminal status.
    pub const fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Cancelled | Self::Failed)
    }

    /// Whether a task may move from `self` to `to`. Never to itself, never backwards: so a
    /// status, once left, is never seen again, which is what makes the compare-and-set safe.
    pub const fn can_become(self, to: Self) -> bool {
        match self {
            Self::Working => matches!(
                to,
                Self::Approved | Self::Completed | Self::Cancelled | Self::Failed
            ),
            Self::Approved => matches!(
                to,
                Self::Executing | Self::Completed | Self::Cancelled | Self::Failed
            ),
            Self::Executing => matches!(to, Self::Completed | Self::Failed),
            Self::Completed | Self::Cancelled | Self::Failed => false,
        }
    }
}

impl fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The held call: what the owner asked for, as it will be run on approval.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct HeldCall {
    /// The JSON-RPC method (`tools/call`).
    pub method: String,
    /// The JSON-RPC params as received, without `_meta`, `inputResponses`, `requestState` and
    /// `task`.
    pub params: Value,
    /// The protocol version the call was made with.
    pub protocol_version: String,
    /// The canonical resource URI the call was made to.
    pub resource: String,
}

impl HeldCall {
    /// The size of the held params as JSON, in bytes: what the call costs a store.
    pub fn params_len(&self) -> usize {
        serde_json::to_vec(&self.params).map_or(usize::MAX, |json| json.len())
    }

    /// A held call. `params` is stored without its `_meta`, `inputResponses`, `requestState`
    /// and `task` members: client echoes, continuation state and task requests are not kept.
    pub fn new(
        method: impl Into<String>,
        mut params: Value,
        protocol_version: impl Into<String>,
        resource: impl Into<String>,
    ) -> Self {
        if let Value::Object(map) = &mut params {
            for name in UNSTORED_PARAMS {
                map.remove(name);
            }
        }
        Self {
            method: method.into(),
            params,
            protocol_version: protocol_version.into(),
            resource: resource.into(),
        }
    }
}

/// The out-of-band decision on a task.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
#[non_exhaustive]
pub enum TaskDecision {
    /// Approved by `by` (an approver's name, for the record).
    Approved {
        /// Who approved.
        by: String,
    },
    /// Refused, for `reason`.
    Refused {
        /// Why.
        reason: String,
    },
}

/// The JSON-RPC error a `failed` task reports.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct TaskError {
    /// The JSON-RPC error code.
    pub code: i64,
    /// The message.
    pub message: String,
    /// Optional details.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl TaskError {
    /// The error `code` with `message`, and no details.
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// With details.
    pub fn data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }
}

/// One durable task: a held call, its owner, where it stands and how it ended.
///
/// Timestamps are milliseconds since the Unix epoch; the task expires `ttl_ms` after
/// `created_at`, whatever its status.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct TaskRecord {
    /// The record format, [`SCHEMA_VERSION`] when written by this build.
    pub schema_version: u32,
    /// The task id.
    pub id: TaskId,
    /// Who made the held call.
    pub owner: TaskOwner,
    /// Where the task stands.
    pub status: TaskStatus,
    /// When the task was created (ms since the epoch).
    pub created_at: u64,
    /// When the record last changed (ms since the epoch).
    pub last_updated_at: u64,
    /// The task's lifetime from `created_at`, in milliseconds.
    pub ttl_ms: u64,
    /// How often the owner should poll, in milliseconds.
    pub poll_interval_ms: u64,
    /// The call being held.
    pub call: HeldCall,
    /// The `authorizationContextId` of the denial's envelope, repeated on every poll.
    pub context_id: String,
    /// The decision, once made.
    #[serde(default)]
    pub decision: Option<TaskDecision>,
    /// The final `CallToolResult` of a `completed` task.
    #[serde(default)]
    pub result: Option<Value>,
    /// The error of a `failed` task.
    #[serde(default)]
    pub error: Option<TaskError>,
}

impl TaskRecord {
    /// A new `working` task with a fresh random id, created now. Fails only without a random
    /// source.
    pub fn new(
        owner: TaskOwner,
        call: HeldCall,
        context_id: impl Into<String>,
        ttl_ms: u64,
        poll_interval_ms: u64,
    ) -> Result<Self, RandomnessUnavailable> {
        let now = now_ms();
        Ok(Self {
            schema_version: SCHEMA_VERSION,
            id: TaskId::generate()?,
            owner,
            status: TaskStatus::Working,
            created_at: now,
            last_updated_at: now,
            ttl_ms,
            poll_interval_ms,
            call,
            context_id: context_id.into(),
            decision: None,
            result: None,
            error: None,
        })
    }

    /// When the task expires (ms since the epoch).
    pub fn expires_at(&self) -> u64 {
        self.created_at.saturating_add(self.ttl_ms)
    }

    /// Whether the task has expired at `now` (ms since the epoch).
    pub fn is_expired_at(&self, now: u64) -> bool {
        now >= self.expires_at()
    }

    /// Milliseconds left before the task expires at `now`; 0 once expired.
    pub fn remaining_ms(&self, now: u64) -> u64 {
        self.expires_at().saturating_sub(now)
    }

    /// `created_at` as RFC 3339 UTC (`2026-09-01T10:00:00Z`), the wire's `createdAt`.
    pub fn created_at_rfc3339(&self) -> String {
        rfc3339(self.created_at)
    }

    /// `last_updated_at` as RFC 3339 UTC, the wire's `lastUpdatedAt`.
    pub fn last_updated_at_rfc3339(&self) -> String {
        rfc3339(self.last_updated_at)
    }

    /// Why this record is not one a store may hold, if it is not.
    pub(crate) fn check(&self) -> Result<(), &'static str> {
        if self.schema_version != SCHEMA_VERSION {
            return Err("the schema version is not the one this build writes");
        }
        if self.ttl_ms == 0 {
            return Err("ttl_ms must be positive");
        }
        if self.poll_interval_ms == 0 {
            return Err("poll_interval_ms must be positive");
        }
        if self.last_updated_at < self.created_at {
            return Err("last_updated_at is before created_at");
        }
        if self.owner.issuer.is_empty() {
            return Err("the owner has no issuer");
        }
        if self.context_id.is_empty() || self.context_id.len() > MAX_CONTEXT_ID {
            return Err("the context id must be 1 to 256 bytes");
        }
        if self.call.method.is_empty() {
            return Err("the held call has no method");
        }
        match &self.call.params {
            Value::Null => {}
            Value::Object(map) => {
                if UNSTORED_PARAMS.iter().any(|name| map.contains_key(*name)) {
                    return Err(
                        "the held call's params keep _meta, inputResponses, requestState or task",
                    );
                }
            }
            _ => return Err("the held call's params are not an object"),
        }
        let approved = matches!(self.decision, Some(TaskDecision::Approved { .. }));
        match self.status {
            TaskStatus::Working if self.decision.is_some() => {
                Err("a working task has no decision yet")
            }
            TaskStatus::Approved | TaskStatus::Executing if !approved => {
                Err("an approved or executing task needs an approval")
            }
            TaskStatus::Completed if self.result.is_none() => {
                Err("a completed task needs a result")
            }
            TaskStatus::Completed if self.error.is_some() => Err("a completed task has no error"),
            TaskStatus::Failed if self.error.is_none() => Err("a failed task needs an error"),
            TaskStatus::Failed if self.result.is_some() => Err("a failed task has no result"),
            TaskStatus::Working
            | TaskStatus::Approved
            | TaskStatus::Executing
            | TaskStatus::Cancelled
                if self.result.is_some() || self.error.is_some() =>
            {
                Err("only completed and failed tasks carry an outcome")
            }
            _ => Ok(()),
        }
    }

    /// The stored form: JSON. For stores of your own; pair with
    /// [`from_json`](Self::from_json).
    pub fn to_json(&self) -> Result<Vec<u8>, StoreError> {
        serde_json::to_vec(self).map_err(|e| StoreError::Corrupt {
            id: self.id.to_string(),
            reason: format!("cannot be serialised: {}", describe(&e)),
        })
    }

    /// Reads a stored record, which must be stored under `id`. Strict: the schema version
    /// first (so that an old or new record gets a clear refusal), then every field (unknown
    /// ones are refused), then the record's own consistency. Errors never quote the record's
    /// values, which hold tool arguments.
    pub fn from_json(bytes: &[u8], id: &str) -> Result<Self, StoreError> {
        #[derive(Deserialize)]
        struct Version {
            schema_version: Option<u64>,
        }
        let corrupt = |reason: String| StoreError::Corrupt {
            id: id.to_owned(),
            reason,
        };
        let version: Version = serde_json::from_slice(bytes)
            .map_err(|e| corrupt(format!("not a task record: {}", describe(&e))))?;
        match version.schema_version {
            None => return Err(corrupt("no schema_version".into())),
            Some(found) if found != u64::from(SCHEMA_VERSION) => {
                return Err(StoreError::UnsupportedSchema {
                    id: id.to_owned(),
                    found,
                    supported: SCHEMA_VERSION,
                });
            }
            Some(_) => {}
        }
        let record: Self = serde_json::from_slice(bytes)
            .map_err(|e| corrupt(format!("not a task record: {}", describe(&e))))?;
        if record.id.as_str() != id {
            return Err(corrupt(format!("holds task {}", record.id)));
        }
        record.check().map_err(|reason| corrupt(reason.into()))?;
        Ok(record)
    }
}

/// A serde error without its message: messages can quote values, and values are tool
/// arguments.
fn describe(e: &serde_json::Error) -> String {
    let what = match e.classify() {
        serde_json::error::Category::Io => "I/O error",
        serde_json::error::Category::Syntax => "invalid JSON",
        serde_json::error::Category::Data => "wrong fields or types",
        serde_json::error::Category::Eof => "truncated JSON",
    };
    format!("{what} at line {} column {}", e.line(), e.column())
}

/// A held `deploy` call of alice's, for the unit tests of the task modules.
#[cfg(test)]
pub(crate) fn sample_record(arguments: Value, context_id: &str, ttl_ms: u64) -> TaskRecord {
    let mut params = serde_json::Map::new();
    params.insert("name".into(), "deploy".into());
    if !arguments.is_null() {
        params.insert("arguments".into(), arguments);
    }
    TaskRecord::new(
        TaskOwner::new("https://as.example", Some("alice".into()), None),
        HeldCall::new(
            "tools/call",
            Value::Object(params),
            "2026-07-28",
            "https://mcp.example/mcp",
        ),
        context_id,
        ttl_ms,
        1_000,
    )
    .unwrap_or_else(|error| panic!("a sample record: {error}"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn ids_are_well_formed_unique_and_strictly_parsed() {
        let a = TaskId::generate().unwrap();
        let b = TaskId::generate().unwrap();
        assert_ne!(a, b);
        assert_eq!(a.as_str().len(), 4 + 22);
        assert_eq!(TaskId::parse(a.as_str()).as_ref(), Some(&a));
        for bad in [
            "",
            "tsk_",
            "tsk_5c0e",
            "TSK_AAAAAAAAAAAAAAAAAAAAAA",
            "tsk_AAAAAAAAAAAAAAAAAAAAA",
            "tsk_AAAAAAAAAAAAAAAAAAAAAAA",
            "tsk_AAAAAAAAAAAAAAAAAAAA+/",
            "tsk_AAAAAAAAAAAAAAAAAAAA==",
            "tsk_AAAAAAAAAAAAAAAAAAAAA\u{e9}",
        ] {
            assert_eq!(TaskId::parse(bad), None, "{bad:?}");
        }
        assert!(serde_json::from_value::<TaskId>(json!("tsk_5c0e")).is_err());
    }

    #[test]
    fn wire_statuses_hide_the_gateway_steps() {
        use TaskStatus::*;
        let wire: Vec<_> = [Working, Approved, Executing, Completed, Cancelled, Failed]
            .iter()
            .map(|s| s.wire_status())
            .collect();
        assert_eq!(
            wire,
            [
                "working",
                "working",
                "working",
                "completed",
                "cancelled",
                "failed"
            ]
        );
    }

    #[test]
    fn statuses_only_move_forward() {
        use TaskStatus::*;
        let all = [Working, Approved, Executing, Completed, Cancelled, Failed];
        let rank = |s: TaskStatus| match s {
            Working => 0,
            Approved => 1,
            Executing => 2,
            Completed | Cancelled | Failed => 3,
        };
        for from in all {
            assert!(!from.can_become(from));
            for to in all {
                if from.can_become(to) {
                    assert!(rank(to) > rank(from), "{from} -> {to}");
                }
                if from.is_terminal() {
                    assert!(!from.can_become(to));
                }
            }
        }
        assert!(Approved.can_become(Executing));
        assert!(!Working.can_become(Executing), "only an approved task runs");
        assert!(
            !Executing.can_become(Cancelled),
            "a running call is not cancelled"
        );
    }

    fn record() -> TaskRecord {
        TaskRecord::new(
            TaskOwner::new(
                "https://as.example",
                Some("alice".into()),
                Some("app".into()),
            ),
            HeldCall::new(
                "tools/call",
                json!({
                    "name": "deploy",
                    "arguments": {"env": "prod"},
                    "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"},
                    "inputResponses": {"k": {}},
                    "requestState": "mcpgate1.x.y.z"
                }),
                "2026-07-28",
                "https://mcp.example/mcp",
            ),
            "actx_1",
            60_000,
            5_000,
        )
        .unwrap()
    }

    #[test]
    fn held_calls_drop_echoes_and_state() {
        let r = record();
        assert_eq!(
            r.call.params,
            json!({"name": "deploy", "arguments": {"env": "prod"}})
        );
        assert_eq!(r.status, TaskStatus::Working);
        assert_eq!(r.created_at, r.last_updated_at);
        assert_eq!(r.expires_at(), r.created_at + 60_000);
        assert!(!r.is_expired_at(r.created_at + 59_999));
        assert!(r.is_expired_at(r.created_at + 60_000));
        assert_eq!(r.remaining_ms(r.created_at + 70_000), 0);
        assert!(r.check().is_ok());
    }

    #[test]
    fn records_round_trip_and_hold_no_credentials() {
        let r = record();
        let bytes = r.to_json().unwrap();
        assert_eq!(TaskRecord::from_json(&bytes, r.id.as_str()).unwrap(), r);
        let text = String::from_utf8(bytes).unwrap();
        for absent in ["token", "Bearer", "authorization", "_meta", "requestState"] {
            assert!(!text.contains(absent), "{absent} in {text}");
        }
    }

    #[test]
    fn decoding_is_strict_and_says_why() {
        let r = record();
        let id = r.id.as_str();
        let mut value = serde_json::to_value(&r).unwrap();

        value["schema_version"] = json!(2);
        let err = TaskRecord::from_json(&serde_json::to_vec(&value).unwrap(), id).unwrap_err();
        assert!(matches!(
            err,
            StoreError::UnsupportedSchema {
                found: 2,
                supported: 1,
                ..
            }
        ));
        assert!(err.to_string().contains("schema version 2"), "{err}");

        value["schema_version"] = json!(1);
        value["bearer_token"] = json!("secret-value");
        let err = TaskRecord::from_json(&serde_json::to_vec(&value).unwrap(), id).unwrap_err();
        assert!(matches!(err, StoreError::Corrupt { .. }));
        assert!(!err.to_string().contains("secret-value"));

        let other = TaskId::generate().unwrap();
        let err = TaskRecord::from_json(&r.to_json().unwrap(), other.as_str()).unwrap_err();
        assert!(err.to_string().contains("holds task"), "{err}");

        let mut completed = r.clone();
        completed.status = TaskStatus::Completed;
        let err = TaskRecord::from_json(&completed.to_json().unwrap(), id).unwrap_err();
        assert!(err.to_string().contains("needs a result"), "{err}");

        for junk in [
            &b"not json"[..],
            b"{}",
            b"[1]",
            b"{\"schema_version\":\"1\"}",
        ] {
            assert!(matches!(
                TaskRecord::from_json(junk, id).unwrap_err(),
                StoreError::Corrupt { .. }
            ));
        }
    }
}
