//! Random long runs beyond the model's bounds (fixed seed, so CI is reproducible): four
//! allocations over two nodes, four tasks that may crash, up to a hundred requests (stops,
//! starts, in-place restarts, client restarts), hundreds of steps each.

use quiesce_proofs::random::{large_cfg, run_with, runs};

#[test]
fn long_random_runs_keep_every_invariant() {
    let summary = runs(&large_cfg(), 48, 20261130, 100).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(summary.runs, 48);
    assert!(summary.steps > 48 * 150, "{summary:?}");
    assert!(
        summary.max_allocs > 4,
        "requests placed replacements: {summary:?}"
    );
    assert!(
        summary.restarts > 48 && summary.decisions > 48,
        "runs restart tasks in place and tasks crash: {summary:?}"
    );
    eprintln!("{summary:?}");
}

// invariant: delay_skipped_only_when_flagged
/// The harness has teeth: if it forgets which requests carried the flag, the first skipped
/// delay breaks `delay_skipped_only_when_flagged` (or the flag breaks `flag_scoped`).
#[test]
fn a_run_that_forgets_the_flag_is_caught() {
    let broken = (0u16..2000).map(|seed| {
        let choices: Vec<u16> = (0..300)
            .map(|i| seed.wrapping_mul(7919).wrapping_add(i * 31))
            .collect();
        run_with(&large_cfg(), &choices, 40, false).unwrap()
    });
    let caught = broken
        .take(50)
        .flat_map(|report| report.violations)
        .collect::<Vec<_>>();
    assert!(
        caught
            .iter()
            .any(|v| v.starts_with("delay_skipped_only_when_flagged")
                || v.starts_with("flag_scoped")),
        "{caught:?}"
    );
}
