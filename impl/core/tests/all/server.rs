//! The server on its own: versions, evaluations, the broker and the reconciler.

use quiesce_core::server::scaling::ScaleRequest;
use quiesce_core::server::structs::{
    AllocDeploymentStatus, ClientStatus, DesiredStatus, EvalStatus,
};
use quiesce_core::server::structs::{AllocId, NodeEvent, NodeId};
use quiesce_core::server::{
    ClientReport, RegisterOptions, Server, ServerError, StopAllocOptions, StopJobOptions,
};
use quiesce_core::spec::{Job, Task, TaskGroup, UpdateStrategy};

fn job(job_type: &str, count: i64) -> Job {
    Job {
        id: "web".into(),
        job_type: job_type.into(),
        task_groups: vec![TaskGroup {
            name: "web".into(),
            count: Some(count),
            tasks: vec![Task {
                name: "app".into(),
                driver: "mock_driver".into(),
                ..Task::default()
            }],
            ..TaskGroup::default()
        }],
        ..Job::default()
    }
}

fn server_with(job: Job) -> Server {
    let mut server = Server::new(vec!["node-0".into()], 3);
    server.register_job(job).unwrap();
    server.process_next_eval().unwrap().unwrap();
    server
}

/// A client's report of a status, with no task states.
fn report(client_status: ClientStatus) -> ClientReport {
    ClientReport {
        client_status,
        client_description: String::new(),
        task_states: Default::default(),
        deployment_status: None,
    }
}

fn alloc_ids(server: &Server) -> Vec<AllocId> {
    let mut allocs: Vec<_> = server.store.allocs_by_job("web").collect();
    allocs.sort_by_key(|a| (a.create_index, a.name.clone()));
    allocs.iter().map(|a| a.id.clone()).collect()
}

#[test]
fn registering_the_same_spec_again_writes_no_version_but_an_evaluation() {
    let mut server = server_with(job("service", 2));
    let index = server.store.index();
    let response = server.register_job(job("service", 2)).unwrap();
    assert_eq!(response.index, index + 1);
    let eval = server.store.eval(&response.eval_id).unwrap();
    assert_eq!(eval.triggered_by, "job-register");
    assert_eq!(server.store.job("web").unwrap().version, 0);
    server.register_job(job("service", 3)).unwrap();
    let versions = server.store.job_versions("web").unwrap();
    assert_eq!(
        versions.iter().map(|v| v.version).collect::<Vec<_>>(),
        [0, 1]
    );
}

#[test]
fn a_newer_evaluation_cancels_the_pending_one() {
    let mut server = server_with(job("service", 1));
    let first = server
        .stop_job("web", StopJobOptions::default())
        .unwrap()
        .eval_id;
    let second = server
        .stop_job(
            "web",
            StopJobOptions {
                no_shutdown_delay: true,
                ..Default::default()
            },
        )
        .unwrap()
        .eval_id;
    let status = |id: &str| server.store.eval(id).unwrap().status;
    assert_eq!(
        (status(&first), status(&second)),
        (EvalStatus::Canceled, EvalStatus::Pending)
    );
    let eval = server.store.eval(&second).unwrap();
    assert_eq!(
        (
            eval.triggered_by.as_str(),
            eval.eval_type.as_str(),
            eval.priority
        ),
        ("job-deregister", "service", 50)
    );
}

#[test]
fn eval_priority_overrides_the_jobs() {
    let mut server = server_with(job("batch", 1));
    let options = StopJobOptions {
        eval_priority: Some(90),
        ..Default::default()
    };
    let id = server.stop_job("web", options).unwrap().eval_id;
    assert_eq!(server.store.eval(&id).unwrap().priority, 90);
}

// invariant: flag_scoped
#[test]
fn stopping_a_job_stops_every_live_allocation_and_keeps_the_flag() {
    let mut server = server_with(job("service", 3));
    let ids = alloc_ids(&server);
    server.stop_alloc(&ids[0], true).unwrap();
    server.stop_job("web", StopJobOptions::default()).unwrap();
    server.process_next_eval().unwrap().unwrap();
    for id in &ids {
        let alloc = server.store.alloc(id).unwrap();
        assert_eq!(alloc.desired_status, DesiredStatus::Stop);
        assert_eq!(
            alloc.desired_description,
            "alloc not needed due to job update"
        );
    }
    let flagged = server.store.alloc(&ids[0]).unwrap();
    assert_eq!(flagged.desired_transition.no_shutdown_delay, Some(true));
    assert_eq!(
        server
            .store
            .alloc(&ids[1])
            .unwrap()
            .desired_transition
            .no_shutdown_delay,
        None
    );
}

#[test]
fn a_completed_batch_allocation_is_not_placed_again() {
    let mut server = server_with(job("batch", 2));
    let ids = alloc_ids(&server);
    let done = report(ClientStatus::Complete);
    server.client_report(&ids[0], done);
    server.stop_alloc(&ids[1], false).unwrap();
    server.process_next_eval().unwrap().unwrap();
    let all = alloc_ids(&server);
    assert_eq!(all.len(), 3, "only the stopped allocation is replaced");
    let replacement = server.store.alloc(&all[2]).unwrap();
    assert_eq!(
        replacement.previous_allocation.as_deref(),
        Some(ids[1].as_str())
    );
    assert_eq!(replacement.name, "web.web[1]");
    assert_eq!(
        server
            .store
            .alloc(&ids[1])
            .unwrap()
            .next_allocation
            .as_deref(),
        Some(all[2].as_str())
    );
}

#[test]
fn a_service_allocation_that_completed_is_replaced() {
    let mut server = server_with(job("service", 1));
    let ids = alloc_ids(&server);
    let done = report(ClientStatus::Complete);
    server.client_report(&ids[0], done);
    server.stop_job("web", StopJobOptions::default()).unwrap();
    server.start_job("web").unwrap();
    server.process_next_eval().unwrap().unwrap();
    assert_eq!(alloc_ids(&server).len(), 2);
}

#[test]
fn starting_a_running_job_is_refused() {
    let mut server = server_with(job("service", 1));
    assert_eq!(
        server.start_job("web").unwrap_err().to_string(),
        "job web is not stopped"
    );
    assert_eq!(
        server.start_job("api").unwrap_err().to_string(),
        "job not found: api"
    );
}

/// Placement balances nodes by their live allocations; a replacement goes where the
/// stopped allocation freed room.
#[test]
fn placement_spreads_allocations_over_the_least_loaded_nodes() {
    let mut server = Server::new(vec!["node-0".into(), "node-1".into()], 3);
    server.register_job(job("service", 4)).unwrap();
    server.process_next_eval().unwrap().unwrap();
    let on = |server: &Server, node: &str| {
        server
            .store
            .allocs()
            .filter(|a| a.node_id == node && !a.is_terminal())
            .count()
    };
    assert_eq!((on(&server, "node-0"), on(&server, "node-1")), (2, 2));
    let stopped = server
        .store
        .allocs()
        .find(|a| a.node_id == "node-1")
        .unwrap()
        .id
        .clone();
    server.stop_alloc(&stopped, false).unwrap();
    server.process_next_eval().unwrap().unwrap();
    let replacement = server
        .store
        .allocs()
        .find(|a| a.previous_allocation.as_deref() == Some(stopped.as_str()))
        .unwrap();
    assert_eq!(replacement.node_id, "node-1");
    assert_eq!((on(&server, "node-0"), on(&server, "node-1")), (2, 2));
}

