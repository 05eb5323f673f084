//! The event journal's side of the store: when a write ends, each record it changed becomes
//! an event carrying the record as that write left it, whether or not a stream is open, so
//! a stream opened later on an old index replays history as it was.
//!
//! An allocation's event shares the store's record (`Arc`): the store copies a record only
//! when a later write changes a version an event still holds (`Arc::make_mut` in
//! `update_alloc`), and that copy shares the allocation's job (its task states are copied).
//! Jobs, evaluations, services and nodes, written far less often, are copied when the write
//! ends.

use super::{OpenWrite, Record, StateStore};
use crate::server::events::{Batch, Event, EventJournal, ServiceOwner, Snapshot, Topic, WriteType};
use crate::server::structs::ServiceRegistration;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

impl StateStore {
    /// Starts keeping the event journal (see [`super::events`]): every write from now on
    /// publishes what it changed.
    pub fn journal_events(&mut self) {
        self.events.get_or_insert_with(EventJournal::default);
    }

    /// The event journal up to the last write (which has ended: readers look between
    /// writes), if one is kept.
    pub fn events(&mut self) -> Option<&EventJournal> {
        self.close_write();
        self.events.as_ref()
    }

    /// Ends the write in progress: its events go to the journal, each with its record as
    /// the write left it (or, deleted, as it was).
    pub(super) fn close_write(&mut self) {
        let Some(open) = self.open.take() else {
            return;
        };
        let OpenWrite {
            index,
            kind,
            order,
            mut deleted,
        } = open;
        let mut seen = BTreeSet::new();
        let mut events = Vec::with_capacity(order.len());
        for record in &order {
            if !seen.insert(record) {
                continue;
            }
            let event = self
                .snapshot_of(record)
                .or_else(|| deleted.remove(record))
                .map(|snapshot| event_of(kind, snapshot))
                // A write that publishes nothing of a topic (a collection's evaluations).
                .filter(|event| !event.event_type.is_empty());
            events.extend(event);
        }
        if let Some(journal) = self.events.as_mut() {
            journal.push(Batch { index, events });
        }
    }

    /// A record as it is now, as an event shows it (`None` if it is gone).
    pub fn snapshot_of(&self, record: &Record) -> Option<Snapshot> {
        match record {
            // No topic carries them (nor any of Nomad's).
            Record::Index | Record::ScalingEvents(_) => None,
            Record::Job(id) => self.job(id).map(|job| Snapshot::Job {
                status: self.job_status(job),
                job: Box::new(job.clone()),
                deleted: false,
            }),
            Record::Alloc(id) => self.alloc_shared(id).cloned().map(Snapshot::Alloc),
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
            Record::Deployment(id) => self
                .deployment(id)
                .map(|deployment| Snapshot::Deployment(Box::new(deployment.clone()))),
        }
    }

    pub(super) fn service_owner(&self, service: &ServiceRegistration) -> Option<ServiceOwner> {
        self.alloc_for_client(&service.alloc_id)
            .map(|alloc| ServiceOwner {
                job: alloc.job.clone(),
                task_group: alloc.task_group.clone(),
                ports: alloc.ports.clone(),
                namespace: alloc.namespace.clone(),
            })
    }

    /// Keeps what a write deletes, for its event (`record` made only then: a store without
    /// events, as the simulator's, pays nothing).
    pub(super) fn deleting(
        &mut self,
        record: impl FnOnce() -> Record,
        snapshot: impl FnOnce(&Self) -> Option<Snapshot>,
    ) {
        if self.events.is_none() {
            return;
        }
        if let Some(snapshot) = snapshot(self) {
            let index = self.index;
            self.open
                .get_or_insert_with(|| OpenWrite::new(index, WriteType::Acl))
                .deleted
                .insert(record(), snapshot);
        }
    }
}

impl OpenWrite {
    pub(super) fn new(index: u64, kind: WriteType) -> OpenWrite {
        OpenWrite {
            index,
            kind,
            order: Vec::new(),
            deleted: BTreeMap::new(),
        }
    }
}

/// The event of one record a write of `kind` changed.
fn event_of(kind: WriteType, snapshot: Snapshot) -> Event {
    let (topic, key, filter_keys, namespace) = match &snapshot {
        Snapshot::Alloc(alloc) => (
            Topic::Allocation,
            alloc.id.to_string(),
            vec![alloc.job_id.to_string(), String::new()],
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
            vec![eval.job_id.to_string(), String::new()],
            eval.namespace.clone(),
        ),
        Snapshot::Service { service, owner, .. } => (
            Topic::Service,
            service.id.clone(),
            vec![service.job_id.to_string(), service.service_name.clone()],
            owner
                .as_ref()
                .map_or_else(|| "default".to_string(), |o| o.namespace.clone()),
        ),
        Snapshot::Node(node) => (Topic::Node, node.id.to_string(), Vec::new(), String::new()),
        Snapshot::Deployment(deployment) => (
            Topic::Deployment,
            deployment.id.clone(),
            vec![deployment.job_id.to_string()],
            deployment.namespace.clone(),
        ),
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
