//! [`MemoryTaskStore`]: tasks in this process's memory, bounded by count and by bytes, never
//! evicting pending work.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard, PoisonError};

use super::{
    Plan, TaskChange, TaskFuture, TaskId, TaskOwner, TaskQuery, TaskRecord, TaskStatus, TaskStore,
    Transition, check_new, plan,
};
use crate::clock::now_ms;
use crate::store::{StoreError, StoreKind};

/// Tasks in memory, for development and single-process deployments: they do not survive a
/// restart and are not shared between replicas (use `RedisTaskStore` for that).
///
/// Expired tasks are invisible at once and dropped when space is needed. At most `capacity`
/// live tasks are held; when full, [`create`](TaskStore::create) fails with
/// [`StoreError::Full`] rather than evict a task someone may still approve.
///
/// The held calls' bytes are bounded too ([`MemoryTaskStore::byte_budget`], 256 MiB by
/// default): a new task whose call would take the store past it fails with
/// [`StoreError::OverBudget`]. [`create_within`](TaskStore::create_within) bounds one owner's
/// waiting tasks ([`StoreError::OwnerQuota`]) from a set of each owner's waiting ids: a
/// refusal looks at that owner's ids only, and copies no record.
pub struct MemoryTaskStore {
    tasks: Mutex<Tasks>,
    capacity: usize,
    byte_budget: usize,
}

/// The records, with what each one's held call costs in bytes (measured once, when it is
/// created) and their sum, and each owner's tasks that are still working.
#[derive(Default)]
struct Tasks {
    records: HashMap<TaskId, TaskRecord>,
    sizes: HashMap<TaskId, usize>,
    bytes: usize,
    /// Owner -> ids of its `working` records (expired ones included until they are removed).
    waiting: HashMap<TaskOwner, HashSet<TaskId>>,
}

impl std::ops::Deref for Tasks {
    type Target = HashMap<TaskId, TaskRecord>;

    fn deref(&self) -> &Self::Target {
        &self.records
    }
}

impl Tasks {
    fn add(&mut self, record: TaskRecord, size: usize) {
        self.sizes.insert(record.id.clone(), size);
        self.bytes = self.bytes.saturating_add(size);
        if record.status == TaskStatus::Working {
            self.waiting
                .entry(record.owner.clone())
                .or_default()
                .insert(record.id.clone());
        }
        self.records.insert(record.id.clone(), record);
    }

    /// A new version of a stored record (a transition: the held call is unchanged).
    fn replace(&mut self, record: TaskRecord) {
        if record.status != TaskStatus::Working {
            self.stop_waiting(&record.owner, &record.id);
        }
        self.records.insert(record.id.clone(), record);
    }

    fn remove(&mut self, id: &TaskId) {
        if let Some(record) = self.records.remove(id) {
            self.stop_waiting(&record.owner, id);
        }
        if let Some(size) = self.sizes.remove(id) {
            self.bytes -= size;
        }
    }

    fn stop_waiting(&mut self, owner: &TaskOwner, id: &TaskId) {
        if let Some(ids) = self.waiting.get_mut(owner) {
            ids.remove(id);
            if ids.is_empty() {
                self.waiting.remove(owner);
            }
        }
    }

    /// How many live tasks `owner` has waiting: a look at the owner's ids, no copy.
    fn waiting_of(&self, owner: &TaskOwner, now: u64) -> usize {
        self.waiting.get(owner).map_or(0, |ids| {
            ids.iter()
                .filter(|id| self.records.get(*id).is_some_and(|r| !r.is_expired_at(now)))
                .count()
        })
    }

    fn forget_expired(&mut self, now: u64) {
        let expired: Vec<TaskId> = self
            .records
            .values()
            .filter(|r| r.is_expired_at(now))
            .map(|r| r.id.clone())
            .collect();
        for id in expired {
            self.remove(&id);
        }
    }
}

impl MemoryTaskStore {
    /// The capacity of [`MemoryTaskStore::default`].
    pub const DEFAULT_CAPACITY: usize = 10_000;
    /// The byte budget of [`MemoryTaskStore::default`]: 256 MiB of held calls.
    pub const DEFAULT_BYTE_BUDGET: usize = 256 * 1024 * 1024;

