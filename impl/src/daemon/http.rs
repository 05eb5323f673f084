//! Nomad's HTTP API, the subset in `reference/http-api.md`: what python-nomad, nomadpy and
//! the `quiesce` CLI send, answered as Nomad answers it — JSON bodies on every success,
//! `X-Nomad-Index` headers, blocking queries (`index`, `wait`), Nomad's 404 texts, no
//! Content-Type required. Where quiesce deliberately differs (DESIGN.md): a malformed boolean
//! or number is a 400 naming the parameter (Nomad answers 500), and so is a jobspec that
//! fails validation, naming the field; nothing is changed by a request that fails.
//!
//! Paths are percent-decoded, and `/v1/job/...` is routed by its suffix, as Nomad does, so a
//! job ID may contain `/`.

use super::host::DRIVERS;
use super::{Core, Shared};
use crate::server::store::StateStore;
use crate::server::structs::{Allocation, ClientStatus, Evaluation};
use crate::server::{ServerError, StopJobOptions};
use crate::spec::{self, Job, SpecError, SpecErrors};
use crate::step::log::LogEntry;
use crate::step::Step;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tiny_http::{Header, Method, Response};

/// An answer: status, body, and the index for `X-Nomad-Index`.
pub struct Reply {
    status: u16,
    body: Value,
    index: Option<u64>,
}

/// An error answer: status and Nomad's plain-text message.
#[derive(Debug, PartialEq, Eq)]
pub struct ApiError {
    pub status: u16,
    pub message: String,
}

fn error(status: u16, message: impl Into<String>) -> ApiError {
    ApiError {
        status,
        message: message.into(),
    }
}

fn ok(body: Value, index: u64) -> Result<Reply, ApiError> {
    Ok(Reply {
        status: 200,
        body,
        index: Some(index),
    })
}

/// Serves HTTP on `server` until the process exits: one thread per request, so a blocking
/// query does not hold up the others.
pub fn serve(shared: Arc<Shared>, server: tiny_http::Server) {
    for request in server.incoming_requests() {
        let shared = Arc::clone(&shared);
        super::spawn_named("request", move || handle(&shared, request));
    }
}

fn handle(shared: &Shared, mut request: tiny_http::Request) {
    let mut body = Vec::new();
    let read = request.as_reader().read_to_end(&mut body);
    let answer = match read {
        Ok(_) => {
            let (path, query) = split_url(request.url());
            match Query::parse(&query) {
                Ok(query) => route(shared, request.method(), &path, &query, &body),
                Err(e) => Err(e),
            }
        }
        Err(e) => Err(error(400, format!("reading the request body: {e}"))),
    };
    let response = match answer {
        Ok(reply) => {
            let mut text = serde_json::to_vec(&reply.body).expect("JSON values serialize");
            text.push(b'\n');
            let mut response = Response::from_data(text)
                .with_status_code(reply.status)
                .with_header(header("Content-Type", "application/json"));
            if let Some(index) = reply.index {
                response = response
                    .with_header(header("X-Nomad-Index", &index.to_string()))
                    .with_header(header("X-Nomad-KnownLeader", "true"))
                    .with_header(header("X-Nomad-LastContact", "0"));
            }
            response
        }
        Err(e) => Response::from_data(e.message.into_bytes())
            .with_status_code(e.status)
            .with_header(header("Content-Type", "text/plain; charset=utf-8")),
    };
    let _ = request.respond(response);
}

fn header(name: &str, value: &str) -> Header {
    Header::from_bytes(name.as_bytes(), value.as_bytes()).expect("valid header")
}

fn split_url(url: &str) -> (String, String) {
    let (path, query) = url.split_once('?').unwrap_or((url, ""));
    (percent_decode(path, false), query.to_string())
}

