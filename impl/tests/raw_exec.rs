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

/// Whether `pid` is a child of this process that has exited and not been reaped.
fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            stat.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(false)
}

/// Many tasks, one watcher thread: each exit is reported once with its own status (tasks
/// killed by their signal, one that exits with a code, one whose supervisor is killed and
/// so says nothing), and every supervisor this process started is reaped, none left a
/// zombie.
#[test]
fn one_watcher_reports_every_exit_once_and_reaps_the_supervisors() {
    let (sender, exits) = std::sync::mpsc::channel();
    let watcher = raw_exec::ExitWatcher::new().unwrap();
    watcher
        .start(move |exited| {
            for report in exited {
                sender.send(report).unwrap();
            }
        })
        .unwrap();
    let mut supervisors = Vec::new();
    let mut signallers = Vec::new();
    for (ix, script) in [
        "echo up; exec sleep 30",
        "echo up; exec sleep 30",
        "echo up; exit 7",
        "echo up; exec sleep 30",
    ]
    .into_iter()
    .enumerate()
    {
        let dir = task_dir(&format!("watched-{ix}"));
        let attached = raw_exec::launch(supervisor(), &["supervise"], &shell(&dir, script))
            .unwrap()
            .expect("the task starts");
        wait_for_output(&dir, "up");
        supervisors.push(attached.supervisor_pid().expect("started here"));
        signallers.push(attached.signaller().unwrap());
        assert!(watcher.watch(attached, ix).is_ok());
    }
    // Tasks 0 and 1 get SIGINT through their supervisors; task 2 has ended on its own
    // (perhaps before it was watched: its exit line waits on the connection); task 3's
    // supervisor is killed outright, before it can say anything.
    signallers[0].signal(libc::SIGINT).unwrap();
    signallers[1].signal(libc::SIGINT).unwrap();
    // SAFETY: kill has no memory-safety preconditions; the pid is a supervisor of ours.
    unsafe { libc::kill(supervisors[3] as i32, libc::SIGKILL) };
    let mut reported = std::collections::BTreeMap::new();
    while reported.len() < 4 {
        let (ix, record) = exits
            .recv_timeout(Duration::from_secs(20))
            .expect("every exit is reported");
        assert!(
            reported.insert(ix, record).is_none(),
            "task {ix} reported twice"
        );
    }
    assert_eq!(reported[&0].signal, Some(libc::SIGINT));
    assert_eq!(reported[&1].exit_code, 128 + libc::SIGINT);
    assert_eq!((reported[&2].exit_code, reported[&2].signal), (7, None));
    assert_eq!(reported[&3].exit_code, -1);
    assert!(reported[&3]
        .error
        .as_deref()
        .unwrap_or("")
        .contains("killed"));
    // The supervisors are reaped once their pidfds report them gone.
    let deadline = Instant::now() + Duration::from_secs(20);
    while let Some(left) = supervisors.iter().find(|&&pid| is_zombie(pid)) {
        assert!(Instant::now() < deadline, "supervisor {left} left a zombie");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        exits.recv_timeout(Duration::from_millis(200)).is_err(),
        "no second report"
    );
}
