//! The named configurations (`small`, `standard`, `large`) and the task groups they use.

use super::{GroupCfg, History, ModelCfg, Operator, Request, TaskCfg};

/// The task group of `standard`: a group service and a group delay; a leader with a task
/// delay and a service; a prestart sidecar with its own delay; a poststop task.
pub fn web_group() -> GroupCfg {
    GroupCfg {
        name: "web".to_string(),
        shutdown_delay: true,
        service: true,
        tasks: vec![
            TaskCfg::leader("app"),
            TaskCfg::sidecar("proxy"),
            TaskCfg::poststop("flush"),
        ],
    }
}

/// `web_group` whose leader and sidecar may crash.
pub fn web_group_crashing() -> GroupCfg {
    let mut group = web_group();
    group.tasks = group.tasks.into_iter().map(TaskCfg::crashing).collect();
    group
}

/// `web_group_crashing` whose sidecar's crashes are errors the driver reports (a lost
/// process), never retried.
pub fn web_group_lost_sidecar() -> GroupCfg {
    let mut group = web_group_crashing();
    group.tasks[1] = group.tasks[1].clone().lost_when_crashing();
    group
}

/// `web_group` without its sidecar: a rollout replaces whole allocations, so one task with
/// a delay and a service, the group's delay and a poststop task cover its stops while
/// keeping the two-allocation rollout small.
pub fn web_group_without_sidecar() -> GroupCfg {
    GroupCfg {
        tasks: vec![TaskCfg::leader("app"), TaskCfg::poststop("flush")],
        ..web_group()
    }
}

/// `web_group` with its leader alone, and no task delay: the group's delay and services
/// still cover a stop, while two allocations and a canary stay a few thousand states.
pub fn web_group_leader_only() -> GroupCfg {
    let mut leader = TaskCfg::leader("app");
    leader.shutdown_delay = false;
    GroupCfg {
        tasks: vec![leader],
        ..web_group()
    }
}

/// `web_group_leader_only` whose leader's crashes are errors the driver reports (a lost
/// process), never retried: a crash fails its allocation.
pub fn web_group_leader_lost() -> GroupCfg {
    let mut group = web_group_leader_only();
    group.tasks[0] = group.tasks[0].clone().lost_when_crashing();
    group
}

/// `web_group` plus a plain main task, so that "leader before the other main tasks" is
/// exercised.
pub fn web_group_with_main() -> GroupCfg {
    GroupCfg {
        tasks: vec![
            TaskCfg::leader("app"),
            TaskCfg::main("worker"),
            TaskCfg::sidecar("proxy"),
            TaskCfg::poststop("flush"),
        ],
        ..web_group()
    }
}

