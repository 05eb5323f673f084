//! Stops: the delays waited or skipped, the services gone first, SIGKILL at the kill timeout.

use crate::harness::*;
use serde_json::json;

// invariant: delay_skipped_only_when_flagged
// invariant: prestop_hooks_always_run
/// An unflagged job stop deregisters the group's services, waits the group's delay, then
/// deregisters the task's and waits the task's delay; the witness dies of its one SIGINT.
#[test]
fn an_unflagged_stop_waits_both_delays_with_the_services_gone() {
    let agent = Agent::new("unflagged");
    let log = agent.dir.join("witness.jsonl");
    let delays = dies(SECOND_NS / 2, SECOND_NS / 2);
    let id = agent.run(&job(&agent, "slow", &log, delays), &log);
    assert_eq!(agent.listed("slow-group"), 1);
    assert_eq!(agent.listed("slow-server"), 1);
    let requested = monotonic_s();
    agent.ok("DELETE", "/v1/job/slow", None);
    agent.wait_event(&id, "Waiting for group shutdown delay");
    // As in Nomad: the group's services go before the group's delay, the task's before
    // the task's.
    assert_eq!(agent.listed("slow-group"), 0, "gone before the group delay");
    assert_eq!(
        agent.listed("slow-server"),
        1,
        "the task's turn has not come"
    );
    let alloc = agent.wait_client_status(&id, "complete");
    let signal = one_signal(&log, &id);
    assert_eq!(signal["signal"], libc::SIGINT);
    let waited = signal["at"].as_f64().expect("a time") - requested;
    assert!(
        (1.0..20.0).contains(&waited),
        "signalled {waited:.2} s after the stop; the delays add up to 1 s"
    );
    assert_eq!(signal["listed"], json!({"slow-group": 0, "slow-server": 0}));
    let types = event_types(&alloc);
    let group = types
        .iter()
        .position(|t| t == "Waiting for group shutdown delay");
    let task = types.iter().position(|t| t == "Waiting for shutdown delay");
    assert!(group.is_some() && group < task, "{types:?}");
    assert_eq!(terminated(&alloc), "Exit Code: 130, Signal: 2");
    assert_eq!(alloc["TaskStates"]["server"]["State"], "dead");
    assert_eq!(alloc["TaskStates"]["server"]["Failed"], false);
    agent.validate_log();
}

// invariant: flag_is_honoured
/// A flagged alloc stop of a job whose delays add up to a minute kills at once, the
/// services gone.
#[test]
fn a_flagged_stop_skips_the_delays_and_keeps_the_hooks() {
    let agent = Agent::new("flagged");
    let log = agent.dir.join("witness.jsonl");
    // A kill timeout of a minute too: a signal sent only with the SIGKILL comes that late.
    let delays = Shape {
        kill_timeout_ns: 60 * SECOND_NS,
        ..dies(30 * SECOND_NS, 30 * SECOND_NS)
    };
    let id = agent.run(&job(&agent, "fast", &log, delays), &log);
    assert_eq!(agent.listed("fast-group"), 1);
    assert_eq!(agent.listed("fast-server"), 1);
    let requested = monotonic_s();
    let path = format!("/v1/allocation/{id}/stop?no_shutdown_delay=true");
    agent.ok("PUT", &path, None);
    let alloc = agent.wait_client_status(&id, "complete");
    let signal = one_signal(&log, &id);
    let waited = signal["at"].as_f64().expect("a time") - requested;
    assert!(
        waited < 10.0,
        "signalled {waited:.2} s after the stop; the delays add up to 60 s, the kill \
         timeout is 60 s"
    );
    assert_eq!(signal["listed"], json!({"fast-group": 0, "fast-server": 0}));
    let types = event_types(&alloc);
    assert!(
        types.contains(&"Skipping group shutdown delay".to_string()),
        "{types:?}"
    );
    assert!(
        types.contains(&"Skipping shutdown delay".to_string()),
        "{types:?}"
    );
    assert_eq!(alloc["DesiredTransition"]["NoShutdownDelay"], true);
    assert_eq!(terminated(&alloc), "Exit Code: 130, Signal: 2");
    agent.validate_log();
}

// invariant: kill_timeout_respected
/// A task that ignores its kill signal gets it once, then SIGKILL when its kill timeout
/// runs out.
#[test]
fn a_task_that_ignores_its_signal_is_killed_at_its_kill_timeout() {
    let agent = Agent::new("sigkill");
    let log = agent.dir.join("witness.jsonl");
    let shape = Shape {
        group_delay_ns: 0,
        task_delay_ns: 0,
        kill_timeout_ns: SECOND_NS / 2,
        mode: "ignore",
    };
    let id = agent.run(&job(&agent, "stubborn", &log, shape), &log);
    agent.ok("PUT", &format!("/v1/allocation/{id}/stop"), None);
    let alloc = agent.wait_client_status(&id, "complete");
    let signal = one_signal(&log, &id);
    assert_eq!(signal["signal"], libc::SIGINT);
    let events = alloc["TaskStates"]["server"]["Events"]
        .as_array()
        .expect("events");
    let time = |kind: &str| {
        events
            .iter()
            .find(|e| e["Type"] == kind)
            .and_then(|e| e["Time"].as_i64())
            .unwrap_or_else(|| panic!("a {kind} event: {events:?}"))
    };
    // The kill timeout runs from the signal (`Killing`) to the end: at least its 0.5 s.
    let lasted_ns = time("Terminated") - time("Killing");
    assert!(
        lasted_ns >= SECOND_NS / 2,
        "SIGKILLed {lasted_ns} ns after the signal, before its kill timeout"
    );
    assert_eq!(terminated(&alloc), "Exit Code: 137, Signal: 9");
    agent.validate_log();
}
