//! [`RedisTaskFeed`]: recorded task transitions shared by replicas through Redis pub/sub
//! (feature `redis`).
//!
//! Each replica publishes the records its transitions write on one channel,
//! `{namespace}:task-events`, and subscribes to it; every replica (the publisher too) hands
//! what it hears to its own listener. A message is `<task id>\n<record as stored>`, decoded
//! as strictly as a stored record.
//!
//! # Threat model
//!
//! - **Messages come from whoever can publish.** Anyone with the Redis ACL to publish on the
//!   channel can make a replica tell an owner about a task, exactly as anyone who can write
//!   the task keys can change the task: the feed is as trusted as the store. A message that
//!   is not a valid record stored under its own id is dropped (and counted in the logs).
//! - **Pub/sub is at most once.** A replica that is disconnected misses what was published
//!   meanwhile; it reconnects (after 1 s, at most once a second) and goes on. A listen then
//!   misses a notification; `tasks/get` stays the truth, and the next transition carries the
//!   whole task again.
//! - **Publishing never waits.** Records to publish go through a bounded queue
//!   ([`RedisTaskFeed::QUEUE`]) to one publishing task; a full queue drops the record, counted.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::{Either, select};
use tokio::sync::{mpsc, watch};

use super::TaskRecord;
use super::announce::{TaskFeed, TaskListener};
use crate::store::redis::keys::check_namespace;
use crate::store::{StoreError, StoreKind};

/// The longest one PUBLISH may take before the record is given up.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(2);
/// The wait before subscribing again after the subscription broke.
const RESUBSCRIBE_AFTER: Duration = Duration::from_secs(1);

/// Task transitions shared by replicas through Redis pub/sub. Give the same server and
/// namespace to every replica (and to the task store's namespace, by convention).
pub struct RedisTaskFeed {
    channel: Arc<str>,
    outgoing: mpsc::Sender<Vec<u8>>,
    listener: Arc<OnceLock<Arc<dyn TaskListener>>>,
    dropped: Arc<AtomicU64>,
    /// Dropped with the feed: the subscribing task ends when it is.
    _alive: watch::Sender<()>,
}

impl std::fmt::Debug for RedisTaskFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisTaskFeed")
            .field("channel", &self.channel)
            .finish_non_exhaustive()
    }
}

impl RedisTaskFeed {
    /// Records waiting to be published, at most; more are dropped (counted).
    pub const QUEUE: usize = 1024;

    /// Connects to the Redis server at `url` (a single server; see `docs/tasks.md`), starts
    /// publishing and subscribing on `{namespace}:task-events`, and returns once subscribed.
    /// Must be called inside a tokio runtime. Fails if the URL is unusable, the namespace
    /// invalid, or the server does not answer.
    pub async fn connect(url: &str, namespace: &str) -> Result<Self, StoreError> {
        check_namespace(namespace, StoreKind::Tasks)?;
        let client = redis::Client::open(url)
            .map_err(|_| StoreError::unusable(StoreKind::Tasks, "the task feed's Redis URL"))?;
        let channel: Arc<str> = format!("{namespace}:task-events").into();
        let publisher = client.get_connection_manager().await.map_err(unavailable)?;
        let first = subscribed(&client, &channel).await.map_err(unavailable)?;
        let (outgoing, queue) = mpsc::channel(Self::QUEUE);
        tokio::spawn(publish_all(publisher, channel.clone(), queue));
        let listener = Arc::new(OnceLock::new());
        let (alive, stopped) = watch::channel(());
        let hearing = Hearing {
            client,
            channel: channel.clone(),
            listener: Arc::clone(&listener),
        };
        tokio::spawn(hearing.run(first, stopped));
        Ok(Self {
            channel,
            outgoing,
            listener,
            dropped: Arc::new(AtomicU64::new(0)),
            _alive: alive,
        })
    }

    /// Records this process could not publish because its queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

impl TaskFeed for RedisTaskFeed {
    fn publish(&self, record: &TaskRecord) {
        let Ok(json) = record.to_json() else {
            return;
        };
        let mut message = Vec::with_capacity(record.id.as_str().len() + 1 + json.len());
        message.extend_from_slice(record.id.as_str().as_bytes());
        message.push(b'\n');
        message.extend_from_slice(&json);
        if self.outgoing.try_send(message).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(target: "mcp_gate::tasks", "task transition not published: the feed's queue is full");
        }
    }

