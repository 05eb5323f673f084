//! The health watch with `health_check = "checks"`: the `min_healthy_time` timer runs only
//! while every task runs and every healthiness check passes; a failing check restarts the
//! wait; the `healthy_deadline` still fails an allocation whose checks never pass.

use super::AllocRunner;
use crate::client::test_support::alloc;
use crate::client::{Command, Timer, DEFAULT_MAX_KILL_TIMEOUT_NS};
use crate::server::structs::Allocation;
use crate::spec::{ServiceCheck, UpdateStrategy};
use std::sync::Arc;

const SECOND: i64 = 1_000_000_000;

/// An allocation placed by a deployment, its task's service with one http check (with
/// `on_update`), `health_check` as given (`None`: Nomad's default, `checks`).
fn watched(health_check: Option<&str>, on_update: &str) -> Allocation {
    let mut alloc = alloc(false, false, 0, 0);
    alloc.deployment_id = "d1".into();
    let job = Arc::make_mut(&mut alloc.job);
    job.job_type = "service".into();
    let group = &mut job.task_groups[0];
    group.update = Some(UpdateStrategy {
        health_check: health_check.map(str::to_string),
        min_healthy_time_ns: Some(10 * SECOND),
        healthy_deadline_ns: Some(60 * SECOND),
        ..UpdateStrategy::default()
    });
    let service = &mut group.tasks[0].services.as_mut().expect("a service")[0];
    service.port_label = "http".into();
    service.checks = Some(vec![ServiceCheck {
        name: "alive".into(),
        check_type: "http".into(),
        path: "/health".into(),
        interval_ns: SECOND,
        timeout_ns: SECOND,
        on_update: on_update.into(),
        ..ServiceCheck::default()
    }]);
    alloc
}

fn started(alloc: Allocation) -> (AllocRunner, Vec<Command>) {
    let mut out = Vec::new();
    let runner = AllocRunner::new(alloc, DEFAULT_MAX_KILL_TIMEOUT_NS, 0, &mut out);
    (runner, out)
}

fn starts(out: &[Command], timer: Timer) -> bool {
    out.iter()
        .any(|c| matches!(c, Command::StartTimer { timer: t, .. } if *t == timer))
}

fn cancels(out: &[Command], timer: Timer) -> bool {
    out.iter()
        .any(|c| matches!(c, Command::CancelTimer { timer: t } if *t == timer))
}

#[test]
fn the_wait_begins_only_once_the_checks_pass_then_the_timer_makes_it_healthy() {
    let (mut runner, out) = started(watched(None, ""));
    assert!(runner.waits_for_checks());
    assert!(
        !starts(&out, Timer::Healthy),
        "the task runs but no check has passed: {out:?}"
    );
    assert!(starts(&out, Timer::HealthyDeadline), "{out:?}");
    let mut out = Vec::new();
    assert!(!runner.checks_changed(false, &mut out), "still failing");
    assert!(runner.checks_changed(true, &mut out));
    assert!(starts(&out, Timer::Healthy), "{out:?}");
    let mut out = Vec::new();
    assert!(
        !runner.checks_changed(true, &mut out),
        "a second pass changes nothing"
    );
    assert!(out.is_empty(), "{out:?}");
    assert!(runner.timer_fired(Timer::Healthy, 10 * SECOND, &mut out));
    assert_eq!(runner.health.healthy_at, Some(10 * SECOND));
    assert!(runner.report().deployment_status.unwrap().healthy == Some(true));
    assert!(cancels(&out, Timer::HealthyDeadline), "{out:?}");
    assert!(
        !runner.checks_changed(false, &mut Vec::new()),
        "a verdict is final"
    );
}

#[test]
fn a_check_failing_during_the_wait_restarts_it() {
    let (mut runner, _) = started(watched(Some("checks"), ""));
    let mut out = Vec::new();
    runner.checks_changed(true, &mut out);
    assert!(starts(&out, Timer::Healthy));
    let mut out = Vec::new();
    assert!(runner.checks_changed(false, &mut out));
    assert!(cancels(&out, Timer::Healthy), "{out:?}");
    // The cancelled timer, had it fired anyway, decides nothing.
    assert!(!runner.timer_fired(Timer::Healthy, 10 * SECOND, &mut Vec::new()));
    assert_eq!(runner.health.healthy_at, None);
    let mut out = Vec::new();
    runner.checks_changed(true, &mut out);
    assert!(
        out.contains(&Command::StartTimer {
            timer: Timer::Healthy,
            after_ns: 10 * SECOND
        }),
        "the wait begins again in full: {out:?}"
    );
}

#[test]
fn checks_that_never_pass_leave_it_to_the_healthy_deadline() {
    let (mut runner, _) = started(watched(None, ""));
    let mut out = Vec::new();
    runner.checks_changed(false, &mut out);
    assert!(runner.timer_fired(Timer::HealthyDeadline, 60 * SECOND, &mut out));
    assert_eq!(runner.health.unhealthy_at, Some(60 * SECOND));
    assert_eq!(
        runner.report().deployment_status.unwrap().healthy,
        Some(false)
    );
}

