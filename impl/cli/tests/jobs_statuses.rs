//! `/v1/jobs/statuses` (`daemon/http/job_statuses.rs`), as Nomad 1.8's web UI reads it: the
//! fields of `JobStatusesJob` in Nomad's order for a job running two allocations, as the job
//! is updated with a deployment and stopped; a blocking query woken by an allocation's
//! change; the pages, newest change first; the `read-job` a token needs. The jobs with
//! tasks run on a `quiesce agent -dev` process (the host tests' harness, which ends what a
//! test leaves running); the others on a client-less agent in this process.

#[path = "host/harness.rs"]
#[allow(dead_code)]
mod harness;

mod support;

use harness::{wait_for, Agent};
use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// Nomad's `JobStatusesJob`, in its order (`nomad/structs/job.go`).
const JOB_FIELDS: [&str; 18] = [
    "ID",
    "Namespace",
    "Name",
    "Type",
    "NodePool",
    "Datacenters",
    "Priority",
    "Version",
    "SubmitTime",
    "ModifyIndex",
    "Allocs",
    "GroupCountSum",
    "ChildStatuses",
    "ParentID",
    "LatestDeployment",
    "Stop",
    "IsPack",
    "Status",
];

/// Nomad's `JobStatusesAlloc`.
const ALLOC_FIELDS: [&str; 8] = [
    "ID",
    "Group",
    "ClientStatus",
    "NodeID",
    "DeploymentStatus",
    "JobVersion",
    "FollowupEvalID",
    "HasPausedTask",
];

/// Nomad's `JobStatusesLatestDeployment`.
const DEPLOYMENT_FIELDS: [&str; 7] = [
    "ID",
    "IsActive",
    "JobVersion",
    "Status",
    "StatusDescription",
    "AllAutoPromote",
    "RequiresPromotion",
];

/// JSON with its objects' keys in the order sent (a `serde_json::Value` sorts them).
#[derive(Debug)]
enum Ordered {
    Object(Vec<(String, Ordered)>),
    Array(Vec<Ordered>),
    Leaf,
}

impl Ordered {
    fn keys(&self) -> Vec<&str> {
        match self {
            Ordered::Object(fields) => fields.iter().map(|(key, _)| key.as_str()).collect(),
            other => panic!("not an object: {other:?}"),
        }
    }

    fn get(&self, key: &str) -> &Ordered {
        match self {
            Ordered::Object(fields) => &fields.iter().find(|(k, _)| k == key).expect(key).1,
            other => panic!("not an object: {other:?}"),
        }
    }

    fn items(&self) -> &[Ordered] {
        match self {
            Ordered::Array(items) => items,
            other => panic!("not an array: {other:?}"),
        }
    }
}

struct OrderedVisitor;

