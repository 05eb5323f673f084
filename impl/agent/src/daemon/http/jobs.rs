//! `/v1/jobs` and `/v1/job/:id[/…]`: reads, registration, HCL parsing, stops.

use super::*;

/// A job's index for blocking reads: its own `ModifyIndex` or its allocations', whichever is
/// later — its `Status` and summary follow its allocations (in Nomad a status change bumps
/// the job's index).
pub(super) fn job_index(store: &StateStore, job: &Job) -> u64 {
    store
        .allocs_by_job(&job.id)
        .map(|alloc| alloc.modify_index)
        .fold(job.modify_index, u64::max)
}

/// What a read of a job's record (its versions, its submissions) waits on: the job, or
/// while there is none, the jobs table.
pub(super) fn watch_job(store: &StateStore, id: &str) -> Vec<Key> {
    match store.job(id) {
        Some(_) => vec![Key::Object(Table::Jobs, id.to_string())],
        None => vec![Key::Table(Table::Jobs)],
    }
}

/// A job, as a blocking read of it watches it: its record and its allocations.
fn job_object(id: &str) -> Object<'_> {
    Object {
        table: Table::Jobs,
        id,
        also: AlsoOn::JobAllocs,
    }
}

pub(super) fn get_job(shared: &Shared, id: &str, query: &Query) -> Result<Reply, ApiError> {
    let index = job_index;
    read_one(
        shared,
        query,
        job_object(id),
        |s| s.job(id),
        index,
        "job not found",
        job_json,
    )
}

pub(super) fn job_summary(shared: &Shared, id: &str, query: &Query) -> Result<Reply, ApiError> {
    let index = job_index;
    read_one(
        shared,
        query,
        job_object(id),
        |s| s.job(id),
        index,
        "job not found",
        summary,
    )
}

/// Nomad's job status (see [`StateStore::job_status`]).
pub(super) fn job_status(core: &Core, job: &Job) -> &'static str {
    core.server.store.job_status(job)
}

pub(super) fn job_json(core: &Core, job: &Job) -> Value {
    job_json_with(job, job_status(core, job))
}

/// A job as Nomad shows it, with its status.
pub(super) fn job_json_with(job: &Job, status: &str) -> Value {
    let mut value = serde_json::to_value(job).expect("jobs serialize");
    let object = value.as_object_mut().expect("a job is an object");
    object.insert("Status".into(), json!(status));
    object.insert("StatusDescription".into(), json!(""));
    nomad_zeros::job(&mut value);
    value
}

pub(super) fn summary(core: &Core, job: &Job) -> Value {
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
        // Nomad's summary is rewritten with every change of an allocation's client status.
        "CreateIndex": job.create_index,
        "ModifyIndex": job_index(&core.server.store, job),
    })
}

pub(super) fn list_jobs(shared: &Shared, query: &Query) -> Result<Reply, ApiError> {
    let meta = query.bool("meta")?;
    let core = blocking_table(shared, query, &JOBS_LIST)?;
    let prefix = query.get("prefix").unwrap_or("");
    let jobs: Vec<Value> = core
        .server
        .store
        .jobs()
        .filter(|job| job.id.starts_with(prefix))
        .map(|job| {
            let mut stub = json!({
                "ID": job.id, "ParentID": "", "Name": job.name, "Namespace": job.namespace,
                "Datacenters": job.datacenters, "Type": job.job_type, "Priority": job.priority,
                "Periodic": false, "ParameterizedJob": false, "Stop": job.stop,
                "Status": job_status(&core, job), "StatusDescription": "",
                "JobSummary": summary(&core, job), "CreateIndex": job.create_index,
                "ModifyIndex": job.modify_index, "JobModifyIndex": job.job_modify_index,
                "SubmitTime": job.submit_time,
            });
            if meta {
                stub["Meta"] = json!(job.meta);
            }
            stub
        })
        .collect();
    ok(
        json!(jobs),
        tables_index(&core.server.store.table_indexes(), &JOBS_LIST),
    )
}

