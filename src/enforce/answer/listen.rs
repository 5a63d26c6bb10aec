//! A task listen's stream, written by the layer: the acknowledgement, each named task as it
//! is now, then `notifications/tasks` for each recorded transition, and the graceful close
//! (the listen's response) once every task is over or expired.
//!
//! Every frame is a whole event in the canonical form (`sse.rs`), each notification carries
//! `_meta["io.modelcontextprotocol/subscriptionId"]` (the listen's id), and a task's
//! notifications only move forward: a record older than one already sent (heard late from
//! another replica) is skipped.

use std::collections::{HashMap, VecDeque};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use serde_json::{Map, Value, json};

use super::sse::write;
use crate::auth::Principal;
use crate::auth::revocation::RevocationCheck;
use crate::auth::token_cache::TokenDigest;
use crate::denial::Revision;
use crate::revocation::Revocations;
use crate::store::tasks::{TaskId, TaskRecord, TaskStatus};
use crate::tasks::listeners::Listening;
use crate::tasks::wire;

/// The `_meta` key naming the listen a notification belongs to.
pub(crate) const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// One task listen's stream.
pub(crate) struct ListenStream {
    /// Frames written and not yet sent: the acknowledgement and the snapshots.
    pending: VecDeque<Bytes>,
    listening: Listening,
    /// The listen's JSON-RPC id.
    subscription: Value,
    revision: Revision,
    /// The last status sent of each accepted task.
    sent: HashMap<TaskId, TaskStatus>,
    /// Accepted tasks not yet in a terminal status.
    open: usize,
    /// When the last accepted task expires: the stream closes then.
    deadline: Pin<Box<tokio::time::Sleep>>,
    /// The grant the listen was opened with, asked again before each notification; `None`
    /// without revocation configured.
    grant: Option<Grant>,
    closed: bool,
}

/// The credential a listen was opened with, checked against the revocation set before each
/// notification it would send: a listen does not outlive the grant that opened it.
pub(crate) struct Grant {
    /// The revocation set.
    pub set: Arc<Revocations>,
    /// The SHA-256 of the listen's token (`None`: it could not be read again, so nothing is
    /// trusted).
    pub key: Option<TokenDigest>,
    /// Who the token was verified as.
    pub principal: Principal,
}

impl Grant {
    /// Whether the grant is withdrawn now: revoked, or the revocation feed no longer trusted
    /// (its outage mode refuses).
    fn withdrawn(&self) -> bool {
        self.key
            .is_none_or(|key| self.set.check(&key, &self.principal).is_err())
    }
}

impl ListenStream {
    /// The stream of `accepted` (the tasks as read after the listen was registered), for the
    /// listen `subscription`, closed at the latest when its token expires
    /// (`token_expiry_ms`): a stream never outlives the credential that opened it.
    pub(crate) fn new(
        listening: Listening,
        subscription: Value,
        accepted: Vec<TaskRecord>,
        revision: Revision,
        (now_ms, token_expiry_ms): (u64, Option<u64>),
        grant: Option<Grant>,
    ) -> Self {
        let ids: Vec<&str> = accepted.iter().map(|r| r.id.as_str()).collect();
        let acknowledged = json!({
            "jsonrpc": "2.0",
            "method": "notifications/subscriptions/acknowledged",
            "params": {
                "notifications": {"taskIds": ids},
                "_meta": {SUBSCRIPTION_ID: subscription},
            },
        });
        let mut pending = VecDeque::from([frame(&acknowledged)]);
        let mut sent = HashMap::new();
        let mut open = 0;
        let mut last_expiry = now_ms;
        for record in &accepted {
            pending.push_back(frame(&notification(record, &subscription, revision)));
            sent.insert(record.id.clone(), record.status);
            open += usize::from(!record.status.is_terminal());
            last_expiry = last_expiry.max(record.expires_at());
        }
        let until = token_expiry_ms.map_or(last_expiry, |token| token.min(last_expiry));
        let wait = Duration::from_millis(until.saturating_sub(now_ms));
        Self {
            pending,
            listening,
            subscription,
            revision,
            sent,
            open,
            deadline: Box::pin(tokio::time::sleep(wait)),
            grant,
            closed: false,
        }
    }

    /// The next frame: a pending one, a notification, or the close; `None` after the close.
    pub(crate) fn poll_frame(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        if let Some(frame) = self.pending.pop_front() {
            return Poll::Ready(Some(frame));
        }
        if self.closed {
            return Poll::Ready(None);
        }
        while self.open > 0 {
            match self.listening.receiver.poll_recv(cx) {
                Poll::Ready(Some(record)) => {
                    if self.grant.as_ref().is_some_and(Grant::withdrawn) {
                        tracing::info!(target: "mcp_gate::tasks", "task listen closed: its grant was revoked");
                        break;
                    }
                    if let Some(frame) = self.heard(&record) {
                        return Poll::Ready(Some(frame));
                    }
                }
                Poll::Ready(None) => break,
                Poll::Pending => {
                    if self.deadline.as_mut().poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                    break;
                }
            }
        }
        self.closed = true;
        Poll::Ready(Some(self.close()))
    }

