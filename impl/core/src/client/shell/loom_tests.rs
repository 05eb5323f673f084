//! loom: every interleaving of the shell's threads around one runner, at the preemption
//! bound `LOOM_MAX_PREEMPTIONS` (3 in CI). Run with
//! `LOOM_MAX_PREEMPTIONS=3 cargo test -p quiesce-core --release --features loom loom`.
//!
//! As in the daemon, the runner has no thread of its own: the threads that deliver events
//! (updates, timers, exits) take the kill path's steps. The main thread ends each test with
//! `run`, which waits for the runner's end: if an interleaving left a step untaken with no
//! event to come, the wait never ends and loom reports the deadlock.
//!
//! Every test checks, on every interleaving: the pre-kill hooks (group and task service
//! deregistration) ran exactly once, before the only kill signal; every critical section
//! was settled (`Host::settled`) before the next event was applied, the last one too; a
//! delay was skipped or cut short only when a flagged update arrived; the runner became
//! terminal exactly once (one postrun deregistration); and, by finishing, that no thread
//! was left waiting (loom reports a deadlock or a lost wake-up as a failure).

use super::*;
use crate::client::test_support::{alloc, Recorder};
use crate::client::{DelayOutcome, TaskPhase};
use crate::sync::thread;

const EXIT: ExitResult = ExitResult {
    exit_code: 0,
    signal: None,
    failure: None,
};

/// `loom::model`, reporting how many interleavings it explored and how long that took
/// (shown with `--nocapture`). The counter is a std atomic: bookkeeping outside the model.
fn model(name: &str, body: impl Fn() + Sync + Send + 'static) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let iterations = std::sync::Arc::new(AtomicUsize::new(0));
    let counter = std::sync::Arc::clone(&iterations);
    let started = std::time::Instant::now();
    loom::model(move || {
        counter.fetch_add(1, Ordering::Relaxed);
        body();
    });
    eprintln!(
        "{name}: {} iterations in {:.2} s",
        iterations.load(Ordering::Relaxed),
        started.elapsed().as_secs_f64()
    );
}

/// A shell around a running runner that has pulled `(stop, flag)`.
fn shell(stop: bool, flag: bool, group_delay_s: i64, task_delay_s: i64) -> RunnerShell<Recorder> {
    let mut initial = Vec::new();
    let runner = AllocRunner::new(
        alloc(false, false, group_delay_s, task_delay_s),
        30_000_000_000,
        0,
        &mut initial,
    );
    let shell = RunnerShell::new(runner, Recorder::default(), initial);
    if stop || flag {
        shell.update(alloc(stop, flag, group_delay_s, task_delay_s));
    }
    shell
}

fn is_group_deregistration(command: &Command) -> bool {
    matches!(command, Command::DeregisterServices { task: None, .. })
}

fn is_task_deregistration(command: &Command) -> bool {
    matches!(command, Command::DeregisterServices { task: Some(0), .. })
}

fn is_signal(command: &Command) -> bool {
    matches!(command, Command::Signal { .. })
}

/// The checks every interleaving must pass once the runner has ended.
fn assert_stopped_cleanly(shell: &RunnerShell<Recorder>, flagged: bool) {
    shell.inspect(|runner, host| {
        assert_eq!(runner.phase, RunnerPhase::Terminal);
        assert_eq!(host.unsettled, 0, "the last critical section was settled");
        // Terminal exactly once: the pre-kill deregistration and one postrun.
        assert_eq!(
            host.count(is_group_deregistration),
            2,
            "{:?}",
            host.commands
        );
        let first_signal = host.first(is_signal);
        if let Some(signal) = first_signal {
            assert_eq!(host.count(is_signal), 1, "one kill signal");
            assert!(
                host.first(is_group_deregistration).unwrap() < signal,
                "group hooks first"
            );
            assert!(
                host.first(is_task_deregistration).unwrap() < signal,
                "task hooks first"
            );
        }
        assert!(runner.group_pre_kill_done && runner.tasks[0].pre_kill_done);
        let delays = [runner.group_delay, runner.tasks[0].delay];
        let shortened = delays
            .iter()
            .any(|d| matches!(d, DelayOutcome::Skipped | DelayOutcome::CutShort));
        assert!(
            flagged || !shortened,
            "a delay shortened without the flag: {delays:?}"
        );
        let terminated = runner.tasks[0]
            .state
            .events
            .iter()
            .filter(|e| e.event_type == "Terminated")
            .count();
        assert_eq!(terminated, 1);
    });
}

