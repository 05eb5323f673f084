//! The client: pulls, the delay cancellation, and the kill sequence of a stop — group
//! pre-kill hooks and delay, then each task's pre-kill hooks, delay, signal, kill timeout —
//! and a client restart's restored runners.

use super::StopPathModel;
use crate::config::{Fault, TaskKind, MAX_TASKS};
use crate::state::{Alloc, Delay, RestartMark, RunnerPhase, State, TaskPhase};

impl StopPathModel {
    pub(super) fn client_sync(&self, state: &mut State, ix: usize) {
        let alloc = &mut state.allocs[ix];
        let view = alloc
            .server_view()
            .expect("sync is offered for a record the server holds");
        alloc.pulled = Some(view);
        // flag_is_honoured: this is the client's next update after a flagged request.
        if alloc.flag_requested {
            alloc.flag_due = true;
        }
        match alloc.runner {
            RunnerPhase::Pending if view.stop && !self.has(Fault::StopBeforeStartIgnored) => {
                // Stopped before it started: nothing runs, nothing to kill.
                self.finish(alloc);
            }
            RunnerPhase::Pending => self.start_runner(alloc),
            RunnerPhase::Running if view.stop => {
                alloc.runner = RunnerPhase::PreKill;
                self.end_restart_backoffs(alloc);
            }
            _ => {}
        }
        // Any update carrying the flag cancels the delays at once, even mid-wait (§2.2).
        if view.no_shutdown_delay {
            if self.has(Fault::CancellationSharedByNode) {
                let node = state.allocs[ix].node;
                for other in 0..state.allocs.len() {
                    if state.allocs[other].node == node && !state.allocs[other].removed {
                        self.cancel_delays(&mut state.allocs[other]);
                    }
                }
            } else {
                self.cancel_delays(&mut state.allocs[ix]);
            }
        }
    }

    /// Fire the runner's delay cancellation: a wait in progress ends at once, a wait not yet
    /// started will be skipped.
    pub(super) fn cancel_delays(&self, alloc: &mut Alloc) {
        if alloc.cancelled || alloc.runner == RunnerPhase::Terminal {
            return;
        }
        alloc.cancelled = true;
        if self.has(Fault::DelayInProgressNotCutShort) {
            return;
        }
        if alloc.group_delay == Delay::Waiting {
            alloc.group_delay = Delay::CutShort;
            alloc.runner = RunnerPhase::Killing;
        }
        if self.has(Fault::FlagHonouredAtGroupLevelOnly) {
            return;
        }
        for ix in 0..MAX_TASKS {
            if alloc.tasks[ix].phase == TaskPhase::Delaying {
                alloc.tasks[ix].delay = Delay::CutShort;
                self.end_task_delay(alloc, ix);
            }
        }
        self.settle_runner(alloc);
    }

    pub(super) fn group_pre_kill(&self, alloc: &mut Alloc) {
        let skip_hooks = self.has(Fault::PreKillHooksSkippedWhenFlagged) && alloc.cancelled;
        if !skip_hooks {
            alloc.group_pre_kill = true;
            alloc.group_service_registered = false;
        }
        alloc.runner = RunnerPhase::Killing;
        if alloc.spec.group_shutdown_delay {
            if alloc.cancelled {
                alloc.group_delay = Delay::Skipped;
            } else {
                alloc.group_delay = Delay::Waiting;
                alloc.runner = RunnerPhase::GroupDelay;
            }
        }
    }

    pub(super) fn group_delay_elapsed(&self, alloc: &mut Alloc) {
        debug_assert_eq!(alloc.group_delay, Delay::Waiting);
        alloc.group_delay = Delay::Elapsed;
        alloc.runner = RunnerPhase::Killing;
    }

    /// The task's kill begins: `Killing`, its pre-kill hooks, then its delay (§2.4).
    pub(super) fn task_pre_kill(&self, alloc: &mut Alloc, ix: usize) {
        let cancelled = alloc.cancelled;
        let skip_hooks = self.has(Fault::PreKillHooksSkippedWhenFlagged) && cancelled;
        let signal_first = self.has(Fault::SignalBeforeDeregistration);
        let task = &mut alloc.tasks[ix];
        task.killing = true;
        if signal_first {
            task.signalled = true;
        } else if !skip_hooks {
            task.pre_kill = true;
            task.service_registered = false;
        }
        let honours_flag = cancelled && !self.has(Fault::FlagHonouredAtGroupLevelOnly);
        self.start_task_delay(alloc, ix, honours_flag);
    }

