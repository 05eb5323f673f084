//! The state store: tables for jobs (every version kept), allocations, evaluations, nodes,
//! service registrations, deployments and scaling events, and one monotonically increasing index. Every server write is one
//! call that takes the next index once and changes the tables together, as Nomad's FSM
//! applies one raft entry. Each table also keeps the index of its last write (Nomad's
//! `index` table): a list answers, and blocks on, its own table's index, so a write to one
//! table does not wake the readers of another.
//!
//! Times: a host may give the store a clock (`StateStore::set_clock`; the daemon does).
//! Each write reads it once, when it starts, and stamps what it writes: an allocation's and
//! an evaluation's `CreateTime` (the write that made it) and `ModifyTime` (its last write),
//! and a registered version's `SubmitTime` (a stop's version keeps the register's: it
//! writes no new specification), all Unix nanoseconds as Nomad's. The simulator's store has
//! no clock and stamps nothing, so its states stay comparable.

mod by_job;
mod deployments;
mod journal;
mod moved;
mod scaling;
mod status;

use super::events::{EventJournal, Snapshot, WriteType};
use super::scaling::JobScalingEvents;
use super::structs::{
    AllocId, Allocation, Deployment, EvalId, Evaluation, JobId, Node, NodeId, ServiceRegistration,
};
use crate::spec::Job;
pub use moved::{Moved, MAX_MOVED};
use status::Counts;
use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// A durable copy's records, table by table (see [`StateStore::restore`]).
#[derive(Clone, Debug, Default)]
pub struct Tables {
    pub jobs: BTreeMap<JobId, Vec<Job>>,
    pub allocs: Vec<Allocation>,
    pub evals: Vec<Evaluation>,
    pub services: Vec<ServiceRegistration>,
    pub nodes: Vec<Node>,
    pub deployments: Vec<Deployment>,
    pub scaling_events: Vec<JobScalingEvents>,
}

#[derive(Clone, Debug, Default)]
pub struct StateStore {
    index: u64,
    /// Every stored version of each job, oldest first. A purged job is gone. Each table
    /// below is shared between clones (the lockstep walk clones a simulator per
    /// transition), and so is each job's list of versions: a write copies what it changes.
    jobs: Arc<BTreeMap<JobId, Arc<Vec<Job>>>>,
    /// Shared with the event journal: a write copies a record only if an event still
    /// holds the version it changes (see `journal.rs`).
    allocs: Arc<BTreeMap<AllocId, Arc<Allocation>>>,
    /// Allocation IDs by job, so a job's allocations are found without a scan.
    allocs_by_job: Arc<BTreeMap<JobId, BTreeSet<AllocId>>>,
    /// What each job's status is derived from (`status.rs`).
    counts: Arc<BTreeMap<JobId, Counts>>,
    /// Each record shared too, as an allocation is: a copy of the table copies pointers.
    evals: Arc<BTreeMap<EvalId, Arc<Evaluation>>>,
    services: Arc<BTreeMap<String, Arc<ServiceRegistration>>>,
    nodes: Arc<BTreeMap<NodeId, Node>>,
    /// Every deployment, by ID (`deployments.rs`).
    deployments: Arc<BTreeMap<String, Deployment>>,
    /// The IDs of each job's deployments, oldest first.
    deployments_by_job: Arc<BTreeMap<JobId, Vec<String>>>,
    /// Each job's scaling events (`scaling.rs`), deleted with the job.
    scaling_events: Arc<BTreeMap<JobId, JobScalingEvents>>,
    /// The index of each table's last write.
    table_indexes: TableIndexes,
    /// Allocations whose `AllocModifyIndex` changed since the last drain: what clients will
    /// pull. Hosts drain it to learn which pulls became possible without scanning.
    client_changes: Vec<AllocId>,
    /// Records written since the last drain, when a host stores them durably (the daemon);
    /// `None` keeps no journal (the simulator, which clones stores freely).
    written: Option<BTreeSet<Record>>,
    /// The event journal, when a host publishes the event stream (the daemon); `None`
    /// keeps none. With it, the write in progress: what it changed so far.
    events: Option<EventJournal>,
    open: Option<OpenWrite>,
    /// What writes moved since the last drain, when a host wakes readers by it (the
    /// daemon); `None` notes nothing (`moved.rs`).
    moved: Option<Moved>,
    /// At most this many versions of each job are kept (`None`: all).
    max_job_versions: Option<usize>,
    /// Where a write's time comes from (the daemon's wall clock). Without one no record is
    /// stamped (the simulator's carry 0, so its states stay comparable).
    clock: Option<fn() -> i64>,
    /// The time of the write in progress, Unix nanoseconds (`None`: no clock, or restoring).
    now: Option<i64>,
}

