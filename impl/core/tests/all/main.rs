//! quiesce-core's integration tests, in one test binary: one binary per file linked the
//! core five times over (see ARCHITECTURE.md, CI).

mod canaries;
mod hcl_jobspec;
mod scenarios;
mod server;
mod support;
mod system_deployments;
