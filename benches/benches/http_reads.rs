//! The agent's read path under a crowd (issue 29, goal 5): 1,000 running allocations
//! (`mock_driver` tasks, so that no process runs beside the agent), and 1,000 clients at
//! once, each asking `GET /v1/allocations` then `GET /v1/jobs`, [`ROUNDS`] times. Prints
//! the latency of each request (from connecting to the last byte of the answer, and to the
//! answer read), p50, p99 and the slowest, per path and overall, with the answers' sizes and
//! the agent's CPU time.
//!
//! The agent is this benchmark binary run as `http_reads agent DIR` (its CPU time is its
//! own); each client is a thread with a fresh HTTP/1.0 connection per request, as a client
//! without keep-alive sends them. The crowd runs twice: without `Accept-Encoding`, then
//! with `Accept-Encoding: gzip`, as Go's `net/http` client sends it by default (a gzip
//! answer is decompressed, as that client does: "read" is to the answer decompressed, "last
//! byte" to its last byte sent).
//!
//! Run: `cargo bench --profile ci -p quiesce-benches --bench http_reads` (about half a
//! minute). Goal: p99 ≤ 100 ms.
//!
//! Measured before gzip (2 cores, shared with a compiler's run; `--profile ci`): 6,000
//! requests in 3.9–4.0 s, p50 450–580 ms, p99 1.2–1.8 s (`/v1/allocations`, 1.8 MB each:
//! p99 1.2–1.8 s; `/v1/jobs`, 0.5 kB: p99 0.6–1.0 s, queued behind them). `perf record -a`
//! put 4% of the samples in the agent's code, 20% in the kernel copying answers out of it,
//! 38% in the clients receiving them: 1,000 clients × 1.8 MB is 1.8 GB per round.
//!
//! With gzip (`daemon/http/gzip.rs`: the answer compressed once per index, 1.84 MB to
//! 59 kB, and shared; same machine, load average 4 from another engineer's build): plain
//! p50 354 ms, p99 2.41 s; gzip p50 278 ms, p99 509 ms, in 1.74 s instead of 4.04 s, the
//! agent's CPU 0.81 s instead of 2.11 s. Busier runs (load 5–8): gzip p99 1.05–2.09 s
//! against plain 1.62–3.91 s. Still not the goal, and no longer the bytes: the crowd is a
//! closed loop, so its latency is about 1,000 / throughput (p50 278 ms at 3,450
//! requests/s), and the throughput is the two cores' — 1,000 client threads each making a
//! TCP connection per request, beside the agent. Decompressing costs a client 1–5 ms.

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

/// How a client asks for its answers.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Encoding {
    /// No `Accept-Encoding`: the answer as it is.
    Plain,
    /// `Accept-Encoding: gzip`, as Go's `net/http` client sends by default; a gzip answer is
    /// decompressed, as that client does before the caller reads it.
    Gzip,
}

/// An answer: its status, its body as sent (compressed or not) and as read, and when its
/// last byte came (before it was decompressed).
struct Answer {
    status: u16,
    sent: usize,
    body: Vec<u8>,
    last_byte: Instant,
}

/// One request on a fresh HTTP/1.0 connection.
fn exchange(address: &str, method: &str, path: &str, body: &[u8], encoding: Encoding) -> Answer {
    let mut stream = TcpStream::connect(address).expect("the agent accepts");
    let accept = match encoding {
        Encoding::Plain => "",
        Encoding::Gzip => "Accept-Encoding: gzip\r\n",
    };
    let head = format!(
        "{method} {path} HTTP/1.0\r\nHost: {address}\r\n{accept}Content-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).expect("sent");
    stream.write_all(body).expect("sent");
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).expect("an answer");
    let last_byte = Instant::now();
    let end = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a head");
    let head = String::from_utf8_lossy(&answer[..end]).to_ascii_lowercase();
    let status = head[9..12].parse().expect("a status");
    let sent = answer.split_off(end + 4);
    let gzipped = head
        .lines()
        .any(|line| line.starts_with("content-encoding:") && line.contains("gzip"));
    assert!(
        !gzipped || encoding == Encoding::Gzip,
        "gzip only when asked for"
    );
    let body = if gzipped {
        let mut plain = Vec::new();
        flate2::read::GzDecoder::new(&sent[..])
            .read_to_end(&mut plain)
            .expect("a gzip body");
        plain
    } else {
        sent.clone()
    };
    Answer {
        status,
        sent: sent.len(),
        body,
        last_byte,
    }
}

