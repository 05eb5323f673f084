//! Canaries on the server alone: an update of a group with `update { canary }` places its
//! canaries beside the running allocations, replaces none until they are promoted (by the
//! deployment itself with `auto_promote`, or by the operator), then replaces the old ones
//! `max_parallel` at a time; a deployment that fails or is superseded stops its canaries.

use crate::support::{report, settle, UPDATING};
use quiesce_core::server::structs::{AllocId, Allocation, ClientStatus, DesiredStatus};
use quiesce_core::server::{Server, ServerError};
use quiesce_core::spec::{Job, Task, TaskGroup, UpdateStrategy};

fn job(count: i64, release: &str, canary: i64, auto_promote: bool) -> Job {
    Job {
        id: "web".into(),
        job_type: "service".into(),
        task_groups: vec![TaskGroup {
            name: "web".into(),
            count: Some(count),
            tasks: vec![Task {
                name: "app".into(),
                driver: "mock_driver".into(),
                env: Some([("RELEASE".to_string(), release.to_string())].into()),
                ..Task::default()
            }],
            update: Some(UpdateStrategy {
                max_parallel: Some(1),
                canary: Some(canary),
                auto_promote: Some(auto_promote),
                auto_revert: Some(true),
                ..UpdateStrategy::default()
            }),
            ..TaskGroup::default()
        }],
        ..Job::default()
    }
}

/// Every allocation, oldest first.
fn allocs(server: &Server) -> Vec<Allocation> {
    let mut allocs: Vec<_> = server.store.allocs_by_job("web").cloned().collect();
    allocs.sort_by_key(|a| (a.create_index, a.name.clone()));
    allocs
}

fn live(server: &Server) -> Vec<Allocation> {
    allocs(server)
        .into_iter()
        .filter(|a| a.desired_status == DesiredStatus::Run && !a.client_status.is_terminal())
        .collect()
}

fn canaries(server: &Server) -> Vec<Allocation> {
    live(server)
        .into_iter()
        .filter(|a| a.deployment_status.as_ref().is_some_and(|s| s.canary))
        .collect()
}

fn healthy(server: &mut Server, ids: &[AllocId]) {
    for id in ids {
        server.client_report(id, report(ClientStatus::Running, Some(true)));
    }
    settle(server);
}

/// `count` allocations of release 1, running and healthy, the registration's deployment
/// done.
fn running(count: i64, canary: i64, auto_promote: bool) -> (Server, Vec<AllocId>) {
    let mut server = Server::new(vec!["node-0".into()], 3);
    server
        .register_job(job(count, "1", canary, auto_promote))
        .unwrap();
    settle(&mut server);
    let old: Vec<AllocId> = live(&server).iter().map(|a| a.id.clone()).collect();
    healthy(&mut server, &old);
    let first = server.store.latest_deployment("web").unwrap();
    assert_eq!(first.status, "successful");
    assert_eq!(
        first.task_groups["web"].desired_canaries, 0,
        "no canaries for a first registration"
    );
    (server, old)
}

fn stopped(server: &Server, ids: &[AllocId]) -> Vec<AllocId> {
    ids.iter()
        .filter(|id| server.store.alloc(*id).unwrap().desired_status == DesiredStatus::Stop)
        .cloned()
        .collect()
}

fn deployment_id(server: &Server) -> String {
    server.store.latest_deployment("web").unwrap().id.clone()
}

