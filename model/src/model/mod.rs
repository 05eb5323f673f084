//! The stop path as a stateright [`Model`]: which steps are enabled, and what each does.
//!
//! Every step follows `reference/nomad-stop-path.md` except where DESIGN.md ("Where quiesce
//! deliberately differs from Nomad") decides otherwise; each planted [`Fault`] is one `if`
//! at the place the careless implementation would go wrong.
//!
//! ## A stop, step by step
//!
//! `job stop -no-shutdown-delay web` on two running allocations, each with a group delay, a
//! leader with a task delay, a sidecar and a poststop task:
//!
//! 1. `StopJob { purge: false, no_shutdown_delay: true }`, one atomic write: version 1 has
//!    `Stop=true` and the same spec (`jobspec_unchanged`), both allocations are flagged (the
//!    ghost `flag_requested` is set), and an evaluation is pending. No client has seen it.
//! 2. `ClientSync { 0 }` may come before the scheduler: the client pulls the flag alone and
//!    cancels allocation 0's delays before any stop. From here on no delay of allocation 0
//!    may be waited (`flag_is_honoured`).
//! 3. `ProcessEval`: both allocations get desired stop; the flag survives.
//! 4. `ClientSync { 0 }`, `ClientSync { 1 }`: the stop reaches the runners; allocation 1
//!    learns the flag and the stop in one update.
//! 5. `GroupPreKill { i }`: the group services are deregistered (`prestop_hooks_always_run`)
//!    and the group delay is skipped (`delay_skipped_only_when_flagged`: a flagged request
//!    came first). Had the flag come after this step, its pull would cut the wait short.
//! 6. `TaskPreKill { i, leader }`: `Killing`, the leader's service deregistered, its delay
//!    skipped, its kill signal sent. `kill_order` keeps the sidecar running until the leader
//!    is dead.
//! 7. `TaskExit` or `KillTimeout`: the leader dies, SIGKILLed only after its kill timeout
//!    (`kill_timeout_respected`), flag or no flag. Then the sidecar; then the poststop task
//!    runs to its end (`kill_order`), and the allocation is client-terminal.
//! 8. Every state on the way in which nothing is pending satisfies `stop_completes`.

use crate::config::{Fault, History, ModelCfg, Operator, Request, TaskKind, MAX_TASKS};
use crate::properties;
use crate::state::{
    Alloc, Delay, Deployment, Ghost, Job, JobVersion, RunnerPhase, SpecDigest, State, Task,
    TaskPhase,
};
use crate::step::{Action, AllocIx, TaskIx};
use stateright::{Model, Property};

mod client;
mod lean;
mod requests;
mod restart;

/// The model of one configuration part. Build it with [`ModelCfg::into_model`].
#[derive(Clone, Debug)]
pub struct StopPathModel {
    pub cfg: ModelCfg,
    /// The job's spec as first registered (generation 0): what every stored version of its
    /// generation must keep.
    pub spec: SpecDigest,
}

impl StopPathModel {
    pub fn new(cfg: ModelCfg) -> Self {
        assert!(
            cfg.group.tasks.len() <= MAX_TASKS,
            "at most {MAX_TASKS} tasks per group"
        );
        assert!(
            cfg.count >= 1 && cfg.nodes >= 1,
            "count and nodes must be at least 1"
        );
        assert!(
            usize::from(cfg.count) <= crate::config::MAX_ALLOCS,
            "at most {} allocations",
            crate::config::MAX_ALLOCS
        );
        assert!(
            cfg.restart_attempts <= crate::config::MAX_RESTART_ATTEMPTS,
            "at most {} restart attempts",
            crate::config::MAX_RESTART_ATTEMPTS
        );
        let mut task_shutdown_delay = [false; MAX_TASKS];
        for (slot, task) in task_shutdown_delay.iter_mut().zip(&cfg.group.tasks) {
            *slot = task.shutdown_delay;
        }
        let spec = SpecDigest {
            generation: 0,
            group_shutdown_delay: cfg.group.shutdown_delay,
            task_shutdown_delay,
        };
        StopPathModel { cfg, spec }
    }