/// Percent-decoding; `plus` turns `+` into a space (query strings).
fn percent_decode(text: &str, plus: bool) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(byte) => {
                        out.push(byte);
                        i += 3;
                        continue;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b'+' if plus => out.push(b' '),
            byte => out.push(byte),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The query string's parameters (the last of a repeated one wins).
pub struct Query(BTreeMap<String, String>);

impl Query {
    fn parse(query: &str) -> Result<Query, ApiError> {
        let mut params = BTreeMap::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            params.insert(percent_decode(key, true), percent_decode(value, true));
        }
        Ok(Query(params))
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    /// A boolean the way Go's `strconv.ParseBool` reads it; absent is `false`.
    fn bool(&self, name: &str) -> Result<bool, ApiError> {
        match self.get(name) {
            None => Ok(false),
            Some(value) => parse_bool(value).ok_or_else(|| {
                error(
                    400,
                    format!(
                        "Failed to parse value of {name:?} ({value}) as a bool: expected one of \
                         1, t, T, TRUE, true, True, 0, f, F, FALSE, false, False"
                    ),
                )
            }),
        }
    }

    fn int(&self, name: &str) -> Result<Option<i64>, ApiError> {
        match self.get(name) {
            None | Some("") => Ok(None),
            Some(value) => value.parse().map(Some).map_err(|_| {
                error(
                    400,
                    format!("Failed to parse value of {name:?} ({value}) as an integer"),
                )
            }),
        }
    }
}

pub fn parse_bool(value: &str) -> Option<bool> {
    match value {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// Blocks a read until the result's index (`index_of`: the object's `ModifyIndex`, or the
/// store's index for lists) passes the query's `index`, or `wait` passes (default 5 min, at
/// most 10), as Nomad's blocking queries do; returns the core, locked.
fn blocking_on<'a>(
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
            spec::parse_go_duration(value)
                .filter(|ns| *ns >= 0)
                .ok_or_else(|| error(400, "Invalid wait time"))? as u64,
        ),
    }
    .min(Duration::from_secs(600));
    let mut core = shared.core();
    if let Some(index) = index {
        let deadline = Instant::now() + wait;
        while index_of(&core) <= index && Instant::now() < deadline {
            core = shared.wait_changed(core, deadline);
        }
    }
    Ok(core)
}

/// A blocking read of one object: waits on its index (`modify_index`; the store's index while
/// it does not exist), then answers it, rendered, or Nomad's 404 text.
fn read_one<T>(
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

/// A job's index for blocking reads: its own `ModifyIndex` or its allocations', whichever is
/// later — its `Status` and summary follow its allocations (in Nomad a status change bumps
/// the job's index).
fn job_index(store: &StateStore, job: &Job) -> u64 {
    store
        .allocs_by_job(&job.id)
        .map(|alloc| alloc.modify_index)
        .fold(job.modify_index, u64::max)
}

fn get_job(shared: &Shared, id: &str, query: &Query) -> Result<Reply, ApiError> {
    let index = job_index;
    read_one(
        shared,
        query,
        |s| s.job(id),
        index,
        "job not found",
        job_json,
    )
}

fn job_summary(shared: &Shared, id: &str, query: &Query) -> Result<Reply, ApiError> {
    let index = job_index;
    read_one(
        shared,
        query,
        |s| s.job(id),
        index,
        "job not found",
        summary,
    )
}

fn get_alloc(shared: &Shared, id: &str, query: &Query) -> Result<Reply, ApiError> {
    let index = |_: &StateStore, alloc: &Allocation| alloc.modify_index;
    let render = |_: &Core, alloc: &Allocation| alloc_json(alloc);
    read_one(
        shared,
        query,
        |s| s.alloc(id),
        index,
        "alloc not found",
        render,
    )
}

fn get_eval(shared: &Shared, id: &str, query: &Query) -> Result<Reply, ApiError> {
    let index = |_: &StateStore, eval: &Evaluation| eval.modify_index;
    let render = |_: &Core, eval: &Evaluation| eval_json(eval);
    read_one(
        shared,
        query,
        |s| s.eval(id),
        index,
        "eval not found",
        render,
    )
}

/// A blocking read of a list: its index is the store's.
fn blocking<'a>(
    shared: &'a Shared,
    query: &Query,
) -> Result<std::sync::MutexGuard<'a, Core>, ApiError> {
    blocking_on(shared, query, |core| core.server.store.index())
}

