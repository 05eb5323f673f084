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
