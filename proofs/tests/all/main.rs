//! quiesce-proofs' integration tests, in one test binary: one binary per file linked the
//! model, the simulator and the implementation five times over (see ARCHITECTURE.md, CI).

mod adapter;
mod cli;
mod lockstep;
mod random;
mod trace;