/// A batch allocation that failed is placed again (only a completed one is done).
#[test]
fn a_failed_batch_allocation_is_placed_again() {
    let mut server = server_with(job("batch", 1));
    let ids = alloc_ids(&server);
    let failed = report(ClientStatus::Failed);
    server.client_report(&ids[0], failed);
    server.register_job(job("batch", 1)).unwrap();
    server.stop_job("web", StopJobOptions::default()).unwrap();
    server.start_job("web").unwrap();
    server.process_next_eval().unwrap().unwrap();
    assert_eq!(alloc_ids(&server).len(), 2);
}

/// Scaling a group down stops the allocations with the highest indexes.
#[test]
fn scaling_down_stops_the_extra_allocations() {
    let mut server = server_with(job("service", 3));
    server.register_job(job("service", 1)).unwrap();
    server.process_next_eval().unwrap().unwrap();
    let mut live: Vec<_> = server
        .store
        .allocs()
        .filter(|a| a.desired_status == DesiredStatus::Run)
        .map(|a| a.name.clone())
        .collect();
    live.sort();
    assert_eq!(live, ["web.web[0]"]);
    let stopped = server
        .store
        .allocs()
        .filter(|a| a.desired_description == "alloc not needed as task group was scaled down")
        .count();
    assert_eq!(stopped, 2);
}

/// A node record as the daemon registers it.
fn node(id: &str, status: &str) -> quiesce_core::server::structs::Node {
    quiesce_core::server::structs::Node {
        id: id.into(),
        name: id.into(),
        datacenter: "dc1".into(),
        node_pool: "default".into(),
        status: status.into(),
        status_updated_at: 0,
        http_addr: String::new(),
        attributes: Default::default(),
        drivers: Default::default(),
        events: Vec::new(),
        create_index: 0,
        modify_index: 0,
    }
}

#[test]
fn without_a_ready_node_an_evaluation_blocks_until_one_is_ready() {
    let mut server = Server::new(Vec::new(), 3);
    let registered = server.register_job(job("service", 2)).unwrap();
    let processed = server.process_next_eval().unwrap().unwrap();
    assert!(processed.blocked, "nothing could be placed");
    assert!(
        !server.eval_pending(),
        "the blocked evaluation is out of the broker"
    );
    assert_eq!(server.store.allocs().count(), 0);
    let first = server.store.eval(&registered.eval_id).unwrap().clone();
    assert_eq!(first.status, EvalStatus::Complete);
    assert_eq!(first.queued_allocations.get("web"), Some(&2));
    let blocked = server.store.eval(&first.blocked_eval).unwrap().clone();
    assert_eq!(
        (
            blocked.status,
            blocked.triggered_by.as_str(),
            blocked.previous_eval.as_str()
        ),
        (EvalStatus::Blocked, "queued-allocs", first.id.as_str())
    );
    // An initializing node takes nothing; a ready one unblocks the evaluation.
    server.upsert_node(node("n1", "initializing"));
    assert!(!server.eval_pending());
    server.upsert_node(node("n1", "ready"));
    assert!(server.eval_pending());
    let processed = server.process_next_eval().unwrap().unwrap();
    assert_eq!(
        (processed.eval.as_str(), processed.blocked),
        (blocked.id.as_str(), false)
    );
    assert_eq!(
        server.store.allocs().filter(|a| a.node_id == "n1").count(),
        2
    );
    assert_eq!(
        server.store.eval(&blocked.id).unwrap().status,
        EvalStatus::Complete
    );
}

#[test]
fn a_newer_evaluation_cancels_a_blocked_one() {
    let mut server = Server::new(Vec::new(), 3);
    server.register_job(job("service", 1)).unwrap();
    server.process_next_eval().unwrap();
    let blocked = server
        .store
        .evals()
        .find(|e| e.status == EvalStatus::Blocked)
        .unwrap()
        .id
        .clone();
    let stopped = server.stop_job("web", StopJobOptions::default()).unwrap();
    assert_eq!(
        server.store.eval(&blocked).unwrap().status,
        EvalStatus::Canceled
    );
    let processed = server.process_next_eval().unwrap().unwrap();
    assert_eq!(
        (processed.eval, processed.blocked),
        (stopped.eval_id, false)
    );
    server.upsert_node(node("n1", "ready"));
    assert!(!server.eval_pending(), "nothing is left to unblock");
}

#[test]
fn enforce_index_registers_only_over_the_given_job_modify_index() {
    use quiesce_core::server::{RegisterOptions, ServerError};
    let enforce = |index| RegisterOptions {
        enforce_index: Some(index),
        ..RegisterOptions::default()
    };
    let mut server = Server::new(vec!["node-0".into()], 3);
    let refused = server.register_job_with(job("service", 1), enforce(10));
    assert_eq!(
        refused.unwrap_err().to_string(),
        "Enforcing job modify index 10: job does not exist"
    );
    assert!(server.store.job("web").is_none());
    server
        .register_job_with(job("service", 1), enforce(0))
        .unwrap();
    let stored = server.store.job("web").unwrap().job_modify_index;
    let again = server.register_job_with(job("service", 2), enforce(0));
    assert_eq!(
        again.unwrap_err(),
        ServerError::EnforceIndex(0, "job already exists".into())
    );
    let stale = server.register_job_with(job("service", 2), enforce(stored + 7));
    assert!(stale
        .unwrap_err()
        .to_string()
        .ends_with(&format!("conflicting job modify index: {stored}")));
    assert_eq!(
        server.store.job("web").unwrap().version,
        0,
        "nothing written"
    );
    server
        .register_job_with(job("service", 2), enforce(stored))
        .unwrap();
    assert_eq!(server.store.job("web").unwrap().version, 1);
}

#[test]
fn each_table_keeps_the_index_of_its_own_last_write() {
    let mut server = Server::new(Vec::new(), 3);
    server.upsert_node(node("n1", "ready"));
    let tables = server.store.table_indexes();
    assert_eq!(
        (tables.nodes, tables.allocs, tables.evals, tables.jobs),
        (1, 0, 0, 0)
    );
    let registered = server.register_job(job("batch", 1)).unwrap();
    let tables = server.store.table_indexes();
    assert_eq!((tables.jobs, tables.evals, tables.allocs), (2, 2, 0));
    assert_eq!(registered.index, 2);
    server.process_next_eval().unwrap();
    let tables = server.store.table_indexes();
    // The placement moves the job too: its status went from pending to running.
    assert_eq!(
        (tables.allocs, tables.evals, tables.jobs, tables.nodes),
        (3, 3, 3, 1)
    );
    // A purge deletes, and the tables' indexes still move forward.
    let purge = StopJobOptions {
        purge: true,
        ..StopJobOptions::default()
    };
    server.stop_job("web", purge).unwrap();
    assert_eq!(server.store.table_indexes().jobs, 4);
}

