//! The daemon's durable state: one redb database under the data dir holding the server's
//! records (jobs with every version, allocations with their tombstone bit, evaluations,
//! service registrations, deployments, each job's scaling events, the index), each
//! runner's progress, and the event log.
//!
//! Writes are batches, committed in the order they were submitted by one committer thread
//! ([`Committer`]), which merges whatever is queued into one redb transaction (group
//! commit). A batch is never split: a server write commits with its event-log entry, and a
//! runner's hook effect (a service deregistration) with the runner's progress ("pre-kill
//! hooks done"), so after a crash either both happened or neither did.
//!
//! API writes wait until their batch is durable before they are answered: their
//! transaction syncs the disk (`Durability::Immediate`), which makes every earlier one
//! durable too. So do evaluations' plans, which are committed with the write that caused
//! them (or, at start-up, before any runner is restored). Runner progress does not wait, and
//! its transactions do not sync (`Durability::None`): the next sync comes with the next API
//! write or at most [`DURABILITY_LAG`] later. A crash can lose that much of it — a suffix,
//! which the restored agent redoes: evaluations and their plans are durable, and runners
//! restored from their stored state, brought up to their allocation's stored record first,
//! redo their steps. A deregistration already done is a no-op, a task already started is
//! reattached through its task directory, a kill signal already delivered is refused by the
//! supervisor, and a task that died is found dead through its `exit.json`. A stop of many
//! allocations so syncs a few times instead of once per group of steps.
//!
//! The event log's JSON-lines file (`events.jsonl`) is an export of the log table: appended
//! after each commit, so it is current for anyone who reads it once a stop has finished,
//! rotated by size, and brought up to the table at start-up from its tail
//! ([`event_log`]). Between a crash and the restart it may hold the last few entries the
//! store lost (at most [`DURABILITY_LAG`] of them); the restart cuts them off.
//!
//! Files are private: a data dir the agent makes is [`DATA_DIR`] (others may pass to a
//! task's own directory, not list it; one it is given keeps its mode), and the state and
//! the event log, which holds every registered spec with its `Env`, are [`PRIVATE_FILE`],
//! tightened at start if an earlier agent left them looser. A state file that is missing
//! or empty while `alloc/` holds an earlier agent's directories is refused at start: an
//! empty agent over them would leave their tasks running as orphans.

use quiesce_core::client::AllocRunner;
use quiesce_core::server::structs::{Allocation, Evaluation, ServiceRegistration};
use quiesce_core::spec::Job;
use quiesce_core::step::log::LogEntry;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long a commit nobody waits for (runner progress) may stay undurable: the committer
/// syncs the disk this long after the first such commit at the latest.
pub const DURABILITY_LAG: Duration = Duration::from_millis(20);

/// How long the committer waits before it retries a failed commit.
pub const RETRY_AFTER: Duration = Duration::from_secs(1);

const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const JOBS: TableDefinition<&str, &[u8]> = TableDefinition::new("jobs");
const ALLOCS: TableDefinition<&str, &[u8]> = TableDefinition::new("allocs");
const EVALS: TableDefinition<&str, &[u8]> = TableDefinition::new("evals");
const SERVICES: TableDefinition<&str, &[u8]> = TableDefinition::new("services");
const RUNNERS: TableDefinition<&str, &[u8]> = TableDefinition::new("runners");
const PULLS: TableDefinition<&str, &[u8]> = TableDefinition::new("logged_pulls");
const ACL: TableDefinition<&str, &[u8]> = TableDefinition::new("acl");
const NODES: TableDefinition<&str, &[u8]> = TableDefinition::new("nodes");
const DEPLOYMENTS: TableDefinition<&str, &[u8]> = TableDefinition::new("deployments");
const SCALING_EVENTS: TableDefinition<&str, &[u8]> = TableDefinition::new("scaling_events");
const INDEXES: TableDefinition<&str, &[u8]> = TableDefinition::new("indexes");
const KEYS: TableDefinition<&str, &[u8]> = TableDefinition::new("keys");
const LOG: TableDefinition<u64, &str> = TableDefinition::new("log");

mod committer;
mod event_log;

pub use committer::Committer;

pub const DATABASE_FILE: &str = "state.redb";
pub const EVENT_LOG_FILE: &str = "events.jsonl";

