//! The stop path as a stateright [`Model`]: which steps are enabled, and what each does.
//!
//! Every step follows `reference/nomad-stop-path.md` except where DESIGN.md ("Where quiesce
//! deliberately differs from Nomad") decides otherwise; each planted [`Fault`] is one `if`
//! at the place the careless implementation would go wrong.

use crate::config::{Fault, History, ModelCfg, Operator, Request, TaskKind, MAX_ALLOCS, MAX_TASKS};
use crate::properties;
use crate::state::{
    Alloc, Delay, Ghost, Job, JobVersion, RunnerPhase, SpecDigest, State, Task, TaskPhase,
};
use crate::step::{Action, AllocIx, TaskIx};
use stateright::{Model, Property};

/// The model of one configuration part. Build it with [`ModelCfg::into_model`].
#[derive(Clone, Debug)]
pub struct StopPathModel {
    pub cfg: ModelCfg,
    /// The job's spec as first registered: what every stored version must keep.
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
        let mut task_shutdown_delay = [false; MAX_TASKS];
        for (slot, task) in task_shutdown_delay.iter_mut().zip(&cfg.group.tasks) {
            *slot = task.shutdown_delay;
        }
        let spec = SpecDigest {
            group_shutdown_delay: cfg.group.shutdown_delay,
            task_shutdown_delay,
        };
        StopPathModel { cfg, spec }
    }

    fn has(&self, fault: Fault) -> bool {
        self.cfg.fault == Some(fault)
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
                Request::ClientRestart => actions.push(Action::ClientRestart),
            }
        }
    }

    /// Every internal (non-request) step enabled in `state`, in a fixed order.
    pub fn internal_actions(&self, state: &State, actions: &mut Vec<Action>) {
        if state.eval_pending {
            actions.push(Action::ProcessEval);
        }
        for (ix, alloc) in state.allocs.iter().enumerate() {
            let a = ix as AllocIx;
            if alloc.sync_pending() {
                actions.push(Action::ClientSync { alloc: a });
            }
            match alloc.runner {
                RunnerPhase::PreKill => actions.push(Action::GroupPreKill { alloc: a }),
                RunnerPhase::GroupDelay => actions.push(Action::GroupDelayElapsed { alloc: a }),
                RunnerPhase::Killing => self.push_task_steps(alloc, a, actions),
                RunnerPhase::Pending | RunnerPhase::Running | RunnerPhase::Terminal => {}
            }
        }
    }

    fn push_task_steps(&self, alloc: &Alloc, a: AllocIx, actions: &mut Vec<Action>) {
        for (ix, kind) in self.tasks() {
            let task = &alloc.tasks[ix];
            let t = ix as TaskIx;
            match (kind, task.phase) {
                (TaskKind::Poststop, TaskPhase::NotStarted) => {
                    if self.poststop_may_start(alloc) {
                        actions.push(Action::PoststopStart { alloc: a, task: t });
                    }
                }
                (TaskKind::Poststop, TaskPhase::Running) => {
                    actions.push(Action::PoststopExit { alloc: a, task: t })
                }
                (TaskKind::Poststop, _) => {}
                (_, TaskPhase::Running) => {
                    if self.kill_may_begin(alloc, kind) {
                        actions.push(Action::TaskPreKill { alloc: a, task: t });
                    }
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

    // ------------------------------------------------------------------ operator requests

    fn stop_job(&self, state: &mut State, purge: bool, no_shutdown_delay: bool) {
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

    fn stop_alloc(&self, state: &mut State, ix: usize, no_shutdown_delay: bool) {
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

    fn start_job(&self, state: &mut State) {
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

    // ------------------------------------------------------------------ scheduler

    /// Reconcile: stop every non-terminal allocation of a stopped job; stop and replace
    /// migrating ones; place up to `count` (§1.6).
    fn process_eval(&self, state: &mut State) {
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
    fn least_loaded_node(&self, state: &State) -> u8 {
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

    // ------------------------------------------------------------------ client

    fn client_sync(&self, state: &mut State, ix: usize) {
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
            RunnerPhase::Running if view.stop => alloc.runner = RunnerPhase::PreKill,
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
    fn cancel_delays(&self, alloc: &mut Alloc) {
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

    fn group_pre_kill(&self, alloc: &mut Alloc) {
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

    fn group_delay_elapsed(&self, alloc: &mut Alloc) {
        debug_assert_eq!(alloc.group_delay, Delay::Waiting);
        alloc.group_delay = Delay::Elapsed;
        alloc.runner = RunnerPhase::Killing;
    }

    /// The task's kill begins: `Killing`, its pre-kill hooks, then its delay (§2.4).
    fn task_pre_kill(&self, alloc: &mut Alloc, ix: usize) {
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
    fn end_task_delay(&self, alloc: &mut Alloc, ix: usize) {
        let sigkill_now = self.has(Fault::FlagBypassesKillTimeout) && alloc.cancelled;
        let task = &mut alloc.tasks[ix];
        if self.has(Fault::SignalBeforeDeregistration) {
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

    fn task_exited(&self, alloc: &mut Alloc, ix: usize) {
        let task = &mut alloc.tasks[ix];
        if task.phase == TaskPhase::Delaying {
            task.delay = Delay::ExitedDuring;
        }
        task.phase = TaskPhase::Exited;
        // The exited hook deregisters the task's services again (idempotent).
        task.service_registered = false;
    }

    fn kill_timeout(&self, alloc: &mut Alloc, ix: usize) {
        let task = &mut alloc.tasks[ix];
        task.kill_timeout_fired = true;
        task.sigkilled = true;
        self.task_exited(alloc, ix);
    }

    /// After a task or poststop step: the runner is terminal once every task that will run
    /// is dead.
    fn settle_runner(&self, alloc: &mut Alloc) {
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
    fn finish(&self, alloc: &mut Alloc) {
        alloc.runner = RunnerPhase::Terminal;
        alloc.group_service_registered = false;
        if alloc.tombstone {
            alloc.removed = true;
        }
    }

    /// Runners are restored from stored state. quiesce applies the flag the stored allocation
    /// carries (DESIGN.md); Nomad does not.
    fn client_restart(&self, state: &mut State) {
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

    /// Lean history: erase every finished allocation record, the details of every dead task
    /// of a live one, a stopped allocation's `Migrate` bit and every job version but the
    /// latest, after folding the invariants that judged them into the sticky violation bits
    /// (`reference/model-sizing.md` §1).
    fn erase_finished(&self, state: &mut State) {
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
                Some(self.compact_dead_tasks(alloc))
            };
            if compact.as_ref() != Some(alloc) {
                violations |= properties::record_violations(self, alloc);
            }
            if let Some(compact) = compact {
                *alloc = compact;
            }
            !finished
        });
        state.violations = violations;
    }

    /// A dead task keeps only what a witness still looks for: whether it exited on its own
    /// during its delay, and whether it was SIGKILLed after its kill timeout.
    fn compact_dead_tasks(&self, alloc: &Alloc) -> Alloc {
        let mut compact = *alloc;
        // Migrate only decides what the scheduler does with a running allocation.
        if compact.desired_stop || compact.tombstone {
            compact.migrate = false;
        }
        for (ix, kind) in self.tasks() {
            let task = &mut compact.tasks[ix];
            if task.phase != TaskPhase::Exited || kind == TaskKind::Poststop {
                continue;
            }
            *task = Task {
                phase: TaskPhase::Exited,
                killing: true,
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
            };
        }
        compact
    }
}

impl Model for StopPathModel {
    type State = State;
    type Action = Action;

    /// The job is registered and running: `count` allocations placed, pulled and running,
    /// their services registered.
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
            eval_pending: false,
            allocs: Vec::new(),
            requests_made: 0,
            ghost,
            violations: 0,
        };
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
            Action::ProcessEval => self.process_eval(&mut state),
            Action::ClientSync { alloc } => self.client_sync(&mut state, usize::from(alloc)),
            Action::ClientRestart => self.client_restart(&mut state),
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
