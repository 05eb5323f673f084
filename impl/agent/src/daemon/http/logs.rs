//! `/v1/client/fs/logs/:alloc`: a task's stdout or stderr, as Nomad's client serves it —
//! `task`, `type` (`stdout`, `stderr`), `origin` (`start`, `end`) and `offset`; with
//! `plain=true` the bytes themselves, otherwise a frame `{"File","Offset","Data"}` (base64
//! data), which Nomad's clients decode. At most [`MAX_READ`] bytes an answer; the file read
//! is found from the allocation's record and its task's name as the spec has it, never built
//! from the request. With `follow=true` the answer is a stream: what there is, then what the
//! task writes, read every [`FOLLOW_EVERY`], until the allocation has ended (and all it
//! wrote is sent) or the client goes; each read is a request of its own (its token checked
//! again), and at most [`MAX_FOLLOWERS`] streams run at once; a quiet stream sends a
//! heartbeat frame `{}` every [`HEARTBEAT`] (not in `plain`), and ends as soon as its client
//! has gone.

use super::*;
use std::io::{Read, Seek, SeekFrom};

/// The most bytes one answer carries.
pub const MAX_READ: u64 = 1 << 20;
/// How often a followed log is read again.
pub const FOLLOW_EVERY: std::time::Duration = std::time::Duration::from_millis(250);
/// How long a followed log stays silent before a heartbeat frame (`{}`) is sent, as
/// Nomad's stream framer does.
pub const HEARTBEAT: std::time::Duration = std::time::Duration::from_secs(1);
/// The most followed logs at once.
pub const MAX_FOLLOWERS: usize = 64;

static FOLLOWERS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// A request to follow a log: its allocation, and whether it wants the bytes (`plain`).
pub(super) struct Followed {
    alloc: String,
    plain: bool,
}

/// Whether the request follows a task's log.
pub(super) fn follows(request: &ApiRequest) -> Option<Followed> {
    let (path, query) = split_url(&request.url);
    let alloc = path.strip_prefix("/v1/client/fs/logs/")?;
    let query = Query::parse(&query).ok()?;
    (request.method == Method::Get && query.bool("follow") == Ok(true)).then(|| Followed {
        alloc: alloc.to_string(),
        plain: query.bool("plain") == Ok(true),
    })
}

/// The URL of one read of a followed log from `offset`, the request's other parameters
/// kept (`follow` and the origin's own offset replaced).
fn read_url(url: &str, offset: u64) -> String {
    let (path, query) = url.split_once('?').unwrap_or((url, ""));
    let kept: Vec<&str> = query
        .split('&')
        .filter(|p| {
            let key = p.split('=').next().unwrap_or_default();
            !matches!(key, "follow" | "offset" | "origin" | "plain" | "")
        })
        .collect();
    format!("{path}?{}&origin=start&offset={offset}", kept.join("&"))
}

/// Follows a log: the first read answers (an error there is the answer), then a task sends
/// what each later read finds, until the allocation has ended or the client has gone.
pub(super) async fn follow(
    shared: Arc<Shared>,
    request: ApiRequest,
    followed: Followed,
) -> Result<(&'static str, tokio::sync::mpsc::Receiver<bytes::Bytes>), ApiError> {
    let slot = Slot::take(&FOLLOWERS, MAX_FOLLOWERS).ok_or_else(|| {
        error(
            429,
            format!("at most {MAX_FOLLOWERS} logs are followed at once"),
        )
    })?;
    // The first read as asked (its origin and offset), without `follow` and `plain`; the
    // later ones from the offset reached.
    let (path, query) = request.url.split_once('?').unwrap_or((&request.url, ""));
    let first_url = format!(
        "{path}?{}",
        query
            .split('&')
            .filter(|p| !matches!(p.split('=').next(), Some("follow" | "plain") | None))
            .collect::<Vec<_>>()
            .join("&")
    );
    let url = request.url.clone();
    let token = request.token.clone();
    let read = move |url: String| ApiRequest {
        method: Method::Get,
        url,
        token: token.clone(),
        body: bytes::Bytes::new(),
        // Each read's frame is read here, not sent as it is.
        gzip: false,
        _reading: None,
    };
    let first = answer(Arc::clone(&shared), read(first_url)).await?;
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let content_type = if followed.plain {
        "text/plain; charset=utf-8"
    } else {
        "application/json"
    };
    tokio::spawn(async move {
        let _slot = slot;
        let mut frame = first.body;
        let mut last_sent = tokio::time::Instant::now();
        loop {
            let data = frame["Data"].as_str().unwrap_or_default().to_string();
            let offset = frame["Offset"].as_u64().unwrap_or(0);
            if !data.is_empty() {
                use base64::Engine;
                let chunk = if followed.plain {
                    base64::engine::general_purpose::STANDARD
                        .decode(&data)
                        .unwrap_or_default()
                } else {
                    serde_json::to_vec(&frame).expect("JSON values serialize")
                };
                if tx.send(bytes::Bytes::from(chunk)).await.is_err() {
                    return; // the client has gone
                }
            }
            let ended = {
                let core = shared.core();
                core.server
                    .store
                    .alloc(followed.alloc.as_str())
                    .is_none_or(|a| a.client_status.is_terminal())
            };
            if ended && data.is_empty() {
                return;
            }
            if data.is_empty() {
                // Nothing new: a heartbeat frame once a second without data (Nomad's `{}`,
                // which its clients rely on to tell a quiet stream from a dead one; a
                // plain stream has only the bytes), and the next read after a while — or
                // the end, as soon as the client has gone (issue 24: a stream that only
                // noticed when it had data to send held its slot for as long as the task
                // stayed quiet).
                if !followed.plain && last_sent.elapsed() >= HEARTBEAT {
                    if tx.send(bytes::Bytes::from_static(b"{}")).await.is_err() {
                        return;
                    }
                    last_sent = tokio::time::Instant::now();
                }
                if tokio::time::timeout(FOLLOW_EVERY, tx.closed())
                    .await
                    .is_ok()
                {
                    return; // the client has gone
                }
            } else {
                last_sent = tokio::time::Instant::now();
            }
            match answer(Arc::clone(&shared), read(read_url(&url, offset))).await {
                Ok(next) => frame = next.body,
                Err(_) => return, // the token is gone, or the allocation
            }
        }
    });
    Ok((content_type, rx))
}

pub(super) fn task_logs(shared: &Shared, alloc_id: &str, query: &Query) -> Result<Reply, ApiError> {
    query.bool("follow")?;
    // Each read of a followed log is a frame; `plain` shapes the stream instead.
    let raw = query.bool("plain")? && !query.bool("follow")?;
    let kind = match query.get("type") {
        Some("stdout") => crate::raw_exec::STDOUT_FILE,
        Some("stderr") => crate::raw_exec::STDERR_FILE,
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
    // Opened without following a link or blocking (a FIFO), and read only if it is a plain
    // file: a task running as root could put anything in its directory.
    let opened = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&path)
            .and_then(|file| {
                if file.metadata()?.is_file() {
                    Ok(file)
                } else {
                    Err(std::io::Error::other("not a plain file"))
                }
            })
    };
    let (data, start) = match opened {
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
            encoded: None,
            gzipped: false,
            json: None,
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
