//! The state store: tables for jobs (every version kept), allocations, evaluations, nodes and
//! service registrations, and one monotonically increasing index. Every server write is one
//! call that takes the next index once and changes the tables together, as Nomad's FSM
//! applies one raft entry. Each table also keeps the index of its last write (Nomad's
//! `index` table): a list answers, and blocks on, its own table's index, so a write to one
//! table does not wake the readers of another.

use super::events::{
    Batch, Event, EventJournal, LightWrite, ServiceOwner, Snapshot, Topic, WriteType,
};
use super::structs::{
    AllocId, Allocation, EvalId, Evaluation, JobId, Node, NodeId, ServiceRegistration,
};
use crate::spec::Job;
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
}

#[derive(Clone, Debug, Default)]
pub struct StateStore {
    index: u64,
    /// Every stored version of each job, oldest first. A purged job is gone.
    jobs: BTreeMap<JobId, Vec<Job>>,
    allocs: BTreeMap<AllocId, Allocation>,
    /// Allocation IDs by job, so a job's allocations are found without a scan.
    allocs_by_job: BTreeMap<JobId, BTreeSet<AllocId>>,
    evals: BTreeMap<EvalId, Evaluation>,
    services: BTreeMap<String, ServiceRegistration>,
    nodes: BTreeMap<NodeId, Node>,
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
    /// At most this many versions of each job are kept (`None`: all).
    max_job_versions: Option<usize>,
}

/// A write's changes until it ends (the next write starts, or a reader looks): its
/// records, in the order first changed, and those it deleted, as they were.
#[derive(Clone, Debug)]
struct OpenWrite {
    index: u64,
    kind: WriteType,
    /// A stream was open when the write started: its events carry copies of the records.
    copies: bool,
    /// In the order first changed; without copies, possibly repeated (made unique only
    /// when a subscriber asks: the kill path pays one push per change).
    order: Vec<Record>,
    seen: BTreeSet<Record>,
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
}

impl StateStore {
    /// A store rebuilt from a durable copy, journalling its writes from now on.
    /// A store rebuilt from a durable copy, journalling its writes from now on. A table's
    /// index is the one stored, or, if none was (or it is older), its newest record's.
    pub fn restore(index: u64, tables: Tables, indexes: TableIndexes) -> Self {
        let Tables {
            jobs,
            allocs,
            evals,
            services,
            nodes,
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
        };
        let mut store = StateStore {
            index,
            jobs,
            written: Some(BTreeSet::new()),
            ..StateStore::default()
        };
        for alloc in allocs {
            store.put_alloc(alloc);
        }
        for eval in evals {
            store.put_eval(eval);
        }
        for service in services {
            store.put_service(service);
        }
        for node in nodes {
            store.put_node(node);
        }
        store.table_indexes = table_indexes;
        store.written = Some(BTreeSet::new());
        store
    }

