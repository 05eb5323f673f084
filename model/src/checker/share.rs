//! What the checker's threads share: the fingerprints generated, in shards each behind its
//! own lock; the work handed from a busy thread to an idle one; the discoveries; the counts.

use super::set::FingerprintSet;
use super::Fingerprint;
use stateright::{Expectation, Model};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

/// A pending state: the state, the index of the action that reached it (of the init state,
/// at depth 1), the `eventually` properties not yet satisfied on its path, its depth.
pub(super) struct Pending<S> {
    pub state: S,
    pub index: usize,
    pub eventually: u64,
    pub depth: usize,
}

/// Work for one thread: pending states, the deepest on top, and the trail of action indices
/// whose prefixes are their parents' paths.
pub(super) struct Job<S> {
    pub trail: Vec<usize>,
    pub pending: Vec<Pending<S>>,
}

/// Counts, published by each thread every 1,024 states and when it ends.
#[derive(Default)]
pub(super) struct Counts {
    pub states: AtomicUsize,
    pub unique: AtomicUsize,
    pub max_depth: AtomicUsize,
}

pub(super) struct Shared<S> {
    pub counts: Counts,
    generated: Box<[Shard]>,
    /// One bit per property that has its discovery, read without the lock.
    discovered: AtomicU64,
    /// The bits of every property.
    all: u64,
    found: Mutex<Vec<Option<Vec<usize>>>>,
    threads: usize,
    work: Mutex<Work<S>>,
    ready: Condvar,
    /// A thread waits for work and none is queued: a busy thread should hand some over.
    hungry: AtomicBool,
    running: AtomicUsize,
    /// The check is ending early: every property discovered, or a thread panicked.
    stopping: AtomicBool,
    done: AtomicBool,
}

/// A shard of the fingerprint set, on cache lines of its own: two threads taking the locks
/// of neighbouring shards would otherwise pass one line back and forth.
#[derive(Default)]
#[repr(align(128))]
struct Shard {
    set: Line<Mutex<FingerprintSet>>,
    /// The set's table and its mask, published when the table grows, for
    /// [`Shared::prefetch`], which reads them without the lock (on a line of their own, so
    /// that reading them does not take the lock's line from the thread that holds it): a
    /// stale pair names memory that may be freed, which a prefetch may name harmlessly.
    table: Line<(AtomicPtr<u64>, AtomicUsize)>,
}

/// A value on a cache line of its own.
#[derive(Default)]
#[repr(align(64))]
struct Line<T>(T);

struct Work<S> {
    jobs: Vec<Job<S>>,
    idle: usize,
    finished: bool,
    handed: usize,
}

/// Shards of the fingerprint set: enough that two or more threads seldom meet on a lock.
const SHARDS: usize = 64;
const _: () = assert!(SHARDS.is_power_of_two());

impl<S> Shared<S> {
    /// The shared state of a check of `model` on `threads` threads, its init states queued.
    pub fn new<M>(model: &M, fingerprint: Fingerprint<M>, threads: usize) -> Self
    where
        M: Model<State = S>,
    {
        let properties = model.properties();
        assert!(
            properties.len() <= 64,
            "the checker keeps a property's bit in one word"
        );
        let all = (0..properties.len()).fold(0u64, |bits, i| bits | 1 << i);
        let eventually = properties
            .iter()
            .enumerate()
            .filter(|(_, p)| p.expectation == Expectation::Eventually)
            .fold(0u64, |bits, (i, _)| bits | 1 << i);
        let shared = Shared {
            counts: Counts::default(),
            generated: (0..SHARDS).map(|_| Shard::default()).collect(),
            discovered: AtomicU64::new(0),
            all,
            found: Mutex::new(vec![None; properties.len()]),
            threads,
            work: Mutex::new(Work {
                jobs: Vec::new(),
                idle: 0,
                finished: false,
                handed: 0,
            }),
            ready: Condvar::new(),
            hungry: AtomicBool::new(false),
            running: AtomicUsize::new(threads),
            stopping: AtomicBool::new(false),
            done: AtomicBool::new(false),
        };
        let mut pending = Vec::new();
        let (mut states, mut unique) = (0, 0);
        for (index, state) in model.init_states().into_iter().enumerate() {
            if model.within_boundary(&state) {
                states += 1;
                unique += usize::from(shared.insert(fingerprint(&state)));
                pending.push(Pending {
                    state,
                    index,
                    eventually,
                    depth: 1,
                });
            }
        }
        shared.counts.states.store(states, Ordering::Relaxed);
        shared.counts.unique.store(unique, Ordering::Relaxed);
        shared.lock_work().jobs.push(Job {
            trail: Vec::new(),
            pending,
        });
        shared
    }

