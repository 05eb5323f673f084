//! The server's event journal: what each write changed, as Nomad's event stream
//! (`/v1/event/stream`) publishes it — one batch per index, one event per record the write
//! changed (an allocation, a job, an evaluation, a service registration, a node), typed by
//! the kind of write, carrying the record as it was when the write ended.
//!
//! The store keeps the journal only where a host asks for it (the daemon; the simulator,
//! which clones stores freely, does not), and keeps a bounded suffix of it:
//! [`MAX_EVENTS`] events, whether or not a stream is open, each with the record as its
//! write left it — so a stream opened on an old index replays what happened, not today's
//! records. A subscriber that has fallen behind what is kept learns it
//! ([`EventJournal::since`]), so it never skips an event unknowingly.
//!
//! An allocation's event shares its record with the store (see `store/journal.rs`), so the
//! kill path pays for a copy only when it writes a version an event holds, and that copy
//! shares the job.
//!
//! What the journal costs (`QUIESCE_NO_JOURNAL=1` starts an agent without it, for this
//! measurement; it serves no stream): 12 flagged stops of 1,000 `/bin/sleep` allocations
//! per variant, interleaved, on 2 cores, nobody subscribed (`benches/benches/http_stop.rs`
//! with `QUIESCE_BENCH_STOPS=2 QUIESCE_BENCH_ALLOCS=1000`). Median 253 ms against 258 ms
//! without it, within the noise; peak RSS over two such stops (about 12,000 events, near
//! the bound) 101 MB against 73 MB, so a full journal holds about 30 MB. Copying every
//! changed record at every write, before records were shared, cost 329 ms against 219.

use super::structs::{AllocatedPort, Allocation, Evaluation, Id, Node, ServiceRegistration};
use crate::spec::Job;
use std::collections::VecDeque;
use std::sync::Arc;

/// The most events the journal keeps: older batches are dropped whole. A stop of 1,000
/// allocations makes about 5,000 (a flag, a plan, and each allocation's service
/// deregistrations and reports).
pub const MAX_EVENTS: usize = 16_384;

/// The kind of a write: the event `Type` of what it changed, as Nomad names the message
/// type of its raft entry (`nomad/state/events.go`, read for facts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteType {
    JobRegister,
    JobDeregister,
    /// An `alloc stop`: the allocation's desired transition and its evaluation.
    AllocStop,
    /// A client's report of its allocation.
    AllocClientUpdate,
    /// An evaluation processed: its plan's allocations and the evaluations it updated or
    /// made (in Nomad, a plan result and an evaluation update).
    Plan,
    ServiceRegister,
    ServiceDeregister,
    NodeRegister,
    NodeUpdate,
    /// An ACL write: its records are not the store's, and publish nothing.
    Acl,
    /// A garbage collection pass: its deletions publish nothing but the jobs' (Nomad's
    /// `JobBatchDeregistered`).
    GarbageCollect,
    /// An operator's write to a deployment (pause, resume, fail, promote), with the
    /// evaluation it asks for and an auto-revert's job version.
    DeploymentStatusUpdate,
    /// A scaling event recorded (`job scale`): no topic carries it, as none of Nomad's does.
    ScalingEvent,
}

impl WriteType {
    /// The `Type` of an event of `topic` made by a write of this kind.
    pub fn event_type(self, topic: Topic) -> &'static str {
        match (self, topic) {
            (_, Topic::Deployment) => "DeploymentStatusUpdate",
            (WriteType::JobRegister, _) => "JobRegistered",
            (WriteType::JobDeregister, _) => "JobDeregistered",
            (WriteType::AllocStop, _) => "AllocationUpdateDesiredStatus",
            (WriteType::AllocClientUpdate, _) => "AllocationUpdated",
            (WriteType::Plan, Topic::Evaluation) => "EvaluationUpdated",
            (WriteType::Plan, _) => "PlanResult",
            (WriteType::ServiceRegister, _) => "ServiceRegistration",
            (WriteType::ServiceDeregister, _) => "ServiceDeregistration",
            (WriteType::NodeRegister, _) => "NodeRegistration",
            (WriteType::NodeUpdate, _) => "NodeStreamEvent",
            (WriteType::Acl, _) => "",
            (WriteType::GarbageCollect, Topic::Job) => "JobBatchDeregistered",
            (WriteType::GarbageCollect, _) => "",
            (WriteType::DeploymentStatusUpdate, Topic::Job) => "JobRegistered",
            (WriteType::DeploymentStatusUpdate, _) => "EvaluationUpdated",
            (WriteType::ScalingEvent, _) => "",
        }
    }
}

/// The topics the journal publishes (Nomad's other topics carry no events here).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Topic {
    Allocation,
    Job,
    Evaluation,
    Service,
    Node,
    Deployment,
}

impl Topic {
    pub fn name(self) -> &'static str {
        match self {
            Topic::Allocation => "Allocation",
            Topic::Job => "Job",
            Topic::Evaluation => "Evaluation",
            Topic::Service => "Service",
            Topic::Node => "Node",
            Topic::Deployment => "Deployment",
        }
    }
}

