//! The runner's [`Host`](quiesce_core::client::shell::Host): its commands carried out, each applied event noted as a step of
//! the step alphabet with the effects of its commands, and its timers armed.

use super::{DaemonHost, Handle};
use crate::daemon::timers::Due;
use crate::daemon::unix_now_ns;
use quiesce_core::client::shell::{Applied, Host};
use quiesce_core::client::{AllocRunner, Command, RunnerStep, Timer};
use quiesce_core::spec::TaskRole;
use quiesce_core::step::log::LogEntry;
use quiesce_core::step::{Effect, Step};

impl DaemonHost {
    // invariant: kill_timeout_respected
    /// Arms `timer`, due `after_ns` from now (or from the signal the task really got, or
    /// at its stored deadline); the deadline (Unix ns).
    pub(super) fn start_timer(&mut self, timer: Timer, after_ns: i64) -> i64 {
        let now = unix_now_ns();
        let signalled_before = match timer {
            Timer::KillTimeout(ix) => self.signalled_before.remove(&ix),
            Timer::GroupDelay
            | Timer::TaskDelay(_)
            | Timer::RestartDelay(_)
            | Timer::Healthy
            | Timer::HealthyDeadline => None,
        };
        let due = match (self.resumed.remove(&timer), signalled_before) {
            (Some(due), _) => due,
            // kill_timeout_respected: the timeout runs from the signal the task really got.
            (None, Some(signalled)) => signalled + after_ns,
            (None, None) => now + after_ns,
        };
        self.deadlines.insert(timer, due);
        self.schedule(due - now, Due::Timer(timer, due));
        due
    }

    /// Notes on the step's `Signal` effect for task `ix` when its kill timeout began, which
    /// the entry's own time (taken when the step is stored) may follow by the store's wait.
    fn note_timeout_start(&mut self, runner: &AllocRunner, ix: usize, from_ns: i64) {
        let Some(name) = runner.tasks.get(ix).map(|t| &*t.name) else {
            return;
        };
        let effects = self
            .pending
            .log
            .last_mut()
            .filter(|_| self.recording)
            .map(|entry| &mut entry.effects);
        let signal = effects.and_then(|effects| {
            effects
                .iter_mut()
                .rev()
                .find(|e| matches!(e, Effect::Signal { task, .. } if task == name))
        });
        if let Some(Effect::Signal {
            timeout_from_ns, ..
        }) = signal
        {
            *timeout_from_ns = Some(from_ns);
        }
    }
}

impl Host for DaemonHost {
    fn execute(&mut self, command: &Command, runner: &AllocRunner) {
        if let Some(effect) = Effect::of(command, runner) {
            match self.pending.log.last_mut().filter(|_| self.recording) {
                Some(entry) => entry.effects.push(effect),
                // A restore's reattachment and the kill requests it sends again (the steps
                // that did them are logged already), or a forced exit's stop hooks.
                None => {
                    let expected = match effect {
                        Effect::Launch { .. } | Effect::Signal { .. } | Effect::SigKill { .. } => {
                            self.restoring
                        }
                        Effect::Deregister { .. } => true,
                        Effect::Register { .. } => false,
                    };
                    if !expected {
                        crate::daemon::say!(
                            "bug: allocation {}: an effect outside any step: \
                             {effect:?}",
                            self.alloc
                        );
                    }
                }
            }
        }
        match command {
            Command::StartTask { task } => {
                self.apply_services();
                self.start_task(*task, runner)
            }
            Command::RegisterServices { task, names } => self.services(runner, *task, names, true),
            Command::DeregisterServices { task, names } => {
                self.services(runner, *task, names, false)
            }
            Command::StartTimer { timer, after_ns } => {
                let due = self.start_timer(*timer, *after_ns);
                if let Timer::KillTimeout(ix) = timer {
                    self.note_timeout_start(runner, *ix, due - after_ns);
                }
            }
            // The shell refuses a timer it no longer has armed, and the dispatcher an entry
            // whose deadline is no longer the one here (a cancel and a new start of the same
            // timer leave the first entry in the queue).
            Command::CancelTimer { timer } => {
                self.deadlines.remove(timer);
            }
            // Sent when the shell settles, after the deregistration is visible and the step
            // stored (not durably: a crash can lose the step after the signal went out,
            // which is safe because the stop it follows is durable — an API write's plan,
            // see `Core::process_evals` — a restored runner applies it before its tasks'
            // exits, and the supervisor does not deliver the signal twice).
            Command::Signal { task, signal, kill } => {
                let timeout_ns = runner.tasks.get(*task).map_or(0, |t| t.kill_timeout_ns);
                if self.signal(*task, signal, *kill, timeout_ns) {
                    let effect = self
                        .pending
                        .log
                        .last_mut()
                        .and_then(|e| e.effects.last_mut());
                    if let Some(Effect::Signal {
                        already_delivered, ..
                    }) = effect.filter(|_| self.recording)
                    {
                        *already_delivered = true;
                    }
                }
            }
            Command::ForceKill { task, kill } => self.force_kill(*task, *kill, runner),
            Command::Report => self.pending.report = true,
        }
    }

