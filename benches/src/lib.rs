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
