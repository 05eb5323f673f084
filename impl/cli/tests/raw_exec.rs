//! The raw_exec driver on real processes, through the `quiesce` binary as the supervisor:
//! start, signal, exit status, reattach from a "restarted daemon", a task that cannot start.

use quiesce_agent::raw_exec::{self, Launch, Reattach};
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
        user: None,
        files: Vec::new(),
        dir: dir.to_path_buf(),
        state: None,
        cgroups: None,
        command: "/bin/sh".into(),
        args: vec!["-c".into(), script.into()],
        env: vec![("GREETING".into(), "hello".into())],
    }
}

/// `/bin/sleep 60` in `dir`, as `user` if given.
fn sleep(dir: &Path, user: Option<&str>) -> Launch {
    Launch {
        user: user.map(str::to_string),
        files: Vec::new(),
        dir: dir.to_path_buf(),
        state: None,
        cgroups: None,
        command: "/bin/sleep".into(),
        args: vec!["60".into()],
        env: Vec::new(),
    }
}

/// The pid is the supervisor's child as soon as it answers; waits until it is the sleep.
fn wait_until_sleep(pid: i32) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default() != "sleep\n" {
        assert!(Instant::now() < deadline, "the task never became sleep");
        std::thread::sleep(Duration::from_millis(5));
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
    attached
        .signaller()
        .unwrap()
        .kill_signal(1, libc::SIGINT, 0)
        .unwrap();
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
    signaller.kill_signal(1, libc::SIGINT, 0).unwrap();
    signaller.force_kill(1, libc::SIGINT, 0).unwrap();
    let (record, reaper) = attached.wait();
    assert_eq!((record.exit_code, record.signal), (137, Some(9)));
    assert_eq!(
        record
            .delivered
            .iter()
            .map(|d| (d.kill, d.signal))
            .collect::<Vec<_>>(),
        [(1, libc::SIGINT), (1, libc::SIGKILL)],
        "the supervisor records what it delivered"
    );
    // The supervisor lingers until its last connection is closed, then goes.
    let started = Instant::now();
    drop(signaller);
    reaper.reap();
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "the supervisor waited out its linger instead of leaving at the close"
    );
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
    again
        .signaller()
        .unwrap()
        .kill_signal(1, libc::SIGTERM, 0)
        .unwrap();
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
        user: None,
        files: Vec::new(),
        dir: dir.clone(),
        state: None,
        cgroups: None,
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
        .start(move |found| {
            for event in found {
                sender.send(event).unwrap();
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
    signallers[0].kill_signal(1, libc::SIGINT, 0).unwrap();
    signallers[1].kill_signal(1, libc::SIGINT, 0).unwrap();
    // SAFETY: kill has no memory-safety preconditions; the pid is a supervisor of ours.
    unsafe { libc::kill(supervisors[3] as i32, libc::SIGKILL) };
    // Each death is reported first; its supervisor sends the exit status once asked.
    let mut died = std::collections::BTreeSet::new();
    let mut reported = std::collections::BTreeMap::new();
    while reported.len() < 4 {
        match exits
            .recv_timeout(Duration::from_secs(20))
            .expect("every exit is reported")
        {
            raw_exec::Event::Died(ix) => {
                assert!(died.insert(ix), "task {ix}'s death reported twice");
                signallers[ix].send(raw_exec::Request::Report).unwrap();
            }
            raw_exec::Event::Exited(exited) => {
                let ix = exited.token;
                assert!(
                    reported.insert(ix, exited.record).is_none(),
                    "task {ix} reported twice"
                );
            }
        }
    }
    // Task 3's death may come after its exit (its supervisor's end closed the connection).
    assert!(
        [0, 1, 2].iter().all(|ix| died.contains(ix)),
        "every death was seen: {died:?}"
    );
    // Task 3's supervisor has gone: asking it again is not an error.
    signallers[3].kill_signal(2, libc::SIGINT, 0).unwrap();
    // A supervisor exits once its connections are closed (it lingers until then).
    drop(signallers);
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

/// The signal state of a process, from `/proc/PID/status`: (blocked, ignored, caught,
/// pending) as bit masks.
fn signal_state(pid: i32) -> (u64, u64, u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let mask = |field: &str| {
        let line = status
            .lines()
            .find(|l| l.starts_with(field))
            .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"));
        u64::from_str_radix(line[field.len()..].trim(), 16).unwrap()
    };
    (
        mask("SigBlk:"),
        mask("SigIgn:"),
        mask("SigCgt:"),
        mask("SigPnd:"),
    )
}

/// The thread that launches a task blocks SIGINT, SIGTERM and SIGUSR1, and the process
/// ignores SIGHUP and SIGUSR2 — as the agent's threads block SIGINT and SIGTERM for its
/// signal thread, and a daemon started in a shell's background ignores SIGINT. The task, a
/// real `/bin/sleep`, starts with nothing blocked, ignored or pending, and dies of its kill
/// signal (SIGTERM), not of SIGKILL.
#[test]
fn a_task_starts_with_no_signal_blocked_or_ignored_and_dies_of_its_kill_signal() {
    let dir = task_dir("clean");
    let launched = std::thread::spawn(move || {
        // SAFETY: sigset operations on a local set; pthread_sigmask on this thread only;
        // ignoring SIGHUP and SIGUSR2 in the test process harms no other test.
        unsafe {
            let mut set = std::mem::zeroed::<libc::sigset_t>();
            libc::sigemptyset(&mut set);
            for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGUSR1] {
                libc::sigaddset(&mut set, signal);
            }
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            libc::signal(libc::SIGHUP, libc::SIG_IGN);
            libc::signal(libc::SIGUSR2, libc::SIG_IGN);
        }
        let launch = sleep(&dir, None);
        raw_exec::launch(supervisor(), &["supervise"], &launch)
            .unwrap()
            .expect("the task starts")
    })
    .join()
    .unwrap();
    wait_until_sleep(launched.pid);
    assert_eq!(
        signal_state(launched.pid),
        (0, 0, 0, 0),
        "(blocked, ignored, caught, pending) signals of the task"
    );
    // Its own session and process group, and no controlling terminal.
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", launched.pid)).unwrap();
    let fields: Vec<i64> = stat[stat.rfind(')').unwrap() + 2..]
        .split_whitespace()
        .skip(2)
        .take(3)
        .map(|f| f.parse().unwrap())
        .collect();
    let pid = i64::from(launched.pid);
    assert_eq!(
        fields,
        [pid, pid, 0],
        "process group, session, tty of the task"
    );
    launched
        .signaller()
        .unwrap()
        .kill_signal(1, libc::SIGTERM, 0)
        .unwrap();
    let (record, reaper) = launched.wait();
    reaper.reap();
    assert_eq!(
        (record.exit_code, record.signal),
        (128 + libc::SIGTERM, Some(libc::SIGTERM))
    );
}

/// A daemon that asks twice for the same kill — as one restarted after a crash may, when it
/// lost the record of having sent the signal — gets one delivery: the second connection's
/// hello says the signal went out, and the supervisor refuses the repeat. A later kill is
/// delivered.
#[test]
fn a_kill_signal_is_delivered_once_across_daemon_restarts() {
    let dir = task_dir("once");
    let launch = shell(
        &dir,
        "trap 'echo INT' INT; trap 'exit 5' TERM; echo up; while :; do sleep 0.05; done",
    );
    let first = raw_exec::launch(supervisor(), &["supervise"], &launch)
        .unwrap()
        .expect("the task starts");
    wait_for_output(&dir, "up");
    assert!(first.delivered.is_empty());
    first
        .signaller()
        .unwrap()
        .kill_signal(1, libc::SIGINT, 0)
        .unwrap();
    wait_for_output(&dir, "INT");
    drop(first);
    let Reattach::Running(again) = raw_exec::reattach(&dir).unwrap() else {
        panic!("the supervisor should still be running");
    };
    assert_eq!(
        again
            .delivered
            .iter()
            .map(|d| (d.kill, d.signal))
            .collect::<Vec<_>>(),
        [(1, libc::SIGINT)],
        "the hello says kill 1's signal went out"
    );
    let signaller = again.signaller().unwrap();
    signaller.kill_signal(1, libc::SIGINT, 0).unwrap();
    signaller.kill_signal(2, libc::SIGTERM, 0).unwrap();
    let (record, reaper) = again.wait();
    reaper.reap();
    assert_eq!(record.exit_code, 5, "kill 2's SIGTERM ended it");
    assert_eq!(record.refused, 1, "the repeated kill 1 was refused");
    let output = std::fs::read_to_string(dir.join(raw_exec::STDOUT_FILE)).unwrap();
    assert_eq!(output.matches("INT").count(), 1, "{output}");
}

/// The `Uid`, `Gid` and `Groups` lines of a process's status.
fn credentials(pid: i32) -> (String, String, String) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|rest| rest.split_whitespace().collect::<Vec<_>>().join(" "))
            .unwrap_or_default()
    };
    (line("Uid:"), line("Gid:"), line("Groups:"))
}