#[test]
fn a_changed_group_rolls_out_through_the_stop_path_and_a_count_change_only_scales() {
    let mut server = server_with(job("service", 2));
    let old = alloc_ids(&server);
    // The count alone: one more allocation, the two running ones untouched.
    server.register_job(job("service", 3)).unwrap();
    server.process_next_eval().unwrap();
    let live = |server: &Server| -> Vec<_> {
        let mut live: Vec<_> = server
            .store
            .allocs_by_job("web")
            .filter(|a| a.desired_status == DesiredStatus::Run)
            .map(|a| (a.id.clone(), a.job_version))
            .collect();
        live.sort();
        live
    };
    assert_eq!(live(&server).len(), 3);
    for id in &old {
        let alloc = server.store.alloc(id).unwrap();
        assert_eq!(
            (alloc.desired_status, alloc.job_version),
            (DesiredStatus::Run, 1)
        );
    }
    // A changed task without an update strategy (`max_parallel = 0`): every allocation is
    // stopped as a job update and replaced at the new version at once, each replacement
    // naming the one it replaces.
    let mut changed = job("service", 3);
    changed.task_groups[0].tasks[0].env = Some([("V".to_string(), "2".to_string())].into());
    changed.update = Some(all_at_once());
    server.register_job(changed).unwrap();
    server.process_next_eval().unwrap();
    let replaced = alloc_ids(&server);
    let stopped: Vec<_> = replaced
        .iter()
        .filter_map(|id| server.store.alloc(id))
        .filter(|a| a.desired_status == DesiredStatus::Stop)
        .collect();
    assert_eq!(stopped.len(), 3);
    for alloc in &stopped {
        assert_eq!(
            alloc.desired_description,
            "alloc is being updated due to job update"
        );
        let next = server
            .store
            .alloc(alloc.next_allocation.as_ref().unwrap())
            .unwrap();
        assert_eq!(
            (next.job_version, next.previous_allocation.as_ref()),
            (2, Some(&alloc.id))
        );
        assert!(!next.desired_transition.should_ignore_shutdown_delay());
    }
    assert!(live(&server).iter().all(|(_, version)| *version == 2));
    // The same spec again changes nothing.
    let before = live(&server);
    let mut again = job("service", 3);
    again.task_groups[0].tasks[0].env = Some([("V".to_string(), "2".to_string())].into());
    again.update = Some(all_at_once());
    server.register_job(again).unwrap();
    server.process_next_eval().unwrap();
    assert_eq!(live(&server), before);
}

/// `update { max_parallel = 0 }`: no deployment, every changed allocation at once.
fn all_at_once() -> UpdateStrategy {
    UpdateStrategy {
        max_parallel: Some(0),
        ..UpdateStrategy::default()
    }
}

// invariant: rollout_bounded
#[test]
fn a_service_job_without_an_update_block_rolls_out_one_at_a_time_each_after_health() {
    let mut server = server_with(job("service", 3));
    let old = alloc_ids(&server);
    // The registration's own deployment placed them; healthy, it succeeds.
    let first = server.store.latest_deployment("web").unwrap().id.clone();
    for id in &old {
        server.client_report(id, healthy());
    }
    while server.process_next_eval().unwrap().is_some() {}
    assert_eq!(
        server.store.deployment(&first).unwrap().status,
        "successful"
    );
    assert!(server.store.job_versions("web").unwrap()[0].stable);
    let mut changed = job("service", 3);
    changed.task_groups[0].tasks[0].env = Some([("V".to_string(), "2".to_string())].into());
    server.register_job(changed).unwrap();
    let deployment = server.store.latest_deployment("web").unwrap().clone();
    assert_eq!(
        (deployment.status.as_str(), deployment.job_version),
        ("running", 1)
    );
    server.process_next_eval().unwrap();
    let being_updated = |server: &Server| -> Vec<AllocId> {
        old.iter()
            .filter(|id| server.store.alloc(*id).unwrap().desired_status == DesiredStatus::Stop)
            .cloned()
            .collect()
    };
    // Nomad's default strategy: one at a time, the oldest first, its replacement in the
    // deployment.
    assert_eq!(being_updated(&server), vec![old[0].clone()]);
    let first = server.store.alloc(&old[0]).unwrap().clone();
    assert_eq!(
        first.desired_description,
        "alloc is being updated due to job update"
    );
    let next = server
        .store
        .alloc(first.next_allocation.as_ref().unwrap())
        .unwrap()
        .clone();
    assert_eq!(next.deployment_id, deployment.id);
    // Neither the old one stopping nor the new one running is enough: nothing moves until
    // the old one is terminal and the new one healthy.
    server.client_report(&next.id, report(ClientStatus::Running));
    while server.process_next_eval().unwrap().is_some() {}
    assert_eq!(being_updated(&server), vec![old[0].clone()]);
    server.client_report(&old[0], report(ClientStatus::Complete));
    while server.process_next_eval().unwrap().is_some() {}
    assert_eq!(being_updated(&server), vec![old[0].clone()]);
    let healthy = ClientReport {
        deployment_status: Some(AllocDeploymentStatus {
            healthy: Some(true),
            ..AllocDeploymentStatus::default()
        }),
        ..report(ClientStatus::Running)
    };
    server.client_report(&next.id, healthy.clone());
    while server.process_next_eval().unwrap().is_some() {}
    assert_eq!(being_updated(&server), vec![old[0].clone(), old[1].clone()]);
    // The rest, batch by batch, then the deployment succeeds.
    for id in &old[1..] {
        let alloc = server.store.alloc(id).unwrap().clone();
        let replacement = alloc.next_allocation.unwrap();
        server.client_report(id, report(ClientStatus::Complete));
        server.client_report(&replacement, healthy.clone());
        while server.process_next_eval().unwrap().is_some() {}
    }
    assert_eq!(being_updated(&server), old);
    let done = server.store.latest_deployment("web").unwrap();
    assert_eq!(done.status, "successful");
    assert_eq!(done.task_groups["web"].healthy_allocs, 3);
}

#[test]
fn a_group_removed_from_the_job_has_its_allocations_stopped() {
    let mut two = job("service", 1);
    let mut api = two.task_groups[0].clone();
    api.name = "api".into();
    two.task_groups.push(api);
    let mut server = server_with(two);
    assert_eq!(server.store.allocs().count(), 2);
    server.register_job(job("service", 1)).unwrap();
    server.process_next_eval().unwrap();
    let api_alloc = server
        .store
        .allocs()
        .find(|a| a.task_group == "api")
        .unwrap();
    assert_eq!(api_alloc.desired_status, DesiredStatus::Stop);
    assert_eq!(
        api_alloc.desired_description,
        "alloc not needed due to job update"
    );
    let web = server
        .store
        .allocs()
        .find(|a| a.task_group == "web")
        .unwrap();
    assert_eq!(
        (web.desired_status, web.job_version),
        (DesiredStatus::Run, 1)
    );
}

#[test]
fn a_blocked_evaluation_that_still_cannot_place_blocks_again_itself() {
    use quiesce_core::spec::{Network, Port};
    let mut server = Server::new(Vec::new(), 3);
    server.upsert_node(node("n1", "ready"));
    let mut held = job("service", 1);
    held.id = "holder".into();
    let static_port = |job: &mut Job| {
        job.task_groups[0].networks = Some(vec![Network {
            reserved_ports: Some(vec![Port {
                label: "admin".into(),
                value: 28000,
                ..Port::default()
            }]),
            ..Network::default()
        }]);
    };
    static_port(&mut held);
    server.register_job(held).unwrap();
    server.process_next_eval().unwrap();
    let mut wants = job("service", 1);
    static_port(&mut wants);
    let wanted = server.register_job(wants).unwrap().eval_id;
    assert!(server.process_next_eval().unwrap().unwrap().blocked);
    let queued = &server.store.eval(&wanted).unwrap().queued_allocations;
    assert_eq!(
        queued.get("web"),
        Some(&1),
        "the placement waits for its port"
    );
    let evals = server.store.evals().count();
    // A node update unblocks it; it still cannot place, and blocks again as itself.
    for _ in 0..3 {
        server.upsert_node(node("n1", "ready"));
        assert!(server.process_next_eval().unwrap().unwrap().blocked);
    }
    assert_eq!(server.store.evals().count(), evals, "no new records");
    // The holder's allocation ends: the port is free, and the evaluation places.
    let holder = server
        .store
        .allocs_by_job("holder")
        .next()
        .unwrap()
        .id
        .clone();
    // A report that the holder still runs frees nothing: the evaluation stays blocked.
    server.client_report(&holder, report(ClientStatus::Running));
    assert!(!server.eval_pending());
    server.client_report(&holder, report(ClientStatus::Complete));
    let processed = server.process_next_eval().unwrap().unwrap();
    assert!(!processed.blocked);
    let placed = server.store.allocs_by_job("web").next().unwrap();
    assert_eq!(placed.ports[0].value, 28000);
}