pub(super) fn job_versions(shared: &Shared, id: &str, query: &Query) -> Result<Reply, ApiError> {
    let with_diffs = query.bool("diffs")?;
    let core = blocking_on(
        shared,
        query,
        |core| {
            let store = &core.server.store;
            store
                .job_versions(id)
                .map_or(store.table_indexes().jobs, |versions| {
                    versions.iter().map(|j| j.modify_index).max().unwrap_or(0)
                })
        },
        |core| watch_job(&core.server.store, id),
    )?;
    let versions = core
        .server
        .store
        .job_versions(id)
        .ok_or_else(|| error(404, "job versions not found"))?;
    let newest_first: Vec<Value> = versions
        .iter()
        .rev()
        .map(|job| job_json(&core, job))
        .collect();
    let index = versions.iter().map(|j| j.modify_index).max().unwrap_or(0);
    // Nomad's `Diffs`, newest first: each version against the one before it.
    let diffs = with_diffs.then(|| {
        let no_updates = BTreeMap::new();
        versions
            .windows(2)
            .rev()
            .map(|pair| {
                let old = super::plan::version_json(&pair[0]);
                super::plan::job_diff(
                    Some(&old),
                    &super::plan::version_json(&pair[1]),
                    &no_updates,
                )
            })
            .collect::<Vec<_>>()
    });
    ok(
        json!({"Versions": newest_first, "Diffs": diffs, "Index": index, "LastContact": 0,
               "KnownLeader": true, "NextToken": ""}),
        index,
    )
}

pub(super) fn job_allocs(shared: &Shared, id: &str, query: &Query) -> Result<Reply, ApiError> {
    query.bool("all")?;
    // The allocations table's index, as Nomad's; woken by the job's allocations only.
    let core = blocking_on(
        shared,
        query,
        |core| core.server.store.table_indexes().allocs,
        |_| vec![Key::JobAllocs(id.to_string())],
    )?;
    let chosen = stubs(
        &core,
        core.server.store.allocs_by_job(id).filter(|a| !a.tombstone),
    );
    drop(core);
    stub_reply(chosen, false)
}

pub(super) fn job_evals(shared: &Shared, id: &str, query: &Query) -> Result<Reply, ApiError> {
    let core = blocking_table(shared, query, &[Table::Evals])?;
    let evals: Vec<Value> = core
        .server
        .store
        .evals()
        .filter(|e| e.job_id == id)
        .map(eval_json)
        .collect();
    ok(json!(evals), core.server.store.table_indexes().evals)
}

/// The most arguments a raw_exec task's command takes.
pub(super) const MAX_ARGS: usize = 4096;

/// Checks what the daemon's drivers need of each task: a known driver, and for `raw_exec`
/// a `command`.
pub(super) fn driver_errors(job: &Job) -> Vec<SpecError> {
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
            let no_nul = |v: &Value| v.as_str().is_some_and(|text| !text.contains('\0'));
            match config.get("command") {
                Some(Value::String(command)) if !command.is_empty() && !command.contains('\0') => {}
                _ => errors.push(SpecError {
                    field: format!("{at}.Config.command"),
                    problem: "raw_exec needs a command (a non-empty string with no NUL)".into(),
                }),
            }
            if let Some(problem) = user_problem(&task.user) {
                errors.push(SpecError {
                    field: format!("{at}.User"),
                    problem,
                });
            }
            match config.get("args") {
                None => {}
                Some(Value::Array(args)) if args.len() <= MAX_ARGS && args.iter().all(no_nul) => {}
                Some(_) => errors.push(SpecError {
                    field: format!("{at}.Config.args"),
                    problem: format!("must be a list of at most {MAX_ARGS} strings with no NUL"),
                }),
            }
        }
    }
    errors
}

