//! The runner's restart path: in place with and without the flag, the restart policy, and
//! a stop meeting a restart.

use super::*;
use crate::client::test_support::alloc;
use crate::spec::RestartPolicy;

const SECOND: i64 = 1_000_000_000;
const CRASH: ExitResult = ExitResult {
    exit_code: 1,
    signal: None,
    failure: None,
};

fn kinds(runner: &AllocRunner) -> Vec<String> {
    runner.tasks[0]
        .state
        .events
        .iter()
        .map(|e| e.event_type.to_string())
        .collect()
}

fn has(out: &[Command], wanted: impl Fn(&Command) -> bool) -> bool {
    out.iter().any(wanted)
}

/// A running runner of `alloc(false, false, 30, task_delay_s)` (a 30 s group delay).
fn running(task_delay_s: i64) -> AllocRunner {
    let mut out = Vec::new();
    AllocRunner::new(
        alloc(false, false, 30, task_delay_s),
        30 * SECOND,
        0,
        &mut out,
    )
}

// invariant: services_restored
#[test]
fn an_unflagged_restart_waits_the_task_delay_then_runs_the_task_again() {
    let mut runner = running(5);
    let mut out = Vec::new();
    assert_eq!(runner.restart(None, false, 0, &mut out), Ok(vec![0]));
    let app = &runner.tasks[0];
    assert_eq!(
        (app.phase, app.delay),
        (TaskPhase::Delaying, DelayOutcome::Waiting)
    );
    assert!(has(&out, |c| matches!(
        c,
        Command::DeregisterServices { task: Some(0), .. }
    )));
    assert!(!has(&out, |c| matches!(
        c,
        Command::DeregisterServices { task: None, .. }
    )));
    assert!(
        !has(&out, |c| matches!(c, Command::Signal { .. })),
        "no signal before the delay"
    );
    assert_eq!(
        runner.phase,
        RunnerPhase::Running,
        "the group is left alone"
    );
    out.clear();
    assert!(runner.timer_fired(Timer::TaskDelay(0), 5 * SECOND, &mut out));
    assert!(has(&out, |c| matches!(
        c,
        Command::Signal {
            task: 0,
            kill: 1,
            ..
        }
    )));
    out.clear();
    assert!(runner.task_exited(0, CRASH, 5 * SECOND, &mut out));
    assert!(has(&out, |c| matches!(c, Command::StartTask { task: 0 })));
    assert!(has(&out, |c| matches!(
        c,
        Command::RegisterServices { task: Some(0), .. }
    )));
    let app = &runner.tasks[0];
    assert_eq!(app.phase, TaskPhase::Running);
    assert_eq!((app.restart, app.state.restarts), (RestartMark::None, 1));
    assert_eq!(
        app.policy_restarts, 0,
        "an operator's restart uses no attempt"
    );
    assert_eq!(
        kinds(&runner)[2..],
        [
            "Restart Signaled",
            "Waiting for shutdown delay",
            "Terminated",
            "Restarting",
            "Started"
        ]
    );
}

// invariant: delay_skipped_only_when_flagged
#[test]
fn a_flagged_restart_skips_its_delay_and_the_next_stop_waits_again() {
    let mut runner = running(5);
    let mut out = Vec::new();
    runner.restart(Some(0), true, 0, &mut out).unwrap();
    assert_eq!(runner.tasks[0].delay, DelayOutcome::Skipped);
    assert!(
        has(&out, |c| matches!(c, Command::Signal { .. })),
        "signalled at once"
    );
    assert!(
        !runner.cancelled,
        "the flag is that restart's, not the runner's"
    );
    runner.task_exited(0, CRASH, 0, &mut out);
    runner.update(alloc(true, false, 30, 5), 0, &mut out);
    assert!(runner.step(RunnerStep::GroupPreKill, 0, &mut out));
    assert_eq!(
        runner.group_delay,
        DelayOutcome::Waiting,
        "the stop waits its delay"
    );
}

#[test]
fn restarts_are_refused_for_a_stopping_runner_or_a_task_not_running() {
    let mut out = Vec::new();
    let mut runner = running(0);
    assert_eq!(
        runner.restart(Some(7), false, 0, &mut out),
        Err(RestartRefused::NoSuchTask)
    );
    runner.update(alloc(true, false, 30, 0), 0, &mut out);
    let before = runner.clone();
    out.clear();
    assert_eq!(
        runner.restart(None, false, 0, &mut out),
        Err(RestartRefused::Stopping)
    );
    assert!(out.is_empty());
    assert_eq!(runner, before, "nothing changed");
}

/// `attempts` restarts after `delay_s`, then the allocation fails.
fn with_policy(attempts: i64, delay_s: i64) -> AllocRunner {
    let mut alloc = alloc(false, false, 0, 0);
    let mut job = (*alloc.job).clone();
    job.task_groups[0].restart_policy = Some(RestartPolicy {
        attempts: Some(attempts),
        delay_ns: Some(delay_s * SECOND),
        ..RestartPolicy::default()
    });
    alloc.job = std::sync::Arc::new(job);
    let mut out = Vec::new();
    AllocRunner::new(alloc, 30 * SECOND, 0, &mut out)
}

