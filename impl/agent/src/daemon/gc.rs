//! The agent's garbage collector: the server's records after Nomad's thresholds, and the
//! client's allocation directories after Nomad's `gc_max_allocs` (issue 24, finding 4).
//!
//! Nomad's thresholds are ages; the server's records carry indexes. As Nomad's time table
//! does, the collector notes the store's index at every pass, with the time, and a
//! threshold's cutoff is the newest index noted at least that long ago: a record last
//! changed at or before it is old enough. (A restarted agent starts a new table, so what it
//! restored is collected a threshold after the restart at the latest.) `PUT /v1/system/gc`
//! collects everything collectable, whatever its age, at once.
//!
//! On the client, the directory of an allocation whose runner was forgotten (its record
//! deleted: purged, or collected) is removed once [`GcConfig::max_alloc_dirs`] newer ones
//! are kept — with its tasks' logs, read until then — with `std::fs::remove_dir_all`, which
//! follows no link a task could have planted.

use super::{say, Shared};
use quiesce_core::server::gc::{Collected, Cutoffs};
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// What is collected when (Nomad's server `job_gc_threshold`, `eval_gc_threshold`,
/// `job_max_versions`, and client `gc_max_allocs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GcConfig {
    pub job_threshold: Duration,
    pub eval_threshold: Duration,
    pub job_max_versions: usize,
    pub max_alloc_dirs: usize,
    /// How often a pass runs (Nomad's core scheduler runs its collections every 5 minutes).
    pub interval: Duration,
}

impl Default for GcConfig {
    fn default() -> Self {
        GcConfig {
            job_threshold: Duration::from_secs(4 * 3600),
            eval_threshold: Duration::from_secs(3600),
            job_max_versions: 6,
            max_alloc_dirs: 50,
            interval: Duration::from_secs(300),
        }
    }
}

/// The most entries of the time table: one per pass, for the longest threshold.
const MAX_TIME_TABLE: usize = 100_000;

/// The collector's state, shared with the HTTP API (which forces passes).
#[derive(Default)]
pub struct Collector {
    state: Mutex<State>,
    woken: Condvar,
}

#[derive(Default)]
struct State {
    /// (the store's index, when it was noted), oldest first.
    times: VecDeque<(u64, Instant)>,
    /// Forced passes asked for and not yet begun.
    forced: u64,
    /// Passes begun, and done (forced or not): a forced pass's caller waits for a pass
    /// begun after it asked.
    begun: u64,
    passes: u64,
    /// Directories of forgotten allocations, oldest first.
    dirs: VecDeque<PathBuf>,
    /// What was collected since the start.
    total: Collected,
}

impl Collector {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .expect("the collector's lock is never poisoned")
    }

    /// Waits at most `left` for a pass to be asked for or to end.
    fn wait<'a>(
        &self,
        state: std::sync::MutexGuard<'a, State>,
        left: Duration,
    ) -> std::sync::MutexGuard<'a, State> {
        self.woken
            .wait_timeout(state, left)
            .expect("the collector's lock is never poisoned")
            .0
    }

    /// What was collected since the start.
    pub fn total(&self) -> Collected {
        self.state().total
    }

    /// Queues the directory of a forgotten allocation; removes the oldest beyond `keep`.
    pub fn forgot(&self, dir: PathBuf, keep: usize) {
        let removed: Vec<PathBuf> = {
            let mut state = self.state();
            state.dirs.push_back(dir);
            let extra = state.dirs.len().saturating_sub(keep);
            state.dirs.drain(..extra).collect()
        };
        for dir in removed {
            if let Err(error) = std::fs::remove_dir_all(&dir) {
                if error.kind() != std::io::ErrorKind::NotFound {
                    say!("removing {}: {error}", dir.display());
                }
            }
        }
    }

    /// The cutoff for `threshold` from the time table: the newest index noted at least that
    /// long before `now` (0 if none is that old).
    fn cutoff(times: &VecDeque<(u64, Instant)>, threshold: Duration, now: Instant) -> u64 {
        times
            .iter()
            .rev()
            .find(|(_, at)| now.saturating_duration_since(*at) >= threshold)
            .map_or(0, |(index, _)| *index)
    }
}

/// A pass now: collects what is old enough (or, `forced`, everything collectable) and
/// stores the deletions; returns what it collected.
fn pass(shared: &Shared, forced: bool) -> Collected {
    let config = shared.config.gc;
    let now = Instant::now();
    let mut core = shared.core();
    let index = core.server.store.index();
    let cutoffs = {
        let mut state = shared.gc.state();
        // Noted on the passes of the interval only: forced passes, as many as clients ask
        // for, would push the old entries out and the cutoffs down.
        if !forced {
            state.times.push_back((index, now));
            while state.times.len() > MAX_TIME_TABLE {
                state.times.pop_front();
            }
        }
        if forced {
            Cutoffs::ALL
        } else {
            Cutoffs {
                evals: Collector::cutoff(&state.times, config.eval_threshold, now),
                jobs: Collector::cutoff(&state.times, config.job_threshold, now),
            }
        }
    };
    let collected = core.server.collect_garbage(cutoffs);
    if !collected.is_empty() {
        core.commit(None, Vec::new());
        shared.notify(&mut core);
    }
    drop(core);
    let mut state = shared.gc.state();
    state.total.jobs += collected.jobs;
    state.total.evals += collected.evals;
    state.total.allocs += collected.allocs;
    collected
}

/// The collector's thread: a pass every interval, and whenever one is forced.
pub(super) fn run(shared: Arc<Shared>) {
    let interval = shared.config.gc.interval;
    let mut next = Instant::now() + interval;
    loop {
        let forced = {
            let mut state = shared.gc.state();
            loop {
                if state.forced > 0 {
                    state.forced = 0;
                    state.begun += 1;
                    break true;
                }
                let left = next.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    state.begun += 1;
                    break false;
                }
                state = shared.gc.wait(state, left);
            }
        };
        if shared.stopping.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        if !forced {
            next = Instant::now() + interval;
        }
        pass(&shared, forced);
        let mut state = shared.gc.state();
        state.passes += 1;
        shared.gc.woken.notify_all();
    }
}

/// `PUT /v1/system/gc`: a forced pass, waited for (at most 30 s).
pub fn force(shared: &Shared) -> Result<(), String> {
    let mut state = shared.gc.state();
    // The next pass to begin is begun after this request.
    let after = state.begun + 1;
    state.forced += 1;
    shared.gc.woken.notify_all();
    let deadline = Instant::now() + Duration::from_secs(30);
    while state.passes < after {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err("the garbage collection did not finish within 30 s".into());
        }
        state = shared.gc.wait(state, left);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_threshold_cuts_at_the_newest_index_noted_that_long_ago() {
        let now = Instant::now();
        let times: VecDeque<(u64, Instant)> = [(10, 3600), (20, 1800), (30, 60), (40, 0)]
            .into_iter()
            .map(|(index, ago)| (index, now - Duration::from_secs(ago)))
            .collect();
        assert_eq!(
            Collector::cutoff(&times, Duration::from_secs(3600), now),
            10
        );
        assert_eq!(
            Collector::cutoff(&times, Duration::from_secs(1000), now),
            20
        );
        assert_eq!(Collector::cutoff(&times, Duration::ZERO, now), 40);
        assert_eq!(Collector::cutoff(&times, Duration::from_secs(7200), now), 0);
    }
}