    /// Starts journalling writes (see [`StateStore::drain_written`]).
    pub fn journal_writes(&mut self) {
        self.written.get_or_insert_with(BTreeSet::new);
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
        }
        if self.events.is_some() && record != Record::Index {
            let copies = self.events.as_ref().is_some_and(EventJournal::subscribed);
            let open = self
                .open
                .get_or_insert_with(|| OpenWrite::new(index, WriteType::Acl, copies));
            if !open.copies {
                if open.order.last() != Some(&record) {
                    open.order.push(record.clone());
                }
            } else if open.seen.insert(record.clone()) {
                open.order.push(record.clone());
            }
        }
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
        self.jobs.get(id)
    }

    /// An allocation, tombstone or not (for a durable copy).
    pub fn alloc_record(&self, id: &str) -> Option<&Allocation> {
        self.allocs.get(id)
    }

    pub fn service(&self, id: &str) -> Option<&ServiceRegistration> {
        self.services.get(id)
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
        if let Some(journal) = &self.events {
            self.open = Some(OpenWrite::new(self.index, kind, journal.subscribed()));
        }
        self.index
    }

    /// Starts keeping the event journal (see [`super::events`]): every write from now on
    /// publishes what it changed.
    pub fn journal_events(&mut self) {
        self.events.get_or_insert_with(EventJournal::default);
    }

    /// The event journal up to the last write (which has ended: readers look between
    /// writes), if one is kept.
    pub fn events(&mut self) -> Option<&EventJournal> {
        self.close_write();
        self.convert_light();
        self.events.as_ref()
    }

    /// The writes made while nobody was subscribed, made into batches (in index order,
    /// after every batch kept: they are newer), each event naming its record.
    fn convert_light(&mut self) {
        let Some(light) = self.events.as_mut().map(EventJournal::take_light) else {
            return;
        };
        for write in light {
            let mut seen = BTreeSet::new();
            let mut deleted = write.deleted;
            let events: Vec<Event> = write
                .order
                .into_iter()
                .filter(|record| seen.insert(record.clone()))
                .filter_map(|record| {
                    self.named(write.kind, &record).or_else(|| {
                        deleted
                            .remove(&record)
                            .map(|snapshot| event_of(write.kind, snapshot))
                    })
                })
                // A write that publishes nothing of a topic (a collection's evaluations).
                .filter(|event| !event.event_type.is_empty())
                .collect();
            if let Some(journal) = self.events.as_mut() {
                journal.push(Batch {
                    index: write.index,
                    events,
                });
            }
        }
    }

    /// Ends the write in progress: its events go to the journal, each with its record as
    /// it is now (or, deleted, as it was) while a stream is open, else naming the record.
    fn close_write(&mut self) {
        let Some(open) = self.open.take() else {
            return;
        };
        let OpenWrite {
            index,
            kind,
            copies: open_copies,
            order,
            mut deleted,
            ..
        } = open;
        if !open_copies {
            // Nobody subscribed: which records changed, made into events only if a
            // subscriber asks (`events`).
            if let Some(journal) = self.events.as_mut() {
                journal.push_light(LightWrite {
                    index,
                    kind,
                    order,
                    deleted,
                });
            }
            return;
        }
        let mut events = Vec::with_capacity(order.len());
        for record in order {
            let event = self
                .snapshot_of(&record)
                .or_else(|| deleted.remove(&record))
                .map(|snapshot| event_of(kind, snapshot))
                .filter(|event| !event.event_type.is_empty());
            events.extend(event);
        }
        if let Some(journal) = self.events.as_mut() {
            journal.push(Batch { index, events });
        }
    }

    /// A stream opens, or closes (see [`EventJournal::subscribe`]).
    pub fn subscribe_events(&mut self, open: bool) {
        self.close_write();
        // Before the first copying write: the batches stay in index order.
        self.convert_light();
        if let Some(journal) = self.events.as_mut() {
            if open {
                journal.subscribe();
            } else {
                journal.unsubscribe();
            }
        }
    }

    /// A record as it is now, as an event shows it (`None` if it is gone).
    pub fn snapshot_of(&self, record: &Record) -> Option<Snapshot> {
        match record {
            Record::Index => None,
            Record::Job(id) => self.job(id).map(|job| Snapshot::Job {
                status: self.job_status(job),
                job: Box::new(job.clone()),
                deleted: false,
            }),
            Record::Alloc(id) => self
                .alloc_for_client(id)
                .map(|alloc| Snapshot::Alloc(Box::new(alloc.clone()))),
            Record::Eval(id) => self
                .eval(id)
                .map(|eval| Snapshot::Eval(Box::new(eval.clone()))),
            Record::Service(id) => self.service(id).map(|service| Snapshot::Service {
                owner: self.service_owner(service),
                service: service.clone(),
                deleted: false,
            }),
            Record::Node(id) => self
                .node(id)
                .map(|node| Snapshot::Node(Box::new(node.clone()))),
        }
    }

    /// The event of a record that exists, naming it rather than copying it.
    fn named(&self, kind: WriteType, record: &Record) -> Option<Event> {
        let (topic, key, filter_keys, namespace) = match record {
            Record::Index => return None,
            Record::Job(id) => {
                let job = self.job(id)?;
                (Topic::Job, id.clone(), Vec::new(), job.namespace.clone())
            }
            Record::Alloc(id) => {
                let alloc = self.alloc_for_client(id)?;
                let keys = vec![alloc.job_id.clone(), String::new()];
                (Topic::Allocation, id.clone(), keys, alloc.namespace.clone())
            }
            Record::Eval(id) => {
                let eval = self.eval(id)?;
                let keys = vec![eval.job_id.clone(), String::new()];
                (Topic::Evaluation, id.clone(), keys, eval.namespace.clone())
            }
            Record::Service(id) => {
                let service = self.service(id)?;
                let keys = vec![service.job_id.clone(), service.service_name.clone()];
                let namespace = self
                    .alloc_for_client(&service.alloc_id)
                    .map_or_else(|| "default".to_string(), |a| a.namespace.clone());
                (Topic::Service, id.clone(), keys, namespace)
            }
            Record::Node(id) => {
                self.node(id)?;
                (Topic::Node, id.clone(), Vec::new(), String::new())
            }
        };
        Some(Event {
            topic,
            event_type: kind.event_type(topic),
            key,
            filter_keys,
            namespace,
            snapshot: Arc::new(Snapshot::Current(record.clone())),
        })
    }

    fn service_owner(&self, service: &ServiceRegistration) -> Option<ServiceOwner> {
        self.alloc_for_client(&service.alloc_id)
            .map(|alloc| ServiceOwner {
                job: alloc.job.clone(),
                task_group: alloc.task_group.clone(),
                ports: alloc.ports.clone(),
                namespace: alloc.namespace.clone(),
            })
    }

    /// Keeps what a write deletes, for its event.
    fn deleting(&mut self, record: Record, snapshot: impl FnOnce(&Self) -> Option<Snapshot>) {
        if self.events.is_none() {
            return;
        }
        if let Some(snapshot) = snapshot(self) {
            let index = self.index;
            let copies = self.events.as_ref().is_some_and(EventJournal::subscribed);
            self.open
                .get_or_insert_with(|| OpenWrite::new(index, WriteType::Acl, copies))
                .deleted
                .insert(record, snapshot);
        }
    }

    /// Nomad's job status: `running` while an allocation runs, `dead` once stopped (or
    /// done) with none running, `pending` before any ran.
    pub fn job_status(&self, job: &Job) -> &'static str {
        let mut any = false;
        let mut live = false;
        for alloc in self.allocs_by_job(&job.id).filter(|a| !a.tombstone) {
            any = true;
            live |= !alloc.client_status.is_terminal();
        }
        match (live, job.stop, any) {
            (true, _, _) => "running",
            (false, true, _) | (false, false, true) => "dead",
            (false, false, false) => "pending",
        }
    }

    pub fn job(&self, id: &str) -> Option<&Job> {
        self.jobs.get(id).and_then(|versions| versions.last())
    }

    pub fn job_versions(&self, id: &str) -> Option<&[Job]> {
        self.jobs.get(id).map(Vec::as_slice)
    }

    pub fn jobs(&self) -> impl Iterator<Item = &Job> {
        self.jobs.values().filter_map(|versions| versions.last())
    }

    /// An allocation as the API shows it: tombstones are not found (Nomad answers 404 once a
    /// job is purged).
    pub fn alloc(&self, id: &str) -> Option<&Allocation> {
        self.allocs.get(id).filter(|alloc| !alloc.tombstone)
    }

    /// An allocation as its client pulls it, tombstones included.
    pub fn alloc_for_client(&self, id: &str) -> Option<&Allocation> {
        self.allocs.get(id)
    }

    /// Every allocation of a job, tombstones included, in ID order.
    pub fn allocs_by_job(&self, job_id: &str) -> impl Iterator<Item = &Allocation> {
        self.allocs_by_job
            .get(job_id)
            .into_iter()
            .flatten()
            .filter_map(|id| self.allocs.get(id))
    }

    pub fn allocs(&self) -> impl Iterator<Item = &Allocation> {
        self.allocs.values().filter(|alloc| !alloc.tombstone)
    }

    /// Every allocation placed on a node, tombstones included (what its client pulls).
    pub fn allocs_for_node<'a>(
        &'a self,
        node: &'a str,
    ) -> impl Iterator<Item = &'a Allocation> + 'a {
        self.allocs
            .values()
            .filter(move |alloc| alloc.node_id == node)
    }

    /// Allocations placed on a node and not terminal: its load, for placement.
    pub fn live_allocs_on_node(&self, node: &str) -> usize {
        self.allocs
            .values()
            .filter(|a| a.node_id == node && !a.is_terminal())
            .count()
    }

    pub fn eval(&self, id: &str) -> Option<&Evaluation> {
        self.evals.get(id)
    }

    pub fn evals(&self) -> impl Iterator<Item = &Evaluation> {
        self.evals.values()
    }

    pub fn services(&self) -> impl Iterator<Item = &ServiceRegistration> {
        self.services.values()
    }

    pub fn has_service(&self, id: &str) -> bool {
        self.services.contains_key(id)
    }

    pub fn services_of_alloc<'a>(
        &'a self,
        alloc_id: &'a str,
    ) -> impl Iterator<Item = &'a ServiceRegistration> + 'a {
        self.services
            .values()
            .filter(move |service| service.alloc_id == alloc_id)
    }

    /// The allocations whose client-visible part changed since the last call.
    pub fn drain_client_changes(&mut self) -> Vec<AllocId> {
        std::mem::take(&mut self.client_changes)
    }

    // --- writes: only the server's operations call these, inside one indexed write ---

    pub(super) fn put_job_version(&mut self, job: Job) {
        self.wrote(Record::Job(job.id.clone()));
        let versions = self.jobs.entry(job.id.clone()).or_default();
        versions.push(job);
        // Nomad's `job_max_versions`: the oldest go (the latest is always kept).
        if let Some(max) = self.max_job_versions {
            let extra = versions.len().saturating_sub(max.max(1));
            versions.drain(..extra);
        }
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
        self.deleting(Record::Eval(id.to_string()), |store| {
            Some(Snapshot::Eval(Box::new(store.eval(id)?.clone())))
        });
        self.wrote(Record::Eval(id.to_string()));
        self.evals.remove(id);
    }

    pub(super) fn delete_job(&mut self, id: &str) {
        self.deleting(Record::Job(id.to_string()), |store| {
            let job = store.job(id)?;
            Some(Snapshot::Job {
                status: store.job_status(job),
                job: Box::new(job.clone()),
                deleted: true,
            })
        });
        self.wrote(Record::Job(id.to_string()));
        self.jobs.remove(id);
    }

    pub(super) fn put_alloc(&mut self, alloc: Allocation) {
        self.wrote(Record::Alloc(alloc.id.clone()));
        self.allocs_by_job
            .entry(alloc.job_id.clone())
            .or_default()
            .insert(alloc.id.clone());
        self.allocs.insert(alloc.id.clone(), alloc);
    }

    /// Changes one allocation at `index`. `client_visible` bumps `AllocModifyIndex` too, so
    /// its client will pull it.
    pub(super) fn update_alloc(
        &mut self,
        id: &str,
        index: u64,
        client_visible: bool,
        change: impl FnOnce(&mut Allocation),
    ) -> bool {
        if !self.allocs.contains_key(id) {
            return false;
        }
        self.wrote(Record::Alloc(id.to_string()));
        let alloc = self.allocs.get_mut(id).expect("checked");
        change(alloc);
        alloc.modify_index = index;
        if client_visible {
            alloc.alloc_modify_index = index;
            self.client_changes.push(alloc.id.clone());
        }
        true
    }

    /// Deletes an allocation; journalled, since its client will no longer find it.
    pub(super) fn delete_alloc(&mut self, id: &str) {
        // Its last state is published, as an update. (A purged job's allocations are
        // tombstones here until their client reports them ended, and each update is
        // published; Nomad 1.7.3 and later deletes them in the purge's own write, and
        // publishes nothing of them.)
        self.deleting(Record::Alloc(id.to_string()), |store| {
            Some(Snapshot::Alloc(Box::new(
                store.alloc_for_client(id)?.clone(),
            )))
        });
        self.wrote(Record::Alloc(id.to_string()));
        if let Some(alloc) = self.allocs.remove(id) {
            self.client_changes.push(alloc.id.clone());
            if let Some(ids) = self.allocs_by_job.get_mut(&alloc.job_id) {
                ids.remove(id);
                if ids.is_empty() {
                    self.allocs_by_job.remove(&alloc.job_id);
                }
            }
        }
    }

    pub(super) fn put_eval(&mut self, eval: Evaluation) {
        self.wrote(Record::Eval(eval.id.clone()));
        self.evals.insert(eval.id.clone(), eval);
    }

    pub(super) fn eval_mut(&mut self, id: &str) -> Option<&mut Evaluation> {
        self.wrote(Record::Eval(id.to_string()));
        self.evals.get_mut(id)
    }

    pub(super) fn put_service(&mut self, service: ServiceRegistration) {
        self.wrote(Record::Service(service.id.clone()));
        self.services.insert(service.id.clone(), service);
    }

    pub(super) fn delete_service(&mut self, id: &str) -> bool {
        self.deleting(Record::Service(id.to_string()), |store| {
            let service = store.service(id)?;
            Some(Snapshot::Service {
                owner: store.service_owner(service),
                service: service.clone(),
                deleted: true,
            })
        });
        self.wrote(Record::Service(id.to_string()));
        self.services.remove(id).is_some()
    }

    pub fn node(&self, id: &str) -> Option<&Node> {
        self.nodes.get(id)
    }

    pub fn nodes(&self) -> impl Iterator<Item = &Node> {
        self.nodes.values()
    }

    pub(super) fn put_node(&mut self, node: Node) {
        self.wrote(Record::Node(node.id.clone()));
        self.nodes.insert(node.id.clone(), node);
    }

    /// The node an allocation runs on, for hosts that route pulls.
    pub fn node_of(&self, alloc_id: &str) -> Option<&NodeId> {
        self.allocs.get(alloc_id).map(|alloc| &alloc.node_id)
    }
}