/// A write's changes until it ends (the next write starts, or a reader looks): its
/// records, in the order first changed, and those it deleted, as they were.
#[derive(Clone, Debug)]
struct OpenWrite {
    index: u64,
    kind: WriteType,
    /// In the order first changed, possibly repeated (made unique when the write ends).
    order: Vec<Record>,
    deleted: BTreeMap<Record, Snapshot>,
}

/// The index of each table's last write (a deletion included).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TableIndexes {
    pub jobs: u64,
    pub allocs: u64,
    pub evals: u64,
    pub services: u64,
    pub nodes: u64,
    #[serde(default)]
    pub deployments: u64,
    #[serde(default)]
    pub scaling_events: u64,
}

/// A record of the store, as a durable copy names it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Record {
    /// The store's index.
    Index,
    Job(JobId),
    Alloc(AllocId),
    Eval(EvalId),
    Service(String),
    Node(NodeId),
    Deployment(String),
    /// A job's scaling events.
    ScalingEvents(JobId),
}

impl StateStore {
    /// A store rebuilt from a durable copy, journalling its writes from now on. A table's
    /// index is the one stored, or, if none was (or it is older), its newest record's.
    pub fn restore(index: u64, tables: Tables, indexes: TableIndexes) -> Self {
        let Tables {
            jobs,
            allocs,
            evals,
            services,
            nodes,
            deployments,
            scaling_events,
        } = tables;
        let newest = |indexes: &mut dyn Iterator<Item = u64>| indexes.max().unwrap_or(0);
        let table_indexes = TableIndexes {
            jobs: indexes.jobs.max(newest(
                &mut jobs.values().flatten().map(|job| job.modify_index),
            )),
            allocs: indexes
                .allocs
                .max(newest(&mut allocs.iter().map(|a| a.modify_index))),
            evals: indexes
                .evals
                .max(newest(&mut evals.iter().map(|e| e.modify_index))),
            services: indexes
                .services
                .max(newest(&mut services.iter().map(|s| s.create_index))),
            nodes: indexes
                .nodes
                .max(newest(&mut nodes.iter().map(|n| n.modify_index))),
            deployments: indexes
                .deployments
                .max(newest(&mut deployments.iter().map(|d| d.modify_index))),
            scaling_events: indexes
                .scaling_events
                .max(newest(&mut scaling_events.iter().map(|e| e.modify_index))),
        };
        let mut store = StateStore {
            index,
            ..StateStore::default()
        };
        // Before the jobs: restored statuses are as they were stored, no write of their own.
        for alloc in allocs {
            store.put_alloc(alloc);
        }
        store.jobs = Arc::new(jobs.into_iter().map(|(id, v)| (id, Arc::new(v))).collect());
        for eval in evals {
            store.put_eval(eval);
        }
        for service in services {
            store.put_service(service);
        }
        for node in nodes {
            store.put_node(node);
        }
        for deployment in deployments {
            store.put_deployment(deployment);
        }
        store.restore_scaling_events(scaling_events);
        store.table_indexes = table_indexes;
        // Journalled from now on: what was restored is stored already.
        store.written = Some(BTreeSet::new());
        store
    }

