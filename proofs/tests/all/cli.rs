//! The `quiesce-conform` binary: the walk's figures, log validation, errors.

use quiesce_core::step::Step;
use quiesce_model::config;
use quiesce_proofs::lockstep::initial_sim;
use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_quiesce-conform"))
        .args(args)
        .output()
        .unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn small_conforms_and_says_how_much_was_checked() {
    let output = run(&["--config", "small", "--random", "8", "--seed", "3"]);
    let text = stdout(&output);
    assert!(output.status.success(), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("flag_is_honoured") && l.ends_with("  holds")),
        "{text}"
    );
    assert!(
        text.contains("lockstep: 92098 transitions checked, 38371 states, mismatches 0"),
        "{text}"
    );
    assert!(text.contains("random: 8 runs (seed 3), "), "{text}");
    assert!(text.trim_end().ends_with("conforms"), "{text}");
}

#[test]
fn a_simulator_log_validates_and_a_broken_one_is_refused() {
    let part = config::standard().remove(0);
    let (mut sim, _) = initial_sim(&part).unwrap();
    sim.apply(&Step::StopJob {
        job: "web".into(),
        purge: false,
        no_shutdown_delay: true,
    })
    .unwrap();
    sim.run_until_quiet(10_000).unwrap();
    let dir = std::env::temp_dir().join(format!("quiesce-conform-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.jsonl");
    std::fs::write(&good, sim.log().to_json_lines()).unwrap();
    let output = run(&["validate-log", good.to_str().unwrap()]);
    assert!(output.status.success(), "{}", stdout(&output));
    assert!(stdout(&output).contains(": valid: "), "{}", stdout(&output));

    let lines = sim.log().to_json_lines();
    let without_first_pre_kill: String = {
        let mut dropped = false;
        lines
            .lines()
            .filter(|line| {
                let drop = !dropped && line.contains("\"step\":\"GroupPreKill\"");
                dropped |= drop;
                !drop
            })
            .map(|line| format!("{line}\n"))
            .collect()
    };
    let bad = dir.join("bad.jsonl");
    std::fs::write(&bad, without_first_pre_kill).unwrap();
    let output = run(&["validate-log", bad.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1), "{}", stdout(&output));
    assert!(
        stdout(&output).contains("is not allowed by the model"),
        "{}",
        stdout(&output)
    );

    let output = run(&["validate-log", dir.join("missing.jsonl").to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("cannot read"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn unknown_configuration_is_named() {
    let output = run(&["--config", "huge"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("unknown configuration 'huge'"));
}