/// Nomad's `TestOverlap` (#10440): an allocation in its shutdown delay — stopped by the
/// server, still running on its client — keeps its static port, so another job's
/// placement blocks until the client reports it terminal.
#[test]
fn a_stopping_allocation_keeps_its_static_port_until_its_client_ends_it() {
    use quiesce_core::spec::{Network, Port};
    let mut server = Server::new(Vec::new(), 3);
    server.upsert_node(node("n1", "ready"));
    let static_port = |job: &mut Job| {
        job.task_groups[0].networks = Some(vec![Network {
            reserved_ports: Some(vec![Port {
                label: "held".into(),
                value: 28001,
                ..Port::default()
            }]),
            ..Network::default()
        }]);
    };
    let mut old = job("service", 1);
    old.id = "old".into();
    static_port(&mut old);
    server.register_job(old).unwrap();
    server.process_next_eval().unwrap();
    let old_alloc = server.store.allocs_by_job("old").next().unwrap().id.clone();
    server.client_report(&old_alloc, report(ClientStatus::Running));
    server.stop_job("old", StopJobOptions::default()).unwrap();
    server.process_next_eval().unwrap();
    let stopping = server.store.alloc(&old_alloc).unwrap();
    assert_eq!(
        (stopping.desired_status, stopping.client_status),
        (DesiredStatus::Stop, ClientStatus::Running)
    );
    let mut new = job("service", 1);
    static_port(&mut new);
    server.register_job(new).unwrap();
    assert!(
        server.process_next_eval().unwrap().unwrap().blocked,
        "the port is still held"
    );
    assert_eq!(server.store.allocs_by_job("web").count(), 0);
    server.client_report(&old_alloc, report(ClientStatus::Complete));
    assert!(!server.process_next_eval().unwrap().unwrap().blocked);
    assert_eq!(
        server.store.allocs_by_job("web").next().unwrap().ports[0].value,
        28001
    );
}

/// Dynamic ports: two servers (two agents on one host) placing the same job on their own
/// nodes do not both hand out the range's first port, as the lowest free port did; on one
/// node the allocations of a group take distinct ports, all in the range, and a port held by
/// a running allocation is not handed out again.
#[test]
fn dynamic_ports_are_spread_by_node_and_distinct_on_one() {
    use quiesce_core::server::placement::{MAX_DYNAMIC_PORT, MIN_DYNAMIC_PORT};
    use quiesce_core::spec::{Network, Port};
    let dynamic = |count| {
        let mut job = job("service", count);
        job.task_groups[0].networks = Some(vec![Network {
            dynamic_ports: Some(vec![Port {
                label: "http".into(),
                ..Port::default()
            }]),
            ..Network::default()
        }]);
        job
    };
    let ports_on = |node_name: &str, count| {
        let mut server = Server::new(Vec::new(), 3);
        server.upsert_node(node(node_name, "ready"));
        server.register_job(dynamic(count)).unwrap();
        server.process_next_eval().unwrap();
        let mut ports: Vec<u16> = server
            .store
            .allocs_by_job("web")
            .map(|a| a.ports[0].value)
            .collect();
        ports.sort();
        (server, ports)
    };
    let (_, first) = ports_on("n1", 1);
    let (_, second) = ports_on("n2", 1);
    assert_ne!(first, second, "two nodes' first dynamic ports");
    let (mut server, five) = ports_on("n1", 5);
    assert_eq!(five.len(), 5);
    assert!(five.windows(2).all(|w| w[0] < w[1]), "distinct: {five:?}");
    assert!(five
        .iter()
        .all(|p| (MIN_DYNAMIC_PORT..=MAX_DYNAMIC_PORT).contains(p)));
    assert!(five.contains(&first[0]), "the same start on the same node");
    // A sixth allocation of the group (the count raised) takes none of the five.
    let running: Vec<_> = server
        .store
        .allocs_by_job("web")
        .map(|a| a.id.clone())
        .collect();
    for id in &running {
        server.client_report(id, report(ClientStatus::Running));
    }
    server.register_job(dynamic(6)).unwrap();
    server.process_next_eval().unwrap();
    let sixth: Vec<u16> = server
        .store
        .allocs_by_job("web")
        .filter(|a| !running.contains(&a.id))
        .map(|a| a.ports[0].value)
        .collect();
    assert_eq!(sixth.len(), 1);
    assert!(!five.contains(&sixth[0]), "{sixth:?} among {five:?}");
}

// invariant: job_dead_only_when_tasks_ended
#[test]
fn a_jobs_status_moves_its_modify_index_and_is_published_in_the_write_that_changes_it() {
    use quiesce_core::server::events::{Since, Snapshot};
    let mut server = Server::new(vec!["node-0".into()], 3);
    server.store.journal_events();
    server.register_job(job("service", 2)).unwrap();
    let job_of = |server: &Server| server.store.job("web").unwrap().clone();
    assert_eq!(server.store.job_status(&job_of(&server)), "pending");
    server.process_next_eval().unwrap().unwrap();
    let placed = server.store.index();
    assert_eq!(server.store.job_status(&job_of(&server)), "running");
    assert_eq!(job_of(&server).modify_index, placed, "pending to running");
    let ids = alloc_ids(&server);
    for id in &ids {
        server.client_report(id, report(ClientStatus::Running));
    }
    assert_eq!(job_of(&server).modify_index, placed, "still running");
    let stop = server
        .stop_job(
            "web",
            StopJobOptions {
                no_shutdown_delay: true,
                ..StopJobOptions::default()
            },
        )
        .unwrap();
    server.process_next_eval().unwrap().unwrap();
    // Told to stop, its tasks still running: not dead yet (Nomad would say dead here).
    assert_eq!(server.store.job_status(&job_of(&server)), "running");
    server.client_report(&ids[0], report(ClientStatus::Complete));
    assert_eq!(server.store.job_status(&job_of(&server)), "running");
    let before_last = job_of(&server).modify_index;
    server.client_report(&ids[1], report(ClientStatus::Complete));
    let ended = server.store.index();
    let stopped = job_of(&server);
    assert_eq!(server.store.job_status(&stopped), "dead");
    assert!(before_last < ended);
    assert_eq!(
        stopped.modify_index, ended,
        "the last allocation's end moves the job"
    );
    assert_eq!(server.store.table_indexes().jobs, ended);
    assert_eq!(
        stopped.job_modify_index, stop.index,
        "the spec did not change"
    );
    let Since::Batches(batches) = server.store.events().unwrap().since(stop.index, 100) else {
        panic!("nothing was dropped");
    };
    let last = batches.last().expect("a batch");
    assert_eq!(last.index, ended);
    let job_events: Vec<_> = last
        .events
        .iter()
        .filter(|e| e.topic.name() == "Job")
        .collect();
    assert_eq!(job_events.len(), 1, "one Job event, in the ending write");
    assert_eq!(job_events[0].event_type, "AllocationUpdated");
    match job_events[0].snapshot.as_ref() {
        Snapshot::Job { status, job, .. } => {
            assert_eq!((*status, job.modify_index), ("dead", ended));
        }
        other => panic!("a copy of the job, not {other:?}"),
    }
}

/// A clock that moves a second at every look (a write reads it once, when it starts).
fn ticking() -> i64 {
    use std::sync::atomic::{AtomicI64, Ordering};
    static NOW: AtomicI64 = AtomicI64::new(1_796_274_611_000_000_000);
    NOW.fetch_add(1_000_000_000, Ordering::Relaxed)
}

