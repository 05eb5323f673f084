//! The concurrent shell of an alloc runner: the std-thread code the daemon runs around the
//! sans-IO [`AllocRunner`]. Events arrive from other threads — a pulled update or a process's
//! exit (the client workers, the exit queued by the driver's watcher), a timer firing (the
//! timer thread).
//! Every event is applied under one lock, and the thread that applied it goes on, under the
//! same lock, to take every internal step the event made ready (the kill path's hooks, its
//! signal, a poststop task's start). The runner's commands are carried out by the [`Host`]
//! under that lock too, so the order of effects is the runner's order. A runner therefore
//! needs no thread of its own: a flagged stop's update is turned into the signal by the
//! thread that pulled it, without waking another. [`RunnerShell::run`] remains for a thread
//! that waits for the runner's end (it also takes any step left ready, which under this
//! rule is none); the condition variable wakes it, and [`RunnerShell::wait_until`], after
//! every event, so no wake-up is lost.
//!
//! Timers are explicit events (`fire`), so that loom, which has no time, can drive them. The
//! primitives come from `crate::sync`: std normally, loom under the cfg `quiesce_loom` (the `loom` feature).
//!
//! A shell made with [`RunnerShell::unstarted`] takes no step before
//! [`RunnerShell::start`] has carried out its creation's commands: a kill step must not
//! signal a task that is yet to be launched. A timer that is no longer armed (cancelled,
//! or fired) is refused: [`RunnerShell::fire`] returns `false` and changes nothing.

use super::alloc_runner::RestartRefused;
use super::{AllocRunner, Command, ExitResult, RunnerPhase, Timer};
use crate::server::structs::Allocation;
use crate::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::collections::BTreeSet;

/// Carries out a runner's commands (driver calls, service deregistration, timers, reports).
/// Called with the shell's lock held: it must not call back into the shell.
pub trait Host: Send {
    /// Carries out one command. `runner` is the runner's state after the event or step that
    /// produced it (a host that stores the runner's progress commits it with the command's
    /// effect).
    fn execute(&mut self, command: &Command, runner: &AllocRunner);
    /// The time events are stamped with, in nanoseconds (Unix time in the daemon).
    fn now(&self) -> i64;
    /// An event or step was applied to the runner; its commands are carried out next. The
    /// place to record it (the daemon notes its log entry and that the runner's state is to
    /// be stored when the shell settles).
    fn applied(&mut self, _runner: &AllocRunner, _what: Applied) {}
    /// The shell's critical section ends (an event and the steps it made ready have been
    /// applied): the place to carry out what `applied` gathered, once for all of them.
    fn settled(&mut self, _runner: &AllocRunner) {}
}

/// What a shell applied, for [`Host::applied`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Applied {
    /// A pulled update.
    Update,
    /// An internal step, taken by the thread that applied the event that made it ready.
    Step(super::RunnerStep),
    /// A timer fired.
    Timer(Timer),
    /// A task's process exited; `forced` when SIGKILL had been sent to it, `restart` when
    /// its kill was an in-place restart's (then the exit is a step of its own: the task runs
    /// again).
    Exit {
        task: usize,
        forced: bool,
        restart: bool,
    },
    /// An in-place restart of `task` (`None`: every running task) was accepted.
    Restart {
        task: Option<usize>,
        no_shutdown_delay: bool,
    },
    /// The runner was restored after a restart (see [`AllocRunner::restore`]).
    Restored,
    /// The host's checks said whether every healthiness check passes (no step: the model
    /// has no checks; what it changes is the health watch's timer).
    Checks { passing: bool },
}

struct State<H> {
    runner: AllocRunner,
    host: H,
    /// Timers the runner started and has not cancelled, and that have not fired.
    armed: BTreeSet<Timer>,
    /// Shut down (the client agent stops): `run` returns, events are refused.
    closed: bool,
    /// The commands of the runner's creation have been carried out: until then no step is
    /// taken (a kill step must not signal a task that is yet to be launched).
    started: bool,
}

/// A handle to one runner's shell; clones share it.
pub struct RunnerShell<H> {
    shared: Arc<(Mutex<State<H>>, Condvar)>,
}

impl<H> Clone for RunnerShell<H> {
    fn clone(&self) -> Self {
        RunnerShell {
            shared: Arc::clone(&self.shared),
        }
    }
}

