//! Blocking queries (`index`, `wait`), as Nomad's.

use super::*;

/// Holds a read back until the result's index (`index_of`: the object's `ModifyIndex`, or
/// the store's index for lists) passes the query's `index`, or `wait` passes (default 5 min,
/// at most 10), as Nomad's blocking queries do: returns the core, locked, once it has, or
/// [`ApiError::blocked`] for [`answer`] to wait on (on no thread) and ask again.
pub(super) fn blocking_on<'a>(
    shared: &'a Shared,
    query: &Query,
    index_of: impl Fn(&Core) -> u64,
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
            Err(ApiError::blocked(wait))
        }
        _ => Ok(core),
    }
}

/// A blocking read of one object: waits on its index (`modify_index`; the store's index while
/// it does not exist), then answers it, rendered, or Nomad's 404 text.
pub(super) fn read_one<T>(
    shared: &Shared,
    query: &Query,
    find: impl for<'a> Fn(&'a StateStore) -> Option<&'a T>,
    modify_index: impl Fn(&StateStore, &T) -> u64,
    missing: &str,
    render: impl Fn(&Core, &T) -> Value,
) -> Result<Reply, ApiError> {
    let core = blocking_on(shared, query, |core| {
        let store = &core.server.store;
        find(store).map_or(store.index(), |object| modify_index(store, object))
    })?;
    let object = find(&core.server.store).ok_or_else(|| error(404, missing))?;
    ok(
        render(&core, object),
        modify_index(&core.server.store, object),
    )
}

/// A blocking read of a list of one table: its index is the table's (Nomad's `index`
/// table), so writes to other tables neither wake it nor move the index it answers.
pub(super) fn blocking_table<'a>(
    shared: &'a Shared,
    query: &Query,
    table: fn(&TableIndexes) -> u64,
) -> Result<std::sync::MutexGuard<'a, Core>, ApiError> {
    blocking_on(shared, query, |core| {
        table(&core.server.store.table_indexes())
    })
}

/// The allocations table's index.
pub(super) fn allocs_table(tables: &TableIndexes) -> u64 {
    tables.allocs
}

/// The evaluations table's index.
pub(super) fn evals_table(tables: &TableIndexes) -> u64 {
    tables.evals
}

/// The index of the jobs list: the jobs' table, or the allocations' (a job's status and
/// summary follow its allocations; Nomad takes the later of `jobs` and `job_summary`).
pub(super) fn jobs_table(tables: &TableIndexes) -> u64 {
    tables.jobs.max(tables.allocs)
}
