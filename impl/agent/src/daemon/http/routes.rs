//! Every route the agent serves, each declared once: the methods it answers, its path, what
//! it needs of the request's token, and its handler. A request goes to the first route
//! whose path matches; among the routes of that path, to the one of its method, else a 405;
//! no path, a 404. The token is checked before the handler runs, so a route cannot forget
//! its check, and `impl/cli/tests/routes.rs` walks [`ROUTES`] with ACLs on: every route that
//! needs something refuses a token without it, and takes one with it.
//!
//! Job IDs may contain `/`: `/v1/job/…` paths are told apart by their suffix, as Nomad's are
//! (no job ID ends in one), and the job's own route comes last.

use super::acl::{self, Need};
use super::*;
use crate::acl::Authority;

/// What a handler is given: the request, its token's rights, and the path's variable part.
pub struct Call<'a> {
    pub(super) shared: &'a Shared,
    pub(super) authority: &'a Authority,
    /// The ID (or name) the path names; empty for a fixed path.
    pub(super) id: &'a str,
    pub(super) query: &'a Query,
    pub(super) body: &'a [u8],
}

/// The methods a route answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Methods {
    Get,
    /// `GET` and `HEAD`.
    Read,
    /// `PUT` and `POST`, as Nomad takes either for its writes.
    Write,
    /// `POST` alone: a read whose request has a body (`/v1/jobs/statuses`).
    Post,
    Delete,
}

impl Methods {
    fn take(self, method: &Method) -> bool {
        match self {
            Methods::Get => *method == Method::Get,
            Methods::Read => matches!(method, Method::Get | Method::Head),
            Methods::Write => matches!(method, Method::Put | Method::Post),
            Methods::Post => *method == Method::Post,
            Methods::Delete => *method == Method::Delete,
        }
    }

    /// A method this takes (for a test that walks the routes).
    pub fn example(self) -> &'static str {
        match self {
            Methods::Get | Methods::Read => "GET",
            Methods::Write => "PUT",
            Methods::Post => "POST",
            Methods::Delete => "DELETE",
        }
    }
}

