//! Nomad's HTTP API, the subset in `reference/http-api.md`: what python-nomad, nomadpy and
//! the `quiesce` CLI send, answered as Nomad answers it — JSON bodies on every success,
//! `X-Nomad-Index` headers, blocking queries (`index`, `wait`), Nomad's 404 texts, no
//! Content-Type required. Where quiesce deliberately differs (DESIGN.md): a malformed boolean
//! or number is a 400 naming the parameter (Nomad answers 500), and so is a jobspec that
//! fails validation, naming the field; nothing is changed by a request that fails.
//!
//! Paths are percent-decoded and routed by the table in `routes.rs`, each route declared once
//! with what it needs of the token; `/v1/job/...` is routed by its suffix, as Nomad does, so a
//! job ID may contain `/`.
//!
//! What every read shares: `index` and `wait`; a list answers, and blocks on, the index of
//! its own table (`StateStore::table_indexes`, Nomad's `index` table: jobs with their
//! allocations, since a job's status follows them; allocations; evaluations; services;
//! nodes), one object its `ModifyIndex` (its table's while it does not exist); a blocking
//! query wakes only for a write to what it read (`watch.rs`); unset string IDs are `""`. Errors are Nomad's texts
//! (`job not found`, `alloc not found`, `eval not found`, `Invalid method`, `Enforcing job
//! modify index …`). A path the agent does not serve is a 404 saying so; a job endpoint it
//! does not serve (`/scale`, `/revert`, `/dispatch`, …) is named, never taken for a job ID.
//! IDs are matched by prefix without Nomad's even-length rule. `/v1/jobs/statuses`, the web
//! UI's jobs list (`job_statuses.rs`), is a read by `GET` or by `POST` (a body naming jobs):
//! its fields keep Nomad's order, and it pages and blocks on its page's jobs.
//!
//! Not supported: ACL roles, binding rules, auth methods, token expiry and JSON policy
//! rules; namespaces other than `default` (a job in another is refused; ACL checks are
//! against `default`); `filter`, `?pretty`; gzip but for the store's reads (`gzip.rs`);
//! rescheduling (a failed allocation is not replaced), scaling policies (`job scale` and
//! scaling events are served), periodic and parameterized jobs. `/` and `/ui/…` are the web UI's (`ui.rs`), not the API's.

pub mod acl;
mod agent;
mod alloc_client;
mod alloc_fs;
mod allocs;
pub mod answers;
mod blocking;
mod cluster;
pub mod connections;
mod deployments;
mod events;
pub(super) mod guard;
mod gzip;
mod job_reads;
mod job_statuses;
mod job_versions;
mod jobs;
mod logs;
mod nodes;
mod nomad_zeros;
pub mod parse_hcl;
mod plan;
mod request;
pub mod routes;
mod server;
mod services;
mod stalling;
mod ui;
pub mod watch;

use acl::{authority, check, Need};
use agent::*;
use allocs::*;
pub use answers::Answers;
use blocking::*;
pub use connections::Registry as Connections;
pub use events::end_all as end_event_streams;
use guard::browser_guard;
use jobs::*;
use nodes::*;
use request::*;
pub use server::{runtime, serve, HttpLimits};
use services::*;
pub use watch::Watchers;
use watch::{Key, Table};

use super::host::DRIVERS;
use super::persist::StoreError;
use super::{Core, Shared};
use quiesce_core::server::store::{StateStore, TableIndexes};
use quiesce_core::server::structs::{Allocation, ClientStatus, Evaluation};
use quiesce_core::server::{ServerError, StopJobOptions};
use quiesce_core::spec::{self, Job, SpecError, SpecErrors};
use quiesce_core::step::log::LogEntry;
use quiesce_core::step::Step;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// An answer: status, body, and the index for `X-Nomad-Index`.
pub struct Reply {
    status: u16,
    body: Value,
    index: Option<u64>,
    /// `X-Nomad-NextToken`: where the next page of a paginated list starts.
    next_token: Option<String>,
    /// Bytes sent as they are (`text/plain`) instead of `body` (a task log, `plain=true`).
    raw: Option<Vec<u8>>,
    /// `body`, encoded already: an answer shared by the requests that asked for it
    /// (`answers.rs`).
    encoded: Option<bytes::Bytes>,
    /// `encoded` is the answer gzip-compressed (`gzip.rs`).
    gzipped: bool,
    /// The answer's JSON text, built by its handler instead of `body` where the order of
    /// the fields is Nomad's (a `Value`'s keys are sorted); not yet counted or shared.
    json: Option<Vec<u8>>,
}

