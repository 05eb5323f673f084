//! The soak of issue 24, finding 4: register → stop → purge, again and again, against an
//! agent in this process whose garbage collection runs with short thresholds — the curve of
//! its memory (RSS), its state file and its event log (every file of it) must go flat once
//! the thresholds have passed, where before it grew by every cycle (~5 KB of state, 2.1 KB
//! of log, 8–17 KB of RSS; 1,500 cycles: 7.9 → 33.6 MB RSS).
//!
//! Each cycle registers a job of one allocation (`mock_driver`, with a group service and a
//! group delay), waits for it to run, stops it with `-purge -no-shutdown-delay` (so the
//! runner still takes the stop path), and waits for its allocation to be gone. The agent
//! collects evaluations after 2 s, dead jobs after 4 s, every 500 ms; its event log rotates
//! at 4 MiB (four files kept).
//!
//! Run: `QUIESCE_SOAK_CYCLES=10000 cargo bench -p quiesce-benches --bench soak` (default
//! 2,000). It prints a row every tenth of the run.
//!
//! Measured with `QUIESCE_SOAK_CYCLES=30000`: the state file flat at 8.4 MB, all five
//! event-log files 17–20 MB, evaluations held under 1,600, RSS 23.0 MB at 3,000 cycles
//! and 27.1 MB at 30,000 (the mock driver's one-hour check timers, bounded by their time,
//! are most of the rest).

use quiesce_agent::daemon::{self, gc::GcConfig, AgentConfig};
use quiesce_api::Api;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const SECOND: i64 = 1_000_000_000;

fn rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|line| line.starts_with("VmRSS:"))
                .and_then(|line| line.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn size_of(paths: impl Iterator<Item = std::path::PathBuf>) -> u64 {
    paths
        .filter_map(|path| std::fs::metadata(path).ok())
        .map(|meta| meta.len())
        .sum()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    quiesce_benches::supervise_if_asked();
    if args.iter().any(|arg| arg == "--list") {
        return; // `cargo test --benches` lists benchmarks: this one is run by hand.
    }
    let cycles: usize = std::env::var("QUIESCE_SOAK_CYCLES")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(2_000);
    std::env::set_var("QUIESCE_EVENT_LOG_MAX_BYTES", (4u64 << 20).to_string());
    let data_dir = std::env::temp_dir().join(format!("quiesce-soak-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data_dir);
    let mut config = AgentConfig::new(
        data_dir.clone(),
        "127.0.0.1:0".parse().expect("an address"),
        std::env::current_exe().expect("this benchmark's path"),
    );
    config.gc = GcConfig {
        eval_threshold: Duration::from_secs(2),
        job_threshold: Duration::from_secs(4),
        interval: Duration::from_millis(500),
        ..GcConfig::default()
    };
    let agent = daemon::spawn(config).expect("the agent starts");
    let api =
        Api::new(Some(format!("http://{}", agent.shared.config.bind)), None).expect("an address");
    let call = |method: &str, path: &str, body: Option<&Value>| -> Option<Value> {
        let body = body.map(|b| serde_json::to_vec(b).expect("JSON"));
        api.call_indexed(method, path, body.as_deref())
            .ok()
            .map(|(value, _)| value)
    };
    let wait = |what: &str, done: &dyn Fn() -> bool| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !done() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    // The node turns ready at its first heartbeat.
    wait("the node", &|| {
        call("GET", "/v1/nodes", None).is_some_and(|nodes| nodes[0]["Status"] == "ready")
    });
    println!(
        "{:>7} {:>8} {:>10} {:>10} {:>8} {:>6} {:>10}",
        "cycles", "seconds", "RSS MB", "state MB", "log MB", "evals", "allocs"
    );
    let started = Instant::now();
    let row = |done: usize| {
        let gauges: std::collections::BTreeMap<String, f64> = call("GET", "/v1/metrics", None)
            .and_then(|metrics| {
                metrics["Gauges"].as_array().map(|gauges| {
                    gauges
                        .iter()
                        .map(|g| {
                            (
                                g["Name"].as_str().unwrap_or_default().to_string(),
                                g["Value"].as_f64().unwrap_or(0.0),
                            )
                        })
                        .collect()
                })
            })
            .unwrap_or_default();
        let logs = std::fs::read_dir(&data_dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|entry| entry.path())
            .filter(|path| {
                path.file_name()
                    .is_some_and(|name| name.to_string_lossy().starts_with("events.jsonl"))
            });
        println!(
            "{:>7} {:>8.1} {:>10.1} {:>10.2} {:>8.2} {:>6} {:>10}",
            done,
            started.elapsed().as_secs_f64(),
            rss_kb() as f64 / 1024.0,
            size_of(std::iter::once(data_dir.join("state.redb"))) as f64 / 1e6,
            size_of(logs) as f64 / 1e6,
            gauges
                .get("quiesce.state.evaluations")
                .copied()
                .unwrap_or(0.0),
            gauges
                .get("nomad.nomad.state.allocations")
                .copied()
                .unwrap_or(0.0),
        );
    };
    row(0);
    for cycle in 1..=cycles {
        let id = format!("soak-{cycle}");
        let job = json!({"Job": {"ID": id, "TaskGroups": [{
            "Name": "g", "ShutdownDelay": SECOND,
            "Services": [{"Name": "soak", "Provider": "nomad"}],
            "Tasks": [{"Name": "t", "Driver": "mock_driver", "Config": {"run_for": "1h"}}]}]}});
        call("PUT", "/v1/jobs", Some(&job)).expect("the registration");
        let allocs = format!("/v1/job/{id}/allocations");
        wait("the allocation to run", &|| {
            call("GET", &allocs, None).is_some_and(|a| a[0]["ClientStatus"] == "running")
        });
        let alloc = call("GET", &allocs, None).expect("the allocations")[0]["ID"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        call(
            "DELETE",
            &format!("/v1/job/{id}?purge=true&no_shutdown_delay=true"),
            None,
        )
        .expect("the stop");
        let node_allocs = format!("/v1/node/{}/allocations", agent.shared.core().node());
        wait("the allocation to end", &|| {
            call("GET", &node_allocs, None).is_some_and(|list| {
                !list
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|a| a["ID"] == alloc.as_str())
            })
        });
        if cycle % (cycles / 10).max(1) == 0 {
            row(cycle);
        }
    }
    // Past every threshold, the last cycles' records go too.
    std::thread::sleep(Duration::from_secs(5));
    row(cycles);
    let _ = std::fs::remove_dir_all(&data_dir);
}
