//! `GET /v1/jobs/statuses`, and `POST` with a body naming the jobs: Nomad 1.8's
//! `Job.Statuses` (`nomad/job_endpoint_statuses.go`, `command/agent/job_endpoint_statuses.go`),
//! what its web UI's jobs list reads. Each job is a `JobStatusesJob` (`nomad/structs/job.go`),
//! its fields in Nomad's order: the job's own, then every allocation of the job — terminal
//! ones and older versions' too (Nomad's `AllocsByJob` with `anyCreateIndex`), by ID — the
//! sum of its groups' counts, and its latest deployment.
//!
//! As Nomad: newest change first (the jobs by `ModifyIndex`, descending; `reverse=true`,
//! oldest first); `per_page` and `next_token` page them, the token the `ModifyIndex` of the
//! next page's first job (`X-Nomad-NextToken`); a `POST` body `{"Jobs": [{"ID", "Namespace"}],
//! "IncludeChildren"}` keeps the jobs named (a page as long as the list), and one without jobs
//! is a 400 `no jobs in request`; `include_children` is read (this agent has no child jobs);
//! a `namespace` other than `default` or `*` has no jobs. The capability is `read-job`.
//!
//! The index answered, and blocked on, is the highest `ModifyIndex` of the page's jobs, their
//! allocations and latest deployments — so a change to another page's allocations wakes no
//! one — and of the jobs table. Nomad takes the jobs table's only when a blocking query's
//! page gains or loses a job, which needs the page it answered before; here any job's write
//! ends a wait (once: the next query asks from that index).
//!
//! Where this agent differs: a page also ends before it would hold more than
//! [`MAX_PAGE_ENTRIES`] jobs and allocations, with a next token (Nomad's has no bound without
//! `per_page`); `filter` and `prefix` are refused with a 400 (Nomad evaluates the one and
//! ignores the other here); a `GET`'s body is not read (Nomad reads one), and a `POST` body
//! is at most [`MAX_REQUEST_BYTES`]; an invalid `next_token` is a 400 (Nomad's reads as 0).
//! `ChildStatuses` is always `null` and `ParentID` `""` (no periodic or parameterized jobs),
//! `FollowupEvalID` `""` (no rescheduling), `HasPausedTask` false (Nomad Enterprise's).

use super::*;
use serde::Serialize;
use std::collections::BTreeSet;

pub(super) const PATH: &str = "/v1/jobs/statuses";

/// The most jobs and allocations a page holds (each counts one): about 6 MB of JSON. A
/// page always holds its first job, however many allocations it has.
pub const MAX_PAGE_ENTRIES: usize = 20_000;

/// The most bytes of a `POST` body (the UI names the jobs of one page: well under it).
pub const MAX_REQUEST_BYTES: usize = 256 << 10;

/// What a request asks for, read before the store is looked at.
struct Asked {
    per_page: Option<usize>,
    /// Jobs from this `ModifyIndex` on (down, newest first; up with `reverse`).
    next_token: Option<u64>,
    newest_first: bool,
    /// `None`: every namespace (`*`).
    namespace: Option<String>,
    /// The jobs a `POST` named, `(namespace, ID)`.
    jobs: Option<BTreeSet<(String, String)>>,
}

/// A page of jobs: the jobs, the token of the next page's first one, the page's index.
struct Page<'a> {
    jobs: Vec<&'a Job>,
    next_token: Option<String>,
    index: u64,
}

pub(super) fn job_statuses(shared: &Shared, query: &Query, body: &[u8]) -> Result<Reply, ApiError> {
    let asked = asked(query, body)?;
    // The page's index follows its jobs, their allocations and latest deployments, and
    // the jobs table: woken by those tables.
    let core = blocking_on(
        shared,
        query,
        |core| page(&core.server.store, &asked).index,
        |_| {
            [Table::Jobs, Table::Allocs, Table::Deployments]
                .map(Key::Table)
                .to_vec()
        },
    )?;
    let store = &core.server.store;
    let Page {
        jobs,
        next_token,
        index,
    } = page(store, &asked);
    let jobs: Vec<StatusesJob> = jobs.iter().map(|job| statuses_job(store, job)).collect();
    drop(core);
    let mut json = serde_json::to_vec(&jobs).expect("statuses serialize");
    json.push(b'\n');
    Ok(Reply {
        status: 200,
        body: Value::Null,
        index: Some(index),
        next_token,
        raw: None,
        encoded: None,
        gzipped: false,
        json: Some(json),
    })
}

