//! What the writes moved, for a host whose readers wait on writes (the daemon's blocking
//! queries, which wake only the readers of what moved: `daemon/http/watch.rs`). Every
//! record a write changes is noted as it is written (`StateStore::wrote`), and so is the job
//! whose allocations an allocation write changed (its record does not say whose it was once
//! it is deleted). The host drains the notes after each write it publishes.
//!
//! Bounded: past [`MAX_MOVED`] notes between two drains the notes are dropped and the
//! drain says that everything may have moved (a reader then looks again; it is never left
//! waiting on a change it missed).

use super::{Record, StateStore};
use crate::server::structs::JobId;
use std::collections::BTreeSet;

/// The most notes kept between two drains (a purge of a job of 10,000 allocations stays
/// well under it; a host drains after every write it publishes).
pub const MAX_MOVED: usize = 1 << 16;

/// The records written since the last drain, and the jobs whose allocations changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Moved {
    pub records: BTreeSet<Record>,
    /// The jobs with an allocation created, changed or deleted.
    pub job_allocs: BTreeSet<JobId>,
    /// More than [`MAX_MOVED`] notes were made: take every record as moved.
    pub overflowed: bool,
}

impl Moved {
    /// Nothing moved.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty() && self.job_allocs.is_empty() && !self.overflowed
    }

    fn note(&mut self, add: impl FnOnce(&mut Moved)) {
        if self.overflowed {
            return;
        }
        add(self);
        if self.records.len() + self.job_allocs.len() > MAX_MOVED {
            *self = Moved {
                overflowed: true,
                ..Moved::default()
            };
        }
    }
}

impl StateStore {
    /// Notes what every write from now on moves, for [`StateStore::drain_moved`].
    pub fn watch_moves(&mut self) {
        self.moved.get_or_insert_with(Moved::default);
    }

    /// What moved since the last drain (nothing if moves are not watched).
    pub fn drain_moved(&mut self) -> Moved {
        self.moved.as_mut().map(std::mem::take).unwrap_or_default()
    }

    pub(super) fn moved_record(&mut self, record: &Record) {
        if *record == Record::Index {
            return;
        }
        if let Some(moved) = self.moved.as_mut() {
            if !moved.records.contains(record) {
                moved.note(|moved| {
                    moved.records.insert(record.clone());
                });
            }
        }
    }

    /// Notes that an allocation of `job_id` was created, changed or deleted.
    pub(super) fn moved_allocs_of(&mut self, job_id: &str) {
        if let Some(moved) = self.moved.as_mut() {
            if !moved.job_allocs.contains(job_id) {
                moved.note(|moved| {
                    moved.job_allocs.insert(job_id.into());
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn past_the_bound_everything_is_taken_as_moved() {
        let mut store = StateStore::default();
        assert!(store.drain_moved().is_empty(), "not watched: nothing");
        store.watch_moves();
        store.moved_record(&Record::Index);
        store.moved_record(&Record::Alloc("a".into()));
        store.moved_record(&Record::Alloc("a".into()));
        store.moved_allocs_of("job");
        let moved = store.drain_moved();
        assert_eq!(moved.records, BTreeSet::from([Record::Alloc("a".into())]));
        assert_eq!(moved.job_allocs, BTreeSet::from(["job".into()]));
        assert!(!moved.overflowed);
        assert!(store.drain_moved().is_empty(), "drained");
        for n in 0..=MAX_MOVED {
            store.moved_record(&Record::Eval(n.to_string()));
        }
        let moved = store.drain_moved();
        assert!(moved.overflowed && moved.records.is_empty());
    }
}