impl OpenWrite {
    fn new(index: u64, kind: WriteType, copies: bool) -> OpenWrite {
        OpenWrite {
            index,
            kind,
            copies,
            order: Vec::new(),
            seen: BTreeSet::new(),
            deleted: BTreeMap::new(),
        }
    }
}

/// The event of one record a write of `kind` changed.
fn event_of(kind: WriteType, snapshot: Snapshot) -> Event {
    let (topic, key, filter_keys, namespace) = match &snapshot {
        Snapshot::Alloc(alloc) => (
            Topic::Allocation,
            alloc.id.clone(),
            vec![alloc.job_id.clone(), String::new()],
            alloc.namespace.clone(),
        ),
        Snapshot::Job { job, .. } => (
            Topic::Job,
            job.id.clone(),
            Vec::new(),
            job.namespace.clone(),
        ),
        Snapshot::Eval(eval) => (
            Topic::Evaluation,
            eval.id.clone(),
            vec![eval.job_id.clone(), String::new()],
            eval.namespace.clone(),
        ),
        Snapshot::Service { service, owner, .. } => (
            Topic::Service,
            service.id.clone(),
            vec![service.job_id.clone(), service.service_name.clone()],
            owner
                .as_ref()
                .map_or_else(|| "default".to_string(), |o| o.namespace.clone()),
        ),
        Snapshot::Node(node) => (Topic::Node, node.id.clone(), Vec::new(), String::new()),
        Snapshot::Current(_) => unreachable!("events naming their records are made by `named`"),
    };
    Event {
        topic,
        event_type: kind.event_type(topic),
        key,
        filter_keys,
        namespace,
        snapshot: Arc::new(snapshot),
    }
}