#[test]
fn writes_stamp_their_time_on_what_they_create_and_change_and_a_stop_keeps_the_submit_time() {
    let mut server = Server::new(vec!["node-0".into()], 3);
    server.store.set_clock(ticking);
    server.register_job(job("service", 1)).unwrap();
    let submitted = server.store.job("web").unwrap().submit_time;
    assert!(submitted > 0, "the register's time");
    server.process_next_eval().unwrap().unwrap();
    let id = alloc_ids(&server).remove(0);
    let placed = server.store.alloc(&id).unwrap().clone();
    assert!(placed.create_time > submitted);
    assert_eq!(placed.modify_time, placed.create_time);
    server.client_report(&id, report(ClientStatus::Running));
    let running = server.store.alloc(&id).unwrap().clone();
    assert_eq!(running.create_time, placed.create_time, "created once");
    assert!(running.modify_time > placed.modify_time, "changed later");
    let eval = server.store.evals().next().unwrap().clone();
    assert!(
        eval.create_time >= submitted && eval.modify_time > eval.create_time,
        "{eval:?}"
    );
    server.stop_job("web", StopJobOptions::default()).unwrap();
    let stopped = server.store.job("web").unwrap();
    assert!(stopped.stop);
    assert_eq!(
        stopped.submit_time, submitted,
        "a stop writes no new specification"
    );
    // A store without a clock (the simulator's) stamps nothing.
    let plain = server_with(job("service", 1));
    let alloc = plain.store.allocs().next().unwrap();
    assert_eq!((alloc.create_time, alloc.modify_time), (0, 0));
    assert_eq!(plain.store.job("web").unwrap().submit_time, 0);
}

/// The event journal: one batch per write, typed as Nomad types it, each event carrying its
/// record as the write left it (a later write does not change it), with no stream open.
#[test]
fn the_event_journal_keeps_each_write_as_it_ended() {
    use quiesce_core::server::events::{Since, Snapshot};
    let mut server = Server::new(vec!["node-0".into()], 3);
    server.store.journal_events();
    server.register_job(job("service", 1)).unwrap();
    server.process_next_eval().unwrap().unwrap();
    let alloc = alloc_ids(&server)[0].clone();
    let batches = |server: &mut Server, from| match server.store.events().unwrap().since(from, 100)
    {
        Since::Batches(batches) => batches,
        Since::FellBehind { .. } => panic!("nothing was dropped"),
    };
    let registered = batches(&mut server, 0);
    let types: Vec<Vec<(&str, &str)>> = registered
        .iter()
        .map(|b| {
            b.events
                .iter()
                .map(|e| (e.topic.name(), e.event_type))
                .collect()
        })
        .collect();
    assert_eq!(
        types,
        [
            // The registration opens its deployment in its own write.
            vec![
                ("Job", "JobRegistered"),
                ("Deployment", "DeploymentStatusUpdate"),
                ("Evaluation", "JobRegistered")
            ],
            // The placement changes the job's status (pending to running): the job too;
            // and the deployment counts it.
            vec![
                ("Deployment", "DeploymentStatusUpdate"),
                ("Allocation", "PlanResult"),
                ("Job", "PlanResult"),
                ("Evaluation", "EvaluationUpdated")
            ],
        ]
    );
    let stop = server
        .stop_job(
            "web",
            StopJobOptions {
                no_shutdown_delay: true,
                ..StopJobOptions::default()
            },
        )
        .unwrap();
    server.process_next_eval().unwrap().unwrap();
    server.client_report(&alloc, report(ClientStatus::Complete));
    let stopped = batches(&mut server, stop.index);
    let allocation_at = |index: u64| {
        let batch = stopped.iter().find(|b| b.index == index).expect("a batch");
        let event = batch
            .events
            .iter()
            .find(|e| e.key == alloc)
            .expect("the allocation");
        match event.snapshot.as_ref() {
            Snapshot::Alloc(alloc) => (event.event_type, (**alloc).clone()),
            other => panic!("a copy, not {other:?}"),
        }
    };
    // The stop's own write: the flag, the allocation not yet set to stop, nor ended.
    let (kind, at_stop) = allocation_at(stop.index);
    assert_eq!(kind, "JobDeregistered");
    assert!(at_stop.desired_transition.should_ignore_shutdown_delay());
    assert_eq!(at_stop.desired_status, DesiredStatus::Run);
    assert_ne!(at_stop.client_status, ClientStatus::Complete);
    let (kind, planned) = allocation_at(stop.index + 1);
    assert_eq!(
        (kind, planned.desired_status),
        ("PlanResult", DesiredStatus::Stop)
    );
    assert_ne!(planned.client_status, ClientStatus::Complete);
    let (kind, reported) = allocation_at(stop.index + 2);
    assert_eq!(
        (kind, reported.client_status),
        ("AllocationUpdated", ClientStatus::Complete)
    );
    // The placement, read after all of it: pending, to run, unflagged, as it was placed.
    let placement = registered[1]
        .events
        .iter()
        .find(|e| e.key == alloc)
        .expect("the placement's event")
        .snapshot
        .as_ref();
    let Snapshot::Alloc(placed) = placement else {
        panic!("a copy, not {placement:?}");
    };
    assert_eq!(
        (placed.desired_status, placed.client_status),
        (DesiredStatus::Run, ClientStatus::Pending)
    );
    assert!(!placed.desired_transition.should_ignore_shutdown_delay());
    assert_eq!(placed.modify_index, registered[1].index);
    // The store's record moved on without changing what the events hold.
    let now = server.store.alloc(&alloc).unwrap();
    assert_eq!(now.client_status, ClientStatus::Complete);
    assert_eq!(now.modify_index, stop.index + 2);
}

use quiesce_core::server::gc::Cutoffs;

#[test]
fn a_live_batch_jobs_completed_allocations_are_not_collected_so_its_work_is_not_run_again() {
    // The reviewer's case: a batch job of two, one completed, one failed and replaced by a
    // re-registration's evaluation; the first evaluation's allocations all ended.
    let mut server = server_with(job("batch", 2));
    let ids = alloc_ids(&server);
    server.client_report(&ids[0], report(ClientStatus::Complete));
    server.client_report(&ids[1], report(ClientStatus::Failed));
    server.register_job(job("batch", 2)).unwrap();
    server.process_next_eval().unwrap().unwrap();
    let collected = server.collect_garbage(Cutoffs::ALL);
    assert_eq!(collected.jobs, 0, "the job still runs");
    assert!(
        server.store.alloc_for_client(&ids[0]).is_some(),
        "the completed allocation is what keeps index 0 from running again"
    );
    server.register_job(job("batch", 2)).unwrap();
    server.process_next_eval().unwrap().unwrap();
    let live: Vec<_> = server
        .store
        .allocs_by_job("web")
        .filter(|a| !a.is_terminal())
        .map(|a| a.name.clone())
        .collect();
    assert_eq!(
        live,
        ["web.web[1]"],
        "only the failed index was placed again"
    );
}

#[test]
fn a_service_job_whose_allocations_ended_is_kept_until_it_is_stopped() {
    let mut server = server_with(job("service", 1));
    let ids = alloc_ids(&server);
    server.client_report(&ids[0], report(ClientStatus::Failed));
    let dead = server.store.job("web").unwrap().clone();
    assert_eq!(server.store.job_status(&dead), "dead");
    let collected = server.collect_garbage(Cutoffs::ALL);
    assert_eq!(
        collected.allocs, 1,
        "its ended allocation goes with its evaluation"
    );
    let kept = server
        .store
        .job("web")
        .expect("never stopped: kept")
        .clone();
    // Its allocations gone, it stays dead (not pending again), and the collection did not
    // change it.
    assert_eq!(server.store.job_status(&kept), "dead");
    assert_eq!(kept.modify_index, dead.modify_index);
    server.stop_job("web", StopJobOptions::default()).unwrap();
    server.process_next_eval().unwrap().unwrap();
    let collected = server.collect_garbage(Cutoffs::ALL);
    assert_eq!(collected.jobs, 1);
    assert!(server.store.job("web").is_none());
    assert!(server.store.allocs_by_job("web").next().is_none());
    assert_eq!(server.store.evals().count(), 0);
    // What its status was derived from went with it: registered again, it is pending
    // until something of it is placed.
    server.register_job(job("service", 1)).unwrap();
    let again = server.store.job("web").unwrap().clone();
    assert_eq!(server.store.job_status(&again), "pending");
}

