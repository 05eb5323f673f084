//! Every planted fault is caught: a breadth-first search, stopping at the first violation of
//! the invariant the fault is meant to break, finds a counterexample — in full and in lean
//! history (lean folds end-of-life checks into sticky bits, which must catch them too).

use quiesce_model::config::{self, ModelCfg};
use quiesce_model::report::{self, Verdict};
use quiesce_model::{Checker, Fault, History, Model};
use stateright::HasDiscoveries;
use std::collections::BTreeSet;

/// The smallest part whose requests reach the fault's race.
fn part_for(fault: Fault) -> ModelCfg {
    let standard = config::standard();
    let named = |name: &str| {
        standard
            .iter()
            .find(|part| part.name == name)
            .unwrap()
            .clone()
    };
    match fault {
        // Needs a main task besides the leader, so that sidecars have something to wait for.
        Fault::SidecarsKilledWithMainTasks => named("count1-main-budget2"),
        // Needs a client restart after the flag was pulled.
        Fault::NomadRestoreIgnoresFlag => named("flagged-stop-then-client-restart"),
        // Need an in-place restart, and (the leak) a restart or stop after it.
        Fault::RestartFlagLeaks
        | Fault::RestartSignalsBeforePreKill
        | Fault::NomadInplaceRestartIgnoresFlag
        | Fault::RestartLeavesServicesDeregistered => named("count1-restart-budget2"),
        // Needs crashes and a restart policy.
        Fault::RestartPastAttempts => named("count1-crash-attempts1"),
        // Need a rollout.
        Fault::RolloutSkipsDelay
        | Fault::RolloutIgnoresMaxParallel
        | Fault::RolloutStopEndNotReported => named("rollout-then-flagged-stop"),
        // Needs canaries.
        Fault::RolloutIgnoresCanaries => named("canary-then-flagged-stop"),
        _ => config::small().remove(0),
    }
}

/// The verdicts of a BFS that stops as soon as `fault`'s intended invariant is violated.
fn catch(fault: Fault, history: History) -> Vec<report::PropertyVerdict> {
    let model = part_for(fault)
        .with_history(history)
        .with_fault(Some(fault))
        .into_model();
    let intended = BTreeSet::from([fault.intended_property()]);
    let checker = model
        .checker()
        .threads(1)
        .finish_when(HasDiscoveries::AnyOf(intended))
        .spawn_bfs()
        .join();
    report::verdicts(&checker)
}

fn assert_caught(fault: Fault, history: History) {
    let verdicts = catch(fault, history);
    let intended = verdicts
        .iter()
        .find(|v| v.name == fault.intended_property())
        .unwrap();
    assert_eq!(
        intended.verdict,
        Verdict::Violated,
        "{fault} ({history:?}) was not caught"
    );
    let path = intended
        .counterexample
        .as_ref()
        .expect("a violated invariant has a counterexample");
    let (last, _) = path.last().unwrap();
    let model = part_for(fault)
        .with_history(history)
        .with_fault(Some(fault))
        .into_model();
    let property = model
        .properties()
        .into_iter()
        .find(|p| p.name == intended.name)
        .unwrap();
    assert!(
        !(property.condition)(&model, last),
        "the counterexample ends in a violation"
    );
}

