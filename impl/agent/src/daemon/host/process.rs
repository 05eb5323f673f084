//! A task's process: started (or reattached after a restart of the agent), its handle
//! taken, signalled and killed through its supervisor; a mock task driven by its script.

use super::{exited, lost, task_spec, DaemonHost, Handle};
use crate::daemon::timers::Due;
use crate::daemon::unix_now_ns;
use crate::raw_exec::{self, Reattach};
use quiesce_core::client::driver::Driver;
use quiesce_core::client::AllocRunner;
use std::sync::Arc;

impl DaemonHost {
    pub(super) fn start_task(&mut self, ix: usize, runner: &AllocRunner) {
        let Some(shared) = self.shared.upgrade() else {
            return;
        };
        let Some(task) = task_spec(runner, ix) else {
            return;
        };
        let now = unix_now_ns();
        if task.driver == "mock_driver" {
            match self.mock.start(task, now) {
                Ok(handle) => {
                    self.set_handle(ix, Handle::Mock(handle));
                    self.schedule_mock_check(ix, now);
                }
                Err(error) => self.failed_to_start(ix, &error.to_string()),
            }
            return;
        }
        let dir = DaemonHost::task_dir(&shared.config.data_dir, &self.alloc, &task.name);
        // Each run (the first, and one per restart) has its own supervisor state.
        let run = runner
            .tasks
            .get(ix)
            .map_or(0, |t| u32::try_from(t.state.restarts).unwrap_or(u32::MAX));
        // A run was launched before if its supervisor started: it creates its `exit.json`
        // (empty) before it forks the task. The task's logs, or a run's directory, made
        // before a crash cut the launch short, are no launch: nothing ran.
        let found = if run == 0 {
            Ok(dir.clone())
        } else {
            raw_exec::find_run_dir(&dir, run).and_then(|found| match found {
                Some(found) => Ok(found),
                None => raw_exec::new_run_dir(&dir, run),
            })
        };
        let state = match found {
            Ok(found) => found,
            Err(error) => {
                self.failed_to_start(ix, &format!("finding the run's directory: {error}"));
                return;
            }
        };
        let launched_before = state.join(raw_exec::EXIT_FILE).exists();
        // A run started before a restart of the agent (or before a crash lost the runner's
        // progress) is reattached, never started twice.
        let attached = match raw_exec::reattach(&state) {
            Ok(Reattach::Running(attached)) => Ok(Ok(attached)),
            Ok(Reattach::Exited(record)) => Ok(Err(record)),
            // Launched before, yet neither supervisor nor exit status is left.
            Ok(Reattach::Lost) if launched_before => {
                Ok(Err(lost("the task's supervisor is gone".into())))
            }
            Ok(Reattach::Lost) => {
                let mut launch =
                    crate::daemon::launch::launch_of(task, runner, &dir, &shared.config);
                launch.state = (run > 0).then(|| state.clone());
                if self.restoring {
                    // The state that says it runs was read from the store: launched now
                    // (the restore may go on to stop it, in this critical section).
                    self.launch(ix, &task.name, &launch);
                } else {
                    // Launched once the runner's state saying so is durable (see `flush`).
                    self.pending.launches.push((ix, task.name.clone(), launch));
                }
                return;
            }
            // Never launched again on a doubt: a task must not run twice.
            Err(error) => Ok(Err(lost(format!("reattaching to the task: {error}")))),
        };
        self.attach(ix, &task.name, attached);
    }

    /// Carries out a launch, now: the runner's state that says the task runs is durable.
    pub(super) fn launch(&mut self, ix: usize, name: &str, launch: &raw_exec::Launch) {
        let Some(shared) = self.shared.upgrade() else {
            return;
        };
        let args: Vec<&str> = shared
            .config
            .supervisor_args
            .iter()
            .map(String::as_str)
            .collect();
        let launched = raw_exec::launch(&shared.config.supervisor, &args, launch);
        self.attach(ix, name, launched);
    }

    /// Takes a launched or reattached task's handle (or its exit, if it has ended or could
    /// not start).
    fn attach(
        &mut self,
        ix: usize,
        name: &str,
        attached: std::io::Result<Result<raw_exec::Attached, raw_exec::ExitRecord>>,
    ) {
        let Some(shared) = self.shared.upgrade() else {
            return;
        };
        match attached {
            Ok(Ok(attached)) => {
                match attached.signaller() {
                    Ok(signaller) => self.set_handle(
                        ix,
                        Handle::Process {
                            signaller: Arc::new(signaller),
                            delivered: attached.delivered.clone(),
                            pid: attached.pid,
                            user_signals: attached.user_signals,
                        },
                    ),
                    Err(error) => {
                        // A task that cannot be signalled cannot be stopped: it is ended now
                        // (its supervisor has not reaped it, so the pid is still its own),
                        // and the exit watcher reports the exit.
                        crate::daemon::say!(
                            "allocation {} task {}: no control connection, \
                             killing it: {error}",
                            self.alloc,
                            name
                        );
                        let _ = nix::sys::signal::killpg(
                            nix::unistd::Pid::from_raw(attached.pid),
                            nix::sys::signal::Signal::SIGKILL,
                        );
                    }
                }
                if let Err((error, attached)) =
                    shared.exits.watch(attached, (self.alloc.clone(), ix))
                {
                    // Not watchable (out of descriptors): a thread of its own waits instead.
                    crate::daemon::say!(
                        "allocation {} task {ix}: watching for its exit: {error}",
                        self.alloc
                    );
                    let weak = self.shared.clone();
                    let alloc = self.alloc.clone();
                    crate::daemon::spawn_named("waiter", move || {
                        let (record, reaper) = attached.wait();
                        if let Some(error) = &record.error {
                            crate::daemon::say!("allocation {alloc} task {ix}: {error}");
                        }
                        if let Some(shell) = weak.upgrade().and_then(|shared| shared.runner(&alloc))
                        {
                            shell.task_exited(ix, record.result());
                        }
                        reaper.reap();
                    });
                }
            }
            Ok(Err(record)) => {
                if let Some(error) = &record.error {
                    crate::daemon::say!("allocation {} task {}: {error}", self.alloc, name);
                }
                self.schedule(0, Due::Exited(ix, record.result().into()));
            }
            Err(error) => self.failed_to_start(ix, &error.to_string()),
        }
    }

