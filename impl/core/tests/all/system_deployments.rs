//! A system job's deployments on the server alone, as Nomad 1.11's system scheduler has
//! them: `max_parallel` is per group, so on the one node each group's one allocation is
//! replaced at once, all groups together, and the deployment watches their health; a
//! `canary` (a percentage) takes the place of the allocation it updates, which is stopped
//! for it, and the deployment waits for a promotion; an unhealthy canary fails it and
//! `auto_revert` goes back.

use crate::support::{report, settle, UPDATING};
use quiesce_core::server::structs::{AllocId, Allocation, ClientStatus, DesiredStatus};
use quiesce_core::server::Server;
use quiesce_core::spec::{Job, Task, TaskGroup, UpdateStrategy};

fn group(name: &str, release: &str, update: Option<UpdateStrategy>) -> TaskGroup {
    TaskGroup {
        name: name.into(),
        count: Some(1),
        tasks: vec![Task {
            name: "app".into(),
            driver: "mock_driver".into(),
            env: Some([("RELEASE".to_string(), release.to_string())].into()),
            ..Task::default()
        }],
        update,
        ..TaskGroup::default()
    }
}

/// A system job of groups `a` and `b`, `b` with `update` of its own (the job's otherwise:
/// none, so Nomad's defaults).
fn job(release: &str, update_b: Option<UpdateStrategy>) -> Job {
    Job {
        id: "agents".into(),
        job_type: "system".into(),
        task_groups: vec![group("a", release, None), group("b", release, update_b)],
        ..Job::default()
    }
}

fn canary(percent: i64, auto_promote: bool) -> Option<UpdateStrategy> {
    Some(UpdateStrategy {
        canary: Some(percent),
        auto_promote: Some(auto_promote),
        auto_revert: Some(true),
        ..UpdateStrategy::default()
    })
}

fn live(server: &Server) -> Vec<Allocation> {
    let mut allocs: Vec<_> = server
        .store
        .allocs_by_job("agents")
        .filter(|a| a.desired_status == DesiredStatus::Run && !a.client_status.is_terminal())
        .cloned()
        .collect();
    allocs.sort_by_key(|a| a.name.clone());
    allocs
}

fn health(server: &mut Server, ids: &[AllocId], healthy: bool) {
    for id in ids {
        server.client_report(id, report(ClientStatus::Running, Some(healthy)));
    }
    settle(server);
}

/// The clients finished stopping `ids` (their tasks were signalled after their delays).
fn stopped(server: &mut Server, ids: &[AllocId]) {
    for id in ids {
        server.client_report(id, report(ClientStatus::Complete, None));
    }
    settle(server);
}

fn ids(allocs: &[Allocation]) -> Vec<AllocId> {
    allocs.iter().map(|a| a.id.clone()).collect()
}

fn deployment_status(server: &Server) -> (u64, String, String) {
    let d = server.store.latest_deployment("agents").unwrap();
    (
        d.job_version,
        d.status.clone(),
        d.status_description.clone(),
    )
}

/// Version 0 placed and healthy, its deployment done.
fn running(update_b: Option<UpdateStrategy>) -> (Server, Vec<AllocId>) {
    let mut server = Server::new(vec!["node-0".into()], 3);
    server.register_job(job("1", update_b)).unwrap();
    settle(&mut server);
    let old = ids(&live(&server));
    assert_eq!(old.len(), 2, "one allocation per group on the one node");
    let first = server.store.latest_deployment("agents").unwrap();
    assert_eq!(
        (first.task_groups["a"].desired_total, first.status.as_str()),
        (1, "running"),
        "a first registration is watched too"
    );
    health(&mut server, &old, true);
    assert_eq!(deployment_status(&server).1, "successful");
    (server, old)
}

fn stop_description(server: &Server, id: &str) -> (DesiredStatus, String) {
    let alloc = server.store.alloc(id).unwrap();
    (alloc.desired_status, alloc.desired_description.clone())
}

// invariant: rollout_bounded
#[test]
fn an_update_replaces_each_groups_one_allocation_together_and_the_deployment_waits_for_health() {
    let (mut server, old) = running(None);
    server.register_job(job("2", None)).unwrap();
    settle(&mut server);
    // max_parallel = 1 is per group: both groups' allocations go in the one plan.
    for id in &old {
        assert_eq!(
            stop_description(&server, id),
            (DesiredStatus::Stop, UPDATING.into())
        );
    }
    let new = live(&server);
    assert_eq!(
        new.iter()
            .map(|a| (a.name.as_str(), a.job_version))
            .collect::<Vec<_>>(),
        [("agents.a[0]", 1), ("agents.b[0]", 1)]
    );
    let previous: Vec<_> = new
        .iter()
        .map(|a| a.previous_allocation.clone().unwrap())
        .collect();
    assert_eq!(previous, old);
    assert_eq!(deployment_status(&server).1, "running");
    health(&mut server, &ids(&new[..1]), true);
    assert_eq!(
        deployment_status(&server).1,
        "running",
        "b is not healthy yet"
    );
    health(&mut server, &ids(&new[1..]), true);
    assert_eq!(
        deployment_status(&server).1,
        "running",
        "the old ones are still being stopped"
    );
    stopped(&mut server, &old);
    assert_eq!(
        deployment_status(&server),
        (
            1,
            "successful".into(),
            "Deployment completed successfully".into()
        )
    );
    assert!(server.store.job("agents").unwrap().stable);
}