#[test]
fn a_job_with_a_pending_evaluation_or_a_recent_change_is_not_collected() {
    let mut server = server_with(job("service", 1));
    let ids = alloc_ids(&server);
    server.stop_job("web", StopJobOptions::default()).unwrap();
    server.process_next_eval().unwrap().unwrap();
    server.client_report(&ids[0], report(ClientStatus::Complete));
    let ended = server.store.alloc_for_client(&ids[0]).unwrap().modify_index;
    // Another stop: its evaluation is pending. (Evaluations are not collected on their
    // own here: an evaluation cutoff of 0.)
    server.stop_job("web", StopJobOptions::default()).unwrap();
    let jobs_only = |jobs| Cutoffs { evals: 0, jobs };
    assert_eq!(
        server.collect_garbage(jobs_only(u64::MAX)).jobs,
        0,
        "pending"
    );
    server.process_next_eval().unwrap().unwrap();
    // The allocation's last change is newer than the job cutoff: not old enough yet.
    assert_eq!(server.collect_garbage(jobs_only(ended - 1)).jobs, 0);
    assert!(server.store.job("web").is_some());
    let old = jobs_only(server.store.index());
    assert_eq!(server.collect_garbage(old).jobs, 1);
}

#[test]
fn a_running_allocation_is_never_collected_and_an_ended_one_goes_with_its_evaluation() {
    let mut server = server_with(job("service", 2));
    let ids = alloc_ids(&server);
    server.client_report(&ids[0], report(ClientStatus::Running));
    server.stop_alloc(&ids[1], false).unwrap();
    server.process_next_eval().unwrap().unwrap();
    server.client_report(&ids[1], report(ClientStatus::Complete));
    let collected = server.collect_garbage(Cutoffs::ALL);
    assert_eq!(collected.jobs, 0);
    assert!(server.store.alloc_for_client(&ids[0]).is_some(), "running");
    assert!(
        server.store.alloc_for_client(&ids[1]).is_none(),
        "ended, and its evaluation's other allocation is not: the ended one goes"
    );
}

fn job_named(id: &str, count: i64) -> Job {
    Job {
        id: id.into(),
        ..job("service", count)
    }
}

fn alloc_nodes(server: &Server, job: &str) -> Vec<NodeId> {
    server
        .store
        .allocs_by_job(job)
        .map(|a| a.node_id.clone())
        .collect()
}

/// A server restored over its store (the daemon's restart) queues its pending evaluations
/// again, keeps its blocked ones until a node is ready, and places on the ready nodes it
/// had stored, not on the others.
#[test]
fn a_restored_server_takes_up_its_evaluations_and_its_ready_nodes() {
    let mut server = Server::new(Vec::new(), 3);
    server.register_job(job_named("blocked", 1)).unwrap();
    server.process_next_eval().unwrap().unwrap();
    assert!(!server.eval_pending(), "no node: the evaluation blocks");
    server.register_job(job_named("pending", 1)).unwrap();
    let mut restored = Server::restore(server.store.clone(), Vec::new(), 3);
    assert_eq!(
        restored.next_eval_job().map(|job| job.as_str()),
        Some("pending")
    );
    restored.process_next_eval().unwrap().unwrap();
    assert!(!restored.eval_pending());
    restored.upsert_node(node("n1", "ready"));
    while restored.process_next_eval().unwrap().is_some() {}
    assert_eq!(alloc_nodes(&restored, "blocked"), ["n1"]);
    assert_eq!(alloc_nodes(&restored, "pending"), ["n1"]);

    // n1 is stored ready, n2 initializing: a restore over that store places on n1 only.
    restored.upsert_node(node("n2", "initializing"));
    let mut again = Server::restore(restored.store.clone(), Vec::new(), 5);
    again.register_job(job_named("third", 3)).unwrap();
    while again.process_next_eval().unwrap().is_some() {}
    assert_eq!(alloc_nodes(&again, "third"), ["n1", "n1", "n1"]);
}

#[test]
fn the_servers_ids_are_uuids_each_new() {
    let mut server = Server::new(Vec::new(), 3);
    let (a, b) = (server.uuid(), server.uuid());
    assert_ne!(a, b);
    for id in [a, b] {
        let groups: Vec<usize> = id.split('-').map(str::len).collect();
        assert_eq!(groups, [8, 4, 4, 4, 12], "{id}");
        assert!(
            id.chars().all(|c| c == '-' || c.is_ascii_hexdigit()),
            "{id}"
        );
    }
}

#[test]
fn a_registration_takes_an_eval_priority_of_1_to_100_only() {
    let mut server = Server::new(vec!["node-0".into()], 3);
    let with = |priority| RegisterOptions {
        eval_priority: Some(priority),
        ..RegisterOptions::default()
    };
    for bad in [0, 101] {
        let error = server
            .register_job_with(job("service", 1), with(bad))
            .unwrap_err();
        assert!(
            matches!(error, ServerError::EvalPriorityOutOfRange(p) if p == bad),
            "{error}"
        );
    }
    assert!(server.store.job("web").is_none(), "nothing stored");
    for good in [1, 100] {
        let id = server
            .register_job_with(job("service", 1), with(good))
            .unwrap()
            .eval_id;
        assert_eq!(server.store.eval(&id).unwrap().priority, good);
    }
}

/// Native services are stored under Nomad's IDs (`_nomad-task-<alloc>-<owner>-<name>`,
/// the owner `group` for the group's) and go once: deregistering again counts none.
#[test]
fn services_are_stored_under_nomads_ids_and_deregistered_once() {
    let mut server = server_with(job("service", 1));
    let [id] = &alloc_ids(&server)[..] else {
        panic!("one allocation");
    };
    server.register_services(id, "", &["web-group".into()]);
    server.register_services(id, "app", &["api".into()]);
    let mut ids: Vec<String> = server.store.services().map(|s| s.id.clone()).collect();
    ids.sort();
    assert_eq!(
        ids,
        [
            format!("_nomad-task-{id}-app-api"),
            format!("_nomad-task-{id}-group-web-group")
        ]
    );
    assert_eq!(server.deregister_services(id, "app", &["api".into()]), 1);
    assert_eq!(server.deregister_services(id, "app", &["api".into()]), 0);
    assert_eq!(server.store.services().count(), 1);
}

// invariant: flag_scoped
#[test]
fn an_unflagged_alloc_stop_sets_no_flag() {
    let mut server = server_with(job("service", 1));
    let [id] = &alloc_ids(&server)[..] else {
        panic!("one allocation");
    };
    server
        .stop_alloc_with(id, StopAllocOptions::default())
        .unwrap();
    let alloc = server.store.alloc(id).unwrap();
    assert_eq!(alloc.desired_transition.no_shutdown_delay, None);
    assert_eq!(alloc.desired_transition.migrate, Some(true));
}