#[test]
fn a_task_runs_as_its_user_with_that_users_groups() {
    let nobody = nix::unistd::User::from_name("nobody")
        .unwrap()
        .expect("a user nobody");
    let dir = task_dir("user");
    let launch = sleep(&dir, Some("nobody"));
    let launched = raw_exec::launch(supervisor(), &["supervise"], &launch).unwrap();
    if !nix::unistd::geteuid().is_root() {
        // Only root may switch users: the supervisor says so, and nothing runs as the agent.
        let record = launched.expect_err("refused");
        assert!(record.error.unwrap().contains("not permitted"));
        return;
    }
    let launched = launched.expect("the task starts");
    wait_until_sleep(launched.pid);
    let groups = nix::unistd::getgrouplist(c"nobody", nobody.gid).unwrap();
    let mut groups: Vec<String> = groups.iter().map(ToString::to_string).collect();
    groups.sort();
    groups.dedup();
    let (uid, gid) = (nobody.uid.to_string(), nobody.gid.to_string());
    assert_eq!(
        credentials(launched.pid),
        (
            [uid.as_str(); 4].join(" "),
            [gid.as_str(); 4].join(" "),
            groups.join(" ")
        ),
        "real, effective, saved and filesystem ids, and groups"
    );
    // The supervisor (still root) signals it; it dies of its kill signal.
    launched
        .signaller()
        .unwrap()
        .kill_signal(1, libc::SIGINT, 0)
        .unwrap();
    let (record, reaper) = launched.wait();
    reaper.reap();
    assert_eq!(record.signal, Some(libc::SIGINT));
}

