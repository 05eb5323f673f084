//! The HTTP layer under many connections (issue 12, part 4): what 10,000 idle connections
//! cost the agent (its RSS and threads, read from `/proc`), and the latency of 1,000
//! concurrent blocking queries — from the write that ends their wait to the last answer.
//!
//! The agent is this benchmark binary run as `http_connections agent DIR` (so that its
//! descriptors, RSS and threads are its own, apart from the 10,000 client sockets here);
//! its task supervisor too (`http_connections supervise …`).
//!
//! Run: `cargo bench -p quiesce-benches --bench http_connections` (about a minute). Before
//! criterion's report it prints the agent's RSS and threads idle, with 10,000 idle
//! connections, and while 1,000 queries wait.

use criterion::{Criterion, SamplingMode};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const IDLE_CONNECTIONS: usize = 10_000;
const WAITING_QUERIES: usize = 1_000;

struct Agent {
    child: Child,
    address: String,
    data_dir: std::path::PathBuf,
    version: u64,
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.data_dir);
    }
}

impl Agent {
    fn start() -> Agent {
        let data_dir =
            std::env::temp_dir().join(format!("quiesce-bench-conn-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&data_dir);
        let mut child = Command::new(std::env::current_exe().expect("this benchmark's path"))
            .arg("agent")
            .arg(&data_dir)
            .stdout(Stdio::piped())
            .spawn()
            .expect("the agent starts");
        let stdout = child.stdout.take().expect("the agent's stdout");
        let address = BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .find_map(|line| {
                line.split_once("HTTP address: http://")
                    .map(|(_, address)| address.trim().to_string())
            })
            .expect("the agent prints its address");
        Agent {
            child,
            address,
            data_dir,
            version: 0,
        }
    }

    fn connect(&self) -> TcpStream {
        TcpStream::connect(&self.address).expect("the agent accepts")
    }

    /// One request on a fresh connection; the whole answer.
    fn exchange(&self, head: &str, body: &[u8]) -> String {
        let mut stream = self.connect();
        stream.write_all(head.as_bytes()).expect("sent");
        stream.write_all(body).expect("sent");
        let mut answer = String::new();
        stream.read_to_string(&mut answer).expect("an answer");
        answer
    }

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
                    .map(|value| value.trim().parse::<u64>().expect("an index"))
            })
            .expect("an X-Nomad-Index")
    }

    /// A write that starts nothing: a new version of a job whose group has no allocation.
    fn write(&mut self) {
        self.version += 1;
        let job = format!(
            r#"{{"Job":{{"ID":"bench","Meta":{{"v":"{}"}},"TaskGroups":[{{"Name":"g","Count":0,"Tasks":[{{"Name":"t","Driver":"raw_exec","Config":{{"command":"/bin/true"}}}}]}}]}}}}"#,
            self.version
        );
        let answer = self.exchange(
            &format!(
                "PUT /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\
                 Content-Length: {}\r\n\r\n",
                job.len()
            ),
            job.as_bytes(),
        );
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }

    /// The agent's RSS (kB) and thread count.
    fn footprint(&self) -> (u64, u64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("the agent's status");
        let field = |name: &str| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(name))
                .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
                .expect("a field of /proc/PID/status")
        };
        (field("VmRSS:"), field("Threads:"))
    }

    /// Sends `count` blocking queries on the store's current index.
    fn waiting_queries(&self, count: usize) -> Vec<TcpStream> {
        let head = format!(
            "GET /v1/jobs?index={}&wait=60s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
            self.index()
        );
        (0..count)
            .map(|_| {
                let mut stream = self.connect();
                stream.write_all(head.as_bytes()).expect("sent");
                stream
            })
            .collect()
    }
}

fn answered(streams: Vec<TcpStream>) {
    for mut stream in streams {
        let mut answer = String::new();
        stream.read_to_string(&mut answer).expect("an answer");
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("agent") => {
            let dir = args.get(2).expect("a data dir").clone();
            let code = quiesce::main(
                ["quiesce", "agent", "-dev", "-data-dir", &dir, "-port", "0"]
                    .map(str::to_string)
                    .to_vec(),
            );
            std::process::exit(code);
        }
        Some("supervise") => std::process::exit(quiesce::main(
            std::iter::once("quiesce".to_string())
                .chain(args[1..].iter().cloned())
                .collect(),
        )),
        _ => {}
    }
    let mut agent = Agent::start();
    agent.write();
    let (rss, threads) = agent.footprint();
    println!("agent idle: RSS {rss} kB, {threads} threads");
    let idle: Vec<TcpStream> = (0..IDLE_CONNECTIONS).map(|_| agent.connect()).collect();
    // Each connection has been accepted once the agent answers one more.
    agent.index();
    let (rss_idle, threads_idle) = agent.footprint();
    println!(
        "agent with {IDLE_CONNECTIONS} idle connections: RSS {rss_idle} kB (+{} kB, {:.1} kB \
         each), {threads_idle} threads",
        rss_idle - rss,
        (rss_idle - rss) as f64 / IDLE_CONNECTIONS as f64
    );
    drop(idle);
    let waiting = agent.waiting_queries(WAITING_QUERIES);
    std::thread::sleep(Duration::from_millis(500));
    let (rss_waiting, threads_waiting) = agent.footprint();
    println!(
        "agent with {WAITING_QUERIES} waiting blocking queries: RSS {rss_waiting} kB, \
         {threads_waiting} threads"
    );
    agent.write();
    answered(waiting);

    let mut criterion = Criterion::default().configure_from_args();
    let mut group = criterion.benchmark_group("http_connections");
    group.sampling_mode(SamplingMode::Flat).sample_size(10);
    group.bench_function("1000_blocking_queries_write_to_last_answer", |b| {
        b.iter_custom(|iterations| {
            let mut total = Duration::ZERO;
            for _ in 0..iterations {
                let waiting = agent.waiting_queries(WAITING_QUERIES);
                // Let every query reach its wait (a benchmark's setup, outside the timing:
                // a query that had not would answer at once, which is no slower).
                std::thread::sleep(Duration::from_millis(300));
                let start = Instant::now();
                agent.write();
                answered(waiting);
                total += start.elapsed();
            }
            total
        })
    });
    group.finish();
    criterion.final_summary();
}
