//! The daemon's durable state: one redb database under the data dir holding the server's
//! records (jobs with every version, allocations with their tombstone bit, evaluations,
//! service registrations, the index), each runner's progress, and the event log.
//!
//! Every write is one redb transaction, committed with `Durability::Immediate` before the
//! write is acknowledged: a server write and its log entry commit together, and a runner's
//! hook effect (a service deregistration) commits with the runner's progress ("pre-kill hooks
//! done"), so that after a crash either both happened or neither did. The event log's JSON
//! lines file (`events.jsonl`) is an export of the log table: appended after each commit and
//! rewritten from the table at start-up, so it never holds an entry whose effect was lost.

use crate::client::AllocRunner;
use crate::server::structs::{Allocation, Evaluation, ServiceRegistration};
use crate::sim::log::LogEntry;
use crate::spec::Job;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const JOBS: TableDefinition<&str, &[u8]> = TableDefinition::new("jobs");
const ALLOCS: TableDefinition<&str, &[u8]> = TableDefinition::new("allocs");
const EVALS: TableDefinition<&str, &[u8]> = TableDefinition::new("evals");
const SERVICES: TableDefinition<&str, &[u8]> = TableDefinition::new("services");
const RUNNERS: TableDefinition<&str, &[u8]> = TableDefinition::new("runners");
const LOG: TableDefinition<u64, &str> = TableDefinition::new("log");

pub const DATABASE_FILE: &str = "state.redb";
pub const EVENT_LOG_FILE: &str = "events.jsonl";

/// A table of records keyed by ID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Table {
    Jobs,
    Allocs,
    Evals,
    Services,
    Runners,
}

impl Table {
    fn definition(self) -> TableDefinition<'static, &'static str, &'static [u8]> {
        match self {
            Table::Jobs => JOBS,
            Table::Allocs => ALLOCS,
            Table::Evals => EVALS,
            Table::Services => SERVICES,
            Table::Runners => RUNNERS,
        }
    }
}

/// An allocation as stored: the API's record plus the tombstone bit it does not show.
#[derive(Serialize, Deserialize)]
pub struct StoredAlloc {
    pub alloc: Allocation,
    pub tombstone: bool,
}

/// One transaction's writes.
#[derive(Debug, Default)]
pub struct Batch {
    pub index: Option<u64>,
    /// A record's new bytes, or `None` to delete it.
    pub writes: Vec<(Table, String, Option<Vec<u8>>)>,
    pub log: Vec<LogEntry>,
}

impl Batch {
    pub fn is_empty(&self) -> bool {
        self.index.is_none() && self.writes.is_empty() && self.log.is_empty()
    }
}

/// Everything stored, as read at start-up.
#[derive(Debug, Default)]
pub struct Loaded {
    pub index: u64,
    pub jobs: BTreeMap<String, Vec<Job>>,
    pub allocs: Vec<Allocation>,
    pub evals: Vec<Evaluation>,
    pub services: Vec<ServiceRegistration>,
    pub runners: Vec<AllocRunner>,
    /// The last event log sequence number.
    pub log_seq: u64,
}

pub struct Persist {
    db: Database,
    log_path: PathBuf,
}

fn error(what: &str, e: impl std::fmt::Display) -> String {
    format!("{what}: {e}")
}

impl Persist {
    /// Opens (or creates) the database under `dir`, reads everything, and rewrites the event
    /// log file from the log table.
    pub fn open(dir: &Path) -> Result<(Persist, Loaded), String> {
        fs::create_dir_all(dir).map_err(|e| error(&format!("creating {}", dir.display()), e))?;
        let path = dir.join(DATABASE_FILE);
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
        let persist = Persist {
            db,
            log_path: dir.join(EVENT_LOG_FILE),
        };
        let loaded = persist.load()?;
        Ok((persist, loaded))
    }

    fn load(&self) -> Result<Loaded, String> {
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
        ) -> Result<(), String> {
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
        each(&read, Table::Jobs, |versions: Vec<Job>| {
            if let Some(last) = versions.last() {
                loaded.jobs.insert(last.id.clone(), versions);
            }
        })?;
        each(&read, Table::Allocs, |stored: StoredAlloc| {
            let mut alloc = stored.alloc;
            alloc.tombstone = stored.tombstone;
            loaded.allocs.push(alloc);
        })?;
        each(&read, Table::Evals, |eval| loaded.evals.push(eval))?;
        each(&read, Table::Services, |service| {
            loaded.services.push(service)
        })?;
        each(&read, Table::Runners, |runner| loaded.runners.push(runner))?;
        let log = read.open_table(LOG).map_err(|e| error("log", e))?;
        let mut text = String::new();
        for row in log.iter().map_err(|e| error("log", e))? {
            let (seq, line) = row.map_err(|e| error("log", e))?;
            loaded.log_seq = seq.value();
            text.push_str(line.value());
            text.push('\n');
        }
        let temporary = self.log_path.with_extension("jsonl.tmp");
        fs::write(&temporary, text)
            .and_then(|()| fs::rename(&temporary, &self.log_path))
            .map_err(|e| error(&format!("writing {}", self.log_path.display()), e))?;
        Ok(loaded)
    }

    /// Commits one batch as one durable transaction, then appends its log entries to the
    /// event log file.
    pub fn commit(&self, batch: Batch) -> Result<(), String> {
        if batch.is_empty() {
            return Ok(());
        }
        let write = self.db.begin_write().map_err(|e| error("writing", e))?;
        let mut lines = String::new();
        {
            if let Some(index) = batch.index {
                let mut meta = write.open_table(META).map_err(|e| error("meta", e))?;
                meta.insert("index", index).map_err(|e| error("meta", e))?;
            }
            for (table, key, value) in &batch.writes {
                let mut opened = write
                    .open_table(table.definition())
                    .map_err(|e| error("table", e))?;
                match value {
                    Some(bytes) => {
                        opened
                            .insert(key.as_str(), bytes.as_slice())
                            .map_err(|e| error("insert", e))?;
                    }
                    None => {
                        opened
                            .remove(key.as_str())
                            .map_err(|e| error("remove", e))?;
                    }
                }
            }
            let mut log = write.open_table(LOG).map_err(|e| error("log", e))?;
            for entry in &batch.log {
                let line = entry.to_json_line();
                log.insert(entry.seq, line.as_str())
                    .map_err(|e| error("log", e))?;
                lines.push_str(&line);
                lines.push('\n');
            }
        }
        write.commit().map_err(|e| error("commit", e))?;
        if !lines.is_empty() {
            fs::OpenOptions::new()
                .append(true)
                .create(true)
                .open(&self.log_path)
                .and_then(|mut file| file.write_all(lines.as_bytes()))
                .map_err(|e| error(&format!("appending to {}", self.log_path.display()), e))?;
        }
        Ok(())
    }
}
