use super::*;
use crate::client::test_support::alloc;

const EXIT: ExitResult = ExitResult {
    exit_code: 0,
    signal: None,
    failure: None,
};

/// A task's exit with code 1 on its own: a crash.
fn crash() -> ExitResult {
    ExitResult {
        exit_code: 1,
        ..EXIT
    }
}

/// A runner that pulled a stop and ran its group pre-kill hooks (the group delay runs).
fn waiting_out_the_group_delay() -> AllocRunner {
    let mut out = Vec::new();
    let mut runner = AllocRunner::new(alloc(false, false, 30, 0), 30_000_000_000, 0, &mut out);
    runner.update(alloc(true, false, 30, 0), 0, &mut out);
    assert!(runner.step(RunnerStep::GroupPreKill, 0, &mut out));
    assert_eq!(runner.phase, RunnerPhase::GroupDelay);
    runner
}

/// Every task crashed while the group delay ran: when the wait ends — the timer fires or
/// the flag cuts it short — the runner ends too, instead of waiting for nothing.
#[test]
fn tasks_that_died_during_the_group_delay_end_the_runner_with_it() {
    let mut out = Vec::new();
    let mut timer = waiting_out_the_group_delay();
    assert!(timer.task_exited(0, EXIT, 0, &mut out));
    // A stopping runner's restart policy leaves the task dead.
    assert_eq!(timer.ready_steps(), [RunnerStep::RestartDecision(0)]);
    assert!(timer.step(RunnerStep::RestartDecision(0), 0, &mut out));
    assert_eq!(timer.tasks[0].phase, TaskPhase::Dead);
    assert!(timer.timer_fired(Timer::GroupDelay, 0, &mut out));
    assert_eq!(timer.phase, RunnerPhase::Terminal);

    let mut flag = waiting_out_the_group_delay();
    assert!(flag.task_exited(0, EXIT, 0, &mut out));
    assert!(flag.step(RunnerStep::RestartDecision(0), 0, &mut out));
    flag.update(alloc(true, true, 30, 0), 0, &mut out);
    assert_eq!(flag.phase, RunnerPhase::Terminal);
}

/// A job whose group has a leader `app`, a main `worker`, a sidecar `proxy`, a poststop
/// `flush`, none with a delay.
fn four_roles() -> Allocation {
    use crate::spec::{Lifecycle, Task};
    let mut alloc = alloc(false, false, 0, 0);
    let mut job = (*alloc.job).clone();
    let tasks = &mut job.task_groups[0].tasks;
    tasks[0].shutdown_delay_ns = 0;
    let task = |name: &str, hook: Option<(&str, bool)>| Task {
        name: name.into(),
        driver: "mock_driver".into(),
        lifecycle: hook.map(|(hook, sidecar)| Lifecycle {
            hook: hook.into(),
            sidecar,
        }),
        ..Task::default()
    };
    tasks.push(task("worker", None));
    tasks.push(task("proxy", Some(("prestart", true))));
    tasks.push(task("flush", Some(("poststop", false))));
    alloc.job = std::sync::Arc::new(job);
    alloc
}

/// `alloc` of a job of `job_type` whose group's restart policy allows no restart.
fn no_restarts(mut alloc: Allocation, job_type: &str) -> Allocation {
    let mut job = (*alloc.job).clone();
    job.job_type = job_type.into();
    job.task_groups[0].restart_policy = Some(RestartPolicy {
        attempts: Some(0),
        ..RestartPolicy::default()
    });
    alloc.job = std::sync::Arc::new(job);
    alloc
}

/// Runs the runner's ready steps and delivers the exit of every task it signals, until
/// nothing is ready.
fn run_out(runner: &mut AllocRunner, out: &mut Vec<Command>) {
    loop {
        if let Some(step) = runner.ready_steps().first().copied() {
            assert!(runner.step(step, 0, out), "{step:?} is ready but refused");
            continue;
        }
        let signalled = runner
            .tasks
            .iter()
            .position(|t| t.phase == TaskPhase::Signalled);
        let poststop = runner
            .tasks
            .iter()
            .position(|t| t.role == TaskRole::Poststop && t.phase == TaskPhase::Running);
        match signalled.or(poststop) {
            Some(ix) => {
                runner.task_exited(ix, EXIT, 0, out);
            }
            None => return,
        }
    }
}

