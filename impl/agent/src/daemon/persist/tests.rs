//! The durable copy: records and log entries committed and loaded back, batches merged,
//! the committer's order and durability, a lost state refused, old records defaulted.

use super::*;
use quiesce_core::step::Step;

#[test]
fn a_lost_state_beside_an_earlier_agents_tasks_is_refused_by_name() {
    let dir = std::env::temp_dir().join(format!("quiesce-lost-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(dir.join("alloc/earlier")).unwrap();
    let refused = Persist::open(&dir).err().expect("a lost state is refused");
    assert_eq!(
        refused,
        StoreError::LostState {
            state: dir.join(DATABASE_FILE),
            missing: true,
            dir: dir.clone(),
            earlier: 1,
        }
    );
    assert!(refused
        .to_string()
        .contains("1 allocation directory of an earlier"));
    assert!(!dir.join(DATABASE_FILE).exists(), "nothing was made");
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn merged_batches_keep_the_last_write_of_each_record_and_every_log_entry() {
    let put = |key: &str, index: u64| {
        (
            Table::Pulls,
            key.to_string(),
            Some(Payload::Pulled(key.into(), index)),
        )
    };
    let restart = || LogEntry::step(Step::ClientRestart, None, None);
    let first = Batch {
        index: Some(3),
        writes: vec![put("x", 1), put("y", 1)],
        log: vec![restart()],
        durable: false,
    };
    let second = Batch {
        index: Some(5),
        writes: vec![put("x", 2), (Table::Pulls, "y".into(), None)],
        log: vec![restart()],
        durable: true,
    };
    let merged = Batch::merge(vec![first, second]);
    assert_eq!((merged.index, merged.durable), (Some(5), true));
    assert_eq!(merged.log.len(), 2);
    assert_eq!(merged.writes.len(), 2);
    assert!(
        matches!(&merged.writes[0], (Table::Pulls, k, Some(Payload::Pulled(_, 2))) if k == "x")
    );
    assert!(matches!(&merged.writes[1], (Table::Pulls, k, None) if k == "y"));
}

#[test]
fn a_job_stored_before_the_resources_defaults_loads_with_them() {
    let dir = std::env::temp_dir().join(format!("quiesce-persist-{}-old", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // As an older agent stored it: canonical then, but with no `Resources`.
    let mut job: Job = serde_json::from_str(
        r#"{"ID": "old", "TaskGroups": [{"Name": "g", "Tasks": [{"Name": "t", "Driver": "raw_exec", "Config": {"command": "/bin/sleep"}}]}]}"#,
    )
    .unwrap();
    job.canonicalize();
    job.task_groups[0].tasks[0].resources = None;
    let mut server = quiesce_core::server::Server::new(vec!["n".into()], 3);
    server.register_job(job.clone()).unwrap();
    server.process_next_eval().unwrap().unwrap();
    let mut alloc = server.store.allocs().next().unwrap().clone();
    alloc.job = std::sync::Arc::new(job.clone());
    {
        let (mut persist, _) = Persist::open(&dir).unwrap();
        let batch = Batch {
            index: Some(2),
            writes: vec![
                (Table::Jobs, "old".into(), Some(Payload::Jobs(vec![job]))),
                (
                    Table::Allocs,
                    "a".into(),
                    Some(Payload::Alloc(std::sync::Arc::new(alloc))),
                ),
            ],
            log: Vec::new(),
            durable: true,
        };
        persist.commit(&[batch], true).unwrap();
    }
    let (_, loaded) = Persist::open(&dir).unwrap();
    let resources = |job: &Job| job.task_groups[0].tasks[0].resources.clone();
    let defaulted = Some(quiesce_core::spec::Resources {
        cpu: Some(100),
        cores: Some(0),
        memory_mb: Some(300),
        memory_max_mb: None,
    });
    assert_eq!(resources(&loaded.tables.jobs["old"][0]), defaulted);
    assert_eq!(resources(&loaded.tables.allocs[0].job), defaulted);
    let _ = std::fs::remove_dir_all(&dir);
}

fn fresh_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("quiesce-persist-{}-{name}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    dir
}

fn pulled(key: &str, index: u64) -> Write {
    (
        Table::Pulls,
        key.to_string(),
        Some(Payload::Pulled(key.into(), index)),
    )
}

fn entry(seq: u64) -> LogEntry {
    let mut entry = LogEntry::step(Step::ClientRestart, None, None);
    entry.seq = seq;
    entry
}

/// One commit of two batches stores the last write of each record, the highest index and
/// every log entry in order, in the table and in the event log file; an agent opening the
/// data dir again loads exactly that.
#[test]
fn a_commit_loads_back_as_its_last_writes_its_index_and_its_log() {
    let dir = fresh_dir("commit");
    {
        let (mut persist, loaded) = Persist::open(&dir).unwrap();
        assert_eq!((loaded.index, loaded.log_seq), (0, 0));
        let first = Batch {
            index: Some(3),
            writes: vec![pulled("x", 1), pulled("y", 1)],
            log: vec![entry(1)],
            durable: false,
        };
        let second = Batch {
            index: Some(5),
            writes: vec![pulled("x", 2), (Table::Pulls, "y".into(), None)],
            log: vec![entry(2)],
            durable: true,
        };
        persist.commit(&[first, second], true).unwrap();
        // Nothing to store and nothing to sync: a commit that succeeds and changes nothing.
        persist.commit(&[Batch::default()], false).unwrap();
    }
    let (_, loaded) = Persist::open(&dir).unwrap();
    assert_eq!(loaded.index, 5);
    assert_eq!(loaded.logged_pulls, BTreeMap::from([("x".to_string(), 2)]));
    assert_eq!(loaded.log_seq, 2);
    let lines = fs::read_to_string(dir.join(EVENT_LOG_FILE)).unwrap();
    let seqs: Vec<u64> = lines
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["seq"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(seqs, [1, 2]);
    let _ = fs::remove_dir_all(&dir);
}

/// The committer's tickets are the batches' numbers; a wait returns once that batch is
/// durable, for one that asks for it; one that does not (runner progress) is made durable
/// on its own within the durability lag, when no write comes after it.
#[test]
fn the_committer_makes_each_batch_durable_in_order() {
    let dir = fresh_dir("committer");
    let (persist, _) = Persist::open(&dir).unwrap();
    let committer = Committer::start(persist).unwrap();
    let batch = |key: &str, durable: bool| Batch {
        index: None,
        writes: vec![pulled(key, 1)],
        log: Vec::new(),
        durable,
    };
    assert_eq!(committer.durable(), 0);
    let progress = committer.submit(batch("a", false));
    let write = committer.submit(batch("b", true));
    assert_eq!((progress, write), (1, 2));
    committer.wait(write).unwrap();
    assert!(
        committer.durable() >= write,
        "a wait returns once its batch is durable"
    );
    let submitted = std::time::Instant::now();
    let later = committer.submit(batch("c", false));
    assert_eq!(later, 3);
    // A hundred times the lag, polled: a committer that never syncs it fails, not hangs.
    let deadline = std::time::Instant::now() + 100 * DURABILITY_LAG;
    while committer.durable() < later {
        assert!(
            std::time::Instant::now() < deadline,
            "batch {later} is not durable {:?} on",
            100 * DURABILITY_LAG
        );
        std::thread::sleep(DURABILITY_LAG / 4);
    }
    // Its commit did not sync: the sync that made it durable came the lag after it.
    assert!(
        submitted.elapsed() >= DURABILITY_LAG,
        "runner progress durable {:?} after its submission, before the lag",
        submitted.elapsed()
    );
    assert!(committer.failing().is_none());
    // The committer thread keeps the database open; the files go all the same.
    let _ = fs::remove_dir_all(&dir);
}

/// Each ACL record has a key of its own in the table — a token by its accessor, a policy
/// by its name, the bootstrap's reset index once — so all three load back, and deleting
/// one by its key leaves the others.
#[test]
fn acl_records_are_stored_each_under_its_own_key() {
    let dir = fresh_dir("acl");
    let token = crate::acl::Token {
        accessor_id: "a1".into(),
        secret_id: "s1".into(),
        name: "operator".into(),
        kind: crate::acl::TokenType::Management,
        policies: Vec::new(),
        global: true,
        create_time: 1,
        create_index: 2,
        modify_index: 2,
    };
    let policy = crate::acl::Policy {
        name: "readonly".into(),
        description: String::new(),
        rules: String::new(),
        create_index: 3,
        modify_index: 3,
    };
    let records = [
        AclRecord::Token(token.clone()),
        AclRecord::Policy(policy),
        AclRecord::Bootstrap(4),
    ];
    let keys: Vec<String> = records.iter().map(AclRecord::key).collect();
    assert_eq!(keys, ["token/a1", "policy/readonly", "bootstrap"]);
    let put = |record: AclRecord| (Table::Acl, record.key(), Some(Payload::Acl(record)));
    {
        let (mut persist, _) = Persist::open(&dir).unwrap();
        let batch = Batch {
            writes: records.into_iter().map(put).collect(),
            ..Batch::default()
        };
        persist.commit(&[batch], true).unwrap();
    }
    let loaded_kinds = |acl: &[AclRecord]| -> Vec<&'static str> {
        let mut kinds: Vec<_> = acl
            .iter()
            .map(|record| match record {
                AclRecord::Token(_) => "token",
                AclRecord::Policy(_) => "policy",
                AclRecord::Bootstrap(_) => "bootstrap",
            })
            .collect();
        kinds.sort_unstable();
        kinds
    };
    {
        let (mut persist, loaded) = Persist::open(&dir).unwrap();
        assert_eq!(loaded_kinds(&loaded.acl), ["bootstrap", "policy", "token"]);
        let gone = (Table::Acl, AclRecord::Token(token).key(), None);
        let batch = Batch {
            writes: vec![gone],
            ..Batch::default()
        };
        persist.commit(&[batch], true).unwrap();
    }
    let (_, loaded) = Persist::open(&dir).unwrap();
    assert_eq!(loaded_kinds(&loaded.acl), ["bootstrap", "policy"]);
    let _ = fs::remove_dir_all(&dir);
}

/// A batch is empty only when it has no index, no write and no log entry: commits that are
/// not synced, of a batch with writes alone and one with a log entry alone, are stored,
/// and the sync that follows them (a durable commit of nothing) makes them durable.
#[test]
fn a_batch_with_only_writes_or_only_log_entries_is_committed() {
    let dir = fresh_dir("partial");
    assert!(Batch::default().is_empty());
    let writes = Batch {
        writes: vec![pulled("x", 7)],
        ..Batch::default()
    };
    let log = Batch {
        log: vec![entry(1)],
        ..Batch::default()
    };
    let index = Batch {
        index: Some(9),
        ..Batch::default()
    };
    assert!(!writes.is_empty() && !log.is_empty() && !index.is_empty());
    {
        let (mut persist, _) = Persist::open(&dir).unwrap();
        persist.commit(&[writes], false).unwrap();
        persist.commit(&[log], false).unwrap();
        persist.commit(&[index], false).unwrap();
        persist.commit(&[], true).unwrap();
    }
    let (_, loaded) = Persist::open(&dir).unwrap();
    assert_eq!(loaded.logged_pulls, BTreeMap::from([("x".to_string(), 7)]));
    assert_eq!((loaded.log_seq, loaded.index), (1, 9));
    let _ = fs::remove_dir_all(&dir);
}

/// The agent's start says why it cannot open its store in the error's own words.
#[test]
fn a_store_error_reads_the_same_as_a_string() {
    let failure = StoreError::Failed {
        what: "opening /data/state.redb".into(),
        cause: "Permission denied".into(),
    };
    assert_eq!(
        String::from(failure),
        "opening /data/state.redb: Permission denied"
    );
    let retrying = StoreError::Retrying(Box::new(StoreError::NoCommitter("no threads".into())));
    assert_eq!(
        String::from(retrying),
        "starting the committer thread: no threads (the agent keeps it and retries; it is \
         stored once there is room)"
    );
}

/// The state file holds every task's `Env`: it is the agent's user's alone, whether the
/// agent creates it or an earlier one left it readable by others.
#[test]
fn the_state_file_is_private_created_or_found_loose() {
    use std::os::unix::fs::PermissionsExt;
    let dir = fresh_dir("private");
    let mode = |path: &Path| fs::metadata(path).unwrap().permissions().mode() & 0o777;
    let state = dir.join(DATABASE_FILE);
    drop(Persist::open(&dir).unwrap());
    assert_eq!(mode(&state), PRIVATE_FILE, "created private");
    fs::set_permissions(&state, fs::Permissions::from_mode(0o644)).unwrap();
    drop(Persist::open(&dir).unwrap());
    assert_eq!(mode(&state), PRIVATE_FILE, "tightened");
    let _ = fs::remove_dir_all(&dir);
}

/// A state file that cannot be looked at (here a symlink to itself) is an error naming it,
/// never taken for a missing one.
#[test]
fn an_unreadable_state_file_is_refused_by_name() {
    let dir = fresh_dir("unreadable");
    fs::create_dir_all(&dir).unwrap();
    let state = dir.join(DATABASE_FILE);
    std::os::unix::fs::symlink(&state, &state).unwrap();
    let refused = Persist::open(&dir).err().expect("refused");
    let StoreError::Failed { what, .. } = &refused else {
        panic!("a failure to read the state: {refused:?}");
    };
    assert_eq!(*what, format!("reading {}", state.display()));
    let _ = fs::remove_dir_all(&dir);
}

/// An `alloc` entry that cannot be listed (here a file): with no state file it may hide an
/// earlier agent's tasks, so the start is refused naming it; beside a state file it is
/// of no matter (the state says what ran).
#[test]
fn an_unlistable_alloc_dir_is_refused_only_with_a_lost_state() {
    let dir = fresh_dir("unlistable");
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join("alloc"), b"not a directory").unwrap();
    let refused = Persist::open(&dir).err().expect("refused");
    let StoreError::Failed { what, .. } = &refused else {
        panic!("a failure to list the allocations: {refused:?}");
    };
    assert_eq!(*what, format!("reading {}", dir.join("alloc").display()));
    assert!(!dir.join(DATABASE_FILE).exists(), "nothing was made");
    fs::remove_file(dir.join("alloc")).unwrap();
    drop(Persist::open(&dir).unwrap());
    fs::write(dir.join("alloc"), b"not a directory").unwrap();
    drop(Persist::open(&dir).expect("a state file beside it: opened"));
    let _ = fs::remove_dir_all(&dir);
}

/// Commits that were not synced are made to survive a crash by the sync that follows them,
/// a durable commit of nothing (the committer's, once the durability lag has run out): a
/// child process commits without syncing, syncs so, and ends as a crash would, without
/// closing the database; what it committed loads back.
#[test]
fn a_sync_of_nothing_makes_the_commits_before_it_survive_a_crash() {
    const CHILD: &str = "QUIESCE_TEST_PERSIST_CRASH_DIR";
    if let Some(dir) = std::env::var_os(CHILD) {
        let (mut persist, _) = Persist::open(Path::new(&dir)).unwrap();
        let batch = Batch {
            writes: vec![pulled("x", 1)],
            ..Batch::default()
        };
        persist.commit(&[batch], false).unwrap();
        persist.commit(&[], true).unwrap();
        // No destructor runs: the database is not closed.
        std::process::exit(0);
    }
    let dir = fresh_dir("crash");
    fs::create_dir_all(&dir).unwrap();
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "daemon::persist::tests::a_sync_of_nothing_makes_the_commits_before_it_survive_a_crash",
        ])
        .env(CHILD, &dir)
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "the child: {status}");
    let (_, loaded) = Persist::open(&dir).unwrap();
    assert_eq!(loaded.logged_pulls, BTreeMap::from([("x".to_string(), 1)]));
    let _ = fs::remove_dir_all(&dir);
}

/// A commit that fails (here a file size limit, as a full disk would) fails whoever waits
/// for it, and refuses writes up front, until a retry succeeds; that retry syncs what it
/// stores, runner progress too, so the batch is durable the moment commits stop failing.
/// The committer says so once when it starts failing and once when it stores again,
/// however many retries fail in between. Run in a child process, whose limit is its own.
#[test]
fn a_failing_commit_is_retried_until_it_stores_and_said_once_each_way() {
    const CHILD: &str = "QUIESCE_TEST_COMMIT_FAILS_DIR";
    // A record of a MiB: more than the limit lets the state file grow by.
    let big = || "x".repeat(1 << 20);
    if let Some(dir) = std::env::var_os(CHILD) {
        let dir = PathBuf::from(dir);
        let (persist, _) = Persist::open(&dir).unwrap();
        let committer = Committer::start(persist).unwrap();
        let file_size_limit = |bytes: u64| {
            let mut limit = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            // SAFETY: getrlimit and setrlimit read and write the struct given, nothing else.
            unsafe {
                assert_eq!(libc::getrlimit(libc::RLIMIT_FSIZE, &mut limit), 0);
                limit.rlim_cur = bytes.min(limit.rlim_max);
                assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &limit), 0);
            }
        };
        // SAFETY: ignoring SIGXFSZ makes a write past the limit fail with EFBIG instead of
        // ending the process; no handler runs.
        unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
        let size = fs::metadata(dir.join(DATABASE_FILE)).unwrap().len();
        file_size_limit(size + 4096);
        let big = Batch {
            writes: vec![(Table::Pulls, "big".into(), Some(Payload::Pulled(big(), 1)))],
            // Runner progress: only the retry's own sync makes it durable at once.
            durable: false,
            ..Batch::default()
        };
        let ticket = committer.submit(big);
        let refused = committer.wait(ticket).expect_err("the commit fails");
        assert!(
            matches!(&refused, StoreError::Retrying(cause) if cause.to_string().contains("too large")),
            "{refused}"
        );
        assert!(committer.failing().is_some(), "writes are refused up front");
        // Half again the retry's period: one retry has failed too.
        std::thread::sleep(RETRY_AFTER * 3 / 2);
        assert!(committer.failing().is_some(), "still failing");
        file_size_limit(libc::RLIM_INFINITY);
        let deadline = std::time::Instant::now() + 20 * RETRY_AFTER;
        // Polled every millisecond: a sync that came later than the retry would be seen.
        while committer.failing().is_some() {
            assert!(std::time::Instant::now() < deadline, "never stored");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        // Cleared under the lock that marks the retry's batches durable.
        assert!(
            committer.durable() >= ticket,
            "stored again, but not synced"
        );
        std::process::exit(0);
    }
    let dir = fresh_dir("fails");
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "daemon::persist::tests::a_failing_commit_is_retried_until_it_stores_and_said_once_each_way",
            "--nocapture",
        ])
        .env(CHILD, &dir)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&child.stderr);
    assert!(
        child.status.success(),
        "the child: {}; {said}",
        child.status
    );
    assert_eq!(said.matches("storing state failed").count(), 1, "{said}");
    assert_eq!(said.matches("storing state again").count(), 1, "{said}");
    let (_, loaded) = Persist::open(&dir).unwrap();
    assert_eq!(
        loaded.logged_pulls.get(&big()),
        Some(&1),
        "the write stored"
    );
    let _ = fs::remove_dir_all(&dir);
}