fn route(
    shared: &Shared,
    method: &Method,
    path: &str,
    query: &Query,
    body: &[u8],
) -> Result<Reply, ApiError> {
    let Some(rest) = path.strip_prefix("/v1/") else {
        return Err(error(404, ""));
    };
    let is_get = *method == Method::Get;
    let is_write = matches!(method, Method::Post | Method::Put);
    let invalid = || Err(error(405, "Invalid method"));
    match rest {
        "jobs" if is_get => list_jobs(shared, query),
        "jobs" if is_write => register(shared, None, body),
        "jobs" => invalid(),
        "jobs/parse" if is_write => parse_hcl(body),
        "jobs/parse" => invalid(),
        "allocations" if is_get => list_allocs(shared, query),
        "evaluations" if is_get => list_evals(shared, query),
        "services" if is_get => list_services(shared, query),
        "agent/self" if is_get => agent_self(shared),
        "status/leader" if is_get => Ok(Reply {
            status: 200,
            body: json!(shared.config.bind.to_string()),
            index: None,
        }),
        "status/peers" if is_get => Ok(Reply {
            status: 200,
            body: json!([shared.config.bind.to_string()]),
            index: None,
        }),
        "regions" if is_get => Ok(Reply {
            status: 200,
            body: json!(["global"]),
            index: None,
        }),
        "allocations" | "evaluations" | "services" | "agent/self" | "status/leader"
        | "status/peers" | "regions" => invalid(),
        _ => {
            if let Some(job) = rest.strip_prefix("job/") {
                return job_routes(shared, method, job, query, body);
            }
            if let Some(alloc) = rest.strip_prefix("allocation/") {
                return match alloc.split_once('/') {
                    None if is_get => get_alloc(shared, alloc, query),
                    Some((id, "stop")) if is_write => stop_alloc(shared, id, query),
                    None | Some((_, "stop")) => invalid(),
                    Some(_) => Err(error(404, "resource not found")),
                };
            }
            if let Some(eval) = rest.strip_prefix("evaluation/") {
                return match eval.split_once('/') {
                    None if is_get => get_eval(shared, eval, query),
                    Some((id, "allocations")) if is_get => eval_allocs(shared, id, query),
                    None | Some((_, "allocations")) => invalid(),
                    Some(_) => Err(error(404, "resource not found")),
                };
            }
            if let Some(name) = rest.strip_prefix("service/") {
                return if is_get {
                    get_service(shared, name, query)
                } else {
                    invalid()
                };
            }
            Err(error(404, ""))
        }
    }
}

/// `/v1/job/:id[/suffix]`, routed by suffix on the decoded path (IDs may contain `/`).
fn job_routes(
    shared: &Shared,
    method: &Method,
    rest: &str,
    query: &Query,
    body: &[u8],
) -> Result<Reply, ApiError> {
    let is_get = *method == Method::Get;
    for suffix in ["allocations", "versions", "evaluations", "summary"] {
        if let Some(id) = rest.strip_suffix(&format!("/{suffix}")) {
            if !is_get {
                return Err(error(405, "Invalid method"));
            }
            return match suffix {
                "allocations" => job_allocs(shared, id, query),
                "versions" => job_versions(shared, id, query),
                "evaluations" => job_evals(shared, id, query),
                _ => job_summary(shared, id, query),
            };
        }
    }
    match method {
        Method::Get => get_job(shared, rest, query),
        Method::Post | Method::Put => register(shared, Some(rest), body),
        Method::Delete => stop_job(shared, rest, query),
        _ => Err(error(405, "Invalid method")),
    }
}

// ---------------------------------------------------------------------------- jobs

/// Nomad's job status: `running` while an allocation runs, `dead` once stopped (or done)
/// with none running, `pending` before any ran.
fn job_status(core: &Core, job: &Job) -> &'static str {
    let mut allocs = core
        .server
        .store
        .allocs_by_job(&job.id)
        .filter(|a| !a.tombstone);
    let mut any = false;
    let mut live = false;
    for alloc in allocs.by_ref() {
        any = true;
        live |= !alloc.client_status.is_terminal();
    }
    match (live, job.stop, any) {
        (true, _, _) => "running",
        (false, true, _) | (false, false, true) => "dead",
        (false, false, false) => "pending",
    }
}

fn job_json(core: &Core, job: &Job) -> Value {
    let mut value = serde_json::to_value(job).expect("jobs serialize");
    let object = value.as_object_mut().expect("a job is an object");
    object.insert("Status".into(), json!(job_status(core, job)));
    object.insert("StatusDescription".into(), json!(""));
    object.insert("Stable".into(), json!(false));
    value
}