/// A table of records keyed by ID.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Table {
    Jobs,
    Allocs,
    Evals,
    Services,
    Runners,
    /// The last pull of each allocation that the event log records (see `Core::log_pull`).
    Pulls,
    /// ACL records, by key: `token/<accessor>`, `policy/<name>`, and `bootstrap` (its index).
    Acl,
    Nodes,
    /// The store's table indexes, as one record ([`INDEXES_KEY`]).
    Indexes,
    /// The agent's signing keys, by key ID.
    Keys,
    Deployments,
    /// Each job's scaling events, by job ID.
    ScalingEvents,
}

/// The key of the table indexes' record in [`Table::Indexes`].
pub const INDEXES_KEY: &str = "tables";

impl Table {
    fn definition(self) -> TableDefinition<'static, &'static str, &'static [u8]> {
        match self {
            Table::Jobs => JOBS,
            Table::Allocs => ALLOCS,
            Table::Evals => EVALS,
            Table::Services => SERVICES,
            Table::Runners => RUNNERS,
            Table::Pulls => PULLS,
            Table::Acl => ACL,
            Table::Nodes => NODES,
            Table::Indexes => INDEXES,
            Table::Keys => KEYS,
            Table::Deployments => DEPLOYMENTS,
            Table::ScalingEvents => SCALING_EVENTS,
        }
    }
}

/// An allocation as stored: the API's record plus the tombstone bit it does not show.
#[derive(Deserialize)]
pub struct StoredAlloc {
    pub alloc: Allocation,
    pub tombstone: bool,
}

/// A record to store, encoded by the committer thread (off the agent's core lock), or
/// already encoded.
#[derive(Debug)]
pub enum Payload {
    Jobs(Vec<Job>),
    /// The store's own record, shared: a write that changes it while the committer holds
    /// it copies it then (as it does anyway while the event journal holds it).
    Alloc(std::sync::Arc<Allocation>),
    Eval(Evaluation),
    Service(ServiceRegistration),
    /// A runner's state, already encoded by the thread that took its steps (in parallel
    /// across the client workers, before the core lock), not by the one committer.
    Runner(Vec<u8>),
    /// An allocation and the `AllocModifyIndex` of its last logged pull.
    Pulled(String, u64),
    /// An ACL record (see [`Table::Acl`]).
    Acl(AclRecord),
    Node(Box<quiesce_core::server::structs::Node>),
    Deployment(Box<quiesce_core::server::structs::Deployment>),
    ScalingEvents(Box<quiesce_core::server::scaling::JobScalingEvents>),
    Indexes(quiesce_core::server::store::TableIndexes),
    Key(crate::daemon::keyring::StoredKey),
}

/// An ACL record as stored.
#[derive(Debug, Serialize, Deserialize)]
pub enum AclRecord {
    Token(crate::acl::Token),
    Policy(crate::acl::Policy),
    Bootstrap(u64),
}

impl AclRecord {
    /// Its key in [`Table::Acl`].
    pub fn key(&self) -> String {
        match self {
            AclRecord::Token(token) => format!("token/{}", token.accessor_id),
            AclRecord::Policy(policy) => format!("policy/{}", policy.name),
            AclRecord::Bootstrap(_) => "bootstrap".into(),
        }
    }
}

/// A runner as stored: its state, and when each of its running timers is due (Unix ns), so
/// a restart resumes a wait where it was instead of starting it over.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StoredRunner {
    pub runner: AllocRunner,
    pub deadlines: Vec<(quiesce_core::client::Timer, i64)>,
}

impl StoredRunner {
    /// The stored form of a runner's state, for [`Payload::Runner`] (what
    /// [`StoredRunner`] reads back).
    pub fn encode(
        runner: &AllocRunner,
        deadlines: &[(quiesce_core::client::Timer, i64)],
    ) -> Vec<u8> {
        #[derive(Serialize)]
        struct StoredRunnerRef<'a> {
            runner: &'a AllocRunner,
            deadlines: &'a [(quiesce_core::client::Timer, i64)],
        }
        serde_json::to_vec(&StoredRunnerRef { runner, deadlines })
            .expect("stored records always serialize")
    }
}