/// Nomad's other kill triggers, once the restart policy leaves a task dead: the leader's
/// death, a failed task, the last main task's end each stop the allocation through the
/// stop path; a batch task's clean end does not (it is not restarted either).
#[test]
fn a_task_ending_on_its_own_stops_the_rest_as_nomad_does() {
    let failed = ExitResult {
        exit_code: 2,
        signal: None,
        failure: None,
    };
    let cases = [
        (
            0,
            EXIT,
            Some(event_types::LEADER_TASK_DEAD),
            ClientStatus::Complete,
        ),
        (
            1,
            failed,
            Some(event_types::SIBLING_TASK_FAILED),
            ClientStatus::Failed,
        ),
        (2, EXIT, None, ClientStatus::Running),
    ];
    for (ix, exit, event, status) in cases {
        let mut out = Vec::new();
        let alloc = no_restarts(four_roles(), "batch");
        let mut runner = AllocRunner::new(alloc, 30_000_000_000, 0, &mut out);
        assert!(runner.task_exited(ix, exit, 0, &mut out));
        assert!(runner.step(RunnerStep::RestartDecision(ix), 0, &mut out));
        let last = |runner: &AllocRunner, task: usize| {
            runner.tasks[task]
                .state
                .events
                .last()
                .unwrap()
                .event_type
                .clone()
        };
        match event {
            Some(event) => {
                assert_eq!(runner.phase, RunnerPhase::PreKill, "task {ix}");
                let live = (0..3).find(|&t| t != ix).unwrap();
                assert_eq!(last(&runner, live), event);
            }
            None => assert_eq!(runner.phase, RunnerPhase::Running, "task {ix}"),
        }
        run_out(&mut runner, &mut out);
        assert_eq!(runner.alloc.client_status, status, "task {ix}");
        if status != ClientStatus::Running {
            assert_eq!(runner.phase, RunnerPhase::Terminal);
            assert_eq!(runner.tasks[3].phase, TaskPhase::Dead, "poststop ran");
            assert!(out
                .iter()
                .any(|c| matches!(c, Command::DeregisterServices { task: None, .. })));
        }
    }
    // Both main tasks end cleanly, the sidecar is left: "Main Tasks Dead".
    let mut out = Vec::new();
    let alloc = no_restarts(four_roles(), "batch");
    let mut runner = AllocRunner::new(alloc, 30_000_000_000, 0, &mut out);
    runner.tasks[0].role = TaskRole::Main;
    assert!(runner.task_exited(1, EXIT, 0, &mut out));
    assert!(runner.step(RunnerStep::RestartDecision(1), 0, &mut out));
    assert_eq!(runner.phase, RunnerPhase::Running);
    assert!(runner.task_exited(0, EXIT, 0, &mut out));
    assert!(runner.step(RunnerStep::RestartDecision(0), 0, &mut out));
    assert_eq!(runner.phase, RunnerPhase::PreKill);
    assert_eq!(
        runner.tasks[2].state.events.last().unwrap().event_type,
        event_types::MAIN_TASKS_DEAD
    );
    run_out(&mut runner, &mut out);
    assert_eq!(runner.alloc.client_status, ClientStatus::Complete);
}

