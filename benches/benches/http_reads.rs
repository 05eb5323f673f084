//! The agent's read path under a crowd (issue 29, goal 5): 1,000 running allocations
//! (`mock_driver` tasks, so that no process runs beside the agent), and 1,000 clients at
//! once, each asking `GET /v1/allocations` then `GET /v1/jobs`, [`ROUNDS`] times. Prints
//! the latency of each request (connect to the last byte of the answer), p50, p99 and the
//! slowest, per path and overall, with the answers' sizes and the agent's CPU time.
//!
//! The agent is this benchmark binary run as `http_reads agent DIR` (its CPU time is its
//! own); each client is a thread with a fresh HTTP/1.0 connection per request, as a client
//! without keep-alive sends them.
//!
//! Run: `cargo bench -p quiesce-benches --bench http_reads` (about half a minute). Goal:
//! p99 ≤ 100 ms.
//!
//! Measured (2 cores, shared with a compiler's run; `--profile ci`): 6,000 requests in
//! 3.9–4.0 s, p50 450–580 ms, p99 1.2–1.8 s (`/v1/allocations`, 1.8 MB each: p99
//! 1.2–1.8 s; `/v1/jobs`, 0.5 kB: p99 0.6–1.0 s, queued behind them). Far from the goal,
//! and not for the agent's own work: `perf record -a` puts 4% of the samples in the agent's
//! code (the answer is built once per store index and shared, `http/answers.rs`), 20% in
//! the kernel copying answers out of it, 38% in the clients receiving them. 1,000 clients
//! × 1.8 MB is 1.8 GB per round on loopback; what would help is fewer bytes (gzip, as Nomad
//! answers `Accept-Encoding: gzip`, encoded once per index with the shared answer).

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

const ALLOCS: usize = 1_000;
const CLIENTS: usize = 1_000;
/// Each client's rounds of both reads.
const ROUNDS: usize = 3;
const PATHS: [&str; 2] = ["/v1/allocations", "/v1/jobs"];

struct Agent {
    child: Child,
    address: String,
    data_dir: std::path::PathBuf,
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
            std::env::temp_dir().join(format!("quiesce-bench-reads-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&data_dir);
        let mut child = Command::new(std::env::current_exe().expect("this benchmark's path"))
            .arg("agent")
            .arg(&data_dir)
            .stdout(Stdio::piped())
            .spawn()
            .expect("the agent starts");
        let stdout = child.stdout.take().expect("the agent's stdout");
        let mut lines = BufReader::new(stdout).lines().map_while(Result::ok);
        let address = lines
            .find_map(|line| {
                line.split_once("HTTP address: http://")
                    .map(|(_, address)| address.trim().to_string())
            })
            .expect("the agent prints its address");
        // Its stdout drained to the end, so the agent never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        Agent {
            child,
            address,
            data_dir,
        }
    }

    /// The agent's CPU time so far (user and system).
    fn cpu(&self) -> Duration {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id()))
            .expect("the agent's stat");
        let after_name = stat.rsplit_once(')').expect("a stat line").1;
        let fields: Vec<&str> = after_name.split_whitespace().collect();
        // utime and stime: fields 14 and 15 of the line, the 12th and 13th after the name.
        let ticks: u64 =
            fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime");
        Duration::from_millis(ticks * 10)
    }
}

/// One request on a fresh HTTP/1.0 connection: the status and the body's size.
fn exchange(address: &str, method: &str, path: &str, body: &[u8]) -> (u16, Vec<u8>) {
    let mut stream = TcpStream::connect(address).expect("the agent accepts");
    let head = format!(
        "{method} {path} HTTP/1.0\r\nHost: {address}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).expect("sent");
    stream.write_all(body).expect("sent");
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).expect("an answer");
    let end = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a head");
    let status = String::from_utf8_lossy(&answer[9..12])
        .parse()
        .expect("a status");
    (status, answer.split_off(end + 4))
}