// invariant: rollout_bounded
#[test]
fn a_canary_promoted_by_itself_goes_first_and_the_old_ones_follow_one_at_a_time() {
    let (mut server, old) = running(3, 1, true);
    server.register_job(job(3, "2", 1, true)).unwrap();
    settle(&mut server);
    let deployment = server.store.latest_deployment("web").unwrap().clone();
    assert_eq!(
        deployment.status_description,
        "Deployment is running pending automatic promotion"
    );
    let [canary] = canaries(&server).try_into().unwrap();
    assert_eq!(
        (canary.name.as_str(), canary.job_version),
        ("web.web[0]", 1)
    );
    assert_eq!(
        deployment.task_groups["web"].placed_canaries,
        Some(vec![canary.id.clone()])
    );
    assert!(
        stopped(&server, &old).is_empty(),
        "an old one stopped before the promotion"
    );

    // Running is not healthy: nothing moves.
    server.client_report(&canary.id, report(ClientStatus::Running, None));
    settle(&mut server);
    assert!(stopped(&server, &old).is_empty());

    healthy(&mut server, std::slice::from_ref(&canary.id));
    let promoted = server.store.latest_deployment("web").unwrap();
    assert!(promoted.task_groups["web"].promoted);
    assert_eq!(promoted.status_description, "Deployment is running");
    let mark = server
        .store
        .alloc(&canary.id)
        .unwrap()
        .deployment_status
        .clone()
        .unwrap();
    assert_eq!((mark.canary, mark.healthy), (false, Some(true)));
    // The old one on the canary's index first, with nothing placed for it.
    assert_eq!(stopped(&server, &old), [old[0].clone()]);
    let first = server.store.alloc(&old[0]).unwrap();
    assert_eq!(first.desired_description, UPDATING);
    assert_eq!(first.next_allocation, None);
    assert_eq!(live(&server).len(), 3);

    // Then one at a time, each after the last stopped and its replacement is healthy.
    server.client_report(&old[0], report(ClientStatus::Complete, None));
    settle(&mut server);
    assert_eq!(stopped(&server, &old), old[..2]);
    for (ix, id) in old.iter().enumerate().skip(1) {
        let replacement = server
            .store
            .alloc(id)
            .unwrap()
            .next_allocation
            .clone()
            .unwrap();
        server.client_report(id, report(ClientStatus::Complete, None));
        settle(&mut server);
        assert_eq!(
            stopped(&server, &old).len(),
            ix + 1,
            "a batch went before its health"
        );
        healthy(&mut server, &[replacement]);
    }
    assert_eq!(
        server.store.latest_deployment("web").unwrap().status,
        "successful"
    );
    let now = live(&server);
    assert_eq!(now.len(), 3);
    assert!(now.iter().all(|a| a.job_version == 1));
    assert!(now.iter().any(|a| a.id == canary.id));
}

#[test]
fn more_canaries_than_count_are_all_placed_and_all_wait_for_health() {
    let (mut server, old) = running(1, 2, true);
    server.register_job(job(1, "2", 2, true)).unwrap();
    settle(&mut server);
    let placed = canaries(&server);
    let names: Vec<&str> = placed.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["web.web[0]", "web.web[1]"]);
    healthy(&mut server, &[placed[0].id.clone()]);
    assert!(!server.store.latest_deployment("web").unwrap().task_groups["web"].promoted);
    assert!(stopped(&server, &old).is_empty());
    healthy(&mut server, &[placed[1].id.clone()]);
    assert!(server.store.latest_deployment("web").unwrap().task_groups["web"].promoted);
    assert_eq!(stopped(&server, &old), old);
}

#[test]
fn an_operator_promotes_healthy_canaries_only_and_may_promote_again() {
    let (mut server, old) = running(2, 1, false);
    server.register_job(job(2, "2", 1, false)).unwrap();
    settle(&mut server);
    let id = deployment_id(&server);
    assert_eq!(
        server.store.deployment(&id).unwrap().status_description,
        "Deployment is running but requires manual promotion"
    );
    let [canary] = canaries(&server).try_into().unwrap();
    assert_eq!(
        server.promote_deployment(&id, true, &[]),
        Err(ServerError::Refused(
            "Task group \"web\" has 0/1 healthy allocations".into()
        ))
    );
    healthy(&mut server, std::slice::from_ref(&canary.id));
    assert!(
        stopped(&server, &old).is_empty(),
        "promoted without the operator"
    );
    server.promote_deployment(&id, true, &[]).unwrap();
    settle(&mut server);
    assert_eq!(stopped(&server, &old).len(), 1);
    // Promoting again is no error: the promoted canary still counts.
    server
        .promote_deployment(&id, true, &["web".into()])
        .unwrap();
}

#[test]
fn canaries_healthy_while_paused_promote_the_deployment_at_its_resume() {
    let (mut server, old) = running(1, 1, true);
    server.register_job(job(1, "2", 1, true)).unwrap();
    settle(&mut server);
    let id = deployment_id(&server);
    let [canary] = canaries(&server).try_into().unwrap();
    server.pause_deployment(&id, true).unwrap();
    healthy(&mut server, std::slice::from_ref(&canary.id));
    assert!(!server.store.deployment(&id).unwrap().task_groups["web"].promoted);
    assert!(stopped(&server, &old).is_empty());
    server.pause_deployment(&id, false).unwrap();
    settle(&mut server);
    assert!(server.store.deployment(&id).unwrap().task_groups["web"].promoted);
    assert_eq!(stopped(&server, &old), old);
}