macro_rules! fault_tests {
    ($($test:ident: $fault:ident,)*) => {
        mod full {
            use super::*;
            $(#[test] fn $test() { assert_caught(Fault::$fault, History::Full); })*
        }
        mod lean {
            use super::*;
            $(#[test] fn $test() { assert_caught(Fault::$fault, History::Lean); })*
        }
        /// Every fault has a test: the list above is complete.
        #[test]
        fn every_fault_is_tested() {
            let tested = [$(Fault::$fault),*];
            assert_eq!(tested.len(), Fault::ALL.len());
            assert!(Fault::ALL.iter().all(|fault| tested.contains(fault)));
        }
    };
}

fault_tests! {
    prekill_hooks_skipped_when_flagged: PreKillHooksSkippedWhenFlagged,
    flag_written_into_job: FlagWrittenIntoJob,
    flag_honoured_at_group_level_only: FlagHonouredAtGroupLevelOnly,
    flag_applied_to_whole_node: FlagAppliedToWholeNode,
    cancellation_shared_by_node: CancellationSharedByNode,
    delay_in_progress_not_cut_short: DelayInProgressNotCutShort,
    signal_before_deregistration: SignalBeforeDeregistration,
    poststop_skipped_when_flagged: PoststopSkippedWhenFlagged,
    flag_bypasses_kill_timeout: FlagBypassesKillTimeout,
    sidecars_killed_with_main_tasks: SidecarsKilledWithMainTasks,
    nomad_purge_drops_flag: NomadPurgeDropsFlag,
    nomad_alloc_stop_resets_flag: NomadAllocStopResetsFlag,
    nomad_restore_ignores_flag: NomadRestoreIgnoresFlag,
    stop_before_start_ignored: StopBeforeStartIgnored,
    restart_flag_leaks: RestartFlagLeaks,
    restart_signals_before_prekill: RestartSignalsBeforePreKill,
    nomad_inplace_restart_ignores_flag: NomadInplaceRestartIgnoresFlag,
    restart_leaves_services_deregistered: RestartLeavesServicesDeregistered,
    restart_past_attempts: RestartPastAttempts,
    nomad_job_dead_at_desired_stop: NomadJobDeadAtDesiredStop,
    rollout_skips_delay: RolloutSkipsDelay,
    rollout_ignores_max_parallel: RolloutIgnoresMaxParallel,
    rollout_ignores_canaries: RolloutIgnoresCanaries,
    rollout_stop_end_not_reported: RolloutStopEndNotReported,
}

/// The faults' counterexamples read in the operator's language; Nomad's unflagged
/// `alloc stop` erasing the flag is the example DESIGN.md gives.
#[test]
fn counterexample_is_told_in_the_operators_language() {
    let fault = Fault::NomadAllocStopResetsFlag;
    let verdicts = catch(fault, History::Full);
    let violated = verdicts
        .iter()
        .find(|v| v.name == fault.intended_property())
        .unwrap();
    let model = part_for(fault).with_fault(Some(fault)).into_model();
    let story = report::narrate(&model, violated.counterexample.as_ref().unwrap()).join("\n");
    assert!(
        story.contains("operator runs `alloc stop -no-shutdown-delay web[0]`"),
        "{story}"
    );
    assert!(
        story.contains("operator runs `alloc stop web[0]`"),
        "{story}"
    );
    assert!(story.contains("NoShutdownDelay=false"), "{story}");
    assert!(story.contains("group delay waiting"), "{story}");
}

/// A witness a part cannot reach is a failed check, like a violated invariant: `small` has a
/// budget of two requests, and a restarted job waiting its full delay needs three.
#[test]
fn unreachable_witness_is_a_failure() {
    let mut part = config::small().remove(0);
    part.witnesses = vec![quiesce_model::properties::names::RESTARTED_JOB_WAITS_FULL_DELAY];
    let checker = part.into_model().checker().threads(1).spawn_dfs().join();
    let verdicts = report::verdicts(&checker);
    let witness = verdicts
        .iter()
        .find(|v| v.name.starts_with("restarted_job"))
        .unwrap();
    assert_eq!(witness.verdict, Verdict::NoExample);
    assert!(witness.verdict.is_failure());
}

/// Nomad's in-place restart ignoring the flag, told as the operator would see it: the
/// flagged restart, then the task's delay waiting anyway.
#[test]
fn inplace_restart_counterexample_names_the_flagged_restart() {
    let fault = Fault::NomadInplaceRestartIgnoresFlag;
    let verdicts = catch(fault, History::Full);
    let violated = verdicts
        .iter()
        .find(|v| v.name == fault.intended_property())
        .unwrap();
    let model = part_for(fault).with_fault(Some(fault)).into_model();
    let story = report::narrate(&model, violated.counterexample.as_ref().unwrap()).join("\n");
    assert!(
        story.contains("operator runs `alloc restart -no-shutdown-delay web["),
        "{story}"
    );
    assert!(story.contains("delay waiting"), "{story}");
}
