//! Latency of a flagged stop through the daemon's HTTP API, from the request to the death of
//! every task process (pidfds of the tasks, polled), for 1, 100 and 1,000 allocations of a
//! real program, `/bin/sleep`, that dies of its kill signal (SIGINT, at its default) —
//! against killing the same number of `/bin/sleep` processes directly from the benchmark
//! (SIGINT to each process group, then waiting for each). Issue 11's goal: the agent within
//! 2× the direct kill at 100 and at 1,000 allocations.
//!
//! The agent runs in this process on a free loopback port with a temporary data dir; this
//! benchmark binary is also its task supervisor (`http_stop supervise DIR -- CMD…`).
//!
//! Run: `cargo bench -p quiesce-benches --bench http_stop`. After criterion's report it
//! prints one summary line per size with both means and the ratio.

use criterion::{Criterion, SamplingMode};
use quiesce_agent::daemon::{self, AgentConfig};
use quiesce_api::Api;
use serde_json::{json, Value};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The task: `/bin/sleep`, one idle process that dies of SIGINT at its default disposition
/// (it traps nothing: it dies of the signal only if it started with SIGINT unblocked and not
/// ignored). A shell loop would start processes all the time, and on this VM, where a
/// process start costs milliseconds of CPU, that load — not the stop — would be measured.
const PROGRAM: &str = "/bin/sleep";
const ARGS: [&str; 1] = ["3600"];
const SECOND: i64 = 1_000_000_000;

struct Bench {
    api: Api,
    jobs: u64,
    data_dir: std::path::PathBuf,
}

impl Drop for Bench {
    /// Every job is stopped by then; the agent's data dir goes with the benchmark.
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.data_dir);
    }
}