impl Payload {
    fn to_json(&self) -> std::borrow::Cow<'_, [u8]> {
        let encoded = match self {
            Payload::Jobs(versions) => serde_json::to_vec(
                &versions
                    .iter()
                    .map(|job| StoredJobRef {
                        job,
                        submission: job.submission.as_deref(),
                    })
                    .collect::<Vec<_>>(),
            ),
            Payload::Alloc(alloc) => serde_json::to_vec(&StoredAllocRef {
                alloc,
                tombstone: alloc.tombstone,
            }),
            Payload::Eval(eval) => serde_json::to_vec(eval),
            Payload::Service(service) => serde_json::to_vec(service),
            Payload::Runner(encoded) => return std::borrow::Cow::Borrowed(encoded),
            Payload::Pulled(alloc, index) => serde_json::to_vec(&(alloc, index)),
            Payload::Acl(record) => serde_json::to_vec(record),
            Payload::Node(node) => serde_json::to_vec(node),
            Payload::Deployment(deployment) => serde_json::to_vec(deployment),
            Payload::ScalingEvents(events) => serde_json::to_vec(events),
            Payload::Indexes(indexes) => serde_json::to_vec(indexes),
            Payload::Key(key) => serde_json::to_vec(key),
        };
        std::borrow::Cow::Owned(encoded.expect("stored records always serialize"))
    }
}

#[derive(Serialize)]
struct StoredAllocRef<'a> {
    alloc: &'a Allocation,
    tombstone: bool,
}

/// A job version as stored: Nomad's Job, and beside its fields the source it was submitted
/// as (which the API's Job never carries). A version stored before submissions were kept
/// has none.
#[derive(Serialize)]
struct StoredJobRef<'a> {
    #[serde(flatten)]
    job: &'a Job,
    #[serde(rename = "QuiesceSubmission", skip_serializing_if = "Option::is_none")]
    submission: Option<&'a quiesce_core::spec::Submission>,
}

#[derive(Deserialize)]
struct StoredJob {
    #[serde(flatten)]
    job: Job,
    #[serde(rename = "QuiesceSubmission", default)]
    submission: Option<quiesce_core::spec::Submission>,
}

/// One record's new value, or `None` to delete it.
pub type Write = (Table, String, Option<Payload>);

/// One transaction's writes.
#[derive(Debug, Default)]
pub struct Batch {
    pub index: Option<u64>,
    pub writes: Vec<Write>,
    pub log: Vec<LogEntry>,
    /// Someone waits until this batch is durable: its transaction syncs the disk.
    pub durable: bool,
}

impl Batch {
    pub fn is_empty(&self) -> bool {
        self.index.is_none() && self.writes.is_empty() && self.log.is_empty()
    }

    /// Batches, in order, as one: the last write of each record, every log entry, the
    /// highest index; durable if any was.
    fn merge(batches: Vec<Batch>) -> Batch {
        let mut merged = Batch::default();
        let mut at: std::collections::HashMap<(Table, String), usize> = Default::default();
        for batch in batches {
            merged.index = merged.index.max(batch.index);
            merged.durable |= batch.durable;
            merged.log.extend(batch.log);
            for (table, key, value) in batch.writes {
                match at.entry((table, key.clone())) {
                    std::collections::hash_map::Entry::Occupied(slot) => {
                        merged.writes[*slot.get()].2 = value;
                    }
                    std::collections::hash_map::Entry::Vacant(slot) => {
                        slot.insert(merged.writes.len());
                        merged.writes.push((table, key, value));
                    }
                }
            }
        }
        merged
    }
}

/// Everything stored, as read at start-up.
#[derive(Debug, Default)]
pub struct Loaded {
    pub index: u64,
    pub tables: quiesce_core::server::store::Tables,
    pub table_indexes: quiesce_core::server::store::TableIndexes,
    pub keys: Vec<crate::daemon::keyring::StoredKey>,
    pub runners: Vec<StoredRunner>,
    pub logged_pulls: BTreeMap<String, u64>,
    /// The last event log sequence number.
    pub log_seq: u64,
    pub acl: Vec<AclRecord>,
}

pub struct Persist {
    db: Database,
    db_path: PathBuf,
    log_path: PathBuf,
    /// The event log file missed entries (appending failed: a full disk): it is rewritten
    /// whole from the log table after the next commit that succeeds.
    export_stale: bool,
    /// When that was last tried: at most once per [`RETRY_AFTER`] (a rewrite needs room
    /// for the whole file).
    export_tried: Option<Instant>,
    /// The current event log file's size, as appended, and the size it rotates past (see
    /// `event_log.rs`).
    log_bytes: u64,
    log_bound: u64,
}

