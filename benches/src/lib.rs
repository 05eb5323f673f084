//! quiesce's criterion benchmarks live in `benches/`; run them with
//! `cargo bench -p quiesce-benches`. So far: `model_check`, the checker's throughput on the
//! `small` configuration (unique states per second), in each history mode.
