//! The HTTP layer's limits, on an agent in this process (issue 12, part 4): idle and slow
//! connections are closed, oversized heads and URLs refused, blocking queries and idle
//! connections cost no thread, and a blocking query in flight is not taken for idle.

use quiesce_agent::daemon::{self, Agent, AgentConfig};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

const IDLE: Duration = Duration::from_secs(1);
const BODY: Duration = Duration::from_secs(1);
const WRITE: Duration = Duration::from_millis(200);
/// The write timeout of the agent a paced client reads a large answer from.
const PACED_WRITE: Duration = Duration::from_secs(2);

struct Running {
    agent: Agent,
    data_dir: std::path::PathBuf,
}

/// The agents run in this process, and a thread count is the process's: the test that
/// counts threads runs alone, the others beside each other (once, under load, another
/// test's agent starting beside it broke its bound). Each test takes its turn first, once.
static TURNS: RwLock<()> = RwLock::new(());

fn beside_others() -> RwLockReadGuard<'static, ()> {
    TURNS
        .read()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn alone() -> RwLockWriteGuard<'static, ()> {
    TURNS
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.data_dir);
    }
}

fn agent(name: &str) -> Running {
    agent_with(name, false, WRITE)
}

fn agent_with(name: &str, acl_enabled: bool, write_timeout: Duration) -> Running {
    let data_dir = std::env::temp_dir().join(format!("quiesce-http-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data_dir);
    let mut config = AgentConfig::new(
        data_dir.clone(),
        "127.0.0.1:0".parse().expect("an address"),
        Path::new(env!("CARGO_BIN_EXE_quiesce")).to_path_buf(),
    );
    config.http.idle_timeout = IDLE;
    config.http.body_timeout = BODY;
    config.acl_enabled = acl_enabled;
    config.http.write_timeout = write_timeout;
    let agent = daemon::spawn(config).expect("the agent starts");
    Running { agent, data_dir }
}

impl Running {
    fn address(&self) -> SocketAddr {
        self.agent.shared.config.bind
    }

    fn connect(&self) -> TcpStream {
        let stream = TcpStream::connect(self.address()).expect("the agent accepts");
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .expect("a read timeout");
        stream
    }

    /// Sends `head` (and `body`) on a fresh connection; the whole answer, until the agent
    /// closes the connection.
    fn exchange(&self, head: &str, body: &[u8]) -> String {
        let mut stream = self.connect();
        stream.write_all(head.as_bytes()).expect("the head is sent");
        let _ = stream.write_all(body);
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer);
        String::from_utf8_lossy(&answer).into_owned()
    }

    /// The store's index, from `X-Nomad-Index`.
    fn index(&self) -> u64 {
        let answer = self.exchange(
            "GET /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
            b"",
        );
        answer
            .lines()
            .find_map(|line| {
                line.to_ascii_lowercase()
                    .strip_prefix("x-nomad-index: ")
                    .map(str::to_string)
            })
            .and_then(|value| value.trim().parse().ok())
            .unwrap_or_else(|| panic!("no index in {answer:?}"))
    }
}

/// The status code of an HTTP/1.1 answer.
fn status(answer: &str) -> u16 {
    answer
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {answer:?}"))
}

/// How many threads this process runs.
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .count()
}

/// Blocks until the agent closes `stream`; how long that took from `since`.
fn closed_after(mut stream: TcpStream, since: Instant) -> Duration {
    let mut sink = Vec::new();
    let _ = stream.read_to_end(&mut sink);
    since.elapsed()
}