/// A node's new events take the index of the write that stores them, its older ones
/// keep theirs; a node that is not ready takes no placement, and one that stops being
/// ready takes none from then on while the others still do.
#[test]
fn a_nodes_events_keep_their_index_and_only_ready_nodes_take_placements() {
    let mut server = Server::new(Vec::new(), 3);
    let event = |message: &str| NodeEvent {
        message: message.into(),
        subsystem: "Cluster".into(),
        timestamp: String::new(),
        create_index: 0,
    };
    let mut n1 = node("n1", "ready");
    n1.events.push(event("Node registered"));
    let first = server.upsert_node(n1.clone());
    n1.events = server.store.node("n1").unwrap().events.clone();
    assert_eq!(n1.events[0].create_index, first);
    n1.events.push(event("Node heartbeat"));
    let second = server.upsert_node(n1);
    let indexes: Vec<u64> = server
        .store
        .node("n1")
        .unwrap()
        .events
        .iter()
        .map(|e| e.create_index)
        .collect();
    assert_eq!(indexes, [first, second]);

    server.upsert_node(node("n2", "initializing"));
    server.upsert_node(node("n3", "ready"));
    server.register_job(job_named("spread", 4)).unwrap();
    while server.process_next_eval().unwrap().is_some() {}
    let mut nodes = alloc_nodes(&server, "spread");
    nodes.sort();
    assert_eq!(nodes, ["n1", "n1", "n3", "n3"], "none on n2, not ready");

    server.upsert_node(node("n3", "down"));
    server.register_job(job_named("after", 2)).unwrap();
    while server.process_next_eval().unwrap().is_some() {}
    assert_eq!(alloc_nodes(&server, "after"), ["n1", "n1"]);
}

/// Placement weighs each node's live allocations, those of earlier evaluations included:
/// the less loaded node takes the next.
#[test]
fn placement_goes_to_the_node_with_fewer_live_allocations() {
    let mut server = Server::new(Vec::new(), 3);
    server.upsert_node(node("n1", "ready"));
    server.register_job(job_named("first", 2)).unwrap();
    while server.process_next_eval().unwrap().is_some() {}
    server.upsert_node(node("n2", "ready"));
    for (id, held) in [("second", 0), ("third", 1)] {
        server.register_job(job_named(id, 1)).unwrap();
        while server.process_next_eval().unwrap().is_some() {}
        assert_eq!(
            alloc_nodes(&server, id),
            ["n2"],
            "{id}: n1 holds 2, n2 {held}"
        );
    }
}

// invariant: stop_completes
#[test]
fn a_replacement_that_fails_before_it_is_healthy_fails_the_deployment_and_stops_the_rollout() {
    let (mut server, old) = rolling_out(2, None);
    let replacement = replacement_of(&server, &old[0]);
    server.client_report(&old[0], report(ClientStatus::Complete));
    server.client_report(&replacement, report(ClientStatus::Failed));
    while server.process_next_eval().unwrap().is_some() {}
    let deployment = server.store.latest_deployment("web").unwrap();
    assert_eq!(
        (
            deployment.status.as_str(),
            deployment.status_description.as_str()
        ),
        ("failed", "Failed due to unhealthy allocations")
    );
    assert_eq!(deployment.task_groups["web"].unhealthy_allocs, 1);
    let failed = server.store.alloc(&replacement).unwrap();
    assert_eq!(
        failed.deployment_status.as_ref().unwrap().healthy,
        Some(false)
    );
    // The older allocation not yet replaced keeps running.
    assert_eq!(
        server.store.alloc(&old[1]).unwrap().desired_status,
        DesiredStatus::Run
    );
}

/// A service job of `count` running allocations whose spec was then changed (version 1),
/// with its deployment opened and its first batch placed.
fn rolling_out(count: i64, update: Option<UpdateStrategy>) -> (Server, Vec<AllocId>) {
    let mut first = job("service", count);
    first.update = update.clone();
    let mut server = server_with(first);
    let old = alloc_ids(&server);
    // The first deployment succeeds: version 0 is stable.
    for id in &old {
        server.client_report(id, healthy());
    }
    while server.process_next_eval().unwrap().is_some() {}
    let mut changed = job("service", count);
    changed.update = update;
    changed.task_groups[0].tasks[0].env = Some([("V".to_string(), "2".to_string())].into());
    server.register_job(changed).unwrap();
    while server.process_next_eval().unwrap().is_some() {}
    (server, old)
}

fn healthy() -> ClientReport {
    ClientReport {
        deployment_status: Some(AllocDeploymentStatus {
            healthy: Some(true),
            ..AllocDeploymentStatus::default()
        }),
        ..report(ClientStatus::Running)
    }
}

fn stopped(server: &Server, ids: &[AllocId]) -> usize {
    ids.iter()
        .filter(|id| server.store.alloc(*id).unwrap().desired_status == DesiredStatus::Stop)
        .count()
}

#[test]
fn a_paused_deployment_replaces_nothing_more_until_it_is_resumed() {
    let (mut server, old) = rolling_out(2, None);
    let id = server.store.latest_deployment("web").unwrap().id.clone();
    let paused = server.pause_deployment(&id, true).unwrap();
    assert_eq!(paused.eval_id, None, "a pause asks for no evaluation");
    let deployment = server.store.deployment(&id).unwrap();
    assert_eq!(
        (
            deployment.status.as_str(),
            deployment.status_description.as_str()
        ),
        ("paused", "Deployment is paused")
    );
    let next = replacement_of(&server, &old[0]);
    server.client_report(&old[0], report(ClientStatus::Complete));
    server.client_report(&next, healthy());
    while server.process_next_eval().unwrap().is_some() {}
    assert_eq!(
        stopped(&server, &old),
        1,
        "paused: the second is not replaced"
    );
    let resumed = server.pause_deployment(&id, false).unwrap();
    assert!(resumed.eval_id.is_some());
    while server.process_next_eval().unwrap().is_some() {}
    assert_eq!(stopped(&server, &old), 2);
    assert_eq!(server.store.deployment(&id).unwrap().status, "running");
}

#[test]
fn a_failed_deployment_stops_the_rollout_and_with_auto_revert_goes_back_to_the_stable_version() {
    let update = UpdateStrategy {
        auto_revert: Some(true),
        ..UpdateStrategy::default()
    };
    // A first deployment failed: no version is stable yet, nothing to go back to.
    let mut first = job("service", 2);
    first.update = Some(update.clone());
    let mut fresh = server_with(first);
    let id = fresh.store.latest_deployment("web").unwrap().id.clone();
    let failed = fresh.fail_deployment(&id).unwrap();
    assert_eq!(failed.reverted_job_version, None);
    assert_eq!(
        fresh.store.deployment(&id).unwrap().status_description,
        "Deployment marked as failed - no stable job version to auto revert to"
    );

    // Version 0's deployment succeeded (rolling_out): version 1's failure goes back to it.
    let (mut server, old) = rolling_out(2, Some(update.clone()));
    let id = server.store.latest_deployment("web").unwrap().id.clone();
    let failed = server.fail_deployment(&id).unwrap();
    assert_eq!(failed.reverted_job_version, Some(0));
    let deployment = server.store.deployment(&id).unwrap();
    assert_eq!(
        deployment.status_description,
        "Deployment marked as failed - rolling back to job version 0"
    );
    let current = server.store.job("web").unwrap();
    assert_eq!(current.version, 2);
    assert_eq!(
        current.spec_only(),
        server.store.job_versions("web").unwrap()[0].spec_only()
    );
    assert_eq!(
        server.fail_deployment(&id),
        Err(ServerError::Refused(
            "can't fail terminal deployment".into()
        ))
    );
    // The revert rolls version 0's spec out again: the one replacement of version 1 is
    // replaced, the old allocation not yet replaced is kept (it runs version 0's spec).
    while server.process_next_eval().unwrap().is_some() {}
    assert_eq!(
        stopped(&server, &old),
        1,
        "a failed deployment replaces nothing more"
    );

    // Roll version 3 out to success: it is stable. Then a bad version 4, failed: back to 3.
    let mut second = job("service", 2);
    second.update = Some(update.clone());
    second.task_groups[0].tasks[0].env = Some([("V".to_string(), "3".to_string())].into());
    server.register_job(second).unwrap();
    for _ in 0..6 {
        while server.process_next_eval().unwrap().is_some() {}
        let ids: Vec<AllocId> = alloc_ids(&server);
        for alloc_id in &ids {
            let alloc = server.store.alloc(alloc_id).unwrap().clone();
            if alloc.desired_status == DesiredStatus::Stop && !alloc.client_status.is_terminal() {
                server.client_report(alloc_id, report(ClientStatus::Complete));
            } else if alloc.desired_status == DesiredStatus::Run
                && alloc.deployment_status.is_none()
                && !alloc.deployment_id.is_empty()
            {
                server.client_report(alloc_id, healthy());
            }
        }
    }
    let done = server.store.latest_deployment("web").unwrap().clone();
    assert_eq!((done.status.as_str(), done.job_version), ("successful", 3));
    let versions = server.store.job_versions("web").unwrap();
    let stable: Vec<u64> = versions
        .iter()
        .filter(|v| v.stable)
        .map(|v| v.version)
        .collect();
    assert_eq!(stable, [0, 3]);
    let mut bad = job("service", 2);
    bad.update = Some(update);
    bad.task_groups[0].tasks[0].env = Some([("V".to_string(), "4".to_string())].into());
    server.register_job(bad).unwrap();
    while server.process_next_eval().unwrap().is_some() {}
    let id = server.store.latest_deployment("web").unwrap().id.clone();
    let failed = server.fail_deployment(&id).unwrap();
    assert_eq!(failed.reverted_job_version, Some(3));
    assert_eq!(
        server.store.deployment(&id).unwrap().status_description,
        "Deployment marked as failed - rolling back to job version 3"
    );
    let current = server.store.job("web").unwrap();
    assert_eq!(current.version, 5);
    assert_eq!(
        current.spec_only(),
        server.store.job_versions("web").unwrap()[3].spec_only()
    );
    assert!(
        !current.stable,
        "a revert's version is not stable until rolled out"
    );
}

