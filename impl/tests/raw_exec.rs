//! The raw_exec driver on real processes, through the `quiesce` binary as the supervisor:
//! start, signal, exit status, reattach from a "restarted daemon", a task that cannot start.

use quiesce::client::raw_exec::{self, Launch, Reattach};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn supervisor() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_quiesce"))
}

fn task_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("quiesce-raw-exec-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn shell(dir: &Path, script: &str) -> Launch {
    Launch {
        dir: dir.to_path_buf(),
        command: "/bin/sh".into(),
        args: vec!["-c".into(), script.into()],
        env: vec![("GREETING".into(), "hello".into())],
    }
}

/// Waits until the task has written `line` to its stdout log.
fn wait_for_output(dir: &Path, line: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let log = dir.join(raw_exec::STDOUT_FILE);
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains(line)
    {
        assert!(Instant::now() < deadline, "the task never wrote {line:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_task_runs_gets_its_signal_and_reports_its_exit_code() {
    let dir = task_dir("signal");
    let launch = shell(
        &dir,
        "trap 'echo got INT; exit 3' INT; echo $GREETING; while :; do sleep 0.05; done",
    );
    let attached = raw_exec::launch(supervisor(), &["supervise"], &launch)
        .unwrap()
        .expect("the task starts");
    wait_for_output(&dir, "hello");
    attached.signaller().unwrap().signal(libc::SIGINT).unwrap();
    let (record, reaper) = attached.wait();
    reaper.reap();
    assert_eq!(
        (record.exit_code, record.signal, record.error),
        (3, None, None)
    );
    wait_for_output(&dir, "got INT");
}

#[test]
fn a_task_killed_by_a_signal_reports_128_plus_the_signal() {
    let dir = task_dir("sigkill");
    let launch = shell(
        &dir,
        "trap '' INT; echo ready; while :; do sleep 0.05; done",
    );
    let attached = raw_exec::launch(supervisor(), &["supervise"], &launch)
        .unwrap()
        .expect("the task starts");
    wait_for_output(&dir, "ready");
    let signaller = attached.signaller().unwrap();
    signaller.signal(libc::SIGINT).unwrap();
    signaller.signal(libc::SIGKILL).unwrap();
    let (record, reaper) = attached.wait();
    reaper.reap();
    assert_eq!((record.exit_code, record.signal), (137, Some(9)));
    // The supervisor has gone: asking again is not an error.
    signaller.signal(libc::SIGKILL).unwrap();
}

#[test]
fn a_restarted_daemon_reattaches_and_still_gets_the_exit_code() {
    let dir = task_dir("reattach");
    let launch = shell(
        &dir,
        "trap 'exit 7' TERM; echo up; while :; do sleep 0.05; done",
    );
    let first = raw_exec::launch(supervisor(), &["supervise"], &launch)
        .unwrap()
        .expect("the task starts");
    wait_for_output(&dir, "up");
    let pid = first.pid;
    // The daemon "dies": its connection goes, the supervisor and the task stay.
    drop(first);
    let Reattach::Running(again) = raw_exec::reattach(&dir).unwrap() else {
        panic!("the supervisor should still be running");
    };
    assert_eq!(again.pid, pid, "the same task, not a new one");
    again.signaller().unwrap().signal(libc::SIGTERM).unwrap();
    assert_eq!(again.wait().0.exit_code, 7);
    // A later reattach still finds the exit status: on disk once the supervisor has gone,
    // or in its `exit` line while it is going.
    match raw_exec::reattach(&dir).unwrap() {
        Reattach::Exited(record) => assert_eq!(record.exit_code, 7),
        Reattach::Running(late) => assert_eq!(late.wait().0.exit_code, 7),
        Reattach::Lost => panic!("the exit status was lost"),
    }
}

#[test]
fn a_task_that_cannot_start_says_why() {
    let dir = task_dir("missing");
    let launch = Launch {
        dir: dir.clone(),
        command: "/no/such/program".into(),
        args: Vec::new(),
        env: Vec::new(),
    };
    let record = raw_exec::launch(supervisor(), &["supervise"], &launch)
        .unwrap()
        .expect_err("the task cannot start");
    assert_eq!(record.exit_code, 127);
    assert!(
        record
            .error
            .as_deref()
            .unwrap_or("")
            .contains("/no/such/program"),
        "{record:?}"
    );
    // Nothing is left to reattach to, and the exit status says what happened.
    assert!(matches!(
        raw_exec::reattach(&dir).unwrap(),
        Reattach::Exited(_)
    ));
}

#[test]
fn a_directory_never_launched_is_lost_not_running() {
    let dir = task_dir("never");
    std::fs::create_dir_all(&dir).unwrap();
    assert!(matches!(raw_exec::reattach(&dir).unwrap(), Reattach::Lost));
}