fn summary(core: &Core, job: &Job) -> Value {
    let mut groups = Map::new();
    for group in &job.task_groups {
        let mut counts = BTreeMap::from([
            ("Queued", 0),
            ("Complete", 0),
            ("Failed", 0),
            ("Running", 0),
            ("Starting", 0),
            ("Lost", 0),
            ("Unknown", 0),
        ]);
        for alloc in core.server.store.allocs_by_job(&job.id) {
            if alloc.tombstone || alloc.task_group != group.name {
                continue;
            }
            let key = match alloc.client_status {
                ClientStatus::Pending => "Starting",
                ClientStatus::Running => "Running",
                ClientStatus::Complete => "Complete",
                ClientStatus::Failed => "Failed",
                ClientStatus::Lost => "Lost",
            };
            *counts.get_mut(key).expect("listed") += 1;
        }
        groups.insert(group.name.clone(), json!(counts));
    }
    json!({
        "JobID": job.id, "Namespace": job.namespace, "Summary": groups,
        "Children": {"Pending": 0, "Running": 0, "Dead": 0},
        "CreateIndex": job.create_index, "ModifyIndex": job.modify_index,
    })
}

fn list_jobs(shared: &Shared, query: &Query) -> Result<Reply, ApiError> {
    let meta = query.bool("meta")?;
    let _ = meta;
    let core = blocking(shared, query)?;
    let prefix = query.get("prefix").unwrap_or("");
    let jobs: Vec<Value> = core
        .server
        .store
        .jobs()
        .filter(|job| job.id.starts_with(prefix))
        .map(|job| {
            json!({
                "ID": job.id, "ParentID": "", "Name": job.name, "Namespace": job.namespace,
                "Datacenters": job.datacenters, "Type": job.job_type, "Priority": job.priority,
                "Periodic": false, "ParameterizedJob": false, "Stop": job.stop,
                "Status": job_status(&core, job), "StatusDescription": "",
                "JobSummary": summary(&core, job), "CreateIndex": job.create_index,
                "ModifyIndex": job.modify_index, "JobModifyIndex": job.job_modify_index,
                "Version": job.version, "SubmitTime": 0,
            })
        })
        .collect();
    ok(json!(jobs), core.server.store.index())
}

fn job_versions(shared: &Shared, id: &str, query: &Query) -> Result<Reply, ApiError> {
    query.bool("diffs")?;
    let core = blocking_on(shared, query, |core| {
        let store = &core.server.store;
        store.job_versions(id).map_or(store.index(), |versions| {
            versions.iter().map(|j| j.modify_index).max().unwrap_or(0)
        })
    })?;
    let versions = core
        .server
        .store
        .job_versions(id)
        .ok_or_else(|| error(404, "job versions not found"))?;
    let newest_first: Vec<Value> = versions
        .iter()
        .rev()
        .map(|job| {
            let mut value = serde_json::to_value(job).expect("jobs serialize");
            value["Status"] = json!(job_status(&core, job));
            value
        })
        .collect();
    let index = versions.iter().map(|j| j.modify_index).max().unwrap_or(0);
    ok(
        json!({"Versions": newest_first, "Diffs": null, "Index": index, "LastContact": 0,
               "KnownLeader": true, "NextToken": ""}),
        index,
    )
}

fn job_allocs(shared: &Shared, id: &str, query: &Query) -> Result<Reply, ApiError> {
    let core = blocking(shared, query)?;
    let chosen = stubs(
        &core,
        core.server.store.allocs_by_job(id).filter(|a| !a.tombstone),
    );
    drop(core);
    stub_reply(chosen)
}

fn job_evals(shared: &Shared, id: &str, query: &Query) -> Result<Reply, ApiError> {
    let core = blocking(shared, query)?;
    let evals: Vec<Value> = core
        .server
        .store
        .evals()
        .filter(|e| e.job_id == id)
        .map(eval_json)
        .collect();
    ok(json!(evals), core.server.store.index())
}