#[test]
fn a_canary_takes_its_allocations_place_and_waits_for_the_promotion() {
    let (mut server, old) = running(canary(50, false));
    server.register_job(job("2", canary(50, false))).unwrap();
    settle(&mut server);
    // Group a (no canary) is replaced; group b's allocation is stopped for its canary.
    for id in &old {
        assert_eq!(
            stop_description(&server, id),
            (DesiredStatus::Stop, UPDATING.into())
        );
    }
    let new = live(&server);
    let [a, b] = new.as_slice() else {
        panic!("{new:?}")
    };
    let mark = |alloc: &Allocation| alloc.deployment_status.as_ref().is_some_and(|s| s.canary);
    assert!(!mark(a) && mark(b), "only b canaries");
    assert_eq!(
        (b.name.as_str(), b.previous_allocation.as_deref()),
        ("agents.b[0]", Some(old[1].as_str()))
    );
    let deployment = server.store.latest_deployment("agents").unwrap().clone();
    assert_eq!(deployment.task_groups["b"].desired_canaries, 1);
    assert_eq!(
        deployment.status_description,
        "Deployment is running but requires manual promotion"
    );
    health(&mut server, &ids(&new), true);
    assert_eq!(
        live(&server).len(),
        2,
        "nothing more is placed while the canary waits"
    );
    assert_eq!(deployment_status(&server).1, "running", "not promoted");

    stopped(&mut server, &old);
    assert_eq!(deployment_status(&server).1, "running", "not promoted");
    server
        .promote_deployment(&deployment.id, true, &[])
        .unwrap();
    settle(&mut server);
    assert_eq!(ids(&live(&server)), ids(&new), "the canary stays, promoted");
    assert!(!mark(&server.store.alloc(&b.id).unwrap().clone()));
    assert_eq!(deployment_status(&server).1, "successful");
}

#[test]
fn a_canary_promotes_itself_once_healthy() {
    let (mut server, old) = running(canary(100, true));
    server.register_job(job("2", canary(100, true))).unwrap();
    settle(&mut server);
    let new = ids(&live(&server));
    stopped(&mut server, &old);
    health(&mut server, &new, true);
    let deployment = server.store.latest_deployment("agents").unwrap();
    assert!(deployment.task_groups["b"].promoted);
    assert_eq!(deployment.status, "successful");
    assert_eq!(ids(&live(&server)), new);
}

#[test]
fn an_unhealthy_canary_fails_the_deployment_and_auto_revert_replaces_it() {
    let (mut server, old) = running(canary(50, false));
    server.register_job(job("2", canary(50, false))).unwrap();
    settle(&mut server);
    stopped(&mut server, &old);
    let b = live(&server)[1].clone();
    health(&mut server, std::slice::from_ref(&b.id), false);
    let failed = server
        .store
        .deployments_of_job("agents")
        .find(|d| d.job_version == 1)
        .unwrap()
        .clone();
    assert_eq!(failed.status, "failed");
    // Version 2 is version 0's spec again: the failed canary is replaced by it, through
    // the stop path, as an allocation like any other (by a canary: version 2 asks for one).
    let job = server.store.job("agents").unwrap().clone();
    assert_eq!(job.version, 2);
    settle(&mut server);
    assert_eq!(stop_description(&server, &b.id).0, DesiredStatus::Stop);
    let b_now = live(&server)
        .into_iter()
        .find(|a| a.task_group == "b")
        .unwrap();
    assert_eq!(b_now.job_version, 2);
    assert_eq!(b_now.previous_allocation.as_deref(), Some(b.id.as_str()));
}

#[test]
fn a_system_group_of_more_than_one_is_refused_by_name() {
    let mut three = job("1", None);
    three.task_groups[1].count = Some(3);
    let errors = three.validate().expect_err("count 3 of a system job");
    assert!(
        errors
            .to_string()
            .contains("Job task group b has count 3. Count cannot exceed 1 with system scheduler"),
        "{errors}"
    );
}

