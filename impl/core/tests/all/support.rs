//! What several of these tests share: a client's report, running the scheduler until no
//! evaluation is pending, the description of an allocation a rollout stops.

use quiesce_core::server::structs::{AllocDeploymentStatus, ClientStatus};
use quiesce_core::server::{ClientReport, Server};

/// Nomad's desired description of an allocation a rollout stops to replace it.
pub const UPDATING: &str = "alloc is being updated due to job update";

/// A client's report of `client_status`, with the allocation's health if it has one.
pub fn report(client_status: ClientStatus, healthy: Option<bool>) -> ClientReport {
    ClientReport {
        client_status,
        client_description: String::new(),
        task_states: Default::default(),
        deployment_status: healthy.map(|healthy| AllocDeploymentStatus {
            healthy: Some(healthy),
            ..AllocDeploymentStatus::default()
        }),
    }
}

/// Processes evaluations until none is pending.
pub fn settle(server: &mut Server) {
    while server.process_next_eval().unwrap().is_some() {}
}
