//! [`TaskStates`]: an allocation's tasks' states by task name, as its client last reported
//! them; written and read as a JSON object, as Nomad's `TaskStates` map.
//!
//! A vector sorted by name rather than a `BTreeMap`. A runner builds one for the report that
//! follows nearly every one of its steps, and the server's record drops the one it replaces.
//! For the handful of tasks a group has, a B-tree's node (room for eleven entries) and its
//! walk on drop cost several times what the entries do; a vector is one allocation, and its
//! lookups a binary search of a few names.

use super::structs::TaskState;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// Task states by task name, in the names' order, each name once.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct TaskStates {
    by_name: Vec<(Arc<str>, TaskState)>,
}

impl TaskStates {
    pub fn get(&self, name: &str) -> Option<&TaskState> {
        let ix = self
            .by_name
            .binary_search_by(|(entry, _)| (**entry).cmp(name))
            .ok()?;
        Some(&self.by_name[ix].1)
    }

    /// The states in the names' order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, &TaskState)> {
        self.by_name.iter().map(|(name, state)| (&**name, state))
    }

    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }
}

impl FromIterator<(Arc<str>, TaskState)> for TaskStates {
    /// As a map is built: a name given twice keeps its last state.
    fn from_iter<I: IntoIterator<Item = (Arc<str>, TaskState)>>(states: I) -> TaskStates {
        let mut by_name: Vec<(Arc<str>, TaskState)> = states.into_iter().collect();
        // Stable, so that of a name's entries the last given is the last of its run.
        by_name.sort_by(|(a, _), (b, _)| a.cmp(b));
        if by_name.windows(2).any(|pair| pair[0].0 == pair[1].0) {
            // `dedup_by` keeps the first of a run: turned round, the first is the last given.
            by_name.reverse();
            by_name.dedup_by(|later, earlier| later.0 == earlier.0);
            by_name.reverse();
        }
        TaskStates { by_name }
    }
}

impl fmt::Debug for TaskStates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

/// A JSON object from task name to state, as Nomad's `TaskStates`.
impl Serialize for TaskStates {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.iter())
    }
}

impl<'de> Deserialize<'de> for TaskStates {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<TaskStates, D::Error> {
        Ok(BTreeMap::<Arc<str>, TaskState>::deserialize(deserializer)?
            .into_iter()
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::structs::TaskStateName;

    fn state(restarts: u64) -> TaskState {
        TaskState {
            restarts,
            ..TaskState::default()
        }
    }

    fn restarts(states: &TaskStates) -> Vec<(&str, u64)> {
        states.iter().map(|(name, s)| (name, s.restarts)).collect()
    }

    #[test]
    fn states_are_kept_in_the_names_order_and_a_name_given_twice_keeps_its_last() {
        let states: TaskStates = [("web", 1), ("db", 2), ("web", 3), ("api", 4), ("db", 5)]
            .into_iter()
            .map(|(name, n)| (Arc::from(name), state(n)))
            .collect();
        assert_eq!(restarts(&states), [("api", 4), ("db", 5), ("web", 3)]);
        assert_eq!(states.get("db").map(|s| s.restarts), Some(5));
        assert!(states.get("dc").is_none());
        assert_eq!(states.len(), 3);
    }

    #[test]
    fn it_is_written_and_read_as_the_map_it_replaces() {
        let mut dead = state(7);
        dead.state = TaskStateName::Dead;
        let map: BTreeMap<Arc<str>, TaskState> =
            [("web".into(), dead.clone()), ("db".into(), state(0))].into();
        let states: TaskStates = [("web".into(), dead), ("db".into(), state(0))]
            .into_iter()
            .collect();
        let json = serde_json::to_string(&states).unwrap();
        assert_eq!(json, serde_json::to_string(&map).unwrap());
        assert!(json.starts_with("{\"db\":{"), "{json}");
        assert_eq!(serde_json::from_str::<TaskStates>(&json).unwrap(), states);
        assert_eq!(serde_json::to_string(&TaskStates::default()).unwrap(), "{}");
        assert_eq!(format!("{states:?}"), format!("{map:?}"));
    }
}
