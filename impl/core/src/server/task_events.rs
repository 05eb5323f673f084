//! [`TaskEvents`]: a task's last events, as Nomad keeps them (the last ten, oldest first),
//! shared between the copies of a task's state — its runner's, the server's last report of
//! it, a cloned simulator's.
//!
//! A persistent list: recording an event puts one node in front of the shared ones. As a
//! shared vector, the list was copied whole by every event recorded after a report shared
//! it (nearly every one: a report follows nearly every step), touching every event's count
//! on the way, cold memory each. A chain is cut back to the last ten when it would hold
//! twenty, so what a list holds, and what dropping one frees, stays bounded.

use super::structs::{TaskEvent, MAX_TASK_EVENTS};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::sync::Arc;

/// A task's last events, oldest first: at most [`MAX_TASK_EVENTS`], the newest of a chain
/// of at most twice as many.
#[derive(Clone, Default)]
pub struct TaskEvents {
    newest: Option<Arc<Node>>,
}

struct Node {
    event: TaskEvent,
    older: Option<Arc<Node>>,
    /// The nodes of the chain from this one on, this one included.
    chain: usize,
}

impl TaskEvents {
    /// Keeps `event` as the newest; the oldest goes once there are ten.
    pub fn push(&mut self, event: TaskEvent) {
        let full = self
            .newest
            .as_ref()
            .is_some_and(|node| node.chain + 1 >= 2 * MAX_TASK_EVENTS);
        let older = if full {
            let kept: Vec<TaskEvent> = self
                .newest_first()
                .take(MAX_TASK_EVENTS - 1)
                .cloned()
                .collect();
            chain_of(kept)
        } else {
            self.newest.take()
        };
        let chain = older.as_ref().map_or(0, |node| node.chain) + 1;
        self.newest = Some(Arc::new(Node {
            event,
            older,
            chain,
        }));
        debug_assert!(chain < 2 * MAX_TASK_EVENTS, "a chain of {chain} events");
    }

    /// The events shown: the newest of the chain, ten at most.
    pub fn len(&self) -> usize {
        self.newest
            .as_ref()
            .map_or(0, |node| node.chain.min(MAX_TASK_EVENTS))
    }

    pub fn is_empty(&self) -> bool {
        self.newest.is_none()
    }

    /// The newest event.
    pub fn last(&self) -> Option<&TaskEvent> {
        self.newest.as_deref().map(|node| &node.event)
    }

    /// The oldest event shown.
    pub fn first(&self) -> Option<&TaskEvent> {
        self.iter().next()
    }

    /// The events shown, oldest first.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &TaskEvent> + ExactSizeIterator {
        let len = self.len();
        let mut shown: [Option<&TaskEvent>; MAX_TASK_EVENTS] = [None; MAX_TASK_EVENTS];
        for (slot, event) in shown[..len].iter_mut().rev().zip(self.newest_first()) {
            *slot = Some(event);
        }
        shown
            .into_iter()
            .take(len)
            .map(|event| event.expect("a node for every event shown"))
    }

    /// The events shown, newest first, following the chain.
    fn newest_first(&self) -> impl Iterator<Item = &TaskEvent> {
        std::iter::successors(self.newest.as_deref(), |node| node.older.as_deref())
            .take(self.len())
            .map(|node| &node.event)
    }
}

/// A new chain of the events, given newest first.
fn chain_of(newest_first: Vec<TaskEvent>) -> Option<Arc<Node>> {
    newest_first.into_iter().rev().fold(None, |older, event| {
        let chain = older.as_ref().map_or(0, |node: &Arc<Node>| node.chain) + 1;
        Some(Arc::new(Node {
            event,
            older,
            chain,
        }))
    })
}

impl PartialEq for TaskEvents {
    /// The same events shown; one chain shared (as most are) is equal without a look.
    fn eq(&self, other: &TaskEvents) -> bool {
        let shared = match (&self.newest, &other.newest) {
            (Some(ours), Some(theirs)) => Arc::ptr_eq(ours, theirs),
            (None, None) => true,
            _ => false,
        };
        shared || self.iter().eq(other.iter())
    }
}

impl Eq for TaskEvents {}

impl fmt::Debug for TaskEvents {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl FromIterator<TaskEvent> for TaskEvents {
    /// The events in order, oldest first; the last ten are kept.
    fn from_iter<I: IntoIterator<Item = TaskEvent>>(events: I) -> TaskEvents {
        let mut list = TaskEvents::default();
        for event in events {
            list.push(event);
        }
        list
    }
}

/// A JSON list, oldest first, as Nomad's `Events`.
impl Serialize for TaskEvents {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.iter())
    }
}

impl<'de> Deserialize<'de> for TaskEvents {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<TaskEvents, D::Error> {
        Ok(Vec::<TaskEvent>::deserialize(deserializer)?
            .into_iter()
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::borrow::Cow;

    fn event(n: i64) -> TaskEvent {
        TaskEvent {
            event_type: Cow::Borrowed("E"),
            time: n,
            message: String::new(),
            display_message: Cow::Owned(format!("event {n}")),
            details: Default::default(),
        }
    }

    fn times(events: &TaskEvents) -> Vec<i64> {
        events.iter().map(|e| e.time).collect()
    }

    #[test]
    fn the_last_ten_are_kept_oldest_first_however_long_the_chain() {
        let mut events = TaskEvents::default();
        assert!(events.is_empty() && events.last().is_none() && events.first().is_none());
        for n in 0..55 {
            events.push(event(n));
            let kept = (n + 1).min(10);
            assert_eq!(events.len(), kept as usize);
            assert_eq!(times(&events), ((n + 1 - kept)..=n).collect::<Vec<_>>());
            assert_eq!(events.last().map(|e| e.time), Some(n));
            assert_eq!(events.first().map(|e| e.time), Some(n + 1 - kept));
            let chain = events.newest.as_ref().map_or(0, |node| node.chain);
            assert!(chain < 2 * MAX_TASK_EVENTS, "chain of {chain} at {n}");
        }
    }

    #[test]
    fn a_copy_is_unchanged_by_what_the_other_records() {
        let mut runner: TaskEvents = (0..12).map(event).collect();
        let reported = runner.clone();
        for n in 12..40 {
            runner.push(event(n));
        }
        assert_eq!(times(&reported), (2..12).collect::<Vec<_>>());
        assert_eq!(times(&runner), (30..40).collect::<Vec<_>>());
        assert_ne!(runner, reported);
        assert_eq!(reported, (2..12).map(event).collect());
    }

    #[test]
    fn json_is_the_list_oldest_first_and_reads_back_the_same() {
        let events: TaskEvents = (0..13).map(event).collect();
        let json = serde_json::to_value(&events).unwrap();
        let listed: Vec<i64> = json
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["Time"].as_i64().unwrap())
            .collect();
        assert_eq!(listed, (3..13).collect::<Vec<_>>());
        let read: TaskEvents = serde_json::from_value(json).unwrap();
        assert_eq!(read, events);
        // More than ten read (a record of another writer's): the last ten are kept.
        let longer = serde_json::to_value((0..13).map(event).collect::<Vec<_>>()).unwrap();
        let read: TaskEvents = serde_json::from_value(longer).unwrap();
        assert_eq!(times(&read), (3..13).collect::<Vec<_>>());
        assert_eq!(
            format!("{read:?}"),
            format!("{:?}", events.iter().collect::<Vec<_>>())
        );
    }
}