/// A register body's job as this agent would take it — decoded, defaulted, valid, in the
/// one namespace, its drivers' needs met — and the warnings for it (fields not acted on,
/// Nomad 2.0.1's shutdown_delay warnings): what registering and planning both start from.
pub(super) fn accepted_job(body: &[u8]) -> Result<(Job, Vec<String>), ApiError> {
    let (job, mut warnings) =
        spec::parse_register_body_warned(body).map_err(|e| error(400, e.to_string()))?;
    warnings.extend(spec::fields::shutdown_delay_warnings(&job));
    if job.namespace != "default" {
        // One namespace only: every object, and every ACL check, is in `default`.
        return Err(error(
            400,
            format!(
                "job {:?} is in nonexistent namespace {:?}",
                job.id, job.namespace
            ),
        ));
    }
    let errors = driver_errors(&job);
    if !errors.is_empty() {
        return Err(error(400, SpecErrors(errors).to_string()));
    }
    Ok((job, warnings))
}

pub(super) fn register(
    shared: &Shared,
    path_id: Option<&str>,
    body: &[u8],
) -> Result<Reply, ApiError> {
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
    let member = |name: &str| {
        value
            .as_object()
            .and_then(|o| o.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)))
            .map(|(_, v)| v)
            .filter(|v| !v.is_null())
    };
    let eval_priority = match member("EvalPriority") {
        None => 0,
        Some(v) => v
            .as_i64()
            .ok_or_else(|| error(400, "EvalPriority must be an integer"))?,
    };
    if eval_priority != 0 && !(1..=100).contains(&eval_priority) {
        return Err(error(
            400,
            "Eval priority must be between 1 and 100 inclusively",
        ));
    }
    let enforce = match member("EnforceIndex") {
        None => false,
        Some(v) => v
            .as_bool()
            .ok_or_else(|| error(400, "EnforceIndex must be a boolean"))?,
    };
    let job_modify_index = match member("JobModifyIndex") {
        None => 0,
        Some(v) => v
            .as_u64()
            .ok_or_else(|| error(400, "JobModifyIndex must be a non-negative integer"))?,
    };
    let options = quiesce_core::server::RegisterOptions {
        eval_priority: (eval_priority != 0).then_some(eval_priority),
        enforce_index: enforce.then_some(job_modify_index),
    };
    let (mut job, mut warnings) = accepted_job(body)?;
    job.submission = job_reads::submission_of(member("Submission"), &mut warnings)?.map(Arc::new);
    if let Some(id) = path_id {
        if id != job.id {
            return Err(error(400, "Job ID does not match name"));
        }
    }
    let mut core = shared.core();
    // A register without a source stores none for its version, as Nomad's: only a stop
    // carries the previous version's over (`job start` sends the stopped version's).
    let starts = is_start(&core, &job);
    let existing = core.server.store.job(&job.id).map(|j| j.modify_index);
    let response = core.server.register_job_with(job.clone(), options)?;
    log_registration(&mut core, &job.id, starts);
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
               "JobModifyIndex": job_modify_index,
               "Warnings": spec::fields::warnings_text(&warnings), "Index": response.index,
               "LastContact": 0, "KnownLeader": true, "NextToken": ""}),
        response.index,
    )
}

/// `/v1/jobs/parse`: HCL to the API's Job, unwrapped, its variables given values from the
/// `Variables` text (a var-file's); with `Canonicalize`, Nomad's defaults applied.
pub(super) fn parse_hcl(shared: &Shared, body: &[u8]) -> Result<Reply, ApiError> {
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
    // A var-file's text (Nomad's `Variables`), bounded as a job's source is.
    let variables = match field("Variables") {
        Some(Value::String(text)) => text,
        None | Some(Value::Null) => String::new(),
        Some(_) => return Err(error(400, "Variables must be a string")),
    };
    if variables.len() > spec::MAX_SUBMISSION_BYTES {
        return Err(error(
            400,
            format!(
                "Variables is larger than {} bytes, the most a job's source may be",
                spec::MAX_SUBMISSION_BYTES
            ),
        ));
    }
    let job = super::parse_hcl::parse_job_bounded(&shared.config.supervisor, &text, &variables)
        .map_err(|e| error(400, e))?;
    if !canonicalize {
        return Ok(Reply {
            status: 200,
            body: job,
            index: None,
            next_token: None,
            raw: None,
            encoded: None,
            gzipped: false,
            json: None,
        });
    }
    let wrapped = serde_json::to_vec(&json!({ "Job": job })).expect("JSON values serialize");
    let job = spec::decode_register_body(&wrapped).map_err(|e| error(400, e.to_string()))?;
    Ok(Reply {
        status: 200,
        body: serde_json::to_value(job).expect("jobs serialize"),
        index: None,
        next_token: None,
        raw: None,
        encoded: None,
        gzipped: false,
        json: None,
    })
}

