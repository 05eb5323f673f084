//! The judging rules, on allocations and witness records made by hand.

use super::*;
use crate::probe::observe::{Event, Skew, TaskView};
use crate::probe::verdict::Delay;
use serde_json::json;

fn task(events: &[(&str, i64)]) -> TaskView {
    TaskView {
        state: "dead".into(),
        events: events
            .iter()
            .map(|(kind, time)| Event {
                kind: kind.to_string(),
                time: *time,
                exit_code: None,
                signal: None,
            })
            .collect(),
        ..TaskView::default()
    }
}

fn stop_job() -> JobSpec {
    use crate::probe::jobs::TaskSpec;
    JobSpec::new(
        "j".into(),
        1,
        vec![
            TaskSpec::new("leader", Role::Leader, 0),
            TaskSpec::new("helper", Role::Main, 0),
            TaskSpec::new("sidecar", Role::Sidecar, 0),
            TaskSpec::new("cleanup", Role::Poststop, 0),
        ],
    )
}

fn alloc(tasks: [(&str, TaskView); 4]) -> AllocView {
    AllocView {
        id: "abcdef0123".into(),
        tasks: tasks.into_iter().map(|(n, t)| (n.to_string(), t)).collect(),
        ..AllocView::default()
    }
}

// invariant: kill_order
#[test]
fn a_sidecar_killed_before_the_leader_ended_breaks_kill_order() {
    let ordered = alloc([
        ("leader", task(&[("Killing", 10), ("Terminated", 20)])),
        ("helper", task(&[("Killing", 20), ("Terminated", 30)])),
        ("sidecar", task(&[("Killing", 31), ("Terminated", 40)])),
        ("cleanup", task(&[("Started", 41), ("Terminated", 42)])),
    ]);
    assert_eq!(kill_order(&stop_job(), &ordered).word(), "holds");
    let early = alloc([
        ("leader", task(&[("Killing", 10), ("Terminated", 20)])),
        ("helper", task(&[("Killing", 20), ("Terminated", 30)])),
        ("sidecar", task(&[("Killing", 15), ("Terminated", 40)])),
        ("cleanup", task(&[("Started", 41), ("Terminated", 42)])),
    ]);
    let verdict = kill_order(&stop_job(), &early);
    assert!(
        verdict.is_violation() && verdict.detail().contains("task sidecar (Killing at 15)"),
        "{verdict:?}"
    );
    let no_poststop_start = alloc([
        ("leader", task(&[("Killing", 10), ("Terminated", 20)])),
        ("helper", task(&[("Killing", 20), ("Terminated", 30)])),
        ("sidecar", task(&[("Killing", 31), ("Terminated", 40)])),
        ("cleanup", task(&[])),
    ]);
    assert_eq!(
        kill_order(&stop_job(), &no_poststop_start).word(),
        "not observable"
    );
}

#[test]
fn a_signal_that_found_a_service_listed_breaks_prestop_and_names_it() {
    let mut spec = stop_job();
    spec.group_service = true;
    spec.tasks.truncate(1);
    let view = alloc([
        ("leader", task(&[])),
        ("x", task(&[])),
        ("y", task(&[])),
        ("z", task(&[])),
    ]);
    let signal = |group: u64| Witnessed::Signal {
        unix_ns: 100,
        name: "SIGINT".into(),
        services: Some([("j-group".to_string(), group), ("j-leader".to_string(), 0)].into()),
        error: None,
    };
    let records = |r: Vec<Witnessed>| BTreeMap::from([("leader", Ok(r))]);
    assert_eq!(
        prestop(&spec, &view, 50, &records(vec![signal(0)]), true).word(),
        "holds"
    );
    let verdict = prestop(&spec, &view, 50, &records(vec![signal(1)]), true);
    assert!(
        verdict.is_violation() && verdict.detail().contains("j-group"),
        "{verdict:?}"
    );
    // The group's services are not the restart's business.
    assert_eq!(
        prestop(&spec, &view, 50, &records(vec![signal(1)]), false).word(),
        "holds"
    );
    // A signal before the request is not this kill's.
    assert_eq!(
        prestop(&spec, &view, 150, &records(vec![signal(1)]), true).word(),
        "not observable"
    );
    let unreadable = BTreeMap::from([("leader", Err("no witness".to_string()))]);
    assert_eq!(
        prestop(&spec, &view, 50, &unreadable, true).word(),
        "not observable"
    );
}

#[test]
fn a_changed_delay_is_a_spec_difference_and_stop_fields_are_not() {
    let before = json!({"ID": "j", "Stop": false, "Version": 0, "TaskGroups": [{"ShutdownDelay": 5, "Tasks": [{"ShutdownDelay": 1}]}]});
    let stopped = json!({"ID": "j", "Stop": true, "Version": 1, "TaskGroups": [{"ShutdownDelay": 5, "Tasks": [{"ShutdownDelay": 1}]}]});
    assert!(spec_differences(&before, &stopped).is_empty());
    let rewritten = json!({"ID": "j", "Stop": true, "Version": 1, "TaskGroups": [{"ShutdownDelay": 5, "Tasks": [{"ShutdownDelay": 2}]}]});
    assert_eq!(
        spec_differences(&before, &rewritten),
        [".TaskGroups[0].Tasks[0].ShutdownDelay: 1 became 2"]
    );
}