fn asked(query: &Query, body: &[u8]) -> Result<Asked, ApiError> {
    for refused in ["filter", "prefix"] {
        if query.get(refused).is_some_and(|value| !value.is_empty()) {
            return Err(error(
                400,
                format!(
                    "{refused} is not supported by /v1/jobs/statuses on this agent (use \
                     per_page, next_token, reverse, or a POST naming the jobs)"
                ),
            ));
        }
    }
    let per_page = match query.int("per_page")? {
        None | Some(0) => None,
        Some(n) if n > 0 => Some(usize::try_from(n).unwrap_or(usize::MAX)),
        Some(n) => {
            return Err(error(
                400,
                format!("Invalid per_page {n}: must be positive"),
            ))
        }
    };
    let next_token = match query.get("next_token").filter(|t| !t.is_empty()) {
        None => None,
        Some(token) => Some(token.parse::<u64>().map_err(|_| {
            error(
                400,
                format!("Invalid next_token {token:?}: a job's ModifyIndex"),
            )
        })?),
    };
    query.bool("include_children")?;
    let namespace = match query.get("namespace").unwrap_or("") {
        "" => Some("default".to_string()),
        "*" => None,
        other => Some(other.to_string()),
    };
    let mut asked = Asked {
        per_page,
        next_token,
        // Nomad inverts `reverse`: its default is the newest change first.
        newest_first: !query.bool("reverse")?,
        namespace,
        jobs: None,
    };
    if !body.is_empty() {
        let jobs = named_jobs(body)?;
        // Nomad's: the page is as long as the list, and the namespace is each job's.
        asked.per_page = Some(jobs.len());
        if asked.namespace.as_deref() == Some("default") {
            asked.namespace = None;
        }
        asked.jobs = Some(jobs);
    }
    Ok(asked)
}

/// The jobs a `POST` body names (Nomad's `api.JobStatusesRequest`, its keys in any case and
/// others ignored, as Go decodes them): `(namespace, ID)`, a missing namespace `default`.
fn named_jobs(body: &[u8]) -> Result<BTreeSet<(String, String)>, ApiError> {
    let fields = small_object(body, MAX_REQUEST_BYTES, "a job statuses")?;
    let member = |object: &Map<String, Value>, name: &str| {
        object
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.clone())
            .filter(|value| !value.is_null())
    };
    let wrong = |what: &str| error(400, format!("error decoding request: {what}"));
    if let Some(include) = member(&fields, "IncludeChildren") {
        include
            .as_bool()
            .ok_or_else(|| wrong("IncludeChildren must be a boolean"))?;
    }
    let listed = match member(&fields, "Jobs") {
        None => Vec::new(),
        Some(Value::Array(listed)) => listed,
        Some(_) => return Err(wrong("Jobs must be a list")),
    };
    let mut jobs = BTreeSet::new();
    for entry in &listed {
        let Value::Object(entry) = entry else {
            return Err(wrong("each of Jobs is an object with ID and Namespace"));
        };
        let text = |name: &str| match member(entry, name) {
            None => Ok(String::new()),
            Some(Value::String(text)) => Ok(text),
            Some(_) => Err(wrong(&format!("a job's {name} must be a string"))),
        };
        let namespace = Some(text("Namespace")?)
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "default".to_string());
        jobs.insert((namespace, text("ID")?));
    }
    if jobs.is_empty() {
        return Err(error(400, "no jobs in request"));
    }
    Ok(jobs)
}

/// The jobs of the page `asked` for, in its order, and its index (see the module's doc).
fn page<'a>(store: &'a StateStore, asked: &Asked) -> Page<'a> {
    let mut jobs: Vec<&Job> = store
        .jobs()
        .filter(|job| asked.namespace.as_ref().is_none_or(|n| job.namespace == *n))
        .filter(|job| {
            asked
                .jobs
                .as_ref()
                .is_none_or(|named| named.contains(&(job.namespace.clone(), job.id.clone())))
        })
        .collect();
    jobs.sort_by(|a, b| {
        (a.modify_index, &a.namespace, &a.id).cmp(&(b.modify_index, &b.namespace, &b.id))
    });
    if asked.newest_first {
        jobs.reverse();
    }
    if let Some(token) = asked.next_token {
        jobs.retain(|job| {
            if asked.newest_first {
                job.modify_index <= token
            } else {
                job.modify_index >= token
            }
        });
    }
    let (mut entries, mut kept) = (0, 0);
    for job in &jobs {
        let cost = 1 + store
            .allocs_by_job(&job.id)
            .filter(|a| !a.tombstone)
            .count();
        let full = asked.per_page.is_some_and(|most| kept == most);
        if full || (kept > 0 && entries + cost > MAX_PAGE_ENTRIES) {
            break;
        }
        entries += cost;
        kept += 1;
    }
    debug_assert!(kept > 0 || jobs.is_empty(), "a page holds its first job");
    let next_token = jobs.get(kept).map(|job| job.modify_index.to_string());
    jobs.truncate(kept);
    let index = jobs
        .iter()
        .flat_map(|job| {
            let allocs = store
                .allocs_by_job(&job.id)
                .filter(|a| !a.tombstone)
                .map(|a| a.modify_index);
            let deployment = store.latest_deployment(&job.id).map(|d| d.modify_index);
            allocs.chain(deployment).chain([job.modify_index])
        })
        .fold(store.table_indexes().jobs, u64::max);
    Page {
        jobs,
        next_token,
        index,
    }
}