/// The last live task ending on its own leaves nothing to kill: no pre-kill hooks and no
/// group delay (30 s here), the poststop task runs and the runner ends at once.
#[test]
fn the_last_task_ending_on_its_own_waits_no_group_delay() {
    let mut out = Vec::new();
    let mut alloc = alloc(false, false, 30, 0);
    let mut job = (*alloc.job).clone();
    job.task_groups[0].tasks.push(crate::spec::Task {
        name: "flush".into(),
        driver: "mock_driver".into(),
        lifecycle: Some(crate::spec::Lifecycle {
            hook: "poststop".into(),
            sidecar: false,
        }),
        ..crate::spec::Task::default()
    });
    alloc.job = std::sync::Arc::new(job);
    let alloc = no_restarts(alloc, "service");
    let mut runner = AllocRunner::new(alloc, 30_000_000_000, 0, &mut out);
    assert!(runner.task_exited(0, EXIT, 0, &mut out));
    assert!(runner.step(RunnerStep::RestartDecision(0), 0, &mut out));
    assert_eq!(runner.phase, RunnerPhase::Killing);
    assert_eq!(runner.ready_steps(), [RunnerStep::PoststopStart(1)]);
    out.clear();
    run_out(&mut runner, &mut out);
    assert_eq!(runner.phase, RunnerPhase::Terminal);
    assert_eq!(runner.group_delay, DelayOutcome::None, "no group delay");
    assert!(!out.iter().any(|c| matches!(c, Command::StartTimer { .. })));
    assert!(
        out.iter()
            .any(|c| matches!(c, Command::DeregisterServices { task: None, .. })),
        "the postrun hook deregisters the group services"
    );
    assert_eq!(
        runner.alloc.client_status,
        ClientStatus::Failed,
        "attempts used up"
    );
}

/// A task SIGKILLed before a restart, whose exit the driver has not reported yet, gets
/// no new kill-timeout timer: it fired already.
#[test]
fn restore_rearms_no_kill_timeout_after_sigkill() {
    let mut out = Vec::new();
    let mut runner = AllocRunner::new(alloc(false, false, 0, 0), 30_000_000_000, 0, &mut out);
    runner.update(alloc(true, false, 0, 0), 0, &mut out);
    assert!(runner.step(RunnerStep::GroupPreKill, 0, &mut out));
    assert!(runner.step(RunnerStep::TaskPreKill(0), 0, &mut out));
    assert!(runner.timer_fired(Timer::KillTimeout(0), 0, &mut out));
    assert!(runner.tasks[0].sigkilled && runner.tasks[0].phase == TaskPhase::Signalled);
    let mut commands = Vec::new();
    let restored = AllocRunner::restore(runner, 0, &mut commands);
    assert!(
        !commands
            .iter()
            .any(|c| matches!(c, Command::StartTimer { .. })),
        "{commands:?}"
    );
    assert_eq!(restored.tasks[0].phase, TaskPhase::Signalled);
}

/// A runner stored mid-wait gets its timers back on restore: the task's shutdown delay (its
/// full length: the deadline is the host's to keep) and a restart delay.
#[test]
fn restore_rearms_a_task_delay_and_a_restart_delay() {
    let mut out = Vec::new();
    let mut delaying = AllocRunner::new(alloc(false, false, 0, 5), 30_000_000_000, 0, &mut out);
    delaying.update(alloc(true, false, 0, 5), 0, &mut out);
    assert!(delaying.step(RunnerStep::GroupPreKill, 0, &mut out));
    assert!(delaying.step(RunnerStep::TaskPreKill(0), 0, &mut out));
    assert_eq!(delaying.tasks[0].phase, TaskPhase::Delaying);
    let mut commands = Vec::new();
    AllocRunner::restore(delaying, 0, &mut commands);
    assert_eq!(
        commands,
        [Command::StartTimer {
            timer: Timer::TaskDelay(0),
            after_ns: 5_000_000_000,
        }]
    );

    let mut restarting = AllocRunner::new(alloc(false, false, 0, 0), 30_000_000_000, 0, &mut out);
    assert!(restarting.task_exited(0, crash(), 0, &mut out));
    assert!(restarting.step(RunnerStep::RestartDecision(0), 0, &mut out));
    assert_eq!(restarting.tasks[0].phase, TaskPhase::Restarting);
    let delay = restarting.tasks[0].restart_delay_ns;
    assert!(delay > 0, "the default policy waits before a restart");
    let mut commands = Vec::new();
    AllocRunner::restore(restarting, 0, &mut commands);
    assert_eq!(
        commands,
        [Command::StartTimer {
            timer: Timer::RestartDelay(0),
            after_ns: delay,
        }]
    );
}

