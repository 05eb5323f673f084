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
                    Some(Payload::Alloc(Box::new(alloc))),
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
    assert!(committer.failing().is_none());
    // The committer thread keeps the database open; the files go all the same.
    let _ = fs::remove_dir_all(&dir);
}
