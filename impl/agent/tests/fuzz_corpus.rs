//! The fuzz targets' saved corpora (`fuzz/corpus/<target>/`, minimised with `cargo fuzz
//! cmin`), replayed on stable Rust: every input the fuzzer kept, as a regression test of
//! the same checks (`quiesce_agent::fuzzing`). The opt-in fuzzing run itself is in the README.

use std::path::Path;

fn replay(target: &str, check: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut inputs: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .collect();
    inputs.sort();
    assert!(
        inputs.len() >= 3,
        "{}: the corpus is missing (its seeds at least)",
        dir.display()
    );
    for input in &inputs {
        let data = std::fs::read(input).unwrap();
        let outcome = std::panic::catch_unwind(|| check(&data));
        assert!(outcome.is_ok(), "{} panicked", input.display());
    }
}

#[test]
fn jobspec_json_corpus() {
    replay("jobspec_json", quiesce_agent::fuzzing::jobspec_json);
}

#[test]
fn hcl_jobspec_corpus() {
    replay("hcl_jobspec", quiesce_agent::fuzzing::hcl_jobspec);
}

#[test]
fn request_corpus() {
    replay("request", quiesce_agent::fuzzing::request);
}
