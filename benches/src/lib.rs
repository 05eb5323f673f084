//! quiesce's criterion benchmarks live in `benches/`; run them with
//! `cargo bench -p quiesce-benches`. So far: `model_check`, the checker's throughput on the
//! `small` configuration (unique states per second), in each history mode.

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
