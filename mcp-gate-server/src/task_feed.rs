//! The task feed a reload does not deafen.
//!
//! A library [`TaskFeed`] tells one listener per process: the first gate built with it. The
//! gateway builds a new gate on every reload, each with its own listens, so a feed handed to
//! gate after gate would tell only the first: a listen opened after a reload would never hear
//! of its task. [`Relay`] stands between: the process's one feed (in memory, or Redis pub/sub)
//! tells the relay, and the relay tells every gate's listeners that still has listens open,
//! the gate in force and those that streams opened before a reload still hold.

use std::sync::{Arc, Mutex, Weak};

use mcp_gate::store::tasks::{TaskFeed, TaskListener, TaskRecord};

/// A [`TaskFeed`] that many gates may be built with, one after another: what the wrapped feed
/// delivers goes to each of them.
pub struct Relay {
    feed: Arc<dyn TaskFeed>,
    listeners: Arc<Listeners>,
}

/// The listeners of the gates built with the relay, held weakly: a gate's listeners live as
/// long as the gate or one of its listens, and are forgotten after.
#[derive(Default)]
struct Listeners(Mutex<Vec<Weak<dyn TaskListener>>>);

impl Relay {
    /// A relay over `feed`, which from now on delivers to the relay alone.
    pub fn over(feed: Arc<dyn TaskFeed>) -> Self {
        let listeners = Arc::new(Listeners::default());
        feed.deliver_to(Arc::clone(&listeners) as Arc<dyn TaskListener>);
        Self { feed, listeners }
    }
}

impl TaskFeed for Relay {
    fn publish(&self, record: &TaskRecord) {
        self.feed.publish(record);
    }

    fn deliver_to(&self, listener: Arc<dyn TaskListener>) {
        let mut listeners = self.listeners.0.lock().unwrap_or_else(|p| p.into_inner());
        listeners.retain(|known| known.strong_count() > 0);
        listeners.push(Arc::downgrade(&listener));
    }

    fn backend(&self) -> &'static str {
        self.feed.backend()
    }
}

impl TaskListener for Listeners {
    fn deliver(&self, record: Arc<TaskRecord>) {
        // Taken out of the lock first: a listener is told without the relay's lock held.
        let live: Vec<Arc<dyn TaskListener>> = {
            let mut listeners = self.0.lock().unwrap_or_else(|p| p.into_inner());
            listeners.retain(|known| known.strong_count() > 0);
            listeners.iter().filter_map(Weak::upgrade).collect()
        };
        for listener in live {
            listener.deliver(Arc::clone(&record));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcp_gate::store::tasks::{HeldCall, LocalFeed, TaskOwner};
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[derive(Default)]
    struct Counted(AtomicUsize);

    impl TaskListener for Counted {
        fn deliver(&self, _: Arc<TaskRecord>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn record() -> TaskRecord {
        let owner = TaskOwner::new("https://as.example", Some("s".into()), Some("c".into()));
        let call = HeldCall::new("tools/call", serde_json::json!({}), "2026-07-28", "r");
        TaskRecord::new(owner, call, "actx_1", 60_000, 1_000).expect("randomness")
    }

    #[test]
    fn every_gate_built_with_the_relay_hears_while_it_lives() {
        let relay = Relay::over(Arc::new(LocalFeed::default()));
        let first = Arc::new(Counted::default());
        let second = Arc::new(Counted::default());
        relay.deliver_to(first.clone());
        relay.deliver_to(second.clone());
        relay.publish(&record());
        assert_eq!(first.0.load(Ordering::Relaxed), 1);
        assert_eq!(second.0.load(Ordering::Relaxed), 1);
        // A gate gone with all its listens is forgotten.
        drop(first);
        relay.publish(&record());
        assert_eq!(second.0.load(Ordering::Relaxed), 2);
        assert_eq!(relay.listeners.0.lock().expect("lock").len(), 1);
    }
}
