//! The invariant index of this tree (`quiesce-model invariants`): every invariant of the
//! model has its property, code tagged as upholding it and a test that names it, and no tag
//! names an invariant that does not exist. Prints the index.

use quiesce_model::properties::INVARIANTS;
use std::process::Command;

#[test]
fn every_invariant_has_its_property_code_and_tests() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let output = Command::new(env!("CARGO_BIN_EXE_quiesce-model"))
        .args(["invariants", "--root", root])
        .output()
        .expect("quiesce-model runs");
    let index = String::from_utf8_lossy(&output.stdout);
    println!("{index}");
    assert!(
        output.status.success(),
        "the index has problems:\n{}",
        index
            .lines()
            .filter(|l| l.starts_with("PROBLEM"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    for (name, _) in INVARIANTS {
        assert!(
            index.lines().any(|l| l.starts_with(&format!("{name}: "))),
            "{name} is not in the index"
        );
    }
}
