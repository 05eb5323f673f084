//! Trace validation of simulator runs in "run until quiet" mode: every log the simulator
//! writes is a behaviour the model allows, and a tampered log is caught at the right step.

use quiesce::sim::log::LogEntry;
use quiesce::sim::Step;
use quiesce_model::config;
use quiesce_proofs::lockstep::initial_sim;
use quiesce_proofs::trace::{parse_log, validate};

/// The standard part's job, run through `requests`, each followed by running until quiet.
fn log_of(requests: impl Fn(&[String]) -> Vec<Step>) -> Vec<LogEntry> {
    let part = config::standard().remove(0);
    let (mut sim, ids) = initial_sim(&part).unwrap();
    for step in requests(&ids) {
        sim.apply(&step).unwrap();
        sim.run_until_quiet(100_000).unwrap();
    }
    parse_log(&sim.log().to_json_lines()).unwrap()
}

fn stop(purge: bool, flag: bool) -> Step {
    Step::StopJob {
        job: "web".into(),
        purge,
        no_shutdown_delay: flag,
    }
}

#[test]
fn simulator_logs_validate_against_the_model() {
    let part = config::standard().remove(0);
    let runs: Vec<Vec<LogEntry>> = vec![
        log_of(|_| vec![stop(false, true)]),
        log_of(|_| {
            vec![
                stop(false, false),
                Step::StartJob { job: "web".into() },
                stop(false, true),
            ]
        }),
        log_of(|ids| {
            vec![
                Step::StopAlloc {
                    alloc: ids[1].clone(),
                    no_shutdown_delay: true,
                },
                stop(true, true),
            ]
        }),
        log_of(|ids| {
            vec![
                Step::StopAlloc {
                    alloc: ids[0].clone(),
                    no_shutdown_delay: false,
                },
                Step::ClientRestart,
            ]
        }),
    ];
    for log in runs {
        let report = validate(&part, &log).unwrap_or_else(|e| panic!("{e}"));
        assert!(report.replayed > 10, "{report:?}");
        assert_eq!(report.setup_entries, 3, "an evaluation and two first pulls");
    }
}

#[test]
fn a_tampered_log_fails_at_the_first_step_the_model_forbids() {
    let part = config::standard().remove(0);
    let mut log = log_of(|_| vec![stop(false, false)]);
    // Drop the first GroupPreKill: the leader's kill can then not begin.
    let dropped = log.iter().position(|e| e.step == "GroupPreKill").unwrap();
    let alloc = log[dropped].alloc.clone();
    log.remove(dropped);
    let error = validate(&part, &log).unwrap_err();
    let failed = log.iter().find(|e| e.seq == error.seq).unwrap();
    assert_eq!(failed.alloc, alloc);
    assert!(
        matches!(failed.step.as_str(), "GroupDelayElapsed"),
        "{error}"
    );
}

#[test]
fn a_log_line_that_is_not_json_is_named() {
    let error =
        parse_log("{\"seq\":1,\"time_ns\":0,\"step\":\"ProcessEval\"}\nnot json\n").unwrap_err();
    assert!(
        error.starts_with("line 2: not an event-log line"),
        "{error}"
    );
}
