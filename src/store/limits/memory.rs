//! [`MemoryLimitStore`]: rate-limit counters and calls in flight in this process's memory,
//! bounded.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::gcra::{Step, step};
use super::{AcquireFuture, Lease, LimitFuture, LimitStore, ReleaseFuture, Taken, Tally};
use crate::store::{StoreError, StoreKind};

/// An in-memory [`LimitStore`] for one process: at most `capacity` live counters. A counter
/// whose next call is already due is forgotten when room is needed (it says nothing a fresh
/// one would not); when every counter is live a call needing a new one is refused
/// ([`StoreError::Full`]), never admitted uncounted.
///
/// Calls in flight are counted per holder, in a table of at most `capacity` holders: a holder
/// whose last call ended is forgotten at once, and when `capacity` holders have calls in
/// flight a call of a new one is refused ([`StoreError::Full`]). A lease here never expires:
/// the process that counts the call is the one running it, and every call gives its place
/// back when it ends.
///
/// One process only: behind N replicas each keeps its own counters, and a caller spread over
/// them gets up to N times its rate (and N times its calls in flight). Share a
/// `RedisLimitStore` (feature `redis`) between replicas.
#[derive(Debug)]
pub struct MemoryLimitStore {
    capacity: usize,
    started: Instant,
    counters: Mutex<Counters>,
    /// Holder -> calls in flight (never 0: a holder with none is removed).
    in_flight: Mutex<HashMap<String, u32>>,
    /// The last lease id handed out.
    leases: AtomicU64,
}

/// Group -> counter name -> the TAT: looked up by borrowed names, so a call allocates only for
/// a counter it creates; and how many counters there are.
#[derive(Debug, Default)]
struct Counters {
    by_group: HashMap<String, HashMap<String, u64>>,
    live: usize,
}

impl MemoryLimitStore {
    /// The capacity of the layer's default store: live counters in all.
    pub const DEFAULT_CAPACITY: usize = 100_000;

    /// A store of at most `capacity` live counters.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            started: Instant::now(),
            counters: Mutex::new(Counters::default()),
            in_flight: Mutex::new(HashMap::new()),
            leases: AtomicU64::new(0),
        }
    }

    /// One of `holder`'s `max` places in flight, if one is free.
    fn acquire_now(&self, holder: &str, max: u32) -> Result<Option<Lease>, StoreError> {
        let mut in_flight = self.in_flight.lock().map_err(|_| {
            StoreError::unavailable(StoreKind::Limits, "the in-flight table's lock was poisoned")
        })?;
        let holders = in_flight.len();
        match in_flight.get_mut(holder) {
            Some(count) if *count >= max => return Ok(None),
            Some(count) => *count += 1,
            None if max == 0 => return Ok(None),
            None if holders >= self.capacity => {
                return Err(StoreError::Full {
                    store: StoreKind::Limits,
                    capacity: self.capacity,
                });
            }
            None => {
                in_flight.insert(holder.to_owned(), 1);
            }
        }
        let id = self.leases.fetch_add(1, Ordering::Relaxed);
        Ok(Some(Lease::new(holder, id)))
    }

    /// Gives `lease`'s place back; a holder left with none is forgotten.
    fn release_now(&self, lease: &Lease) {
        // A poisoned lock: a panic while the table was changed under it. Each change is one
        // step on one entry, so the table is whole; the place is given back all the same.
        let mut in_flight = self
            .in_flight
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(count) = in_flight.get_mut(lease.holder()) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                in_flight.remove(lease.holder());
            }
        }
    }

    /// Microseconds since the store was made: the counters' clock (monotonic).
    fn now(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    /// The step for every tally at `now`, committed only if each admits.
    fn take_now(&self, tallies: &[Tally], now: u64) -> Result<Taken, StoreError> {
        // A poisoned lock means a panic mid-update: the counters may be half written, so refuse.
        let mut counters = self.counters.lock().map_err(|_| {
            StoreError::unavailable(StoreKind::Limits, "the counters' lock was poisoned")
        })?;
        let mut next: smallvec::SmallVec<[_; 4]> = smallvec::SmallVec::with_capacity(tallies.len());
        let mut wait: Option<(usize, u64)> = None;
        for (index, tally) in tallies.iter().enumerate() {
            let tat = counters
                .by_group
                .get(&tally.group)
                .and_then(|group| group.get(&tally.name))
                .copied();
            match step(tat, now, &tally.rate) {
                Step::Admit { tat: moved } => next.push((tally, tat.is_none(), moved)),
                Step::Wait { micros } => {
                    // The call passes when every counter would admit it: the longest wait.
                    if wait.is_none_or(|(_, longest)| micros > longest) {
                        wait = Some((wait.map_or(index, |(first, _)| first), micros));
                    }
                }
            }
        }
        if let Some((tally, micros)) = wait {
            return Ok(Taken::Limited {
                tally,
                retry_after: Duration::from_micros(micros),
            });
        }
        let new = next.iter().filter(|(_, created, _)| *created).count();
        if new > 0 && counters.live + new > self.capacity {
            for group in counters.by_group.values_mut() {
                group.retain(|_, tat| *tat > now);
            }
            counters.by_group.retain(|_, group| !group.is_empty());
            counters.live = counters.by_group.values().map(HashMap::len).sum();
            if counters.live + new > self.capacity {
                return Err(StoreError::Full {
                    store: StoreKind::Limits,
                    capacity: self.capacity,
                });
            }
        }
        counters.live += new;
        for (tally, _, tat) in next {
            match counters.by_group.get_mut(&tally.group) {
                Some(group) => match group.get_mut(&tally.name) {
                    Some(counter) => *counter = tat,
                    None => {
                        group.insert(tally.name.clone(), tat);
                    }
                },
                None => {
                    let group = HashMap::from([(tally.name.clone(), tat)]);
                    counters.by_group.insert(tally.group.clone(), group);
                }
            }
        }
        Ok(Taken::Admitted)
    }
}