    /// The spec the operator registered for `generation`: an update changes what the stop
    /// path does not read (the model's specs differ in their generation only).
    pub fn spec_of(&self, generation: u8) -> SpecDigest {
        SpecDigest {
            generation,
            ..self.spec
        }
    }

    fn has(&self, fault: Fault) -> bool {
        self.cfg.fault == Some(fault)
    }

    /// The job's status as the API shows it ([`State::job_status`]): the model places its
    /// allocations at the start, so a job with a count has had one placed.
    pub fn job_status(&self, state: &State) -> Option<crate::state::JobStatus> {
        state.job_status(
            self.cfg.count > 0,
            self.has(Fault::NomadJobDeadAtDesiredStop),
        )
    }

    fn tasks(&self) -> impl Iterator<Item = (usize, TaskKind)> + '_ {
        self.cfg
            .group
            .tasks
            .iter()
            .map(|task| task.kind)
            .enumerate()
    }

    /// The kill stage of a task kind, with the `SidecarsKilledWithMainTasks` fault applied.
    fn stage(&self, kind: TaskKind) -> u8 {
        if kind == TaskKind::Sidecar && self.has(Fault::SidecarsKilledWithMainTasks) {
            TaskKind::Main.kill_stage()
        } else {
            kind.kill_stage()
        }
    }

    /// A freshly placed allocation on `node`: not yet pulled, nothing started.
    fn new_alloc(&self, spec: SpecDigest, node: u8, ghost: &Ghost) -> Alloc {
        Alloc {
            spec,
            node,
            desired_stop: false,
            migrate: false,
            // flag_scoped: a new allocation never carries the flag (DESIGN.md invariant 5).
            no_shutdown_delay: false,
            tombstone: false,
            removed: false,
            pulled: None,
            runner: RunnerPhase::Pending,
            cancelled: false,
            group_pre_kill: false,
            group_service_registered: false,
            group_delay: Delay::None,
            tasks: [Task::NOT_STARTED; MAX_TASKS],
            flag_requested: false,
            flag_due: false,
            placed_after_flagged_stop: ghost.started_after_flagged_stop,
            failed: false,
            flagged_restart_done: false,
            rollout_stop: false,
            watched: false,
            abandoned: false,
            canary: false,
            beside_canary: false,
            downgraded: false,
        }
    }

    /// The runner starts every non-poststop task and registers the services.
    fn start_runner(&self, alloc: &mut Alloc) {
        alloc.runner = RunnerPhase::Running;
        alloc.group_service_registered = self.cfg.group.service;
        for (ix, kind) in self.tasks() {
            if kind != TaskKind::Poststop {
                alloc.tasks[ix].phase = TaskPhase::Running;
                alloc.tasks[ix].service_registered = self.cfg.group.tasks[ix].service;
            }
        }
    }

    /// The next request the operator may make, if any is left.
    fn offered(&self, state: &State) -> Vec<Request> {
        let made = usize::from(state.requests_made);
        match &self.cfg.operator {
            Operator::Budget(budget) if made < usize::from(*budget) => {
                let mut requests = vec![
                    Request::StopJob {
                        purge: false,
                        no_shutdown_delay: false,
                    },
                    Request::StopJob {
                        purge: false,
                        no_shutdown_delay: true,
                    },
                    Request::StopJob {
                        purge: true,
                        no_shutdown_delay: false,
                    },
                    Request::StopJob {
                        purge: true,
                        no_shutdown_delay: true,
                    },
                    Request::StopAlloc {
                        no_shutdown_delay: false,
                    },
                    Request::StopAlloc {
                        no_shutdown_delay: true,
                    },
                    Request::StartJob,
                ];
                if self.cfg.budget_restarts {
                    requests.push(Request::ClientRestart);
                }
                if self.cfg.restart_requests {
                    requests.push(Request::RestartAlloc {
                        no_shutdown_delay: false,
                    });
                    requests.push(Request::RestartAlloc {
                        no_shutdown_delay: true,
                    });
                }
                requests
            }
            Operator::Script(script) => script.get(made).copied().into_iter().collect(),
            Operator::Budget(_) => Vec::new(),
        }
    }

    fn push_requests(&self, state: &State, actions: &mut Vec<Action>) {
        for request in self.offered(state) {
            match request {
                // Stopping an unknown (purged) job is a documented no-op: not offered.
                Request::StopJob {
                    purge,
                    no_shutdown_delay,
                } if !state.job.purged => actions.push(Action::StopJob {
                    purge,
                    no_shutdown_delay,
                }),
                Request::StopJob { .. } => {}
                // Any allocation the server still answers for, terminal or not (Nomad has no
                // terminal check, §1.5 step 6); a tombstone answers 404.
                Request::StopAlloc { no_shutdown_delay } => {
                    for (ix, alloc) in state.allocs.iter().enumerate() {
                        if !alloc.removed && !alloc.tombstone {
                            actions.push(Action::StopAlloc {
                                alloc: ix as AllocIx,
                                no_shutdown_delay,
                            });
                        }
                    }
                }
                Request::StartJob if state.job.is_stopped() => actions.push(Action::StartJob),
                Request::StartJob => {}
                Request::UpdateJob if state.job.latest().is_some_and(|v| !v.stop) => {
                    actions.push(Action::UpdateJob)
                }
                Request::UpdateJob => {}
                Request::ClientRestart => actions.push(Action::ClientRestart),
                // A restart goes to the client; it is refused (no step) for an allocation
                // the server has stopped or whose runner is stopping, and for a task that is
                // not running (Nomad: "Task not running").
                Request::RestartAlloc { no_shutdown_delay } => {
                    for (ix, alloc) in state.allocs.iter().enumerate() {
                        let running: Vec<usize> = self.restartable_tasks(alloc).collect();
                        if alloc.is_terminal()
                            || alloc.runner != RunnerPhase::Running
                            || running.is_empty()
                        {
                            continue;
                        }
                        let a = ix as AllocIx;
                        actions.push(Action::RestartAlloc {
                            alloc: a,
                            task: None,
                            no_shutdown_delay,
                        });
                        for task in running {
                            actions.push(Action::RestartAlloc {
                                alloc: a,
                                task: Some(task as TaskIx),
                                no_shutdown_delay,
                            });
                        }
                    }
                }
            }
        }
    }

    /// The tasks a restart of `alloc` may target: its running tasks (poststop tasks run only
    /// once the allocation stops).
    fn restartable_tasks<'a>(&'a self, alloc: &'a Alloc) -> impl Iterator<Item = usize> + 'a {
        self.tasks()
            .filter(move |&(ix, kind)| {
                kind != TaskKind::Poststop && alloc.tasks[ix].phase == TaskPhase::Running
            })
            .map(|(ix, _)| ix)
    }

    /// Every internal (non-request) step enabled in `state`, in a fixed order.
    pub fn internal_actions(&self, state: &State, actions: &mut Vec<Action>) {
        let budget = self.cfg.crash_budget;
        let may_crash = budget == 0 || state.crashes < budget;
        if state.eval_pending {
            actions.push(Action::ProcessEval);
        }
        for (ix, alloc) in state.allocs.iter().enumerate() {
            let a = ix as AllocIx;
            if alloc.sync_pending() {
                actions.push(Action::ClientSync { alloc: a });
            }
            if self.may_turn_healthy(alloc) {
                actions.push(Action::AllocHealthy { alloc: a });
            }
            match alloc.runner {
                RunnerPhase::PreKill => actions.push(Action::GroupPreKill { alloc: a }),
                RunnerPhase::GroupDelay => actions.push(Action::GroupDelayElapsed { alloc: a }),
                RunnerPhase::Running | RunnerPhase::Killing => {}
                RunnerPhase::Pending | RunnerPhase::Terminal => continue,
            }
            self.push_task_steps(alloc, a, may_crash, actions);
        }
    }

    /// The task steps of a started runner. A kill's timers and exits, a crash, a restart
    /// decision and a restart delay belong to no runner phase (a restart's kill runs while the
    /// runner runs); a stop's kill beginning and poststop tasks belong to `Killing`.
    fn push_task_steps(
        &self,
        alloc: &Alloc,
        a: AllocIx,
        may_crash: bool,
        actions: &mut Vec<Action>,
    ) {
        let killing = alloc.runner == RunnerPhase::Killing;
        for (ix, kind) in self.tasks() {
            let task = &alloc.tasks[ix];
            let t = ix as TaskIx;
            match (kind, task.phase) {
                (TaskKind::Poststop, TaskPhase::NotStarted) => {
                    if killing && self.poststop_may_start(alloc) {
                        actions.push(Action::PoststopStart { alloc: a, task: t });
                    }
                }
                (TaskKind::Poststop, TaskPhase::Running) => {
                    actions.push(Action::PoststopExit { alloc: a, task: t })
                }
                (TaskKind::Poststop, _) => {}
                (_, TaskPhase::Running) => {
                    if killing && self.kill_may_begin(alloc, kind) {
                        actions.push(Action::TaskPreKill { alloc: a, task: t });
                    }
                    if self.cfg.group.tasks[ix].may_crash && may_crash {
                        actions.push(Action::TaskExit { alloc: a, task: t });
                    }
                }
                (_, TaskPhase::Crashed) => {
                    let unrecoverable = self.cfg.group.tasks[ix].crash_unrecoverable;
                    actions.push(Action::RestartDecision {
                        alloc: a,
                        task: t,
                        unrecoverable,
                    });
                    if self.cfg.unrecoverable_crashes && !unrecoverable {
                        actions.push(Action::RestartDecision {
                            alloc: a,
                            task: t,
                            unrecoverable: true,
                        });
                    }
                }
                (_, TaskPhase::Restarting) => {
                    actions.push(Action::RestartDelayElapsed { alloc: a, task: t })
                }
                (_, TaskPhase::Delaying) => {
                    actions.push(Action::TaskDelayElapsed { alloc: a, task: t });
                    actions.push(Action::TaskExit { alloc: a, task: t });
                }
                (_, TaskPhase::Signalled) => {
                    actions.push(Action::TaskExit { alloc: a, task: t });
                    if !task.kill_timeout_fired {
                        actions.push(Action::KillTimeout { alloc: a, task: t });
                    }
                }
                (_, TaskPhase::NotStarted | TaskPhase::Exited) => {}
            }
        }
    }

    /// kill_order: a task's kill begins only when every task of an earlier stage is dead.
    fn kill_may_begin(&self, alloc: &Alloc, kind: TaskKind) -> bool {
        let stage = self.stage(kind);
        self.tasks()
            .all(|(ix, other)| self.stage(other) >= stage || alloc.tasks[ix].is_done())
    }

    fn non_poststop_done(&self, alloc: &Alloc) -> bool {
        self.tasks()
            .all(|(ix, kind)| kind == TaskKind::Poststop || alloc.tasks[ix].is_done())
    }

    fn poststop_skipped(&self, alloc: &Alloc) -> bool {
        self.has(Fault::PoststopSkippedWhenFlagged) && alloc.cancelled
    }

    /// kill_order: poststop tasks start once every other task is dead — flag or no flag.
    fn poststop_may_start(&self, alloc: &Alloc) -> bool {
        self.non_poststop_done(alloc) && !self.poststop_skipped(alloc)
    }
}