    /// After the task's pre-kill hooks (a stop's or a restart's): its delay starts, or —
    /// none set, or the flag honoured — is skipped and the kill signal sent.
    pub(super) fn start_task_delay(&self, alloc: &mut Alloc, ix: usize, honours_flag: bool) {
        let task = &mut alloc.tasks[ix];
        if alloc.spec.task_shutdown_delay[ix] && !honours_flag {
            task.delay = Delay::Waiting;
            task.phase = TaskPhase::Delaying;
        } else {
            if alloc.spec.task_shutdown_delay[ix] {
                task.delay = Delay::Skipped;
            }
            self.end_task_delay(alloc, ix);
        }
    }

    /// The delay is over (or there was none): the kill signal is sent.
    pub(super) fn end_task_delay(&self, alloc: &mut Alloc, ix: usize) {
        let sigkill_now = self.has(Fault::FlagBypassesKillTimeout) && alloc.cancelled;
        let task = &mut alloc.tasks[ix];
        let restart_signals_first =
            self.has(Fault::RestartSignalsBeforePreKill) && task.restart != RestartMark::None;
        if self.has(Fault::SignalBeforeDeregistration) || restart_signals_first {
            task.pre_kill = true;
            task.service_registered = false;
        }
        task.signalled = true;
        task.phase = TaskPhase::Signalled;
        if sigkill_now {
            task.signalled = false;
            task.sigkilled = true;
            self.task_exited(alloc, ix);
        }
    }

    pub(super) fn task_exited(&self, alloc: &mut Alloc, ix: usize) {
        let task = &mut alloc.tasks[ix];
        match task.phase {
            TaskPhase::Running => {
                // A crash: the exited hooks deregister its services; the policy decides next.
                task.phase = TaskPhase::Crashed;
                task.ended_on_own = true;
                task.service_registered = false;
                return;
            }
            TaskPhase::Delaying => task.delay = Delay::ExitedDuring,
            _ => {}
        }
        task.phase = TaskPhase::Exited;
        // The exited hook deregisters the task's services again (idempotent).
        task.service_registered = false;
        // A restart's kill is over: in a runner still running, the task runs again at once
        // (an operator's restart waits no restart delay and uses no attempt).
        if task.restart != RestartMark::None && alloc.runner == RunnerPhase::Running {
            if task.restart == RestartMark::Flagged {
                alloc.flagged_restart_done = true;
            }
            self.run_again(alloc, ix);
        }
    }

    /// SIGKILL, and — for a stop's kill — the forced exit in the same step. A restart's
    /// forced exit is a `TaskExit` of its own: the task then runs again, and a stop arriving
    /// in between decides whether it does, so the two must not be merged.
    pub(super) fn kill_timeout(&self, alloc: &mut Alloc, ix: usize) {
        let task = &mut alloc.tasks[ix];
        task.kill_timeout_fired = true;
        task.sigkilled = true;
        if task.restart == RestartMark::None {
            self.task_exited(alloc, ix);
        }
    }

    /// After a task or poststop step: the runner is terminal once every task that will run
    /// is dead.
    pub(super) fn settle_runner(&self, alloc: &mut Alloc) {
        if alloc.runner != RunnerPhase::Killing || !self.non_poststop_done(alloc) {
            return;
        }
        let poststop_over = self.tasks().all(|(ix, kind)| {
            kind != TaskKind::Poststop
                || alloc.tasks[ix].phase == TaskPhase::Exited
                || (self.poststop_skipped(alloc) && alloc.tasks[ix].phase == TaskPhase::NotStarted)
        });
        if poststop_over {
            self.finish(alloc);
        }
    }

    /// Client-terminal: postrun hooks deregister the group services again, the status is
    /// reported, and a tombstone is removed from the server.
    pub(super) fn finish(&self, alloc: &mut Alloc) {
        alloc.runner = RunnerPhase::Terminal;
        alloc.group_service_registered = false;
        if alloc.tombstone {
            alloc.removed = true;
        }
    }

    /// Runners are restored from stored state. quiesce applies the flag the stored allocation
    /// carries (DESIGN.md); Nomad does not.
    pub(super) fn client_restart(&self, state: &mut State) {
        state.requests_made += 1;
        for alloc in state.allocs.iter_mut() {
            let Some(pulled) = alloc.pulled else { continue };
            if alloc.runner == RunnerPhase::Terminal {
                continue;
            }
            if pulled.no_shutdown_delay {
                state.ghost.restarted_with_flag = true;
            }
            alloc.cancelled = false;
            if pulled.no_shutdown_delay && !self.has(Fault::NomadRestoreIgnoresFlag) {
                self.cancel_delays(alloc);
            }
        }
    }
}
