//! The invariants of DESIGN.md ("Invariants"), one `always` property each, and the
//! `sometimes` properties that show none of them holds vacuously.
//!
//! Each invariant is a predicate over the state. Checks that can only be judged when an
//! allocation's record is finished ("every task had its pre-kill hooks run", "poststop tasks
//! ran to completion") are [`end_of_life_violations`]: evaluated on terminal records in full
//! history, and folded into sticky [`State::violations`] bits when lean history erases them.

use crate::config::TaskKind;
use crate::state::{Alloc, Delay, Deployment, RestartMark, RunnerPhase, State, TaskPhase};
use crate::StopPathModel;
use stateright::Property;

/// Property names, as `check` prints them.
pub mod names {
    pub const PRESTOP_HOOKS_ALWAYS_RUN: &str = "prestop_hooks_always_run";
    pub const DELAY_SKIPPED_ONLY_WHEN_FLAGGED: &str = "delay_skipped_only_when_flagged";
    pub const FLAG_IS_HONOURED: &str = "flag_is_honoured";
    pub const JOBSPEC_UNCHANGED: &str = "jobspec_unchanged";
    pub const FLAG_SCOPED: &str = "flag_scoped";
    pub const KILL_ORDER: &str = "kill_order";
    pub const KILL_TIMEOUT_RESPECTED: &str = "kill_timeout_respected";
    pub const STOP_COMPLETES: &str = "stop_completes";
    pub const SERVICES_RESTORED: &str = "services_restored";
    pub const RESTART_POLICY_RESPECTED: &str = "restart_policy_respected";
    pub const JOB_DEAD_ONLY_WHEN_TASKS_ENDED: &str = "job_dead_only_when_tasks_ended";
    pub const ROLLOUT_BOUNDED: &str = "rollout_bounded";

    pub const DELAY_SKIPPED: &str = "delay_skipped_by_flag";
    pub const DELAY_CUT_SHORT: &str = "delay_cut_short_mid_wait";
    pub const FULL_DELAY_WAITED: &str = "full_delay_waited";
    pub const TASK_EXITED_DURING_DELAY: &str = "task_exited_during_delay";
    pub const PURGE_WITH_FLAG_HONOURED: &str = "purge_with_flag_honoured";
    pub const ALLOC_STOP_THEN_JOB_STOP: &str = "alloc_stop_then_job_stop";
    pub const JOB_STARTED_AFTER_FLAGGED_STOP: &str = "job_started_after_flagged_stop";
    pub const SIGKILL_AFTER_KILL_TIMEOUT: &str = "sigkill_after_kill_timeout";
    pub const RESTARTED_JOB_WAITS_FULL_DELAY: &str = "restarted_job_waits_full_delay";
    pub const CLIENT_RESTARTED_WITH_FLAG: &str = "client_restarted_with_flag";
    pub const RESTART_DELAY_SKIPPED: &str = "restart_delay_skipped_by_flag";
    pub const RESTART_FULL_DELAY_WAITED: &str = "restart_full_delay_waited";
    pub const DELAY_WAITED_AFTER_FLAGGED_RESTART: &str = "delay_waited_after_flagged_restart";
    pub const RESTART_DELAY_CUT_SHORT_BY_STOP: &str = "restart_delay_cut_short_by_stop";
    pub const CRASHED_TASK_RESTARTED: &str = "crashed_task_restarted";
    pub const RESTART_POLICY_EXHAUSTED: &str = "restart_policy_exhausted";
    pub const ROLLOUT_COMPLETED: &str = "rollout_completed";
    pub const ROLLOUT_WAITS_FULL_DELAY: &str = "rollout_waits_full_delay";
    pub const FLAGGED_STOP_DURING_ROLLOUT: &str = "flagged_stop_during_rollout";
    pub const ROLLOUT_AFTER_FLAGGED_STOP_WAITS: &str = "rollout_after_flagged_stop_waits";
    pub const CANARIES_PROMOTED: &str = "canaries_promoted";
    pub const CANARY_STOPPED_WITH_FLAG: &str = "canary_stopped_with_flag";
    pub const STABLE_PLACED_BESIDE_CANARIES: &str = "stable_placed_beside_canaries";

