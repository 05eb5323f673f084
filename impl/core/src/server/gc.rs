//! Garbage collection, as Nomad's core scheduler does it (issue 24, finding 4: nothing was
//! ever collected — per register, stop and purge ~5 KB of state, 3 evaluations, every job
//! version; a million stops would have kept ~5 GB of state).
//!
//! One pass is one indexed write that deletes, given the index at and before which a record
//! counts as old (the daemon turns Nomad's time thresholds into indexes, see `daemon::gc`),
//! by Nomad's rules (`core_sched.go`: `jobIsGCable`, `gcEval`, `allocGCEligible`):
//! * **jobs** that are dead and stopped, or dead batch jobs (a service job whose
//!   allocations all ended but that nobody stopped is kept), whose last change — the job's,
//!   its evaluations' and its allocations' — is at or before the job cutoff, and whose
//!   every evaluation may go: with those evaluations and allocations (`job_gc_threshold`);
//! * **terminal evaluations** at or before the evaluation cutoff once every allocation they
//!   placed may go, and those allocations, even if the evaluation stays
//!   (`eval_gc_threshold`) — except a live batch job's, whose completed allocations are
//!   what keeps the scheduler from running their work again;
//! * **ended allocations** whose evaluation is gone, by the same rule.
//!
//! An allocation is collected only once its client has ended it (client-terminal): the
//! deletion is what the client pulls to forget the runner. Job versions are bounded when
//! they are written instead (`StateStore::limit_job_versions`, Nomad's `job_max_versions`).

use super::events::WriteType;
use super::structs::{AllocId, Allocation, EvalId, EvalStatus, Evaluation, JobId};
use super::Server;
use crate::spec::Job;
use std::collections::{BTreeMap, BTreeSet};

/// The indexes at and before which records count as old: a pass collects what was last
/// changed at them or earlier.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cutoffs {
    pub evals: u64,
    pub jobs: u64,
}

impl Cutoffs {
    /// Everything that is collectable, whatever its age (`PUT /v1/system/gc`).
    pub const ALL: Cutoffs = Cutoffs {
        evals: u64::MAX,
        jobs: u64::MAX,
    };
}

/// What a pass collected.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Collected {
    pub jobs: usize,
    pub evals: usize,
    pub allocs: usize,
}

impl Collected {
    pub fn is_empty(&self) -> bool {
        self.jobs + self.evals + self.allocs == 0
    }
}

impl Server {
    /// One pass: what is collectable under `cutoffs`, deleted in one write (none if there
    /// is nothing to collect).
    pub fn collect_garbage(&mut self, cutoffs: Cutoffs) -> Collected {
        let (jobs, evals, allocs) = self.collectable(cutoffs);
        let collected = Collected {
            jobs: jobs.len(),
            evals: evals.len(),
            allocs: allocs.len(),
        };
        if collected.is_empty() {
            return collected;
        }
        self.store.next_index(WriteType::GarbageCollect);
        for id in &allocs {
            debug_assert!(self
                .store
                .alloc_for_client(id)
                .is_some_and(|a| a.client_status.is_terminal()));
            self.store.delete_alloc(id);
        }
        for id in &evals {
            self.store.delete_eval(id);
        }
        for id in &jobs {
            debug_assert!(self.store.allocs_by_job(id).next().is_none());
            self.store.delete_deployments_of_job(id);
            self.store.delete_job(id);
            self.blocked.remove(id);
        }
        collected
    }