/// Checks what the daemon's drivers need of each task: a known driver, and for `raw_exec`
/// a `command`.
fn driver_errors(job: &Job) -> Vec<SpecError> {
    let mut errors = Vec::new();
    for (g, group) in job.task_groups.iter().enumerate() {
        for (t, task) in group.tasks.iter().enumerate() {
            let at = format!("TaskGroups[{g}].Tasks[{t}]");
            if !DRIVERS.contains(&task.driver.as_str()) {
                errors.push(SpecError {
                    field: format!("{at}.Driver"),
                    problem: format!(
                        "unknown driver {:?} (this agent runs {})",
                        task.driver,
                        DRIVERS.join(", ")
                    ),
                });
                continue;
            }
            if task.driver != "raw_exec" {
                continue;
            }
            let config = task.config.clone().unwrap_or_default();
            match config.get("command") {
                Some(Value::String(command)) if !command.is_empty() => {}
                _ => errors.push(SpecError {
                    field: format!("{at}.Config.command"),
                    problem: "raw_exec needs a command (a non-empty string)".into(),
                }),
            }
            match config.get("args") {
                None => {}
                Some(Value::Array(args)) if args.iter().all(Value::is_string) => {}
                Some(_) => errors.push(SpecError {
                    field: format!("{at}.Config.args"),
                    problem: "must be a list of strings".into(),
                }),
            }
        }
    }
    errors
}

fn register(shared: &Shared, path_id: Option<&str>, body: &[u8]) -> Result<Reply, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(error(400, "Request body is empty"));
    }
    let value: Value =
        serde_json::from_slice(body).map_err(|e| error(400, format!("invalid JSON: {e}")))?;
    let has_job = value.as_object().is_some_and(|o| {
        o.iter()
            .any(|(k, v)| k.eq_ignore_ascii_case("job") && !v.is_null())
    });
    if !has_job {
        return Err(error(400, "Job must be specified"));
    }
    let eval_priority = value
        .as_object()
        .and_then(|o| {
            o.iter()
                .find(|(k, _)| k.eq_ignore_ascii_case("EvalPriority"))
        })
        .and_then(|(_, v)| v.as_i64())
        .unwrap_or(0);
    if eval_priority != 0 && !(1..=100).contains(&eval_priority) {
        return Err(error(
            400,
            "Eval priority must be between 1 and 100 inclusively",
        ));
    }
    let job = spec::parse_register_body(body).map_err(|e| error(400, e.to_string()))?;
    if let Some(id) = path_id {
        if id != job.id {
            return Err(error(400, "Job ID does not match name"));
        }
    }
    let errors = driver_errors(&job);
    if !errors.is_empty() {
        return Err(error(400, SpecErrors(errors).to_string()));
    }
    let mut core = shared.core();
    let starts = core
        .server
        .store
        .job(&job.id)
        .is_some_and(|old| old.stop && !job.stop && old.spec_only() == job.spec_only());
    let existing = core.server.store.job(&job.id).map(|j| j.modify_index);
    let response = core
        .server
        .register_job(job.clone())
        .map_err(|e| error(400, e.to_string()))?;
    if starts {
        // Re-registering a stopped job unchanged is `job start`, a step of the alphabet.
        core.log(LogEntry::step(
            Step::StartJob {
                job: job.id.clone(),
            },
            None,
            None,
        ));
    } else if let Some(stored) = core.server.store.job(&job.id) {
        // Any other registration is logged with the spec as stored, from which a validator
        // builds its model of the job (unchanged, it only made an evaluation).
        let entry = LogEntry::register_job(stored);
        core.log(entry);
    }
    commit(shared, &mut core)?;
    let job_modify_index = core
        .server
        .store
        .job(&job.id)
        .map(|j| j.job_modify_index)
        .or(existing)
        .unwrap_or(0);
    ok(
        json!({"EvalID": response.eval_id, "EvalCreateIndex": response.index,
               "JobModifyIndex": job_modify_index, "Warnings": "", "Index": response.index,
               "LastContact": 0, "KnownLeader": true, "NextToken": ""}),
        response.index,
    )
}

