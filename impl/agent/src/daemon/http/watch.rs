//! Watch sets, as Nomad's state store has (memdb's): a blocking query waits for a write to
//! what it read, not for any write. Before, one signal woke every waiting query on every
//! write, and each asked its read again: 1,000 queries waiting while 200 allocations were
//! stopped one by one were woken 1,000 times a write (`impl/cli/tests/blocking_queries.rs`
//! has the counts).
//!
//! A read that finds nothing new names the [`Key`]s its answer depends on — one object
//! (`Object`), a job's allocations (`JobAllocs`), or a whole table (`Table`, also the
//! fallback where a read depends on more than it can name) — and registers a [`Waiter`]
//! on them while it still holds the core's lock ([`super::blocking`]). Each write reports
//! what it moved (`StateStore::drain_moved`) to [`Watchers::publish`], under the same lock,
//! which wakes the waiters of those keys only: so no write falls between a read's look and
//! its registration. A woken query asks its read again (its index may still not have
//! passed: it waits again).
//!
//! | a write of | wakes the waiters of |
//! |---|---|
//! | a record of table T with ID I | `Object(T, I)`, `Table(T)` |
//! | an allocation of job J | also `JobAllocs(J)` |
//! | an ACL record (tokens, policies) | every waiter: a token deleted ends its queries |
//! | more than the store notes between two publications | every waiter |
//!
//! Bounded: at most [`MAX_WAITERS`] waiters (one per connection; past it a query is
//! refused with 503), at most [`MAX_KEYS`] keys each, and a waiter is gone with its query —
//! answered, timed out, or dropped with a closed connection.

use quiesce_core::server::store::{Moved, Record, TableIndexes};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;

/// The most waiters at once: one per connection (a connection has one request in flight).
pub const MAX_WAITERS: usize = super::server::MAX_CONNECTIONS;

/// The most keys one waiter names; a read that would name more waits on its tables.
pub const MAX_KEYS: usize = 8;

/// A table of the store, as blocking queries name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Table {
    Jobs,
    Allocs,
    Evals,
    Services,
    Nodes,
    Deployments,
    ScalingEvents,
}

impl Table {
    /// The index of this table's last write.
    pub fn index(self, tables: &TableIndexes) -> u64 {
        match self {
            Table::Jobs => tables.jobs,
            Table::Allocs => tables.allocs,
            Table::Evals => tables.evals,
            Table::Services => tables.services,
            Table::Nodes => tables.nodes,
            Table::Deployments => tables.deployments,
            Table::ScalingEvents => tables.scaling_events,
        }
    }

    /// The table and ID of a record (none for the store's index).
    fn of(record: &Record) -> Option<(Table, &str)> {
        Some(match record {
            Record::Index => return None,
            Record::Job(id) => (Table::Jobs, id),
            Record::Alloc(id) => (Table::Allocs, id),
            Record::Eval(id) => (Table::Evals, id),
            Record::Service(id) => (Table::Services, id),
            Record::Node(id) => (Table::Nodes, id),
            Record::Deployment(id) => (Table::Deployments, id),
            Record::ScalingEvents(id) => (Table::ScalingEvents, id),
        })
    }
}

/// What a blocking query waits on.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Key {
    /// Any write to the table.
    Table(Table),
    /// A write to one record of the table: it was created, changed or deleted.
    Object(Table, String),
    /// A write to any allocation of the job.
    JobAllocs(String),
}

#[derive(Default)]
struct Registry {
    next_id: u64,
    /// The waiters of each key, by their ID.
    by_key: HashMap<Key, HashMap<u64, Arc<Notify>>>,
    /// Every waiter, keys or none (one that waits for its `wait` alone is woken by
    /// [`Watchers::wake_all`] too).
    all: HashMap<u64, Arc<Notify>>,
    waiters: usize,
}

/// How blocking queries waited, since the agent started (`/v1/metrics`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WatchCounts {
    /// Queries waiting now.
    pub waiting: u64,
    /// Times a waiting query was woken by a write (its `wait` running out is no wake-up).
    pub woken: u64,
    /// Wake-ups whose read then answered.
    pub answered: u64,
    /// Wake-ups whose read found nothing new and waited again.
    pub waited_again: u64,
    /// Queries refused for want of room ([`MAX_WAITERS`]).
    pub refused: u64,
}

