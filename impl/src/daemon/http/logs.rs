//! `/v1/client/fs/logs/:alloc`: a task's stdout or stderr, as Nomad's client serves it —
//! `task`, `type` (`stdout`, `stderr`), `origin` (`start`, `end`) and `offset`; with
//! `plain=true` the bytes themselves, otherwise a frame `{"File","Offset","Data"}` (base64
//! data), which Nomad's clients decode. At most [`MAX_READ`] bytes an answer; the file read
//! is found from the allocation's record and its task's name as the spec has it, never built
//! from the request. `follow` (a stream) is not served: a client follows by asking again
//! from the offset it reached (the CLI's `alloc logs -f` does).

use super::*;
use std::io::{Read, Seek, SeekFrom};

/// The most bytes one answer carries.
pub const MAX_READ: u64 = 1 << 20;

pub(super) fn task_logs(shared: &Shared, alloc_id: &str, query: &Query) -> Result<Reply, ApiError> {
    if query.bool("follow")? {
        return Err(error(
            400,
            "follow is not served by this agent: ask again from the offset reached",
        ));
    }
    let raw = query.bool("plain")?;
    let kind = match query.get("type") {
        Some("stdout") => crate::client::raw_exec::STDOUT_FILE,
        Some("stderr") => crate::client::raw_exec::STDERR_FILE,
        Some(other) => {
            return Err(error(
                400,
                format!("Invalid log type {other:?}: must be stdout or stderr"),
            ))
        }
        None => return Err(error(400, "must provide log type (stdout or stderr)")),
    };
    let from_end = match query.get("origin") {
        None | Some("start") => false,
        Some("end") => true,
        Some(other) => {
            return Err(error(
                400,
                format!("Invalid origin {other:?}: must be start or end"),
            ))
        }
    };
    let offset = match query.get("offset") {
        None | Some("") => 0,
        Some(text) => text
            .parse::<u64>()
            .map_err(|_| error(400, format!("Invalid offset {text:?}")))?,
    };
    let task = query
        .get("task")
        .filter(|t| !t.is_empty())
        .ok_or_else(|| error(400, "must provide task name"))?;
    let dir = {
        let core = shared.core();
        let alloc = core
            .server
            .store
            .alloc(alloc_id)
            .ok_or_else(|| error(404, "Unknown allocation"))?;
        let known = alloc
            .job
            .task_groups
            .iter()
            .find(|g| g.name == alloc.task_group)
            .and_then(|g| g.tasks.iter().find(|t| t.name == task));
        let Some(known) = known else {
            return Err(error(404, format!("unknown task name {task:?}")));
        };
        crate::daemon::host::DaemonHost::task_dir(&shared.config.data_dir, &alloc.id, &known.name)
    };
    let path = dir.join(kind);
    let (data, start) = match std::fs::File::open(&path) {
        // Not started yet: nothing written.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => (Vec::new(), 0),
        Err(e) => return Err(error(500, format!("reading the {kind}: {e}"))),
        Ok(mut file) => {
            let size = file
                .metadata()
                .map_err(|e| error(500, format!("reading the {kind}: {e}")))?
                .len();
            let start = if from_end {
                size.saturating_sub(offset)
            } else {
                offset.min(size)
            };
            file.seek(SeekFrom::Start(start))
                .map_err(|e| error(500, format!("reading the {kind}: {e}")))?;
            let mut data = Vec::new();
            file.take(MAX_READ)
                .read_to_end(&mut data)
                .map_err(|e| error(500, format!("reading the {kind}: {e}")))?;
            (data, start)
        }
    };
    if raw {
        return Ok(Reply {
            status: 200,
            body: Value::Null,
            index: None,
            next_token: None,
            raw: Some(data),
        });
    }
    use base64::Engine;
    let end = start + data.len() as u64;
    plain(json!({
        "File": format!("alloc/logs/{task}.{}.0", kind.trim_end_matches(".log")),
        "Offset": end,
        "Data": base64::engine::general_purpose::STANDARD.encode(&data),
    }))
}