    /// The records written since the last call (each to be stored as it is now, or deleted
    /// if it is gone); empty when no journal is kept.
    pub fn drain_written(&mut self) -> BTreeSet<Record> {
        self.written
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    fn wrote(&mut self, record: Record) {
        let index = self.index;
        let tables = &mut self.table_indexes;
        match &record {
            Record::Index => {}
            Record::Job(_) => tables.jobs = index,
            Record::Alloc(_) => tables.allocs = index,
            Record::Eval(_) => tables.evals = index,
            Record::Service(_) => tables.services = index,
            Record::Node(_) => tables.nodes = index,
            Record::Deployment(_) => tables.deployments = index,
            Record::ScalingEvents(_) => tables.scaling_events = index,
        }
        if self.events.is_some() && record != Record::Index {
            let open = self
                .open
                .get_or_insert_with(|| OpenWrite::new(index, WriteType::Acl));
            // Repeats are made unique when the write ends: the kill path pays one push.
            if open.order.last() != Some(&record) {
                open.order.push(record.clone());
            }
        }
        self.moved_record(&record);
        if let Some(written) = self.written.as_mut() {
            written.insert(record);
        }
    }

    /// The index of each table's last write.
    pub fn table_indexes(&self) -> TableIndexes {
        self.table_indexes
    }

    /// Every version of a job (for a durable copy).
    pub fn job_versions_owned(&self, id: &str) -> Option<&Vec<Job>> {
        self.jobs.get(id).map(Arc::as_ref)
    }

    pub fn service(&self, id: &str) -> Option<&ServiceRegistration> {
        self.services.get(id).map(Arc::as_ref)
    }

    /// The index of the last write.
    pub fn index(&self) -> u64 {
        self.index
    }

    /// Starts a write of `kind`: the index every record it changes is stamped with. (The
    /// daemon's ACL writes take one too, as Nomad's Raft writes do.)
    pub fn next_index(&mut self, kind: WriteType) -> u64 {
        self.close_write();
        self.wrote(Record::Index);
        self.index += 1;
        self.now = self.clock.map(|clock| clock());
        if self.events.is_some() {
            self.open = Some(OpenWrite::new(self.index, kind));
        }
        self.index
    }

    /// Stamps every write from now on with `clock`'s time (Unix nanoseconds): allocations'
    /// and evaluations' `CreateTime` and `ModifyTime`, a job version's `SubmitTime`.
    pub fn set_clock(&mut self, clock: fn() -> i64) {
        self.clock = Some(clock);
    }

    /// The time of the write in progress (0 without a clock).
    pub fn now(&self) -> i64 {
        self.now.unwrap_or(0)
    }

    pub fn job(&self, id: &str) -> Option<&Job> {
        self.jobs.get(id).and_then(|versions| versions.last())
    }

    pub fn job_versions(&self, id: &str) -> Option<&[Job]> {
        self.jobs.get(id).map(|versions| versions.as_slice())
    }

    /// A job's stored versions as clones of the store share them: the same `Arc` until one
    /// of them is written (the lockstep walk remembers what it derived from them).
    pub fn job_versions_shared(&self, id: &str) -> Option<&Arc<Vec<Job>>> {
        self.jobs.get(id)
    }

    pub fn jobs(&self) -> impl Iterator<Item = &Job> {
        self.jobs.values().filter_map(|versions| versions.last())
    }

    /// An allocation as the API shows it: tombstones are not found (Nomad answers 404 once a
    /// job is purged).
    pub fn alloc<Q>(&self, id: &Q) -> Option<&Allocation>
    where
        AllocId: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.allocs
            .get(id)
            .map(Arc::as_ref)
            .filter(|alloc| !alloc.tombstone)
    }