#[test]
fn an_idle_connection_is_closed_after_the_idle_timeout_and_not_before() {
    let _turn = beside_others();
    let agent = agent("idle");
    let since = Instant::now();
    let silent = agent.connect();
    let took = closed_after(silent, since);
    assert!(took >= IDLE, "closed after {took:?}, before {IDLE:?}");
    assert!(took < IDLE * 20, "still open after {took:?}");

    // A keep-alive connection after its answer is idle too.
    let mut kept = agent.connect();
    kept.write_all(b"GET /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .expect("sent");
    let mut head = [0u8; 12];
    kept.read_exact(&mut head).expect("an answer");
    assert_eq!(&head, b"HTTP/1.1 200");
    let took = closed_after(kept, Instant::now());
    assert!(
        took < IDLE * 20,
        "a kept-alive connection open after {took:?}"
    );
}

#[test]
fn a_blocking_query_in_flight_is_not_idle() {
    let _turn = beside_others();
    let agent = agent("blocking");
    let wait = IDLE * 3;
    let since = Instant::now();
    let answer = agent.exchange(
        "GET /v1/jobs?index=1000&wait=3s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
        b"",
    );
    assert_eq!(status(&answer), 200, "{answer}");
    assert!(
        since.elapsed() >= wait,
        "answered after {:?}",
        since.elapsed()
    );
}

#[test]
fn a_body_that_does_not_arrive_in_time_is_refused_with_408() {
    let _turn = beside_others();
    let agent = agent("slow-body");
    let answer = agent.exchange(
        "PUT /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n",
        b"{\"Job\":",
    );
    assert_eq!(status(&answer), 408, "{answer}");
    assert!(answer.contains("did not arrive within"), "{answer}");
}

#[test]
fn oversized_heads_and_urls_are_refused() {
    let _turn = beside_others();
    let agent = agent("sizes");
    let big = "a".repeat(100 << 10);
    let answer = agent.exchange(
        &format!("GET /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: {big}\r\n\r\n"),
        b"",
    );
    assert_eq!(status(&answer), 431, "{answer}");
    let long = "x".repeat(20 << 10);
    let answer = agent.exchange(
        &format!("GET /v1/job/{long} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"),
        b"",
    );
    assert_eq!(status(&answer), 414, "{answer}");
    assert!(answer.contains("at most 16384 bytes"), "{answer}");
    let many: String = (0..200).map(|i| format!("X-H{i}: v\r\n")).collect();
    let answer = agent.exchange(
        &format!("GET /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\n{many}\r\n"),
        b"",
    );
    assert_eq!(status(&answer), 431, "{answer}");
}

#[test]
fn waiting_queries_and_idle_connections_hold_no_thread() {
    let _turn = alone();
    let agent = agent("threads");
    // A first job, so that the jobs list has an index to wait past (`index=0` does not
    // block, as in Nomad).
    let first = br#"{"Job":{"ID":"first","Type":"batch","TaskGroups":[{"Name":"g","Count":0,"Tasks":[{"Name":"t","Driver":"raw_exec","Config":{"command":"/bin/true"}}]}]}}"#;
    let answer = agent.exchange(
        &format!(
            "PUT /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\
             Content-Length: {}\r\n\r\n",
            first.len()
        ),
        first,
    );
    assert_eq!(status(&answer), 200, "{answer}");
    let index = agent.index();
    assert!(index > 0);
    let before = threads();
    let idle: Vec<TcpStream> = (0..1_000).map(|_| agent.connect()).collect();
    let waiting: Vec<TcpStream> = (0..200)
        .map(|_| {
            let mut stream = agent.connect();
            let head = format!(
                "GET /v1/jobs?index={index}&wait=60s HTTP/1.1\r\nHost: 127.0.0.1\r\n\
                 Connection: close\r\n\r\n"
            );
            stream.write_all(head.as_bytes()).expect("sent");
            stream
        })
        .collect();
    // Every query has reached the agent and waits: a request that looks no further than
    // the agent's answer goes through while they do.
    let answer = agent.exchange(
        "GET /v1/status/leader HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
        b"",
    );
    assert_eq!(status(&answer), 200, "{answer}");
    let during = threads();
    assert!(
        during < before + 40,
        "{} threads for 1,000 idle connections and 200 waiting queries ({before} before)",
        during
    );
    // A write answers every waiting query, with the new index.
    let job = br#"{"Job":{"ID":"w","Type":"batch","TaskGroups":[{"Name":"g","Tasks":[{"Name":"t","Driver":"raw_exec","Config":{"command":"/bin/true"}}]}]}}"#;
    let answer = agent.exchange(
        &format!(
            "PUT /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\
             Content-Length: {}\r\n\r\n",
            job.len()
        ),
        job,
    );
    assert_eq!(status(&answer), 200, "{answer}");
    for stream in waiting {
        let mut answer = String::new();
        let mut stream = stream;
        stream.read_to_string(&mut answer).expect("an answer");
        assert_eq!(status(&answer), 200, "{answer}");
        assert!(answer.contains("\"ID\":\"w\""), "{answer}");
    }
    drop(idle);
}

#[test]
fn a_get_s_body_is_not_read_and_an_unknown_token_is_refused_before_its_body() {
    let _turn = beside_others();
    let agent = agent_with("heads", true, WRITE);
    // A GET announcing a body it never sends is answered at once (Nomad ignores a GET's
    // body), not after the body timeout: a 403, as nothing is allowed without a token.
    let since = Instant::now();
    let answer = agent.exchange(
        "GET /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\n",
        b"",
    );
    assert_eq!(status(&answer), 403, "{answer}");
    assert!(
        since.elapsed() < BODY,
        "answered after {:?}",
        since.elapsed()
    );
    // A write with a token the agent does not hold is refused from its head.
    let answer = agent.exchange(
        "PUT /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Nomad-Token: nope\r\n\
         Content-Length: 1000\r\n\r\n",
        b"",
    );
    assert_eq!(status(&answer), 403, "{answer}");
    assert!(answer.contains("ACL token not found"), "{answer}");
    // So is a browser's, whatever its body.
    let answer = agent.exchange(
        "PUT /v1/jobs HTTP/1.1\r\nHost: evil.example\r\nContent-Length: 1000\r\n\r\n",
        b"",
    );
    assert_eq!(status(&answer), 403, "{answer}");
    assert!(answer.contains("evil.example"), "{answer}");
}

#[test]
fn an_answer_the_client_does_not_take_is_given_up() {
    let _turn = beside_others();
    let agent = agent("slow-reader");
    register_big_versions(&agent);
    let mut stream = ask_big_versions(&agent);
    // Ten times the write timeout without taking anything: the agent gives the answer up.
    std::thread::sleep(WRITE * 10);
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    assert!(
        answer.len() < 3 * (6 << 20),
        "the whole answer ({} bytes) waited for a client that took none of it",
        answer.len()
    );
    // Nor is one that takes 8 KiB now and then: about 40 KiB per write timeout, less than
    // the agent's minimum of 1 MiB per timeout. (On loopback the kernel wakes a blocked
    // writer only once a third of its send buffer is free, so this reader cannot make the
    // agent's writes progress within the timeout either way; the minimum is for a client
    // that can.)
    let mut stream = ask_big_versions(&agent);
    let (mut taken, mut chunk, mut cut) = (0, vec![0u8; 8 << 10], false);
    let since = Instant::now();
    while since.elapsed() < WRITE * 100 {
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => {
                cut = true;
                break;
            }
            Ok(n) => taken += n,
        }
        std::thread::sleep(WRITE / 4);
    }
    assert!(
        cut && taken < 3 * (6 << 20),
        "a client taking 8 KiB per {:?} was still being sent after {:?} ({taken} bytes)",
        WRITE / 4,
        since.elapsed()
    );
    // A client that keeps taking the answer gets it whole, however long it takes, while it
    // pauses between its reads: each 1 MiB it takes after a stall (`MIN_TAKEN`) disarms the
    // agent's timer. Asked of an agent with a write timeout of 2 s, ten times the one
    // above, so that only a pause of about 1.75 s would make this client one that stopped
    // (a 200 ms timeout took a test thread kept off a loaded machine's CPU for it, once);
    // and the client's pauses make the answer take more than two such timeouts, so that a
    // timer that was never disarmed would cut it.
    let agent = agent_with("paced-reader", false, PACED_WRITE);
    register_big_versions(&agent);
    let mut stream = ask_big_versions(&agent);
    let (mut whole, mut chunk) = (Vec::new(), vec![0u8; 64 << 10]);
    let since = Instant::now();
    'answer: loop {
        let mut this_time = 0;
        while this_time < 1 << 20 {
            match stream.read(&mut chunk) {
                Ok(0) => break 'answer,
                Ok(n) => {
                    whole.extend_from_slice(&chunk[..n]);
                    this_time += n;
                }
                Err(e) => panic!("the answer was cut after {} bytes: {e}", whole.len()),
            }
        }
        std::thread::sleep(PACED_WRITE / 8);
    }
    let took = since.elapsed();
    let whole = String::from_utf8_lossy(&whole);
    assert!(
        whole.len() > 3 * (6 << 20),
        "{} bytes in {took:?}: {}",
        whole.len(),
        &whole[..whole.len().min(500)]
    );
    assert!(
        took > PACED_WRITE * 2,
        "the answer took {took:?}, not the two write timeouts that test the timer's disarming"
    );
}

/// A fresh connection that has asked for `register_big_versions`' answer, none of it read.
fn ask_big_versions(agent: &Running) -> TcpStream {
    let mut stream = agent.connect();
    stream
        .write_all(
            b"GET /v1/job/big/versions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
        )
        .expect("sent");
    stream
}

/// Three versions of a job with 6 MiB of a task's Env (it runs nothing: no allocation): its
/// versions are an answer of about 18 MiB, more than a loopback connection's buffers hold.
fn register_big_versions(agent: &Running) {
    let pad = "x".repeat(6 << 20);
    for version in 0..3 {
        let job = format!(
            r#"{{"Job":{{"ID":"big","TaskGroups":[{{"Name":"g","Count":0,"Tasks":[{{"Name":"t","Driver":"raw_exec","Env":{{"V":"{version}","PAD":"{pad}"}},"Config":{{"command":"/bin/true"}}}}]}}]}}}}"#
        );
        let answer = agent.exchange(
            &format!(
                "PUT /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\
                 Content-Length: {}\r\n\r\n",
                job.len()
            ),
            job.as_bytes(),
        );
        assert_eq!(status(&answer), 200, "{}", &answer[..answer.len().min(300)]);
    }
}