/// Why the durable store failed. The HTTP layer answers any of them 500 (`http/mod.rs`);
/// the agent refuses to start on one from [`Persist::open`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreError {
    /// Doing `what` to the database or a file of the data dir failed with `cause`.
    Failed { what: String, cause: String },
    /// The state file is `missing` or empty while `earlier` allocation directories of an
    /// earlier agent are in the data dir (see [`refuse_a_lost_state`]).
    LostState {
        state: PathBuf,
        missing: bool,
        dir: PathBuf,
        earlier: usize,
    },
    /// Commits fail now (a full disk, say) and are retried: the write is kept in memory
    /// and stored once a commit succeeds.
    Retrying(Box<StoreError>),
    /// The committer thread could not be started.
    NoCommitter(String),
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::Failed { what, cause } => write!(f, "{what}: {cause}"),
            StoreError::LostState {
                state,
                missing,
                dir,
                earlier,
            } => {
                let allocs = dir.join("alloc");
                write!(
                    f,
                    "{} is {}, but {} holds {earlier} allocation director{} of an earlier \
                     agent, whose tasks may still be running. To start fresh, stop those tasks \
                     (their supervisors are `quiesce supervise {}/…` processes) and remove {} or \
                     start with another -data-dir",
                    state.display(),
                    if *missing { "missing" } else { "empty" },
                    allocs.display(),
                    if *earlier == 1 { "y" } else { "ies" },
                    allocs.display(),
                    dir.display(),
                )
            }
            StoreError::Retrying(failure) => write!(
                f,
                "{failure} (the agent keeps it and retries; it is stored once there is room)"
            ),
            StoreError::NoCommitter(why) => write!(f, "starting the committer thread: {why}"),
        }
    }
}

impl std::error::Error for StoreError {}

/// The agent's start (`start.rs`) says why it cannot start in words.
impl From<StoreError> for String {
    fn from(failure: StoreError) -> String {
        failure.to_string()
    }
}

fn error(what: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Failed {
        what: what.to_string(),
        cause: e.to_string(),
    }
}

/// The data dir's mode: others may pass through it (a task run as another user reaches
/// its own directory) but not list it.
pub const DATA_DIR: u32 = 0o711;
/// The mode of the agent's files (state, event log, task logs): the agent's user only —
/// a task's `Env` is in the state and the log, its secrets with it.
pub const PRIVATE_FILE: u32 = 0o600;

/// The state file at [`PRIVATE_FILE`], created so (never readable by others for a
/// moment), or tightened if an earlier agent left it looser.
fn private(state: &Path) -> Result<(), StoreError> {
    let chmod = |path: &Path, mode: u32| {
        fs::set_permissions(path, fs::Permissions::from_mode(mode))
            .map_err(|e| error(&format!("setting the mode of {}", path.display()), e))
    };
    fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(PRIVATE_FILE)
        .open(state)
        .map_err(|e| error(&format!("creating {}", state.display()), e))?;
    chmod(state, PRIVATE_FILE)
}

