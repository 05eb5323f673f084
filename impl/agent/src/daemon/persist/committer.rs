//! The committer thread: batches are committed in the order they were submitted, whatever
//! is queued merged into one redb transaction (group commit); API writes wait for theirs to
//! be durable, runner progress is synced at most [`DURABILITY_LAG`] later (see the
//! module above).
//!
//! A commit that fails (`ENOSPC`, any I/O error) does not stop the agent. The committer
//! says so once, puts the failed batches back at the head of its queue, after those
//! committed since the last sync, which reopening may lose (every write is a put or a
//! delete by key, so committing one again is harmless), merged into one; waits
//! [`RETRY_AFTER`], reopens the database (redb refuses everything after an I/O error until
//! it is reopened), and commits again, synced, until it succeeds ("storing state again").
//! Meanwhile an API write waiting for its batch gets a 500 naming the error (its batch is
//! kept), later writes are refused up front with a 503, reads answer, tasks run on, stops
//! under way go on, and no update is pulled (a plan the store does not hold is not acted
//! on). The agent's log lines never panic (`say!`: `eprintln!` panics when stderr is a
//! file on the full disk). `proofs/e2e/test_disk_faults.py` tests it on a 32 MiB tmpfs.

use super::{Batch, Persist, StoreError, DURABILITY_LAG, RETRY_AFTER};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

#[derive(Default)]
struct Queue {
    batches: Vec<Batch>,
    /// Batches submitted so far; a batch's ticket is its number.
    submitted: u64,
    /// Batches durable so far.
    durable: u64,
    /// The committer thread waits for batches (a submit wakes it only then).
    committer_asleep: bool,
    /// The last commit failed (a full disk, say), with this error: it is retried every
    /// [`RETRY_AFTER`] until it succeeds, and writes are refused until then.
    failing: Option<StoreError>,
}

/// The committer thread's queue: batches go in in order and are committed in that order,
/// several at a time.
#[derive(Clone)]
pub struct Committer {
    shared: Arc<(Mutex<Queue>, Condvar)>,
}

impl Committer {
    /// Starts the committer thread over `persist`.
    pub fn start(persist: Persist) -> Result<Committer, StoreError> {
        let committer = Committer {
            shared: Arc::new((Mutex::new(Queue::default()), Condvar::new())),
        };
        let thread = committer.clone();
        std::thread::Builder::new()
            .name("committer".into())
            .spawn(move || thread.run(persist))
            .map_err(|e| StoreError::NoCommitter(e.to_string()))?;
        Ok(committer)
    }

    fn queue(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.shared
            .0
            .lock()
            .expect("the commit queue is never poisoned")
    }

    /// Queues a batch; returns its ticket for [`Committer::wait`].
    pub fn submit(&self, batch: Batch) -> u64 {
        let mut queue = self.queue();
        queue.batches.push(batch);
        queue.submitted += 1;
        if queue.committer_asleep {
            self.shared.1.notify_all();
        }
        queue.submitted
    }

    /// Waits until the batch with `ticket` (and every batch before it) is durable.
    pub fn wait(&self, ticket: u64) -> Result<(), StoreError> {
        let mut queue = self.queue();
        loop {
            if queue.durable >= ticket {
                return Ok(());
            }
            if let Some(failure) = &queue.failing {
                return Err(StoreError::Retrying(Box::new(failure.clone())));
            }
            queue = self
                .shared
                .1
                .wait(queue)
                .expect("the commit queue is never poisoned");
        }
    }

    /// How many batches are durable (a batch's ticket is its number).
    pub fn durable(&self) -> u64 {
        self.queue().durable
    }

    /// Why commits fail now, if they do: an API write is refused up front then (nothing
    /// changes), rather than taken in memory and not stored.
    pub fn failing(&self) -> Option<StoreError> {
        self.queue().failing.clone()
    }

    fn run(&self, persist: Persist) {
        let mut persist = persist;
        // When the oldest commit that is not durable yet was made, and the batches committed
        // since the last durable commit: a failed commit's reopen may lose them, so a retry
        // commits them again (every write is a put or a delete by key: idempotent).
        let mut undurable: Option<Instant> = None;
        let mut since_durable: Vec<Batch> = Vec::new();
        loop {
            let (batches, upto) = {
                let mut queue = self.queue();
                while queue.batches.is_empty() {
                    // Asleep until a batch comes, or until the oldest undurable commit is
                    // due for its sync.
                    let due = undurable.map(|since| {
                        (since + DURABILITY_LAG).saturating_duration_since(Instant::now())
                    });
                    if due.is_some_and(|left| left.is_zero()) {
                        break;
                    }
                    queue.committer_asleep = true;
                    let poisoned = "the commit queue is never poisoned";
                    queue = match due {
                        Some(left) => self.shared.1.wait_timeout(queue, left).expect(poisoned).0,
                        None => self.shared.1.wait(queue).expect(poisoned),
                    };
                    queue.committer_asleep = false;
                }
                (std::mem::take(&mut queue.batches), queue.submitted)
            };
            // Durable if someone waits for it, or if the oldest undurable commit is due (an
            // empty group: the wait above timed out).
            let durable = batches.iter().any(|batch| batch.durable)
                || undurable.is_some_and(|since| since.elapsed() >= DURABILITY_LAG);
            let result = persist.commit(&batches, durable);
            let mut queue = self.queue();
            if result.is_ok() && queue.failing.take().is_some() {
                crate::daemon::say!("storing state again");
            }
            match result {
                Ok(()) if durable => {
                    undurable = None;
                    since_durable.clear();
                    // Batches become durable in the order they were submitted, never twice.
                    debug_assert!(
                        queue.durable <= upto && upto <= queue.submitted,
                        "durable {} -> {upto} of {} submitted",
                        queue.durable,
                        queue.submitted
                    );
                    queue.durable = upto;
                }
                Ok(()) => {
                    undurable.get_or_insert_with(Instant::now);
                    since_durable.extend(batches);
                }
                Err(failure) => {
                    // Nothing later may commit over a lost batch: the failed ones go back
                    // at the head of the queue, after those the reopen may lose, in order.
                    if queue.failing.is_none() {
                        crate::daemon::say!(
                            "storing state failed: {failure}; API writes are \
                             refused and the agent retries every {RETRY_AFTER:?}"
                        );
                    }
                    queue.failing = Some(failure);
                    let mut retry = std::mem::take(&mut since_durable);
                    retry.extend(batches);
                    retry.append(&mut queue.batches);
                    // One batch, the last value of each record: a long outage holds one
                    // copy of each runner's state, not one per step.
                    queue.batches = vec![Batch::merge(retry)];
                    self.shared.1.notify_all();
                    drop(queue);
                    std::thread::sleep(RETRY_AFTER);
                    let (db_path, log_path) = (persist.db_path.clone(), persist.log_path.clone());
                    drop(persist);
                    persist = loop {
                        match Persist::reopen(db_path.clone(), log_path.clone()) {
                            Ok(reopened) => break reopened,
                            Err(failure) => {
                                self.queue().failing = Some(failure);
                                std::thread::sleep(RETRY_AFTER);
                            }
                        }
                    };
                    // Every retry syncs: what it stores was acknowledged or waited for.
                    undurable = Some(Instant::now() - DURABILITY_LAG);
                    continue;
                }
            }
            self.shared.1.notify_all();
        }
    }
}
