//! The operator's requests to the server and the scheduler's reconciliation: one atomic
//! write each, as `reference/nomad-stop-path.md` §1 describes them.

use super::StopPathModel;
use crate::config::{Fault, MAX_ALLOCS, MAX_TASKS};
use crate::state::{Job, JobVersion, RunnerPhase, State};

impl StopPathModel {
    pub(super) fn stop_job(&self, state: &mut State, purge: bool, no_shutdown_delay: bool) {
        debug_assert!(!state.job.purged);
        state.requests_made += 1;
        state.eval_pending = true;
        if state.ghost.alloc_stop_seen {
            state.ghost.alloc_stop_then_job_stop = true;
        }
        if no_shutdown_delay {
            state.ghost.flagged_stop_seen = true;
            // The flag goes to every allocation of the job, terminal or not (§1.4 step 2),
            // never to the job (jobspec_unchanged).
            for alloc in state.allocs.iter_mut().filter(|alloc| !alloc.removed) {
                alloc.flag_requested = true;
                alloc.no_shutdown_delay = true;
            }
        }
        if purge {
            // DESIGN.md: the job is deleted at once; each allocation becomes a tombstone
            // carrying desired stop and the flag, removed when the client reports it terminal.
            state.job = Job {
                versions: Vec::new(),
                purged: true,
            };
            for alloc in state.allocs.iter_mut().filter(|alloc| !alloc.removed) {
                if alloc.runner == RunnerPhase::Terminal {
                    alloc.removed = true;
                } else {
                    alloc.tombstone = true;
                    if self.has(Fault::NomadPurgeDropsFlag) {
                        alloc.no_shutdown_delay = false;
                    }
                }
            }
        } else {
            let latest = *state
                .job
                .latest()
                .expect("a job that is not purged has a version");
            let mut spec = latest.spec;
            if no_shutdown_delay && self.has(Fault::FlagWrittenIntoJob) {
                spec.group_shutdown_delay = false;
                spec.task_shutdown_delay = [false; MAX_TASKS];
            }
            // A stop is a new version differing from the last in `Stop` only.
            state.job.versions.push(JobVersion { spec, stop: true });
        }
    }

    pub(super) fn stop_alloc(&self, state: &mut State, ix: usize, no_shutdown_delay: bool) {
        state.requests_made += 1;
        state.eval_pending = true;
        state.ghost.alloc_stop_seen = true;
        let node = state.allocs[ix].node;
        let alloc = &mut state.allocs[ix];
        alloc.migrate = true;
        if no_shutdown_delay {
            alloc.flag_requested = true;
            alloc.no_shutdown_delay = true;
            if self.has(Fault::FlagAppliedToWholeNode) {
                for other in state
                    .allocs
                    .iter_mut()
                    .filter(|o| o.node == node && !o.removed)
                {
                    other.no_shutdown_delay = true;
                }
            }
        } else if self.has(Fault::NomadAllocStopResetsFlag) {
            alloc.no_shutdown_delay = false;
        }
        // Otherwise the flag is sticky: an unflagged stop leaves it as it was.
    }

    pub(super) fn start_job(&self, state: &mut State) {
        state.requests_made += 1;
        state.eval_pending = true;
        if state.ghost.flagged_stop_seen {
            state.ghost.started_after_flagged_stop = true;
        }
        let latest = *state
            .job
            .latest()
            .expect("start is offered for a stopped job only");
        state.job.versions.push(JobVersion {
            spec: latest.spec,
            stop: false,
        });
    }

    /// Reconcile: stop every non-terminal allocation of a stopped job; stop and replace
    /// migrating ones; place up to `count` (§1.6).
    pub(super) fn process_eval(&self, state: &mut State) {
        state.eval_pending = false;
        let Some(latest) = state.job.latest().copied() else {
            return;
        };
        if latest.stop {
            for alloc in state.allocs.iter_mut().filter(|alloc| !alloc.is_terminal()) {
                alloc.desired_stop = true;
            }
            return;
        }
        for alloc in state.allocs.iter_mut() {
            if alloc.migrate && !alloc.is_terminal() {
                alloc.desired_stop = true;
            }
        }
        let live = state
            .allocs
            .iter()
            .filter(|alloc| !alloc.is_terminal())
            .count();
        for _ in live..usize::from(self.cfg.count) {
            assert!(
                state.allocs.len() < MAX_ALLOCS,
                "more than {MAX_ALLOCS} allocations"
            );
            let node = self.least_loaded_node(state);
            let alloc = self.new_alloc(latest.spec, node, &state.ghost);
            state.allocs.push(alloc);
        }
    }

    /// The node with the fewest non-terminal allocations, the lowest on a tie. It depends on
    /// the multiset of records only, never on their order (required by symmetry).
    pub(super) fn least_loaded_node(&self, state: &State) -> u8 {
        (0..self.cfg.nodes)
            .min_by_key(|&node| {
                state
                    .allocs
                    .iter()
                    .filter(|a| a.node == node && !a.is_terminal())
                    .count()
            })
            .expect("at least one node")
    }
}
