//! Blocking queries wake only for what they read (`daemon/http/watch.rs`, issue 29 goal 5):
//! 1,000 queries wait, each on one of 1,000 running allocations, and 20 more on another
//! job and its allocations, while 200 allocations are stopped one by one. Each stopped
//! allocation's query answers with the stop's index; the others are never woken; when
//! their clients go away, so do their waiters. The counts come from the agent's own
//! counters (the ones `/v1/metrics` shows).
//!
//! Before watch sets every write woke every waiting query, which asked its read again: this
//! test counted 242,110 wake-ups (241,100 of them waiting again) where it now counts 200,
//! each answered.
//!
//! The agent runs in this process (its tasks are `mock_driver`'s, so 1,000 allocations cost
//! no process), which is how the test reads its counters directly.

mod support;

use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use support::{wait_for, PATIENCE};

/// Allocations running, each with one query waiting on it.
const ALLOCS: usize = 1_000;
/// Allocations stopped, one by one.
const STOPPED: usize = 200;
/// Queries on another job (its record, its allocations), which no stop touches.
const ON_OTHER_JOB: usize = 10;
/// Wake-ups allowed beyond one per stopped allocation's query (none is expected: a stop's
/// first write moves the allocation's index, so its query answers at its first wake-up).
const SLACK: u64 = 5;

/// An answer: its status, `X-Nomad-Index`, and body.
struct Answer {
    status: u16,
    index: Option<u64>,
    body: Value,
}

/// Sends a request as HTTP/1.0: the answer's body is all that follows its head, to the end
/// of the connection (no chunks).
fn send(address: &str, method: &str, path: &str, body: Option<&Value>) -> TcpStream {
    let body = body.map_or_else(Vec::new, |b| serde_json::to_vec(b).expect("JSON"));
    let mut stream = TcpStream::connect(address).expect("the agent accepts");
    let head = format!(
        "{method} {path} HTTP/1.0\r\nHost: {address}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).expect("sent");
    stream.write_all(&body).expect("sent");
    stream
}

fn read_answer(mut stream: TcpStream) -> Answer {
    stream
        .set_read_timeout(Some(PATIENCE))
        .expect("a read timeout");
    let mut text = String::new();
    stream.read_to_string(&mut text).expect("an answer");
    let (head, body) = text.split_once("\r\n\r\n").expect("a head and a body");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status");
    let index = head.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("x-nomad-index")
            .then(|| value.trim().parse().expect("an index"))
    });
    let body = serde_json::from_str(body).unwrap_or_else(|_| Value::String(body.to_string()));
    Answer {
        status,
        index,
        body,
    }
}

fn call(address: &str, method: &str, path: &str, body: Option<&Value>) -> Answer {
    let answer = read_answer(send(address, method, path, body));
    assert_eq!(answer.status, 200, "{method} {path}: {}", answer.body);
    answer
}

fn idle_job(id: &str, count: usize) -> Value {
    json!({"Job": {"ID": id, "Datacenters": ["dc1"], "TaskGroups": [{
        "Name": "g", "Count": count,
        "Tasks": [{"Name": "idle", "Driver": "mock_driver", "Config": {}}],
    }]}})
}

/// An agent with a client in this process, its data dir removed with it.
struct InProcess {
    address: String,
    agent: support::Agent,
}

impl InProcess {
    fn start(name: &str) -> InProcess {
        let agent = support::Agent::start("blocking", name, |_| {});
        InProcess {
            address: agent.address.clone(),
            agent,
        }
    }

    /// The running allocations of `job`, with their `ModifyIndex`, once `count` run.
    fn running(&self, job: &str, count: usize) -> Vec<(String, u64)> {
        wait_for(&format!("{count} allocations of {job} running"), || {
            let listed = call(
                &self.address,
                "GET",
                &format!("/v1/job/{job}/allocations"),
                None,
            );
            let running: Vec<(String, u64)> = listed
                .body
                .as_array()
                .expect("a list")
                .iter()
                .filter(|a| a["ClientStatus"] == "running")
                .map(|a| {
                    let id = a["ID"].as_str().expect("an ID").to_string();
                    (id, a["ModifyIndex"].as_u64().expect("an index"))
                })
                .collect();
            (running.len() == count).then_some(running)
        })
    }
}