#[test]
fn revert_registers_an_older_spec_again_and_refuses_what_nomad_refuses() {
    let mut server = server_with(job("service", 1));
    let mut changed = job("service", 1);
    changed.update = Some(all_at_once());
    changed.task_groups[0].tasks[0].env = Some([("V".to_string(), "2".to_string())].into());
    server.register_job(changed).unwrap();
    server.process_next_eval().unwrap();
    assert_eq!(
        server.revert_job("web", 1, None),
        Err(ServerError::Refused(
            "can't revert to current version".into()
        ))
    );
    assert_eq!(
        server.revert_job("web", 0, Some(5)),
        Err(ServerError::Refused(
            "Current job has version 1; enforcing version 5".into()
        ))
    );
    assert_eq!(
        server.revert_job("web", 9, None),
        Err(ServerError::NotFound(
            "job \"web\" in namespace \"default\" at version 9 not found".into()
        ))
    );
    assert_eq!(
        server.revert_job("nope", 0, None),
        Err(ServerError::NotFound("job \"nope\" not found".into()))
    );
    server.revert_job("web", 0, Some(1)).unwrap();
    let versions = server.store.job_versions("web").unwrap();
    assert_eq!(versions.len(), 3);
    assert_eq!(versions[2].spec_only(), versions[0].spec_only());
}

/// A scale request of `group` to `count`.
fn scale(group: &str, count: i64) -> ScaleRequest {
    ScaleRequest {
        group: group.into(),
        count: Some(count),
        ..ScaleRequest::default()
    }
}

#[test]
fn scale_changes_one_groups_count_and_is_refused_during_a_deployment() {
    let mut server = server_with(job("service", 1));
    assert_eq!(
        server.scale_job("web", scale("web", 3)),
        Err(ServerError::Refused(
            "job scaling blocked due to active deployment".into()
        )),
        "the registration's own deployment runs"
    );
    for id in alloc_ids(&server) {
        server.client_report(&id, healthy());
    }
    while server.process_next_eval().unwrap().is_some() {}
    let response = server.scale_job("web", scale("web", 3)).unwrap();
    assert!(!response.eval_id.is_empty());
    while server.process_next_eval().unwrap().is_some() {}
    assert_eq!(
        server.store.job("web").unwrap().task_groups[0].count,
        Some(3)
    );
    assert_eq!(alloc_ids(&server).len(), 3);
    assert_eq!(
        server.scale_job("web", scale("api", 1)),
        Err(ServerError::Refused(
            "task group \"api\" specified for scaling does not exist in job".into()
        ))
    );
    assert_eq!(
        server.scale_job("web", scale("web", -1)),
        Err(ServerError::Refused(
            "scaling action count can't be negative".into()
        ))
    );
    let (mut rolling, _) = rolling_out(2, None);
    assert_eq!(
        rolling.scale_job("web", scale("web", 5)),
        Err(ServerError::Refused(
            "job scaling blocked due to active deployment".into()
        ))
    );
}

/// The allocation that replaces `id`.
fn replacement_of(server: &Server, id: &str) -> AllocId {
    let alloc = server.store.alloc(id).unwrap();
    alloc.next_allocation.clone().unwrap()
}

/// The test clock: Unix nanoseconds, set by the test.
static CLOCK: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);

fn test_clock() -> i64 {
    CLOCK.load(std::sync::atomic::Ordering::SeqCst)
}

#[test]
fn a_deployment_without_progress_by_its_deadline_fails_and_progress_moves_the_deadline() {
    const S: i64 = 1_000_000_000;
    let update = UpdateStrategy {
        max_parallel: Some(1),
        progress_deadline_ns: Some(600 * S),
        ..UpdateStrategy::default()
    };
    let mut first = job("service", 2);
    first.update = Some(update.clone());
    let mut server = server_with(first);
    server.store.set_clock(test_clock);
    CLOCK.store(1_000 * S, std::sync::atomic::Ordering::SeqCst);
    for id in alloc_ids(&server) {
        server.client_report(&id, healthy());
    }
    while server.process_next_eval().unwrap().is_some() {}
    let mut changed = job("service", 2);
    changed.update = Some(update);
    changed.task_groups[0].tasks[0].env = Some([("V".to_string(), "2".to_string())].into());
    server.register_job(changed).unwrap();
    while server.process_next_eval().unwrap().is_some() {}
    let id = server.store.latest_deployment("web").unwrap().id.clone();
    let by = |server: &Server| {
        server.store.deployment(&id).unwrap().task_groups["web"].require_progress_by
    };
    assert_eq!(
        by(&server),
        1_600 * S,
        "opened at 1,000 s with a 600 s deadline"
    );
    assert_eq!(server.next_progress_deadline(), Some(1_600 * S));

    // A replacement turns healthy at 1,300 s: progress, the deadline moves to 1,900 s.
    CLOCK.store(1_300 * S, std::sync::atomic::Ordering::SeqCst);
    let replacement = alloc_ids(&server)
        .into_iter()
        .find(|a| server.store.alloc(a).unwrap().deployment_id == id)
        .unwrap();
    server.client_report(&replacement, healthy());
    assert_eq!(by(&server), 1_900 * S);
    assert_eq!(server.progress_deadlines(1_899 * S), 0, "not yet");
    assert_eq!(server.store.deployment(&id).unwrap().status, "running");
    assert_eq!(server.progress_deadlines(1_901 * S), 1);
    let failed = server.store.deployment(&id).unwrap();
    assert_eq!(
        (failed.status.as_str(), failed.status_description.as_str()),
        ("failed", "Failed due to progress deadline")
    );
    assert_eq!(
        server.next_progress_deadline(),
        None,
        "a failed deployment has none"
    );
    assert_eq!(server.progress_deadlines(5_000 * S), 0, "failed once");
}
