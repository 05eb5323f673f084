//! The task runner's kill sequence (`reference/nomad-stop-path.md` §2.4): `Killing` →
//! pre-kill hooks (deregister the task's services) → `shutdown_delay` → `kill_signal` →
//! `kill_timeout` → SIGKILL → `Terminated` → `Killed` → stop hooks.

use crate::client::hooks::{TaskPreKillHook, TaskServiceHook, TaskStopHook};
use crate::client::{Command, DelayOutcome, Timer};
use crate::gotime::go_duration;
use crate::server::structs::{event_types, TaskEvent, TaskState, TaskStateName};
use crate::spec::{EffectiveRestartPolicy, Task, TaskRole, DEFAULT_KILL_SIGNAL};
use crate::text::joined;
use serde::{Deserialize, Serialize};

mod restart;

pub use restart::{Decision, RestartMark};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Where the task stands on the stop path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TaskPhase {
    /// Not started: a poststop task before its turn, or any task of an allocation stopped
    /// before it started.
    NotStarted,
    Running,
    /// Killing: the pre-kill hooks ran; the `shutdown_delay` timer runs.
    Delaying,
    /// The kill signal was sent; the kill-timeout timer runs.
    Signalled,
    Dead,
    /// It ended on its own while it ran; the restart policy decides next (a ready step).
    Crashed,
    /// The restart policy restarts it: the restart-delay timer runs.
    Restarting,
}

/// How a process ended, as the driver reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitResult {
    pub exit_code: i32,
    /// The signal that ended it, if any (9 after SIGKILL).
    pub signal: Option<i32>,
    /// Why the driver could not start or watch it (a command that does not exist, say):
    /// recorded as Nomad's `Driver Failure` event before `Terminated`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskRunner {
    pub name: Arc<str>,
    pub role: TaskRole,
    pub shutdown_delay_ns: i64,
    /// `kill_timeout` capped by the client's `max_kill_timeout`.
    pub kill_timeout_ns: i64,
    pub kill_signal: String,
    pub service_hook: TaskServiceHook,
    pub phase: TaskPhase,
    pub state: TaskState,
    /// The task's pre-kill hooks ran (its services deregistered).
    pub pre_kill_done: bool,
    /// The kill signal was sent.
    pub signalled: bool,
    pub delay: DelayOutcome,
    pub sigkilled: bool,
    /// The kills begun so far: the current kill's number, from 1. The driver delivers each
    /// kill's signal at most once (raw_exec's supervisor refuses a number it has carried
    /// out), so a runner restored from progress stored before its signal went out, which
    /// takes the step again, does not signal the task twice.
    #[serde(default)]
    pub kills: u32,
    /// The kill in progress is a restart's (`alloc restart`), flagged or not.
    #[serde(default)]
    pub restart: RestartMark,
    #[serde(default)]
    pub restart_policy: EffectiveRestartPolicy,
    /// Restarts by the policy in the current interval, which began at `interval_start_ns`.
    #[serde(default)]
    pub policy_restarts: u32,
    #[serde(default)]
    pub interval_start_ns: Option<i64>,
    /// The restart delay the policy decided on (what a restored runner re-arms).
    #[serde(default)]
    pub restart_delay_ns: i64,
    /// How its last run ended on its own (what the policy decides on).
    #[serde(default)]
    pub last_exit: Option<ExitResult>,
    /// A batch job's task, or a prestart or poststart task that is not a sidecar: a clean
    /// exit is its end, not a crash to restart (Nomad's `restartOnSuccess` false).
    #[serde(default)]
    pub batch: bool,
}