    /// The notification for `record`, if it is one of the stream's tasks moving forward.
    fn heard(&mut self, record: &TaskRecord) -> Option<Bytes> {
        let last = self.sent.get_mut(&record.id)?;
        if step(record.status) <= step(*last) {
            return None;
        }
        *last = record.status;
        if record.status.is_terminal() {
            self.open -= 1;
        }
        Some(frame(&notification(
            record,
            &self.subscription,
            self.revision,
        )))
    }

    /// The listen's response: the subscription ended gracefully.
    fn close(&self) -> Bytes {
        frame(&json!({
            "jsonrpc": "2.0",
            "id": self.subscription,
            "result": {"resultType": "complete", "_meta": {SUBSCRIPTION_ID: self.subscription}},
        }))
    }
}

impl Drop for ListenStream {
    fn drop(&mut self) {
        let dropped = self.listening.dropped.load(Ordering::Relaxed);
        if dropped > 0 {
            tracing::warn!(target: "mcp_gate::tasks", dropped, "task listen ended; notifications dropped for a slow reader");
        }
    }
}

/// How far along the lifecycle a status is: statuses only move forward.
fn step(status: TaskStatus) -> u8 {
    match status {
        TaskStatus::Working => 0,
        TaskStatus::Approved => 1,
        TaskStatus::Executing => 2,
        TaskStatus::Completed | TaskStatus::Cancelled | TaskStatus::Failed => 3,
    }
}

/// `notifications/tasks` for `record`: the task as `tasks/get` says it (without the result's
/// `resultType`), and the listen's id in `_meta`.
pub(crate) fn notification(record: &TaskRecord, subscription: &Value, revision: Revision) -> Value {
    let mut params = match wire::status(record, revision) {
        Value::Object(fields) => fields,
        _ => Map::new(),
    };
    params.remove("resultType");
    let meta = params
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(meta) = meta {
        meta.insert(SUBSCRIPTION_ID.into(), subscription.clone());
    }
    json!({"jsonrpc": "2.0", "method": "notifications/tasks", "params": params})
}