/// A JSON answer with no index (the agent's own state, not the store's).
fn plain(body: Value) -> Result<Reply, ApiError> {
    Ok(Reply {
        status: 200,
        body,
        index: None,
        next_token: None,
        raw: None,
        encoded: None,
        gzipped: false,
        json: None,
    })
}

/// An error answer: status and Nomad's plain-text message.
#[derive(Debug, PartialEq, Eq)]
pub struct ApiError {
    pub status: u16,
    pub message: String,
    /// Not an answer yet: a blocking query found nothing new and waits up to this long,
    /// for a write to what it read (`watch.rs`; `None`: for its `wait` alone).
    blocked: Option<Duration>,
    waiter: Option<watch::Waiter>,
    /// `Retry-After` (seconds): a refusal for now, not for good.
    retry_after: Option<u32>,
}

fn error(status: u16, message: impl Into<String>) -> ApiError {
    ApiError {
        status,
        message: message.into(),
        blocked: None,
        waiter: None,
        retry_after: None,
    }
}

/// The one place a server's refusal becomes an answer: what the request asked for that
/// does not exist is a 404, a request the server will not carry out a 400.
impl From<ServerError> for ApiError {
    fn from(refused: ServerError) -> ApiError {
        match refused {
            ServerError::JobNotFound(_) => error(404, refused.to_string()),
            ServerError::AllocNotFound(_) => error(404, "allocation not found"),
            ServerError::NotFound(_) => error(404, refused.to_string()),
            ServerError::Refused(_) => error(400, refused.to_string()),
            ServerError::EvalPriorityOutOfRange(_) => {
                error(400, "Eval priority must be between 1 and 100 inclusively")
            }
            ServerError::InvalidJob(_)
            | ServerError::JobNotStopped(_)
            | ServerError::EnforceIndex(..) => error(400, refused.to_string()),
        }
    }
}

/// A write the store could not make durable: a 500, as Nomad answers a failed raft apply.
/// (Writes are refused up front, 503, while commits fail: see [`handle`].)
impl From<StoreError> for ApiError {
    fn from(failure: StoreError) -> ApiError {
        error(500, format!("storing the write: {failure}"))
    }
}

impl ApiError {
    /// A blocking query that waits for a write its `waiter` watches, for at most `wait`
    /// (see [`answer`]).
    fn blocked(wait: Duration, waiter: Option<watch::Waiter>) -> ApiError {
        ApiError {
            status: 200,
            message: String::new(),
            blocked: Some(wait),
            waiter,
            retry_after: None,
        }
    }
}

fn ok(body: Value, index: u64) -> Result<Reply, ApiError> {
    Ok(Reply {
        status: 200,
        body,
        index: Some(index),
        next_token: None,
        raw: None,
        encoded: None,
        gzipped: false,
        json: None,
    })
}

/// A request as the handlers see it, once the connection layer (`server.rs`) has read it
/// within its limits and passed it through the browser guard.
pub struct ApiRequest {
    pub method: Method,
    /// The path and query, as sent (percent-encoded).
    pub url: String,
    /// `X-Nomad-Token`, or the token of `Authorization: Bearer`.
    pub token: Option<String>,
    pub body: bytes::Bytes,
    /// Its `Accept-Encoding` takes gzip (`gzip.rs`).
    pub gzip: bool,
    /// The body's share of [`server::MAX_BODY_READERS`], held until the request is done.
    pub(super) _reading: Option<tokio::sync::OwnedSemaphorePermit>,
}

