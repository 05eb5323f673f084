//! Model-checking throughput: unique states per second on `small`, per history mode, with
//! quiesce's checker as `quiesce-model check` runs it and with stateright's DFS beside it, so
//! a change that makes the model carry state it does not need, or the checker slower, shows
//! up as a slowdown.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use quiesce_model::{checker, class_fingerprint, config, representative, Checker, History, Model};
use quiesce_model::{ModelCfg, StopPathModel};

/// One single-threaded DFS check with symmetry: quiesce's (`stateright` false) or
/// stateright's.
fn check(part: &ModelCfg, stateright: bool) -> usize {
    let model = part.clone().into_model();
    let (discoveries, unique) = if stateright {
        let checker = model
            .checker()
            .threads(1)
            .symmetry_fn(representative)
            .spawn_dfs()
            .join();
        (checker.discoveries().len(), checker.unique_state_count())
    } else {
        let checker = checker::depth_first::<StopPathModel>(model, class_fingerprint, 1).join();
        (checker.discoveries().len(), checker.unique_state_count())
    };
    assert_eq!(
        discoveries,
        part.witnesses.len(),
        "only the witnesses are found"
    );
    unique
}

fn check_small(c: &mut Criterion) {
    let mut group = c.benchmark_group("check_small");
    group.sample_size(10);
    for history in [History::Full, History::Lean] {
        let part = config::small().remove(0).with_history(history);
        group.throughput(Throughput::Elements(check(&part, false) as u64));
        for (name, stateright) in [("quiesce", false), ("stateright", true)] {
            let id = format!("{}/{name}", format!("{history:?}").to_lowercase());
            group.bench_function(id, |b| b.iter(|| check(&part, stateright)));
        }
    }
    group.finish();
}

criterion_group!(benches, check_small);
criterion_main!(benches);