/// The waiters, agent-wide, and the counts of their wake-ups.
#[derive(Default)]
pub struct Watchers {
    registry: Arc<Mutex<Registry>>,
    woken: AtomicU64,
    answered: AtomicU64,
    waited_again: AtomicU64,
    refused: AtomicU64,
}

/// One blocking query's registration, gone when dropped.
pub struct Waiter {
    id: u64,
    keys: Vec<Key>,
    notify: Arc<Notify>,
    registry: Arc<Mutex<Registry>>,
}

impl Watchers {
    fn registry(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.registry
            .lock()
            .expect("the watchers' registry is never poisoned")
    }

    /// Registers a waiter on `keys` (called under the core's lock, as [`Watchers::publish`]
    /// is, so no write is missed between the read's look and this). `None` past
    /// [`MAX_WAITERS`].
    pub fn wait_on(&self, mut keys: Vec<Key>) -> Option<Waiter> {
        keys.sort();
        keys.dedup();
        debug_assert!(keys.len() <= MAX_KEYS, "{keys:?}: too many keys");
        let mut registry = self.registry();
        if registry.waiters >= MAX_WAITERS {
            self.refused.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        registry.next_id += 1;
        registry.waiters += 1;
        let id = registry.next_id;
        let notify = Arc::new(Notify::new());
        registry.all.insert(id, Arc::clone(&notify));
        for key in &keys {
            registry
                .by_key
                .entry(key.clone())
                .or_default()
                .insert(id, Arc::clone(&notify));
        }
        Some(Waiter {
            id,
            keys,
            notify,
            registry: Arc::clone(&self.registry),
        })
    }

    /// Wakes the waiters of what `moved` (called under the core's lock after each write).
    pub fn publish(&self, moved: &Moved) {
        if moved.is_empty() {
            return;
        }
        let registry = self.registry();
        if registry.waiters == 0 {
            return;
        }
        if moved.overflowed {
            wake_every(&registry);
            return;
        }
        let wake = |key: &Key| {
            for notify in registry
                .by_key
                .get(key)
                .into_iter()
                .flat_map(|w| w.values())
            {
                notify.notify_one();
            }
        };
        let mut tables = Vec::new();
        for (table, id) in moved.records.iter().filter_map(Table::of) {
            if !tables.contains(&table) {
                tables.push(table);
            }
            wake(&Key::Object(table, id.to_string()));
        }
        for table in tables {
            wake(&Key::Table(table));
        }
        for job in &moved.job_allocs {
            wake(&Key::JobAllocs(job.to_string()));
        }
    }

    /// Wakes every waiter: an ACL write (a token deleted ends its queries with a 403), or
    /// the agent stopping.
    pub fn wake_all(&self) {
        wake_every(&self.registry());
    }

    /// Counts a wake-up, and then what the read asked again did.
    pub fn count_woken(&self) {
        self.woken.fetch_add(1, Ordering::Relaxed);
    }

    pub fn count_after_wake(&self, answered: bool) {
        let counter = if answered {
            &self.answered
        } else {
            &self.waited_again
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn counts(&self) -> WatchCounts {
        WatchCounts {
            waiting: self.registry().waiters as u64,
            woken: self.woken.load(Ordering::Relaxed),
            answered: self.answered.load(Ordering::Relaxed),
            waited_again: self.waited_again.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
        }
    }
}

fn wake_every(registry: &Registry) {
    for notify in registry.all.values() {
        notify.notify_one();
    }
}

impl Waiter {
    /// Until a write to what it watches (or [`Watchers::wake_all`]); a wake-up that came
    /// between the registration and this call is kept, not lost.
    pub async fn woken(&self) {
        self.notify.notified().await;
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let mut registry = self
            .registry
            .lock()
            .expect("the watchers' registry is never poisoned");
        for key in &self.keys {
            if let Some(waiters) = registry.by_key.get_mut(key) {
                waiters.remove(&self.id);
                if waiters.is_empty() {
                    registry.by_key.remove(key);
                }
            }
        }
        registry.all.remove(&self.id);
        registry.waiters -= 1;
    }
}

impl std::fmt::Debug for Waiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waiter")
            .field("id", &self.id)
            .field("keys", &self.keys)
            .finish()
    }
}

impl PartialEq for Waiter {
    fn eq(&self, other: &Waiter) -> bool {
        self.id == other.id
    }
}

impl Eq for Waiter {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn moved(records: &[Record], jobs: &[&str]) -> Moved {
        Moved {
            records: records.iter().cloned().collect(),
            job_allocs: jobs.iter().map(|&j| j.into()).collect(),
            overflowed: false,
        }
    }