/// How `run` ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunEnd {
    /// Every task is dead.
    Terminal,
    /// The shell was shut down first; the runner's state can be restored.
    Closed,
}

impl<H: Host> RunnerShell<H> {
    /// A shell around a runner, carrying out the commands its creation produced.
    pub fn new(runner: AllocRunner, host: H, initial: Vec<Command>) -> Self {
        let mut state = State {
            runner,
            host,
            armed: BTreeSet::new(),
            closed: false,
            started: true,
        };
        state.carry_out(&initial);
        state.settle();
        RunnerShell {
            shared: Arc::new((Mutex::new(state), Condvar::new())),
        }
    }

    /// A shell around a runner whose creation's commands are yet to be carried out, by
    /// [`RunnerShell::start`]: for a host that must not carry them out while the shell is
    /// being registered. Events applied before `start` change the runner, but no step is
    /// taken until then.
    pub fn unstarted(runner: AllocRunner, host: H) -> Self {
        let state = State {
            runner,
            host,
            armed: BTreeSet::new(),
            closed: false,
            started: false,
        };
        RunnerShell {
            shared: Arc::new((Mutex::new(state), Condvar::new())),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<H>> {
        self.shared
            .0
            .lock()
            .expect("a runner's lock is never poisoned")
    }

    /// Sleeps until the next event; the caller re-checks its condition under the lock.
    fn wait<'a>(&self, state: MutexGuard<'a, State<H>>) -> MutexGuard<'a, State<H>> {
        self.shared
            .1
            .wait(state)
            .expect("a runner's lock is never poisoned")
    }

    /// Applies one event under the lock, carries out its commands, takes the steps it made
    /// ready, settles, and wakes the waiters.
    fn apply(
        &self,
        what: impl FnOnce(&AllocRunner) -> Applied,
        event: impl FnOnce(&mut AllocRunner, i64, &mut Vec<Command>) -> bool,
    ) -> bool {
        self.apply_locked(self.lock(), what, event)
    }

    /// [`RunnerShell::apply`] under a lock its caller took (and looked under).
    fn apply_locked(
        &self,
        mut state: MutexGuard<'_, State<H>>,
        what: impl FnOnce(&AllocRunner) -> Applied,
        event: impl FnOnce(&mut AllocRunner, i64, &mut Vec<Command>) -> bool,
    ) -> bool {
        if state.closed {
            return false;
        }
        let what = what(&state.runner);
        let mut commands = Vec::new();
        let now = state.host.now();
        let applied = event(&mut state.runner, now, &mut commands);
        if applied {
            let State { runner, host, .. } = &mut *state;
            host.applied(runner, what);
        }
        state.carry_out(&commands);
        if applied {
            state.take_ready_steps();
        }
        state.settle();
        self.shared.1.notify_all();
        applied
    }

    /// Hands `what`, the event a shell was created by (a first pull, a restore), to the
    /// host's [`Host::applied`], carries out its commands, and takes the steps that are
    /// ready. For a shell made by [`RunnerShell::unstarted`].
    pub fn start(&self, initial: Vec<Command>, what: Applied) {
        self.starting().start(initial, what);
    }