/// The largest request body the agent reads (a jobspec of the largest job it takes is well
/// under it); a larger one is refused with 413 before it is read.
pub const MAX_BODY_BYTES: usize = 8 << 20;

/// Answers a request on the handler threads. A blocking query that finds nothing new
/// waits here, on no thread, for a write to what it read (its waiter, registered by the
/// look: `watch.rs`) or its `wait`, then asks again.
async fn answer(shared: Arc<Shared>, request: ApiRequest) -> Result<Reply, ApiError> {
    let request = Arc::new(request);
    let mut deadline = None;
    let mut woken = false;
    loop {
        // The agent stopping ends every wait: the query answers what there is.
        let waited_out = deadline.is_some_and(|d| tokio::time::Instant::now() >= d)
            || shared.stopping.load(std::sync::atomic::Ordering::SeqCst);
        let (on, asked) = (Arc::clone(&shared), Arc::clone(&request));
        let attempt =
            match tokio::task::spawn_blocking(move || handle(&on, &asked, waited_out)).await {
                Ok(attempt) => attempt,
                // A handler that panicked holding the core's lock has poisoned it: every thread
                // of the agent would panic at its next look. The agent exits instead (its state
                // is durable; a restarted agent reattaches to the tasks, which run on).
                Err(_) if shared.poisoned() => {
                    crate::daemon::say!("a request's handler panicked holding the state; exiting");
                    std::process::exit(70);
                }
                Err(_) => Err(error(500, "the request's handler panicked")),
            };
        match attempt {
            Err(ApiError {
                blocked: Some(wait),
                waiter,
                ..
            }) if !waited_out => {
                if woken {
                    shared.watchers.count_after_wake(false);
                }
                let until = *deadline.get_or_insert_with(|| server::deadline_after(wait));
                woken = match waiter {
                    Some(waiter) => tokio::time::timeout_at(until, waiter.woken()).await.is_ok(),
                    None => {
                        tokio::time::sleep_until(until).await;
                        false
                    }
                };
                if woken {
                    shared.watchers.count_woken();
                }
            }
            answered => {
                if woken {
                    shared.watchers.count_after_wake(true);
                }
                return answered;
            }
        }
    }
}

/// One look at a request: its token (again on every look, so that a deleted token ends a
/// blocking query's wait too), the URL, the route. A blocking query whose index has not
/// passed answers [`ApiError::blocked`] unless `waited_out`.
fn handle(shared: &Shared, request: &ApiRequest, waited_out: bool) -> Result<Reply, ApiError> {
    let (authority, acl_index) = acl::authority_at(shared, request.token.as_deref())?;
    let (path, query) = split_url(&request.url);
    let writes = !matches!(request.method, Method::Get | Method::Head | Method::Options);
    if writes && !WRITE_NOTHING.contains(&path.as_str()) {
        if let Some(failure) = shared.core().store_failing() {
            return Err(error(
                503,
                format!(
                    "the agent cannot store writes now: {failure}; reads are answered, tasks \
                     run on, and writes are taken again once the store can be written"
                ),
            ));
        }
    }
    let mut query = Query::parse(&query)?;
    query.waited_out = waited_out;
    let route = || {
        routes::dispatch(
            shared,
            &authority,
            &request.method,
            &path,
            &query,
            &request.body,
        )
    };
    if request.method == Method::Get && shares_answers(&path) {
        // A blocking query's wanted index: an answer at or below it is no answer for it
        // (one a query that waited out was given) unless this one waited out too.
        let past = match (waited_out, query.get("index")) {
            (false, Some(index)) => index.parse::<u64>().unwrap_or(0),
            _ => 0,
        };
        shared_answer(shared, request, &path, acl_index, past, route)
    } else if (request.method == Method::Get && path.starts_with("/v1/client/fs/"))
        || (request.method == Method::Post && path == job_statuses::PATH)
    {
        held_read(&shared.answers, route)
    } else {
        route()
    }
}