/// The flag is applied once: a second flagged update, or one reaching a runner that has
/// ended, sends nothing (no second report, no event).
#[test]
fn a_flag_pulled_again_or_late_changes_nothing() {
    let mut out = Vec::new();
    let mut runner = waiting_out_the_group_delay();
    runner.update(alloc(true, true, 30, 0), 0, &mut out);
    assert_eq!(runner.group_delay, DelayOutcome::CutShort);
    let events = runner.alloc.task_states.clone();
    out.clear();
    runner.update(alloc(true, true, 30, 0), 0, &mut out);
    assert_eq!(out, [], "the second flagged update");
    assert_eq!(runner.alloc.task_states, events);

    let mut ended = AllocRunner::new(alloc(false, false, 0, 0), 30_000_000_000, 0, &mut out);
    ended.update(alloc(true, false, 0, 0), 0, &mut out);
    run_out(&mut ended, &mut out);
    assert_eq!(ended.phase, RunnerPhase::Terminal);
    out.clear();
    ended.update(alloc(true, true, 0, 0), 0, &mut out);
    assert_eq!(out, [], "a flag reaching an ended runner");
    assert!(!ended.cancelled);
}

/// A restart-delay timer that fires for a task that is not waiting one (a stale timer the
/// shell did not cancel in time) is refused and runs nothing.
#[test]
fn a_stale_restart_timer_runs_nothing() {
    let mut out = Vec::new();
    let mut runner = AllocRunner::new(alloc(false, false, 0, 0), 30_000_000_000, 0, &mut out);
    assert_eq!(runner.tasks[0].phase, TaskPhase::Running);
    out.clear();
    assert!(!runner.timer_fired(Timer::RestartDelay(0), 0, &mut out));
    assert_eq!(out, []);
    assert_eq!(runner.tasks[0].phase, TaskPhase::Running);
}

/// An exit reported for a task with no process — not started, dead, or waiting out its
/// restart delay — is refused and changes nothing.
#[test]
fn an_exit_of_a_task_without_a_process_is_refused() {
    let mut out = Vec::new();
    let mut runner = AllocRunner::new(four_roles(), 30_000_000_000, 0, &mut out);
    assert_eq!(
        runner.tasks[3].phase,
        TaskPhase::NotStarted,
        "the poststop task"
    );
    out.clear();
    assert!(!runner.task_exited(3, EXIT, 0, &mut out));
    assert_eq!(
        (out.len(), runner.tasks[3].phase),
        (0, TaskPhase::NotStarted)
    );

    let mut restarting = AllocRunner::new(alloc(false, false, 0, 0), 30_000_000_000, 0, &mut out);
    assert!(restarting.task_exited(0, crash(), 0, &mut out));
    assert!(restarting.step(RunnerStep::RestartDecision(0), 0, &mut out));
    assert_eq!(restarting.tasks[0].phase, TaskPhase::Restarting);
    let events = restarting.tasks[0].state.events.len();
    out.clear();
    assert!(!restarting.task_exited(0, crash(), 0, &mut out));
    assert_eq!(out, []);
    assert_eq!(restarting.tasks[0].phase, TaskPhase::Restarting);
    assert_eq!(restarting.tasks[0].state.events.len(), events);

    let mut dead = AllocRunner::new(alloc(false, false, 0, 0), 30_000_000_000, 0, &mut out);
    dead.update(alloc(true, false, 0, 0), 0, &mut out);
    run_out(&mut dead, &mut out);
    assert_eq!(dead.tasks[0].phase, TaskPhase::Dead);
    out.clear();
    assert!(!dead.task_exited(0, EXIT, 0, &mut out));
    assert_eq!(out, []);
}