fn part(
    name: &str,
    group: GroupCfg,
    count: u8,
    operator: Operator,
    witnesses: &[&'static str],
) -> ModelCfg {
    ModelCfg {
        name: name.to_string(),
        job: "web".to_string(),
        group,
        count,
        nodes: 1,
        operator,
        history: History::Full,
        witnesses: witnesses.to_vec(),
        fault: None,
        budget_restarts: false,
        restart_requests: false,
        restart_attempts: 0,
        unrecoverable_crashes: false,
        max_parallel: 1,
        canary: 0,
        canary_in_place: false,
        crash_budget: 0,
    }
}

/// The names `check --config` accepts.
pub const CONFIGURATIONS: [&str; 3] = ["small", "standard", "large"];

/// A named configuration: the parts it checks, in order.
pub fn configuration(name: &str) -> Result<Vec<ModelCfg>, String> {
    match name {
        "small" => Ok(small()),
        "standard" => Ok(standard()),
        "large" => Ok(large()),
        other => Err(format!(
            "unknown configuration '{other}'; valid configurations: {}",
            CONFIGURATIONS.join(", ")
        )),
    }
}

/// One part of a named configuration, by name, or its first part.
pub fn named_part(config_name: &str, part_name: Option<&str>) -> Result<ModelCfg, String> {
    let parts = configuration(config_name)?;
    let Some(name) = part_name else {
        return Ok(parts
            .into_iter()
            .next()
            .expect("every configuration has a part"));
    };
    let names: Vec<_> = parts.iter().map(|part| part.name.clone()).collect();
    parts
        .into_iter()
        .find(|part| part.name == name)
        .ok_or_else(|| {
            format!(
                "unknown part '{name}' of {config_name}; valid parts: {}",
                names.join(", ")
            )
        })
}

/// `small`: one allocation of the `standard` group under a free budget of two requests. Runs
/// in CI in well under a second and reaches every budget-2 witness.
pub fn small() -> Vec<ModelCfg> {
    use crate::properties::names::*;
    vec![part(
        "count1-budget2",
        web_group(),
        1,
        Operator::Budget(2),
        BUDGET2_WITNESSES,
    )]
}

/// `standard`, the default verification: the free-budget parts and one request script per
/// race (`reference/model-sizing.md` §3).
pub fn standard() -> Vec<ModelCfg> {
    use crate::properties::names::*;
    use Request::*;
    let stop = |purge, flag| StopJob {
        purge,
        no_shutdown_delay: flag,
    };
    let alloc = |flag| StopAlloc {
        no_shutdown_delay: flag,
    };
    let restart = |flag| RestartAlloc {
        no_shutdown_delay: flag,
    };
    let script = |name: &str, requests: Vec<Request>, witnesses: &[&'static str]| {
        part(name, web_group(), 2, Operator::Script(requests), witnesses)
    };
    // Allocations rolled out one at a time (`max_parallel = 1`).
    let rollout = |name: &str, count, requests: Vec<Request>, witnesses: &[&'static str]| {
        let group = web_group_without_sidecar();
        part(name, group, count, Operator::Script(requests), witnesses)
    };
    vec![
        part(
            "count2-budget2",
            web_group(),
            2,
            Operator::Budget(2),
            BUDGET2_WITNESSES,
        ),
        part(
            "count1-main-budget2",
            web_group_with_main(),
            1,
            Operator::Budget(2),
            BUDGET2_WITNESSES,
        ),
        script(
            "second-stop-cuts-wait-short",
            vec![stop(false, false), stop(false, true)],
            &[DELAY_CUT_SHORT, DELAY_SKIPPED, FULL_DELAY_WAITED],
        ),
        script(
            "alloc-stop-then-flagged-job-stop",
            vec![alloc(false), stop(false, true)],
            &[ALLOC_STOP_THEN_JOB_STOP, DELAY_CUT_SHORT, DELAY_SKIPPED],
        ),
        script(
            "purge-with-flag",
            vec![stop(false, false), stop(true, true)],
            &[PURGE_WITH_FLAG_HONOURED, DELAY_CUT_SHORT],
        ),
        script(
            "start-after-flagged-stop",
            vec![stop(false, true), StartJob, stop(false, false)],
            &[
                JOB_STARTED_AFTER_FLAGGED_STOP,
                RESTARTED_JOB_WAITS_FULL_DELAY,
            ],
        ),
        script(
            "flag-scoped-to-one-alloc",
            vec![alloc(true), stop(false, false)],
            &[DELAY_SKIPPED, FULL_DELAY_WAITED, ALLOC_STOP_THEN_JOB_STOP],
        ),
        script(
            "unflagged-alloc-stop-after-flagged",
            vec![alloc(true), alloc(false), stop(false, true)],
            &[DELAY_SKIPPED, DELAY_CUT_SHORT],
        ),
        script(
            "flagged-stop-then-client-restart",
            vec![stop(false, true), ClientRestart],
            &[CLIENT_RESTARTED_WITH_FLAG, DELAY_SKIPPED],
        ),
        restarts(part(
            "count1-restart-budget2",
            web_group(),
            1,
            Operator::Budget(2),
            &[BUDGET2_WITNESSES, RESTART_WITNESSES].concat(),
        )),
        with_attempts(
            part(
                "count1-crash-attempts1",
                web_group_crashing(),
                1,
                Operator::Budget(1),
                &[
                    CRASHED_TASK_RESTARTED,
                    RESTART_POLICY_EXHAUSTED,
                    TASK_EXITED_DURING_DELAY,
                    DELAY_SKIPPED,
                ],
            ),
            1,
        ),
        with_attempts(
            part(
                "count1-unrecoverable-crash",
                web_group_lost_sidecar(),
                1,
                Operator::Budget(1),
                &[CRASHED_TASK_RESTARTED, RESTART_POLICY_EXHAUSTED],
            ),
            1,
        ),
        script(
            "flagged-restart-then-stop",
            vec![restart(true), stop(false, false)],
            &[
                RESTART_DELAY_SKIPPED,
                DELAY_WAITED_AFTER_FLAGGED_RESTART,
                FULL_DELAY_WAITED,
            ],
        ),
        script(
            "restart-then-flagged-stop",
            vec![restart(false), stop(false, true)],
            &[RESTART_FULL_DELAY_WAITED, RESTART_DELAY_CUT_SHORT_BY_STOP],
        ),
        rollout(
            "rollout-then-flagged-stop",
            2,
            vec![UpdateJob, stop(false, true)],
            &[
                ROLLOUT_COMPLETED,
                ROLLOUT_WAITS_FULL_DELAY,
                FLAGGED_STOP_DURING_ROLLOUT,
                DELAY_SKIPPED,
            ],
        ),
        // The flag of a stop reaches neither the allocations a start places nor their
        // rollout's stops. (One allocation: with two, the model and the implementation
        // could choose different first victims among started ones.)
        rollout(
            "rollout-after-flagged-stop",
            1,
            vec![stop(false, true), StartJob, UpdateJob],
            &[
                ROLLOUT_AFTER_FLAGGED_STOP_WAITS,
                ROLLOUT_COMPLETED,
                DELAY_SKIPPED,
            ],
        ),
        // An update tried on one canary first (`canary = 1`, `auto_promote`), a flagged
        // stop racing it: before, during and after the promotion.
        canaries(rollout(
            "canary-then-flagged-stop",
            1,
            vec![UpdateJob, stop(false, true)],
            &[
                CANARIES_PROMOTED,
                CANARY_STOPPED_WITH_FLAG,
                ROLLOUT_COMPLETED,
                ROLLOUT_WAITS_FULL_DELAY,
                FLAGGED_STOP_DURING_ROLLOUT,
            ],
        )),
        // A canary superseded by a second update, or stopped by an operator (its
        // replacement a canary again, an old allocation's at its own version).
        canaries(rollout(
            "canary-updated-twice",
            1,
            vec![UpdateJob, UpdateJob],
            &[CANARIES_PROMOTED, ROLLOUT_COMPLETED],
        )),
        canaries(rollout(
            "canary-with-alloc-stop",
            1,
            vec![UpdateJob, alloc(false)],
            &[CANARIES_PROMOTED, ROLLOUT_COMPLETED],
        )),
        // Two allocations, a canary on the first one's index: an alloc stop of the old
        // one beside it — before the promotion, its replacement keeps the index; after, it
        // is not replaced — and the rollout stops the one beside the promoted canary
        // first, with nothing placed for it.
        canaries(part(
            "canary-promoted-then-alloc-stop",
            web_group_leader_only(),
            2,
            Operator::Script(vec![UpdateJob, alloc(false)]),
            &[CANARIES_PROMOTED, ROLLOUT_COMPLETED],
        )),
        // The older allocation beside a waiting canary fails (its task lost, never
        // retried): its replacement takes the stable version beside the canary (Nomad's
        // `downgradeNonCanary`), and after the promotion the rollout stops it with nothing
        // placed for it. One crash in a run: each replacement could crash in turn.
        crash_once(canaries(part(
            "canary-with-older-failed",
            web_group_leader_lost(),
            1,
            Operator::Script(vec![UpdateJob, alloc(false)]),
            &[
                CANARIES_PROMOTED,
                RESTART_POLICY_EXHAUSTED,
                STABLE_PLACED_BESIDE_CANARIES,
                ROLLOUT_COMPLETED,
            ],
        ))),
        // A system job's canary (Nomad 1.11): it takes its allocation's place, which is
        // stopped for it through the stop path, a flagged stop racing it; and an alloc stop
        // of the old one or of the canary (a new canary takes the canary's place).
        in_place(canaries(rollout(
            "system-canary-then-flagged-stop",
            1,
            vec![UpdateJob, stop(false, true)],
            &[
                CANARIES_PROMOTED,
                CANARY_STOPPED_WITH_FLAG,
                ROLLOUT_COMPLETED,
                ROLLOUT_WAITS_FULL_DELAY,
                FLAGGED_STOP_DURING_ROLLOUT,
            ],
        ))),
        in_place(canaries(rollout(
            "system-canary-with-alloc-stop",
            1,
            vec![UpdateJob, alloc(false)],
            &[
                CANARIES_PROMOTED,
                ROLLOUT_COMPLETED,
                ROLLOUT_WAITS_FULL_DELAY,
            ],
        ))),
    ]
}

/// The part as a system job's: its canaries take their allocations' places.
fn in_place(mut part: ModelCfg) -> ModelCfg {
    part.canary_in_place = true;
    part
}

/// The part with at most one crash in a run.
fn crash_once(mut part: ModelCfg) -> ModelCfg {
    part.crash_budget = 1;
    part
}

/// The part with one canary per update, promoted once healthy.
fn canaries(mut part: ModelCfg) -> ModelCfg {
    part.canary = 1;
    part
}

/// The part with `alloc restart` requests offered under its budget.
fn restarts(mut part: ModelCfg) -> ModelCfg {
    part.restart_requests = true;
    part
}

/// The part with a restart policy of `attempts` (and `alloc restart` requests).
fn with_attempts(part: ModelCfg, attempts: u8) -> ModelCfg {
    ModelCfg {
        restart_attempts: attempts,
        ..restarts(part)
    }
}

/// `large` (opt-in): a budget of three requests over two nodes, lean history.
pub fn large() -> Vec<ModelCfg> {
    use crate::properties::names::*;
    let mut witnesses = BUDGET2_WITNESSES.to_vec();
    witnesses.push(RESTARTED_JOB_WAITS_FULL_DELAY);
    let mut cfg = part(
        "count2-nodes2-budget3",
        web_group(),
        2,
        Operator::Budget(3),
        &witnesses,
    );
    cfg.nodes = 2;
    cfg.history = History::Lean;
    vec![cfg]
}