/// `/v1/validate/job`: the job's problems, as registering it would find them, in Nomad's
/// answer (200 whatever it found; `ValidationErrors` lists them).
pub(super) fn validate_job(body: &[u8]) -> Result<Reply, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(error(400, "Request body is empty"));
    }
    let mut warnings = Vec::new();
    let problems: Vec<String> = match spec::decode_register_body_warned(body) {
        Err(errors) => errors.0.iter().map(ToString::to_string).collect(),
        Ok((job, warned)) => {
            warnings = warned;
            warnings.extend(spec::fields::shutdown_delay_warnings(&job));
            let mut found = job.validate().err().map_or_else(Vec::new, |e| e.0);
            if found.is_empty() {
                found.extend(driver_errors(&job));
            }
            if job.namespace != "default" {
                found.push(SpecError {
                    field: "Namespace".into(),
                    problem: format!("nonexistent namespace {:?}", job.namespace),
                });
            }
            found.iter().map(ToString::to_string).collect()
        }
    };
    let joined = match problems.len() {
        0 => String::new(),
        n => format!(
            "{n} error{} occurred:\n{}",
            if n == 1 { "" } else { "s" },
            problems
                .iter()
                .map(|p| format!("\t* {p}\n"))
                .collect::<String>()
        ),
    };
    plain(json!({"DriverConfigValidated": problems.is_empty(),
                 "ValidationErrors": if problems.is_empty() { Value::Null } else { json!(problems) },
                 "Error": joined, "Warnings": spec::fields::warnings_text(&warnings)}))
}

/// Whether registering `job` is `job start`: the stored version is stopped and `job` is
/// its spec unchanged, running.
pub(super) fn is_start(core: &Core, job: &Job) -> bool {
    core.server
        .store
        .job(&job.id)
        .is_some_and(|old| old.stop && !job.stop && old.spec_only() == job.spec_only())
}

/// Logs a registration of job `id` just written: `job start` (`starts`) is a step of the
/// alphabet; any other is logged with the spec as stored, from which a validator builds
/// its model of the job (unchanged, it only made an evaluation).
pub(super) fn log_registration(core: &mut Core, id: &str, starts: bool) {
    if starts {
        core.log(LogEntry::step(
            Step::StartJob { job: id.into() },
            None,
            None,
        ));
    } else if let Some(stored) = core.server.store.job(id) {
        let entry = LogEntry::register_job(stored);
        core.log(entry);
    }
}

pub(super) fn commit(shared: &Shared, core: &mut Core) -> Result<(), ApiError> {
    core.process_evals();
    let stored = core.commit_durably();
    // Whatever came of it: a write kept for a retry is pulled once it is durable, by
    // workers woken now (they look again while it is held).
    shared.notify(core);
    stored.map_err(ApiError::from)
}

pub(super) fn stop_job(shared: &Shared, id: &str, query: &Query) -> Result<Reply, ApiError> {
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
    let response = core.server.stop_job(id, options)?;
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
        job: id.into(),
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

/// Whether this agent can run a raw_exec task as `user`: the user exists here, and the
/// agent is root or is that user (Nomad's raw_exec switches users only as root).
fn user_problem(user: &str) -> Option<String> {
    if user.is_empty() {
        return None;
    }
    let found = match nix::unistd::User::from_name(user) {
        Ok(Some(found)) => found,
        Ok(None) => return Some(format!("no user {user:?} on this host")),
        Err(e) => return Some(format!("looking up user {user:?}: {e}")),
    };
    let me = nix::unistd::geteuid();
    (!me.is_root() && found.uid != me).then(|| {
        format!(
            "the agent runs as uid {me}, not root: it cannot run a task as user {user:?} (uid {})",
            found.uid
        )
    })
}