    /// The jobs, evaluations and allocations a pass under `cutoffs` deletes.
    fn collectable(&self, cutoffs: Cutoffs) -> (Vec<JobId>, BTreeSet<EvalId>, BTreeSet<AllocId>) {
        let store = &self.store;
        let mut evals_of: BTreeMap<&str, Vec<&Evaluation>> = BTreeMap::new();
        for eval in store.evals() {
            evals_of.entry(eval.job_id.as_str()).or_default().push(eval);
        }
        // Allocations by the evaluation that placed them, indexed once per pass.
        let mut placed_by: BTreeMap<&str, Vec<&Allocation>> = BTreeMap::new();
        let mut orphans = Vec::new();
        for job_id in store.allocs_by_job_ids() {
            for alloc in store.allocs_by_job(job_id) {
                if store.eval(&alloc.eval_id).is_some() {
                    placed_by
                        .entry(alloc.eval_id.as_str())
                        .or_default()
                        .push(alloc);
                } else {
                    orphans.push(alloc);
                }
            }
        }
        let pass = Pass {
            server: self,
            placed_by,
        };
        let mut jobs = Vec::new();
        let mut evals = BTreeSet::new();
        let mut allocs = BTreeSet::new();
        // Nomad's jobGC: a collectable job whose every evaluation is collectable goes whole.
        for job in store.jobs() {
            let job_evals = evals_of.get(job.id.as_str()).map_or(&[][..], Vec::as_slice);
            let last_change = store
                .allocs_by_job(&job.id)
                .map(|a| a.modify_index)
                .chain(job_evals.iter().map(|e| e.modify_index))
                .fold(job.modify_index, u64::max);
            if last_change > cutoffs.jobs || !pass.job_collectable(job) {
                continue;
            }
            let judged: Vec<_> = job_evals
                .iter()
                .map(|e| pass.eval(e, cutoffs.jobs, true))
                .collect();
            if judged.iter().all(|(whole, _)| *whole)
                && store
                    .allocs_by_job(&job.id)
                    .all(|a| Pass::alloc_collectable(a, cutoffs.jobs))
            {
                jobs.push(job.id.as_str().into());
                evals.extend(job_evals.iter().map(|e| e.id.clone()));
                allocs.extend(store.allocs_by_job(&job.id).map(|a| a.id.clone()));
            }
        }
        // Nomad's evalGC: an evaluation goes once its allocations may; those that may go
        // do even if the evaluation stays.
        for eval in store.evals() {
            if evals.contains(&eval.id) {
                continue;
            }
            let (whole, eligible) = pass.eval(eval, cutoffs.evals, false);
            if whole {
                evals.insert(eval.id.clone());
            }
            allocs.extend(eligible);
        }
        // An allocation whose evaluation is gone goes by the same rule.
        for alloc in orphans {
            let job = store.job(&alloc.job_id);
            if !pass.batch_kept(job, false) && Pass::alloc_collectable(alloc, cutoffs.evals) {
                allocs.insert(alloc.id.clone());
            }
        }
        (jobs, evals, allocs)
    }
}

/// One pass's view of the store.
struct Pass<'a> {
    server: &'a Server,
    placed_by: BTreeMap<&'a str, Vec<&'a Allocation>>,
}

impl Pass<'_> {
    /// Nomad's `jobIsGCable`: dead, and stopped — or a batch job, which ends by itself.
    /// A service job whose allocations all ended, never stopped, is kept (its evaluations
    /// and allocations go by their own rules).
    fn job_collectable(&self, job: &Job) -> bool {
        self.server.store.job_status(job) == "dead"
            && (job.stop || matches!(job.job_type.as_str(), "batch" | "sysbatch"))
    }

    /// A batch job's ended allocations are what keeps the scheduler from running its work
    /// again: they are kept while the job lives — unless it is dead and stopped, or dead
    /// and collected whole (`allow_batch`). Nomad's `gcEval`.
    fn batch_kept(&self, job: Option<&Job>, allow_batch: bool) -> bool {
        let Some(job) = job else {
            return false;
        };
        if !matches!(job.job_type.as_str(), "batch" | "sysbatch") {
            return false;
        }
        let dead = self.server.store.job_status(job) == "dead";
        !(dead && (job.stop || allow_batch))
    }

    /// Nomad's `allocGCEligible`, for what this server has: ended on its client (the
    /// deletion is what the client pulls to forget the runner) and last changed at or
    /// before `cutoff`. (This server does not reschedule a failed allocation, so no
    /// reschedule tracking rides on one.)
    fn alloc_collectable(alloc: &Allocation, cutoff: u64) -> bool {
        alloc.client_status.is_terminal() && alloc.modify_index <= cutoff
    }

    /// Nomad's `gcEval`: whether the evaluation may go (terminal, old, every allocation it
    /// placed collectable), and the allocations of it that may.
    fn eval(&self, eval: &Evaluation, cutoff: u64, allow_batch: bool) -> (bool, Vec<AllocId>) {
        let waiting = matches!(eval.status, EvalStatus::Pending | EvalStatus::Blocked);
        if waiting || eval.modify_index > cutoff {
            return (false, Vec::new());
        }
        let job = self.server.store.job(&eval.job_id);
        if self.batch_kept(job, allow_batch) {
            return (false, Vec::new());
        }
        let placed = self
            .placed_by
            .get(eval.id.as_str())
            .map_or(&[][..], Vec::as_slice);
        let eligible: Vec<AllocId> = placed
            .iter()
            .filter(|a| Pass::alloc_collectable(a, cutoff))
            .map(|a| a.id.clone())
            .collect();
        (eligible.len() == placed.len(), eligible)
    }
}
