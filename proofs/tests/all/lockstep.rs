//! The lockstep walk of `small`: the implementation refines the model on every transition.

use quiesce_model::config;
use quiesce_proofs::lockstep::{walk, WalkOptions};

#[test]
fn small_walks_in_lockstep_without_a_mismatch() {
    for part in config::small() {
        let report = walk(&part, WalkOptions::default()).unwrap();
        if let Some(mismatch) = report.mismatches.first() {
            panic!("{}: {mismatch}", part.name);
        }
        assert!(report.transitions > report.states, "{report:?}");
    }
}

/// A depth-bounded walk still reaches every state within the bound: as many states as a
/// breadth-first search to the same depth finds (a state first met deep in the depth-first
/// walk is explored again when a shorter path reaches it).
#[test]
fn a_depth_bounded_walk_reaches_every_state_within_the_bound() {
    use quiesce_model::{Checker, Model};
    let part = config::small().remove(0);
    for depth in [4, 9] {
        let options = WalkOptions {
            max_depth: Some(depth),
            symmetry: false,
            max_mismatches: 1,
        };
        let report = walk(&part, options).unwrap();
        assert!(report.mismatches.is_empty());
        let bfs = part
            .clone()
            .into_model()
            .checker()
            .target_max_depth(depth + 1)
            .spawn_bfs()
            .join();
        assert_eq!(report.states, bfs.unique_state_count(), "depth {depth}");
    }
}

/// The restart path walks in lockstep too: in-place restarts with and without the flag,
/// stops racing them, crashes, the restart policy's decisions and delays — every transition
/// of `standard`'s restart parts.
#[test]
fn the_restart_parts_walk_in_lockstep_without_a_mismatch() {
    let restart_parts = [
        "count1-restart-budget2",
        "count1-crash-attempts1",
        "count1-unrecoverable-crash",
        "flagged-restart-then-stop",
        "restart-then-flagged-stop",
    ];
    for part in config::standard()
        .into_iter()
        .filter(|part| restart_parts.contains(&part.name.as_str()))
    {
        let report = walk(&part, WalkOptions::default()).unwrap();
        if let Some(mismatch) = report.mismatches.first() {
            panic!("{}: {mismatch}", part.name);
        }
        assert!(report.transitions > report.states, "{report:?}");
        eprintln!(
            "{}: {} states, {} transitions, {:.1} s",
            part.name, report.states, report.transitions, report.seconds
        );
    }
}

/// Rollouts walk in lockstep too: two allocations replaced one at a time (`max_parallel =
/// 1`), each replacement's health, a flagged stop racing the rollout, and a rollout after a
/// flagged stop and a start, and a canary promoted by itself with a flagged stop racing it,
/// and an old allocation beside a canary stopped before or after its promotion — every
/// transition of `standard`'s rollout parts.
// invariant: rollout_bounded
#[test]
fn the_rollout_parts_walk_in_lockstep_without_a_mismatch() {
    let rollout_parts = [
        "rollout-then-flagged-stop",
        "rollout-after-flagged-stop",
        "canary-then-flagged-stop",
        "canary-updated-twice",
        "canary-with-alloc-stop",
        "canary-promoted-then-alloc-stop",
    ];
    let mut walked = 0;
    for part in config::standard()
        .into_iter()
        .filter(|part| rollout_parts.contains(&part.name.as_str()))
    {
        let report = walk(&part, WalkOptions::default()).unwrap();
        if let Some(mismatch) = report.mismatches.first() {
            panic!("{}: {mismatch}", part.name);
        }
        assert!(report.transitions > report.states, "{report:?}");
        walked += 1;
        eprintln!(
            "{}: {} states, {} transitions, {:.1} s",
            part.name, report.states, report.transitions, report.seconds
        );
    }
    assert_eq!(
        walked,
        rollout_parts.len(),
        "every rollout part is in standard"
    );
}

/// An in-place restart during a rollout walks in lockstep, with and without the flag, at
/// any point after the update: among them the restart of the new allocation while the
/// deployment watches its health, whose kill stops the `min_healthy_time` wait (the watch
/// begins again once its tasks run again). Before 963867e the implementation offered
/// `AllocHealthy` during that kill, which this walk finds after 12 steps; the restart and
/// rollout parts above cannot reach it. Each part is `standard`'s
/// `rollout-then-flagged-stop` with one allocation and the restart scripted after its
/// update; neither is in a named configuration, so `standard`'s pinned counts stay.
// invariant: rollout_bounded
#[test]
fn a_restart_during_a_rollout_walks_in_lockstep_without_a_mismatch() {
    use quiesce_model::config::{Operator, Request};
    let rollout = config::named_part("standard", Some("rollout-then-flagged-stop")).unwrap();
    for (name, flag, states) in [
        ("rollout-then-restart", false, 396),
        ("rollout-then-flagged-restart", true, 357),
    ] {
        let mut part = rollout.clone();
        part.name = name.to_string();
        part.count = 1;
        part.operator = Operator::Script(vec![
            Request::UpdateJob,
            Request::RestartAlloc {
                no_shutdown_delay: flag,
            },
        ]);
        // The walk compares steps; the witnesses are `check`'s, and the stop's are not
        // this script's to reach.
        part.witnesses.clear();
        let report = walk(&part, WalkOptions::default()).unwrap();
        if let Some(mismatch) = report.mismatches.first() {
            panic!("{name}: {mismatch}");
        }
        assert_eq!(report.states, states, "{name}: {report:?}");
        assert!(report.transitions > report.states, "{report:?}");
        eprintln!(
            "{name}: {} states, {} transitions, {:.1} s",
            report.states, report.transitions, report.seconds
        );
    }
}