impl Default for MemoryLimitStore {
    fn default() -> Self {
        Self::new(Self::DEFAULT_CAPACITY)
    }
}

impl LimitStore for MemoryLimitStore {
    fn take<'a>(&'a self, tallies: &'a [Tally]) -> LimitFuture<'a> {
        let taken = self.take_now(tallies, self.now());
        Box::pin(async move { taken })
    }

    fn backend(&self) -> &'static str {
        "memory"
    }

    fn counts_in_flight(&self) -> bool {
        true
    }

    fn acquire<'a>(&'a self, holder: &'a str, max: u32, _lease: Duration) -> AcquireFuture<'a> {
        let acquired = self.acquire_now(holder, max);
        Box::pin(async move { acquired })
    }

    fn release(&self, lease: Lease) -> ReleaseFuture {
        self.release_now(&lease);
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::limits::RateLimit;

    fn tally(group: &str, name: &str, rate: &str) -> Tally {
        Tally::new(group, name, rate.parse::<RateLimit>().expect("rate"))
    }

    #[test]
    fn a_call_is_counted_on_all_its_tallies_or_on_none() {
        let store = MemoryLimitStore::new(10);
        let both = [
            tally("alice", "all", "5/s burst 5"),
            tally("alice", "echo", "1/s"),
        ];
        assert_eq!(store.take_now(&both, 0), Ok(Taken::Admitted));
        // The second tally is out: the first is not counted either.
        assert_eq!(
            store.take_now(&both, 1),
            Ok(Taken::Limited {
                tally: 1,
                retry_after: Duration::from_micros(999_999)
            })
        );
        // "all" holds a burst of 5 and was counted once: four more pass, the fifth does not.
        let first = [tally("alice", "all", "5/s burst 5")];
        for _ in 0..4 {
            assert_eq!(store.take_now(&first, 2), Ok(Taken::Admitted));
        }
        assert!(matches!(
            store.take_now(&first, 2),
            Ok(Taken::Limited { tally: 0, .. })
        ));
    }

    #[test]
    fn one_caller_does_not_touch_another() {
        let store = MemoryLimitStore::new(10);
        let alice = [tally("alice", "all", "1/minute")];
        let bob = [tally("bob", "all", "1/minute")];
        assert_eq!(store.take_now(&alice, 0), Ok(Taken::Admitted));
        assert!(matches!(
            store.take_now(&alice, 1),
            Ok(Taken::Limited { .. })
        ));
        assert_eq!(store.take_now(&bob, 2), Ok(Taken::Admitted));
    }

    #[test]
    fn a_holder_has_at_most_max_calls_in_flight_and_each_release_frees_one() {
        let store = MemoryLimitStore::new(10);
        let first = store.acquire_now("alice", 2).expect("an answer");
        let second = store.acquire_now("alice", 2).expect("an answer");
        assert!(first.is_some() && second.is_some());
        assert_ne!(first, second, "each lease its own id");
        // The third is refused; Bob is not touched.
        assert_eq!(store.acquire_now("alice", 2), Ok(None));
        let bob = store.acquire_now("bob", 2).expect("an answer");
        assert!(bob.is_some());
        // One released: one place free again, not two.
        assert!(store.release(first.expect("a lease")).is_none());
        let third = store.acquire_now("alice", 2).expect("an answer");
        assert!(third.is_some());
        assert_eq!(store.acquire_now("alice", 2), Ok(None));
        // Every lease released: no holder is kept.
        for lease in [second, third, bob].into_iter().flatten() {
            assert!(store.release(lease).is_none());
        }
        assert!(store.in_flight.lock().expect("not poisoned").is_empty());
    }

    #[test]
    fn a_full_in_flight_table_refuses_a_new_holder_until_one_is_done() {
        let store = MemoryLimitStore::new(2);
        let a = store
            .acquire_now("a", 5)
            .expect("an answer")
            .expect("a lease");
        let b = store
            .acquire_now("b", 5)
            .expect("an answer")
            .expect("a lease");
        assert_eq!(
            store.acquire_now("c", 5),
            Err(StoreError::Full {
                store: StoreKind::Limits,
                capacity: 2
            })
        );
        // A holder already in the table still has its places.
        let a2 = store.acquire_now("a", 5).expect("an answer");
        assert!(a2.is_some());
        // b is done: forgotten, and c has room.
        assert!(store.release(b).is_none());
        assert!(matches!(store.acquire_now("c", 5), Ok(Some(_))));
        drop((a, a2));
    }

    #[test]
    fn a_full_store_refuses_then_forgets_counters_that_are_due() {
        let store = MemoryLimitStore::new(2);
        for (at, who) in ["a", "b"].into_iter().enumerate() {
            let taken = store.take_now(&[tally(who, "all", "1/s")], at as u64);
            assert_eq!(taken, Ok(Taken::Admitted));
        }
        assert_eq!(
            store.take_now(&[tally("c", "all", "1/s")], 10),
            Err(StoreError::Full {
                store: StoreKind::Limits,
                capacity: 2
            })
        );
        // A second on, a's and b's counters are due: forgotten, and c has room.
        assert_eq!(
            store.take_now(&[tally("c", "all", "1/s")], 1_000_002),
            Ok(Taken::Admitted)
        );
    }
}