fn running(agent: &Agent) -> usize {
    let answer = exchange(
        &agent.address,
        "GET",
        "/v1/allocations",
        b"",
        Encoding::Plain,
    );
    let allocs: Value = serde_json::from_slice(&answer.body).expect("JSON");
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
    let answer = exchange(
        &agent.address,
        "PUT",
        "/v1/jobs",
        job.as_bytes(),
        Encoding::Plain,
    );
    assert_eq!(
        answer.status,
        200,
        "{}",
        String::from_utf8_lossy(&answer.body)
    );
    let deadline = Instant::now() + Duration::from_secs(120);
    while running(&agent) < ALLOCS {
        assert!(Instant::now() < deadline, "{ALLOCS} allocations never ran");
        std::thread::sleep(Duration::from_millis(200));
    }
    for encoding in [Encoding::Plain, Encoding::Gzip] {
        crowd(&agent, encoding);
    }
}

/// 1,000 clients at once, each reading both paths [`ROUNDS`] times, asking as `encoding`
/// says; prints the table.
fn crowd(agent: &Agent, encoding: Encoding) {
    let sizes: Vec<(usize, usize)> = PATHS
        .iter()
        .map(|path| {
            let answer = exchange(&agent.address, "GET", path, b"", encoding);
            (answer.sent, answer.body.len())
        })
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
                            let answer = exchange(&address, "GET", path, b"", encoding);
                            assert_eq!(answer.status, 200, "GET {path}");
                            took.push((n, answer.last_byte - began, began.elapsed()));
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
    // Per path: to the last byte, and to the answer read (decompressed, if gzip).
    let mut took: Vec<[Vec<Duration>; 2]> = vec![[Vec::new(), Vec::new()]; PATHS.len()];
    for client in clients {
        for (n, last_byte, read) in client.join().expect("a client") {
            took[n][0].push(last_byte);
            took[n][1].push(read);
        }
    }
    let wall = began.elapsed();
    let cpu = agent.cpu() - cpu_before;
    let requests = CLIENTS * ROUNDS * PATHS.len();
    let asked = match encoding {
        Encoding::Plain => "no Accept-Encoding",
        Encoding::Gzip => "Accept-Encoding: gzip",
    };
    println!(
        "\n{asked}: {ALLOCS} running allocations, {CLIENTS} clients × {ROUNDS} rounds: \
         {requests} requests in {:.2} s ({:.0}/s), the agent's CPU {:.2} s",
        wall.as_secs_f64(),
        requests as f64 / wall.as_secs_f64(),
        cpu.as_secs_f64()
    );
    println!("| path | sent (answer) | last byte p50 | p99 | read p50 | p99 | slowest |");
    println!("|---|---|---|---|---|---|---|");
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let mut all: [Vec<Duration>; 2] = [Vec::new(), Vec::new()];
    for (n, path) in PATHS.iter().enumerate() {
        for (kind, row) in took[n].iter_mut().enumerate() {
            row.sort();
            all[kind].extend_from_slice(row);
        }
        let [last, read] = &took[n];
        println!(
            "| GET {path} | {:.1} kB ({:.1} kB) | {:.1} ms | {:.1} ms | {:.1} ms | {:.1} ms | \
             {:.1} ms |",
            sizes[n].0 as f64 / 1e3,
            sizes[n].1 as f64 / 1e3,
            ms(at(last, 0.5)),
            ms(at(last, 0.99)),
            ms(at(read, 0.5)),
            ms(at(read, 0.99)),
            ms(at(read, 1.0)),
        );
    }
    for row in &mut all {
        row.sort();
    }
    let [last, read] = &all;
    println!(
        "| both | | {:.1} ms | {:.1} ms | {:.1} ms | {:.1} ms | {:.1} ms |",
        ms(at(last, 0.5)),
        ms(at(last, 0.99)),
        ms(at(read, 0.5)),
        ms(at(read, 0.99)),
        ms(at(read, 1.0)),
    );
}
