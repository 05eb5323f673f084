//! Lean history (`reference/model-sizing.md` §1): what a finished record is reduced to,
//! after the invariants that judged it were folded into sticky bits.
//!
//! Full history keeps every allocation record and job version to the end: it is the mode
//! the lockstep walk follows. Lean history erases what no invariant can still judge, and
//! `tests/all/faults.rs` catches every planted fault in both modes, so erasing loses no
//! violation.

use super::StopPathModel;
use crate::config::TaskKind;
use crate::properties;
use crate::state::{Alloc, Delay, RestartMark, RunnerPhase, State, Task, TaskPhase};

impl StopPathModel {
    /// Lean history: erase every finished allocation record, the details of every dead task
    /// of a live one, a stopped allocation's `Migrate` bit and every job version but the
    /// latest, after folding the invariants that judged them into the sticky violation bits
    /// (`reference/model-sizing.md` §1).
    pub(super) fn erase_finished(&self, state: &mut State) {
        let mut violations = state.violations;
        if state.job.versions.len() > 1 {
            if !properties::jobspec_unchanged(self, state) {
                violations |= properties::Violation::JobspecChanged as u16;
            }
            state.job.versions.drain(..state.job.versions.len() - 1);
        }
        state.allocs.retain_mut(|alloc| {
            let finished = alloc.runner == RunnerPhase::Terminal && !alloc.sync_pending();
            let compact = if finished {
                None
            } else {
                match self.compact_dead_tasks(alloc) {
                    // Nothing to erase: the record stays as it is, judged later.
                    None => return true,
                    compact => compact,
                }
            };
            violations |= properties::record_violations(self, alloc);
            if let Some(compact) = compact {
                *alloc = compact;
            }
            !finished
        });
        state.violations = violations;
    }

    /// A dead task keeps only what a witness still looks for: whether it exited on its own
    /// during its delay, and whether it was SIGKILLed after its kill timeout. `None` when
    /// that changes nothing: the model erases at every step, and most records are as lean
    /// as they get, so no copy is made for them.
    pub(super) fn compact_dead_tasks(&self, alloc: &Alloc) -> Option<Alloc> {
        let mut compact: Option<Alloc> = None;
        // Migrate only decides what the scheduler does with a running allocation.
        if (alloc.desired_stop || alloc.tombstone) && alloc.migrate {
            compact.get_or_insert(*alloc).migrate = false;
        }
        for (ix, kind) in self.tasks() {
            let task = &alloc.tasks[ix];
            if task.phase != TaskPhase::Exited || kind == TaskKind::Poststop {
                continue;
            }
            let lean = if task.ended_on_own {
                // Its last run ended on its own, and no kill followed.
                Task {
                    phase: TaskPhase::Exited,
                    ended_on_own: true,
                    ..Task::NOT_STARTED
                }
            } else {
                Task {
                    phase: TaskPhase::Exited,
                    // A restart's kill records no `Killing`.
                    killing: task.killing,
                    pre_kill: true,
                    service_registered: false,
                    delay: if task.delay == Delay::ExitedDuring {
                        Delay::ExitedDuring
                    } else {
                        Delay::None
                    },
                    signalled: true,
                    kill_timeout_fired: task.sigkilled,
                    sigkilled: task.sigkilled,
                    restart: if task.restart == RestartMark::None {
                        RestartMark::None
                    } else {
                        RestartMark::Unflagged
                    },
                    restarts: 0,
                    ended_on_own: false,
                }
            };
            if lean != *task {
                compact.get_or_insert(*alloc).tasks[ix] = lean;
            }
        }
        compact
    }
}