fn frame(message: &Value) -> Bytes {
    write([message], 256)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use futures_util::future::poll_fn;

    use super::*;
    use crate::store::tasks::{TaskListener, sample_record};
    use crate::tasks::listeners::Listeners;

    fn message(frame: &Bytes) -> Value {
        let text = std::str::from_utf8(frame).unwrap();
        let data = text
            .strip_prefix("event: message\ndata: ")
            .and_then(|rest| rest.strip_suffix("\n\n"))
            .unwrap();
        serde_json::from_str(data).unwrap()
    }

    #[tokio::test]
    async fn acknowledged_then_each_step_forward_then_closed() {
        let listeners = Arc::new(Listeners::new(4, 16, 8));
        let mut record = sample_record(Value::Null, "actx_AAAAAAAAAAAAAAAAAAAAAA", 60_000);
        let listening = listeners
            .register(record.owner.clone(), vec![record.id.clone()])
            .unwrap();
        let now = record.created_at;
        let mut stream = ListenStream::new(
            listening,
            json!("listen-1"),
            vec![record.clone()],
            Revision::current(),
            (now, None),
            None,
        );
        for status in [
            TaskStatus::Approved,
            TaskStatus::Working, // heard late: skipped
            TaskStatus::Executing,
        ] {
            record.status = status;
            listeners.deliver(Arc::new(record.clone()));
        }
        record.status = TaskStatus::Completed;
        record.result = Some(json!({"content": [], "isError": false}));
        listeners.deliver(Arc::new(record.clone()));
        let mut messages = Vec::new();
        while let Some(frame) = poll_fn(|cx| stream.poll_frame(cx)).await {
            messages.push(message(&frame));
        }
        assert_eq!(
            messages[0]["method"],
            "notifications/subscriptions/acknowledged"
        );
        assert_eq!(
            messages[0]["params"]["notifications"]["taskIds"],
            json!([record.id.as_str()])
        );
        let statuses: Vec<&Value> = messages[1..5]
            .iter()
            .map(|m| &m["params"]["status"])
            .collect();
        assert_eq!(statuses, ["working", "working", "working", "completed"]);
        for m in &messages[..5] {
            assert_eq!(m["params"]["_meta"][SUBSCRIPTION_ID], "listen-1");
        }
        assert!(messages[1]["params"].get("resultType").is_none());
        assert_eq!(messages[4]["params"]["result"]["isError"], false);
        assert_eq!(messages[5]["id"], "listen-1");
        assert_eq!(messages[5]["result"]["_meta"][SUBSCRIPTION_ID], "listen-1");
        assert_eq!(messages.len(), 6);
    }

    #[tokio::test]
    async fn an_expired_token_closes_the_stream_after_the_snapshots() {
        let listeners = Arc::new(Listeners::new(4, 16, 8));
        let record = sample_record(Value::Null, "actx_AAAAAAAAAAAAAAAAAAAAAA", 60_000);
        let listening = listeners
            .register(record.owner.clone(), vec![record.id.clone()])
            .unwrap();
        let now = record.created_at;
        let until = (now, Some(now - 1));
        let stream = ListenStream::new(
            listening,
            json!(1),
            vec![record],
            Revision::current(),
            until,
            None,
        );
        let mut stream = stream;
        let mut messages = Vec::new();
        while let Some(frame) = poll_fn(|cx| stream.poll_frame(cx)).await {
            messages.push(message(&frame));
        }
        let methods: Vec<&Value> = messages.iter().map(|m| &m["method"]).collect();
        let expected = [
            json!("notifications/subscriptions/acknowledged"),
            json!("notifications/tasks"),
            Value::Null,
        ];
        assert_eq!(methods, expected.iter().collect::<Vec<_>>());
        assert_eq!(messages[2]["id"], 1);
    }

    /// A listen of alice's, with revocation on; `revoke` names whom to revoke once the stream
    /// is open. What the stream sends when her task then moves forward.
    async fn after_revoking(revoke: crate::auth::Revocation) -> Vec<Value> {
        use crate::revocation::FeedOutage;
        use crate::store::revocations::MemoryRevocations;
        let set = Arc::new(Revocations {
            store: Arc::new(MemoryRevocations::new(16)),
            outage: FeedOutage::Refuse,
            max_token_lifetime: Duration::from_secs(3_600),
        });
        let listeners = Arc::new(Listeners::new(4, 16, 8));
        let mut record = sample_record(Value::Null, "actx_AAAAAAAAAAAAAAAAAAAAAA", 60_000);
        let listening = listeners
            .register(record.owner.clone(), vec![record.id.clone()])
            .unwrap();
        let principal = Principal::builder()
            .issuer("https://as.example")
            .subject("alice")
            .build()
            .unwrap();
        let grant = Grant {
            set: Arc::clone(&set),
            key: Some(crate::auth::token_cache::digest("alice-token")),
            principal,
        };
        let now = record.created_at;
        let mut stream = ListenStream::new(
            listening,
            json!("listen-r"),
            vec![record.clone()],
            Revision::current(),
            (now, None),
            Some(grant),
        );
        set.revoke(revoke).await.unwrap();
        record.status = TaskStatus::Completed;
        record.result = Some(json!({"content": [], "isError": false}));
        listeners.deliver(Arc::new(record));
        let mut messages = Vec::new();
        while let Some(frame) = poll_fn(|cx| stream.poll_frame(cx)).await {
            messages.push(message(&frame));
        }
        messages
    }

    #[tokio::test]
    async fn a_revoked_grant_closes_the_listen_before_its_next_notification() {
        use crate::auth::Revocation;
        for revocation in [
            Revocation::subject("https://as.example", "alice"),
            Revocation::token("alice-token", None),
        ] {
            let messages = after_revoking(revocation.clone()).await;
            let statuses: Vec<&Value> = messages.iter().map(|m| &m["params"]["status"]).collect();
            // The acknowledgement, the snapshot taken at the opening, then the close: the
            // completion is not sent.
            assert_eq!(messages.len(), 3, "{revocation:?}: {messages:?}");
            assert_eq!(statuses[1], "working", "{revocation:?}");
            assert_eq!(messages[2]["id"], "listen-r", "{revocation:?}");
        }
        // Someone else's revocation leaves alice's listen as it was.
        let messages = after_revoking(Revocation::subject("https://as.example", "bob")).await;
        assert_eq!(messages.len(), 4, "{messages:?}");
        assert_eq!(messages[2]["params"]["status"], "completed");
    }

    #[tokio::test]
    async fn nothing_accepted_is_acknowledged_empty_and_closed() {
        let listeners = Arc::new(Listeners::new(4, 16, 8));
        let record = sample_record(Value::Null, "actx_AAAAAAAAAAAAAAAAAAAAAA", 60_000);
        let listening = listeners
            .register(record.owner.clone(), Vec::new())
            .unwrap();
        let mut stream = ListenStream::new(
            listening,
            json!(7),
            Vec::new(),
            Revision::current(),
            (0, None),
            None,
        );
        let mut messages = Vec::new();
        while let Some(frame) = poll_fn(|cx| stream.poll_frame(cx)).await {
            messages.push(message(&frame));
        }
        assert_eq!(messages[0]["params"]["notifications"]["taskIds"], json!([]));
        assert_eq!(messages[1]["id"], 7);
        assert_eq!(messages.len(), 2);
    }
}