/// Runs `body` on a new loom thread with its own handle to the shell.
fn on<T: Send + 'static>(
    shell: &RunnerShell<Recorder>,
    body: impl FnOnce(RunnerShell<Recorder>) -> T + Send + 'static,
) -> thread::JoinHandle<T> {
    let shell = shell.clone();
    thread::spawn(move || body(shell))
}

/// The driver's waiter: delivers the task's exit once it is signalled.
fn exit_when_signalled(shell: &RunnerShell<Recorder>) {
    if shell.wait_until(|runner| runner.tasks[0].signalled) {
        shell.task_exited(0, EXIT);
    }
}

/// Waits until the runner has left `Running` and its pre-kill hooks (a stop was applied).
fn stopping(runner: &AllocRunner) -> bool {
    !matches!(runner.phase, RunnerPhase::Running | RunnerPhase::PreKill)
}

// invariant: flag_is_honoured
/// A flagged update races an unflagged stop and its group delay: it may arrive before the
/// wait (skipped), during it (cut short), or after the timer fired (waited in full).
#[test]
fn loom_flag_update_vs_group_delay_wait() {
    model("loom_flag_update_vs_group_delay_wait", || {
        let shell = shell(false, false, 30, 0);
        let stopper = on(&shell, move |shell| shell.update(alloc(true, false, 30, 0)));
        let updater = on(&shell, move |shell| shell.update(alloc(true, true, 30, 0)));
        let timer_and_driver = on(&shell, move |shell| {
            shell.wait_until(stopping);
            shell.fire(Timer::GroupDelay);
            exit_when_signalled(&shell);
        });
        stopper.join().unwrap();
        updater.join().unwrap();
        timer_and_driver.join().unwrap();
        assert_eq!(shell.run(), RunEnd::Terminal);
        assert_stopped_cleanly(&shell, true);
        shell.inspect(|runner, _| {
            assert!(matches!(
                runner.group_delay,
                DelayOutcome::Skipped | DelayOutcome::CutShort | DelayOutcome::Elapsed
            ));
        });
    });
}

/// A flagged update races an unflagged stop and the moment its task delay wait begins:
/// skipped if it comes first, cut short if it comes during the wait, or the timer wins.
#[test]
fn loom_flag_update_vs_task_delay_beginning() {
    model("loom_flag_update_vs_task_delay_beginning", || {
        let shell = shell(false, false, 0, 20);
        let stopper = on(&shell, move |shell| shell.update(alloc(true, false, 0, 20)));
        let updater = on(&shell, move |shell| shell.update(alloc(true, true, 0, 20)));
        let timer_and_driver = on(&shell, move |shell| {
            shell.wait_until(|r| r.tasks[0].phase == TaskPhase::Delaying || r.tasks[0].signalled);
            shell.fire(Timer::TaskDelay(0));
            exit_when_signalled(&shell);
        });
        stopper.join().unwrap();
        updater.join().unwrap();
        timer_and_driver.join().unwrap();
        assert_eq!(shell.run(), RunEnd::Terminal);
        assert_stopped_cleanly(&shell, true);
        shell.inspect(|runner, host| {
            let started = host.count(|c| {
                matches!(
                    c,
                    Command::StartTimer {
                        timer: Timer::TaskDelay(0),
                        ..
                    }
                )
            });
            let cancelled = host.count(|c| {
                matches!(
                    c,
                    Command::CancelTimer {
                        timer: Timer::TaskDelay(0)
                    }
                )
            });
            match runner.tasks[0].delay {
                DelayOutcome::Skipped => assert_eq!((started, cancelled), (0, 0)),
                DelayOutcome::CutShort => assert_eq!((started, cancelled), (1, 1)),
                DelayOutcome::Elapsed => assert_eq!((started, cancelled), (1, 0)),
                other => panic!("unexpected delay outcome {other:?}"),
            }
        });
    });
}