/// Nomad's `JobStatusesJob`, its fields in Nomad's order.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct StatusesJob {
    #[serde(rename = "ID")]
    id: String,
    namespace: String,
    name: String,
    #[serde(rename = "Type")]
    job_type: String,
    node_pool: String,
    datacenters: Vec<String>,
    priority: i64,
    version: u64,
    submit_time: i64,
    modify_index: u64,
    /// `null` for none, as Go's nil slice.
    allocs: Option<Vec<StatusesAlloc>>,
    group_count_sum: i64,
    /// A periodic or parameterized job's children's: this agent has none.
    child_statuses: Option<Vec<String>>,
    #[serde(rename = "ParentID")]
    parent_id: &'static str,
    latest_deployment: Option<LatestDeployment>,
    stop: bool,
    is_pack: bool,
    status: &'static str,
}

/// Nomad's `JobStatusesAlloc`.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct StatusesAlloc {
    #[serde(rename = "ID")]
    id: String,
    group: String,
    client_status: ClientStatus,
    #[serde(rename = "NodeID")]
    node_id: String,
    deployment_status: AllocDeployment,
    job_version: u64,
    #[serde(rename = "FollowupEvalID")]
    followup_eval_id: &'static str,
    has_paused_task: bool,
}

/// Nomad's `JobStatusesDeployment`: never `null`, unlike the allocation's own.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct AllocDeployment {
    canary: bool,
    healthy: Option<bool>,
}

/// Nomad's `JobStatusesLatestDeployment`.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct LatestDeployment {
    #[serde(rename = "ID")]
    id: String,
    is_active: bool,
    job_version: u64,
    status: String,
    status_description: String,
    all_auto_promote: bool,
    requires_promotion: bool,
}

/// `jobStatusesJobFromJob`: the job, its allocations, its latest deployment.
fn statuses_job(store: &StateStore, job: &Job) -> StatusesJob {
    let allocs: Vec<StatusesAlloc> = store
        .allocs_by_job(&job.id)
        .filter(|alloc| !alloc.tombstone)
        .map(|alloc| {
            let deployment = alloc.deployment_status.as_ref();
            StatusesAlloc {
                id: alloc.id.to_string(),
                group: alloc.task_group.to_string(),
                client_status: alloc.client_status,
                node_id: alloc.node_id.to_string(),
                deployment_status: AllocDeployment {
                    canary: deployment.is_some_and(|d| d.canary),
                    healthy: deployment.and_then(|d| d.healthy),
                },
                job_version: alloc.job.version,
                followup_eval_id: "",
                has_paused_task: false,
            }
        })
        .collect();
    let latest_deployment = store.latest_deployment(&job.id).map(|d| LatestDeployment {
        id: d.id.clone(),
        is_active: d.is_active(),
        job_version: d.job_version,
        status: d.status.clone(),
        status_description: d.status_description.clone(),
        all_auto_promote: d.all_auto_promote(),
        // Nomad's `RequiresPromotion` holds of a running deployment only.
        requires_promotion: d.is_running() && d.requires_promotion(),
    });
    StatusesJob {
        id: job.id.clone(),
        namespace: job.namespace.clone(),
        name: job.name.clone(),
        job_type: job.job_type.clone(),
        node_pool: job.node_pool.clone(),
        datacenters: job.datacenters.clone(),
        priority: job.priority,
        version: job.version,
        submit_time: job.submit_time,
        modify_index: job.modify_index,
        allocs: (!allocs.is_empty()).then_some(allocs),
        // A group without a count has Nomad's default, 1.
        group_count_sum: job
            .task_groups
            .iter()
            .map(|group| group.count.unwrap_or(1))
            .sum(),
        child_statuses: None,
        parent_id: "",
        latest_deployment,
        stop: job.stop,
        is_pack: job
            .meta
            .as_ref()
            .is_some_and(|meta| meta.contains_key("pack.name")),
        status: store.job_status(job),
    }
}
