//! Model-checking throughput: unique states per second on `small`, per history mode, so a
//! change that makes the model carry state it does not need shows up as a slowdown.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use quiesce_model::{config, representative, Checker, History, Model, ModelCfg};

/// One single-threaded DFS check with symmetry, as `quiesce-model check` runs it.
fn check(part: &ModelCfg) -> usize {
    let checker = part
        .clone()
        .into_model()
        .checker()
        .threads(1)
        .symmetry_fn(representative)
        .spawn_dfs()
        .join();
    assert_eq!(
        checker.discoveries().len(),
        part.witnesses.len(),
        "only the witnesses are found"
    );
    checker.unique_state_count()
}

fn check_small(c: &mut Criterion) {
    let mut group = c.benchmark_group("check_small");
    group.sample_size(10);
    for history in [History::Full, History::Lean] {
        let part = config::small().remove(0).with_history(history);
        group.throughput(Throughput::Elements(check(&part) as u64));
        group.bench_function(format!("{history:?}").to_lowercase(), |b| {
            b.iter(|| check(&part))
        });
    }
    group.finish();
}

criterion_group!(benches, check_small);
criterion_main!(benches);
