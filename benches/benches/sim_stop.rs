//! Stopping a 10,000-allocation job with `-no-shutdown-delay` and running the simulator
//! until quiet (issue 3's goal: under one second on the 2-core machine). Throughput is
//! reported in allocations per second.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use quiesce_core::sim::Simulator;
use quiesce_core::spec::{Job, Lifecycle, Service, Task, TaskGroup};
use quiesce_core::step::Step;

const SECOND: i64 = 1_000_000_000;
const ALLOCS: i64 = 10_000;

fn task(name: &str, delay_ns: i64) -> Task {
    Task {
        name: name.into(),
        driver: "mock_driver".into(),
        shutdown_delay_ns: delay_ns,
        ..Task::default()
    }
}

/// The `standard` group (leader with a delay and a service, prestart sidecar with a delay,
/// poststop task), `count` 10,000 over 10 nodes.
fn big_job() -> Job {
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
            count: Some(ALLOCS),
            shutdown_delay_ns: Some(30 * SECOND),
            services: services("web"),
            tasks: vec![app, proxy, flush],
            ..TaskGroup::default()
        }],
        ..Job::default()
    }
}

fn stop_with_flag(c: &mut Criterion) {
    let mut running = Simulator::new(10, 1);
    running.register(big_job()).unwrap();
    running.run_until_quiet(10_000_000).unwrap();
    let mut group = c.benchmark_group("sim_stop");
    group.sample_size(10);
    group.throughput(Throughput::Elements(ALLOCS as u64));
    group.bench_function("flagged_job_stop_10000_allocs", |b| {
        b.iter_batched(
            || running.clone(),
            |mut sim| {
                let stop = Step::StopJob {
                    job: "web".into(),
                    purge: false,
                    no_shutdown_delay: true,
                };
                sim.apply(&stop).unwrap();
                let steps = sim.run_until_quiet(10_000_000).unwrap();
                assert!(sim
                    .server
                    .store
                    .allocs()
                    .all(|a| a.client_status.is_terminal()));
                // Returned, so that dropping 10,000 allocations is not timed.
                (sim, steps)
            },
            BatchSize::LargeInput,
        )
    });
    group.finish();
}

criterion_group!(benches, stop_with_flag);
criterion_main!(benches);