    /// Whether the waiter was woken since it registered (or since the last look).
    fn woken(waiter: &Waiter) -> bool {
        let notified = waiter.notify.notified();
        let mut notified = std::pin::pin!(notified);
        notified.as_mut().enable()
    }

    #[test]
    fn a_write_wakes_the_waiters_of_what_it_moved_only() {
        let watchers = Watchers::default();
        let alloc = |id: &str| Key::Object(Table::Allocs, id.to_string());
        let on_a = watchers.wait_on(vec![alloc("a")]).expect("room");
        let on_b = watchers.wait_on(vec![alloc("b")]).expect("room");
        let on_job = watchers
            .wait_on(vec![Key::JobAllocs("j".into())])
            .expect("room");
        let on_table = watchers.wait_on(vec![Key::Table(Table::Allocs)]).unwrap();
        let on_evals = watchers.wait_on(vec![Key::Table(Table::Evals)]).unwrap();
        watchers.publish(&moved(&[Record::Alloc("a".into())], &["j"]));
        let now: Vec<bool> = [&on_a, &on_b, &on_job, &on_table, &on_evals]
            .into_iter()
            .map(woken)
            .collect();
        assert_eq!(now, [true, false, true, true, false]);
        watchers.publish(&moved(&[Record::Eval("e".into())], &[]));
        assert!(woken(&on_evals) && !woken(&on_a) && !woken(&on_table));
        watchers.publish(&Moved {
            overflowed: true,
            ..Moved::default()
        });
        assert!([&on_a, &on_b, &on_job, &on_table, &on_evals]
            .into_iter()
            .all(woken));
        watchers.wake_all();
        assert!(woken(&on_b));
        // One with no keys (it waits for its `wait` alone) is woken by `wake_all` too.
        let keyless = watchers.wait_on(Vec::new()).unwrap();
        watchers.publish(&moved(&[Record::Job("web".into())], &["web"]));
        assert!(!woken(&keyless));
        watchers.wake_all();
        assert!(woken(&keyless));
    }

    #[test]
    fn a_waiter_is_gone_with_its_query_and_their_number_is_bounded() {
        let watchers = Watchers::default();
        let keys = || vec![Key::JobAllocs("j".into()), Key::Table(Table::Jobs)];
        let first = watchers.wait_on(keys()).expect("room");
        let second = watchers.wait_on(keys()).expect("room");
        assert_eq!(watchers.counts().waiting, 2);
        drop(first);
        drop(second);
        assert_eq!(watchers.counts().waiting, 0);
        assert!(watchers.registry().by_key.is_empty(), "no key left behind");
        assert!(watchers.registry().all.is_empty(), "no waiter left behind");
        let held: Vec<Waiter> = (0..MAX_WAITERS)
            .map(|n| {
                watchers
                    .wait_on(vec![Key::JobAllocs(n.to_string())])
                    .unwrap()
            })
            .collect();
        assert!(watchers.wait_on(keys()).is_none(), "past the bound");
        assert_eq!(watchers.counts().refused, 1);
        drop(held);
        let keys: BTreeSet<_> = watchers.registry().by_key.keys().cloned().collect();
        assert!(keys.is_empty());
        assert!(watchers.wait_on(vec![]).is_some(), "room again");
    }
}