#[test]
fn task_states_and_readiness_checks_do_not_wait_for_checks() {
    for (mode, on_update) in [(Some("task_states"), ""), (None, "ignore")] {
        let (mut runner, out) = started(watched(mode, on_update));
        assert!(!runner.waits_for_checks(), "{mode:?} {on_update:?}");
        assert!(
            starts(&out, Timer::Healthy),
            "{mode:?} {on_update:?}: {out:?}"
        );
        assert!(!runner.checks_changed(false, &mut Vec::new()));
        assert!(runner.timer_fired(Timer::Healthy, 10 * SECOND, &mut Vec::new()));
    }
}

#[test]
fn a_restart_of_the_task_forgets_the_checks_until_they_pass_again() {
    let (mut runner, _) = started(watched(None, ""));
    runner.checks_changed(true, &mut Vec::new());
    let mut out = Vec::new();
    runner
        .restart(None, false, SECOND, &mut out)
        .expect("a running task restarts");
    assert!(cancels(&out, Timer::Healthy), "{out:?}");
    assert!(!runner.health.checks_passing);
}

/// Whatever the watch: a restart's kill stops the wait, so the timer cannot fire while a task
/// is being killed (the model's `AllocHealthy` needs every task running).
#[test]
fn a_restart_stops_the_wait_for_task_states_too() {
    let (mut runner, out) = started(watched(Some("task_states"), ""));
    assert!(starts(&out, Timer::Healthy), "{out:?}");
    let mut out = Vec::new();
    runner
        .restart(None, false, SECOND, &mut out)
        .expect("a running task restarts");
    assert!(cancels(&out, Timer::Healthy), "{out:?}");
    assert!(!runner.timer_fired(Timer::Healthy, 10 * SECOND, &mut Vec::new()));
}

#[test]
fn a_restored_runner_waits_for_its_checks_again() {
    let (mut runner, _) = started(watched(None, ""));
    runner.checks_changed(true, &mut Vec::new());
    let mut out = Vec::new();
    let restored = AllocRunner::restore(runner, SECOND, &mut out);
    assert!(!restored.health.checks_passing);
    assert!(!restored.health.timer);
    assert!(!starts(&out, Timer::Healthy), "{out:?}");
}

/// `watched`, its check moved from the main task to a second task `init` of `lifecycle`
/// (`hook`, `sidecar`) and to a poststop task `flush`.
fn checked_beside(hook: &str, sidecar: bool) -> Allocation {
    use crate::spec::{Lifecycle, Task};
    let mut alloc = watched(None, "");
    let job = Arc::make_mut(&mut alloc.job);
    let app = &mut job.task_groups[0].tasks[0];
    let mut service = app.services.as_ref().expect("a service")[0].clone();
    app.services.as_mut().expect("a service")[0].checks = None;
    let mut lifecycle_task = |name: &str, hook: &str, sidecar: bool| {
        service.name = name.into();
        Task {
            name: name.into(),
            driver: "mock_driver".into(),
            lifecycle: Some(Lifecycle {
                hook: hook.into(),
                sidecar,
            }),
            services: Some(vec![service.clone()]),
            ..Task::default()
        }
    };
    let init = lifecycle_task("init", hook, sidecar);
    let flush = lifecycle_task("flush", "poststop", false);
    job.task_groups[0].tasks.extend([init, flush]);
    alloc
}

/// A task that does not run throughout the allocation — a prestart or poststart task that
/// is no sidecar, a poststop task — has no say in its health: its checks are not waited
/// for (Nomad's health tracker counts the checks of the tasks that keep running only).
/// Were they counted, the watch would wait for checks nothing runs once the task ended,
/// and the allocation would be healthy only at its deadline, unhealthy.
#[test]
fn checks_of_a_task_that_does_not_run_throughout_do_not_count_for_health() {
    use crate::client::task_runner::ExitResult;
    use crate::client::RunnerStep;
    for hook in ["prestart", "poststart"] {
        let (mut runner, _) = started(checked_beside(hook, false));
        assert!(!runner.waits_for_checks(), "{hook}: its checks count");
        let mut out = Vec::new();
        let clean = ExitResult {
            exit_code: 0,
            signal: None,
            failure: None,
        };
        runner.task_exited(1, clean, SECOND, &mut out);
        runner.step(RunnerStep::RestartDecision(1), SECOND, &mut out);
        assert!(
            runner.health.timer,
            "{hook}: the wait did not begin once the {hook} task ended: {out:?}"
        );
        assert!(runner.timer_fired(Timer::Healthy, 11 * SECOND, &mut Vec::new()));
        assert_eq!(runner.health.healthy_at, Some(11 * SECOND), "{hook}");
    }
    // A sidecar runs throughout: its checks are waited for.
    let (runner, out) = started(checked_beside("prestart", true));
    assert!(runner.waits_for_checks());
    assert!(!starts(&out, Timer::Healthy), "{out:?}");
}