#[test]
fn an_alloc_stop_of_a_waiting_canary_places_a_new_canary_in_its_place() {
    let (mut server, old) = running(canary(50, false));
    server.register_job(job("2", canary(50, false))).unwrap();
    settle(&mut server);
    stopped(&mut server, &old);
    let first = live(&server)[1].clone();
    server.stop_alloc(&first.id, false).unwrap();
    settle(&mut server);
    let [_, second] = live(&server).try_into().unwrap();
    assert_ne!(second.id, first.id);
    assert!(second.deployment_status.as_ref().is_some_and(|s| s.canary));
    assert_eq!(
        (second.name.as_str(), second.job_version),
        ("agents.b[0]", 1)
    );
    let deployment = server.store.latest_deployment("agents").unwrap();
    assert_eq!(deployment.status, "running");
    assert!(!deployment.task_groups["b"].promoted);
}

#[test]
fn an_alloc_stop_of_the_old_allocation_before_its_canary_is_placed_gives_its_place_to_one() {
    // Version 0 placed but not yet healthy: the update's canary waits for it (the last
    // batch is not done), and an alloc stop of it hands its place to the canary, not to an
    // allocation of its own version.
    let mut server = Server::new(vec!["node-0".into()], 3);
    server.register_job(job("1", canary(50, false))).unwrap();
    settle(&mut server);
    let old = ids(&live(&server));
    server.register_job(job("2", canary(50, false))).unwrap();
    settle(&mut server);
    assert_eq!(
        ids(&live(&server)),
        old,
        "b's canary waits for the first batch"
    );
    server.stop_alloc(&old[1], false).unwrap();
    settle(&mut server);
    let b = live(&server)
        .into_iter()
        .find(|a| a.task_group == "b")
        .unwrap();
    assert!(b.deployment_status.as_ref().is_some_and(|s| s.canary));
    assert_eq!(b.job_version, 1);
}

/// The deployment is never done before its promotion: the canary's place is kept for a
/// canary whatever happens to the one that had it.
fn promotion_still_wanted(server: &mut Server) {
    let deployment = server.store.latest_deployment("agents").unwrap().clone();
    assert_eq!(deployment.status, "running", "{deployment:?}");
    assert!(!deployment.task_groups["b"].promoted);
    let b = live(server)
        .into_iter()
        .find(|a| a.task_group == "b")
        .expect("b's place is filled");
    assert!(
        b.deployment_status.as_ref().is_some_and(|s| s.canary),
        "b's place went to a plain allocation of the new version"
    );
    health(server, &ids(&live(server)), true);
    assert_eq!(deployment_status(server).1, "running", "done unpromoted");
    server
        .promote_deployment(&deployment.id, true, &[])
        .unwrap();
    settle(server);
    assert_eq!(deployment_status(server).1, "successful");
}

#[test]
fn a_canary_stopped_while_the_deployment_is_paused_is_replaced_by_a_canary() {
    let (mut server, old) = running(canary(50, false));
    server.register_job(job("2", canary(50, false))).unwrap();
    settle(&mut server);
    stopped(&mut server, &old);
    let deployment = server.store.latest_deployment("agents").unwrap().id.clone();
    server.pause_deployment(&deployment, true).unwrap();
    settle(&mut server);
    let first = live(&server)[1].clone();
    server.stop_alloc(&first.id, false).unwrap();
    settle(&mut server);
    stopped(&mut server, std::slice::from_ref(&first.id));
    server.pause_deployment(&deployment, false).unwrap();
    settle(&mut server);
    promotion_still_wanted(&mut server);
}

#[test]
fn a_canary_that_must_wait_for_its_allocations_port_still_comes_as_a_canary() {
    use quiesce_core::spec::{Network, Port};
    let with_port = |mut job: Job| {
        job.task_groups[1].networks = Some(vec![Network {
            reserved_ports: Some(vec![Port {
                label: "admin".into(),
                value: 28000,
                ..Port::default()
            }]),
            ..Network::default()
        }]);
        job
    };
    let mut server = Server::new(vec!["node-0".into()], 3);
    server
        .register_job(with_port(job("1", canary(100, false))))
        .unwrap();
    settle(&mut server);
    let old = ids(&live(&server));
    health(&mut server, &old, true);
    server
        .register_job(with_port(job("2", canary(100, false))))
        .unwrap();
    settle(&mut server);
    // The old b holds port 28000 until its client has stopped it: the canary waits.
    assert_eq!(
        stop_description(&server, &old[1]),
        (DesiredStatus::Stop, UPDATING.into())
    );
    stopped(&mut server, &old);
    promotion_still_wanted(&mut server);
}

#[test]
fn a_group_no_node_can_run_opens_no_deployment() {
    use quiesce_core::spec::Constraint;
    let mut elsewhere = job("1", None);
    for group in &mut elsewhere.task_groups {
        group.constraints = Some(vec![Constraint {
            l_target: "${node.class}".into(),
            r_target: "gpu".into(),
            operand: "=".into(),
        }]);
    }
    let mut server = Server::new(vec!["node-0".into()], 3);
    server.register_job(elsewhere).unwrap();
    settle(&mut server);
    assert!(live(&server).is_empty());
    assert!(
        server.store.latest_deployment("agents").is_none(),
        "a deployment that could only fail at its progress deadline"
    );
}