    fn settled(&mut self, runner: &AllocRunner) {
        // Deadlines not re-armed by the critical section that restored the runner are stale.
        self.resumed.clear();
        self.flush(runner);
    }

    fn now(&self) -> i64 {
        unix_now_ns()
    }

    /// Notes the step's log entry (in the step alphabet's terms, with the effects of the
    /// commands that follow) and that the runner's state is to be stored with whatever the
    /// step changed on the server (at the next flush).
    fn applied(&mut self, runner: &AllocRunner, what: Applied) {
        let alloc = || self.alloc.clone();
        let task = |ix: usize| {
            runner
                .tasks
                .get(ix)
                .map_or_else(|| "".into(), |t| t.name.clone())
        };
        let step = match what {
            // Read (and its sequence number reserved) by the client, under the core lock.
            Applied::Update => self.pull.take().map(|(seq, time_ns, index)| {
                self.pending.pulled = Some(index);
                (Step::ClientSync { alloc: alloc() }, Some((seq, time_ns)))
            }),
            Applied::Step(RunnerStep::GroupPreKill) => {
                Some((Step::GroupPreKill { alloc: alloc() }, None))
            }
            Applied::Step(RunnerStep::TaskPreKill(ix)) => Some((
                Step::TaskPreKill {
                    alloc: alloc(),
                    task: task(ix),
                },
                None,
            )),
            Applied::Step(RunnerStep::PoststopStart(ix)) => Some((
                Step::PoststopStart {
                    alloc: alloc(),
                    task: task(ix),
                },
                None,
            )),
            Applied::Step(RunnerStep::RestartDecision(ix)) => Some((
                Step::RestartDecision {
                    alloc: alloc(),
                    task: task(ix),
                    unrecoverable: runner.tasks.get(ix).is_some_and(|t| t.unrecoverable()),
                },
                None,
            )),
            Applied::Timer(Timer::Healthy) => Some((Step::AllocHealthy { alloc: alloc() }, None)),
            Applied::Timer(Timer::HealthyDeadline) => {
                Some((Step::AllocUnhealthy { alloc: alloc() }, None))
            }
            Applied::Timer(Timer::RestartDelay(ix)) => Some((
                Step::RestartDelayElapsed {
                    alloc: alloc(),
                    task: task(ix),
                },
                None,
            )),
            Applied::Timer(Timer::GroupDelay) => {
                Some((Step::GroupDelayElapsed { alloc: alloc() }, None))
            }
            Applied::Timer(Timer::TaskDelay(ix)) => Some((
                Step::TaskDelayElapsed {
                    alloc: alloc(),
                    task: task(ix),
                },
                None,
            )),
            Applied::Timer(Timer::KillTimeout(ix)) => Some((
                Step::KillTimeout {
                    alloc: alloc(),
                    task: task(ix),
                },
                None,
            )),
            Applied::Restart {
                task: target,
                no_shutdown_delay,
            } => {
                // Admitted under the core's lock, which reserved the entry's number there:
                // a stop written after the admission is logged after the restart.
                let reserved = self.restart.take();
                debug_assert!(
                    reserved.is_some(),
                    "a restart applied without the sequence number its admission reserved"
                );
                Some((
                    Step::RestartAlloc {
                        alloc: alloc(),
                        task: target.map(task),
                        no_shutdown_delay,
                    },
                    reserved,
                ))
            }
            // The model merges a stop's forced exit into its kill timeout (a restart's is a
            // step: the task runs again).
            Applied::Exit {
                forced: true,
                restart: false,
                ..
            }
            | Applied::Restored
            | Applied::Checks { .. } => None,
            Applied::Exit { task: ix, .. } => {
                let poststop = runner
                    .tasks
                    .get(ix)
                    .is_some_and(|t| t.role == TaskRole::Poststop);
                let (alloc, task) = (alloc(), task(ix));
                Some((
                    if poststop {
                        Step::PoststopExit { alloc, task }
                    } else {
                        Step::TaskExit { alloc, task }
                    },
                    None,
                ))
            }
        };
        match what {
            Applied::Timer(timer) => {
                self.deadlines.remove(&timer);
            }
            // The control connection of an exited task goes (one socket per task otherwise),
            // with the client's other closed connections, once the kill path is quiet.
            Applied::Exit { task, .. } => {
                self.pending.exited.push(task);
                if let Some(Handle::Process { signaller, .. }) =
                    self.tasks.get_mut(task).and_then(Option::take)
                {
                    self.pending.closing.push(Box::new(signaller));
                }
            }
            _ => {}
        }
        self.recording = step.is_some();
        self.restoring = what == Applied::Restored;
        if let Some((step, reserved)) = step {
            let job = Some(runner.alloc.job_id.clone());
            let group = Some(runner.alloc.task_group.clone());
            let mut entry = LogEntry::step(step, job, group);
            if let Some((seq, time_ns)) = reserved {
                entry.seq = seq;
                entry.time_ns = time_ns;
            }
            self.pending.log.push(entry);
        }
        self.pending.progress = true;
    }
}
