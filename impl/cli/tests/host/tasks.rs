//! Tasks that cannot start, the tasks a user's signal and the stats reach, and a task
//! under a supervisor an older agent started.

use crate::harness::*;
use serde_json::json;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

/// A task whose program does not exist fails at start: its allocation fails, and nothing
/// is left registered.
#[test]
fn a_task_that_cannot_start_fails_its_allocation() {
    let agent = Agent::new("nostart");
    let log = agent.dir.join("witness.jsonl");
    let mut spec = job(&agent, "missing", &log, dies(0, 0));
    spec["Job"]["TaskGroups"][0]["Tasks"][0]["Config"]["command"] = json!("/nonexistent/program");
    agent.ok("PUT", "/v1/jobs", Some(&spec));
    let alloc = agent.wait_first_alloc("missing", "failed");
    let types = event_types(&alloc);
    assert!(types.contains(&"Driver Failure".to_string()), "{types:?}");
    assert_eq!(alloc["TaskStates"]["server"]["Failed"], true);
    assert_eq!(agent.listed("missing-group"), 0);
    assert_eq!(agent.listed("missing-server"), 0);
    agent.validate_log();
}

/// An allocation of three tasks: a prestart task that has run and exited, the witness, and
/// a `mock_driver` task. Its stats list the witness's process group alone (the exited
/// task has no process, the mock none ever); a user's signal to every task reaches the
/// witness once and passes the exited task over; one to the mock by name is taken.
#[test]
fn stats_and_signals_reach_the_tasks_that_run_and_only_them() {
    let agent = Agent::new("running");
    let log = agent.dir.join("witness.jsonl");
    let mut spec = job(&agent, "three", &log, dies(0, 0));
    let tasks = spec["Job"]["TaskGroups"][0]["Tasks"]
        .as_array_mut()
        .expect("tasks");
    tasks.push(json!({
        "Name": "init",
        "Driver": "raw_exec",
        "Lifecycle": {"Hook": "prestart", "Sidecar": false},
        "Config": {"command": "/bin/true"},
    }));
    tasks.push(json!({"Name": "idle", "Driver": "mock_driver", "Config": {}}));
    let id = agent.run(&spec, &log);
    let witness = one_start(&log, &id)["pid"]
        .as_i64()
        .expect("a pid")
        .to_string();
    let alloc = agent.alloc(&id);
    assert_eq!(alloc["TaskStates"]["init"]["State"], "dead");
    assert_eq!(alloc["TaskStates"]["idle"]["State"], "running");

    let stats = agent.ok("GET", &format!("/v1/client/allocation/{id}/stats"), None);
    let tasks = stats["Tasks"].as_object().expect("tasks");
    assert_eq!(tasks.keys().collect::<Vec<_>>(), ["server"], "{stats}");
    let pids = tasks["server"]["Pids"].as_object().expect("pids");
    assert!(
        pids.contains_key(&witness),
        "the witness {witness} in {pids:?}"
    );
    let rss = tasks["server"]["ResourceUsage"]["MemoryStats"]["RSS"].as_u64();
    assert!(rss.is_some_and(|bytes| bytes > 0), "{stats}");

    let every = json!({"Signal": "SIGUSR1"});
    let path = format!("/v1/client/allocation/{id}/signal");
    agent.ok("PUT", &path, Some(&every));
    let usr1 = wait_for("the witness to get SIGUSR1", || {
        lines(&log, &id, "signal").first().cloned()
    });
    assert_eq!(usr1["signal"], libc::SIGUSR1);
    let to_the_mock = json!({"Task": "idle", "Signal": "SIGUSR1"});
    agent.ok("PUT", &path, Some(&to_the_mock));
    let to_the_exited = json!({"Task": "init", "Signal": "SIGUSR1"});
    let (status, answer) = agent.call("PUT", &path, Some(&to_the_exited));
    assert_eq!(status, 400, "{answer}");
    assert!(answer.to_string().contains("Task not running"), "{answer}");
    assert_eq!(
        lines(&log, &id, "signal").len(),
        1,
        "one signal reached the witness"
    );
    assert_eq!(agent.alloc(&id)["ClientStatus"], "running");
    agent.validate_log();
}

/// A task whose directory cannot be made as its job asks (one template's file is where
/// another's directory must be) fails to start: the driver's failure names the cause, the
/// task ends with Nomad's exit code -1 for it, and nothing ran.
#[test]
fn a_task_whose_directory_cannot_be_made_fails_to_start() {
    let agent = Agent::new("nodir");
    let log = agent.dir.join("witness.jsonl");
    let mut spec = job(&agent, "nodir", &log, dies(0, 0));
    spec["Job"]["TaskGroups"][0]["Tasks"][0]["Templates"] = json!([
        {"EmbeddedTmpl": "a file", "DestPath": "local/conf"},
        {"EmbeddedTmpl": "beneath a file", "DestPath": "local/conf/inner"},
    ]);
    agent.ok("PUT", "/v1/jobs", Some(&spec));
    let alloc = agent.wait_first_alloc("nodir", "failed");
    let events = alloc["TaskStates"]["server"]["Events"]
        .as_array()
        .expect("events");
    let failure = events
        .iter()
        .find(|e| e["Type"] == "Driver Failure")
        .unwrap_or_else(|| panic!("a driver failure: {events:?}"));
    let message = failure["DisplayMessage"].as_str().expect("a message");
    assert!(message.contains("directory"), "{message}");
    assert_eq!(terminated(&alloc), "Exit Code: -1");
    let id = alloc["ID"].as_str().expect("an ID");
    assert!(lines(&log, id, "started").is_empty(), "nothing ran");
    assert_eq!(agent.listed("nodir-server"), 0);
    agent.validate_log();
}

/// A task whose supervisor an older agent started (its hello offers no user signals) is
/// reattached, and refused a user's signal by name, rather than sent a line its supervisor
/// would ignore while the user heard it was delivered.
#[test]
fn a_task_under_an_older_supervisor_is_refused_a_users_signal() {
    let mut agent = Agent::new("older");
    let log = agent.dir.join("witness.jsonl");
    let id = agent.run(&job(&agent, "older", &log, dies(0, 0)), &log);
    let port = agent.crash_with_the_supervisor(&log, &id);
    let task_dir = agent.data_dir().join("alloc").join(&id).join("server");
    let heard = agent.dir.join("heard.txt");
    // Its environment marks it as the allocation's, so the test's clean-up ends it.
    let mut older = Command::new("python3")
        .args(["-c", OLD_SUPERVISOR])
        .arg(&task_dir)
        .arg(&heard)
        .env("NOMAD_ALLOC_DIR", agent.data_dir().join("alloc").join(&id))
        .stdout(Stdio::piped())
        .spawn()
        .expect("the older supervisor starts");
    let mut said = String::new();
    BufReader::new(older.stdout.take().expect("its stdout"))
        .read_line(&mut said)
        .expect("its first line");
    assert_eq!(said.trim(), "listening");
    agent.start(port);
    assert_eq!(agent.alloc(&id)["ClientStatus"], "running", "reattached");
    let path = format!("/v1/client/allocation/{id}/signal");
    let body = json!({"Task": "server", "Signal": "SIGUSR1"});
    let (status, answer) = agent.call("PUT", &path, Some(&body));
    assert_eq!(status, 400, "{answer}");
    assert!(answer.to_string().contains("older agent"), "{answer}");
    let heard = std::fs::read_to_string(&heard).unwrap_or_default();
    assert!(
        !heard.contains("signal"),
        "the supervisor was sent: {heard:?}"
    );
    let _ = older.kill();
    let _ = older.wait();
}
