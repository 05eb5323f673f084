//! The `quiesce-model` binary: verdict lines, exit statuses, and errors that name the
//! valid choices.

use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_quiesce-model"))
        .args(args)
        .output()
        .unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn check_small_prints_a_verdict_per_property_and_succeeds() {
    let output = run(&["check", "--config", "small", "--threads", "1"]);
    let text = stdout(&output);
    assert!(output.status.success(), "{text}");
    for invariant in quiesce_model::properties::INVARIANTS.map(|(name, _)| name) {
        assert!(
            text.lines()
                .any(|l| l.starts_with(invariant) && l.ends_with("  holds")),
            "{text}"
        );
    }
    assert!(text
        .lines()
        .any(|l| l.starts_with("full_delay_waited") && l.ends_with("example found")));
    assert!(
        text.contains("count1-budget2: 38,371 unique states, depth "),
        "{text}"
    );
}

#[test]
fn a_planted_fault_fails_the_check_with_a_counterexample() {
    let output = run(&[
        "check",
        "--config",
        "small",
        "--fault",
        "poststop-skipped-when-flagged",
    ]);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(1), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("kill_order") && l.ends_with("VIOLATED")),
        "{text}"
    );
    assert!(text.contains("    1. operator runs `job stop"), "{text}");
    assert!(text.trim_end().ends_with("FAILED"), "{text}");
}

#[test]
fn faults_lists_one_name_per_line() {
    let output = run(&["faults"]);
    let names: Vec<_> = quiesce_model::Fault::ALL
        .iter()
        .map(|f| f.name().to_string())
        .collect();
    assert_eq!(stdout(&output).lines().collect::<Vec<_>>(), names);
}

#[test]
fn unknown_names_get_an_error_listing_the_valid_ones() {
    let output = run(&["check", "--config", "medium"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output)
        .contains("unknown configuration 'medium'; valid configurations: small, standard, large"));
    let output = run(&["check", "--config", "small", "--fault", "typo"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output)
        .contains("unknown fault 'typo'; valid faults: prekill-hooks-skipped-when-flagged,"));
    let output = run(&["check", "--config", "small", "--history", "short"]);
    assert!(stderr(&output).contains("unknown history mode 'short'; valid modes: full, lean"));
}

#[test]
fn bfs_with_symmetry_is_refused() {
    let output = run(&["check", "--config", "small", "--bfs"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("add --no-symmetry to use --bfs"),
        "{}",
        stderr(&output)
    );
    let output = run(&[
        "check",
        "--config",
        "small",
        "--bfs",
        "--no-symmetry",
        "--threads",
        "1",
    ]);
    assert!(output.status.success(), "{}", stdout(&output));
}

/// The printed counterexample is the shortest: a flagged job stop that zeroes the stored
/// delays breaks `jobspec_unchanged` in one step.
#[test]
fn the_printed_counterexample_is_the_shortest() {
    let output = run(&[
        "check",
        "--config",
        "small",
        "--fault",
        "flag-written-into-job",
    ]);
    let text = stdout(&output);
    let steps: Vec<_> = text
        .lines()
        .filter(|line| line.starts_with("    "))
        .collect();
    assert_eq!(
        steps,
        [
            "    1. operator runs `job stop -no-shutdown-delay web`: job version 1 (Stop=true, \
          SPEC CHANGED); web[0] NoShutdownDelay=true"
        ],
        "{text}"
    );
}

/// `--draw` writes the page whatever the verdicts: a clean check says every invariant holds.
#[test]
fn draw_writes_a_page_even_when_every_invariant_holds() {
    let path = std::env::temp_dir().join(format!("quiesce-draw-{}.html", std::process::id()));
    let output = run(&[
        "check",
        "--config",
        "small",
        "--draw",
        path.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let page = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert!(
        page.contains("every invariant holds in these parts"),
        "{page}"
    );
}

/// A violated invariant is drawn; a path that cannot be written is named, with exit 2.
#[test]
fn draw_draws_violations_and_names_a_path_it_cannot_write() {
    let path = std::env::temp_dir().join(format!("quiesce-draw-fault-{}.html", std::process::id()));
    let fault = ["--fault", "signal-before-deregistration"];
    let output = run(&[
        &[
            "check",
            "--config",
            "small",
            "--draw",
            path.to_str().unwrap(),
        ],
        &fault[..],
    ]
    .concat());
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let page = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert!(
        page.contains("data-invariant=\"prestop_hooks_always_run\""),
        "{page}"
    );
    let unwritable = "/nonexistent-quiesce-dir/page.html";
    let output = run(&[
        &["check", "--config", "small", "--draw", unwritable],
        &fault[..],
    ]
    .concat());
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains(&format!("cannot write the drawing to {unwritable}")),
        "{}",
        stderr(&output)
    );
}