/// `/v1/jobs/parse`: HCL to the API's Job, unwrapped; with `Canonicalize`, Nomad's
/// defaults applied.
fn parse_hcl(body: &[u8]) -> Result<Reply, ApiError> {
    let request: Value =
        serde_json::from_slice(body).map_err(|e| error(400, format!("invalid JSON: {e}")))?;
    let field = |name: &str| {
        request
            .as_object()
            .and_then(|o| o.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)))
            .map(|(_, v)| v.clone())
    };
    let text = match field("JobHCL") {
        Some(Value::String(text)) if !text.trim().is_empty() => text,
        Some(Value::String(_)) | None | Some(Value::Null) => {
            return Err(error(400, "Job spec is empty"))
        }
        Some(_) => return Err(error(400, "JobHCL must be a string")),
    };
    let canonicalize = matches!(field("Canonicalize"), Some(Value::Bool(true)));
    let job = crate::hcl_jobspec::parse_job(&text).map_err(|e| error(400, e))?;
    if !canonicalize {
        return Ok(Reply {
            status: 200,
            body: job,
            index: None,
        });
    }
    let wrapped = serde_json::to_vec(&json!({ "Job": job })).expect("JSON values serialize");
    let job = spec::parse_register_body(&wrapped).map_err(|e| error(400, e.to_string()))?;
    Ok(Reply {
        status: 200,
        body: serde_json::to_value(job).expect("jobs serialize"),
        index: None,
    })
}

fn commit(shared: &Shared, core: &mut Core) -> Result<(), ApiError> {
    core.process_evals();
    core.commit_durably()
        .map_err(|e| error(500, format!("storing the write: {e}")))?;
    shared.notify(core);
    Ok(())
}

fn stop_job(shared: &Shared, id: &str, query: &Query) -> Result<Reply, ApiError> {
    let purge = query.bool("purge")?;
    query.bool("global")?;
    let no_shutdown_delay = query.bool("no_shutdown_delay")?;
    let eval_priority = query.int("eval_priority")?.filter(|p| *p != 0);
    let options = StopJobOptions {
        purge,
        no_shutdown_delay,
        eval_priority,
    };
    let mut core = shared.core();
    let known = core.server.store.job(id).is_some();
    let response = core.server.stop_job(id, options).map_err(|e| match e {
        ServerError::EvalPriorityOutOfRange(_) => {
            error(400, "Eval priority must be between 1 and 100 inclusively")
        }
        other => error(500, other.to_string()),
    })?;
    if !known {
        // Nomad answers an unknown job's deregistration with an all-zero body.
        return ok(
            json!({"EvalID": "", "EvalCreateIndex": 0, "JobModifyIndex": 0, "VolumeEvalID": "",
                   "VolumeEvalIndex": 0, "Index": 0, "LastContact": 0, "KnownLeader": false,
                   "NextToken": ""}),
            0,
        );
    }
    let step = Step::StopJob {
        job: id.to_string(),
        purge,
        no_shutdown_delay,
    };
    core.log(LogEntry::step(step, None, None));
    commit(shared, &mut core)?;
    ok(
        json!({"EvalID": response.eval_id, "EvalCreateIndex": response.index,
               "JobModifyIndex": response.index, "VolumeEvalID": "", "VolumeEvalIndex": 0,
               "Index": response.index, "LastContact": 0, "KnownLeader": true,
               "NextToken": ""}),
        response.index,
    )
}

// ---------------------------------------------------------------------------- allocations

fn alloc_json(alloc: &Allocation) -> Value {
    let mut value = serde_json::to_value(alloc).expect("allocations serialize");
    let object = value.as_object_mut().expect("an allocation is an object");
    object.insert("NodeName".into(), json!(alloc.node_id));
    object.insert("JobType".into(), json!(alloc.job.job_type));
    value
}

/// AllocListStub: the allocation without its job (lists are read often, by blocking
/// queries; serializing every allocation's job copy would dominate them).
#[derive(serde::Serialize)]
#[serde(rename_all = "PascalCase")]
struct AllocStub<'a> {
    #[serde(rename = "ID")]
    id: &'a str,
    namespace: &'a str,
    #[serde(rename = "EvalID")]
    eval_id: &'a str,
    name: &'a str,
    #[serde(rename = "NodeID")]
    node_id: &'a str,
    node_name: &'a str,
    #[serde(rename = "JobID")]
    job_id: &'a str,
    job_type: &'a str,
    job_version: u64,
    task_group: &'a str,
    desired_status: crate::server::structs::DesiredStatus,
    desired_description: &'a str,
    desired_transition: &'a crate::server::structs::DesiredTransition,
    client_status: ClientStatus,
    client_description: &'a str,
    task_states: &'a BTreeMap<String, crate::server::structs::TaskState>,
    previous_allocation: &'a Option<String>,
    next_allocation: &'a Option<String>,
    create_index: u64,
    modify_index: u64,
    alloc_modify_index: u64,
}

