//! Crashes of the agent (`kill -9`): a delay waited out, a supervisor gone, a kill signal
//! delivered before the agent recorded it.

use crate::harness::*;
use quiesce_core::step::log::Event;
use quiesce_core::step::Step;
use serde_json::json;
use std::time::Duration;

// invariant: stop_completes
/// A crash in the middle of a stored group delay: the restarted agent reattaches to the
/// task, waits the delay out (it is not lost, nor cut short), and the task gets its signal
/// once, without being started again.
#[test]
fn a_crash_mid_delay_reattaches_and_waits_the_delay_out() {
    let mut agent = Agent::new("crash");
    let log = agent.dir.join("witness.jsonl");
    let id = agent.run(&job(&agent, "crash", &log, dies(3 * SECOND_NS, 0)), &log);
    let requested = monotonic_s();
    agent.ok("PUT", &format!("/v1/allocation/{id}/stop"), None);
    agent.wait_event(&id, "Waiting for group shutdown delay");
    // The runner's progress is synced at most DURABILITY_LAG (20 ms) after its step: ten
    // times that, and the crash finds the delay stored.
    std::thread::sleep(Duration::from_millis(200));
    let port = agent.port();
    agent.kill9();
    assert!(
        lines(&log, &id, "signal").is_empty(),
        "the task was signalled before its delay ran out"
    );
    agent.start(port);
    let alloc = agent.wait_client_status(&id, "complete");
    let signal = one_signal(&log, &id);
    let waited = signal["at"].as_f64().expect("a time") - requested;
    assert!(
        (3.0..20.0).contains(&waited),
        "signalled {waited:.2} s after the stop; the delay is 3 s"
    );
    assert_eq!(
        lines(&log, &id, "started").len(),
        1,
        "the task was not started again"
    );
    assert_eq!(
        signal["listed"],
        json!({"crash-group": 0, "crash-server": 0})
    );
    assert_eq!(terminated(&alloc), "Exit Code: 130, Signal: 2");
    agent.validate_log();
}

// invariant: stop_completes
/// A crash of the agent, then of the task's supervisor: the restarted agent finds the run
/// launched (its supervisor had created `exit.json`) but nothing left to reattach to, and
/// fails the task as lost, exit code -1, rather than start it a second time.
#[test]
fn a_task_whose_supervisor_died_with_the_agent_is_lost_not_started_again() {
    let mut agent = Agent::new("lost");
    let log = agent.dir.join("witness.jsonl");
    let id = agent.run(&job(&agent, "lost", &log, dies(0, 0)), &log);
    let port = agent.crash_with_the_supervisor(&log, &id);
    agent.start(port);
    let alloc = agent.wait_client_status(&id, "failed");
    let events = alloc["TaskStates"]["server"]["Events"]
        .as_array()
        .expect("events");
    let said = |text: &str| {
        events.iter().any(|e| {
            e["DisplayMessage"]
                .as_str()
                .is_some_and(|m| m.contains(text))
        })
    };
    assert!(said("the task's supervisor is gone"), "{events:?}");
    assert!(said("Exit Code: -1"), "{events:?}");
    assert_eq!(alloc["TaskStates"]["server"]["Failed"], true);
    assert_eq!(
        lines(&log, &id, "started").len(),
        1,
        "the task was not started again"
    );
    assert!(
        lines(&log, &id, "signal").is_empty(),
        "nothing was signalled"
    );
    assert_eq!(agent.listed("lost-group"), 0);
    assert_eq!(agent.listed("lost-server"), 0);
    agent.validate_log();
}