#[test]
fn a_task_whose_user_does_not_exist_does_not_start() {
    let dir = task_dir("no-user");
    let launch = sleep(&dir, Some("quiesce-no-such-user"));
    let record = raw_exec::launch(supervisor(), &["supervise"], &launch)
        .unwrap()
        .expect_err("not started");
    assert_eq!(record.exit_code, 127);
    let error = record.error.unwrap();
    assert!(
        error.contains("no user \"quiesce-no-such-user\""),
        "{error}"
    );
}

/// A restart's run has its own supervisor state: launched while the first run's supervisor
/// may still be going and its exit record is on disk, it runs the command again (the log
/// keeps both runs' output), reports its own exit, and each run reattaches to itself.
#[test]
fn a_second_run_is_a_new_process_not_the_first_runs_record() {
    let dir = task_dir("second-run");
    // A command this short may end before its supervisor's hello is read: `launch` then
    // answers with its exit record (reaped already) instead of an attachment.
    let first = raw_exec::launch(
        supervisor(),
        &["supervise"],
        &shell(&dir, "echo run; exit 4"),
    )
    .unwrap();
    let (record, first_reaper) = match first {
        Ok(attached) => {
            let (record, reaper) = attached.wait();
            (record, Some(reaper))
        }
        Err(record) => (record, None),
    };
    assert_eq!(record.exit_code, 4);
    let second = Launch {
        state: Some(raw_exec::new_run_dir(&dir, 1).unwrap()),
        ..shell(&dir, "echo run; exit 5")
    };
    let launched = raw_exec::launch(supervisor(), &["supervise"], &second).unwrap();
    if let Some(reaper) = first_reaper {
        reaper.reap();
    }
    let record = match launched {
        Ok(attached) => {
            let (record, reaper) = attached.wait();
            reaper.reap();
            record
        }
        Err(record) => record,
    };
    assert_eq!(record.exit_code, 5, "the second run's own exit");
    let log = std::fs::read_to_string(dir.join(raw_exec::STDOUT_FILE)).unwrap();
    assert_eq!(log, "run\nrun\n");
    let second_dir = raw_exec::find_run_dir(&dir, 1)
        .unwrap()
        .expect("run 1's directory");
    assert_eq!(Some(&second_dir), second.state.as_ref());
    assert_eq!(raw_exec::find_run_dir(&dir, 2).unwrap(), None);
    for (state, code) in [(dir.clone(), 4), (second_dir, 5)] {
        match raw_exec::reattach(&state).unwrap() {
            Reattach::Exited(record) => assert_eq!(record.exit_code, code, "{state:?}"),
            other => panic!("{state:?}: {other:?}"),
        }
    }
}