fn delayed_job(group_delay_ns: i64, task_delay_ns: i64) -> JobSpec {
    use crate::probe::jobs::TaskSpec;
    let mut spec = JobSpec::new(
        "j".into(),
        1,
        vec![TaskSpec::new("leader", Role::Leader, task_delay_ns)],
    );
    spec.group_delay_ns = group_delay_ns;
    spec
}

fn one_task(events: &[(&str, i64)]) -> AllocView {
    AllocView {
        id: "abcdef0123".into(),
        node: "n1".into(),
        tasks: [("leader".to_string(), task(events))].into(),
        ..AllocView::default()
    }
}

const S: i64 = 1_000_000_000;

#[test]
fn a_delay_whose_events_and_times_disagree_is_unclear() {
    let spec = delayed_job(0, S);
    let none = BTreeMap::new();
    // The times say skipped, the events say a wait began and was not cut short.
    let alloc = one_task(&[
        ("Killing", 0),
        ("Waiting for shutdown delay", 1),
        ("Terminated", 5_000_000),
    ]);
    let (seen, _) = stop_delays(&spec, &alloc, 0, None, false, &none);
    assert_eq!(seen[0].how, Delay::Unclear, "{seen:?}");
    // Both say waited.
    let alloc = one_task(&[
        ("Killing", 0),
        ("Waiting for shutdown delay", 1),
        ("Terminated", S + 3),
    ]);
    assert_eq!(
        stop_delays(&spec, &alloc, 0, None, false, &none).0[0].how,
        Delay::Waited
    );
    // The times say waited, the events say skipped.
    let alloc = one_task(&[
        ("Killing", 0),
        ("Skipping shutdown delay", 1),
        ("Terminated", S + 3),
    ]);
    assert_eq!(
        stop_delays(&spec, &alloc, 0, None, false, &none).0[0].how,
        Delay::Unclear
    );
}

#[test]
fn the_group_delay_is_timed_by_its_events_where_offered_else_across_the_clocks() {
    let spec = delayed_job(S, 0);
    let none = BTreeMap::new();
    let alloc = one_task(&[
        ("Waiting for group shutdown delay", 10 * S),
        ("Killing", 11 * S),
        ("Terminated", 11 * S + 5),
    ]);
    // With the extension, on the client's clock alone, whatever the probe's.
    let (seen, unseen) = stop_delays(&spec, &alloc, 0, None, true, &none);
    assert!(unseen.is_empty(), "{unseen:?}");
    assert_eq!((seen[0].how.clone(), seen[0].low), (Delay::Waited, S));
    // Without it, through the node's clock bound: the stop sent at 9.9 s probe time,
    // the client 0.1 s ahead, known within 20 ms.
    let skew = Skew {
        low: S / 10 - 10_000_000,
        high: S / 10 + 10_000_000,
    };
    let (seen, _) = stop_delays(
        &spec,
        &alloc,
        10 * S - S / 10 - S / 10,
        Some(skew),
        false,
        &none,
    );
    assert_eq!(seen[0].how, Delay::Waited, "{seen:?}");
    // A bound too wide to tell is not observable.
    let wide = Skew { low: 0, high: S };
    let (seen, unseen) = stop_delays(&spec, &alloc, 9 * S, Some(wide), false, &none);
    assert!(
        seen.is_empty() && unseen[0].word() == "not observable",
        "{unseen:?}"
    );
}

#[test]
fn group_events_that_say_skipped_after_a_wait_the_clocks_saw_are_unclear() {
    let spec = delayed_job(S, 0);
    let none = BTreeMap::new();
    // The stop sent at 0 (both clocks agree within 10 ms); the server waited a second,
    // then said it skipped the delay.
    let alloc = one_task(&[
        ("Skipping group shutdown delay", S),
        ("Killing", S + 1_000_000),
        ("Terminated", S + 2_000_000),
    ]);
    let skew = Skew {
        low: -5_000_000,
        high: 5_000_000,
    };
    let (seen, _) = stop_delays(&spec, &alloc, 0, Some(skew), true, &none);
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].how, Delay::Unclear, "{seen:?}");
    assert!(seen[0].what.contains("but"), "{seen:?}");
    // An earlier stop's Killing, before this request, is not this stop's.
    let alloc = one_task(&[
        ("Killing", -10 * S),
        ("Skipping group shutdown delay", 1_000),
        ("Killing", 2_000),
    ]);
    let (seen, _) = stop_delays(&spec, &alloc, 0, Some(skew), true, &none);
    assert!(seen.iter().all(|d| d.how == Delay::Skipped), "{seen:?}");
}

#[test]
fn the_clock_bound_comes_from_an_event_between_a_request_and_its_sighting() {
    // The client's clock runs 1000 ahead: the event at 1105 (client) happened between
    // 100 (sent) and 130 (seen) on the probe's clock.
    let skew = Skew::from_event(1105, 100, 130);
    assert_eq!((skew.low, skew.high, skew.width()), (975, 1005, 30));
    // A stop sent at 200 (probe) and a Killing at 1700 (client): 495 to 525 later.
    assert_eq!(skew.gap(200, 1700), (495, 525));
}
