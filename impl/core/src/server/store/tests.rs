//! The store's reads and its durable copy's side: restore, the write journal, services,
//! nodes, the version limit — what the daemon reads and the simulator does not.

use super::*;
use crate::server::structs::{ClientStatus, Node};
use crate::server::{ClientReport, Server};
use crate::spec::{Task, TaskGroup};

fn job(id: &str, count: i64) -> Job {
    Job {
        id: id.into(),
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

fn node(id: &str) -> Node {
    Node {
        id: id.into(),
        name: id.into(),
        datacenter: "dc1".into(),
        node_pool: "default".into(),
        status: "ready".into(),
        ..Node::default()
    }
}

/// A server with node `n1`, job `web` (two allocations) placed, and a service of each
/// allocation registered.
fn server() -> (Server, Vec<AllocId>) {
    let mut server = Server::new(Vec::new(), 3);
    server.upsert_node(node("n1"));
    server.register_job(job("web", 2)).unwrap();
    while server.process_next_eval().unwrap().is_some() {}
    let mut ids: Vec<AllocId> = server.store.allocs().map(|a| a.id.clone()).collect();
    ids.sort();
    for id in &ids {
        server.register_services(id, "app", &["api".into()]);
    }
    (server, ids)
}

/// The tables of `store`, as the daemon's durable copy holds them.
fn tables(store: &StateStore) -> Tables {
    Tables {
        jobs: store
            .jobs
            .keys()
            .map(|id| (id.clone(), store.job_versions_owned(id).unwrap().clone()))
            .collect(),
        allocs: store.allocs().cloned().collect(),
        evals: store.evals().cloned().collect(),
        services: store.services().cloned().collect(),
        deployments: store.deployments().cloned().collect(),
        nodes: store.nodes().cloned().collect(),
        scaling_events: store.scaling_events.values().cloned().collect(),
    }
}

#[test]
fn a_restored_store_holds_what_was_stored_and_journals_only_later_writes() {
    let (server, ids) = server();
    let stored = &server.store;
    let mut restored = StateStore::restore(stored.index(), tables(stored), stored.table_indexes());
    assert_eq!(restored.index(), stored.index());
    assert_eq!(restored.table_indexes(), stored.table_indexes());
    assert_eq!(restored.job_versions("web"), stored.job_versions("web"));
    assert_eq!(restored.allocs().count(), 2);
    assert_eq!(restored.evals().count(), stored.evals().count());
    assert_eq!(restored.node("n1"), stored.node("n1"));
    let service = format!("_nomad-task-{}-app-api", ids[0]);
    assert_eq!(restored.service(&service), stored.service(&service));
    assert!(
        restored.drain_written().is_empty(),
        "a restore writes nothing"
    );
    restored.put_node(node("n2"));
    assert_eq!(
        restored.drain_written(),
        BTreeSet::from([Record::Node("n2".into())])
    );
    assert!(restored.drain_written().is_empty(), "drained");
}

/// A store that was not restored (the simulator's) keeps no journal of its writes.
#[test]
fn a_new_store_journals_nothing() {
    let mut store = StateStore::default();
    store.put_node(node("n1"));
    assert!(store.drain_written().is_empty());
}

#[test]
fn services_and_nodes_are_read_as_stored() {
    let (server, ids) = server();
    let store = &server.store;
    let service = |alloc: &str| format!("_nomad-task-{alloc}-app-api");
    assert!(store.has_service(&service(&ids[0])));
    assert!(!store.has_service("_nomad-task-none-app-api"));
    assert_eq!(store.service(&service(&ids[1])).unwrap().alloc_id, ids[1]);
    assert_eq!(store.services().count(), 2);
    let of_first: Vec<&str> = store
        .services_of_alloc(&ids[0])
        .map(|s| s.id.as_str())
        .collect();
    assert_eq!(of_first, [service(&ids[0])]);
    assert_eq!(
        store.nodes().map(|n| n.id.as_str()).collect::<Vec<_>>(),
        ["n1"]
    );
    assert!(store.node("n2").is_none());
}

/// Nomad's `job_max_versions`: the oldest go first, and at least one is kept.
#[test]
fn a_limit_keeps_the_newest_versions_of_each_job() {
    let mut server = Server::new(Vec::new(), 3);
    server.store.limit_job_versions(2);
    for count in 1..=4 {
        server.register_job(job("web", count)).unwrap();
    }
    let versions: Vec<u64> = server
        .store
        .job_versions("web")
        .unwrap()
        .iter()
        .map(|v| v.version)
        .collect();
    assert_eq!(versions, [2, 3]);
    server.store.limit_job_versions(0);
    server.register_job(job("web", 5)).unwrap();
    assert_eq!(server.store.job_versions("web").unwrap().len(), 1);
}

fn status(server: &Server, id: &str) -> &'static str {
    server.store.job_status(server.store.job(id).unwrap())
}

/// A job stopped before anything of it was placed is `dead`, not `pending`; a purged
/// job's counts go with it, so the same ID registered again reads `pending` until placed.
#[test]
fn a_stopped_job_is_dead_and_a_purged_one_leaves_no_status_behind() {
    use crate::server::StopJobOptions;
    let mut server = Server::new(Vec::new(), 3);
    server.register_job(job("blocked", 1)).unwrap();
    while server.process_next_eval().unwrap().is_some() {}
    assert_eq!(
        status(&server, "blocked"),
        "pending",
        "no node: nothing placed"
    );
    server
        .stop_job("blocked", StopJobOptions::default())
        .unwrap();
    assert_eq!(status(&server, "blocked"), "dead");

    server.upsert_node(node("n1"));
    server.register_job(job("web", 1)).unwrap();
    while server.process_next_eval().unwrap().is_some() {}
    assert_eq!(status(&server, "web"), "running");
    let id = server.store.allocs_by_job("web").next().unwrap().id.clone();
    let done = ClientReport {
        client_status: ClientStatus::Complete,
        client_description: String::new(),
        task_states: Default::default(),
        deployment_status: None,
    };
    server.client_report(&id, done);
    let purge = StopJobOptions {
        purge: true,
        ..StopJobOptions::default()
    };
    server.stop_job("web", purge).unwrap();
    while server.process_next_eval().unwrap().is_some() {}
    assert!(server.store.job("web").is_none(), "purged");
    server.register_job(job("web", 1)).unwrap();
    assert_eq!(
        status(&server, "web"),
        "pending",
        "registered again, not yet placed"
    );
}