/// A route's path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pattern {
    /// Exactly this path.
    Fixed(&'static str),
    /// The prefix, then an ID without `/`.
    Id(&'static str),
    /// The prefix, an ID without `/`, then the suffix.
    IdThen(&'static str, &'static str),
    /// The prefix, then anything, `/` included (an allocation's logs, a service's name).
    Rest(&'static str),
    /// `/v1/job/<job ID>` then the suffix; the job ID may hold `/`.
    Job(&'static str),
}

const JOB: &str = "/v1/job/";

impl Pattern {
    /// The path's variable part, if the path is this pattern's.
    fn matches(self, path: &str) -> Option<&str> {
        match self {
            Pattern::Fixed(fixed) => (path == fixed).then_some(""),
            Pattern::Id(prefix) => path.strip_prefix(prefix).filter(|id| !id.contains('/')),
            Pattern::IdThen(prefix, suffix) => path
                .strip_prefix(prefix)?
                .strip_suffix(suffix)
                .filter(|id| !id.contains('/')),
            Pattern::Rest(prefix) => path.strip_prefix(prefix),
            Pattern::Job("") => path.strip_prefix(JOB),
            Pattern::Job(suffix) => path.strip_prefix(JOB)?.strip_suffix(suffix),
        }
    }

    /// A path of this pattern naming `id` (for a test that walks the routes).
    pub fn example(self, id: &str) -> String {
        match self {
            Pattern::Fixed(fixed) => fixed.to_string(),
            Pattern::Id(prefix) | Pattern::Rest(prefix) => format!("{prefix}{id}"),
            Pattern::IdThen(prefix, suffix) => format!("{prefix}{id}{suffix}"),
            Pattern::Job(suffix) => format!("{JOB}{id}{suffix}"),
        }
    }
}

pub type Handler = fn(&Call) -> Result<Reply, ApiError>;

pub struct Route {
    pub methods: Methods,
    pub path: Pattern,
    pub need: Need,
    pub(super) handler: Handler,
}

const fn route(methods: Methods, path: Pattern, need: Need, handler: Handler) -> Route {
    Route {
        methods,
        path,
        need,
        handler,
    }
}

use Methods::{Delete, Get, Post, Read, Write};
use Need::{
    AgentRead, AgentWrite, Capability as Cap, Either, Filtered, Management, NodeRead, NodeReadAnd,
    Nothing, Own,
};
use Pattern::{Fixed, Id, IdThen, Job as JobPath, Rest};

const READ_JOB: Need = Cap("read-job");
const SUBMIT_JOB: Need = Cap("submit-job");
const LIFECYCLE: Need = Cap("alloc-lifecycle");

/// Every route, in the order paths are tried.
pub static ROUTES: &[Route] = &[
    route(Read, Fixed("/.well-known/jwks.json"), Nothing, |c| {
        jwks(c.shared)
    }),
    route(Get, Fixed("/v1/jobs"), Cap("list-jobs"), |c| {
        list_jobs(c.shared, c.query)
    }),
    route(Write, Fixed("/v1/jobs"), SUBMIT_JOB, |c| {
        register(c.shared, None, c.body)
    }),
    // Nomad's `Job.Statuses` checks `read-job` alone (it shows allocations), not `list-jobs`.
    route(Get, Fixed(job_statuses::PATH), READ_JOB, |c| {
        job_statuses::job_statuses(c.shared, c.query, &[])
    }),
    route(Post, Fixed(job_statuses::PATH), READ_JOB, |c| {
        job_statuses::job_statuses(c.shared, c.query, c.body)
    }),
    route(
        Write,
        Fixed("/v1/jobs/parse"),
        Either("parse-job", "submit-job"),
        |c| parse_hcl(c.shared, c.body),
    ),
    route(Write, Fixed("/v1/validate/job"), READ_JOB, |c| {
        validate_job(c.body)
    }),
    route(Get, Fixed("/v1/allocations"), READ_JOB, |c| {
        list_allocs(c.shared, c.query)
    }),
    route(Get, Fixed("/v1/evaluations"), READ_JOB, |c| {
        list_evals(c.shared, c.query)
    }),
    route(Get, Fixed("/v1/services"), READ_JOB, |c| {
        list_services(c.shared, c.query)
    }),
    route(Get, Fixed("/v1/nodes"), NodeRead, |c| {
        list_nodes(c.shared, c.query)
    }),
    route(Get, Fixed("/v1/agent/self"), AgentRead, |c| {
        agent_self(c.shared)
    }),
    route(Get, Fixed("/v1/agent/members"), NodeRead, |c| {
        members(c.shared)
    }),
    route(Write, Fixed("/v1/agent/join"), AgentWrite, |c| {
        join(c.shared, c.query)
    }),
    // Anyone may ask whether the agent is up, as of Nomad.
    route(Get, Fixed("/v1/agent/health"), Nothing, |_| {
        plain(json!({"client": {"ok": true, "message": "ok"},
                     "server": {"ok": true, "message": "ok"}}))
    }),
    route(Get, Fixed("/v1/metrics"), Nothing, |c| {
        metrics(c.shared, c.query)
    }),
    route(Get, Fixed("/v1/status/leader"), Nothing, |c| {
        plain(json!(c.shared.config.bind.to_string()))
    }),
    route(Get, Fixed("/v1/status/peers"), Nothing, |c| {
        plain(json!([c.shared.config.bind.to_string()]))
    }),
    // Anyone may ask (as of Nomad); the peers' regions only a token that may read the nodes
    // is told of, when ACLs are on (issue 24).
    route(Get, Fixed("/v1/regions"), Filtered, |c| {
        let peers = acl::check(c.authority, NodeRead).is_ok();
        regions(c.shared, peers)
    }),
    // A GET is answered by the connection layer (`events.rs`), which checks each topic.
    route(Get, Fixed("/v1/event/stream"), Own, |_| {
        Err(error(
            500,
            "the event stream is answered by the connection layer",
        ))
    }),
    // Nomad's: a forced collection, for a management token; answered once it is done.
    route(Write, Fixed("/v1/system/gc"), Management, |c| {
        crate::daemon::gc::force(c.shared).map_err(|e| error(500, e))?;
        plain(Value::Null)
    }),
    route(Get, Fixed("/v1/namespaces"), Filtered, |c| {
        cluster::list_namespaces(c.shared, c.query, c.authority)
    }),
    route(
        Get,
        Rest("/v1/namespace/"),
        Either("list-jobs", "read-job"),
        |c| cluster::get_namespace(c.shared, c.id, c.query),
    ),
    route(Get, Fixed("/v1/deployments"), READ_JOB, |c| {
        deployments::list_deployments(c.shared, c.query)
    }),
    route(Get, Id("/v1/deployment/allocations/"), READ_JOB, |c| {
        allocs::deployment_allocs(c.shared, c.id, c.query)
    }),
    route(Get, Id("/v1/deployment/"), READ_JOB, |c| {
        deployments::get_deployment(c.shared, c.id, c.query)
    }),
    route(Write, Id("/v1/deployment/fail/"), SUBMIT_JOB, |c| {
        deployments::fail_deployment(c.shared, c.id)
    }),
    route(Write, Id("/v1/deployment/pause/"), SUBMIT_JOB, |c| {
        deployments::pause_deployment(c.shared, c.id, c.body)
    }),
    route(Write, Id("/v1/deployment/promote/"), SUBMIT_JOB, |c| {
        deployments::promote_deployment(c.shared, c.id, c.body)
    }),
    route(Get, Fixed("/v1/volumes"), READ_JOB, |c| {
        cluster::list_volumes(c.shared, c.query)
    }),
    // Nomad's needs `operator` read; this agent's ACL policies have no operator rules, so
    // these take a management token.
    route(
        Get,
        Fixed("/v1/operator/raft/configuration"),
        Management,
        |c| cluster::raft_configuration(c.shared),
    ),
    route(
        Get,
        Fixed("/v1/operator/scheduler/configuration"),
        Management,
        |_| cluster::scheduler_configuration(),
    ),
    // The ACL endpoints (`acl.rs`); each answers Nomad's 400 where ACLs are off.
    route(Write, Fixed("/v1/acl/bootstrap"), Nothing, |c| {
        acl::bootstrap(c.shared, c.body)
    }),
    route(Get, Fixed("/v1/acl/tokens"), Management, |c| {
        acl::list_tokens(c.shared)
    }),
    route(Write, Fixed("/v1/acl/token"), Management, |c| {
        acl::upsert_token(c.shared, None, c.body)
    }),
    route(Get, Fixed("/v1/acl/token/self"), Own, |c| {
        acl::token_self(c.authority)
    }),
    route(Get, Rest("/v1/acl/token/"), Own, |c| {
        acl::get_token(c.shared, c.authority, c.id)
    }),
    route(Write, Rest("/v1/acl/token/"), Management, |c| {
        acl::upsert_token(c.shared, Some(c.id), c.body)
    }),
    route(Delete, Rest("/v1/acl/token/"), Management, |c| {
        acl::delete_token(c.shared, c.id)
    }),
    route(Get, Fixed("/v1/acl/policies"), Filtered, |c| {
        acl::list_policies(c.shared, c.authority)
    }),
    route(Get, Rest("/v1/acl/policy/"), Own, |c| {
        acl::get_policy(c.shared, c.authority, c.id)
    }),
    route(Write, Rest("/v1/acl/policy/"), Management, |c| {
        acl::upsert_policy(c.shared, c.id, c.body)
    }),
    route(Delete, Rest("/v1/acl/policy/"), Management, |c| {
        acl::delete_policy(c.shared, c.id)
    }),
    // Allocations and evaluations.
    route(Get, Id("/v1/allocation/"), READ_JOB, |c| {
        get_alloc(c.shared, c.id, c.query)
    }),
    route(Write, IdThen("/v1/allocation/", "/stop"), LIFECYCLE, |c| {
        stop_alloc(c.shared, c.id, c.query)
    }),
    route(Get, Id("/v1/evaluation/"), READ_JOB, |c| {
        get_eval(c.shared, c.id, c.query)
    }),
    route(
        Get,
        IdThen("/v1/evaluation/", "/allocations"),
        READ_JOB,
        |c| eval_allocs(c.shared, c.id, c.query),
    ),
    route(
        Write,
        IdThen("/v1/client/allocation/", "/restart"),
        LIFECYCLE,
        |c| restart_alloc(c.shared, c.id, c.query, c.body),
    ),
    route(
        Write,
        IdThen("/v1/client/allocation/", "/signal"),
        LIFECYCLE,
        |c| alloc_client::signal_alloc(c.shared, c.id, c.body),
    ),
    route(
        Get,
        IdThen("/v1/client/allocation/", "/checks"),
        READ_JOB,
        |c| alloc_client::alloc_checks(c.shared, c.id),
    ),
    route(
        Get,
        IdThen("/v1/client/allocation/", "/stats"),
        READ_JOB,
        |c| alloc_client::alloc_stats(c.shared, c.id),
    ),
    route(Get, Rest("/v1/client/fs/logs/"), Cap("read-logs"), |c| {
        logs::task_logs(c.shared, c.id, c.query)
    }),
    route(Get, Rest("/v1/client/fs/ls/"), Cap("read-fs"), |c| {
        alloc_fs::alloc_fs(c.shared, alloc_fs::FsRead::List, c.id, c.query)
    }),
    route(Get, Rest("/v1/client/fs/stat/"), Cap("read-fs"), |c| {
        alloc_fs::alloc_fs(c.shared, alloc_fs::FsRead::Stat, c.id, c.query)
    }),
    route(Get, Rest("/v1/client/fs/cat/"), Cap("read-fs"), |c| {
        alloc_fs::alloc_fs(c.shared, alloc_fs::FsRead::Cat, c.id, c.query)
    }),
    route(Get, Rest("/v1/client/fs/readat/"), Cap("read-fs"), |c| {
        alloc_fs::alloc_fs(c.shared, alloc_fs::FsRead::ReadAt, c.id, c.query)
    }),
    // Nodes and services.
    route(Get, Id("/v1/node/"), NodeRead, |c| {
        get_node(c.shared, c.id, c.query)
    }),
    route(
        Get,
        IdThen("/v1/node/", "/allocations"),
        NodeReadAnd("read-job"),
        |c| node_allocs(c.shared, c.id, c.query),
    ),
    route(Get, Rest("/v1/service/"), READ_JOB, |c| {
        get_service(c.shared, c.id, c.query)
    }),
    // A job's endpoints, by suffix, then the job itself.
    route(Write, JobPath("/evaluate"), SUBMIT_JOB, |c| {
        job_reads::force_evaluate(c.shared, c.id, c.body)
    }),
    route(Write, JobPath("/plan"), SUBMIT_JOB, |c| {
        plan::plan_job(c.shared, c.id, c.body)
    }),
    route(Write, JobPath("/revert"), SUBMIT_JOB, |c| {
        job_versions::revert_job(c.shared, c.id, c.body)
    }),
    route(
        Write,
        JobPath("/scale"),
        Either("scale-job", "submit-job"),
        |c| job_versions::scale_job(c.shared, c.id, c.body),
    ),
    route(
        Get,
        JobPath("/scale"),
        Either("read-job-scaling", "read-job"),
        |c| job_versions::scale_status(c.shared, c.id, c.query),
    ),
    route(Get, JobPath("/allocations"), READ_JOB, |c| {
        job_allocs(c.shared, c.id, c.query)
    }),
    route(Get, JobPath("/versions"), READ_JOB, |c| {
        job_versions(c.shared, c.id, c.query)
    }),
    route(Get, JobPath("/evaluations"), READ_JOB, |c| {
        job_evals(c.shared, c.id, c.query)
    }),
    route(Get, JobPath("/summary"), READ_JOB, |c| {
        job_summary(c.shared, c.id, c.query)
    }),
    route(Get, JobPath("/submission"), READ_JOB, |c| {
        job_reads::job_submission(c.shared, c.id, c.query)
    }),
    route(Get, JobPath("/services"), READ_JOB, |c| {
        job_reads::job_services(c.shared, c.id, c.query)
    }),
    route(Get, JobPath("/deployments"), READ_JOB, |c| {
        deployments::job_deployments(c.shared, c.id, c.query, false)
    }),
    route(Get, JobPath("/deployment"), READ_JOB, |c| {
        deployments::job_deployments(c.shared, c.id, c.query, true)
    }),
    route(Get, JobPath(""), READ_JOB, |c| {
        get_job(c.shared, c.id, c.query)
    }),
    route(Write, JobPath(""), SUBMIT_JOB, |c| {
        register(c.shared, Some(c.id), c.body)
    }),
    route(Delete, JobPath(""), SUBMIT_JOB, |c| {
        stop_job(c.shared, c.id, c.query)
    }),
];

/// The route of a request: the handler of the first path that matches and its method,
/// run once the token is found to have what the route needs.
pub(super) fn dispatch(
    shared: &Shared,
    authority: &Authority,
    method: &Method,
    path: &str,
    query: &Query,
    body: &[u8],
) -> Result<Reply, ApiError> {
    if path.starts_with("/v1/acl/") {
        acl::acl_enabled(shared)?;
    }
    if let Some(refused) = unserved_job_endpoint(path) {
        return Err(refused);
    }
    let Some((pattern, id)) = ROUTES
        .iter()
        .find_map(|r| r.path.matches(path).map(|id| (r.path, id)))
    else {
        return Err(if path.starts_with("/v1/acl/") {
            // Nomad's, for an ACL path it does not know: an empty 404.
            error(404, "")
        } else {
            not_served(path)
        });
    };
    let Some(route) = ROUTES
        .iter()
        .find(|r| r.path == pattern && r.methods.take(method))
    else {
        return Err(error(405, "Invalid method"));
    };
    acl::check(authority, route.need)?;
    (route.handler)(&Call {
        shared,
        authority,
        id,
        query,
        body,
    })
}

/// An endpoint of jobs this agent does not serve is named so, never taken for a job ID.
fn unserved_job_endpoint(path: &str) -> Option<ApiError> {
    let rest = path.strip_prefix(JOB)?;
    let served = |suffix: &&str| {
        ROUTES
            .iter()
            .any(|r| matches!(r.path, Pattern::Job(s) if s.strip_prefix('/') == Some(*suffix)))
    };
    spec::JOB_ENDPOINT_SUFFIXES
        .iter()
        .filter(|suffix| !served(suffix))
        .find(|suffix| rest.ends_with(&format!("/{suffix}")))
        .map(|suffix| {
            error(
                404,
                format!("the job endpoint {suffix:?} is not served by this agent"),
            )
        })
}
