//! The daemon's timer thread: runner timers (delays, kill timeouts), the mock driver's
//! scripted exits, and exits to deliver from outside a runner's lock, each due at an instant.
//! A due entry is handed to the dispatcher callback; cancelled runner timers need no removal:
//! each entry names the deadline it was scheduled for, and a runner's shell refuses a timer
//! it no longer has armed, or armed since for another deadline (`RunnerShell::fire_if`).

use quiesce_core::client::{ExitResult, Timer};
use quiesce_core::server::structs::AllocId;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// What is due.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Due {
    /// A runner's timer, with the deadline (Unix ns) of the arming it was scheduled for.
    Timer(Timer, i64),
    /// A mock task may exit now, by its script.
    MockCheck(usize),
    /// A task exited (or could not start) while its runner's lock was held.
    Exited(usize, ExitResultKey),
}

/// An [`ExitResult`], ordered (the heap needs `Ord`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ExitResultKey {
    pub exit_code: i32,
    pub signal: Option<i32>,
    pub failure: Option<String>,
}

impl From<ExitResult> for ExitResultKey {
    fn from(exit: ExitResult) -> Self {
        ExitResultKey {
            exit_code: exit.exit_code,
            signal: exit.signal,
            failure: exit.failure,
        }
    }
}

impl From<ExitResultKey> for ExitResult {
    fn from(exit: ExitResultKey) -> Self {
        ExitResult {
            exit_code: exit.exit_code,
            signal: exit.signal,
            failure: exit.failure,
        }
    }
}

type Entry = Reverse<(Instant, u64, AllocId, Due)>;

#[derive(Default)]
struct Queue {
    heap: BinaryHeap<Entry>,
    seq: u64,
}

/// A handle to the timer thread's queue; clones share it.
#[derive(Clone, Default)]
pub struct Timers {
    shared: Arc<(Mutex<Queue>, Condvar)>,
}

impl Timers {
    pub fn schedule(&self, after: Duration, alloc: &str, due: Due) {
        let (queue, wake) = &*self.shared;
        let mut queue = queue.lock().expect("the timer queue is never poisoned");
        queue.seq += 1;
        let at = Instant::now() + after;
        // The thread sleeps until the earliest entry: only a new earliest one wakes it (a
        // stop of many allocations arms a kill timeout for each, all later than the first).
        let earliest = queue
            .heap
            .peek()
            .is_none_or(|Reverse((first, ..))| at < *first);
        let entry = (at, queue.seq, alloc.into(), due);
        queue.heap.push(Reverse(entry));
        if earliest {
            wake.notify_one();
        }
    }

    /// The timer thread: hands each entry to `dispatch` once it is due. Never returns.
    pub fn run(&self, dispatch: impl Fn(AllocId, Due)) {
        let (queue, wake) = &*self.shared;
        let mut guard = queue.lock().expect("the timer queue is never poisoned");
        loop {
            let now = Instant::now();
            match guard.heap.peek() {
                Some(Reverse((at, ..))) if *at <= now => {
                    let Reverse((_, _, alloc, due)) = guard.heap.pop().expect("peeked");
                    drop(guard);
                    dispatch(alloc, due);
                    guard = queue.lock().expect("the timer queue is never poisoned");
                }
                Some(Reverse((at, ..))) => {
                    let wait = *at - now;
                    guard = wake
                        .wait_timeout(guard, wait)
                        .expect("the timer queue is never poisoned")
                        .0;
                }
                None => guard = wake.wait(guard).expect("the timer queue is never poisoned"),
            }
        }
    }
}