fn running(agent: &Agent) -> usize {
    let (_, body) = exchange(&agent.address, "GET", "/v1/allocations", b"");
    let allocs: Value = serde_json::from_slice(&body).expect("JSON");
    allocs
        .as_array()
        .expect("a list")
        .iter()
        .filter(|a| a["ClientStatus"] == "running")
        .count()
}

/// `sorted`'s value at `fraction` (0.5: the median).
fn at(sorted: &[Duration], fraction: f64) -> Duration {
    let rank = ((sorted.len() as f64 * fraction).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
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
    let agent = Agent::start();
    let job = format!(
        r#"{{"Job":{{"ID":"reads","TaskGroups":[{{"Name":"g","Count":{ALLOCS},"Tasks":[{{"Name":"idle","Driver":"mock_driver","Config":{{}}}}]}}]}}}}"#
    );
    let (status, body) = exchange(&agent.address, "PUT", "/v1/jobs", job.as_bytes());
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let deadline = Instant::now() + Duration::from_secs(120);
    while running(&agent) < ALLOCS {
        assert!(Instant::now() < deadline, "{ALLOCS} allocations never ran");
        std::thread::sleep(Duration::from_millis(200));
    }
    let sizes: Vec<usize> = PATHS
        .iter()
        .map(|path| exchange(&agent.address, "GET", path, b"").1.len())
        .collect();

    let start = Arc::new(Barrier::new(CLIENTS + 1));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (address, start) = (agent.address.clone(), Arc::clone(&start));
            std::thread::Builder::new()
                .stack_size(256 << 10)
                .spawn(move || {
                    start.wait();
                    let mut took = Vec::with_capacity(ROUNDS * PATHS.len());
                    for _ in 0..ROUNDS {
                        for (n, path) in PATHS.iter().enumerate() {
                            let began = Instant::now();
                            let (status, _) = exchange(&address, "GET", path, b"");
                            assert_eq!(status, 200, "GET {path}");
                            took.push((n, began.elapsed()));
                        }
                    }
                    took
                })
                .expect("a client thread")
        })
        .collect();
    let cpu_before = agent.cpu();
    start.wait();
    let began = Instant::now();
    let mut took: Vec<Vec<Duration>> = vec![Vec::new(); PATHS.len()];
    for client in clients {
        for (n, latency) in client.join().expect("a client") {
            took[n].push(latency);
        }
    }
    let wall = began.elapsed();
    let cpu = agent.cpu() - cpu_before;
    let requests = CLIENTS * ROUNDS * PATHS.len();
    println!(
        "{ALLOCS} running allocations, {CLIENTS} clients × {ROUNDS} rounds: {requests} requests \
         in {:.2} s ({:.0}/s), the agent's CPU {:.2} s",
        wall.as_secs_f64(),
        requests as f64 / wall.as_secs_f64(),
        cpu.as_secs_f64()
    );
    println!("| path | answer | p50 | p99 | slowest |");
    println!("|---|---|---|---|---|");
    let mut all = Vec::new();
    for (n, path) in PATHS.iter().enumerate() {
        took[n].sort();
        all.extend_from_slice(&took[n]);
        let row = &took[n];
        println!(
            "| GET {path} | {} kB | {:.1} ms | {:.1} ms | {:.1} ms |",
            sizes[n] / 1000,
            at(row, 0.5).as_secs_f64() * 1e3,
            at(row, 0.99).as_secs_f64() * 1e3,
            at(row, 1.0).as_secs_f64() * 1e3,
        );
    }
    all.sort();
    println!(
        "| both | | {:.1} ms | {:.1} ms | {:.1} ms |",
        at(&all, 0.5).as_secs_f64() * 1e3,
        at(&all, 0.99).as_secs_f64() * 1e3,
        at(&all, 1.0).as_secs_f64() * 1e3,
    );
}
