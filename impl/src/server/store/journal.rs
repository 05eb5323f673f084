//! The event journal's side of the store: a write's changes become events when it ends,
//! carrying copies of the records while a stream is open, or naming them otherwise (made
//! into events only if a subscriber asks).

use super::{OpenWrite, Record, StateStore};
use crate::server::events::{
    Batch, Event, EventJournal, LightWrite, ServiceOwner, Snapshot, Topic, WriteType,
};
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
        self.convert_light();
        self.events.as_ref()
    }

    /// The writes made while nobody was subscribed, made into batches (in index order,
    /// after every batch kept: they are newer), each event naming its record.
    pub(super) fn convert_light(&mut self) {
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
    pub(super) fn close_write(&mut self) {
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

    pub(super) fn service_owner(&self, service: &ServiceRegistration) -> Option<ServiceOwner> {
        self.alloc_for_client(&service.alloc_id)
            .map(|alloc| ServiceOwner {
                job: alloc.job.clone(),
                task_group: alloc.task_group.clone(),
                ports: alloc.ports.clone(),
                namespace: alloc.namespace.clone(),
            })
    }

    /// Keeps what a write deletes, for its event.
    pub(super) fn deleting(
        &mut self,
        record: Record,
        snapshot: impl FnOnce(&Self) -> Option<Snapshot>,
    ) {
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
}

impl OpenWrite {
    pub(super) fn new(index: u64, kind: WriteType, copies: bool) -> OpenWrite {
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