/// A data dir whose state file is missing or empty while task directories of an earlier
/// agent are there: their tasks may still run, and an agent started over them would not
/// know them (they would run on as orphans while it placed their allocations again). It is
/// refused, never silently a fresh start.
fn refuse_a_lost_state(dir: &Path, path: &Path) -> Result<(), StoreError> {
    let lost = match fs::metadata(path) {
        Ok(meta) => meta.len() == 0,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
        Err(e) => return Err(error(&format!("reading {}", path.display()), e)),
    };
    let allocs = dir.join("alloc");
    let earlier = match fs::read_dir(&allocs) {
        Ok(entries) => entries.count(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
        // Unreadable (or not a directory): whether tasks of an earlier agent are there
        // cannot be told, so a lost state is not taken for a fresh start.
        Err(e) if lost => return Err(error(&format!("reading {}", allocs.display()), e)),
        Err(_) => 0,
    };
    if lost && earlier > 0 {
        return Err(StoreError::LostState {
            state: path.to_path_buf(),
            missing: !path.exists(),
            dir: dir.to_path_buf(),
            earlier,
        });
    }
    Ok(())
}

impl Persist {
    /// Opens (or creates) the database under `dir`, reads everything, and brings the event
    /// log file up to the log table (`event_log.rs`).
    pub fn open(dir: &Path) -> Result<(Persist, Loaded), StoreError> {
        // A data dir the agent makes is DATA_DIR; one it is given keeps its mode (it may be
        // a shared one, /tmp say: what is in it is private by its own modes).
        if !dir.exists() {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(DATA_DIR)
                .create(dir)
                .map_err(|e| error(&format!("creating {}", dir.display()), e))?;
        }
        let path = dir.join(DATABASE_FILE);
        refuse_a_lost_state(dir, &path)?;
        private(&path)?;
        let db = Database::create(&path)
            .map_err(|e| error(&format!("opening {}", path.display()), e))?;
        let setup = db
            .begin_write()
            .map_err(|e| error("starting a transaction", e))?;
        {
            setup.open_table(META).map_err(|e| error("meta", e))?;
            for table in [
                Table::Jobs,
                Table::Allocs,
                Table::Evals,
                Table::Services,
                Table::Runners,
                Table::Pulls,
                Table::Acl,
                Table::Nodes,
                Table::Indexes,
                Table::Keys,
                Table::Deployments,
                Table::ScalingEvents,
            ] {
                setup
                    .open_table(table.definition())
                    .map_err(|e| error("table", e))?;
            }
            setup.open_table(LOG).map_err(|e| error("log", e))?;
        }
        setup
            .commit()
            .map_err(|e| error("creating the tables", e))?;
        let mut persist = Persist {
            db,
            db_path: path,
            log_path: dir.join(EVENT_LOG_FILE),
            export_stale: false,
            export_tried: None,
            log_bytes: 0,
            log_bound: event_log::max_log_file_bytes(),
        };
        let loaded = persist.load()?;
        Ok((persist, loaded))
    }

    fn load(&mut self) -> Result<Loaded, StoreError> {
        let read = self.db.begin_read().map_err(|e| error("reading", e))?;
        let mut loaded = Loaded::default();
        let meta = read.open_table(META).map_err(|e| error("meta", e))?;
        loaded.index = meta
            .get("index")
            .map_err(|e| error("meta", e))?
            .map_or(0, |v| v.value());
        fn each<T: for<'de> Deserialize<'de>>(
            read: &redb::ReadTransaction,
            table: Table,
            mut take: impl FnMut(T),
        ) -> Result<(), StoreError> {
            let table_name = format!("{table:?}");
            let opened = read
                .open_table(table.definition())
                .map_err(|e| error(&table_name, e))?;
            for row in opened.iter().map_err(|e| error(&table_name, e))? {
                let (key, value) = row.map_err(|e| error(&table_name, e))?;
                let record = serde_json::from_slice(value.value())
                    .map_err(|e| error(&format!("{table_name} record {:?}", key.value()), e))?;
                take(record);
            }
            Ok(())
        }
        let tables = &mut loaded.tables;
        each(&read, Table::Jobs, |stored: Vec<StoredJob>| {
            let versions: Vec<Job> = stored
                .into_iter()
                .map(
                    |StoredJob {
                         mut job,
                         submission,
                     }| {
                        job.submission = submission.map(std::sync::Arc::new);
                        // Nomad's defaults as this agent gives them now, so a version stored
                        // by an older agent compares equal to the same spec registered again
                        // (the resources' defaults came later). Idempotent.
                        job.canonicalize();
                        job
                    },
                )
                .collect();
            if let Some(last) = versions.last() {
                tables.jobs.insert(last.id.as_str().into(), versions);
            }
        })?;
        each(&read, Table::Allocs, |stored: StoredAlloc| {
            let mut alloc = stored.alloc;
            alloc.tombstone = stored.tombstone;
            // Its own copy of its version (each decoded alone), defaulted as the versions are.
            std::sync::Arc::make_mut(&mut alloc.job).canonicalize();
            tables.allocs.push(alloc);
        })?;
        each(&read, Table::Evals, |eval| tables.evals.push(eval))?;
        each(&read, Table::Services, |service| {
            tables.services.push(service)
        })?;
        each(&read, Table::Nodes, |node| tables.nodes.push(node))?;
        each(&read, Table::Deployments, |deployment| {
            tables.deployments.push(deployment)
        })?;
        each(&read, Table::ScalingEvents, |events| {
            tables.scaling_events.push(events)
        })?;
        each(&read, Table::Indexes, |indexes| {
            loaded.table_indexes = indexes
        })?;
        each(&read, Table::Keys, |key| loaded.keys.push(key))?;
        each(&read, Table::Runners, |runner| loaded.runners.push(runner))?;
        each(&read, Table::Pulls, |(alloc, index): (String, u64)| {
            loaded.logged_pulls.insert(alloc, index);
        })?;
        each(&read, Table::Acl, |record| loaded.acl.push(record))?;
        // The file is an export: an agent on a full disk starts without it, and writes it
        // once it can.
        loaded.log_seq = match self.reconcile_log() {
            Ok(last) => last,
            Err(failure) => {
                crate::daemon::say!("{failure}; the event log file is written once it can be");
                self.export_stale = true;
                self.last_log_seq()?
            }
        };
        Ok(loaded)
    }

    /// Opens the database again after a failed commit (redb refuses every operation after
    /// an I/O error until the database is opened again; the old handle must be gone). The
    /// event log file is rewritten after the next commit.
    fn reopen(db_path: PathBuf, log_path: PathBuf) -> Result<Persist, StoreError> {
        let db = Database::create(&db_path)
            .map_err(|e| error(&format!("reopening {}", db_path.display()), e))?;
        Ok(Persist {
            db,
            db_path,
            log_path,
            export_stale: true,
            export_tried: None,
            log_bytes: 0,
            log_bound: event_log::max_log_file_bytes(),
        })
    }

    /// Commits batches, in order, as one transaction, durable (syncing the disk, which
    /// makes every earlier commit durable too) or not, then appends their log entries to the
    /// event log file.
    pub fn commit(&mut self, batches: &[Batch], durable: bool) -> Result<(), StoreError> {
        if !durable && batches.iter().all(Batch::is_empty) {
            return Ok(());
        }
        let mut write = self.db.begin_write().map_err(|e| error("writing", e))?;
        write
            .set_durability(if durable {
                redb::Durability::Immediate
            } else {
                redb::Durability::None
            })
            .map_err(|e| error("setting the durability", e))?;
        let mut lines = String::new();
        // One transaction holds them all, so only the last value of a record is stored:
        // earlier ones (a runner's state after each of several steps) are not even encoded.
        let mut last = std::collections::HashMap::new();
        for (b, batch) in batches.iter().enumerate() {
            for (w, (table, key, _)) in batch.writes.iter().enumerate() {
                last.insert((*table, key.as_str()), (b, w));
            }
        }
        if let Some(index) = batches.iter().filter_map(|batch| batch.index).max() {
            let mut meta = write.open_table(META).map_err(|e| error("meta", e))?;
            meta.insert("index", index).map_err(|e| error("meta", e))?;
        }
        // Each table opened once per transaction.
        let mut opened = std::collections::HashMap::new();
        let mut log = write.open_table(LOG).map_err(|e| error("log", e))?;
        for (b, batch) in batches.iter().enumerate() {
            for (w, (table, key, value)) in batch.writes.iter().enumerate() {
                if last.get(&(*table, key.as_str())) != Some(&(b, w)) {
                    continue;
                }
                let records = match opened.entry(*table) {
                    std::collections::hash_map::Entry::Occupied(open) => open.into_mut(),
                    std::collections::hash_map::Entry::Vacant(slot) => slot.insert(
                        write
                            .open_table(table.definition())
                            .map_err(|e| error("table", e))?,
                    ),
                };
                match value {
                    Some(payload) => {
                        records
                            .insert(key.as_str(), payload.to_json().as_ref())
                            .map_err(|e| error("insert", e))?;
                    }
                    None => {
                        records
                            .remove(key.as_str())
                            .map_err(|e| error("remove", e))?;
                    }
                }
            }
            for entry in &batch.log {
                let line = entry.to_json_line();
                log.insert(entry.seq, line.as_str())
                    .map_err(|e| error("log", e))?;
                lines.push_str(&line);
                lines.push('\n');
            }
        }
        drop(opened);
        drop(log);
        write.commit().map_err(|e| error("commit", e))?;
        self.export(&lines);
        Ok(())
    }
}

#[cfg(test)]
mod tests;
