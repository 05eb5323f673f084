//! quiesce's benchmarks live in `benches/`; run them with `cargo bench -p quiesce-benches`
//! (one with `--bench NAME`). Five, the first four with criterion:
//! * `model_check`: the checker's throughput on the `small` configuration (unique states
//!   per second), in each history mode;
//! * `sim_stop`: a flagged stop of a 10,000-allocation job in the simulator, run until quiet;
//! * `http_stop`: a flagged stop through the agent's HTTP API, from the request to the death
//!   of every task process, for 1, 100 and 1,000 allocations, against killing the same
//!   processes directly;
//! * `http_connections`: what 10,000 idle connections cost the agent, and the latency of
//!   1,000 blocking queries woken by one write;
//! * `soak`: register, stop and purge again and again against an agent with short garbage
//!   collection thresholds, until its memory, state file and event log go flat.

/// The benchmarks that run an agent are also its tasks' supervisor (`BENCH supervise DIR --
/// CMD…`, the agent's `supervisor_args`): called first in their `main`, this runs the
/// supervisor and exits when they were started as one.
pub fn supervise_if_asked() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("supervise") {
        std::process::exit(quiesce::main(
            std::iter::once("quiesce".to_string())
                .chain(args[1..].iter().cloned())
                .collect(),
        ));
    }
}

/// The simulator's stop benchmarks' job (`sim_stop`, `examples/sim_profile.rs`).
pub mod sim_job {
    use quiesce_core::sim::Simulator;
    use quiesce_core::spec::{Job, Lifecycle, Service, Task, TaskGroup};
    use quiesce_core::step::Step;

    /// Stops the job with `-no-shutdown-delay` and runs the simulator until quiet; returns
    /// the steps it took.
    pub fn stop_flagged(sim: &mut Simulator) -> usize {
        let stop = Step::StopJob {
            job: "web".into(),
            purge: false,
            no_shutdown_delay: true,
        };
        sim.apply(&stop).unwrap();
        sim.run_until_quiet(10_000_000).unwrap()
    }

    const SECOND: i64 = 1_000_000_000;

    fn task(name: &str, delay_ns: i64) -> Task {
        Task {
            name: name.into(),
            driver: "mock_driver".into(),
            shutdown_delay_ns: delay_ns,
            ..Task::default()
        }
    }

    /// The job the simulator's stop benchmarks stop: the `standard` group (leader with a delay
    /// and a service, prestart sidecar with a delay, poststop task), `count` `allocs`.
    pub fn big_job(allocs: i64) -> Job {
        let services = |name: &str| {
            Some(vec![Service {
                name: name.into(),
                provider: "nomad".into(),
                ..Service::default()
            }])
        };
        let mut app = task("app", 30 * SECOND);
        app.leader = true;
        app.services = services("app");
        let mut proxy = task("proxy", 5 * SECOND);
        proxy.lifecycle = Some(Lifecycle {
            hook: "prestart".into(),
            sidecar: true,
        });
        let mut flush = task("flush", 0);
        flush.lifecycle = Some(Lifecycle {
            hook: "poststop".into(),
            sidecar: false,
        });
        flush.config = Some([("run_for".to_string(), serde_json::json!(SECOND))].into());
        Job {
            id: "web".into(),
            task_groups: vec![TaskGroup {
                name: "web".into(),
                count: Some(allocs),
                shutdown_delay_ns: Some(30 * SECOND),
                services: services("web"),
                tasks: vec![app, proxy, flush],
                ..TaskGroup::default()
            }],
            ..Job::default()
        }
    }
}