/// Issue 24, finding 7: a task's child in a session of its own left the task's process
/// group, and survived the task. In a cgroup of its own, it goes with the task, and so does
/// the cgroup; SIGKILL after the kill timeout reaches it too. Needs a cgroup2 hierarchy this
/// process may write (CI runs as root).
#[test]
fn a_tasks_escaped_children_go_with_it_in_its_cgroup() {
    let data = task_dir("cgroup-data");
    std::fs::create_dir_all(&data).unwrap();
    let root = match raw_exec::cgroup::prepare(&data) {
        Ok(root) => root,
        Err(why) => panic!("this host has no usable cgroup2 hierarchy: {why}"),
    };
    for forced in [false, true] {
        let dir = task_dir(if forced { "cgroup-forced" } else { "cgroup" });
        let mut launch = shell(
            &dir,
            "setsid /bin/sleep 1000 & echo child $!; trap '' TERM; while :; do sleep 0.05; done",
        );
        launch.cgroups = Some(root.clone());
        let attached = raw_exec::launch(supervisor(), &["supervise"], &launch)
            .unwrap()
            .expect("the task starts");
        wait_for_output(&dir, "child ");
        let log = std::fs::read_to_string(dir.join(raw_exec::STDOUT_FILE)).unwrap();
        let child: i32 = log
            .split_whitespace()
            .nth(1)
            .and_then(|pid| pid.parse().ok())
            .expect("the child's pid");
        let alive = |pid: i32| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                !stat
                    .rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            })
        };
        assert!(alive(child));
        let cgroups: Vec<_> = std::fs::read_dir(&root).unwrap().flatten().collect();
        assert!(
            cgroups
                .iter()
                .any(|e| std::fs::read_to_string(e.path().join("cgroup.procs"))
                    .unwrap_or_default()
                    .lines()
                    .any(|p| p == child.to_string())),
            "the child is in the task's cgroup"
        );
        let signaller = attached.signaller().unwrap();
        if forced {
            // The task ignores its signal: SIGKILL after the timeout, to the whole cgroup.
            signaller.kill_signal(1, libc::SIGTERM, 0).unwrap();
            signaller.force_kill(1, libc::SIGTERM, 0).unwrap();
        } else {
            signaller.kill_signal(1, libc::SIGINT, 0).unwrap();
        }
        let (record, reaper) = attached.wait();
        reaper.reap();
        assert_eq!(
            record.signal,
            Some(if forced { libc::SIGKILL } else { libc::SIGINT })
        );
        let deadline = Instant::now() + Duration::from_secs(5);
        while alive(child) {
            assert!(
                Instant::now() < deadline,
                "the escaped child outlived its task"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let left: Vec<_> = std::fs::read_dir(&root)
            .unwrap()
            .flatten()
            .filter(|e| e.path().is_dir())
            .collect();
        assert!(left.is_empty(), "the run's cgroup is removed: {left:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
    std::fs::remove_dir(&root).unwrap();
    std::fs::remove_dir_all(&data).unwrap();
}