    fn deliver_to(&self, listener: Arc<dyn TaskListener>) {
        let _ = self.listener.set(listener);
    }

    fn backend(&self) -> &'static str {
        "redis"
    }
}

fn unavailable(e: redis::RedisError) -> StoreError {
    StoreError::unavailable(StoreKind::Tasks, format_args!("redis task feed: {e}"))
}

async fn subscribed(
    client: &redis::Client,
    channel: &str,
) -> redis::RedisResult<redis::aio::PubSub> {
    let mut pubsub = client.get_async_pubsub().await?;
    pubsub.subscribe(channel).await?;
    Ok(pubsub)
}

/// Publishes each queued record, one at a time, in order; ends when the feed is dropped.
async fn publish_all(
    mut connection: redis::aio::ConnectionManager,
    channel: Arc<str>,
    mut queue: mpsc::Receiver<Vec<u8>>,
) {
    while let Some(message) = queue.recv().await {
        let mut command = redis::cmd("PUBLISH");
        command.arg(&*channel).arg(message);
        let publish = command.query_async::<i64>(&mut connection);
        match tokio::time::timeout(PUBLISH_TIMEOUT, publish).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                tracing::warn!(target: "mcp_gate::tasks", error = %e, "task transition not published")
            }
            Err(_) => {
                tracing::warn!(target: "mcp_gate::tasks", "task transition not published: Redis did not answer in time")
            }
        }
    }
}

/// The subscribing side: what is heard on the channel goes to this process's listener.
struct Hearing {
    client: redis::Client,
    channel: Arc<str>,
    listener: Arc<OnceLock<Arc<dyn TaskListener>>>,
}

impl Hearing {
    async fn run(self, first: redis::aio::PubSub, mut stopped: watch::Receiver<()>) {
        let mut pubsub = Some(first);
        loop {
            if let Some(connection) = pubsub.take() {
                let mut messages = connection.into_on_message();
                loop {
                    let next = select(Box::pin(stopped.changed()), messages.next()).await;
                    match next {
                        Either::Left(_) => return,
                        Either::Right((Some(message), _)) => {
                            self.heard(message.get_payload_bytes())
                        }
                        Either::Right((None, _)) => break,
                    }
                }
                tracing::warn!(target: "mcp_gate::tasks", "task feed subscription lost; subscribing again");
            }
            let pause = tokio::time::sleep(RESUBSCRIBE_AFTER);
            if let Either::Left(_) = select(Box::pin(stopped.changed()), Box::pin(pause)).await {
                return;
            }
            match subscribed(&self.client, &self.channel).await {
                Ok(connection) => pubsub = Some(connection),
                Err(e) => {
                    tracing::warn!(target: "mcp_gate::tasks", error = %e, "task feed cannot subscribe")
                }
            }
        }
    }

    fn heard(&self, payload: &[u8]) {
        match decode(payload) {
            Some(record) => {
                if let Some(listener) = self.listener.get() {
                    listener.deliver(Arc::new(record));
                }
            }
            None => {
                tracing::warn!(target: "mcp_gate::tasks", "task feed message dropped: not a task record")
            }
        }
    }
}

/// A message's record: `<task id>\n<record>`, the record stored under that id.
fn decode(payload: &[u8]) -> Option<TaskRecord> {
    let split = memchr::memchr(b'\n', payload)?;
    let id = std::str::from_utf8(&payload[..split]).ok()?;
    TaskRecord::from_json(&payload[split + 1..], id).ok()
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;
    use crate::store::tasks::sample_record;

    #[test]
    fn messages_decode_only_as_records_under_their_own_id() {
        let record = sample_record(Value::Null, "actx_AAAAAAAAAAAAAAAAAAAAAA", 60_000);
        let json = record.to_json().unwrap();
        let message = [record.id.as_str().as_bytes(), b"\n", &json].concat();
        assert_eq!(decode(&message), Some(record.clone()));
        let other = sample_record(Value::Null, "actx_AAAAAAAAAAAAAAAAAAAAAA", 60_000);
        let lying = [other.id.as_str().as_bytes(), b"\n", &json].concat();
        assert_eq!(decode(&lying), None);
        assert_eq!(decode(&json), None);
        assert_eq!(decode(b"tsk_x\n{}"), None);
    }
}