    /// The restart witnesses every part with restart requests under a budget of two reaches.
    pub const RESTART_WITNESSES: &[&str] = &[
        RESTART_DELAY_SKIPPED,
        RESTART_FULL_DELAY_WAITED,
        DELAY_WAITED_AFTER_FLAGGED_RESTART,
        RESTART_DELAY_CUT_SHORT_BY_STOP,
    ];

    /// The witnesses every part with a free budget of two requests reaches.
    pub const BUDGET2_WITNESSES: &[&str] = &[
        DELAY_SKIPPED,
        DELAY_CUT_SHORT,
        FULL_DELAY_WAITED,
        TASK_EXITED_DURING_DELAY,
        PURGE_WITH_FLAG_HONOURED,
        ALLOC_STOP_THEN_JOB_STOP,
        JOB_STARTED_AFTER_FLAGGED_STOP,
        SIGKILL_AFTER_KILL_TIMEOUT,
    ];
}

use names::*;

type Condition = fn(&StopPathModel, &State) -> bool;

/// The invariants, in DESIGN.md's order (the tenth is the restart policy's, the eleventh
/// the job status's, the twelfth — DESIGN.md's 10b — the rollout's).
pub const INVARIANTS: [(&str, Condition); 12] = [
    (PRESTOP_HOOKS_ALWAYS_RUN, prestop_hooks_always_run),
    (
        DELAY_SKIPPED_ONLY_WHEN_FLAGGED,
        delay_skipped_only_when_flagged,
    ),
    (FLAG_IS_HONOURED, flag_is_honoured),
    (JOBSPEC_UNCHANGED, jobspec_unchanged),
    (FLAG_SCOPED, flag_scoped),
    (KILL_ORDER, kill_order),
    (KILL_TIMEOUT_RESPECTED, kill_timeout_respected),
    (STOP_COMPLETES, stop_completes),
    (SERVICES_RESTORED, services_restored),
    (RESTART_POLICY_RESPECTED, restart_policy_respected),
    (
        JOB_DEAD_ONLY_WHEN_TASKS_ENDED,
        job_dead_only_when_tasks_ended,
    ),
    (ROLLOUT_BOUNDED, rollout_bounded),
];

/// Each invariant's demand in one plain sentence, for a reader who does not know the model
/// (the drawn counterexamples' headings, `report::draw`). `None` for a name that is no
/// invariant.
pub fn statement(invariant: &str) -> Option<&'static str> {
    Some(match invariant {
        PRESTOP_HOOKS_ALWAYS_RUN => {
            "No task may get its kill signal (or SIGKILL) before its allocation's and its own \
             pre-kill hooks have deregistered its services, flag or no flag."
        }
        DELAY_SKIPPED_ONLY_WHEN_FLAGGED => {
            "A shutdown_delay may be skipped or cut short only after a stop (or restart) \
             carrying -no-shutdown-delay targeted that allocation."
        }
        FLAG_IS_HONOURED => {
            "Once a -no-shutdown-delay request for an allocation has reached its client, no \
             delay of that allocation may still be waited out."
        }
        JOBSPEC_UNCHANGED => {
            "A stop never changes the stored job's spec: the flag is never written into the \
             job, so a later job start waits full delays."
        }
        FLAG_SCOPED => {
            "The flag reaches only the allocations a request targeted: never another \
             allocation, never a new one."
        }
        KILL_ORDER => {
            "Tasks are killed in order (group hooks, leader, other main tasks, sidecars) and \
             poststop tasks run to completion after all of them."
        }
        KILL_TIMEOUT_RESPECTED => {
            "SIGKILL comes only after the kill signal and its kill_timeout; the flag does not \
             shorten that."
        }
        STOP_COMPLETES => {
            "Once the cluster has nothing left to do, every allocation stopped, purged or \
             failed has ended on its client with every service deregistered."
        }
        SERVICES_RESTORED => {
            "A running task has its services registered, after a restart as at its first \
             start, and a task that does not run has none."
        }
        RESTART_POLICY_RESPECTED => {
            "A crashed task is restarted no more often than its restart policy allows; then \
             its allocation fails and the rest is stopped."
        }
        JOB_DEAD_ONLY_WHEN_TASKS_ENDED => {
            "The job reads dead only once every task of its allocations has ended."
        }
        ROLLOUT_BOUNDED => {
            "A rollout stops at most max_parallel allocations at a time, and only once the \
             previous batch's replacements (and any canaries) are healthy."
        }
        _ => return None,
    })
}