// invariant: restart_policy_respected
#[test]
fn a_crash_is_restarted_within_the_policy_then_fails_the_allocation() {
    let mut runner = with_policy(1, 2);
    let mut out = Vec::new();
    assert!(runner.task_exited(0, CRASH, SECOND, &mut out));
    assert_eq!(runner.tasks[0].phase, TaskPhase::Crashed);
    assert!(has(&out, |c| matches!(
        c,
        Command::DeregisterServices { task: Some(0), .. }
    )));
    assert_eq!(runner.ready_steps(), [RunnerStep::RestartDecision(0)]);
    out.clear();
    assert!(runner.step(RunnerStep::RestartDecision(0), SECOND, &mut out));
    assert_eq!(runner.tasks[0].phase, TaskPhase::Restarting);
    assert!(has(&out, |c| matches!(
        c,
        Command::StartTimer { timer: Timer::RestartDelay(0), after_ns } if *after_ns == 2 * SECOND
    )));
    assert!(runner.timer_fired(Timer::RestartDelay(0), 3 * SECOND, &mut out));
    assert_eq!(runner.tasks[0].phase, TaskPhase::Running);
    assert!(runner.task_exited(0, CRASH, 4 * SECOND, &mut out));
    assert!(runner.step(RunnerStep::RestartDecision(0), 4 * SECOND, &mut out));
    let app = &runner.tasks[0];
    assert_eq!(app.phase, TaskPhase::Dead);
    assert!(app.state.failed && runner.failed);
    let last = app.state.events.last().unwrap();
    assert_eq!(last.event_type, "Not Restarting");
    assert!(
        last.display_message
            .contains("Exceeded allowed attempts 1 in interval 30m0s and mode is \"fail\""),
        "{}",
        last.display_message
    );
    assert_eq!(
        runner.phase,
        RunnerPhase::Terminal,
        "nothing else alive: the runner ends"
    );
    assert_eq!(runner.alloc.client_status, ClientStatus::Failed);
}

// invariant: restart_policy_respected
#[test]
fn an_error_the_driver_reported_is_not_retried() {
    let mut runner = with_policy(2, 2);
    let mut out = Vec::new();
    let lost = ExitResult {
        failure: Some("the task's process was lost".into()),
        ..CRASH
    };
    runner.task_exited(0, lost, 0, &mut out);
    assert!(runner.tasks[0].unrecoverable());
    runner.step(RunnerStep::RestartDecision(0), 0, &mut out);
    assert_eq!(runner.tasks[0].phase, TaskPhase::Dead);
    assert_eq!(
        runner.tasks[0].state.events.last().unwrap().display_message,
        "Error was unrecoverable"
    );
}

// invariant: stop_completes
#[test]
fn a_stop_ends_a_restart_delay_and_nothing_runs_again() {
    let mut runner = with_policy(2, 15);
    let mut out = Vec::new();
    runner.task_exited(0, CRASH, 0, &mut out);
    runner.step(RunnerStep::RestartDecision(0), 0, &mut out);
    assert_eq!(runner.tasks[0].phase, TaskPhase::Restarting);
    out.clear();
    runner.update(alloc(true, false, 0, 0), 0, &mut out);
    assert_eq!(runner.tasks[0].phase, TaskPhase::Dead);
    assert!(has(&out, |c| matches!(
        c,
        Command::CancelTimer {
            timer: Timer::RestartDelay(0)
        }
    )));
    assert!(!runner.timer_fired(Timer::RestartDelay(0), 15 * SECOND, &mut out));
    assert!(
        runner.tasks[0].state.failed,
        "its last run ended with exit code 1: the task failed"
    );
}

fn with_interval(attempts: i64, interval_s: i64) -> AllocRunner {
    let mut alloc = alloc(false, false, 0, 0);
    let mut job = (*alloc.job).clone();
    job.task_groups[0].restart_policy = Some(RestartPolicy {
        attempts: Some(attempts),
        delay_ns: Some(SECOND),
        interval_ns: Some(interval_s * SECOND),
        ..RestartPolicy::default()
    });
    alloc.job = std::sync::Arc::new(job);
    let mut out = Vec::new();
    AllocRunner::new(alloc, 30 * SECOND, 0, &mut out)
}

/// A crash at `at`, its restart decision, and (if it restarts) the run again after the
/// policy's 1 s delay; the task's phase after the decision.
fn crash(runner: &mut AllocRunner, at: i64) -> TaskPhase {
    let mut out = Vec::new();
    assert!(runner.task_exited(0, CRASH, at, &mut out));
    assert!(runner.step(RunnerStep::RestartDecision(0), at, &mut out));
    let phase = runner.tasks[0].phase;
    if phase == TaskPhase::Restarting {
        assert!(runner.timer_fired(Timer::RestartDelay(0), at + SECOND, &mut out));
    }
    phase
}