    pub(super) fn failed_to_start(&mut self, ix: usize, error: &str) {
        crate::daemon::say!(
            "allocation {} task {ix} failed to start: {error}",
            self.alloc
        );
        let mut exit = exited(-1, None);
        exit.failure = Some(error.to_string());
        self.schedule(0, Due::Exited(ix, exit.into()));
    }

    /// The kill signal of kill number `kill`: asked of the supervisor (when the shell
    /// settles), which delivers it at most once — or, if it had delivered it before this
    /// host attached, not asked again. Returns whether it had been delivered so.
    pub(super) fn signal(&mut self, ix: usize, signal: &str, kill: u32, timeout_ns: i64) -> bool {
        self.launch_pending_now(ix);
        let now = unix_now_ns();
        match self.tasks.get(ix).cloned().flatten() {
            Some(Handle::Process {
                signaller,
                delivered,
                ..
            }) => {
                let Some(number) = raw_exec::signal_number(signal) else {
                    // Jobspec validation admits only signals this driver knows.
                    crate::daemon::say!(
                        "allocation {} task {ix}: unknown signal {signal:?}",
                        self.alloc
                    );
                    return false;
                };
                let before = delivered.iter().find(|d| d.kill == kill && !d.forced);
                if let Some(before) = before {
                    self.signalled_before.insert(ix, before.unix_ns);
                    return true;
                }
                let request = raw_exec::Request::Kill {
                    kill,
                    signal: number,
                    timeout_ns,
                };
                self.pending.requests.push((ix, signaller, request));
            }
            Some(Handle::Mock(handle)) => {
                let _ = self.mock.signal(&handle, signal, now);
                self.schedule_mock_check(ix, now);
            }
            None => {}
        }
        false
    }

    /// SIGKILL, asked of the supervisor when the shell settles.
    pub(super) fn force_kill(&mut self, ix: usize, kill: u32, runner: &AllocRunner) {
        self.launch_pending_now(ix);
        let now = unix_now_ns();
        match self.tasks.get(ix).cloned().flatten() {
            Some(Handle::Process { signaller, .. }) => {
                let task = runner.tasks.get(ix);
                let request = raw_exec::Request::Force {
                    kill,
                    signal: task
                        .and_then(|t| raw_exec::signal_number(&t.kill_signal))
                        .unwrap_or(libc::SIGINT),
                    timeout_ns: task.map_or(0, |t| t.kill_timeout_ns),
                };
                self.pending.requests.push((ix, signaller, request));
            }
            Some(Handle::Mock(handle)) => {
                let _ = self.mock.force_kill(&handle, now);
                self.schedule_mock_check(ix, now);
            }
            None => {}
        }
    }

    /// A user's signal (`alloc signal`) to task `ix`'s process group, sent now through its
    /// supervisor, which delivers it once (or not at all, should the task have exited
    /// first). Refused, as Nomad's "Task not running", when the task has no process.
    pub fn user_signal(&self, ix: usize, signal: i32) -> Result<(), String> {
        match self.tasks.get(ix) {
            Some(Some(Handle::Process {
                user_signals: false,
                ..
            })) => Err(
                "its supervisor was started by an older agent, which cannot send a \
                        user's signal: restart the task to signal it"
                    .to_string(),
            ),
            Some(Some(Handle::Process { signaller, .. })) => signaller
                .send(raw_exec::Request::Signal { signal })
                .map_err(|e| format!("sending the signal to the task's supervisor: {e}")),
            // A mock task takes a signal and does nothing with it, as Nomad's mock driver.
            Some(Some(Handle::Mock(_))) => Ok(()),
            _ => Err("Task not running".to_string()),
        }
    }

    /// The pid leading task `ix`'s process group, while it has a process.
    pub fn task_pid(&self, ix: usize) -> Option<i32> {
        match self.tasks.get(ix) {
            Some(Some(Handle::Process { pid, .. })) => Some(*pid),
            _ => None,
        }
    }

    /// Asks the supervisor of a task whose process has died for its exit status.
    pub fn request_exit(&self, ix: usize) {
        if let Some(Some(Handle::Process { signaller, .. })) = self.tasks.get(ix) {
            if let Err(error) = signaller.send(raw_exec::Request::Report) {
                crate::daemon::say!(
                    "allocation {} task {ix}: asking for the exit: {error}",
                    self.alloc
                );
            }
        }
    }
    /// A command for a task whose launch waits for the settle: launched now, before its
    /// batch is durable (the runner never asks this: a task's first commands after its
    /// start come in later events).
    fn launch_pending_now(&mut self, ix: usize) {
        let Some(at) = self
            .pending
            .launches
            .iter()
            .position(|(task, ..)| *task == ix)
        else {
            return;
        };
        debug_assert!(
            false,
            "a command for task {ix} before its launch was stored"
        );
        crate::daemon::say!(
            "bug: allocation {} task {ix}: launched before its launch was stored",
            self.alloc
        );
        let (ix, name, launch) = self.pending.launches.remove(at);
        self.launch(ix, &name, &launch);
    }
}