fn alloc_stub(alloc: &Allocation) -> Value {
    serde_json::to_value(AllocStub {
        id: &alloc.id,
        namespace: &alloc.namespace,
        eval_id: &alloc.eval_id,
        name: &alloc.name,
        node_id: &alloc.node_id,
        node_name: &alloc.node_id,
        job_id: &alloc.job_id,
        job_type: &alloc.job.job_type,
        job_version: alloc.job_version,
        task_group: &alloc.task_group,
        desired_status: alloc.desired_status,
        desired_description: &alloc.desired_description,
        desired_transition: &alloc.desired_transition,
        client_status: alloc.client_status,
        client_description: &alloc.client_description,
        task_states: &alloc.task_states,
        previous_allocation: &alloc.previous_allocation,
        next_allocation: &alloc.next_allocation,
        create_index: alloc.create_index,
        modify_index: alloc.modify_index,
        alloc_modify_index: alloc.alloc_modify_index,
    })
    .expect("allocations serialize")
}

/// Allocation stubs, serialized after the core's lock is released.
fn stubs<'a>(
    core: &'a Core,
    chosen: impl Iterator<Item = &'a Allocation>,
) -> (Vec<Allocation>, u64) {
    (chosen.cloned().collect(), core.server.store.index())
}

fn stub_reply((chosen, index): (Vec<Allocation>, u64)) -> Result<Reply, ApiError> {
    ok(
        json!(chosen.iter().map(alloc_stub).collect::<Vec<_>>()),
        index,
    )
}

fn list_allocs(shared: &Shared, query: &Query) -> Result<Reply, ApiError> {
    query.bool("resources")?;
    let core = blocking(shared, query)?;
    let prefix = query.get("prefix").unwrap_or("");
    let chosen = stubs(
        &core,
        core.server
            .store
            .allocs()
            .filter(|a| a.id.starts_with(prefix)),
    );
    drop(core);
    stub_reply(chosen)
}

fn stop_alloc(shared: &Shared, id: &str, query: &Query) -> Result<Reply, ApiError> {
    let no_shutdown_delay = query.bool("no_shutdown_delay")?;
    query.bool("reschedule")?;
    let mut core = shared.core();
    let context = core
        .server
        .store
        .alloc(id)
        .map(|a| (a.id.clone(), a.job_id.clone(), a.task_group.clone()));
    let response = core
        .server
        .stop_alloc(id, no_shutdown_delay)
        .map_err(|e| match e {
            ServerError::AllocNotFound(_) => error(404, "allocation not found"),
            other => error(500, other.to_string()),
        })?;
    if let Some((alloc, job, group)) = context {
        let step = Step::StopAlloc {
            alloc,
            no_shutdown_delay,
        };
        core.log(LogEntry::step(step, Some(job), Some(group)));
    }
    commit(shared, &mut core)?;
    ok(
        json!({"EvalID": response.eval_id, "Index": response.index}),
        response.index,
    )
}

// ---------------------------------------------------------------------------- evaluations

fn eval_json(eval: &Evaluation) -> Value {
    serde_json::to_value(eval).expect("evaluations serialize")
}

fn list_evals(shared: &Shared, query: &Query) -> Result<Reply, ApiError> {
    let core = blocking(shared, query)?;
    let prefix = query.get("prefix").unwrap_or("");
    let job = query.get("job");
    let status = query.get("status");
    let evals: Vec<Value> = core
        .server
        .store
        .evals()
        .filter(|e| e.id.starts_with(prefix))
        .filter(|e| job.is_none_or(|job| e.job_id == job))
        .filter(|e| status.is_none_or(|s| eval_json(e)["Status"] == s))
        .map(eval_json)
        .collect();
    ok(json!(evals), core.server.store.index())
}