    /// The shell's lock, taken to start it: what needs the shell registered before it starts
    /// (and so shared) does that while holding it, and no event from another thread is
    /// applied before [`Starting::start`] — the runner's creation comes first, as its pull
    /// came first. For a shell made by [`RunnerShell::unstarted`].
    pub fn starting(&self) -> Starting<'_, H> {
        Starting {
            state: self.lock(),
            condvar: &self.shared.1,
        }
    }

    /// A pulled update (the client's workers). A flag in it cancels the delays at once,
    /// even while the runner waits one out.
    pub fn update(&self, alloc: Allocation) -> bool {
        self.apply(
            |_| Applied::Update,
            |runner, now, out| {
                runner.update(alloc, now, out);
                true
            },
        )
    }

    /// A pull: `fetch` runs under the runner's lock and returns the allocation's newer copy,
    /// if there is one, which the runner then applies as [`RunnerShell::update`] does. A host
    /// that logs steps logs the pull inside `fetch` (it is given the host to note it in), so
    /// the log's order is the order in which records were read.
    pub fn pull(&self, fetch: impl FnOnce(&AllocRunner, &mut H) -> Option<Allocation>) -> bool {
        let mut state = self.lock();
        if state.closed {
            return false;
        }
        let State { runner, host, .. } = &mut *state;
        let Some(alloc) = fetch(runner, host) else {
            return false;
        };
        state.apply_update(alloc);
        state.take_ready_steps();
        state.settle();
        self.shared.1.notify_all();
        true
    }

    /// Starts a shell made by [`RunnerShell::unstarted`] around a runner restored after a
    /// client restart ([`AllocRunner::restore`]), in one critical section: the restore's
    /// commands (reattaching to the tasks, re-arming timers) are carried out, then `fetch`
    /// — as for [`RunnerShell::pull`] — may return a newer copy of the allocation, which is
    /// applied before any exit of a reattached task can be (a task signalled before a crash
    /// lost the runner's progress must not look as if it had ended on its own), and then the
    /// steps that are ready are taken.
    pub fn restore(
        &self,
        initial: Vec<Command>,
        fetch: impl FnOnce(&AllocRunner, &mut H) -> Option<Allocation>,
    ) {
        self.starting().restore(initial, fetch);
    }

    /// A timer fired. `false`, changing nothing, if it is not armed (cancelled, or fired).
    pub fn fire(&self, timer: Timer) -> bool {
        self.fire_if(timer, |_| true)
    }

    /// A timer fired, if `current` says, under the runner's lock, that this firing is the
    /// arming the timer has now; the look and the firing are one critical section, so no
    /// cancel and new start can come between them. A host whose queue keeps the entries of
    /// cancelled timers needs it: `armed` says only that the timer is armed, and after a
    /// cancel and a new start, the first arming's entry would fire the second early (a
    /// restart's kill timeout left over from the restart before, say). `false`, changing
    /// nothing, otherwise.
    pub fn fire_if(&self, timer: Timer, current: impl FnOnce(&H) -> bool) -> bool {
        let mut state = self.lock();
        if !state.armed.contains(&timer) || !current(&state.host) {
            return false;
        }
        state.armed.remove(&timer);
        self.apply_locked(
            state,
            |_| Applied::Timer(timer),
            |runner, now, out| runner.timer_fired(timer, now, out),
        )
    }

    /// `alloc restart`: restarts `task` (or every running task) in place, or says why not,
    /// changing nothing. `admit` runs under the runner's lock once the runner would take
    /// the restart: the host's last word (the daemon's: the server has not stopped the
    /// allocation, read under the core's lock, where the log entry's place is reserved).
    pub fn restart(
        &self,
        task: Option<usize>,
        no_shutdown_delay: bool,
        admit: impl FnOnce(&mut H) -> Result<(), RestartRefused>,
    ) -> Result<Vec<usize>, RestartRefused> {
        let mut state = self.lock();
        if state.closed {
            return Err(RestartRefused::Stopping);
        }
        state.runner.restart_targets(task)?;
        admit(&mut state.host)?;
        let mut commands = Vec::new();
        let now = state.host.now();
        let targets = state
            .runner
            .restart(task, no_shutdown_delay, now, &mut commands)
            .expect("the runner said it would take the restart");
        let State { runner, host, .. } = &mut *state;
        host.applied(
            runner,
            Applied::Restart {
                task,
                no_shutdown_delay,
            },
        );
        state.carry_out(&commands);
        state.take_ready_steps();
        state.settle();
        self.shared.1.notify_all();
        Ok(targets)
    }

    /// A check ran (the host's check runner): `passing` reads, under the runner's lock,
    /// whether every healthiness check of the allocation passes now. Read there, the last
    /// of several results delivered at once is the one the runner keeps, whatever their
    /// order. `false` if it changed nothing.
    pub fn checks(&self, passing: impl FnOnce() -> bool) -> bool {
        let read = std::cell::Cell::new(false);
        self.apply(
            |_| {
                read.set(passing());
                Applied::Checks {
                    passing: read.get(),
                }
            },
            |runner, _, out| runner.checks_changed(read.get(), out),
        )
    }

    /// A task's process exited (reported by the driver).
    pub fn task_exited(&self, task: usize, exit: ExitResult) -> bool {
        let what = |runner: &AllocRunner| Applied::Exit {
            task,
            forced: runner.tasks.get(task).is_some_and(|t| t.sigkilled),
            restart: runner
                .tasks
                .get(task)
                .is_some_and(|t| t.restart != super::RestartMark::None),
        };
        self.apply(what, |runner, now, out| {
            runner.task_exited(task, exit, now, out)
        })
    }

    /// Waits, taking any internal step left ready (none, since the thread that applies an
    /// event takes the steps it makes ready), until every task is dead or the shell is shut
    /// down.
    pub fn run(&self) -> RunEnd {
        let mut state = self.lock();
        loop {
            if state.runner.phase == RunnerPhase::Terminal {
                return RunEnd::Terminal;
            }
            if state.closed {
                return RunEnd::Closed;
            }
            if state.take_ready_steps() {
                state.settle();
                self.shared.1.notify_all();
            } else {
                state = self.wait(state);
            }
        }
    }

    /// Waits until `until` holds of the runner, or the runner ends or the shell closes
    /// first; returns whether it held. For threads that act on the runner's progress (the
    /// tests' drivers and timers).
    pub fn wait_until(&self, until: impl Fn(&AllocRunner) -> bool) -> bool {
        let mut state = self.lock();
        loop {
            if until(&state.runner) {
                return true;
            }
            if state.closed || state.runner.phase == RunnerPhase::Terminal {
                return false;
            }
            state = self.wait(state);
        }
    }

    /// Shuts the shell down (the client agent stops) and returns the runner's state, from
    /// which [`AllocRunner::restore`] resumes it.
    pub fn shutdown(&self) -> AllocRunner {
        let mut state = self.lock();
        state.closed = true;
        self.shared.1.notify_all();
        state.runner.clone()
    }

    /// A copy of the runner's state and the host, for inspection.
    pub fn inspect<T>(&self, look: impl FnOnce(&AllocRunner, &H) -> T) -> T {
        let state = self.lock();
        look(&state.runner, &state.host)
    }
}

