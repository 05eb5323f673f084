use super::*;
use crate::server::structs::MAX_TASK_EVENTS;

#[test]
fn durations_read_as_go_prints_them() {
    let cases = [
        (0, "0s"),
        (999, "999ns"),
        (500_000, "500µs"),
        (1_500_000, "1.5ms"),
        (250_000_000, "250ms"),
        (1_000_000_000, "1s"),
        (1_500_000_000, "1.5s"),
        (1_005_000_000, "1.005s"),
        (1_000_000_001, "1.000000001s"),
        (-5, "0s"),
        (30_000_000_000, "30s"),
        (60_000_000_000, "1m0s"),
        (90_000_000_000, "1m30s"),
        (3_600_000_000_000, "1h0m0s"),
        (3_723_500_000_000, "1h2m3.5s"),
    ];
    for (ns, go) in cases {
        assert_eq!(go_duration(ns), go, "{ns} ns");
    }
}

/// Nomad keeps the last ten events of a task; older ones are dropped first.
#[test]
fn a_task_keeps_its_last_ten_events() {
    let mut runner = TaskRunner::new(
        &Task {
            name: "t".into(),
            ..Task::default()
        },
        EffectiveRestartPolicy::default(),
        false,
        0,
    );
    for n in 0..MAX_TASK_EVENTS {
        runner.record(event("E", n as i64, String::new(), []));
    }
    assert_eq!(
        runner.state.events.len(),
        MAX_TASK_EVENTS,
        "ten are all kept"
    );
    runner.record(event("E", 10, String::new(), []));
    let times: Vec<i64> = runner.state.events.iter().map(|e| e.time).collect();
    assert_eq!(times, (1..=10).collect::<Vec<i64>>());
}

#[test]
fn events_recorded_at_one_instant_are_a_nanosecond_apart() {
    let mut runner = TaskRunner::new(
        &Task::default(),
        EffectiveRestartPolicy::default(),
        false,
        0,
    );
    for (kind, at) in [("A", 5), ("B", 5), ("C", 5), ("D", 4), ("E", 20)] {
        runner.record(event(kind, at, String::new(), []));
    }
    let times: Vec<(&str, i64)> = runner
        .state
        .events
        .iter()
        .map(|e| (&*e.event_type, e.time))
        .collect();
    assert_eq!(times, [("A", 5), ("B", 6), ("C", 7), ("D", 8), ("E", 20)]);
}

/// A prestart or poststart task that is not a sidecar runs once, to its end; a main task,
/// a sidecar and a poststop task do not count as such.
#[test]
fn only_a_prestart_or_poststart_task_without_sidecar_ends_when_done() {
    let ends = |hook: Option<(&str, bool)>| {
        ends_when_done(&Task {
            lifecycle: hook.map(|(hook, sidecar)| crate::spec::Lifecycle {
                hook: hook.into(),
                sidecar,
            }),
            ..Task::default()
        })
    };
    assert!(!ends(None));
    assert!(ends(Some(("prestart", false))));
    assert!(ends(Some(("poststart", false))));
    assert!(!ends(Some(("prestart", true))));
    assert!(!ends(Some(("poststart", true))));
    assert!(!ends(Some(("poststop", false))));
}