/// The paths a `PUT` or `POST` is taken on that write nothing to the store, so they are
/// answered while it cannot be written.
const WRITE_NOTHING: [&str; 2] = ["/v1/jobs/parse", job_statuses::PATH];

/// The 503 of a read that would need a new answer while the agent holds its budget of
/// answers not yet taken (`answers.rs`).
fn over_budget(answers: &Answers) -> ApiError {
    let mut refused = error(
        503,
        format!(
            "the agent holds {} MiB of answers its clients have not taken yet (at most \
             {} MiB): try again shortly",
            answers.unsent() >> 20,
            answers::MAX_UNSENT_BYTES >> 20
        ),
    );
    refused.retry_after = Some(1);
    refused
}

/// The reads of the store: their answers are the same for the same URL, token and index
/// (no time, no file, no peer in them), so they are shared (`answers.rs`).
fn shares_answers(path: &str) -> bool {
    const PREFIXES: [&str; 11] = [
        "/v1/jobs",
        "/v1/job/",
        "/v1/allocations",
        "/v1/allocation/",
        "/v1/evaluations",
        "/v1/evaluation/",
        "/v1/nodes",
        "/v1/node/",
        "/v1/services",
        "/v1/service/",
        "/v1/acl/",
    ];
    PREFIXES.iter().any(|prefix| path.starts_with(prefix))
}

/// A read's answer as [`answers::Answers`] holds it: the one already encoded for this URL,
/// token and index if a client still holds it; else built — at most a few at once, and
/// only while the agent-wide budget of unsent answers has room — encoded once, and kept
/// for the next request of the same key. A request that takes gzip gets the answer's one
/// gzip copy, made once too.
///
/// `acl_index` is the ACL index the request's authority was read at: an answer is kept
/// under it, so that one built with rights since taken away is never given to a later
/// request. `past`: a blocking query's index; a kept answer at or below it is not given
/// (it is one a query that waited out took), the read is asked instead, and blocks.
fn shared_answer(
    shared: &Shared,
    request: &ApiRequest,
    path: &str,
    acl_index: u64,
    past: u64,
    build: impl FnOnce() -> Result<Reply, ApiError>,
) -> Result<Reply, ApiError> {
    let answers = &shared.answers;
    let key = || {
        let core = shared.core();
        answers::Key {
            url: request.url.clone(),
            token: request.token.clone(),
            index: answer_index(&core, path),
            acl_index,
        }
    };
    let fresh = |meta: &answers::Meta| past == 0 || meta.index.is_some_and(|index| index > past);
    let sent = |answer: answers::Answer, meta: answers::Meta| {
        let gzip = if request.gzip { answer.gzip() } else { None };
        Reply {
            status: meta.status,
            body: Value::Null,
            index: meta.index,
            next_token: meta.next_token,
            raw: None,
            gzipped: gzip.is_some(),
            encoded: Some(gzip.unwrap_or_else(|| answer.plain())),
            json: None,
        }
    };
    if let Some((answer, meta)) = answers.get(&key()).filter(|(_, meta)| fresh(meta)) {
        return Ok(sent(answer, meta));
    }
    let _turn = answers.turn();
    let key = key();
    if let Some((answer, meta)) = answers.get(&key).filter(|(_, meta)| fresh(meta)) {
        return Ok(sent(answer, meta));
    }
    if !answers.has_room() {
        return Err(over_budget(answers));
    }
    let mut reply = build()?;
    if reply.status != 200 || reply.raw.is_some() || reply.encoded.is_some() {
        return Ok(reply);
    }
    let meta = answers::Meta {
        status: reply.status,
        index: reply.index,
        next_token: reply.next_token.clone(),
    };
    let answer = answers.keep(key, reply_bytes(&mut reply), meta.clone());
    Ok(sent(answer, meta))
}