/// The task exits on its own while its delay runs, racing the stop that starts the delay
/// and the delay timer: either it exits during the delay (no signal at all) or after the
/// signal.
#[test]
fn loom_task_exits_on_its_own_during_the_delay() {
    model("loom_task_exits_on_its_own_during_the_delay", || {
        let shell = shell(false, false, 0, 20);
        let stopper = on(&shell, move |shell| shell.update(alloc(true, false, 0, 20)));
        let timer = on(&shell, move |shell| {
            // Fires the delay once it is waited; stale (refused) if the task exited first.
            if shell.wait_until(|r| r.tasks[0].phase != TaskPhase::Running) {
                shell.fire(Timer::TaskDelay(0));
            }
        });
        let process = on(&shell, move |shell| {
            if shell.wait_until(|r| {
                matches!(r.tasks[0].phase, TaskPhase::Delaying | TaskPhase::Signalled)
            }) {
                assert!(shell.task_exited(0, EXIT));
            }
        });
        stopper.join().unwrap();
        timer.join().unwrap();
        process.join().unwrap();
        assert_eq!(shell.run(), RunEnd::Terminal);
        assert_stopped_cleanly(&shell, false);
        shell.inspect(|runner, host| match runner.tasks[0].delay {
            DelayOutcome::ExitedDuring => assert_eq!(host.count(is_signal), 0),
            DelayOutcome::Elapsed => assert_eq!(host.count(is_signal), 1),
            other => panic!("unexpected delay outcome {other:?}"),
        });
    });
}

/// Two kills at once: a flagged job stop and an unflagged alloc stop arrive from two
/// threads in either order; the hooks still run once and the flag still wins.
#[test]
fn loom_two_kills_at_once() {
    model("loom_two_kills_at_once", || {
        let shell = shell(false, false, 30, 0);
        let job_stop = on(&shell, move |shell| shell.update(alloc(true, true, 30, 0)));
        let alloc_stop = on(&shell, move |shell| shell.update(alloc(true, false, 30, 0)));
        let driver = on(&shell, move |shell| exit_when_signalled(&shell));
        assert_eq!(shell.run(), RunEnd::Terminal);
        job_stop.join().unwrap();
        alloc_stop.join().unwrap();
        driver.join().unwrap();
        assert_stopped_cleanly(&shell, true);
        shell.inspect(|runner, _| assert!(runner.cancelled, "the flag is sticky on the client"));
    });
}

/// A stop that reaches the client with the allocation's first pull: nothing starts, nothing
/// is signalled, and events racing it change nothing.
#[test]
fn loom_kill_before_the_task_has_started() {
    model("loom_kill_before_the_task_has_started", || {
        let mut initial = Vec::new();
        let runner = AllocRunner::new(alloc(true, true, 30, 20), 30_000_000_000, 0, &mut initial);
        let shell = RunnerShell::new(runner, Recorder::default(), initial);
        let late = on(&shell, move |shell| {
            assert!(!shell.fire(Timer::GroupDelay));
            assert!(!shell.task_exited(0, EXIT));
        });
        assert_eq!(shell.run(), RunEnd::Terminal);
        late.join().unwrap();
        shell.inspect(|runner, host| {
            assert_eq!(runner.tasks[0].phase, TaskPhase::NotStarted);
            assert_eq!(
                host.count(|c| matches!(c, Command::StartTask { .. } | Command::Signal { .. })),
                0
            );
        });
    });
}

/// A client restart (shutdown, then restore) races a flagged stop's kill path: a thread
/// waiting for the old runner's end sees `Closed` or `Terminal`, never both, and the
/// restored runner finishes the stop with the flag its stored allocation carries (the
/// stored copy has it once the stop was applied; a stop applied after the shutdown is
/// refused, and the restored runner is then still running).
#[test]
fn loom_shutdown_and_restore_vs_kill() {
    model("loom_shutdown_and_restore_vs_kill", || {
        let old = shell(false, false, 30, 0);
        let stopper = on(&old, move |old| old.update(alloc(true, true, 30, 0)));
        let killer = on(&old, move |old| old.run());
        let driver = on(&old, move |old| {
            if old.wait_until(|r| r.tasks[0].signalled) {
                old.task_exited(0, EXIT);
            }
        });
        let stored = old.shutdown();
        let finished_before_shutdown = stored.phase == RunnerPhase::Terminal;
        let end = killer.join().unwrap();
        let stop_applied = stopper.join().unwrap();
        driver.join().unwrap();
        let mut commands = Vec::new();
        let restored = AllocRunner::restore(stored, 0, &mut commands);
        let new = RunnerShell::new(restored, Recorder::default(), commands);
        if !stop_applied {
            // Refused by the closed shell: the stop reaches the restored runner instead.
            new.update(alloc(true, true, 30, 0));
        }
        let finisher = on(&new, move |new| exit_when_signalled(&new));
        assert_eq!(new.run(), RunEnd::Terminal);
        finisher.join().unwrap();
        assert_eq!(end == RunEnd::Terminal, finished_before_shutdown);
        new.inspect(|runner, host| {
            assert_eq!(runner.phase, RunnerPhase::Terminal);
            // Unless the stop had already finished, the restored runner applied the flag.
            assert!(
                runner.cancelled || finished_before_shutdown,
                "restored with the flag applied"
            );
            assert!(
                host.count(|c| matches!(
                    c,
                    Command::StartTimer {
                        timer: Timer::GroupDelay,
                        ..
                    }
                )) == 0
            );
        });
    });
}