// invariant: kill_timeout_respected
/// A kill signal the task's supervisor delivered before the agent's record of it (as when
/// a crash loses the batch after the signal went out, here sent by the test through the
/// supervisor's control connection while the agent was down): the restarted agent's stop
/// sends no second signal, and runs the kill timeout from the delivery, so the SIGKILL
/// comes when the timeout has run from the signal the task really got.
#[test]
fn a_kill_signal_delivered_before_a_crash_runs_its_timeout_from_the_delivery() {
    let mut agent = Agent::new("delivered");
    let log = agent.dir.join("witness.jsonl");
    let kill_timeout_s = 4.0;
    let shape = Shape {
        group_delay_ns: 0,
        task_delay_ns: 0,
        kill_timeout_ns: 4 * SECOND_NS,
        mode: "ignore",
    };
    let id = agent.run(&job(&agent, "delivered", &log, shape), &log);
    let port = agent.port();
    agent.kill9();
    // As the agent's first kill of the task would have: kill 1, SIGINT, its timeout.
    let task_dir = agent.data_dir().join("alloc").join(&id).join("server");
    let Ok(quiesce_agent::raw_exec::Reattach::Running(attached)) =
        quiesce_agent::raw_exec::reattach(&task_dir)
    else {
        panic!("the task's supervisor outlives the agent");
    };
    let request = quiesce_agent::raw_exec::Request::Kill {
        kill: 1,
        signal: libc::SIGINT,
        timeout_ns: 4 * SECOND_NS,
    };
    attached
        .signaller()
        .and_then(|signaller| signaller.send(request))
        .expect("the kill request sent");
    let delivered = wait_for("the witness to get its kill signal", || {
        lines(&log, &id, "signal").first().cloned()
    });
    let delivered_at = delivered["at"].as_f64().expect("a time");
    drop(attached);
    // The supervisor's own record of the delivery, on the agent's clock, as the restarted
    // agent will read it in the hello.
    let Ok(quiesce_agent::raw_exec::Reattach::Running(attached)) =
        quiesce_agent::raw_exec::reattach(&task_dir)
    else {
        panic!("the task's supervisor outlives the agent");
    };
    let delivered_ns = attached
        .delivered
        .iter()
        .find(|d| d.kill == 1 && !d.forced)
        .map(|d| d.unix_ns)
        .expect("the supervisor recorded kill 1");
    drop(attached);
    agent.start(port);
    // Halfway through the kill timeout as it runs from the delivery.
    while monotonic_s() < delivered_at + kill_timeout_s / 2.0 {
        std::thread::sleep(Duration::from_millis(10));
    }
    let stopped = monotonic_s();
    agent.ok("PUT", &format!("/v1/allocation/{id}/stop"), None);
    let alloc = agent.wait_client_status(&id, "complete");
    let ended = monotonic_s() - stopped;
    // From the delivery, the SIGKILL is due 2 s after the stop; from the stop, 4 s.
    assert!(
        (1.0..3.5).contains(&ended),
        "SIGKILLed {ended:.2} s after the stop; the kill timeout (4 s) ran out 2 s after it"
    );
    assert_eq!(
        one_signal(&log, &id)["signal"],
        libc::SIGINT,
        "no second kill signal"
    );
    assert_eq!(terminated(&alloc), "Exit Code: 137, Signal: 9");
    // The agent's own kill timeout (the supervisor would hold an early SIGKILL anyway) ran
    // from the delivery, not from the stop, nor less than its length.
    let events = std::fs::read_to_string(agent.data_dir().join("events.jsonl")).expect("a log");
    let entries = quiesce_proofs::trace::parse_log(&events).expect("its entries");
    let fired: Vec<i64> = entries
        .iter()
        .filter(
            |e| matches!(&e.event, Event::Step(Step::KillTimeout { alloc, .. }) if *alloc == id),
        )
        .map(|e| e.time_ns)
        .collect();
    let [fired_ns] = fired[..] else {
        panic!("one kill timeout: {fired:?}");
    };
    let after_ns = fired_ns - delivered_ns;
    assert!(
        after_ns >= 4 * SECOND_NS,
        "the kill timeout fired {after_ns} ns after the delivery, before its 4 s"
    );
    agent.validate_log();
}