/// Every `sometimes` property; a part checks those its configuration lists as witnesses.
pub const WITNESSES: [(&str, Condition); 23] = [
    (DELAY_SKIPPED, |_, s| any_delay(s, |d| d == Delay::Skipped)),
    (DELAY_CUT_SHORT, |_, s| {
        any_delay(s, |d| d == Delay::CutShort)
    }),
    (FULL_DELAY_WAITED, |_, s| {
        any_delay(s, |d| d == Delay::Elapsed)
    }),
    (TASK_EXITED_DURING_DELAY, |_, s| {
        any_delay(s, |d| d == Delay::ExitedDuring)
    }),
    (PURGE_WITH_FLAG_HONOURED, |_, s| {
        s.allocs
            .iter()
            .any(|a| a.tombstone && a.no_shutdown_delay && a.delays().any(Delay::shortened))
    }),
    (ALLOC_STOP_THEN_JOB_STOP, |_, s| {
        s.ghost.alloc_stop_then_job_stop
    }),
    (JOB_STARTED_AFTER_FLAGGED_STOP, |_, s| {
        s.ghost.started_after_flagged_stop && s.allocs.iter().any(|a| a.placed_after_flagged_stop)
    }),
    (SIGKILL_AFTER_KILL_TIMEOUT, |_, s| {
        s.allocs
            .iter()
            .flat_map(|a| a.tasks.iter())
            .any(|t| t.sigkilled && t.kill_timeout_fired)
    }),
    (RESTARTED_JOB_WAITS_FULL_DELAY, |_, s| {
        s.allocs
            .iter()
            .any(|a| a.placed_after_flagged_stop && a.delays().any(|d| d == Delay::Elapsed))
    }),
    (CLIENT_RESTARTED_WITH_FLAG, |_, s| {
        s.ghost.restarted_with_flag
    }),
    (RESTART_DELAY_SKIPPED, |_, s| {
        any_task(s, |t| {
            t.restart == RestartMark::Flagged && t.delay == Delay::Skipped
        })
    }),
    (RESTART_FULL_DELAY_WAITED, |_, s| {
        any_task(s, |t| {
            t.restart == RestartMark::Unflagged && t.delay == Delay::Elapsed
        })
    }),
    (DELAY_WAITED_AFTER_FLAGGED_RESTART, |_, s| {
        s.allocs
            .iter()
            .any(|a| a.flagged_restart_done && a.delays().any(|d| d == Delay::Elapsed))
    }),
    (RESTART_DELAY_CUT_SHORT_BY_STOP, |_, s| {
        any_task(s, |t| {
            t.restart != RestartMark::None && t.delay == Delay::CutShort
        })
    }),
    (CRASHED_TASK_RESTARTED, |_, s| {
        any_task(s, |t| t.restarts >= 1 && t.phase == TaskPhase::Running)
    }),
    (RESTART_POLICY_EXHAUSTED, |_, s| {
        s.allocs.iter().any(|a| a.failed)
    }),
    // A rollout of an updated version, not the first registration's deployment.
    (ROLLOUT_COMPLETED, |_, s| {
        s.deployment == Deployment::Successful
            && s.allocs
                .iter()
                .any(|a| !a.is_terminal() && a.spec.generation > 0)
    }),
    (ROLLOUT_WAITS_FULL_DELAY, |_, s| {
        s.allocs
            .iter()
            .any(|a| a.rollout_stop && a.delays().any(|d| d == Delay::Elapsed))
    }),
    (FLAGGED_STOP_DURING_ROLLOUT, |_, s| {
        s.deployment == Deployment::Cancelled
            && s.allocs.iter().any(|a| a.rollout_stop)
            && s.allocs.iter().any(|a| a.delays().any(Delay::shortened))
    }),
    (ROLLOUT_AFTER_FLAGGED_STOP_WAITS, |_, s| {
        s.allocs.iter().any(|a| {
            a.rollout_stop && a.placed_after_flagged_stop && a.delays().any(|d| d == Delay::Elapsed)
        })
    }),
    (CANARIES_PROMOTED, |_, s| s.ghost.canaries_promoted),
    // A flagged stop while the canaries wait for promotion skips their delays too.
    (CANARY_STOPPED_WITH_FLAG, |_, s| {
        s.allocs
            .iter()
            .any(|a| a.canary && a.flag_requested && a.delays().any(|d| d == Delay::Skipped))
    }),
    // While canaries wait, an older allocation's replacement (it failed, or migrated) is
    // placed at the stable version, beside the canary that took its name.
    (STABLE_PLACED_BESIDE_CANARIES, |_, s| {
        let latest = s.job.latest().map_or(0, |v| v.spec.generation);
        s.deployment == Deployment::Canaries
            && s.allocs.iter().any(|a| {
                !a.is_terminal()
                    && a.watched
                    && a.beside_canary
                    && !a.canary
                    && a.spec.generation < latest
            })
    }),
];

