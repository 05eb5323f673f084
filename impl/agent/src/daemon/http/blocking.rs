//! Blocking queries (`index`, `wait`), as Nomad's: each waits on what it read (its watch
//! set, `watch.rs`), not on every write.

use super::watch::{Key, Table};
use super::*;

/// Holds a read back until the result's index (`index_of`: the object's `ModifyIndex`, or
/// its table's for lists) passes the query's `index`, or `wait` passes (default 5 min, at
/// most 10), as Nomad's blocking queries do: returns the core, locked, once it has, or
/// [`ApiError::blocked`] for [`answer`] to wait on (on no thread) and ask again.
///
/// `watch` names what the answer depends on ([`Key`]): a write that moves `index_of` or
/// changes the answer must move one of them, else the query would sleep through it. It is
/// registered here, under the core's lock, so that no write falls between this look and
/// the wait.
pub(super) fn blocking_on<'a>(
    shared: &'a Shared,
    query: &Query,
    index_of: impl Fn(&Core) -> u64,
    watch: impl FnOnce(&Core) -> Vec<Key>,
) -> Result<std::sync::MutexGuard<'a, Core>, ApiError> {
    let index = match query.get("index") {
        None => None,
        Some(value) => Some(
            value
                .parse::<u64>()
                .map_err(|_| error(400, "Invalid index"))?,
        ),
    };
    let wait = match query.get("wait") {
        None => Duration::from_secs(300),
        Some(value) => Duration::from_nanos(
            quiesce_core::gotime::parse_go_duration(value)
                .filter(|ns| *ns >= 0)
                .ok_or_else(|| error(400, "Invalid wait time"))? as u64,
        ),
    }
    .min(Duration::from_secs(600));
    let core = shared.core();
    match index {
        // `index=0` does not block (Nomad blocks only past a positive index): a table not
        // written yet answers 0.
        Some(index) if index > 0 && index_of(&core) <= index && !query.waited_out => {
            let waiter = shared.watchers.wait_on(watch(&core)).ok_or_else(|| {
                let mut refused = error(
                    503,
                    format!(
                        "the agent holds {} blocking queries already: try again shortly",
                        watch::MAX_WAITERS
                    ),
                );
                refused.retry_after = Some(1);
                refused
            })?;
            Err(ApiError::blocked(wait, Some(waiter)))
        }
        _ => Ok(core),
    }
}

/// What a read of one object depends on beside the object itself.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum AlsoOn {
    Nothing,
    /// Its job's allocations (a job's status and summary follow them).
    JobAllocs,
}

/// One object of a table, for [`read_one`].
pub(super) struct Object<'a> {
    pub table: Table,
    pub id: &'a str,
    pub also: AlsoOn,
}

impl Object<'_> {
    pub(super) fn of(table: Table, id: &str) -> Object<'_> {
        Object {
            table,
            id,
            also: AlsoOn::Nothing,
        }
    }
}

/// A blocking read of one object of `table`, by `id`: waits on its index (`modify_index`;
/// its table's while it does not exist, as Nomad's), then answers it, rendered, or Nomad's
/// 404 text. It wakes for a write to the object (and to what `also` names), or, while
/// there is no such object, to its table.
pub(super) fn read_one<T>(
    shared: &Shared,
    query: &Query,
    Object { table, id, also }: Object<'_>,
    find: impl for<'a> Fn(&'a StateStore) -> Option<&'a T>,
    modify_index: impl Fn(&StateStore, &T) -> u64,
    missing: &str,
    render: impl Fn(&Core, &T) -> Value,
) -> Result<Reply, ApiError> {
    let index_of = |core: &Core| {
        let store = &core.server.store;
        find(store).map_or_else(
            || table.index(&store.table_indexes()),
            |object| modify_index(store, object),
        )
    };
    let watch = |core: &Core| match find(&core.server.store) {
        None => vec![Key::Table(table)],
        Some(_) if also == AlsoOn::JobAllocs => vec![
            Key::Object(table, id.to_string()),
            Key::JobAllocs(id.to_string()),
        ],
        Some(_) => vec![Key::Object(table, id.to_string())],
    };
    let core = blocking_on(shared, query, index_of, watch)?;
    let object = find(&core.server.store).ok_or_else(|| error(404, missing))?;
    ok(
        render(&core, object),
        modify_index(&core.server.store, object),
    )
}

/// A blocking read of a list of tables: its index is the latest of theirs (Nomad's `index`
/// table), so writes to other tables neither wake it nor move the index it answers.
pub(super) fn blocking_table<'a>(
    shared: &'a Shared,
    query: &Query,
    tables: &[Table],
) -> Result<std::sync::MutexGuard<'a, Core>, ApiError> {
    blocking_on(
        shared,
        query,
        |core| tables_index(&core.server.store.table_indexes(), tables),
        |_| tables.iter().map(|table| Key::Table(*table)).collect(),
    )
}

/// The latest index of `tables`.
pub(super) fn tables_index(indexes: &TableIndexes, tables: &[Table]) -> u64 {
    tables
        .iter()
        .map(|table| table.index(indexes))
        .max()
        .unwrap_or(0)
}

/// The tables of the jobs list: the jobs', and the allocations' (a job's status and summary
/// follow its allocations; Nomad takes the later of `jobs` and `job_summary`).
pub(super) const JOBS_LIST: [Table; 2] = [Table::Jobs, Table::Allocs];