// invariant: restart_policy_respected
/// `attempts` restarts in an interval, counted from the first crash; the next fails.
#[test]
fn every_attempt_of_the_policy_is_used_then_the_allocation_fails() {
    let mut runner = with_interval(2, 600);
    assert_eq!(crash(&mut runner, SECOND), TaskPhase::Restarting);
    assert_eq!(crash(&mut runner, 3 * SECOND), TaskPhase::Restarting);
    assert_eq!(crash(&mut runner, 5 * SECOND), TaskPhase::Dead);
    assert!(runner.failed);
}

// invariant: restart_policy_respected
/// The interval runs from its first crash: a crash exactly at its end still counts in it;
/// one after it starts a new interval with its attempts back.
#[test]
fn the_policys_interval_starts_again_only_after_it_has_passed() {
    let mut at_the_end = with_interval(1, 10);
    assert_eq!(crash(&mut at_the_end, SECOND), TaskPhase::Restarting);
    assert_eq!(crash(&mut at_the_end, 11 * SECOND), TaskPhase::Dead);

    let mut after = with_interval(1, 10);
    assert_eq!(crash(&mut after, SECOND), TaskPhase::Restarting);
    assert_eq!(crash(&mut after, 12 * SECOND), TaskPhase::Restarting);
    assert_eq!(crash(&mut after, 13 * SECOND), TaskPhase::Dead);
}

/// A restart is refused, by reason, for a runner that has ended, for a task that is not
/// running (waiting its restart delay), and for a task that does not exist.
#[test]
fn a_restart_is_refused_for_what_is_not_running() {
    let mut waiting = with_interval(1, 600);
    let mut out = Vec::new();
    waiting.task_exited(0, CRASH, SECOND, &mut out);
    waiting.step(RunnerStep::RestartDecision(0), SECOND, &mut out);
    assert_eq!(waiting.tasks[0].phase, TaskPhase::Restarting);
    assert_eq!(
        waiting.restart_targets(Some(0)),
        Err(RestartRefused::TaskNotRunning)
    );
    assert_eq!(
        waiting.restart_targets(None),
        Err(RestartRefused::TaskNotRunning)
    );
    assert_eq!(
        waiting.restart_targets(Some(9)),
        Err(RestartRefused::NoSuchTask)
    );

    let mut ended = with_interval(0, 600);
    ended.task_exited(0, CRASH, SECOND, &mut out);
    ended.step(RunnerStep::RestartDecision(0), SECOND, &mut out);
    assert_eq!(ended.phase, RunnerPhase::Terminal);
    assert!(!ended.stop_requested(), "it ended on its own");
    assert_eq!(
        ended.restart_targets(Some(0)),
        Err(RestartRefused::Stopping)
    );
    assert_eq!(
        RestartRefused::Stopping.to_string(),
        "Allocation is stopping or has stopped: not restarted"
    );
}

/// A restart's kill timeout: SIGKILL, and the forced exit comes as its own event, after
/// which the task runs again (a stop's merges them; a restart's must not).
#[test]
fn a_restarts_kill_timeout_waits_for_the_forced_exit_to_run_the_task_again() {
    let mut runner = running(0);
    let mut out = Vec::new();
    runner.restart(None, true, 0, &mut out).unwrap();
    out.clear();
    assert!(runner.timer_fired(Timer::KillTimeout(0), 5 * SECOND, &mut out));
    assert!(has(&out, |c| matches!(
        c,
        Command::ForceKill { task: 0, kill: 1 }
    )));
    assert_eq!(
        runner.tasks[0].phase,
        TaskPhase::Signalled,
        "the exit is still to come"
    );
    let killed = ExitResult {
        exit_code: 137,
        signal: Some(9),
        failure: None,
    };
    assert!(runner.task_exited(0, killed, 5 * SECOND, &mut out));
    assert_eq!(runner.tasks[0].phase, TaskPhase::Running);
    assert!(
        !runner.tasks[0].sigkilled,
        "a fresh kill record for the new run"
    );
}

#[test]
fn a_prestart_task_that_ends_cleanly_is_not_restarted() {
    use crate::spec::{Lifecycle, Task};
    let mut alloc = alloc(false, false, 0, 0);
    let mut job = (*alloc.job).clone();
    job.task_groups[0].tasks.push(Task {
        name: "init".into(),
        driver: "mock_driver".into(),
        lifecycle: Some(Lifecycle {
            hook: "prestart".into(),
            sidecar: false,
        }),
        ..Task::default()
    });
    alloc.job = std::sync::Arc::new(job);
    let mut out = Vec::new();
    let mut runner = AllocRunner::new(alloc, 30 * SECOND, 0, &mut out);
    let clean = ExitResult {
        exit_code: 0,
        ..CRASH
    };
    runner.task_exited(1, clean, 0, &mut out);
    runner.step(RunnerStep::RestartDecision(1), 0, &mut out);
    let init = &runner.tasks[1];
    assert_eq!((init.phase, init.state.failed), (TaskPhase::Dead, false));
    assert_eq!(runner.phase, RunnerPhase::Running, "the allocation runs on");
}