/// A shell locked to be started (see [`RunnerShell::starting`]).
pub struct Starting<'a, H> {
    state: MutexGuard<'a, State<H>>,
    condvar: &'a Condvar,
}

impl<H: Host> Starting<'_, H> {
    /// See [`RunnerShell::restore`].
    pub fn restore(
        mut self,
        initial: Vec<Command>,
        fetch: impl FnOnce(&AllocRunner, &mut H) -> Option<Allocation>,
    ) {
        let state = &mut *self.state;
        let State { runner, host, .. } = &mut *state;
        host.applied(runner, Applied::Restored);
        state.carry_out(&initial);
        let State { runner, host, .. } = &mut *state;
        if let Some(alloc) = fetch(runner, host) {
            state.apply_update(alloc);
        }
        state.started = true;
        state.take_ready_steps();
        state.settle();
        self.condvar.notify_all();
    }

    /// See [`RunnerShell::start`].
    pub fn start(mut self, initial: Vec<Command>, what: Applied) {
        let state = &mut *self.state;
        let State { runner, host, .. } = &mut *state;
        host.applied(runner, what);
        state.carry_out(&initial);
        state.started = true;
        state.take_ready_steps();
        state.settle();
        self.condvar.notify_all();
    }
}

impl<H: Host> State<H> {
    fn settle(&mut self) {
        self.host.settled(&self.runner);
    }

    /// A pulled update applied to the runner, its commands carried out.
    fn apply_update(&mut self, alloc: Allocation) {
        let mut commands = Vec::new();
        let now = self.host.now();
        self.runner.update(alloc, now, &mut commands);
        self.host.applied(&self.runner, Applied::Update);
        self.carry_out(&commands);
    }

    /// Takes every internal step that is ready, in the runner's order, until none is (the
    /// runner then waits for an event: a timer, an exit, an update). Returns whether it took
    /// any.
    fn take_ready_steps(&mut self) -> bool {
        let mut took = false;
        while self.started && !self.closed {
            let Some(step) = self.runner.ready_steps().first().copied() else {
                break;
            };
            let mut commands = Vec::new();
            let now = self.host.now();
            self.runner.step(step, now, &mut commands);
            self.host.applied(&self.runner, Applied::Step(step));
            self.carry_out(&commands);
            took = true;
        }
        took
    }

    /// Keeps the set of armed timers and hands every command to the host, in order.
    fn carry_out(&mut self, commands: &[Command]) {
        for command in commands {
            match command {
                Command::StartTimer { timer, .. } => {
                    self.armed.insert(*timer);
                }
                Command::CancelTimer { timer } => {
                    self.armed.remove(timer);
                }
                _ => {}
            }
            self.host.execute(command, &self.runner);
        }
    }
}