#[test]
fn a_blocking_query_wakes_only_for_what_it_read() {
    let agent = InProcess::start("only");
    let address = agent.address.clone();
    call(&address, "PUT", "/v1/jobs", Some(&idle_job("many", ALLOCS)));
    call(&address, "PUT", "/v1/jobs", Some(&idle_job("other", 1)));
    let allocs = agent.running("many", ALLOCS);
    agent.running("other", 1);
    let other = call(&address, "GET", "/v1/job/other/allocations", None);
    let other_job = call(&address, "GET", "/v1/job/other", None);
    let before = agent.agent.agent.shared.watchers.counts();
    assert_eq!(before.waiting, 0);

    // One query per allocation, on its own index; and some on the other job.
    let mut waiting: Vec<Option<TcpStream>> = allocs
        .iter()
        .map(|(id, index)| {
            let path = format!("/v1/allocation/{id}?index={index}&wait=5m");
            Some(send(&address, "GET", &path, None))
        })
        .collect();
    let on_other: Vec<TcpStream> = (0..ON_OTHER_JOB)
        .map(|n| {
            let (path, index) = if n % 2 == 0 {
                ("/v1/job/other/allocations", other.index)
            } else {
                ("/v1/job/other", other_job.index)
            };
            let path = format!("{path}?index={}&wait=5m", index.expect("an index"));
            send(&address, "GET", &path, None)
        })
        .collect();
    let all = (ALLOCS + ON_OTHER_JOB) as u64;
    wait_for("every query waiting", || {
        (agent.agent.agent.shared.watchers.counts().waiting == all).then_some(())
    });

    for (n, (id, index)) in allocs.iter().enumerate().take(STOPPED) {
        let stop = call(&address, "PUT", &format!("/v1/allocation/{id}/stop"), None);
        let stop_index = stop.body["Index"].as_u64().expect("the stop's index");
        let woken = read_answer(waiting[n].take().expect("still waiting"));
        assert_eq!(woken.status, 200, "{}", woken.body);
        let answered = woken.index.expect("an X-Nomad-Index");
        assert!(
            answered > *index && answered >= stop_index,
            "{id}: answered {answered}, waited on {index}, stopped at {stop_index}"
        );
        assert_eq!(woken.body["ModifyIndex"], json!(answered), "{id}");
        assert_eq!(woken.body["DesiredStatus"], "stop", "{id}");
    }

    let after = agent.agent.agent.shared.watchers.counts();
    let (woken, answered) = (after.woken - before.woken, after.answered - before.answered);
    assert!(
        woken <= STOPPED as u64 + SLACK,
        "{woken} wake-ups for {STOPPED} stopped allocations: {after:?}"
    );
    assert!(answered >= STOPPED as u64, "{after:?}");
    assert_eq!(
        after.waiting,
        all - STOPPED as u64,
        "the queries on allocations not stopped, and on the other job, still wait"
    );
    let unanswered = waiting.iter().flatten().chain(&on_other);
    for stream in unanswered {
        stream.set_nonblocking(true).expect("non-blocking");
        let mut byte = [0; 1];
        let peeked = stream.peek(&mut byte);
        assert!(
            matches!(&peeked, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
            "a query not woken has no answer yet: {peeked:?}"
        );
    }

    // Their clients go away: so do their waiters.
    drop(waiting);
    drop(on_other);
    wait_for("every waiter gone with its client", || {
        (agent.agent.agent.shared.watchers.counts().waiting == 0).then_some(())
    });
}

/// The reads whose answers follow a job's allocations (the jobs list, a job's summary) are
/// woken by an allocation's write alone: no write to the job's record comes with it.
#[test]
fn reads_that_follow_a_jobs_allocations_wake_for_an_allocation_alone() {
    let agent = InProcess::start("follow");
    let address = agent.address.clone();
    call(&address, "PUT", "/v1/jobs", Some(&idle_job("solo", 1)));
    let [(alloc, _)]: [(String, u64); 1] = agent.running("solo", 1).try_into().unwrap();
    let listed = call(&address, "GET", "/v1/jobs", None).index.unwrap();
    let summary = call(&address, "GET", "/v1/job/solo/summary", None)
        .index
        .unwrap();
    let on_list = send(
        &address,
        "GET",
        &format!("/v1/jobs?index={listed}&wait=5m"),
        None,
    );
    let on_summary = send(
        &address,
        "GET",
        &format!("/v1/job/solo/summary?index={summary}&wait=5m"),
        None,
    );
    wait_for("both queries waiting", || {
        (agent.agent.agent.shared.watchers.counts().waiting == 2).then_some(())
    });
    call(
        &address,
        "PUT",
        &format!("/v1/allocation/{alloc}/stop"),
        None,
    );
    let list = read_answer(on_list);
    assert!(
        list.index.unwrap() > listed,
        "the jobs list answered its old index"
    );
    let summary_now = read_answer(on_summary);
    assert!(
        summary_now.index.unwrap() > summary,
        "the summary answered its old index"
    );
}