/// The index a shared read's answer follows (its cache key's, `answers::Key`): for a list
/// that reads only the tables named here, the latest of theirs, so that a write to another
/// table leaves its answer shared; for any other read, the store's. A handler that comes
/// to read another table must name it here.
fn answer_index(core: &Core, path: &str) -> u64 {
    let tables: &[Table] = match path {
        // Each allocation's node name is read from the nodes (`allocs::node_name`).
        "/v1/allocations" => &[Table::Allocs, Table::Nodes],
        "/v1/jobs" => &JOBS_LIST,
        "/v1/evaluations" => &[Table::Evals],
        _ => return core.server.store.index(),
    };
    tables_index(&core.server.store.table_indexes(), tables)
}

/// A read whose answer is not shared — a file's (up to a MiB of log, more as JSON), a
/// `POST /v1/jobs/statuses` (its body is not in the key) — is held until its client takes
/// it, as a store read's is: built a few at a time, counted as soon as it is built (its
/// JSON encoded in its turn), and refused past the budget. A followed log's reads come
/// here too and read the reply's body, which is kept beside the bytes until the reply is
/// rendered; plain text is counted as it is rendered, a moment after its turn.
fn held_read(
    answers: &Answers,
    build: impl FnOnce() -> Result<Reply, ApiError>,
) -> Result<Reply, ApiError> {
    let _turn = answers.turn();
    if !answers.has_room() {
        return Err(over_budget(answers));
    }
    let mut reply = build()?;
    if reply.raw.is_some() || reply.encoded.is_some() {
        return Ok(reply);
    }
    let bytes = answers.hold(reply_bytes(&mut reply));
    Ok(Reply {
        encoded: Some(bytes),
        ..reply
    })
}

/// A reply's JSON bytes, as sent: its handler's own text if it built one, else its body's.
fn reply_bytes(reply: &mut Reply) -> Vec<u8> {
    reply.json.take().unwrap_or_else(|| encode(&reply.body))
}

/// A JSON answer's bytes, as sent.
fn encode(body: &Value) -> Vec<u8> {
    let mut text = serde_json::to_vec(body).expect("JSON values serialize");
    text.push(b'\n');
    text
}

/// A 404 for a path this agent does not serve, saying so (Nomad's is an empty body).
fn not_served(path: &str) -> ApiError {
    let mut shown: String = path.chars().take(200).collect();
    if shown.len() < path.len() {
        shown.push('…');
    }
    error(
        404,
        format!(
            "{shown:?} is not an endpoint this agent serves (quiesce serves the subset of \
             Nomad's HTTP API listed in its README)"
        ),
    )
}

/// For the fuzz target `request` (`quiesce_agent::fuzzing::request`): `METHOD URL`, then the
/// `Host` and `Origin` values, each on its own line, through everything that reads a
/// request before it reaches the agent's state — the browser guard, the URL's
/// percent-decoding, the query's parameters as each endpoint reads them. None may panic;
/// a refusal is a 4xx with a message.
pub fn fuzz_request(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let mut lines = text.split('\n');
    let first = lines.next().unwrap_or_default();
    let (method, url) = first.split_once(' ').unwrap_or((first, "/"));
    let method = Method::from(method);
    let (host, origin) = (lines.next(), lines.next());
    let bind = std::net::SocketAddr::from(([127, 0, 0, 1], 4646));
    let refused = |e: ApiError| assert!((400..500).contains(&e.status) && !e.message.is_empty());
    if let Err(e) = browser_guard(bind, &method, host, origin) {
        refused(e);
    }
    let (path, query) = split_url(url);
    let _ = path.strip_prefix("/v1/job/").map(|id| id.rsplit_once('/'));
    match Query::parse(&query) {
        Err(e) => refused(e),
        Ok(query) => {
            for name in [
                "purge",
                "global",
                "no_shutdown_delay",
                "reschedule",
                "resources",
            ] {
                if let Err(e) = query.bool(name) {
                    refused(e);
                }
            }
            if let Err(e) = query.int("eval_priority") {
                refused(e);
            }
            if let Some(wait) = query.get("wait") {
                let _ = quiesce_core::gotime::parse_go_duration(wait);
            }
            let _ = query.get("index").map(str::parse::<u64>);
        }
    }
}