#[cfg(all(test, quiesce_loom))]
mod loom_tests;

#[cfg(all(test, not(quiesce_loom)))]
mod tests {
    use super::*;
    use crate::client::test_support::{alloc, Recorder};
    use crate::sync::thread;

    /// A shell around a runner of a 30 s group delay, its stop pulled.
    fn stopping() -> RunnerShell<Recorder> {
        let mut initial = Vec::new();
        let runner = AllocRunner::new(alloc(false, false, 30, 0), 30_000_000_000, 0, &mut initial);
        let shell = RunnerShell::new(runner, Recorder::default(), initial);
        shell.update(alloc(true, false, 30, 0));
        shell
    }

    /// With std threads: the kill path waits out a delay, and a flagged update from another
    /// thread ends it.
    #[test]
    fn a_flagged_update_from_another_thread_ends_a_wait() {
        let shell = stopping();
        let killer = {
            let shell = shell.clone();
            thread::spawn(move || shell.run())
        };
        assert!(shell.wait_until(|runner| runner.phase == RunnerPhase::GroupDelay));
        shell.update(alloc(true, true, 30, 0));
        assert!(shell.wait_until(|runner| runner.tasks[0].signalled));
        assert!(shell.task_exited(
            0,
            ExitResult {
                exit_code: 0,
                signal: None,
                failure: None,
            }
        ));
        assert_eq!(killer.join().unwrap(), RunEnd::Terminal);
        assert!(
            !shell.fire(Timer::GroupDelay),
            "the cut-short timer is stale"
        );
        shell.inspect(|runner, host| {
            assert_eq!(runner.group_delay, crate::client::DelayOutcome::CutShort);
            let is_signal = |c: &Command| matches!(c, Command::Signal { .. });
            let signal = host.first(is_signal).unwrap();
            let deregister =
                host.first(|c| matches!(c, Command::DeregisterServices { task: None, .. }));
            assert!(deregister.unwrap() < signal, "hooks before the signal");
            assert_eq!(host.count(is_signal), 1);
        });
    }

    /// A firing its host does not take for the timer's arming now changes nothing and leaves
    /// the timer armed, for the firing that is.
    #[test]
    fn a_firing_of_an_earlier_arming_is_refused() {
        let shell = stopping();
        assert!(shell.wait_until(|runner| runner.phase == RunnerPhase::GroupDelay));
        assert!(!shell.fire_if(Timer::GroupDelay, |_| false));
        assert!(shell.inspect(|runner, _| runner.phase == RunnerPhase::GroupDelay));
        assert!(shell.fire_if(Timer::GroupDelay, |_| true));
        assert!(shell.inspect(|runner, _| runner.phase != RunnerPhase::GroupDelay));
        assert!(!shell.fire(Timer::GroupDelay), "fired once");
    }

    /// A restart the host refuses (the server has stopped the allocation) changes nothing
    /// and carries out nothing; one it admits is applied, settled, and its signal sent.
    #[test]
    fn a_restart_the_host_refuses_changes_nothing() {
        let mut initial = Vec::new();
        let runner = AllocRunner::new(alloc(false, false, 0, 0), 30_000_000_000, 0, &mut initial);
        let shell = RunnerShell::new(runner, Recorder::default(), initial);
        let before = shell.inspect(|runner, host| (runner.clone(), host.commands.len()));
        let refused = shell.restart(None, true, |_| Err(RestartRefused::Stopping));
        assert_eq!(refused, Err(RestartRefused::Stopping));
        shell.inspect(|runner, host| {
            assert_eq!((runner, host.commands.len()), (&before.0, before.1));
        });
        assert_eq!(
            shell.restart(Some(9), true, |_| Ok(())),
            Err(RestartRefused::NoSuchTask)
        );
        assert_eq!(shell.restart(None, true, |_| Ok(())), Ok(vec![0]));
        shell.inspect(|runner, host| {
            assert_eq!(runner.tasks[0].phase, crate::client::TaskPhase::Signalled);
            assert_eq!(host.count(|c| matches!(c, Command::Signal { .. })), 1);
            assert_eq!(host.unsettled, 0, "settled");
        });
    }
}