fn eval_allocs(shared: &Shared, id: &str, query: &Query) -> Result<Reply, ApiError> {
    let core = blocking(shared, query)?;
    let chosen = stubs(
        &core,
        core.server.store.allocs().filter(|a| a.eval_id == id),
    );
    drop(core);
    stub_reply(chosen)
}

// ---------------------------------------------------------------------------- services

fn list_services(shared: &Shared, query: &Query) -> Result<Reply, ApiError> {
    let core = blocking(shared, query)?;
    let mut names: BTreeMap<(String, String), ()> = BTreeMap::new();
    for service in core.server.store.services() {
        let namespace = core
            .server
            .store
            .alloc_for_client(&service.alloc_id)
            .map_or("default".to_string(), |a| a.namespace.clone());
        names.insert((namespace, service.service_name.clone()), ());
    }
    let mut by_namespace: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for (namespace, name) in names.into_keys() {
        by_namespace
            .entry(namespace)
            .or_default()
            .push(json!({"ServiceName": name, "Tags": []}));
    }
    let list: Vec<Value> = by_namespace
        .into_iter()
        .map(|(namespace, services)| json!({"Namespace": namespace, "Services": services}))
        .collect();
    ok(json!(list), core.server.store.index())
}

fn get_service(shared: &Shared, name: &str, query: &Query) -> Result<Reply, ApiError> {
    let core = blocking(shared, query)?;
    let registrations: Vec<Value> = core
        .server
        .store
        .services()
        .filter(|s| s.service_name == name)
        .map(|s| {
            let mut value = serde_json::to_value(s).expect("services serialize");
            value["Namespace"] = json!("default");
            value["NodeID"] = json!(shared.config.node_name);
            value["Datacenter"] = json!("dc1");
            value["ModifyIndex"] = json!(s.create_index);
            value
        })
        .collect();
    ok(json!(registrations), core.server.store.index())
}

// ---------------------------------------------------------------------------- agent

fn agent_self(shared: &Shared) -> Result<Reply, ApiError> {
    let bind = shared.config.bind;
    let runners = shared.runner_count().to_string();
    Ok(Reply {
        status: 200,
        body: json!({
            "config": {"Region": "global", "Datacenter": "dc1", "NodeName": shared.config.node_name,
                       "DataDir": shared.config.data_dir, "Version": {"Version": env!("CARGO_PKG_VERSION")},
                       "DevMode": true},
            "member": {"Name": shared.config.node_name, "Addr": bind.ip().to_string(),
                       "Port": bind.port(), "Status": "alive", "Tags": {"region": "global", "dc": "dc1"}},
            "stats": {"nomad": {"server": "true", "leader": "true", "leader_addr": bind.to_string()},
                      "client": {"known_servers": bind.to_string(), "alloc_runners": runners}},
        }),
        index: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn booleans_parse_as_go_does_and_name_the_parameter_otherwise() {
        let query = Query::parse("purge=True&global=0&no_shutdown_delay=yes").unwrap();
        assert_eq!(query.bool("purge"), Ok(true));
        assert_eq!(query.bool("global"), Ok(false));
        assert_eq!(query.bool("absent"), Ok(false));
        let bad = query.bool("no_shutdown_delay").unwrap_err();
        assert_eq!(bad.status, 400);
        assert!(
            bad.message.contains("\"no_shutdown_delay\" (yes)"),
            "{}",
            bad.message
        );
    }

    #[test]
    fn go_durations_parse() {
        use spec::parse_go_duration;
        assert_eq!(parse_go_duration("2000ms"), Some(2_000_000_000));
        assert_eq!(parse_go_duration("1m30s"), Some(90_000_000_000));
        assert_eq!(parse_go_duration("1.5s"), Some(1_500_000_000));
        assert_eq!(parse_go_duration("0"), Some(0));
        assert_eq!(parse_go_duration("5"), None);
        assert_eq!(parse_go_duration("soon"), None);
    }

    #[test]
    fn paths_and_queries_are_percent_decoded() {
        assert_eq!(split_url("/v1/job/my%20job?x=1").0, "/v1/job/my job");
        let query = Query::parse("namespace=%2A&filter=a+b").unwrap();
        assert_eq!(query.get("namespace"), Some("*"));
        assert_eq!(query.get("filter"), Some("a b"));
    }
}