    /// A store holding at most `capacity` live tasks, within the default byte budget.
    pub fn new(capacity: usize) -> Self {
        Self {
            tasks: Mutex::new(Tasks::default()),
            capacity,
            byte_budget: Self::DEFAULT_BYTE_BUDGET,
        }
    }

    /// At most `bytes` of held calls (their params as JSON) in live tasks.
    pub fn byte_budget(mut self, bytes: usize) -> Self {
        self.byte_budget = bytes;
        self
    }

    /// How many live (unexpired) tasks the store holds.
    pub fn len(&self) -> usize {
        let now = now_ms();
        self.lock()
            .values()
            .filter(|r| !r.is_expired_at(now))
            .count()
    }

    /// Whether the store holds no live task.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The map. No code path panics while holding the lock with the map half-changed (every
    /// check is done before the one insert), so a poisoned lock still guards a sound map.
    fn lock(&self) -> MutexGuard<'_, Tasks> {
        self.tasks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Stores `record` at `now`, if its owner has fewer than `quota` tasks waiting (any
    /// number when `None`).
    fn create_now(
        &self,
        record: TaskRecord,
        now: u64,
        quota: Option<usize>,
    ) -> Result<(), StoreError> {
        check_new(&record, now)?;
        let mut tasks = self.lock();
        if let Some(existing) = tasks.get(&record.id) {
            if !existing.is_expired_at(now) {
                return Err(StoreError::Duplicate(record.id));
            }
            tasks.remove(&record.id);
        }
        if let Some(quota) = quota
            && tasks.waiting_of(&record.owner, now) >= quota
        {
            return Err(StoreError::OwnerQuota {
                store: StoreKind::Tasks,
                quota,
            });
        }
        let size = record.call.params_len();
        if tasks.len() >= self.capacity || tasks.bytes.saturating_add(size) > self.byte_budget {
            tasks.forget_expired(now);
        }
        if tasks.len() >= self.capacity {
            return Err(StoreError::Full {
                store: StoreKind::Tasks,
                capacity: self.capacity,
            });
        }
        if tasks.bytes.saturating_add(size) > self.byte_budget {
            return Err(StoreError::OverBudget {
                budget: self.byte_budget,
            });
        }
        tasks.add(record, size);
        Ok(())
    }

    fn transition_now(
        &self,
        id: &TaskId,
        change: &TaskChange,
        now: u64,
    ) -> Result<Transition, StoreError> {
        change.check_move()?;
        let mut tasks = self.lock();
        // Read, decide and write under one lock: the compare-and-set.
        match plan(tasks.get(id).cloned(), change, now)? {
            Plan::Conflict(current) => Ok(Transition::Conflict(current)),
            Plan::Write(next) => {
                tasks.replace(next.clone());
                Ok(Transition::Applied(next))
            }
        }
    }

    fn list_now(&self, query: TaskQuery<'_>, now: u64) -> Vec<TaskRecord> {
        let tasks = self.lock();
        let mut found: Vec<&TaskRecord> = tasks
            .values()
            .filter(|r| !r.is_expired_at(now) && query.matches(r))
            .collect();
        found.sort_by(|a, b| (a.expires_at(), &a.id).cmp(&(b.expires_at(), &b.id)));
        found.into_iter().take(query.most()).cloned().collect()
    }
}

impl Default for MemoryTaskStore {
    fn default() -> Self {
        Self::new(Self::DEFAULT_CAPACITY)
    }
}

impl std::fmt::Debug for MemoryTaskStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryTaskStore")
            .field("capacity", &self.capacity)
            .field("stored", &self.lock().len())
            .finish()
    }
}

