//! Every part of `small` and `standard` checks clean, with pinned state counts: a changed
//! count is a changed model, and the diff shows it. The counts were first pinned with
//! stateright's own DFS; quiesce's checker counts them now (`checker.rs` compares the two).

use quiesce_model::checker;
use quiesce_model::config::{self, ModelCfg};
use quiesce_model::report::{self, Verdict};
use quiesce_model::{fingerprint_fn, Checker, History};

/// Checks a part depth-first and returns its unique state count, asserting every invariant
/// holds and every witness is found.
fn check(part: ModelCfg, symmetry: bool) -> usize {
    let name = format!("{} ({:?}, symmetry {symmetry})", part.name, part.history);
    let checker = checker::depth_first(part.into_model(), fingerprint_fn(symmetry), 1).join();
    for verdict in report::verdicts(&checker) {
        assert!(
            matches!(verdict.verdict, Verdict::Holds | Verdict::ExampleFound),
            "{name}: {} {}",
            verdict.name,
            verdict.verdict.label()
        );
    }
    checker.unique_state_count()
}

fn counts(parts: Vec<ModelCfg>, history: History, symmetry: bool) -> Vec<(String, usize)> {
    parts
        .into_iter()
        .map(|part| {
            let part = part.with_history(history);
            (part.name.clone(), check(part, symmetry))
        })
        .collect()
}

fn pinned(expected: &[(&str, usize)]) -> Vec<(String, usize)> {
    expected
        .iter()
        .map(|&(name, count)| (name.to_string(), count))
        .collect()
}

#[rustfmt::skip]
#[test]
fn small_checks_clean_in_every_mode() {
    assert_eq!(counts(config::small(), History::Full, true), pinned(&[("count1-budget2", 38_371)]));
    assert_eq!(counts(config::small(), History::Full, false), pinned(&[("count1-budget2", 42_277)]));
    assert_eq!(counts(config::small(), History::Lean, true), pinned(&[("count1-budget2", 19_656)]));
    assert_eq!(counts(config::small(), History::Lean, false), pinned(&[("count1-budget2", 22_770)]));
}

#[rustfmt::skip]
#[test]
fn standard_checks_clean_with_full_history() {
    assert_eq!(counts(config::standard(), History::Full, true), pinned(&[
        ("count2-budget2", 644_983),
        ("count1-main-budget2", 140_201),
        ("second-stop-cuts-wait-short", 40_729),
        ("alloc-stop-then-flagged-job-stop", 55_853),
        ("purge-with-flag", 41_125),
        ("start-after-flagged-stop", 1_077_628),
        ("flag-scoped-to-one-alloc", 21_698),
        ("unflagged-alloc-stop-after-flagged", 1_158_218),
        ("flagged-stop-then-client-restart", 701),
        ("count1-restart-budget2", 45_764),
        ("count1-crash-attempts1", 193_240),
        ("count1-unrecoverable-crash", 81_601),
        ("flagged-restart-then-stop", 11_199),
        ("restart-then-flagged-stop", 6_608),
        ("rollout-then-flagged-stop", 93_413),
        ("rollout-after-flagged-stop", 959),
        ("canary-then-flagged-stop", 1_293),
        ("canary-updated-twice", 1_135),
        ("canary-with-alloc-stop", 2_523),
        ("canary-promoted-then-alloc-stop", 4_607),
        ("canary-with-older-failed", 6_312),
        ("system-canary-then-flagged-stop", 2_679),
        ("system-canary-with-alloc-stop", 3_777),
    ]));
}

#[rustfmt::skip]
#[test]
fn standard_checks_clean_with_lean_history() {
    assert_eq!(counts(config::standard(), History::Lean, true), pinned(&[
        ("count2-budget2", 252_748),
        ("count1-main-budget2", 69_924),
        ("second-stop-cuts-wait-short", 11_960),
        ("alloc-stop-then-flagged-job-stop", 18_734),
        ("purge-with-flag", 10_407),
        ("start-after-flagged-stop", 506_173),
        ("flag-scoped-to-one-alloc", 11_399),
        ("unflagged-alloc-stop-after-flagged", 138_450),
        ("flagged-stop-then-client-restart", 521),
        ("count1-restart-budget2", 24_910),
        ("count1-crash-attempts1", 60_533),
        ("count1-unrecoverable-crash", 32_197),
        ("flagged-restart-then-stop", 7_847),
        ("restart-then-flagged-stop", 3_347),
        ("rollout-then-flagged-stop", 14_021),
        ("rollout-after-flagged-stop", 705),
        ("canary-then-flagged-stop", 805),
        ("canary-updated-twice", 754),
        ("canary-with-alloc-stop", 1_736),
        ("canary-promoted-then-alloc-stop", 1_750),
        ("canary-with-older-failed", 3_759),
        ("system-canary-then-flagged-stop", 1_522),
        ("system-canary-with-alloc-stop", 2_550),
    ]));
}

/// The symmetry reduction is sound and pays: on the largest free-budget part, the same
/// verdicts (every invariant holds, every witness found — asserted by `check`) with fewer
/// states.
#[test]
fn symmetry_gives_the_same_verdicts_with_fewer_states() {
    let part = config::standard().remove(0);
    let without = check(part.clone(), false);
    let with = check(part, true);
    assert_eq!((without, with), (2_149_702, 644_983));
    assert!(
        with * 3 < without,
        "symmetry should cut count2-budget2 by more than 3×"
    );
}
