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
            // Most records are as lean as they get: they stay as they are, judged later.
            if !finished && self.is_lean(alloc) {
                return true;
            }
            violations |= properties::record_violations(self, alloc);
            if !finished {
                self.compact_dead_tasks(alloc);
            }
            !finished
        });
        state.violations = violations;
    }

    /// Nothing of `alloc` would be erased by [`StopPathModel::compact_dead_tasks`]. Asked of
    /// every record at every step, so it only reads: no copy of the record is made.
    fn is_lean(&self, alloc: &Alloc) -> bool {
        !((alloc.desired_stop || alloc.tombstone) && alloc.migrate)
            && self.tasks().all(|(ix, kind)| {
                let task = &alloc.tasks[ix];
                task.phase != TaskPhase::Exited
                    || kind == TaskKind::Poststop
                    || lean_dead_task(task) == *task
            })
    }

    /// Erases from a live `alloc` the details of its dead tasks (see [`lean_dead_task`]) and,
    /// once it is stopped, its `Migrate` bit, which only decides what the scheduler does with
    /// a running allocation.
    fn compact_dead_tasks(&self, alloc: &mut Alloc) {
        if alloc.desired_stop || alloc.tombstone {
            alloc.migrate = false;
        }
        for (ix, kind) in self.tasks() {
            let task = &mut alloc.tasks[ix];
            if task.phase == TaskPhase::Exited && kind != TaskKind::Poststop {
                *task = lean_dead_task(task);
            }
        }
    }
}

/// A dead task keeps only what a witness still looks for: whether it exited on its own
/// during its delay, and whether it was SIGKILLed after its kill timeout.
fn lean_dead_task(task: &Task) -> Task {
    if task.ended_on_own {
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
    }
}