fn any_task(state: &State, wanted: impl Fn(&crate::state::Task) -> bool) -> bool {
    state
        .allocs
        .iter()
        .flat_map(|alloc| alloc.tasks.iter())
        .any(wanted)
}

fn any_delay(state: &State, wanted: impl Fn(Delay) -> bool) -> bool {
    state.allocs.iter().any(|alloc| alloc.delays().any(&wanted))
}

/// The properties of a part: every invariant, and the witnesses its configuration lists.
pub fn all(model: &StopPathModel) -> Vec<Property<StopPathModel>> {
    let mut properties: Vec<_> = INVARIANTS
        .iter()
        .map(|&(name, condition)| Property::always(name, condition))
        .collect();
    for &(name, condition) in &WITNESSES {
        if model.cfg.witnesses.contains(&name) {
            properties.push(Property::sometimes(name, condition));
        }
    }
    properties
}

/// Sticky bits of [`State::violations`]: lean history erased a record (an allocation, or a
/// dead task's details) on which this invariant's per-allocation check failed. Always zero
/// in a correct model.
#[derive(Clone, Copy, Debug)]
#[repr(u16)]
pub enum Violation {
    PrestopHooks = 1 << 0,
    DelaySkipped = 1 << 1,
    FlagHonoured = 1 << 2,
    FlagScoped = 1 << 3,
    KillOrder = 1 << 4,
    KillTimeout = 1 << 5,
    /// Not per allocation: an erased job version's spec differed from the registered one.
    JobspecChanged = 1 << 6,
    ServicesRestored = 1 << 7,
    RestartPolicy = 1 << 8,
}

type AllocCheck = fn(&StopPathModel, &Alloc) -> bool;

/// The invariants that judge one allocation record at a time, with their sticky bits.
const PER_ALLOC: [(Violation, AllocCheck); 8] = [
    (Violation::PrestopHooks, prestop_hooks_ran),
    (Violation::DelaySkipped, delays_shortened_only_when_flagged),
    (Violation::FlagHonoured, no_wait_after_flag_due),
    (Violation::FlagScoped, flag_only_where_requested),
    (Violation::KillOrder, killed_in_order),
    (Violation::KillTimeout, sigkill_only_after_timeout),
    (
        Violation::ServicesRestored,
        services_registered_while_running,
    ),
    (Violation::RestartPolicy, restarts_within_policy),
];

/// Every per-allocation invariant `alloc` breaks, as [`Violation`] bits: what lean history
/// folds into [`State::violations`] before it erases anything of the record.
pub fn record_violations(model: &StopPathModel, alloc: &Alloc) -> u16 {
    PER_ALLOC
        .iter()
        .filter(|(_, holds)| !holds(model, alloc))
        .fold(0, |bits, (bit, _)| bits | *bit as u16)
}