/// A poststop task's end is not a task ending on its own: no restart decision waits for
/// it, and with it the runner ends at once.
#[test]
fn a_poststop_task_that_ends_ends_the_runner() {
    let mut out = Vec::new();
    let mut runner = AllocRunner::new(four_roles(), 30_000_000_000, 0, &mut out);
    runner.update(
        {
            let mut stop = four_roles();
            stop.desired_status = DesiredStatus::Stop;
            stop
        },
        0,
        &mut out,
    );
    loop {
        if let Some(step) = runner.ready_steps().first().copied() {
            assert!(
                runner.step(step, 0, &mut out),
                "{step:?} is ready but refused"
            );
            continue;
        }
        match (0..3).find(|&t| runner.tasks[t].phase == TaskPhase::Signalled) {
            Some(ix) => assert!(runner.task_exited(ix, EXIT, 0, &mut out)),
            None => break,
        }
    }
    assert_eq!(
        runner.tasks[3].phase,
        TaskPhase::Running,
        "the poststop task runs"
    );
    assert!(runner.task_exited(3, EXIT, 0, &mut out));
    assert_eq!(runner.ready_steps(), []);
    assert_eq!(runner.tasks[3].phase, TaskPhase::Dead);
    assert_eq!(runner.phase, RunnerPhase::Terminal);
}

// invariant: stop_completes
/// A stop that comes while an operator's restart is killing the task: the kill's end does
/// not run the task again.
#[test]
fn a_restart_overtaken_by_a_stop_does_not_run_the_task_again() {
    let mut out = Vec::new();
    let mut runner = AllocRunner::new(alloc(false, false, 0, 0), 30_000_000_000, 0, &mut out);
    assert_eq!(runner.restart(None, false, 0, &mut out), Ok(vec![0]));
    assert_eq!(runner.tasks[0].phase, TaskPhase::Signalled);
    runner.update(alloc(true, false, 0, 0), 0, &mut out);
    assert_ne!(runner.phase, RunnerPhase::Running);
    out.clear();
    assert!(runner.task_exited(0, EXIT, 0, &mut out));
    assert!(
        !out.iter().any(|c| matches!(c, Command::StartTask { .. })),
        "{out:?}"
    );
    run_out(&mut runner, &mut out);
    assert_eq!(runner.tasks[0].phase, TaskPhase::Dead);
    assert_eq!(runner.phase, RunnerPhase::Terminal);
}

/// Each kill of a task, a restart's or a stop's, has the next number, from 1 (a supervisor
/// refuses a request it has carried out by its number). A new task's `StartedAt` is its
/// `Started` event's time; `LastRestart` is the last `Restarting` event's, 0 until there is
/// one.
#[test]
fn kills_are_numbered_and_the_task_state_keeps_its_times() {
    let mut out = Vec::new();
    let mut runner = AllocRunner::new(alloc(false, false, 0, 0), 30_000_000_000, 7, &mut out);
    let started = |runner: &AllocRunner| {
        let events = &runner.tasks[0].state.events;
        events
            .iter()
            .find(|e| e.event_type == event_types::STARTED)
            .unwrap()
            .time
    };
    assert_eq!(runner.tasks[0].state.started_at, started(&runner));
    assert!(runner.tasks[0].state.started_at >= 7);
    assert_eq!(runner.tasks[0].state.last_restart, 0);
    let kills = |out: &[Command]| {
        out.iter()
            .filter_map(|c| match c {
                Command::Signal { kill, .. } => Some(*kill),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    for n in 1..=2 {
        out.clear();
        assert_eq!(runner.restart(None, false, 10, &mut out), Ok(vec![0]));
        assert_eq!(kills(&out), [n], "kill {n}");
        assert!(runner.task_exited(0, EXIT, 10, &mut out));
        assert_eq!(runner.tasks[0].phase, TaskPhase::Running);
    }
    assert!(runner.task_exited(0, crash(), 20, &mut out));
    assert!(runner.step(RunnerStep::RestartDecision(0), 20, &mut out));
    let restarting = runner.tasks[0]
        .state
        .events
        .iter()
        .rfind(|e| e.event_type == event_types::RESTARTING)
        .unwrap()
        .time;
    assert_eq!(runner.tasks[0].state.last_restart, restarting);
    // The stop's kill, after two restarts' (the restart delay run out first).
    assert!(runner.timer_fired(Timer::RestartDelay(0), 30, &mut out));
    out.clear();
    runner.update(alloc(true, false, 0, 0), 30, &mut out);
    run_out(&mut runner, &mut out);
    assert_eq!(kills(&out), [3], "the stop's kill");
}
