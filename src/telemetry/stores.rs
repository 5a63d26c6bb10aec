//! Every store operation measured (feature `metrics`): [`Measured`] wraps the store the
//! application configured, so that the memory stores, the Redis stores and a store of the
//! application's own are counted alike, at the one place every operation passes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::auth::Owner;
use crate::measure::store_operation;
use crate::store::limits::{AcquireFuture, Lease, LimitFuture, LimitStore, ReleaseFuture, Tally};
use crate::store::replay::{ReplayFuture, ReplayStore, StateUse};
use crate::store::sessions::{SessionFuture, SessionRecord, SessionStore};
use crate::store::tasks::{TaskChange, TaskFuture, TaskId, TaskQuery, TaskRecord, TaskStore};
use crate::store::{StoreError, StoreFuture, StoreKind};

/// A store whose every operation is counted, by outcome, and timed.
pub(crate) struct Measured<S: ?Sized> {
    kind: StoreKind,
    backend: &'static str,
    inner: Arc<S>,
}

impl<S: ?Sized> Measured<S> {
    /// `inner`, measured as the `kind` store.
    pub fn new(kind: StoreKind, backend: &'static str, inner: Arc<S>) -> Self {
        Self {
            kind,
            backend,
            inner,
        }
    }

    /// Runs `operation` and records how it ended.
    async fn measure<T>(
        &self,
        operation: &'static str,
        run: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let started = Instant::now();
        let result = run.await;
        let outcome = match &result {
            Ok(_) => "ok",
            Err(error) => error.kind(),
        };
        let store = match self.kind {
            StoreKind::Sessions => "sessions",
            StoreKind::Replay => "replay",
            StoreKind::Tasks => "tasks",
            StoreKind::Limits => "limits",
            StoreKind::Revocations => "revocations",
        };
        store_operation(store, self.backend, operation, outcome, started.elapsed());
        result
    }
}

impl TaskStore for Measured<dyn TaskStore> {
    fn create(&self, record: TaskRecord) -> TaskFuture<'_, ()> {
        Box::pin(self.measure("create", self.inner.create(record)))
    }

    fn create_within(&self, record: TaskRecord, quota: usize) -> TaskFuture<'_, ()> {
        Box::pin(self.measure("create", self.inner.create_within(record, quota)))
    }

    fn get<'a>(&'a self, id: &'a TaskId) -> TaskFuture<'a, Option<TaskRecord>> {
        Box::pin(self.measure("get", self.inner.get(id)))
    }

    fn transition<'a>(
        &'a self,
        id: &'a TaskId,
        change: TaskChange,
    ) -> TaskFuture<'a, crate::store::tasks::Transition> {
        Box::pin(self.measure("transition", self.inner.transition(id, change)))
    }

    fn list<'a>(&'a self, query: TaskQuery<'a>) -> TaskFuture<'a, Vec<TaskRecord>> {
        Box::pin(self.measure("list", self.inner.list(query)))
    }

    fn backend(&self) -> &'static str {
        self.backend
    }

    fn reachable(&self) -> StoreFuture<'_, ()> {
        Box::pin(self.measure("ping", self.inner.reachable()))
    }
}

impl ReplayStore for Measured<dyn ReplayStore> {
    fn first_use<'a>(&'a self, state: StateUse<'a>) -> ReplayFuture<'a> {
        Box::pin(self.measure("first_use", self.inner.first_use(state)))
    }

    fn backend(&self) -> &'static str {
        self.backend
    }

    fn reachable(&self) -> StoreFuture<'_, ()> {
        Box::pin(self.measure("ping", self.inner.reachable()))
    }
}

impl SessionStore for Measured<dyn SessionStore> {
    fn bind<'a>(&'a self, session_id: &'a str, record: SessionRecord) -> SessionFuture<'a, ()> {
        Box::pin(self.measure("bind", self.inner.bind(session_id, record)))
    }

    fn get<'a>(&'a self, session_id: &'a str) -> SessionFuture<'a, Option<SessionRecord>> {
        Box::pin(self.measure("get", self.inner.get(session_id)))
    }

    fn unbind<'a>(&'a self, session_id: &'a str, owner: &'a Owner) -> SessionFuture<'a, ()> {
        Box::pin(self.measure("unbind", self.inner.unbind(session_id, owner)))
    }

    fn backend(&self) -> &'static str {
        self.backend
    }

    fn reachable(&self) -> StoreFuture<'_, ()> {
        Box::pin(self.measure("ping", self.inner.reachable()))
    }
}

impl LimitStore for Measured<dyn LimitStore> {
    fn take<'a>(&'a self, tallies: &'a [Tally]) -> LimitFuture<'a> {
        Box::pin(self.measure("take", self.inner.take(tallies)))
    }

    fn counts_in_flight(&self) -> bool {
        self.inner.counts_in_flight()
    }

    fn acquire<'a>(&'a self, holder: &'a str, max: u32, lease: Duration) -> AcquireFuture<'a> {
        Box::pin(self.measure("acquire", self.inner.acquire(holder, max, lease)))
    }

    fn release(&self, lease: Lease) -> ReleaseFuture {
        let started = Instant::now();
        let backend = self.backend;
        match self.inner.release(lease) {
            // Given back at once.
            None => {
                store_operation("limits", backend, "release", "ok", started.elapsed());
                None
            }
            Some(release) => Some(Box::pin(async move {
                let result = release.await;
                let outcome = result.as_ref().map_or_else(StoreError::kind, |_| "ok");
                store_operation("limits", backend, "release", outcome, started.elapsed());
                result
            })),
        }
    }

    fn backend(&self) -> &'static str {
        self.backend
    }

    fn reachable(&self) -> StoreFuture<'_, ()> {
        Box::pin(self.measure("ping", self.inner.reachable()))
    }
}

/// The limit store, measured.
pub(crate) fn measured_limits(store: Arc<dyn LimitStore>) -> Arc<dyn LimitStore> {
    let backend = store.backend();
    Arc::new(Measured::new(StoreKind::Limits, backend, store))
}

/// The task store, measured.
pub(crate) fn measured_tasks(store: Arc<dyn TaskStore>) -> Arc<dyn TaskStore> {
    let backend = store.backend();
    Arc::new(Measured::new(StoreKind::Tasks, backend, store))
}

/// The replay store, measured.
pub(crate) fn measured_replay(store: Arc<dyn ReplayStore>) -> Arc<dyn ReplayStore> {
    let backend = store.backend();
    Arc::new(Measured::new(StoreKind::Replay, backend, store))
}

/// The session store, measured.
pub(crate) fn measured_sessions(store: Arc<dyn SessionStore>) -> Arc<dyn SessionStore> {
    let backend = store.backend();
    Arc::new(Measured::new(StoreKind::Sessions, backend, store))
}