#[test]
fn a_failed_canary_deployment_stops_its_canary_and_its_revert_needs_none() {
    let (mut server, old) = running(2, 1, true);
    server.register_job(job(2, "2", 1, true)).unwrap();
    settle(&mut server);
    let [canary] = canaries(&server).try_into().unwrap();
    let id = deployment_id(&server);
    let update = server.fail_deployment(&id).unwrap();
    assert_eq!(update.reverted_job_version, Some(0));
    settle(&mut server);
    let gone = server.store.alloc(&canary.id).unwrap();
    assert_eq!(gone.desired_status, DesiredStatus::Stop);
    assert_eq!(
        gone.desired_description,
        "alloc not needed due to job update"
    );
    assert!(
        stopped(&server, &old).is_empty(),
        "the old ones are what the revert keeps"
    );
    // The revert's version is release 1 again: the old ones move to it in place, and no
    // deployment waits for a canary (the stopped canary is not an allocation to replace).
    server.client_report(&canary.id, report(ClientStatus::Complete, None));
    settle(&mut server);
    assert_eq!(server.store.job("web").unwrap().version, 2);
    let versions: Vec<u64> = live(&server).iter().map(|a| a.job_version).collect();
    assert_eq!(versions, [2, 2]);
    let latest = server.store.latest_deployment("web").unwrap();
    assert_ne!(latest.status, "running", "a deployment hangs: {latest:?}");
}

#[test]
fn a_plan_of_a_canary_update_counts_the_canary_and_ignores_the_old_ones() {
    let (server, _) = running(3, 1, true);
    let plan = server.plan_job(job(3, "2", 1, true)).unwrap();
    let web = &plan.updates["web"];
    assert_eq!(
        (web.canary, web.place, web.destructive_update, web.ignore),
        (1, 0, 0, 3)
    );
}

const MIGRATING: &str = "alloc is being migrated";

/// The allocation that `previous` was replaced by, if any.
fn replacement_of(server: &Server, previous: &str) -> Option<Allocation> {
    allocs(server)
        .into_iter()
        .find(|a| a.previous_allocation.as_deref() == Some(previous))
}

/// Nomad's `computeStop` (`scheduler/reconciler/reconcile_cluster.go`): once the canaries
/// are promoted, an old allocation under a canary's name is not needed — the canary counts
/// in its place. Stopped by the operator then (migrating), it is not replaced; the other
/// old one is replaced at the new version, in its own index.
// invariant: rollout_bounded
#[test]
fn an_old_allocation_beside_a_promoted_canary_is_not_replaced_when_stopped() {
    let (mut server, old) = running(2, 1, true);
    server.register_job(job(2, "2", 1, true)).unwrap();
    settle(&mut server);
    let [canary] = canaries(&server).try_into().unwrap();
    assert_eq!(canary.name, "web.web[0]");
    assert_eq!(server.store.alloc(&old[0]).unwrap().name, "web.web[0]");
    // The canary's health promotes the deployment; the operator stops the old allocation
    // on its index before the evaluation that follows runs.
    server.client_report(&canary.id, report(ClientStatus::Running, Some(true)));
    server.stop_alloc(&old[0], false).unwrap();
    settle(&mut server);
    assert!(server.store.latest_deployment("web").unwrap().task_groups["web"].promoted);
    let beside = server.store.alloc(&old[0]).unwrap();
    assert_eq!(
        (beside.desired_status, beside.desired_description.as_str()),
        (DesiredStatus::Stop, MIGRATING)
    );
    assert_eq!(
        replacement_of(&server, &old[0]),
        None,
        "a duplicate on index 0"
    );
    // The other old one is the next batch, replaced in its own index.
    let other = server.store.alloc(&old[1]).unwrap();
    assert_eq!(other.desired_description, UPDATING);
    let next = replacement_of(&server, &old[1]).expect("the other old one replaced");
    assert_eq!((next.name.as_str(), next.job_version), ("web.web[1]", 1));
    let names: Vec<(String, u64)> = live(&server)
        .iter()
        .filter(|a| a.desired_status == DesiredStatus::Run)
        .map(|a| (a.name.clone(), a.job_version))
        .collect();
    assert_eq!(
        names,
        [("web.web[0]".to_string(), 1), ("web.web[1]".to_string(), 1)]
    );
}

