//! Stopping a 10,000-allocation job with `-no-shutdown-delay` and running the simulator
//! until quiet (issue 3's goal: under one second on the 2-core machine). Throughput is
//! reported in allocations per second.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use quiesce_benches::sim_job::{big_job, stop_flagged};
use quiesce_core::sim::Simulator;

const ALLOCS: i64 = 10_000;

fn stop_with_flag(c: &mut Criterion) {
    let mut running = Simulator::new(10, 1);
    running.register(big_job(ALLOCS)).unwrap();
    running.run_until_quiet(10_000_000).unwrap();
    let mut group = c.benchmark_group("sim_stop");
    group.sample_size(10);
    group.throughput(Throughput::Elements(ALLOCS as u64));
    group.bench_function("flagged_job_stop_10000_allocs", |b| {
        b.iter_batched(
            || running.clone(),
            |mut sim| {
                let steps = stop_flagged(&mut sim);
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