/// A record as it was when the write that changed it ended.
#[derive(Clone, Debug)]
pub enum Snapshot {
    /// Shared with the store until a write changes the record.
    Alloc(Arc<Allocation>),
    /// The job's latest version, its status then, and whether the write deleted it (a
    /// purge: the version it had).
    Job {
        job: Box<Job>,
        status: &'static str,
        deleted: bool,
    },
    Eval(Box<Evaluation>),
    /// A registration, deregistered or not, and what of its allocation a reader shows with
    /// it (the spec its tags and port come from, the ports, the namespace).
    Service {
        service: ServiceRegistration,
        owner: Option<ServiceOwner>,
        deleted: bool,
    },
    Node(Box<Node>),
    Deployment(Box<super::structs::Deployment>),
}

/// What a service registration's allocation adds to it when shown.
#[derive(Clone, Debug)]
pub struct ServiceOwner {
    pub job: Arc<Job>,
    pub task_group: Id,
    pub ports: Vec<AllocatedPort>,
    pub namespace: String,
}

/// One event: a record a write changed.
#[derive(Clone, Debug)]
pub struct Event {
    pub topic: Topic,
    pub event_type: &'static str,
    /// The record's ID (a job's ID, a service registration's ID, …).
    pub key: String,
    /// Other keys a subscriber may filter on: an allocation's and an evaluation's job (and
    /// deployment, always empty here), a service's job and name.
    pub filter_keys: Vec<String>,
    /// Empty for a node.
    pub namespace: String,
    pub snapshot: Arc<Snapshot>,
}

/// Every event of one write.
#[derive(Debug)]
pub struct Batch {
    pub index: u64,
    pub events: Vec<Event>,
}

/// The journal's kept suffix.
#[derive(Clone, Debug, Default)]
pub struct EventJournal {
    batches: VecDeque<Arc<Batch>>,
    events: usize,
    /// The highest index of a batch dropped to keep the bound (0: none dropped).
    dropped_through: u64,
}

/// What a subscriber gets from [`EventJournal::since`].
#[derive(Debug)]
pub enum Since {
    /// The batches after the index asked for (none: nothing new yet).
    Batches(Vec<Arc<Batch>>),
    /// Batches after that index were dropped before the subscriber read them.
    FellBehind { dropped_through: u64 },
}

impl EventJournal {
    pub(super) fn push(&mut self, batch: Batch) {
        if batch.events.is_empty() {
            return;
        }
        self.events += batch.events.len();
        self.batches.push_back(Arc::new(batch));
        while self.events > MAX_EVENTS && self.batches.len() > 1 {
            let dropped = self.batches.pop_front().expect("more than one");
            self.events -= dropped.events.len();
            self.dropped_through = self.dropped_through.max(dropped.index);
        }
    }

    /// Where a new subscription that asked for `index` starts: there, or, if that part was
    /// dropped, at the oldest batch kept (as Nomad starts "at the next available index").
    pub fn start(&self, index: u64) -> u64 {
        index.max(self.dropped_through + 1)
    }

    /// The batches of index `from` and later, at most `limit` of them.
    pub fn since(&self, from: u64, limit: usize) -> Since {
        if self.dropped_through > 0 && from <= self.dropped_through {
            return Since::FellBehind {
                dropped_through: self.dropped_through,
            };
        }
        let first = self.batches.partition_point(|b| b.index < from);
        Since::Batches(self.batches.range(first..).take(limit).cloned().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(index: u64, events: usize) -> Batch {
        let node = Node {
            id: "n".into(),
            create_index: index,
            modify_index: index,
            ..Node::default()
        };
        let event = Event {
            topic: Topic::Node,
            event_type: "NodeRegistration",
            key: "n".into(),
            filter_keys: Vec::new(),
            namespace: String::new(),
            snapshot: Arc::new(Snapshot::Node(Box::new(node))),
        };
        Batch {
            index,
            events: vec![event; events],
        }
    }

    fn indexes(since: Since) -> Vec<u64> {
        match since {
            Since::Batches(batches) => batches.iter().map(|b| b.index).collect(),
            Since::FellBehind { dropped_through } => panic!("fell behind {dropped_through}"),
        }
    }

    #[test]
    fn a_subscriber_gets_the_batches_from_its_index_on_and_is_told_when_it_fell_behind() {
        let mut journal = EventJournal::default();
        journal.push(batch(3, 1));
        journal.push(batch(5, 2));
        journal.push(batch(6, 0)); // a write that changed nothing published
        assert_eq!(indexes(journal.since(0, 10)), vec![3, 5]);
        assert_eq!(indexes(journal.since(1, 10)), vec![3, 5]);
        assert_eq!(indexes(journal.since(4, 10)), vec![5]);
        assert_eq!(indexes(journal.since(6, 10)), Vec::<u64>::new());
        assert_eq!(indexes(journal.since(1, 1)), vec![3]);
        // Past the bound, whole batches go, oldest first.
        journal.push(batch(9, MAX_EVENTS - 3));
        assert_eq!(indexes(journal.since(4, 10)), vec![5, 9]);
        journal.push(batch(10, 2));
        assert_eq!(indexes(journal.since(6, 10)), vec![9, 10]);
        assert!(matches!(
            journal.since(5, 10),
            Since::FellBehind { dropped_through: 5 }
        ));
        // A new subscription for a dropped part starts at what is kept.
        assert_eq!(journal.start(0), 6);
        assert_eq!(journal.start(8), 8);
        // One batch larger than the bound is kept whole, alone.
        journal.push(batch(11, MAX_EVENTS + 5));
        assert_eq!(indexes(journal.since(11, 10)), vec![11]);
        assert!(matches!(journal.since(10, 10), Since::FellBehind { .. }));
    }
}
