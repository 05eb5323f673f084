//! Restarts: in place by a user, by the restart policy, and across a crash of the agent.

use crate::harness::*;
use serde_json::json;
use std::time::Duration;

/// An operator's signal reaches the task and ends nothing; an in-place restart kills the
/// task (there is no delay to wait here) and runs it again in the same allocation, a new
/// process.
#[test]
fn a_signal_and_a_restart_reach_the_task_in_place() {
    let agent = Agent::new("restart");
    let log = agent.dir.join("witness.jsonl");
    let id = agent.run(&job(&agent, "again", &log, dies(0, 0)), &log);
    let body = json!({"Task": "server", "Signal": "SIGUSR1"});
    agent.ok(
        "PUT",
        &format!("/v1/client/allocation/{id}/signal"),
        Some(&body),
    );
    let usr1 = wait_for("the witness to get SIGUSR1", || {
        lines(&log, &id, "signal").first().cloned()
    });
    assert_eq!(usr1["signal"], libc::SIGUSR1);
    assert_eq!(agent.alloc(&id)["ClientStatus"], "running");

    let started = agent.restart_in_place(&id, &log);
    assert_ne!(started[0]["pid"], started[1]["pid"]);
    let signals = lines(&log, &id, "signal");
    assert_eq!(
        signals.len(),
        2,
        "SIGUSR1, then the restart's SIGINT: {signals:?}"
    );
    assert_eq!(signals[1]["signal"], libc::SIGINT);
    let alloc = wait_for("the task to be running", || {
        let alloc = agent.alloc(&id);
        (alloc["TaskStates"]["server"]["State"] == "running").then_some(alloc)
    });
    assert_eq!(alloc["ClientStatus"], "running");
    let types = event_types(&alloc);
    assert!(types.contains(&"Restart Signaled".to_string()), "{types:?}");
    assert_eq!(alloc["TaskStates"]["server"]["Restarts"], 1);
    agent.validate_log();
}

// invariant: restart_policy_respected
/// A `mock_driver` task that exits on its own with a failure is restarted by its policy,
/// then, the attempts used, fails its allocation.
#[test]
fn a_mock_task_that_fails_is_restarted_then_fails_the_allocation() {
    let agent = Agent::new("mock");
    let spec = json!({"Job": {
        "ID": "flaky",
        "TaskGroups": [{
            "Name": "web",
            "RestartPolicy": {
                "Attempts": 1,
                "Delay": SECOND_NS / 10,
                "Interval": 60 * SECOND_NS,
                "Mode": "fail",
            },
            "Tasks": [{
                "Name": "server",
                "Driver": "mock_driver",
                "Config": {"run_for": "100ms", "exit_code": 3},
            }],
        }],
    }});
    agent.ok("PUT", "/v1/jobs", Some(&spec));
    let alloc = agent.wait_first_alloc("flaky", "failed");
    assert_eq!(alloc["TaskStates"]["server"]["Restarts"], 1);
    let types = event_types(&alloc);
    let started = types.iter().filter(|t| *t == "Started").count();
    assert_eq!(started, 2, "{types:?}");
    assert!(types.contains(&"Restarting".to_string()), "{types:?}");
    assert!(types.contains(&"Not Restarting".to_string()), "{types:?}");
    agent.validate_log();
}

// invariant: restart_policy_respected
/// A task restarted in place runs its second run under a supervisor of its own (the run's
/// directory): a crash of the agent then finds that run, reattaches to it, and a stop
/// signals the second process once, never starting a third.
#[test]
fn a_crash_after_a_restart_reattaches_to_the_second_run() {
    let mut agent = Agent::new("rerun");
    let log = agent.dir.join("witness.jsonl");
    let id = agent.run(&job(&agent, "rerun", &log, dies(0, 0)), &log);
    let started = agent.restart_in_place(&id, &log);
    wait_for("the task to be running", || {
        (agent.alloc(&id)["TaskStates"]["server"]["State"] == "running").then_some(())
    });
    // As in `a_crash_mid_delay_reattaches_and_waits_the_delay_out`: ten times the lag
    // after which the runner's progress is synced.
    std::thread::sleep(Duration::from_millis(200));
    let port = agent.port();
    agent.kill9();
    agent.start(port);
    agent.ok("PUT", &format!("/v1/allocation/{id}/stop"), None);
    let alloc = agent.wait_client_status(&id, "complete");
    assert_eq!(
        lines(&log, &id, "started").len(),
        2,
        "the second run was reattached, not started again"
    );
    let signals = lines(&log, &id, "signal");
    let [restart, stop] = &signals[..] else {
        panic!("the restart's signal and the stop's: {signals:?}");
    };
    assert_eq!(restart["signal"], libc::SIGINT);
    assert_eq!(stop["signal"], libc::SIGINT);
    assert!(
        stop["at"].as_f64() > started[1]["at"].as_f64(),
        "the stop's signal reached the second run: {signals:?}"
    );
    assert_eq!(alloc["TaskStates"]["server"]["Restarts"], 1);
    let ends: Vec<_> = alloc["TaskStates"]["server"]["Events"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["Type"] == "Terminated")
        .map(|e| e["DisplayMessage"].clone())
        .collect();
    let interrupted = json!("Exit Code: 130, Signal: 2");
    assert_eq!(ends, [interrupted.clone(), interrupted], "each run's end");
    agent.validate_log();
}