    /// An allocation as its client pulls it, tombstones included.
    pub fn alloc_for_client<Q>(&self, id: &Q) -> Option<&Allocation>
    where
        AllocId: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.allocs.get(id).map(Arc::as_ref)
    }

    /// The allocation's record itself, shared (what an event carries, and what the agent
    /// hands its committer to store).
    pub fn alloc_shared<Q>(&self, id: &Q) -> Option<&Arc<Allocation>>
    where
        AllocId: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.allocs.get(id)
    }

    /// Every allocation of a job, tombstones included, in ID order.
    pub fn allocs_by_job(&self, job_id: &str) -> impl Iterator<Item = &Allocation> {
        by_job::JobAllocs::new(self.allocs_by_job.get(job_id), &self.allocs)
    }

    pub fn allocs(&self) -> impl Iterator<Item = &Allocation> {
        self.allocs
            .values()
            .map(Arc::as_ref)
            .filter(|alloc| !alloc.tombstone)
    }

    /// Every allocation placed on a node, tombstones included (what its client pulls).
    pub fn allocs_for_node<'a>(
        &'a self,
        node: &'a str,
    ) -> impl Iterator<Item = &'a Allocation> + 'a {
        self.allocs
            .values()
            .map(Arc::as_ref)
            .filter(move |alloc| alloc.node_id == node)
    }

    pub fn eval(&self, id: &str) -> Option<&Evaluation> {
        self.evals.get(id).map(Arc::as_ref)
    }

    pub fn evals(&self) -> impl Iterator<Item = &Evaluation> {
        self.evals.values().map(Arc::as_ref)
    }

    pub fn services(&self) -> impl Iterator<Item = &ServiceRegistration> {
        self.services.values().map(Arc::as_ref)
    }

    pub fn has_service(&self, id: &str) -> bool {
        self.services.contains_key(id)
    }

    pub fn services_of_alloc<'a>(
        &'a self,
        alloc_id: &'a str,
    ) -> impl Iterator<Item = &'a ServiceRegistration> + 'a {
        self.services()
            .filter(move |service| service.alloc_id == alloc_id)
    }

    /// The allocations whose client-visible part changed since the last call.
    pub fn drain_client_changes(&mut self) -> Vec<AllocId> {
        std::mem::take(&mut self.client_changes)
    }

    // --- writes: only the server's operations call these, inside one indexed write ---

    // invariant: jobspec_unchanged
    pub(super) fn put_job_version(&mut self, job: Job) {
        self.wrote(Record::Job(job.id.as_str().into()));
        let versions = Arc::make_mut(
            Arc::make_mut(&mut self.jobs)
                .entry(job.id.as_str().into())
                .or_default(),
        );
        debug_assert!(
            versions
                .last()
                .is_none_or(|last| last.version < job.version),
            "job {} version {} stored after a later one",
            job.id,
            job.version
        );
        versions.push(job);
        // Nomad's `job_max_versions`: the oldest go (the latest is always kept).
        if let Some(max) = self.max_job_versions {
            let extra = versions.len().saturating_sub(max.max(1));
            versions.drain(..extra);
        }
    }

    /// Marks version `version` of job `id` stable at `index` (its deployment succeeded),
    /// as Nomad's `UpdateJobStability`: that version's `ModifyIndex` moves; its spec does
    /// not change. `false` if the version is no longer stored.
    pub(super) fn mark_stable(&mut self, id: &str, version: u64, index: u64) -> bool {
        if !self.jobs.contains_key(id) {
            return false;
        }
        let Some(stored) = Arc::make_mut(&mut self.jobs)
            .get_mut(id)
            .map(Arc::make_mut)
            .and_then(|versions| versions.iter_mut().find(|v| v.version == version))
        else {
            return false;
        };
        stored.stable = true;
        stored.modify_index = index;
        self.wrote(Record::Job(id.into()));
        true
    }

    /// Keeps at most `max` versions of each job from now on (Nomad's `job_max_versions`,
    /// 6 by default); unset, every version is kept (the simulator's, which the model's
    /// full history follows).
    pub fn limit_job_versions(&mut self, max: usize) {
        self.max_job_versions = Some(max);
    }

    /// The IDs of the jobs that have allocations (a purged job's tombstones included).
    pub fn allocs_by_job_ids(&self) -> impl Iterator<Item = &JobId> {
        self.allocs_by_job.keys()
    }

    pub(super) fn delete_eval(&mut self, id: &str) {
        self.deleting(
            || Record::Eval(id.to_string()),
            |store| Some(Snapshot::Eval(Box::new(store.eval(id)?.clone()))),
        );
        self.wrote(Record::Eval(id.to_string()));
        Arc::make_mut(&mut self.evals).remove(id);
    }

    pub(super) fn delete_job(&mut self, id: &str) {
        self.deleting(
            || Record::Job(id.into()),
            |store| {
                let job = store.job(id)?;
                Some(Snapshot::Job {
                    status: store.job_status(job),
                    job: Box::new(job.clone()),
                    deleted: true,
                })
            },
        );
        self.wrote(Record::Job(id.into()));
        Arc::make_mut(&mut self.jobs).remove(id);
        self.delete_scaling_events(id);
        if self.counts.get(id).is_some_and(|counts| counts.is_empty()) {
            Arc::make_mut(&mut self.counts).remove(id);
        }
    }

    pub(super) fn put_alloc(&mut self, mut alloc: Allocation) {
        self.wrote(Record::Alloc(alloc.id.clone()));
        self.moved_allocs_of(&alloc.job_id);
        if let Some(now) = self.now {
            if alloc.create_time == 0 {
                alloc.create_time = now;
            }
            alloc.modify_time = now;
        }
        Arc::make_mut(&mut self.allocs_by_job)
            .entry(alloc.job_id.clone())
            .or_default()
            .insert(alloc.id.clone());
        let job_id = alloc.job_id.clone();
        let came = Counts::of(&alloc);
        let gone = Arc::make_mut(&mut self.allocs)
            .insert(alloc.id.clone(), Arc::new(alloc))
            .map_or_else(Counts::default, |old| Counts::of(&old));
        self.recount(&job_id, gone, came);
    }

    /// Changes one allocation at `index`. `client_visible` bumps `AllocModifyIndex` too, so
    /// its client will pull it.
    pub(super) fn update_alloc<Q>(
        &mut self,
        id: &Q,
        index: u64,
        client_visible: bool,
        change: impl FnOnce(&mut Allocation),
    ) -> bool
    where
        AllocId: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        // The table is copied if a clone of the store shares it; the record, if an event or
        // a clone holds this version (an event shows it as it was).
        let Some(alloc) = write_shared(&mut self.allocs, id, |allocs| allocs.get_mut(id)) else {
            return false;
        };
        let alloc = Arc::make_mut(alloc);
        debug_assert!(
            index >= alloc.modify_index,
            "indexes only grow: alloc {} written at {index} after {}",
            alloc.id,
            alloc.modify_index
        );
        let key = alloc.id.clone();
        let gone = Counts::of(alloc);
        change(alloc);
        alloc.modify_index = index;
        if let Some(now) = self.now {
            alloc.modify_time = now;
        }
        let came = Counts::of(alloc);
        // The job's ID taken only for what reads it: a change of the counts, or a host that
        // notes what moved (most reports change neither in the simulator).
        let job_id = (gone != came || self.moved.is_some()).then(|| alloc.job_id.clone());
        if client_visible {
            alloc.alloc_modify_index = index;
            self.client_changes.push(key.clone());
        }
        self.wrote(Record::Alloc(key));
        if let Some(job_id) = job_id {
            self.moved_allocs_of(&job_id);
            self.recount(&job_id, gone, came);
        }
        true
    }

    /// Deletes an allocation; journalled, since its client will no longer find it.
    pub(super) fn delete_alloc(&mut self, id: &AllocId) {
        // Its last state is published, as an update. (A purged job's allocations are
        // tombstones here until their client reports them ended, and each update is
        // published; Nomad 1.7.3 and later deletes them in the purge's own write, and
        // publishes nothing of them.)
        self.deleting(
            || Record::Alloc(id.clone()),
            |store| Some(Snapshot::Alloc(Arc::clone(store.alloc_shared(id)?))),
        );
        self.wrote(Record::Alloc(id.clone()));
        if let Some(alloc) = Arc::make_mut(&mut self.allocs).remove(id) {
            self.moved_allocs_of(&alloc.job_id);
            self.recount(&alloc.job_id, Counts::of(&alloc), Counts::default());
            self.client_changes.push(alloc.id.clone());
            let by_job = Arc::make_mut(&mut self.allocs_by_job);
            if let Some(ids) = by_job.get_mut(&alloc.job_id) {
                ids.remove(id);
                if ids.is_empty() {
                    by_job.remove(&alloc.job_id);
                }
            }
        }
    }

    pub(super) fn put_eval(&mut self, mut eval: Evaluation) {
        self.wrote(Record::Eval(eval.id.clone()));
        if let Some(now) = self.now {
            if eval.create_time == 0 {
                eval.create_time = now;
            }
            eval.modify_time = now;
        }
        Arc::make_mut(&mut self.evals).insert(eval.id.clone(), Arc::new(eval));
    }

    pub(super) fn eval_mut(&mut self, id: &str) -> Option<&mut Evaluation> {
        self.wrote(Record::Eval(id.to_string()));
        let now = self.now;
        let eval = Arc::make_mut(write_shared(&mut self.evals, id, |evals| {
            evals.get_mut(id)
        })?);
        if let Some(now) = now {
            eval.modify_time = now;
        }
        Some(eval)
    }

    pub(super) fn put_service(&mut self, service: ServiceRegistration) {
        self.wrote(Record::Service(service.id.clone()));
        Arc::make_mut(&mut self.services).insert(service.id.clone(), Arc::new(service));
    }

    /// Deletes a service registration if there is one; the write is recorded either way.
    pub(super) fn delete_service(&mut self, id: String) -> bool {
        self.deleting(
            || Record::Service(id.clone()),
            |store| {
                let service = store.service(&id)?;
                Some(Snapshot::Service {
                    owner: store.service_owner(service),
                    service: service.clone(),
                    deleted: true,
                })
            },
        );
        // Removed before the write is noted (which reads no table), so that the noted
        // record takes the ID itself.
        let deleted =
            write_shared(&mut self.services, &*id, |services| services.remove(&*id)).is_some();
        self.wrote(Record::Service(id));
        deleted
    }

    pub fn node(&self, id: &str) -> Option<&Node> {
        self.nodes.get(id)
    }

    pub fn nodes(&self) -> impl Iterator<Item = &Node> {
        self.nodes.values()
    }

    pub(super) fn put_node(&mut self, node: Node) {
        self.wrote(Record::Node(node.id.clone()));
        Arc::make_mut(&mut self.nodes).insert(node.id.clone(), node);
    }
}

/// Writes `key`'s entry of a table shared between copies of the store (`write` gets the
/// table, this copy's own): the table copied first if another copy shares it, and then only
/// if the key is in it; `None` if it is not. One lookup besides `write`'s while the table is
/// shared, none while this copy has it to itself (after its first write).
fn write_shared<'a, K, V, Q, R>(
    table: &'a mut Arc<BTreeMap<K, V>>,
    key: &Q,
    write: impl FnOnce(&'a mut BTreeMap<K, V>) -> Option<R>,
) -> Option<R>
where
    K: Ord + Clone + Borrow<Q>,
    V: Clone,
    Q: Ord + ?Sized,
{
    if Arc::get_mut(table).is_none() && !table.contains_key(key) {
        return None;
    }
    write(Arc::make_mut(table))
}

#[cfg(test)]
mod tests;
