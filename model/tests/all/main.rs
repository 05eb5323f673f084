//! quiesce-model's integration tests, in one test binary: one binary per file linked the
//! model and stateright five times over (see ARCHITECTURE.md, CI).

mod checker;
mod cli;
mod configurations;
mod draw;
mod faults;
mod invariant_index;