pub(super) fn event<const N: usize>(
    event_type: &'static str,
    now: i64,
    display: impl Into<Cow<'static, str>>,
    details: [(&'static str, String); N],
) -> TaskEvent {
    TaskEvent {
        event_type: Cow::Borrowed(event_type),
        time: now,
        message: String::new(),
        display_message: display.into(),
        // Inserted one by one: `collect` sorts its input through a buffer of its own first,
        // more work than a few inserts into one leaf.
        details: details
            .into_iter()
            .fold(BTreeMap::new(), |mut map, (key, value)| {
                map.insert(Cow::Borrowed(key), value);
                map
            }),
    }
}

/// A prestart or poststart task that is not a sidecar: it runs to its end, once.
pub fn ends_when_done(task: &Task) -> bool {
    task.lifecycle
        .as_ref()
        .is_some_and(|l| !l.sidecar && l.hook != "poststop")
}

impl TaskRunner {
    pub fn new(
        task: &Task,
        restart_policy: EffectiveRestartPolicy,
        batch: bool,
        max_kill_timeout_ns: i64,
    ) -> Self {
        let kill_timeout = task
            .kill_timeout_ns
            .unwrap_or(crate::spec::DEFAULT_KILL_TIMEOUT_NS);
        let kill_signal = if task.kill_signal.is_empty() {
            DEFAULT_KILL_SIGNAL
        } else {
            &task.kill_signal
        };
        TaskRunner {
            name: Arc::from(task.name.as_str()),
            role: task.role(),
            shutdown_delay_ns: task.shutdown_delay_ns,
            // kill_timeout_respected, capped (§2.4 step 5, #13626).
            kill_timeout_ns: kill_timeout.min(max_kill_timeout_ns),
            kill_signal: kill_signal.to_string(),
            service_hook: TaskServiceHook {
                services: task
                    .services
                    .iter()
                    .flatten()
                    .map(|s| s.name.clone())
                    .collect(),
            },
            phase: TaskPhase::NotStarted,
            state: TaskState::default(),
            pre_kill_done: false,
            signalled: false,
            delay: DelayOutcome::None,
            sigkilled: false,
            kills: 0,
            restart: RestartMark::None,
            restart_policy,
            policy_restarts: 0,
            interval_start_ns: None,
            restart_delay_ns: 0,
            last_exit: None,
            batch: batch || ends_when_done(task),
        }
    }

    pub fn is_done(&self) -> bool {
        matches!(self.phase, TaskPhase::NotStarted | TaskPhase::Dead)
    }

    /// Keeps an event, a nanosecond after the one before it at the latest: events recorded
    /// in one step are in order by time too, as Nomad's (a real clock between them), so a
    /// client that tells events apart by `Time` keeps each.
    pub(super) fn record(&mut self, mut event: TaskEvent) {
        if let Some(last) = self.state.events.last() {
            event.time = event.time.max(last.time.saturating_add(1));
        }
        if event.event_type == event_types::RESTARTING {
            self.state.last_restart = event.time;
        }
        self.state.events.push(event);
    }

    pub(super) fn start(&mut self, ix: usize, now: i64, out: &mut Vec<Command>) {
        debug_assert_ne!(
            self.phase,
            TaskPhase::Running,
            "a running task is started again"
        );
        self.phase = TaskPhase::Running;
        let was_running = self.state.state == TaskStateName::Running;
        self.state.state = TaskStateName::Running;
        self.record(event(
            event_types::STARTED,
            now,
            "Task started by client",
            [],
        ));
        if !was_running {
            // The `Started` event's time (a nanosecond on from others at this instant).
            self.state.started_at = self.state.events.last().map_or(now, |e| e.time);
        }
        out.push(Command::StartTask { task: ix });
        self.service_hook.register(ix, out);
    }

    /// The kill begins: `Killing`, pre-kill hooks, then the delay — skipped if the delays
    /// are cancelled — then the signal.
    pub(super) fn begin_kill(
        &mut self,
        ix: usize,
        cancelled: bool,
        now: i64,
        out: &mut Vec<Command>,
    ) {
        debug_assert_eq!(self.phase, TaskPhase::Running);
        self.kills += 1;
        let timeout = go_duration(self.kill_timeout_ns);
        self.record(event(
            event_types::KILLING,
            now,
            joined(&[
                "Sent interrupt. Waiting ",
                &timeout,
                " before force killing",
            ]),
            [("kill_timeout", timeout.clone())],
        ));
        self.kill_from_hooks(ix, cancelled, now, out);
    }

    // invariant: prestop_hooks_always_run
    /// The kill sequence from the pre-kill hooks on.
    fn kill_from_hooks(&mut self, ix: usize, cancelled: bool, now: i64, out: &mut Vec<Command>) {
        // prestop_hooks_always_run: the hooks run flag or no flag, before any signal.
        for hook in self.pre_kill_hooks() {
            hook.pre_killing(ix, out);
        }
        self.pre_kill_done = true;
        if self.shutdown_delay_ns <= 0 {
            self.send_signal(ix, now, out);
            return;
        }
        let delay = go_duration(self.shutdown_delay_ns);
        // Nomad shows the task pending while it records the delay event (§2.4 step 2).
        self.state.state = TaskStateName::Pending;
        if cancelled {
            // delay_skipped_only_when_flagged: `cancelled` is only set by a flagged update.
            self.delay = DelayOutcome::Skipped;
            self.record(event(
                event_types::SKIPPING_SHUTDOWN_DELAY,
                now,
                joined(&[
                    "Skipping shutdown_delay of ",
                    &delay,
                    " before killing the task.",
                ]),
                [],
            ));
            self.send_signal(ix, now, out);
        } else {
            self.record(event(
                event_types::WAITING_FOR_SHUTDOWN_DELAY,
                now,
                joined(&[
                    "Waiting for shutdown_delay of ",
                    &delay,
                    " before killing the task.",
                ]),
                [],
            ));
            self.phase = TaskPhase::Delaying;
            self.delay = DelayOutcome::Waiting;
            out.push(Command::StartTimer {
                timer: Timer::TaskDelay(ix),
                after_ns: self.shutdown_delay_ns,
            });
        }
    }

    // invariant: flag_is_honoured
    /// The flag arrived mid-wait (flag_is_honoured): the wait ends now.
    pub(super) fn cut_delay_short(&mut self, ix: usize, now: i64, out: &mut Vec<Command>) {
        debug_assert_eq!(self.phase, TaskPhase::Delaying);
        self.delay = DelayOutcome::CutShort;
        out.push(Command::CancelTimer {
            timer: Timer::TaskDelay(ix),
        });
        self.record(event(
            event_types::SHUTDOWN_DELAY_CUT_SHORT,
            now,
            joined(&[
                "Shutdown delay of ",
                &go_duration(self.shutdown_delay_ns),
                " cut short by -no-shutdown-delay.",
            ]),
            [],
        ));
        self.send_signal(ix, now, out);
    }

    pub(super) fn delay_elapsed(&mut self, ix: usize, now: i64, out: &mut Vec<Command>) {
        debug_assert_eq!(self.phase, TaskPhase::Delaying);
        self.delay = DelayOutcome::Elapsed;
        self.send_signal(ix, now, out);
    }

    // invariant: kill_timeout_respected
    fn send_signal(&mut self, ix: usize, _now: i64, out: &mut Vec<Command>) {
        debug_assert!(
            self.pre_kill_done,
            "prestop_hooks_always_run: hooks before the signal"
        );
        self.phase = TaskPhase::Signalled;
        self.signalled = true;
        self.state.state = TaskStateName::Running;
        out.push(Command::Signal {
            task: ix,
            signal: self.kill_signal.clone(),
            kill: self.kills,
        });
        out.push(Command::StartTimer {
            timer: Timer::KillTimeout(ix),
            after_ns: self.kill_timeout_ns,
        });
    }

    /// kill_timeout_respected: SIGKILL only when the timer set at the signal has fired.
    pub(super) fn kill_timeout_fired(&mut self, ix: usize, out: &mut Vec<Command>) {
        debug_assert!(
            self.phase == TaskPhase::Signalled && !self.sigkilled,
            "kill_timeout_respected: a task is SIGKILLed once per kill, after its signal"
        );
        self.sigkilled = true;
        out.push(Command::ForceKill {
            task: ix,
            kill: self.kills,
        });
    }

    /// The process is gone: `Terminated`, and `Killed` if it was being killed; the exited
    /// and stop hooks deregister its services again (idempotent).
    pub(super) fn exited(&mut self, ix: usize, exit: ExitResult, now: i64, out: &mut Vec<Command>) {
        let was = self.phase;
        if was == TaskPhase::Delaying {
            self.delay = DelayOutcome::ExitedDuring;
        }
        match was {
            TaskPhase::Delaying => out.push(Command::CancelTimer {
                timer: Timer::TaskDelay(ix),
            }),
            // After SIGKILL the timer has fired already; cancelling it again is harmless.
            TaskPhase::Signalled => out.push(Command::CancelTimer {
                timer: Timer::KillTimeout(ix),
            }),
            _ => {}
        }
        self.record_exit(&exit, now);
        // A restart's kill ends in `Restarting`, not `Killed` (the task runs again).
        if was == TaskPhase::Signalled && self.restart == RestartMark::None {
            self.record(event(
                event_types::KILLED,
                now,
                "Task successfully killed",
                [],
            ));
        }
        self.phase = TaskPhase::Dead;
        self.state.finish(now);
        self.state.failed = was == TaskPhase::Running && exit.exit_code != 0;
        for hook in self.stop_hooks() {
            hook.stop(ix, out);
        }
    }

    /// `Driver Failure` (when the driver could not start the task, with its error) and
    /// `Terminated`.
    fn record_exit(&mut self, exit: &ExitResult, now: i64) {
        if let Some(failure) = &exit.failure {
            self.record(event(
                event_types::DRIVER_FAILURE,
                now,
                failure.clone(),
                [("driver_error", failure.clone())],
            ));
        }
        let code = exit.exit_code.to_string();
        let signal = exit.signal.map(|signal| signal.to_string());
        let display = match &signal {
            Some(signal) => joined(&["Exit Code: ", &code, ", Signal: ", signal]),
            None => joined(&["Exit Code: ", &code]),
        };
        let mut terminated = event(event_types::TERMINATED, now, display, [("exit_code", code)]);
        if let Some(signal) = signal {
            terminated.details.insert(Cow::Borrowed("signal"), signal);
        }
        self.record(terminated);
    }

    fn pre_kill_hooks(&self) -> [&dyn TaskPreKillHook; 1] {
        [&self.service_hook]
    }

    /// The exited and stop hooks.
    fn stop_hooks(&self) -> [&dyn TaskStopHook; 1] {
        [&self.service_hook]
    }
}

#[cfg(test)]
mod tests;