impl TaskStore for MemoryTaskStore {
    fn backend(&self) -> &'static str {
        "memory"
    }

    fn create(&self, record: TaskRecord) -> TaskFuture<'_, ()> {
        let done = self.create_now(record, now_ms(), None);
        Box::pin(async move { done })
    }

    fn create_within(&self, record: TaskRecord, quota: usize) -> TaskFuture<'_, ()> {
        let done = self.create_now(record, now_ms(), Some(quota));
        Box::pin(async move { done })
    }

    fn get<'a>(&'a self, id: &'a TaskId) -> TaskFuture<'a, Option<TaskRecord>> {
        let now = now_ms();
        let found = self
            .lock()
            .get(id)
            .filter(|r| !r.is_expired_at(now))
            .cloned();
        Box::pin(async move { Ok(found) })
    }

    fn transition<'a>(&'a self, id: &'a TaskId, change: TaskChange) -> TaskFuture<'a, Transition> {
        let done = self.transition_now(id, &change, now_ms());
        Box::pin(async move { done })
    }

    fn list<'a>(&'a self, query: TaskQuery<'a>) -> TaskFuture<'a, Vec<TaskRecord>> {
        let found = self.list_now(query, now_ms());
        Box::pin(async move { Ok(found) })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::store::tasks::TaskDecision;
    use serde_json::Value;

    fn record(ttl_ms: u64) -> TaskRecord {
        crate::store::tasks::sample_record(Value::Null, "actx_1", ttl_ms)
    }

    #[test]
    fn full_store_refuses_and_never_evicts_pending_work() {
        let store = MemoryTaskStore::new(2);
        let (a, b) = (record(60_000), record(60_000));
        let now = a.created_at;
        store.create_now(a.clone(), now, None).unwrap();
        store.create_now(b, now, None).unwrap();
        let err = store.create_now(record(60_000), now, None).unwrap_err();
        assert_eq!(
            err,
            StoreError::Full {
                store: StoreKind::Tasks,
                capacity: 2
            }
        );
        assert!(err.to_string().contains("full (2 live tasks)"), "{err}");
        assert!(store.lock().contains_key(&a.id), "nothing was evicted");
        // Once one expires, its place is free again.
        let later = now + 60_000;
        let mut c = record(60_000);
        c.created_at = later;
        c.last_updated_at = later;
        store.create_now(c, later, None).unwrap();
    }

    #[test]
    fn expiry_is_judged_at_the_moment_of_each_call() {
        let store = MemoryTaskStore::new(10);
        let r = record(1000);
        let (id, t0) = (r.id.clone(), r.created_at);
        store.create_now(r, t0, None).unwrap();
        let approve = TaskChange::new(TaskStatus::Working, TaskStatus::Approved)
            .decision(TaskDecision::Approved { by: "ops".into() });
        let at_deadline = store.transition_now(&id, &approve, t0 + 1000).unwrap();
        assert_eq!(at_deadline, Transition::Conflict(None));
        let just_before = store.transition_now(&id, &approve, t0 + 999).unwrap();
        assert!(just_before.is_applied());
        let claim =
            TaskChange::new(TaskStatus::Approved, TaskStatus::Executing).require_remaining_ms(2);
        assert_eq!(
            store.transition_now(&id, &claim, t0 + 999).unwrap_err(),
            StoreError::Expired(id.clone())
        );
        assert!(store.list_now(TaskQuery::new(), t0 + 1000).is_empty());
        assert_eq!(store.list_now(TaskQuery::new(), t0 + 999).len(), 1);
    }

    #[test]
    fn the_byte_budget_refuses_and_frees_with_expiry() {
        let record = |env: &str, ttl_ms: u64| {
            crate::store::tasks::sample_record(json!({"env": env}), "ctx", ttl_ms)
        };
        let one = record(&"x".repeat(1_000), 60_000);
        let size = one.call.params_len();
        let store = MemoryTaskStore::new(100).byte_budget(2 * size + 10);
        store.create_now(one, now_ms(), None).unwrap();
        store
            .create_now(record(&"x".repeat(1_000), 50), now_ms(), None)
            .unwrap();
        assert_eq!(
            store.create_now(record(&"x".repeat(1_000), 60_000), now_ms(), None),
            Err(StoreError::OverBudget {
                budget: 2 * size + 10
            })
        );
        // Once the short-lived one has expired, its bytes are free again.
        assert!(
            store
                .create_now(record(&"x".repeat(1_000), 60_000), now_ms() + 100, None)
                .is_ok()
        );
        assert_eq!(store.lock().bytes, 2 * size);
    }
}