impl Model for StopPathModel {
    type State = State;
    type Action = Action;

    /// The job is registered and running: `count` allocations placed, pulled and running,
    /// their services registered; with an `update` block, placed by the registration's
    /// deployment, which has succeeded.
    fn init_states(&self) -> Vec<State> {
        let ghost = Ghost::default();
        let mut state = State {
            job: Job {
                versions: vec![JobVersion {
                    spec: self.spec,
                    stop: false,
                }],
                purged: false,
            },
            deployment: Deployment::None,
            eval_pending: false,
            allocs: Vec::new(),
            requests_made: 0,
            stable: 0,
            crashes: 0,
            ghost,
            violations: 0,
        };
        // With an `update` block the registration's deployment placed them, and has
        // succeeded: each was reported healthy (and is no longer watched).
        if self.cfg.max_parallel > 0 {
            state.deployment = Deployment::Successful;
        }
        for _ in 0..self.cfg.count {
            let node = self.least_loaded_node(&state);
            let mut alloc = self.new_alloc(self.spec, node, &ghost);
            alloc.pulled = alloc.server_view();
            self.start_runner(&mut alloc);
            state.allocs.push(alloc);
        }
        vec![state]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        self.push_requests(state, actions);
        self.internal_actions(state, actions);
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        match action {
            Action::StopJob {
                purge,
                no_shutdown_delay,
            } => self.stop_job(&mut state, purge, no_shutdown_delay),
            Action::StopAlloc {
                alloc,
                no_shutdown_delay,
            } => self.stop_alloc(&mut state, usize::from(alloc), no_shutdown_delay),
            Action::StartJob => self.start_job(&mut state),
            Action::UpdateJob => self.update_job(&mut state),
            Action::AllocHealthy { alloc } => self.alloc_healthy(&mut state, usize::from(alloc)),
            Action::ProcessEval => self.process_eval(&mut state),
            Action::ClientSync { alloc } => self.client_sync(&mut state, usize::from(alloc)),
            Action::ClientRestart => self.client_restart(&mut state),
            Action::RestartAlloc {
                alloc,
                task,
                no_shutdown_delay,
            } => self.restart_alloc(
                &mut state,
                usize::from(alloc),
                task.map(usize::from),
                no_shutdown_delay,
            ),
            Action::RestartDecision {
                alloc,
                task,
                unrecoverable,
            } => {
                let alloc = &mut state.allocs[usize::from(alloc)];
                self.restart_decision(alloc, usize::from(task), unrecoverable);
                self.settle_runner(alloc);
            }
            Action::RestartDelayElapsed { alloc, task } => {
                let alloc = &mut state.allocs[usize::from(alloc)];
                self.run_again(alloc, usize::from(task));
            }
            Action::GroupPreKill { alloc } => {
                let alloc = &mut state.allocs[usize::from(alloc)];
                self.group_pre_kill(alloc);
                self.settle_runner(alloc);
            }
            Action::GroupDelayElapsed { alloc } => {
                let alloc = &mut state.allocs[usize::from(alloc)];
                self.group_delay_elapsed(alloc);
                self.settle_runner(alloc);
            }
            Action::TaskPreKill { alloc, task } => {
                let alloc = &mut state.allocs[usize::from(alloc)];
                self.task_pre_kill(alloc, usize::from(task));
                self.settle_runner(alloc);
            }
            Action::TaskDelayElapsed { alloc, task } => {
                let alloc = &mut state.allocs[usize::from(alloc)];
                let ix = usize::from(task);
                alloc.tasks[ix].delay = Delay::Elapsed;
                self.end_task_delay(alloc, ix);
                self.settle_runner(alloc);
            }
            Action::TaskExit { alloc, task } => {
                let crashed = state.allocs[usize::from(alloc)].tasks[usize::from(task)].phase
                    == TaskPhase::Running;
                if crashed && self.cfg.crash_budget > 0 {
                    state.crashes += 1;
                }
                let alloc = &mut state.allocs[usize::from(alloc)];
                self.task_exited(alloc, usize::from(task));
                self.settle_runner(alloc);
            }
            Action::KillTimeout { alloc, task } => {
                let alloc = &mut state.allocs[usize::from(alloc)];
                self.kill_timeout(alloc, usize::from(task));
                self.settle_runner(alloc);
            }
            Action::PoststopStart { alloc, task } => {
                let alloc = &mut state.allocs[usize::from(alloc)];
                alloc.tasks[usize::from(task)].phase = TaskPhase::Running;
            }
            Action::PoststopExit { alloc, task } => {
                let alloc = &mut state.allocs[usize::from(alloc)];
                alloc.tasks[usize::from(task)].phase = TaskPhase::Exited;
                self.settle_runner(alloc);
            }
        }
        self.rollout_stop_reported(last, &mut state);
        self.watched_alloc_failed(last, &mut state);
        if self.cfg.history == History::Lean {
            self.erase_finished(&mut state);
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        properties::all(self)
    }

    fn format_action(&self, action: &Action) -> String {
        action.to_string()
    }
}