impl Bench {
    fn start() -> Bench {
        let data_dir = std::env::temp_dir().join(format!("quiesce-bench-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&data_dir);
        let supervisor = std::env::current_exe().expect("this benchmark's path");
        let mut config = AgentConfig::new(
            data_dir.clone(),
            "127.0.0.1:0".parse().expect("an address"),
            supervisor,
        );
        config.supervisor_args = vec!["supervise".into()];
        let agent = daemon::spawn(config).expect("the agent starts");
        let address = format!("http://{}", agent.shared.config.bind);
        Bench {
            api: Api::new(Some(address), None).expect("an HTTP address"),
            jobs: 0,
            data_dir,
        }
    }

    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> (Value, u64) {
        let body = body.map(|b| serde_json::to_vec(b).expect("JSON"));
        self.api
            .call_indexed(method, path, body.as_deref())
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    /// Registers a fresh job of `count` allocations with 30 s group and task delays, and
    /// waits until every task runs. Returns its ID.
    fn running_job(&mut self, count: usize) -> String {
        self.jobs += 1;
        let id = format!("bench-{}", self.jobs);
        let job = json!({"Job": {"ID": id, "TaskGroups": [{
            "Name": "g", "Count": count, "ShutdownDelay": 30 * SECOND,
            "Services": [{"Name": format!("{id}-svc"), "Provider": "nomad"}],
            "Tasks": [{"Name": "t", "Driver": "raw_exec", "ShutdownDelay": 30 * SECOND,
                       "Config": {"command": PROGRAM, "args": ARGS}}]}]}});
        self.call("PUT", "/v1/jobs", Some(&job));
        let count = count as u64;
        self.wait_allocs(&id, count, |group| group["Running"].as_u64().unwrap_or(0));
        id
    }

    /// Waits (blocking queries on the job's summary, which is small: the benchmark's own
    /// polling should not load the 2-core machine it measures) until the summary's counts
    /// that `done` adds up reach `count`.
    fn wait_allocs(&self, job: &str, count: u64, done: impl Fn(&Value) -> u64) {
        let mut index = 0;
        loop {
            let (summary, next) = self.call(
                "GET",
                &format!("/v1/job/{job}/summary?index={index}&wait=10s"),
                None,
            );
            if done(&summary["Summary"]["g"]) >= count {
                return;
            }
            index = next;
        }
    }

    /// The timed part: the flagged stop, until every task process has died (its pidfd
    /// polls readable). Then, untimed, until the agent reports every allocation terminal.
    fn stop(&self, job: &str, count: usize) -> Duration {
        self.stop_and(job, count, || {}, || {})
    }

    /// [`Bench::stop`], calling `at_request` just before the request and `at_death` as soon
    /// as every task process has died.
    fn stop_and(
        &self,
        job: &str,
        count: usize,
        at_request: impl FnOnce(),
        at_death: impl FnOnce(),
    ) -> Duration {
        // A task reported running may still be between fork and exec: look until each is.
        let deadline = Instant::now() + Duration::from_secs(60);
        let tasks = loop {
            let tasks = task_processes(job);
            if tasks.len() == count || Instant::now() > deadline {
                break tasks;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        assert_eq!(
            tasks.len(),
            count,
            "one task process per allocation of {job}"
        );
        let profiling = Profiling::from_env();
        profiling.start();
        at_request();
        let started = Instant::now();
        self.call(
            "DELETE",
            &format!("/v1/job/{job}?no_shutdown_delay=true"),
            None,
        );
        wait_dead(&tasks);
        let took = started.elapsed();
        at_death();
        profiling.stop();
        self.wait_allocs(job, count as u64, |group| {
            group["Complete"].as_u64().unwrap_or(0) + group["Failed"].as_u64().unwrap_or(0)
        });
        // The next measurement starts on a quiet machine: the supervisors, which linger
        // until the agent closes their connections once its kill path is quiet, have gone.
        let deadline = Instant::now() + Duration::from_secs(30);
        while job_processes(job) > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        took
    }
}

/// Profiling one stop at a time (`QUIESCE_BENCH_STOPS`, see `main`): prints where each
/// stop starts on CLOCK_MONOTONIC (`perf record -k CLOCK_MONOTONIC` stamps its samples with
/// that clock), and switches a `perf record --control fifo:CTL,ACK` session on for the timed
/// part only if `QUIESCE_PERF_CTL` and `QUIESCE_PERF_ACK` name its fifos.
struct Profiling {
    on: bool,
    perf: Option<(std::fs::File, std::fs::File)>,
}

impl Profiling {
    fn from_env() -> Profiling {
        let open = |var: &str, write: bool| {
            let path = std::env::var_os(var)?;
            std::fs::OpenOptions::new()
                .read(!write)
                .write(write)
                .open(path)
                .ok()
        };
        Profiling {
            on: std::env::var_os("QUIESCE_BENCH_STOPS").is_some(),
            perf: open("QUIESCE_PERF_CTL", true).zip(open("QUIESCE_PERF_ACK", false)),
        }
    }

    fn perf(&self, command: &str) {
        use std::io::{Read, Write};
        if let Some((mut ctl, mut ack)) = self.perf.as_ref().map(|(c, a)| (c, a)) {
            ctl.write_all(format!("{command}\n").as_bytes())
                .expect("perf's control fifo");
            let mut answer = [0u8; 5];
            ack.read_exact(&mut answer).expect("perf's ack fifo");
        }
    }

    fn start(&self) {
        self.perf("enable");
        if self.on {
            let mut now = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: a valid timespec to fill.
            unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
            println!("stop starts at {}.{:09}", now.tv_sec, now.tv_nsec);
        }
    }

    fn stop(&self) {
        self.perf("disable");
    }
}

/// How many processes (supervisors and tasks) of `job` are left.
fn job_processes(job: &str) -> usize {
    let marker = format!("NOMAD_JOB_ID={job}\0");
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter(|entry| {
            let environ = std::fs::read(entry.path().join("environ")).unwrap_or_default();
            environ
                .windows(marker.len())
                .any(|w| w == marker.as_bytes())
        })
        .count()
}

/// CPU time spent so far by this process's threads, by thread name (ns, from schedstat).
fn thread_cpu() -> std::collections::BTreeMap<String, u64> {
    let mut spent = std::collections::BTreeMap::new();
    for entry in std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .flatten()
    {
        let path = entry.path();
        let name = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        let ns: u64 = std::fs::read_to_string(path.join("schedstat"))
            .unwrap_or_default()
            .split_whitespace()
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        *spent.entry(name.trim().to_string()).or_insert(0) += ns;
    }
    spent
}

/// pidfds of the task processes of `job` (found by the `NOMAD_JOB_ID` in their environment
/// and their name: the supervisor is `quiesce` or this benchmark, the task `sleep` once it
/// has been executed).
fn task_processes(job: &str) -> Vec<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    let marker = format!("NOMAD_JOB_ID={job}\0");
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        let ours = environ
            .windows(marker.len())
            .any(|w| w == marker.as_bytes());
        if comm.trim() == "sleep" && ours {
            // SAFETY: pidfd_open on a pid; the descriptor it returns is ours to own.
            let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as i32;
            if fd >= 0 {
                found.push(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) });
            }
        }
    }
    found
}

/// Waits until every process behind `pidfds` has exited: one at a time, as the direct
/// kill waits for its children (polling all of them at every death would cost the
/// benchmark's own thread a quadratic number of wake-ups).
fn wait_dead(pidfds: &[std::os::fd::OwnedFd]) {
    use std::os::fd::AsRawFd;
    for fd in pidfds {
        let mut poll = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        while unsafe { libc::poll(&mut poll, 1, 10_000) } == 0 {}
    }
}

/// `count` processes of the same program, each in its own process group, started (each
/// has been executed: it is `sleep`, not the child between fork and exec).
fn direct_processes(count: usize) -> Vec<Child> {
    let children: Vec<Child> = (0..count)
        .map(|_| {
            let mut command = Command::new(PROGRAM);
            command.args(ARGS).stdin(Stdio::null()).process_group(0);
            // As the agent's supervisor does: the task's SIGINT at its default, whatever
            // this benchmark inherited (a shell's background job ignores SIGINT).
            // SAFETY: signal() is async-signal-safe.
            unsafe {
                command.pre_exec(|| {
                    libc::signal(libc::SIGINT, libc::SIG_DFL);
                    Ok(())
                });
            }
            command.spawn().expect("/bin/sleep starts")
        })
        .collect();
    for child in &children {
        let comm = format!("/proc/{}/comm", child.id());
        while std::fs::read_to_string(&comm).unwrap_or_default() != "sleep\n" {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    children
}

/// The baseline's timed part: SIGINT each process group, then wait for each.
fn direct_kill(mut children: Vec<Child>) -> Duration {
    let started = Instant::now();
    for child in &children {
        // SAFETY: killpg has no memory-safety preconditions.
        unsafe { libc::killpg(child.id() as i32, libc::SIGINT) };
    }
    for child in &mut children {
        child.wait().expect("the child is ours");
    }
    started.elapsed()
}

fn main() {
    quiesce_benches::supervise_if_asked();
    let mut bench = Bench::start();
    // Profiling: `QUIESCE_BENCH_STOPS=N` runs N flagged stops of 100 allocations (or
    // `QUIESCE_BENCH_ALLOCS`) and prints each one's time (and where it starts) and a direct
    // kill's, instead of criterion's runs. With perf, for example:
    //   QUIESCE_BENCH_STOPS=10 perf record -k CLOCK_MONOTONIC -e cpu-clock -- \
    //     target/release/deps/http_stop-… --bench
    // or, to record the timed parts only, with `mkfifo /tmp/ctl /tmp/ack`:
    //   QUIESCE_PERF_CTL=/tmp/ctl QUIESCE_PERF_ACK=/tmp/ack … perf record -D -1 \
    //     --control fifo:/tmp/ctl,/tmp/ack …
    if let Some(stops) = std::env::var("QUIESCE_BENCH_STOPS")
        .ok()
        .and_then(|n| n.parse::<u32>().ok())
    {
        let count = std::env::var("QUIESCE_BENCH_ALLOCS")
            .ok()
            .and_then(|n| n.parse::<usize>().ok())
            .unwrap_or(100);
        for _ in 0..stops {
            let job = bench.running_job(count);
            let mut before = std::collections::BTreeMap::new();
            let mut after = std::collections::BTreeMap::new();
            let took = bench.stop_and(
                &job,
                count,
                || before = thread_cpu(),
                || after = thread_cpu(),
            );
            let cpu: Vec<String> = after
                .iter()
                .map(|(name, ns)| {
                    let spent = ns - before.get(name).copied().unwrap_or(0);
                    format!("{name} {:.1}", spent as f64 / 1e6)
                })
                .collect();
            println!(
                "CPU of the agent's threads until every task died (ms): {}",
                cpu.join(", ")
            );
            let direct = direct_kill(direct_processes(count));
            println!(
                "{count} allocations: {:.2} ms (direct kill {:.2} ms)",
                took.as_secs_f64() * 1e3,
                direct.as_secs_f64() * 1e3
            );
        }
        return;
    }
    let mut criterion = Criterion::default().configure_from_args();
    let mut summary = Vec::new();
    for count in [1usize, 100, 1000] {
        let mut group = criterion.benchmark_group(format!("flagged_stop_{count}_allocs"));
        group
            .sampling_mode(SamplingMode::Flat)
            .sample_size(10)
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(match count {
                1 => 2,
                100 => 4,
                _ => 10,
            }));
        let mut agent_total = (Duration::ZERO, 0u32);
        group.bench_function("agent_http", |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let job = bench.running_job(count);
                    total += bench.stop(&job, count);
                }
                agent_total.0 += total;
                agent_total.1 += iters as u32;
                total
            })
        });
        let mut direct_total = (Duration::ZERO, 0u32);
        group.bench_function("direct_kill", |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    total += direct_kill(direct_processes(count));
                }
                direct_total.0 += total;
                direct_total.1 += iters as u32;
                total
            })
        });
        group.finish();
        summary.push((count, agent_total, direct_total));
    }
    criterion.final_summary();
    for (count, agent, direct) in summary {
        if agent.1 == 0 || direct.1 == 0 {
            continue;
        }
        let agent_ms = agent.0.as_secs_f64() * 1e3 / f64::from(agent.1);
        let direct_ms = direct.0.as_secs_f64() * 1e3 / f64::from(direct.1);
        let ratio = agent_ms / direct_ms;
        let goal = if count >= 100 {
            if ratio <= 2.0 {
                "; goal (at most 2 x direct) met"
            } else {
                "; goal (at most 2 x direct) NOT met"
            }
        } else {
            ""
        };
        println!(
            "{count} allocation(s) of /bin/sleep: agent {agent_ms:.2} ms, direct kill \
             {direct_ms:.2} ms, ratio {ratio:.2}{goal}"
        );
    }
}
