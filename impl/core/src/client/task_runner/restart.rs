//! A task's restarts: in place (the operator's, through the task's half of the kill
//! sequence), and by its restart policy after it ended on its own.
//!
//! The policy is the group's `RestartPolicy`, overridden field by field by the task's,
//! with Nomad's defaults where both are unset (`RestartPolicy::effective`). Unlike Nomad,
//! a restart delay has no jitter (Nomad adds up to 25 %). A task the policy leaves dead
//! stops the rest as Nomad does: the leader's death, a failed task or the last main task's
//! end kills the others through the stop path (`Leader Task Dead`, `Sibling Task Failed`,
//! `Main Tasks Dead`), and the allocation ends `complete` or `failed`.

use super::{event, ExitResult, TaskPhase, TaskRunner};
use crate::client::{Command, DelayOutcome, Timer};
use crate::gotime::go_duration;
use crate::server::structs::{event_types, TaskStateName};
use crate::spec::RestartMode;
use crate::text::joined;
use serde::{Deserialize, Serialize};

/// Whether the task's kill in progress is an in-place restart's, and whether that restart
/// asked for `-no-shutdown-delay`. One-shot: cleared when the task runs again.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum RestartMark {
    #[default]
    None,
    Unflagged,
    Flagged,
}
/// The restart policy's answer about a task that ended on its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Run it again after this long.
    Restart { delay_ns: i64, reason: String },
    /// It stays dead (`failed`: and fails its allocation).
    Stop { failed: bool, reason: String },
}

impl TaskRunner {
    // invariant: delay_skipped_only_when_flagged
    /// An in-place restart begins (`alloc restart`): `Restart Signaled`, then the task's half
    /// of the kill sequence — pre-kill hooks, its delay (skipped if this restart carries the
    /// flag or a flagged stop cancelled the runner's delays), the signal. When the task has
    /// exited it runs again (see [`TaskRunner::run_again`]).
    pub(in crate::client) fn begin_restart(
        &mut self,
        ix: usize,
        no_shutdown_delay: bool,
        cancelled: bool,
        now: i64,
        out: &mut Vec<Command>,
    ) {
        debug_assert_eq!(self.phase, TaskPhase::Running);
        self.kills += 1;
        self.restart = if no_shutdown_delay {
            RestartMark::Flagged
        } else {
            RestartMark::Unflagged
        };
        self.record(event(
            event_types::RESTART_SIGNALED,
            now,
            "User requested restart",
            [("restart_reason", "User requested restart".into())],
        ));
        self.kill_from_hooks(ix, cancelled || no_shutdown_delay, now, out);
    }

    /// Its last run ended in an error the driver reported: the policy will not retry it.
    pub fn unrecoverable(&self) -> bool {
        self.last_exit
            .as_ref()
            .is_some_and(|exit| exit.failure.is_some())
    }

    // invariant: services_restored
    /// The process ended on its own while it ran (no kill had begun): `Terminated`, the
    /// exited hooks deregister its services, and the restart policy decides next.
    pub(in crate::client) fn ended_on_its_own(
        &mut self,
        ix: usize,
        exit: ExitResult,
        now: i64,
        out: &mut Vec<Command>,
    ) {
        debug_assert_eq!(self.phase, TaskPhase::Running);
        self.record_exit(&exit, now);
        self.phase = TaskPhase::Crashed;
        self.state.state = TaskStateName::Pending;
        self.last_exit = Some(exit);
        for hook in self.stop_hooks() {
            hook.stop(ix, out);
        }
    }