/// loom's teeth: a wait that checks the cancellation and then waits without holding the
/// lock across both loses the wake-up when the cancellation lands in between; loom finds
/// that interleaving and reports the deadlock. (The shell holds its lock across check and
/// wait, in `run` and `wait_until`, which the tests above show.) loom aborts the process
/// when it reports a deadlock while threads unwind, so the racy model runs in a child
/// process: this test runs itself again with `QUIESCE_LOOM_RACY` set and expects the child
/// to fail with loom's deadlock report.
#[test]
fn loom_rejects_check_then_wait_without_the_lock() {
    const RACY: &str = "QUIESCE_LOOM_RACY";
    if std::env::var_os(RACY).is_some() {
        racy_check_then_wait();
        return;
    }
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "--nocapture",
            "client::shell::loom_tests::loom_rejects_check_then_wait_without_the_lock",
        ])
        .env(RACY, "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "loom accepted the racy wait");
    assert!(stderr.contains("deadlock"), "{stderr}");
}

fn racy_check_then_wait() {
    loom::model(|| {
        let gate = Arc::new((Mutex::new(false), Condvar::new()));
        let canceller = {
            let gate = Arc::clone(&gate);
            thread::spawn(move || {
                *gate.0.lock().unwrap() = true;
                gate.1.notify_all();
            })
        };
        let cancelled = *gate.0.lock().unwrap();
        if !cancelled {
            // The lock was released after the check: the notification may already be gone.
            let guard = gate.0.lock().unwrap();
            drop(gate.1.wait(guard).unwrap());
        }
        canceller.join().unwrap();
    });
}

/// The daemon's client workers: two pulls of one allocation race each other and the task's
/// exit, each reading the server's record under the runner's lock (`RunnerShell::pull`).
/// The newer copy (the flag) is applied exactly once, whoever reads it, and the group delay
/// is never waited in full.
#[test]
fn loom_two_pulls_race_for_one_update() {
    model("loom_two_pulls_race_for_one_update", || {
        let shell = shell(true, false, 30, 0);
        let mut flagged = alloc(true, true, 30, 0);
        flagged.alloc_modify_index = shell.inspect(|r, _| r.alloc.alloc_modify_index) + 1;
        let record = Arc::new(Mutex::new(flagged));
        let pull = |shell: RunnerShell<Recorder>, record: Arc<Mutex<Allocation>>| {
            shell.pull(|runner, _| {
                let record = record.lock().unwrap();
                (record.alloc_modify_index > runner.alloc.alloc_modify_index)
                    .then(|| record.clone())
            })
        };
        let first = {
            let record = Arc::clone(&record);
            on(&shell, move |shell| pull(shell, record))
        };
        let second = {
            let record = Arc::clone(&record);
            on(&shell, move |shell| pull(shell, record))
        };
        exit_when_signalled(&shell);
        let applied = [first.join().unwrap(), second.join().unwrap()];
        assert_eq!(shell.run(), RunEnd::Terminal);
        assert_eq!(applied.iter().filter(|&&a| a).count(), 1, "{applied:?}");
        assert_stopped_cleanly(&shell, true);
        shell.inspect(|runner, _| {
            assert!(runner
                .alloc
                .desired_transition
                .should_ignore_shutdown_delay());
            assert!(matches!(
                runner.group_delay,
                DelayOutcome::Skipped | DelayOutcome::CutShort
            ));
        });
    });
}