impl<'de> Visitor<'de> for OrderedVisitor {
    type Value = Ordered;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("JSON")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Ordered, E> {
        Ok(Ordered::Leaf)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Ordered, E> {
        Ok(Ordered::Leaf)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Ordered, E> {
        Ok(Ordered::Leaf)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Ordered, E> {
        Ok(Ordered::Leaf)
    }

    fn visit_str<E>(self, _: &str) -> Result<Ordered, E> {
        Ok(Ordered::Leaf)
    }

    fn visit_unit<E>(self) -> Result<Ordered, E> {
        Ok(Ordered::Leaf)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Ordered, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Ordered::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Ordered, A::Error> {
        let mut fields = Vec::new();
        while let Some(field) = map.next_entry()? {
            fields.push(field);
        }
        Ok(Ordered::Object(fields))
    }
}

impl<'de> Deserialize<'de> for Ordered {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Ordered, D::Error> {
        deserializer.deserialize_any(OrderedVisitor)
    }
}

/// An answer of the agent: status, `X-Nomad-Index`, `X-Nomad-NextToken`, body.
struct Answer {
    status: u16,
    index: u64,
    next_token: Option<String>,
    text: String,
}

impl Answer {
    fn json(&self) -> Value {
        assert_eq!(self.status, 200, "{}", self.text);
        serde_json::from_str(&self.text).expect("JSON")
    }

    /// The IDs of the jobs listed, in order.
    fn ids(&self) -> Vec<String> {
        let jobs = self.json();
        let jobs = jobs.as_array().expect("a list");
        jobs.iter()
            .map(|j| j["ID"].as_str().expect("an ID").into())
            .collect()
    }
}

fn http() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into()
}

/// `method url` with `token` and `body`, its headers kept.
fn exchange(method: &str, url: &str, token: &str, body: Option<&Value>) -> Answer {
    let http = http();
    let response = match (method, body) {
        ("GET", _) => http.get(url).header("X-Nomad-Token", token).call(),
        ("PUT", Some(body)) => http
            .put(url)
            .header("X-Nomad-Token", token)
            .send(serde_json::to_vec(body).expect("JSON")),
        ("PUT", None) => http.put(url).header("X-Nomad-Token", token).send_empty(),
        ("DELETE", _) => http.delete(url).header("X-Nomad-Token", token).call(),
        (_, Some(body)) => http
            .post(url)
            .header("X-Nomad-Token", token)
            .send(serde_json::to_vec(body).expect("JSON")),
        (_, None) => http.post(url).header("X-Nomad-Token", token).send_empty(),
    };
    let mut response = response.unwrap_or_else(|e| panic!("{method} {url}: {e}"));
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let index = header("X-Nomad-Index").map_or(0, |i| i.parse().expect("an index"));
    let next_token = header("X-Nomad-NextToken");
    let text = response.body_mut().read_to_string().expect("a body");
    Answer {
        status: response.status().as_u16(),
        index,
        next_token,
        text,
    }
}

/// A service job `id`: group `web` of `count` raw_exec sleeps.
fn sleeps(id: &str, count: u32) -> Value {
    json!({"Job": {
        "ID": id,
        "TaskGroups": [{
            "Name": "web",
            "Count": count,
            "RestartPolicy": {"Attempts": 0, "Mode": "fail"},
            "Tasks": [{
                "Name": "sleep",
                "Driver": "raw_exec",
                "KillTimeout": 2_000_000_000u64,
                "Config": {"command": "/bin/sleep", "args": ["600"]},
            }],
        }],
    }})
}

/// The one job of `/v1/jobs/statuses` once `done` holds of it.
fn wait_status(agent: &Agent, what: &str, done: impl Fn(&Value) -> bool) -> (Answer, Value) {
    let url = format!("{}/v1/jobs/statuses", agent.address);
    wait_for(what, || {
        let answer = exchange("GET", &url, "", None);
        let jobs = answer.json();
        let [job] = &jobs.as_array().expect("a list")[..] else {
            panic!("one job: {}", answer.text);
        };
        let job = job.clone();
        done(&job).then_some((answer, job))
    })
}

fn running(job: &Value, version: u64) -> usize {
    job["Allocs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["ClientStatus"] == "running" && a["JobVersion"] == version)
        .count()
}

#[test]
fn a_job_s_status_has_nomads_fields_in_order_through_run_update_and_stop() {
    let agent = Agent::new("statuses-run");
    agent.ok("PUT", "/v1/jobs", Some(&sleeps("sleeper", 2)));
    let (answer, job) = wait_status(&agent, "two running allocations", |job| {
        running(job, 0) == 2
    });
    let ordered: Vec<Ordered> = serde_json::from_str(&answer.text).expect("JSON");
    assert_eq!(ordered[0].keys(), JOB_FIELDS, "{}", answer.text);
    for alloc in ordered[0].get("Allocs").items() {
        assert_eq!(alloc.keys(), ALLOC_FIELDS);
        assert_eq!(alloc.get("DeploymentStatus").keys(), ["Canary", "Healthy"]);
    }
    assert_eq!(
        (&job["ID"], &job["Name"], &job["Namespace"], &job["Type"]),
        (
            &json!("sleeper"),
            &json!("sleeper"),
            &json!("default"),
            &json!("service")
        )
    );
    assert_eq!(
        (
            &job["Version"],
            &job["GroupCountSum"],
            &job["Status"],
            &job["Stop"]
        ),
        (&json!(0), &json!(2), &json!("running"), &json!(false))
    );
    assert_eq!(
        (&job["ChildStatuses"], &job["ParentID"], &job["IsPack"]),
        (&Value::Null, &json!(""), &json!(false))
    );
    // A service job has Nomad's default update block: its registration's deployment.
    let first_deployment = job["LatestDeployment"]["ID"].clone();
    assert_eq!(job["LatestDeployment"]["JobVersion"], 0, "{job}");
    assert_eq!(ordered[0].get("LatestDeployment").keys(), DEPLOYMENT_FIELDS);
    let allocs = agent.ok("GET", "/v1/job/sleeper/allocations", None);
    let newest = allocs.as_array().expect("a list").iter();
    let newest = newest
        .map(|a| a["ModifyIndex"].as_u64().expect("an index"))
        .max();
    assert!(
        answer.index >= newest.expect("allocations"),
        "{}",
        answer.index
    );
    for alloc in job["Allocs"].as_array().expect("allocations") {
        assert_eq!(
            (
                &alloc["Group"],
                &alloc["FollowupEvalID"],
                &alloc["HasPausedTask"]
            ),
            (&json!("web"), &json!(""), &json!(false))
        );
        assert_eq!(
            alloc["DeploymentStatus"],
            json!({"Canary": false, "Healthy": null})
        );
    }

    // Registered again, changed: version 1, rolled out by a deployment of its own.
    let mut update = sleeps("sleeper", 2);
    update["Job"]["TaskGroups"][0]["Update"] = json!({"MaxParallel": 2, "MinHealthyTime": 0});
    update["Job"]["Meta"] = json!({"pack.name": "sleepers"});
    agent.ok("PUT", "/v1/jobs", Some(&update));
    let (_, job) = wait_status(&agent, "version 1's deployment to succeed", |job| {
        job["LatestDeployment"]["Status"] == "successful" && running(job, 1) == 2
    });
    let deployment = &job["LatestDeployment"];
    assert_ne!(deployment["ID"], first_deployment);
    assert_eq!(
        (
            &job["Version"],
            &deployment["JobVersion"],
            &deployment["IsActive"]
        ),
        (&json!(1), &json!(1), &json!(false))
    );
    assert_eq!(
        (
            &deployment["AllAutoPromote"],
            &deployment["RequiresPromotion"]
        ),
        (&json!(false), &json!(false))
    );
    assert_eq!(job["IsPack"], true, "pack.name is in its meta");
    let latest = agent.ok("GET", "/v1/job/sleeper/deployment", None);
    assert_eq!(deployment["ID"], latest["ID"]);
    // Every allocation of the job, the replaced version's too (Nomad's `AllocsByJob`).
    let allocs = job["Allocs"].as_array().expect("allocations");
    let old: Vec<&Value> = allocs.iter().filter(|a| a["JobVersion"] == 0).collect();
    assert_eq!(old.len(), 2, "{job}");
    assert!(old.iter().all(|a| a["ClientStatus"] == "complete"), "{job}");
    let new = allocs.iter().filter(|a| a["JobVersion"] == 1);
    assert!(
        new.clone()
            .all(|a| a["DeploymentStatus"]["Healthy"] == true),
        "{job}"
    );

    agent.ok("DELETE", "/v1/job/sleeper", None);
    let (_, job) = wait_status(&agent, "the job to be dead", |job| job["Status"] == "dead");
    assert_eq!((&job["Stop"], &job["Version"]), (&json!(true), &json!(2)));
    assert_eq!(running(&job, 1), 0, "{job}");
}

#[test]
fn a_blocking_statuses_query_wakes_on_an_allocation_change() {
    let agent = Agent::new("statuses-blocking");
    agent.ok("PUT", "/v1/jobs", Some(&sleeps("blocker", 2)));
    let (_, job) = wait_status(&agent, "two running allocations", |job| {
        running(job, 0) == 2
    });
    let url = format!("{}/v1/jobs/statuses", agent.address);
    let before = exchange("GET", &url, "", None).index;
    let blocking = format!("{url}?index={before}&wait=30s");
    let asked = Instant::now();
    let waiting = std::thread::spawn(move || exchange("GET", &blocking, "", None));
    std::thread::sleep(Duration::from_millis(500));
    assert!(!waiting.is_finished(), "answered before anything changed");
    let stopped = job["Allocs"][0]["ID"].as_str().expect("an ID");
    let stop = agent.ok("PUT", &format!("/v1/allocation/{stopped}/stop"), None);
    let woken = waiting.join().expect("an answer");
    assert!(
        asked.elapsed() < Duration::from_secs(20),
        "woken by the wait"
    );
    assert!(woken.index > before, "{} after {before}", woken.index);
    // Woken by the stop's write (the allocation's own index moves on after it, as its
    // client ends it, so it is not the one to compare with).
    let stop_index = stop["Index"].as_u64().expect("the stop's index");
    assert!(
        woken.index >= stop_index,
        "{} before the stop's {stop_index}",
        woken.index
    );
    agent.ok("DELETE", "/v1/job/blocker", None);
}

/// A client-less agent in this process (its jobs stay pending), ACLs as asked.
struct InProcess {
    base: String,
    _agent: support::Agent,
}

impl InProcess {
    fn start(name: &str, acl_enabled: bool) -> InProcess {
        let agent = support::Agent::start("statuses", name, |config| {
            config.client_enabled = false;
            config.acl_enabled = acl_enabled;
        });
        InProcess {
            base: format!("http://{}", agent.address),
            _agent: agent,
        }
    }

    fn call(&self, method: &str, path: &str, token: &str, body: Option<&Value>) -> Answer {
        exchange(method, &format!("{}{path}", self.base), token, body)
    }

    fn ok(&self, method: &str, path: &str, token: &str, body: Option<&Value>) -> Value {
        self.call(method, path, token, body).json()
    }
}

#[test]
fn pages_run_newest_change_first_and_a_post_keeps_the_jobs_it_names() {
    let agent = InProcess::start("pages", false);
    for id in ["a", "b", "c"] {
        agent.ok("PUT", "/v1/jobs", "", Some(&sleeps(id, 1)));
    }
    let index_of =
        |id: &str| agent.ok("GET", &format!("/v1/job/{id}"), "", None)["ModifyIndex"].clone();
    let all = agent.call("GET", "/v1/jobs/statuses", "", None);
    assert_eq!(all.ids(), ["c", "b", "a"]);
    assert_eq!(all.next_token, None);
    let first = agent.call("GET", "/v1/jobs/statuses?per_page=2", "", None);
    assert_eq!(first.ids(), ["c", "b"]);
    let token = first.next_token.clone().expect("a next page");
    assert_eq!(
        json!(token.parse::<u64>().expect("an index")),
        index_of("a")
    );
    let second = agent.call(
        "GET",
        &format!("/v1/jobs/statuses?per_page=2&next_token={token}"),
        "",
        None,
    );
    assert_eq!(
        (second.ids(), second.next_token),
        (vec!["a".to_string()], None)
    );
    let oldest = agent.call("GET", "/v1/jobs/statuses?reverse=true&per_page=2", "", None);
    assert_eq!(oldest.ids(), ["a", "b"]);
    assert_eq!(
        json!(oldest
            .next_token
            .expect("a token")
            .parse::<u64>()
            .expect("an index")),
        index_of("c")
    );
    // A job registered again moves to the front; its allocations are not placed (no
    // client), so it lists none.
    agent.ok("PUT", "/v1/jobs", "", Some(&sleeps("a", 2)));
    let moved = agent.call("GET", "/v1/jobs/statuses", "", None);
    assert_eq!(moved.ids(), ["a", "c", "b"]);
    let a = &moved.json()[0];
    assert_eq!(
        (&a["Allocs"], &a["GroupCountSum"], &a["Version"]),
        (&Value::Null, &json!(2), &json!(1))
    );
    assert_eq!(json!(moved.index), index_of("a"));

    let named = json!({"Jobs": [{"ID": "b"}, {"id": "c", "namespace": "default"}, {"ID": "gone"}]});
    let posted = agent.call("POST", "/v1/jobs/statuses", "", Some(&named));
    assert_eq!(posted.ids(), ["c", "b"]);
    let none = agent.call("POST", "/v1/jobs/statuses", "", Some(&json!({"Jobs": []})));
    assert_eq!(
        (none.status, none.text.as_str()),
        (400, "no jobs in request")
    );
    let unnamed = agent.call("POST", "/v1/jobs/statuses", "", None);
    assert_eq!(
        unnamed.ids(),
        ["a", "c", "b"],
        "an empty body names no jobs"
    );
    let elsewhere = agent.call("GET", "/v1/jobs/statuses?namespace=other", "", None);
    assert_eq!(elsewhere.text.trim(), "[]");
    assert_eq!(
        agent
            .call("GET", "/v1/jobs/statuses?namespace=*", "", None)
            .ids(),
        ["a", "c", "b"]
    );

    let put = agent.call("PUT", "/v1/jobs/statuses", "", None);
    assert_eq!((put.status, put.text.as_str()), (405, "Invalid method"));
    for (query, named) in [
        ("filter=Name%3D%3Da", "filter"),
        ("prefix=a", "prefix"),
        ("next_token=x", "next_token"),
        ("per_page=-1", "per_page"),
        ("include_children=maybe", "include_children"),
    ] {
        let refused = agent.call("GET", &format!("/v1/jobs/statuses?{query}"), "", None);
        assert_eq!(refused.status, 400, "{query}: {}", refused.text);
        assert!(refused.text.contains(named), "{query}: {}", refused.text);
    }
    // A job called `statuses` is a job, not this list.
    let job = agent.call("GET", "/v1/job/statuses", "", None);
    assert_eq!((job.status, job.text.as_str()), (404, "job not found"));
    agent.ok("PUT", "/v1/jobs", "", Some(&sleeps("statuses", 1)));
    assert_eq!(
        agent.ok("GET", "/v1/job/statuses", "", None)["ID"],
        "statuses"
    );
}

#[test]
fn statuses_need_read_job_and_list_jobs_alone_is_refused() {
    let agent = InProcess::start("acl", true);
    let management = agent.ok("PUT", "/v1/acl/bootstrap", "", None)["SecretID"]
        .as_str()
        .expect("a secret")
        .to_string();
    agent.ok("PUT", "/v1/jobs", &management, Some(&sleeps("private", 1)));
    let token = |name: &str, capability: &str| {
        let rules = format!(r#"namespace "default" {{ capabilities = ["{capability}"] }}"#);
        let policy = json!({"Name": name, "Rules": rules});
        agent.ok(
            "PUT",
            &format!("/v1/acl/policy/{name}"),
            &management,
            Some(&policy),
        );
        let token = json!({"Name": name, "Type": "client", "Policies": [name]});
        let token = agent.ok("PUT", "/v1/acl/token", &management, Some(&token));
        token["SecretID"].as_str().expect("a secret").to_string()
    };
    let lister = token("lister", "list-jobs");
    let reader = token("reader", "read-job");
    for method in ["GET", "POST"] {
        for secret in ["", lister.as_str()] {
            let refused = agent.call(method, "/v1/jobs/statuses", secret, None);
            assert_eq!(
                (refused.status, refused.text.as_str()),
                (403, "Permission denied"),
                "{method} {secret:?}"
            );
        }
        assert_eq!(
            agent.call(method, "/v1/jobs/statuses", &reader, None).ids(),
            ["private"]
        );
    }
    // `list-jobs` is what `/v1/jobs` needs: the lister is not refused everything.
    assert_eq!(agent.call("GET", "/v1/jobs", &lister, None).status, 200);
}