/// Stopped while the canary waits, the old allocation on its index is replaced at its own
/// version (Nomad's `downgradeNonCanary`), under its name: beside the canary still. After
/// the promotion that one goes first, with nothing placed for it, and the other old one
/// waits for its end (the model's `beside_canary`).
// invariant: rollout_bounded
#[test]
fn an_old_allocation_replaced_beside_a_waiting_canary_goes_first_after_the_promotion() {
    let (mut server, old) = running(2, 1, true);
    server.register_job(job(2, "2", 1, true)).unwrap();
    settle(&mut server);
    let [canary] = canaries(&server).try_into().unwrap();
    server.stop_alloc(&old[0], false).unwrap();
    settle(&mut server);
    let downgraded = replacement_of(&server, &old[0]).expect("replaced while canarying");
    assert_eq!(
        (downgraded.name.as_str(), downgraded.job_version),
        ("web.web[0]", 0)
    );
    healthy(&mut server, std::slice::from_ref(&downgraded.id));
    assert!(
        stopped(&server, &old[1..]).is_empty(),
        "replaced before the promotion"
    );

    healthy(&mut server, std::slice::from_ref(&canary.id));
    let first = server.store.alloc(&downgraded.id).unwrap();
    assert_eq!(
        (first.desired_status, first.desired_description.as_str()),
        (DesiredStatus::Stop, UPDATING)
    );
    assert_eq!(replacement_of(&server, &downgraded.id), None);
    assert!(
        stopped(&server, &old[1..]).is_empty(),
        "two old allocations stopping at once"
    );
    server.client_report(&downgraded.id, report(ClientStatus::Complete, None));
    settle(&mut server);
    assert_eq!(stopped(&server, &old[1..]), &old[1..]);
    let next = replacement_of(&server, &old[1]).expect("the other old one replaced");
    assert_eq!((next.name.as_str(), next.job_version), ("web.web[1]", 1));
}

/// Nomad's `isDeploymentComplete` wants nothing left to migrate: a replacement the operator
/// stops, even healthy, is replaced within the deployment, which succeeds only once that
/// one is healthy (the model's `roll_out` is done only with every place filled).
#[test]
fn a_migrated_replacement_is_replaced_within_the_running_deployment() {
    let (mut server, old) = running(2, 1, true);
    server.register_job(job(2, "2", 1, true)).unwrap();
    settle(&mut server);
    let [canary] = canaries(&server).try_into().unwrap();
    healthy(&mut server, std::slice::from_ref(&canary.id));
    server.client_report(&old[0], report(ClientStatus::Complete, None));
    settle(&mut server);
    let second = replacement_of(&server, &old[1]).expect("the second batch");
    server.client_report(&old[1], report(ClientStatus::Complete, None));
    // Healthy, then stopped by the operator before the evaluation its health asked for.
    server.client_report(&second.id, report(ClientStatus::Running, Some(true)));
    server.stop_alloc(&second.id, false).unwrap();
    settle(&mut server);
    let deployment = server.store.latest_deployment("web").unwrap().clone();
    assert_eq!(deployment.status, "running", "done with a migration left");
    let third = replacement_of(&server, &second.id).expect("the stopped one replaced");
    assert_eq!(third.deployment_id, deployment.id);
    assert_eq!(third.name, "web.web[1]");
    healthy(&mut server, std::slice::from_ref(&third.id));
    assert_eq!(
        server.store.latest_deployment("web").unwrap().status,
        "successful"
    );
}

/// The live allocation on `name` that is not a canary.
fn beside(server: &Server, name: &str) -> Allocation {
    live(server)
        .into_iter()
        .find(|a| a.name == name && !a.deployment_status.as_ref().is_some_and(|s| s.canary))
        .unwrap_or_else(|| panic!("no allocation on {name} beside the canaries"))
}

