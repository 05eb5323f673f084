//! The operator's requests to the server and the scheduler's reconciliation: one atomic
//! write each, as `reference/nomad-stop-path.md` §1 describes them.

use super::StopPathModel;
use crate::config::{Fault, MAX_ALLOCS, MAX_TASKS};
use crate::state::{Alloc, Deployment, Job, JobVersion, RunnerPhase, SpecDigest, State};

impl StopPathModel {
    pub(super) fn stop_job(&self, state: &mut State, purge: bool, no_shutdown_delay: bool) {
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
        // Nomad's reconciler cancels the deployment of a stopped job.
        if state.deployment.is_running() {
            state.deployment = Deployment::Cancelled;
            Self::forget_canary_indexes(state);
        }
        if purge {
            // A purge deletes the job's deployments with it (and with them what a failed one
            // left abandoned).
            state.deployment = Deployment::None;
            for alloc in state.allocs.iter_mut() {
                alloc.abandoned = false;
            }
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

    pub(super) fn stop_alloc(&self, state: &mut State, ix: usize, no_shutdown_delay: bool) {
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

    pub(super) fn start_job(&self, state: &mut State) {
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
        self.open_deployment(state);
    }

    /// `job run` of an edited jobspec: a version of the next generation, the same stop-path
    /// fields; with an `update` block, a deployment that replaces the older allocations
    /// `max_parallel` at a time (an earlier deployment still running is superseded).
    pub(super) fn update_job(&self, state: &mut State) {
        state.requests_made += 1;
        state.eval_pending = true;
        let latest = *state
            .job
            .latest()
            .expect("an update is offered for a registered job");
        let generation = latest.spec.generation + 1;
        assert!(generation < 4, "at most three updates");
        state.job.versions.push(JobVersion {
            spec: self.spec_of(generation),
            stop: false,
        });
        self.open_deployment(state);
    }

    /// After a new running version is stored (an update, a start): a deployment still
    /// running is superseded, and, when the group has an `update` block, one opens if the
    /// version has allocations to replace (of an older generation, still running) or to
    /// place (fewer than `count` of its own run), as Nomad's reconciler opens one for any
    /// version with placements — a first registration's, a start's.
    pub fn open_deployment(&self, state: &mut State) {
        if state.deployment.is_running() {
            state.deployment = Deployment::Cancelled;
        }
        // Its canaries are stopped; the new deployment's take names of their own.
        Self::forget_canary_indexes(state);
        let generation = state
            .job
            .latest()
            .map_or(0, |latest| latest.spec.generation);
        let older_running = state
            .allocs
            .iter()
            .any(|alloc| !alloc.is_terminal() && alloc.spec.generation < generation);
        if self.cfg.max_parallel > 0
            && (older_running || self.live_of(state, generation) < usize::from(self.cfg.count))
        {
            // Canaries only for an update of running allocations (Nomad's
            // `requiresCanaries`: destructive updates to make).
            state.deployment = if self.cfg.canary > 0 && older_running {
                Deployment::Canaries
            } else {
                // A deployment without canaries: what later canaries' neighbours are
                // placed at.
                state.stable = generation;
                Deployment::Running
            };
        }
    }

    /// No allocation is beside a canary any more: the deployment that placed them ended or
    /// was superseded.
    fn forget_canary_indexes(state: &mut State) {
        for alloc in state.allocs.iter_mut() {
            alloc.beside_canary = false;
            alloc.downgraded = false;
        }
    }

    /// The allocations of `generation` that run or will (not terminal).
    fn live_of(&self, state: &State, generation: u8) -> usize {
        state
            .allocs
            .iter()
            .filter(|alloc| !alloc.is_terminal() && alloc.spec.generation == generation)
            .count()
    }

    /// The client reports an allocation healthy; while the deployment runs, its watcher
    /// asks for an evaluation, which may start the next batch.
    /// With canaries, the report that makes the last of them healthy promotes the
    /// deployment (`auto_promote`): they count toward `count` from then on, and the older
    /// allocations are replaced.
    pub(super) fn alloc_healthy(&self, state: &mut State, ix: usize) {
        state.allocs[ix].watched = false;
        state.allocs[ix].downgraded = false;
        state.allocs[ix].abandoned = false;
        if state.deployment.is_running() {
            state.eval_pending = true;
        }
        // The running deployment's own canaries: a superseded one's are stopped instead.
        let generation = state
            .job
            .latest()
            .map_or(0, |latest| latest.spec.generation);
        // Those healthy and not stopped lose the mark at the promotion (Nomad's).
        let promotable = |alloc: &Alloc| {
            alloc.canary
                && alloc.spec.generation == generation
                && !alloc.is_terminal()
                && !alloc.watched
        };
        let healthy_canaries = state.allocs.iter().filter(|a| promotable(a)).count();
        if state.deployment == Deployment::Canaries
            && healthy_canaries >= usize::from(self.cfg.canary)
        {
            state.deployment = Deployment::Running;
            state.stable = generation;
            state.ghost.canaries_promoted = true;
            for alloc in state.allocs.iter_mut().filter(|alloc| promotable(alloc)) {
                alloc.canary = false;
            }
        }
    }

    /// After a step: an allocation a rollout stopped that turned client-terminal in it is
    /// reported so, and while the deployment runs its watcher asks for an evaluation (the
    /// next batch may have waited for this stop alone).
    pub(super) fn rollout_stop_reported(&self, last: &State, state: &mut State) {
        let ended = state.allocs.iter().zip(&last.allocs).any(|(now, before)| {
            now.rollout_stop
                && now.runner == RunnerPhase::Terminal
                && before.runner != RunnerPhase::Terminal
        });
        if ended && state.deployment.is_running() && !self.has(Fault::RolloutStopEndNotReported) {
            state.eval_pending = true;
        }
    }

    /// After a step: an allocation a deployment watches that failed on its own in it (its
    /// restart policy gave up, the server still wanting it to run) is reported so — its
    /// health decided, unhealthy — and a running deployment of its version fails, as the implementation's
    /// server fails it (`replacement_failed`). It stops no rollout already begun; a
    /// deployment that fails with canaries not promoted asks for an evaluation, which stops
    /// them (Nomad's `cancelUnneededCanaries`).
    pub(super) fn watched_alloc_failed(&self, last: &State, state: &mut State) {
        let generation = state
            .job
            .latest()
            .map_or(0, |latest| latest.spec.generation);
        let mut failed = false;
        for (now, before) in state.allocs.iter_mut().zip(&last.allocs) {
            let ended =
                now.runner == RunnerPhase::Terminal && before.runner != RunnerPhase::Terminal;
            if ended && now.watched && now.failed && !now.desired_stop && !now.tombstone {
                // Its own deployment fails, if it still runs: one of an older version was
                // superseded already (the implementation's `fail_for`).
                failed |= now.spec.generation == generation || now.downgraded;
                now.downgraded = false;
                now.watched = false;
                now.abandoned = false;
            }
        }
        if failed && state.deployment.is_running() {
            state.eval_pending |= state.deployment == Deployment::Canaries;
            state.deployment = Deployment::Failed;
            Self::forget_canary_indexes(state);
            for alloc in state.allocs.iter_mut().filter(|alloc| alloc.watched) {
                alloc.abandoned = true;
            }
        }
    }

    /// An allocation its client may report healthy, by what the client knows: placed by a
    /// deployment, no stop pulled, every task that is not poststop running (its
    /// `min_healthy_time` is abstracted: its timer may fire at any moment the tasks run).
    pub(super) fn may_turn_healthy(&self, alloc: &Alloc) -> bool {
        alloc.watched
            && alloc.runner == RunnerPhase::Running
            && self.tasks().all(|(ix, kind)| {
                kind == crate::config::TaskKind::Poststop
                    || alloc.tasks[ix].phase == crate::state::TaskPhase::Running
            })
    }

    /// A rollout's batch (DESIGN.md invariant 10b, stricter than Nomad): the older
    /// allocations are stopped `max_parallel` at a time, and the next batch waits until
    /// every replacement is healthy and every allocation stopped before has finished
    /// stopping. Nomad keeps a window of `max_parallel` unhealthy replacements instead, so
    /// the delays of two batches may overlap there. The next allocation stopped is one beside
    /// a promoted canary (the canary counts in its place: nothing is placed for it), then one
    /// its client has not started yet (it serves nothing), else the least by its packed
    /// record: a choice by position would break symmetry. (The implementation takes the
    /// oldest among the started ones; the parts that roll out keep those alike, and lockstep
    /// would tell.) Nomad stops the one beside a promoted canary at once, as not needed,
    /// beside `max_parallel` destructive updates (`computeStop`); quiesce makes it the first
    /// batch, so that no two stops of serving allocations overlap (DESIGN.md 10b).
    fn roll_out(&self, state: &mut State, generation: u8, canarying: bool, busy: usize) {
        let older = |alloc: &Alloc| !alloc.is_terminal() && alloc.spec.generation < generation;
        if self.cfg.max_parallel == 0 {
            // No `update` block: every older allocation is replaced at once.
            for alloc in state.allocs.iter_mut().filter(|alloc| older(alloc)) {
                alloc.desired_stop = true;
                alloc.rollout_stop = true;
            }
            return;
        }
        // Planted: the older allocations are replaced before the canaries are promoted.
        if canarying && !self.has(Fault::RolloutIgnoresCanaries) {
            return;
        }
        if !state.deployment.is_running() {
            return;
        }
        let room = if self.has(Fault::RolloutIgnoresMaxParallel) {
            MAX_ALLOCS
        } else if busy == 0 {
            usize::from(self.cfg.max_parallel)
        } else {
            0
        };
        let mut stopped = 0;
        while stopped < room {
            let Some(next) = (0..state.allocs.len())
                .filter(|&ix| older(&state.allocs[ix]))
                .min_by_key(|&ix| {
                    let alloc = &state.allocs[ix];
                    (
                        !alloc.beside_canary,
                        alloc.runner != RunnerPhase::Pending,
                        alloc.pack(),
                    )
                })
            else {
                break;
            };
            if busy > 0 || canarying {
                state.ghost.rollout_ran_ahead = true;
            }
            let alloc = &mut state.allocs[next];
            alloc.desired_stop = true;
            alloc.rollout_stop = true;
            if self.has(Fault::RolloutSkipsDelay) {
                alloc.no_shutdown_delay = true;
            }
            stopped += 1;
        }
        // Done when nothing is left to replace or to place: every allocation of this
        // generation placed and healthy. A migrating one's replacement, placed after, keeps
        // the deployment running (Nomad's `isDeploymentComplete`: nothing to migrate, nothing
        // to place); an older one's that a promoted canary stands for needs none.
        let done = busy == 0
            && stopped == 0
            && !state.allocs.iter().any(older)
            && self.live_of(state, generation) >= usize::from(self.cfg.count);
        if done {
            state.deployment = Deployment::Successful;
        }
    }

    /// The allocations of the last batch not done yet: stopped by a rollout and still
    /// stopping, or placed by a deployment and not yet decided healthy (a failed
    /// deployment's hold nothing). The next batch waits for none of them left.
    fn batch_in_flight(state: &State) -> usize {
        let stopping = state
            .allocs
            .iter()
            .filter(|alloc| alloc.rollout_stop && alloc.runner != RunnerPhase::Terminal)
            .count();
        let unhealthy = state
            .allocs
            .iter()
            .filter(|alloc| !alloc.is_terminal() && alloc.watched && !alloc.abandoned)
            .count();
        stopping + unhealthy
    }

    /// A system job's canaries still missing, each in the place of an older allocation,
    /// which is stopped for it as a rollout stops one (its delays waited), once the last
    /// batch is done (DESIGN.md 10b); or, when nothing older is left, on the place of a
    /// canary that migrated. They are the deployment's first batch: at most `canary`, which
    /// is at most `max_parallel`.
    fn place_canaries_in_place(&self, state: &mut State, spec: SpecDigest) {
        let generation = spec.generation;
        let older = |alloc: &Alloc| !alloc.is_terminal() && alloc.spec.generation < generation;
        let canaries = state
            .allocs
            .iter()
            .filter(|alloc| {
                alloc.canary && !alloc.is_terminal() && alloc.spec.generation == generation
            })
            .count();
        let in_flight = Self::batch_in_flight(state) > 0;
        for _ in canaries..usize::from(self.cfg.canary) {
            let next = (0..state.allocs.len())
                .filter(|&ix| older(&state.allocs[ix]))
                .min_by_key(|&ix| {
                    let alloc = &state.allocs[ix];
                    (alloc.runner != RunnerPhase::Pending, alloc.pack())
                });
            match next {
                Some(_) if in_flight => return,
                Some(ix) => {
                    let alloc = &mut state.allocs[ix];
                    alloc.desired_stop = true;
                    alloc.rollout_stop = true;
                    if self.has(Fault::RolloutSkipsDelay) {
                        alloc.no_shutdown_delay = true;
                    }
                }
                None => {
                    let live = state.allocs.iter().filter(|a| !a.is_terminal()).count();
                    if live >= usize::from(self.cfg.count) {
                        return;
                    }
                }
            }
            self.place(state, spec, true);
        }
    }

    /// Reconcile: stop every non-terminal allocation of a stopped job; stop and replace
    /// migrating ones, and the older versions' for a rollout; place up to `count` (§1.6).
    pub(super) fn process_eval(&self, state: &mut State) {
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
        let generation = latest.spec.generation;
        let canarying = state.deployment == Deployment::Canaries;
        // A canary not of the deployment awaiting promotion (an older one's, a failed
        // one's) is not needed (Nomad's `cancelUnneededCanaries`).
        // A system job's canary stands in its allocation's place: one no longer waited for
        // is an allocation like any other.
        let in_place = self.cfg.canary_in_place;
        // The last batch as the evaluation found it: a replacement that is migrating, or a
        // canary this evaluation stops, still counts until its stop (the implementation
        // reads the allocations before its plan).
        let busy = Self::batch_in_flight(state);
        // Canaries wait only while there is something to wait for (the implementation's
        // reading: Nomad wants canaries for destructive updates only): a canary, or an
        // older allocation to replace (all of them may have failed before the canary was
        // placed). Otherwise the deployment rolls out as one without canaries.
        let waiting = canarying
            && (in_place
                || state.allocs.iter().any(|alloc| {
                    !alloc.is_terminal() && (alloc.canary || alloc.spec.generation < generation)
                }));
        // While canaries wait, an allocation placed beside them is not one: it takes the
        // stable version (Nomad's `downgradeNonCanary`).
        let downgrading = waiting && !in_place;
        let awaited = |alloc: &Alloc| canarying && alloc.spec.generation == generation;
        for alloc in state.allocs.iter_mut().filter(|_| !in_place) {
            if alloc.canary && !alloc.is_terminal() && !awaited(alloc) {
                alloc.desired_stop = true;
            }
        }
        let mut downgraded = Vec::new();
        for alloc in state.allocs.iter_mut() {
            if alloc.migrate && !alloc.is_terminal() {
                alloc.desired_stop = true;
                if alloc.canary {
                    // A migrating canary is stopped; a new canary takes its place below.
                    continue;
                }
                // While canaries wait for promotion, a migrating older allocation is
                // replaced at its own version (Nomad's `downgradeNonCanary`), under its own
                // name: beside the canary that took it, if one did.
                // A system job's is not: a canary takes its place below.
                if canarying && !in_place && alloc.spec.generation != generation {
                    let spec = self.downgraded(state.stable, alloc.spec.generation, latest.spec);
                    downgraded.push((spec, alloc.beside_canary));
                    alloc.beside_canary = false;
                }
            }
        }
        // Canaries only while older allocations remain to replace (Nomad's
        // `requiresCanaries`): a migrating one's replacement is not yet placed.
        let to_replace = state.allocs.iter().any(|alloc| {
            !alloc.is_terminal() && !alloc.canary && alloc.spec.generation < generation
        });
        for (spec, beside_canary) in downgraded {
            self.place(state, spec, false);
            let placed = state.allocs.last_mut().expect("just placed");
            placed.beside_canary = beside_canary;
            placed.downgraded = placed.spec.generation < generation;
        }
        self.roll_out(state, generation, waiting, busy);
        if state.deployment == Deployment::Canaries && in_place {
            self.place_canaries_in_place(state, latest.spec);
        }
        // Canaries not yet promoted are beside the `count`, not part of it (a system job's
        // are in it).
        let live = state
            .allocs
            .iter()
            .filter(|alloc| !alloc.is_terminal() && (in_place || !alloc.canary))
            .count();
        // One placed beside waiting canaries (an older allocation failed) stands beside the
        // canary that took the failed one's name, if that canary has no other neighbour.
        let beside = |state: &State| {
            let canaries = state
                .allocs
                .iter()
                .filter(|alloc| alloc.canary && !alloc.is_terminal())
                .count();
            let neighbours = state
                .allocs
                .iter()
                .filter(|alloc| alloc.beside_canary && !alloc.is_terminal())
                .count();
            canaries > neighbours
        };
        // Placed in the implementation's order: what fills `count` before the canaries.
        let existing = state.allocs.len();
        for _ in live..usize::from(self.cfg.count) {
            if downgrading {
                let beside_canary = beside(state);
                self.place(state, self.downgraded(state.stable, 0, latest.spec), false);
                let placed = state.allocs.last_mut().expect("just placed");
                placed.beside_canary = beside_canary;
                placed.downgraded = placed.spec.generation < generation;
            } else {
                self.place(state, latest.spec, false);
            }
        }
        if state.deployment == Deployment::Canaries && !in_place && to_replace {
            let canaries = state
                .allocs
                .iter()
                .filter(|alloc| alloc.canary && !alloc.is_terminal())
                .count();
            for _ in canaries..usize::from(self.cfg.canary) {
                self.place(state, latest.spec, true);
                self.take_a_name_for_the_canary(state, generation, existing);
            }
        }
    }

    /// The spec an allocation placed beside waiting canaries takes: the stable generation's,
    /// unless it is older than the allocation replaced (`at_least`), then the latest
    /// (Nomad's `downgradedJobForPlacement` and its defensive check).
    fn downgraded(&self, stable: u8, at_least: u8, latest: SpecDigest) -> SpecDigest {
        if stable >= at_least && stable < latest.generation {
            self.spec_of(stable)
        } else {
            latest
        }
    }

    /// A canary just placed takes the name of an older allocation it will replace (Nomad's
    /// `NextCanaries`), unless a canary placed before it (and since stopped, as it migrated)
    /// left its name to it: each running older allocation is beside one canary at most, the
    /// least by its packed record first (the implementation's lowest index: the parts keep
    /// the older ones alike when the first canary is placed).
    fn take_a_name_for_the_canary(&self, state: &mut State, generation: u8, existing: usize) {
        let older = |alloc: &Alloc| {
            !alloc.is_terminal() && !alloc.canary && alloc.spec.generation < generation
        };
        let beside = state
            .allocs
            .iter()
            .filter(|alloc| older(alloc) && alloc.beside_canary)
            .count();
        let canaries = state
            .allocs
            .iter()
            .filter(|alloc| alloc.canary && !alloc.is_terminal())
            .count();
        if beside >= canaries {
            return;
        }
        // Among those there before this evaluation: what it placed has no name to give yet
        // (the implementation names canaries after the allocations it is replacing).
        if let Some(next) = (0..existing)
            .filter(|&ix| older(&state.allocs[ix]) && !state.allocs[ix].beside_canary)
            .min_by_key(|&ix| state.allocs[ix].pack())
        {
            state.allocs[next].beside_canary = true;
        }
    }

    /// A new allocation of `spec` on the least loaded node, watched while a deployment
    /// runs.
    fn place(&self, state: &mut State, spec: SpecDigest, canary: bool) {
        assert!(
            state.allocs.len() < MAX_ALLOCS,
            "more than {MAX_ALLOCS} allocations"
        );
        let node = self.least_loaded_node(state);
        let mut alloc = self.new_alloc(spec, node, &state.ghost);
        alloc.watched = state.deployment.is_running();
        alloc.canary = canary;
        state.allocs.push(alloc);
    }

    /// The node with the fewest non-terminal allocations, the lowest on a tie. It depends on
    /// the multiset of records only, never on their order (required by symmetry).
    pub(super) fn least_loaded_node(&self, state: &State) -> u8 {
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
}