    // invariant: restart_policy_respected
    /// The restart policy's answer for the run that just ended on its own (Nomad's restart
    /// tracker): an error the driver reported is not retried; a batch task that exited
    /// cleanly is done; otherwise a restart while attempts are left in the interval, then —
    /// `mode = "fail"` — none, or — `mode = "delay"` — one when the interval is over.
    pub(in crate::client) fn decide(&mut self, now: i64) -> Decision {
        let exit = self.last_exit.clone().unwrap_or(ExitResult {
            exit_code: 0,
            signal: None,
            failure: None,
        });
        let policy = self.restart_policy;
        if self.unrecoverable() {
            return Decision::Stop {
                failed: true,
                reason: "Error was unrecoverable".into(),
            };
        }
        if self.batch && exit.exit_code == 0 && exit.signal.is_none() {
            // A batch task's, or an ephemeral lifecycle task's, clean end.
            return Decision::Stop {
                failed: false,
                reason: "Restart unnecessary as task terminated successfully".into(),
            };
        }
        let start = *self.interval_start_ns.get_or_insert(now);
        if now.saturating_sub(start) > policy.interval_ns {
            self.interval_start_ns = Some(now);
            self.policy_restarts = 0;
        }
        if self.policy_restarts < policy.attempts {
            self.policy_restarts += 1;
            return Decision::Restart {
                delay_ns: policy.delay_ns,
                reason: "Restart within policy".into(),
            };
        }
        match policy.mode {
            RestartMode::Fail => Decision::Stop {
                failed: true,
                reason: format!(
                    "Exceeded allowed attempts {} in interval {} and mode is \"fail\"",
                    policy.attempts,
                    go_duration(policy.interval_ns)
                ),
            },
            RestartMode::Delay => {
                let start = self.interval_start_ns.unwrap_or(now);
                let end = start.saturating_add(policy.interval_ns);
                self.interval_start_ns = Some(end);
                self.policy_restarts = 0;
                Decision::Restart {
                    delay_ns: end.saturating_sub(now).max(policy.delay_ns),
                    reason: "Exceeded allowed attempts, applying a delay".into(),
                }
            }
        }
    }

    /// The policy restarts it: `Restarting`, and the restart-delay timer.
    pub(in crate::client) fn restart_after(
        &mut self,
        ix: usize,
        delay_ns: i64,
        reason: String,
        now: i64,
        out: &mut Vec<Command>,
    ) {
        self.phase = TaskPhase::Restarting;
        self.restart_delay_ns = delay_ns;
        self.record(event(
            event_types::RESTARTING,
            now,
            joined(&["Task restarting in ", &go_duration(delay_ns)]),
            [
                ("restart_reason", reason),
                ("start_delay", delay_ns.to_string()),
            ],
        ));
        out.push(Command::StartTimer {
            timer: Timer::RestartDelay(ix),
            after_ns: delay_ns,
        });
    }

    /// The policy leaves it dead: `Not Restarting`.
    pub(in crate::client) fn stay_dead(&mut self, failed: bool, reason: String, now: i64) {
        self.phase = TaskPhase::Dead;
        self.state.finish(now);
        self.state.failed = failed;
        self.record(event(
            event_types::NOT_RESTARTING,
            now,
            reason.clone(),
            [("restart_reason", reason)],
        ));
    }

    /// A stopping runner starts nothing again: a task that ended on its own, or waits out
    /// its restart delay, stays dead.
    pub(in crate::client) fn end_without_restart(&mut self, ix: usize, out: &mut Vec<Command>) {
        if self.phase == TaskPhase::Restarting {
            out.push(Command::CancelTimer {
                timer: Timer::RestartDelay(ix),
            });
        }
        self.phase = TaskPhase::Dead;
        // It ended at its last event (its exit's, or the restart delay's start).
        let ended = self.state.events.last().map_or(0, |event| event.time);
        self.state.finish(ended);
        self.state.failed = self
            .last_exit
            .as_ref()
            .is_some_and(|exit| exit.exit_code != 0 || exit.failure.is_some());
    }

    // invariant: services_restored
    /// The task runs again — after a restart's kill, or its restart delay — with a fresh
    /// kill record, its services registered again; the restart's flag is gone with it.
    pub(in crate::client) fn run_again(&mut self, ix: usize, now: i64, out: &mut Vec<Command>) {
        if self.restart != RestartMark::None {
            self.record(event(
                event_types::RESTARTING,
                now,
                "Task restarting in 0s",
                [("restart_reason", "User requested restart".into())],
            ));
        }
        self.state.restarts += 1;
        // Nomad's task never reads `dead` between its runs, so it has no finish time yet.
        self.state.finished_at = 0;
        self.restart = RestartMark::None;
        self.pre_kill_done = false;
        self.signalled = false;
        self.sigkilled = false;
        self.delay = DelayOutcome::None;
        self.last_exit = None;
        self.state.failed = false;
        self.start(ix, now, out);
    }
}