/// An old allocation that fails while the canary waits is placed again at the stable
/// version (Nomad's `downgradeNonCanary`), on its index: beside the canary, which it was
/// before. After the promotion it goes first, with nothing placed for it (the model's part
/// `canary-with-older-failed`).
// invariant: rollout_bounded
#[test]
fn an_old_allocation_that_fails_beside_a_waiting_canary_comes_back_at_the_stable_version() {
    let (mut server, old) = running(2, 1, true);
    server.register_job(job(2, "2", 1, true)).unwrap();
    settle(&mut server);
    let [canary] = canaries(&server).try_into().unwrap();
    assert_eq!(canary.name, "web.web[0]");
    server.client_report(&old[0], report(ClientStatus::Failed, None));
    // The failure asks for no evaluation (no rescheduling): the next one places it.
    server.stop_alloc(&old[1], false).unwrap();
    settle(&mut server);
    let again = beside(&server, "web.web[0]");
    assert_eq!(again.job_version, 0, "placed at the canary's version");
    assert_eq!(again.deployment_id, deployment_id(&server));
    assert_eq!(beside(&server, "web.web[1]").job_version, 0);
    assert_eq!(canaries(&server).len(), 1);

    let others: Vec<AllocId> = live(&server)
        .iter()
        .filter(|a| a.id != canary.id)
        .map(|a| a.id.clone())
        .collect();
    healthy(&mut server, &others);
    healthy(&mut server, std::slice::from_ref(&canary.id));
    let first = server.store.alloc(&again.id).unwrap();
    assert_eq!(
        (first.desired_status, first.desired_description.as_str()),
        (DesiredStatus::Stop, UPDATING)
    );
    assert_eq!(replacement_of(&server, &again.id), None);
}

/// The stable version is the newest deployment's that was promoted or placed no canaries,
/// not merely the one before: an update whose canaries were never promoted is skipped.
#[test]
fn the_stable_version_skips_an_update_whose_canaries_were_not_promoted() {
    let (mut server, old) = running(1, 1, true);
    server.register_job(job(1, "2", 1, true)).unwrap();
    settle(&mut server);
    // Superseded before its canary was promoted.
    server.register_job(job(1, "3", 1, true)).unwrap();
    settle(&mut server);
    let versions: Vec<u64> = canaries(&server).iter().map(|a| a.job_version).collect();
    assert_eq!(versions, [2]);
    server.client_report(&old[0], report(ClientStatus::Failed, None));
    let [canary] = canaries(&server).try_into().unwrap();
    server.stop_alloc(&canary.id, false).unwrap();
    settle(&mut server);
    assert_eq!(beside(&server, "web.web[0]").job_version, 0);

    // Version 3's canaries promoted and rolled out: an update after it falls back to 3.
    let (mut server, _) = running(1, 1, true);
    server.register_job(job(1, "2", 1, true)).unwrap();
    settle(&mut server);
    let [canary] = canaries(&server).try_into().unwrap();
    healthy(&mut server, std::slice::from_ref(&canary.id));
    let old = server
        .store
        .allocs_by_job("web")
        .find(|a| a.job_version == 0)
        .unwrap()
        .id
        .clone();
    server.client_report(&old, report(ClientStatus::Complete, None));
    settle(&mut server);
    assert_eq!(
        server.store.latest_deployment("web").unwrap().status,
        "successful"
    );
    server.register_job(job(1, "3", 1, true)).unwrap();
    settle(&mut server);
    let [canary] = canaries(&server).try_into().unwrap();
    let promoted = beside(&server, "web.web[0]");
    assert_eq!(promoted.job_version, 1);
    server.client_report(&promoted.id, report(ClientStatus::Failed, None));
    server.stop_alloc(&canary.id, false).unwrap();
    settle(&mut server);
    assert_eq!(beside(&server, "web.web[0]").job_version, 1);
}

/// A replacement at the stable version belongs to the running deployment: failing before
/// it is healthy, it fails that deployment, whose canary is then stopped (the model's
/// `downgraded`).
#[test]
fn a_stable_replacement_that_fails_fails_the_canaries_deployment() {
    let (mut server, old) = running(1, 1, true);
    server.register_job(job(1, "2", 1, true)).unwrap();
    settle(&mut server);
    let [canary] = canaries(&server).try_into().unwrap();
    server.stop_alloc(&old[0], false).unwrap();
    settle(&mut server);
    let again = beside(&server, "web.web[0]");
    assert_eq!(again.job_version, 0);
    server.client_report(&again.id, report(ClientStatus::Failed, None));
    settle(&mut server);
    let deployment = server.store.latest_deployment("web").unwrap();
    assert_eq!(deployment.status, "failed");
    assert_eq!(
        server.store.alloc(&canary.id).unwrap().desired_status,
        DesiredStatus::Stop
    );
}
