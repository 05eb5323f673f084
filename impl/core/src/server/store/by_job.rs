//! [`JobAllocs`]: a job's allocations, from the store's index of their IDs by job.
//!
//! Looked up one by one in the table of every allocation while the job holds few of them;
//! walked beside the table instead when it holds many (both are in ID order). An evaluation
//! reads every allocation of its job, and a large job is evaluated once per allocation that
//! turns healthy: a lookup in a table of thousands cost far more than a step of a walk.

use super::super::structs::{AllocId, Allocation};
use std::collections::{btree_map, btree_set, BTreeMap, BTreeSet};
use std::iter::Peekable;
use std::sync::Arc;

type Table = BTreeMap<AllocId, Arc<Allocation>>;

/// A job's allocations in ID order (an ID the table lacks is skipped).
pub(super) enum JobAllocs<'a> {
    Lookup {
        ids: btree_set::Iter<'a, AllocId>,
        table: &'a Table,
    },
    Walk {
        ids: btree_set::Iter<'a, AllocId>,
        table: Peekable<btree_map::Range<'a, AllocId, Arc<Allocation>>>,
    },
}

impl<'a> JobAllocs<'a> {
    /// Walked when the job holds at least an eighth of the table (a step of the walk costs
    /// a tenth or less of a lookup), else looked up.
    pub(super) fn new(ids: Option<&'a BTreeSet<AllocId>>, table: &'a Table) -> JobAllocs<'a> {
        let (Some(ids), Some(first), Some(last)) = (
            ids,
            ids.and_then(BTreeSet::first),
            ids.and_then(BTreeSet::last),
        ) else {
            return JobAllocs::Lookup {
                ids: btree_set::Iter::default(),
                table,
            };
        };
        if ids.len().saturating_mul(8) >= table.len() {
            JobAllocs::Walk {
                ids: ids.iter(),
                table: table.range::<AllocId, _>(first..=last).peekable(),
            }
        } else {
            JobAllocs::Lookup {
                ids: ids.iter(),
                table,
            }
        }
    }
}

impl<'a> Iterator for JobAllocs<'a> {
    type Item = &'a Allocation;

    fn next(&mut self) -> Option<&'a Allocation> {
        match self {
            JobAllocs::Lookup { ids, table } => ids.find_map(|id| table.get(id)).map(Arc::as_ref),
            JobAllocs::Walk { ids, table } => {
                for id in ids.by_ref() {
                    // The table's entries before this ID are other jobs' (or IDs skipped).
                    while table.next_if(|(key, _)| *key < id).is_some() {}
                    match table.peek() {
                        Some((key, _)) if *key == id => {
                            return table.next().map(|(_, alloc)| alloc.as_ref());
                        }
                        Some(_) => {}
                        None => return None,
                    }
                }
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alloc(id: &str) -> Arc<Allocation> {
        Arc::new(Allocation {
            id: id.into(),
            ..crate::client::test_support::alloc(false, false, 0, 0)
        })
    }

    /// Both ways find the same allocations, in ID order, skipping IDs the table lacks.
    #[test]
    fn a_walk_finds_what_lookups_find() {
        let table: Table = ["a", "b", "c", "d", "e", "f", "g"]
            .into_iter()
            .map(|id| (AllocId::from(id), alloc(id)))
            .collect();
        let cases: [&[&str]; 6] = [
            &["b", "d", "f"],
            &["a", "g"],
            &["0", "c", "cc", "h"],
            &["a", "b", "c", "d", "e", "f", "g"],
            &["zz"],
            &[],
        ];
        for ids in cases {
            let set: BTreeSet<AllocId> = ids.iter().map(|&id| AllocId::from(id)).collect();
            let found = |allocs: JobAllocs| -> Vec<String> {
                allocs.map(|alloc| alloc.id.to_string()).collect()
            };
            let expected: Vec<String> = set
                .iter()
                .filter(|&id| table.contains_key(id))
                .map(|id| id.to_string())
                .collect();
            let walk = JobAllocs::Walk {
                ids: set.iter(),
                table: set
                    .first()
                    .zip(set.last())
                    .map(|(first, last)| table.range::<AllocId, _>(first..=last))
                    .unwrap_or_else(|| table.range::<AllocId, _>(..))
                    .peekable(),
            };
            let lookup = JobAllocs::Lookup {
                ids: set.iter(),
                table: &table,
            };
            assert_eq!(found(walk), expected, "{ids:?}");
            assert_eq!(found(lookup), expected, "{ids:?}");
            assert_eq!(
                found(JobAllocs::new(Some(&set), &table)),
                expected,
                "{ids:?}"
            );
        }
        assert_eq!(JobAllocs::new(None, &table).count(), 0);
    }
}