    /// Records a fingerprint; true if it is new.
    pub fn insert(&self, fingerprint: u64) -> bool {
        // The high bits: a shard's table picks a slot by the low ones.
        let shard = (fingerprint >> (64 - SHARDS.trailing_zeros())) as usize;
        let shard = &self.generated[shard];
        let mut set = shard.set.0.lock().unwrap();
        let new = set.insert(fingerprint);
        let (table, mask) = &shard.table.0;
        if mask.load(Ordering::Relaxed) != set.mask() {
            // The table grew (or was made).
            table.store(set.table().cast_mut(), Ordering::Relaxed);
            mask.store(set.mask(), Ordering::Relaxed);
        }
        new
    }

    /// Asks the processor to fetch the cache line where `fingerprint`'s insert will probe,
    /// so that a state's successors' inserts wait for memory together rather than in turn.
    pub fn prefetch(&self, fingerprint: u64) {
        let shard = &self.generated[(fingerprint >> (64 - SHARDS.trailing_zeros())) as usize];
        let (table, mask) = &shard.table.0;
        let table = table.load(Ordering::Relaxed);
        if table.is_null() {
            return;
        }
        let slot = table.wrapping_add(FingerprintSet::first_slot(
            fingerprint,
            mask.load(Ordering::Relaxed),
        ));
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a prefetch is a hint; it reads nothing and faults on no address.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(slot.cast());
        }
        // Elsewhere no prefetch: the inserts wait for memory in turn.
        #[cfg(not(target_arch = "x86_64"))]
        let _ = slot;
    }

    pub fn discovered(&self) -> u64 {
        self.discovered.load(Ordering::Relaxed)
    }

    /// Records property `i`'s discovery at the path `trail` unless it has one; once every
    /// property has one, the check ends (stateright's default, `HasDiscoveries::All`).
    pub fn discover(&self, i: usize, trail: &[usize]) {
        let mut found = self.found.lock().unwrap();
        if found[i].is_none() {
            found[i] = Some(trail.to_vec());
            let discovered = self.discovered.fetch_or(1 << i, Ordering::Relaxed) | 1 << i;
            drop(found);
            if discovered == self.all {
                self.abandon();
            }
        }
    }

    /// Each discovery: the property's index and its path of action indices.
    pub fn discoveries(&self) -> Vec<(usize, Vec<usize>)> {
        let found = self.found.lock().unwrap();
        found
            .iter()
            .enumerate()
            .filter_map(|(i, path)| Some((i, path.clone()?)))
            .collect()
    }

    /// True when a thread waits for work that nobody has queued.
    pub fn hungry(&self) -> bool {
        self.hungry.load(Ordering::Relaxed)
    }

    /// True once every property has its discovery: the check ends early.
    pub fn all_discovered(&self) -> bool {
        self.discovered() == self.all
    }

    /// Queues work for an idle thread.
    pub fn give(&self, job: Job<S>) {
        let mut work = self.lock_work();
        work.jobs.push(job);
        self.hungry
            .store(work.idle > work.jobs.len(), Ordering::Relaxed);
        drop(work);
        self.ready.notify_one();
    }

    /// The next job, waiting for one while another thread is busy; `None` once every thread
    /// is out of work or the check has ended.
    pub fn next_job(&self) -> Option<Job<S>> {
        let mut work = self.lock_work();
        loop {
            if work.finished {
                return None;
            }
            if let Some(job) = work.jobs.pop() {
                self.hungry
                    .store(work.idle > work.jobs.len(), Ordering::Relaxed);
                work.handed += 1;
                return Some(job);
            }
            if work.idle + 1 == self.threads {
                work.finished = true;
                self.ready.notify_all();
                return None;
            }
            work.idle += 1;
            self.hungry.store(true, Ordering::Relaxed);
            work = self.ready.wait(work).unwrap();
            work.idle -= 1;
        }
    }

    /// Ends the check early for every thread: every property is discovered, or a thread is
    /// unwinding from a panic, which `join` passes on (as stateright's does).
    pub fn abandon(&self) {
        self.stopping.store(true, Ordering::Relaxed);
        self.lock_work().finished = true;
        self.ready.notify_all();
    }

    /// True once the check is ending early (see [`Shared::abandon`]).
    pub fn stopping(&self) -> bool {
        self.stopping.load(Ordering::Relaxed)
    }

    /// Jobs taken from the queue: the init states' one, then one per hand-over.
    pub fn jobs_taken(&self) -> usize {
        self.lock_work().handed
    }

    /// A thread adds what it counted since it last did.
    pub fn publish(&self, states: &mut usize, unique: &mut usize, max_depth: usize) {
        self.counts
            .states
            .fetch_add(std::mem::take(states), Ordering::Relaxed);
        self.counts
            .unique
            .fetch_add(std::mem::take(unique), Ordering::Relaxed);
        self.counts
            .max_depth
            .fetch_max(max_depth, Ordering::Relaxed);
    }

    /// A thread has ended; the check is done when the last one has.
    pub fn exit(&self) {
        if self.running.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.done.store(true, Ordering::Release);
        }
    }

    pub fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    fn lock_work(&self) -> MutexGuard<'_, Work<S>> {
        // A thread that panicked never holds this lock (no model code runs under it).
        self.work
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