fn tasks_of<'a>(
    model: &'a StopPathModel,
    alloc: &'a Alloc,
) -> impl Iterator<Item = (TaskKind, &'a crate::state::Task)> + 'a {
    model
        .cfg
        .group
        .tasks
        .iter()
        .map(|cfg| cfg.kind)
        .zip(alloc.tasks.iter())
}

fn every_alloc(model: &StopPathModel, state: &State, bit: Violation, holds: AllocCheck) -> bool {
    state.violations & bit as u16 == 0 && state.allocs.iter().all(|alloc| holds(model, alloc))
}

/// A finished allocation: its runner is terminal after having started tasks.
fn finished_after_start(alloc: &Alloc) -> bool {
    alloc.runner == RunnerPhase::Terminal && alloc.started()
}

/// **prestop_hooks_always_run** (DESIGN.md invariant 1; seed: "we'll still run
/// allocrunner/taskrunner prestop hooks"). Forbids a task being signalled or SIGKILLed before
/// its own pre-kill hooks and — unless the kill is a restart's, which leaves the group alone —
/// the group pre-kill hooks of its allocation have run, and a killed task, or a finished
/// allocation, without its hooks (a task whose run ended on its own was not killed; an
/// allocation failed with nothing left alive kills nothing). Why: the hooks deregister
/// services; a signal before deregistration sends traffic to a dying task, flag or no flag,
/// stop or restart.
pub fn prestop_hooks_always_run(model: &StopPathModel, state: &State) -> bool {
    every_alloc(model, state, Violation::PrestopHooks, prestop_hooks_ran)
}

fn prestop_hooks_ran(model: &StopPathModel, alloc: &Alloc) -> bool {
    let signalled_early = alloc.tasks.iter().any(|task| {
        let group_hooks_due = task.restart == RestartMark::None;
        (task.signalled || task.sigkilled)
            && !(task.pre_kill && (alloc.group_pre_kill || !group_hooks_due))
    });
    let killed_without_hooks = tasks_of(model, alloc).any(|(kind, task)| {
        kind != TaskKind::Poststop
            && task.phase == TaskPhase::Exited
            && !task.pre_kill
            && !task.ended_on_own
    });
    let finished_without_group_hooks =
        finished_after_start(alloc) && !alloc.group_pre_kill && !alloc.failed;
    !(signalled_early || killed_without_hooks || finished_without_group_hooks)
}

/// **delay_skipped_only_when_flagged** (invariant 2). Forbids a group or task delay being
/// skipped or cut short unless a stop carrying the flag targeted that allocation before, or —
/// for a task's delay during its restart — that restart carried the flag. Why: without the
/// operator's explicit request, load balancers must get their full drain time; and a
/// restart's flag is one-shot, never reaching a later restart or stop.
pub fn delay_skipped_only_when_flagged(model: &StopPathModel, state: &State) -> bool {
    every_alloc(
        model,
        state,
        Violation::DelaySkipped,
        delays_shortened_only_when_flagged,
    )
}

fn delays_shortened_only_when_flagged(_: &StopPathModel, alloc: &Alloc) -> bool {
    alloc.flag_requested
        || (!alloc.group_delay.shortened()
            && alloc
                .tasks
                .iter()
                .all(|task| !task.delay.shortened() || task.restart == RestartMark::Flagged))
}

/// **flag_is_honoured** (invariant 3). Forbids any delay of an allocation still being waited
/// once the client has pulled an update after a flagged request was accepted for it —
/// whether that update changed the allocation or removed it (purge). A wait in progress must
/// have been cut short in that step, a later wait skipped. Likewise no flagged restart ever
/// waits its task's delay. Why: this is the feature; it is what Nomad's purge (≥ 1.7.3), its
/// unflagged `alloc stop`, its restored runners and its in-place restarts break.
pub fn flag_is_honoured(model: &StopPathModel, state: &State) -> bool {
    every_alloc(
        model,
        state,
        Violation::FlagHonoured,
        no_wait_after_flag_due,
    )
}

fn no_wait_after_flag_due(_: &StopPathModel, alloc: &Alloc) -> bool {
    let flagged_restart_waits = alloc
        .tasks
        .iter()
        .any(|task| task.restart == RestartMark::Flagged && task.delay == Delay::Waiting);
    !flagged_restart_waits && (!alloc.flag_due || !alloc.delays().any(|d| d == Delay::Waiting))
}

/// **jobspec_unchanged** (invariant 4; seed: the UI Start button would resubmit a modified
/// spec). Forbids any stored job version's spec differing from the spec the operator
/// registered for its generation: versions differ only in `Stop` (and, after a `job run` of
/// an edited file, in what the operator changed), and the flag has nowhere to be stored on a
/// job. (New allocations take their spec from the latest version, so they wait full delays.)
pub fn jobspec_unchanged(model: &StopPathModel, state: &State) -> bool {
    state.violations & Violation::JobspecChanged as u16 == 0
        && state
            .job
            .versions
            .iter()
            .all(|version| version.spec == model.spec_of(version.spec.generation))
}

/// **flag_scoped** (invariant 5). Forbids the flag, or a cancelled delay, on an allocation no
/// flagged request targeted: `alloc stop -no-shutdown-delay A` does not reach B, and new
/// allocations never carry it.
pub fn flag_scoped(model: &StopPathModel, state: &State) -> bool {
    every_alloc(
        model,
        state,
        Violation::FlagScoped,
        flag_only_where_requested,
    )
}

fn flag_only_where_requested(_: &StopPathModel, alloc: &Alloc) -> bool {
    alloc.flag_requested || !(alloc.no_shutdown_delay || alloc.cancelled)
}

/// **kill_order** (invariant 6; `reference/nomad-stop-path.md` §2.3). Forbids a task's
/// `Killing` before the group pre-kill hooks ran, another main task's before the leader is
/// dead, a sidecar's before every main task is dead, a poststop task starting before every
/// other task is dead, and a finished allocation whose poststop tasks did not run to
/// completion (flag or no flag).
pub fn kill_order(model: &StopPathModel, state: &State) -> bool {
    every_alloc(model, state, Violation::KillOrder, killed_in_order)
}

fn killed_in_order(model: &StopPathModel, alloc: &Alloc) -> bool {
    let dead_before = |stage: u8| {
        tasks_of(model, alloc).all(|(kind, task)| kind.kill_stage() >= stage || task.is_done())
    };
    let in_order = tasks_of(model, alloc).all(|(kind, task)| match kind {
        TaskKind::Poststop => task.phase == TaskPhase::NotStarted || dead_before(kind.kill_stage()),
        _ => !task.killing || (alloc.group_pre_kill && dead_before(kind.kill_stage())),
    });
    let poststop_cut_off = finished_after_start(alloc)
        && tasks_of(model, alloc)
            .any(|(kind, task)| kind == TaskKind::Poststop && task.phase != TaskPhase::Exited);
    in_order && !poststop_cut_off
}

/// **kill_timeout_respected** (invariant 7; the seed asked to bypass the kill timeout, the
/// design deliberately does not). Forbids SIGKILL unless the kill-timeout timer set at the
/// kill signal has fired; the flag does not change this.
pub fn kill_timeout_respected(model: &StopPathModel, state: &State) -> bool {
    every_alloc(
        model,
        state,
        Violation::KillTimeout,
        sigkill_only_after_timeout,
    )
}

fn sigkill_only_after_timeout(_: &StopPathModel, alloc: &Alloc) -> bool {
    alloc
        .tasks
        .iter()
        .all(|task| !task.sigkilled || (task.signalled && task.kill_timeout_fired))
}

/// **stop_completes** (invariant 8, bounded, as safety). In a state where the cluster has
/// nothing left to do on its own (no evaluation, update, hook, decision or timer pending;
/// only an operator request, or a running task choosing to exit, could change it), forbids an
/// allocation that a stop or a purge targeted, or that failed, being anything but
/// client-terminal with every service deregistered.
pub fn stop_completes(model: &StopPathModel, state: &State) -> bool {
    let mut pending = Vec::new();
    model.internal_actions(state, &mut pending);
    let crash = |action: &crate::Action| match *action {
        crate::Action::TaskExit { alloc, task } => {
            state.allocs[usize::from(alloc)].tasks[usize::from(task)].phase == TaskPhase::Running
        }
        _ => false,
    };
    if pending.iter().any(|action| !crash(action)) {
        return true;
    }
    // A rollout left running with nothing to wake it would never replace the rest.
    if state.deployment.is_running() {
        return false;
    }
    state
        .allocs
        .iter()
        .filter(|alloc| alloc.desired_stop || alloc.tombstone || alloc.failed)
        .all(|alloc| {
            alloc.runner == RunnerPhase::Terminal
                && !alloc.group_service_registered
                && alloc.tasks.iter().all(|task| !task.service_registered)
        })
}

/// **job_dead_only_when_tasks_ended** (issue 25: the status a client waits on with blocking
/// queries). Forbids the job reading `dead` while a task of one of its allocations still
/// has a process, or while an allocation's runner has not reported terminal — so an
/// operator who waits for `dead` after a stop knows every process is gone. Deliberately
/// stricter than Nomad's, which counts an allocation the server told to stop as terminal
/// and so reads `dead` during the `shutdown_delay` (#23940, #18148). A purge's tombstones
/// do not count (the job is gone; `GET` answers 404).
pub fn job_dead_only_when_tasks_ended(model: &StopPathModel, state: &State) -> bool {
    if model.job_status(state) != Some(crate::state::JobStatus::Dead) {
        return true;
    }
    state
        .allocs
        .iter()
        .filter(|alloc| !alloc.tombstone && !alloc.removed)
        .all(|alloc| {
            alloc.runner == RunnerPhase::Terminal && alloc.tasks.iter().all(|task| !task.is_live())
        })
}

/// **services_restored** (invariant 9). Forbids a running task whose job gives it a service
/// without that service registered — after a restart (in place or by the policy) as at its
/// first start — a task that does not run (crashed, waiting its restart delay, dead) with its
/// service still registered, a running allocation without its group services, and any
/// service of a client-terminal allocation still registered. Why: a restart that leaves a task
/// deregistered takes it out of the load balancer for good, silently.
pub fn services_restored(model: &StopPathModel, state: &State) -> bool {
    every_alloc(
        model,
        state,
        Violation::ServicesRestored,
        services_registered_while_running,
    )
}

fn services_registered_while_running(model: &StopPathModel, alloc: &Alloc) -> bool {
    let group = &model.cfg.group;
    // Running: registered as its job says; not running (not started, crashed, waiting a
    // restart delay, dead): not registered at all.
    let tasks_registered = group
        .tasks
        .iter()
        .zip(alloc.tasks.iter())
        .all(|(cfg, task)| match task.phase {
            TaskPhase::Running => {
                cfg.kind == TaskKind::Poststop || task.service_registered == cfg.service
            }
            TaskPhase::NotStarted
            | TaskPhase::Crashed
            | TaskPhase::Restarting
            | TaskPhase::Exited => !task.service_registered,
            TaskPhase::Delaying | TaskPhase::Signalled => true,
        });
    let group_registered =
        alloc.runner != RunnerPhase::Running || alloc.group_service_registered == group.service;
    let none_after_end = alloc.runner != RunnerPhase::Terminal
        || (!alloc.group_service_registered
            && alloc.tasks.iter().all(|task| !task.service_registered));
    tasks_registered && group_registered && none_after_end
}

/// **restart_policy_respected** (invariant 10; Nomad's `restart` block, `mode = "fail"`).
/// Forbids a crashed task being restarted more often than the policy's `attempts`, and a task
/// whose policy is exhausted staying dead in a runner that still runs: its allocation fails
/// and the rest is killed. Why: a crash loop past the policy hides a broken deployment, and a
/// half-dead allocation keeps serving.
pub fn restart_policy_respected(model: &StopPathModel, state: &State) -> bool {
    every_alloc(
        model,
        state,
        Violation::RestartPolicy,
        restarts_within_policy,
    )
}

fn restarts_within_policy(model: &StopPathModel, alloc: &Alloc) -> bool {
    let attempts = model.cfg.restart_attempts;
    let within = alloc.tasks.iter().all(|task| task.restarts <= attempts);
    let dead_in_running_runner = alloc.runner == RunnerPhase::Running
        && alloc
            .tasks
            .iter()
            .any(|task| task.ended_on_own && task.phase == TaskPhase::Exited);
    within && !dead_in_running_runner
}

/// **rollout_bounded** (DESIGN.md invariant 10b; the `update` block). Forbids more than
/// `max_parallel` allocations stopped by a rollout being still stopping at once, and a
/// rollout stopping an old allocation while a replacement of the previous batch is not yet
/// healthy or an allocation of the previous batch is still stopping, or before the
/// deployment's canaries are promoted (the ghost `rollout_ran_ahead`, set at that stop).
/// A canary's own stop is no rollout's. Why: a rollout that takes every allocation down
/// together is a full outage, the one `shutdown_delay` exists to soften. (Without an
/// `update` block, `max_parallel = 0`, there is no deployment and nothing to bound.)
pub fn rollout_bounded(model: &StopPathModel, state: &State) -> bool {
    let stopping = state
        .allocs
        .iter()
        .filter(|alloc| alloc.rollout_stop && alloc.runner != RunnerPhase::Terminal)
        .count();
    let bounded = model.cfg.max_parallel == 0 || stopping <= usize::from(model.cfg.max_parallel);
    !state.ghost.rollout_ran_ahead && bounded
}
