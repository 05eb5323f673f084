//! A job's status, derived from its allocations as Nomad's state store derives it, and
//! moved with the write that changes it: when the last allocation of a stopped job ends,
//! that write stamps the job's `ModifyIndex` and the jobs table's index and publishes the
//! job (a `Job` event), so a blocking query on the job wakes with `dead` (DESIGN.md,
//! "Index semantics"; Nomad's `setJobStatus`).
//!
//! The derivation differs from Nomad's on purpose: Nomad counts an allocation the server
//! has told to stop as terminal, so a job reads `dead` while its tasks are still in their
//! `shutdown_delay` or kill timeout (Nomad issues #23940, #18148). Here a job is `dead` only
//! once no allocation of it still runs on its client.
//!
//! The store keeps, per job, how many allocations it has and how many still run on their
//! client, updated by every allocation write, so a status is read in O(1): `running` while
//! one runs, `dead` once the job is stopped or all have ended, `pending` before any was
//! placed. The write that changes it also journals the job under its own write type
//! (`AllocationUpdated` for a client's report, `PlanResult` for a placement);
//! `JobModifyIndex` does not move. A restored store counts before it takes its jobs, so a
//! restart moves no index.
//!
//! The model derives the same status (`State::job_status`), its invariant
//! `job_dead_only_when_tasks_ended` forbids `dead` while a task still has a process, and the
//! lockstep walk compares the two after every step (`Observation::status`).
//! `proofs/e2e/test_index_semantics.py` waits for `dead` with blocking queries through a
//! flagged and an unflagged stop of witness tasks.

use super::{Record, StateStore};
use crate::server::structs::Allocation;
use crate::spec::Job;
use std::sync::Arc;

/// What a job's status is derived from: its allocations (tombstones aside), and how many of
/// them are not yet terminal on their client.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Counts {
    allocs: usize,
    live: usize,
    /// An allocation was placed once: a job whose allocations were all collected stays
    /// `dead`, never `pending` again (Nomad's `getJobStatus` with its evaluations deleted).
    placed: bool,
}

impl Counts {
    // invariant: job_dead_only_when_tasks_ended
    /// What one allocation adds.
    pub(super) fn of(alloc: &Allocation) -> Counts {
        if alloc.tombstone {
            return Counts::default();
        }
        Counts {
            allocs: 1,
            live: usize::from(!alloc.client_status.is_terminal()),
            placed: true,
        }
    }

    /// No allocation counts (none left, live or not).
    pub(super) fn is_empty(self) -> bool {
        self.allocs == 0
    }

    // invariant: job_dead_only_when_tasks_ended
    fn status(self, stopped: bool) -> &'static str {
        debug_assert!(
            self.allocs == 0 || self.placed,
            "{self:?}: counted, never placed"
        );
        if self.live > 0 {
            "running"
        } else if stopped || self.placed {
            "dead"
        } else {
            "pending"
        }
    }
}

impl StateStore {
    /// Nomad's job status: `running` while an allocation runs on its client, `dead` once
    /// stopped (or done) with none running, `pending` before any was placed.
    /// (The counts are in memory: a job whose allocations were all collected reads
    /// `pending` again after a restart, until it is stopped or placed.)
    pub fn job_status(&self, job: &Job) -> &'static str {
        self.counts
            .get(job.id.as_str())
            .copied()
            .unwrap_or_default()
            .status(job.stop)
    }

    // invariant: job_dead_only_when_tasks_ended
    /// An allocation of `job_id` that counted as `gone` now counts as `came` (a placement,
    /// an update, a deletion). If that changes the job's status, the job is changed by this
    /// write: its `ModifyIndex` is the write's, and it is journalled and published.
    pub(super) fn recount(&mut self, job_id: &str, gone: Counts, came: Counts) {
        if gone == came {
            return;
        }
        let all = Arc::make_mut(&mut self.counts);
        if !all.contains_key(job_id) {
            all.insert(job_id.into(), Counts::default());
        }
        let counts = all.get_mut(job_id).expect("present, or just inserted");
        let was = *counts;
        debug_assert!(
            counts.allocs >= gone.allocs && counts.live >= gone.live,
            "the counts of {job_id} drifted: {counts:?} less {gone:?}"
        );
        counts.allocs = counts.allocs.saturating_sub(gone.allocs) + came.allocs;
        counts.live = counts.live.saturating_sub(gone.live) + came.live;
        counts.placed |= came.placed;
        let now = *counts;
        // Kept while the job is: a purged (or collected) job's counts go with its last
        // allocation.
        if now.allocs == 0 && !self.jobs.contains_key(job_id) {
            Arc::make_mut(&mut self.counts).remove(job_id);
        }
        let index = self.index;
        let Some(job) = self.jobs.get(job_id).and_then(|v| v.last()) else {
            return;
        };
        if was.status(job.stop) != now.status(job.stop) {
            // Only now: the versions are shared between clones, and a write copies them.
            let versions = Arc::make_mut(&mut self.jobs)
                .get_mut(job_id)
                .map(Arc::make_mut);
            if let Some(job) = versions.and_then(|v| v.last_mut()) {
                job.modify_index = index;
            }
            self.wrote(Record::Job(job_id.into()));
        }
    }
}
