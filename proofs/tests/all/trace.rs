//! Trace validation of simulator runs in "run until quiet" mode — of the model's own job and
//! of jobs that are no model part's (other names, counts, several groups, several jobs in one
//! log) — and tampered logs caught at the right step, by the model or by the effect rules.

use quiesce_core::server::structs::AllocId;
use quiesce_core::sim::Simulator;
use quiesce_core::spec::{Job, Lifecycle, Service, Task, TaskGroup};
use quiesce_core::step::log::LogEntry;
use quiesce_core::step::{Effect, Step};
use quiesce_model::config;
use quiesce_proofs::lockstep::initial_sim;
use quiesce_proofs::trace::{parse_log, validate, Judged, TraceError};

const SECOND: i64 = 1_000_000_000;

/// The standard part's job, run through `requests`, each followed by running until quiet.
fn log_of(requests: impl Fn(&[AllocId]) -> Vec<Step>) -> Vec<LogEntry> {
    let part = config::standard().remove(0);
    let (mut sim, ids) = initial_sim(&part).unwrap();
    for step in requests(&ids) {
        sim.apply(&step).unwrap();
        sim.run_until_quiet(100_000).unwrap();
    }
    parse_log(&sim.log().to_json_lines()).unwrap()
}

fn stop(job: &str, purge: bool, flag: bool) -> Step {
    Step::StopJob {
        job: job.into(),
        purge,
        no_shutdown_delay: flag,
    }
}

fn service(name: &str) -> Option<Vec<Service>> {
    Some(vec![Service {
        name: name.into(),
        provider: "nomad".into(),
        ..Service::default()
    }])
}

fn task(name: &str, delay_s: i64, services: Option<Vec<Service>>) -> Task {
    Task {
        name: name.into(),
        driver: "mock_driver".into(),
        shutdown_delay_ns: delay_s * SECOND,
        services,
        ..Task::default()
    }
}

/// A job that is no model part's: `api` with a group `front` of three (a leader with a delay
/// and a service, a sidecar, a poststop task) and a group `back` of two (one task).
fn api_job() -> Job {
    let mut leader = task("server", 5, service("api-server"));
    leader.leader = true;
    let mut sidecar = task("envoy", 2, None);
    sidecar.lifecycle = Some(Lifecycle {
        hook: "prestart".into(),
        sidecar: true,
    });
    let mut cleanup = task("cleanup", 0, None);
    cleanup.lifecycle = Some(Lifecycle {
        hook: "poststop".into(),
        sidecar: false,
    });
    cleanup.config = Some([("run_for".to_string(), serde_json::json!(SECOND))].into());
    Job {
        id: "api".into(),
        task_groups: vec![
            TaskGroup {
                name: "front".into(),
                count: Some(3),
                shutdown_delay_ns: Some(10 * SECOND),
                services: service("api-front"),
                tasks: vec![leader, sidecar, cleanup],
                ..TaskGroup::default()
            },
            TaskGroup {
                name: "back".into(),
                count: Some(2),
                shutdown_delay_ns: None,
                services: None,
                tasks: vec![task("worker", 1, service("api-worker"))],
                ..TaskGroup::default()
            },
        ],
        ..Job::default()
    }
}

/// A simulator running `jobs`, then taking `requests` (each given the allocation IDs so
/// far), each followed by running until quiet; its log.
fn run(jobs: Vec<Job>, requests: impl Fn(&Simulator) -> Vec<Step>) -> Vec<LogEntry> {
    let mut sim = Simulator::new(1, 7);
    for job in jobs {
        sim.register(job).unwrap();
        sim.run_until_quiet(100_000).unwrap();
    }
    for step in requests(&sim) {
        sim.apply(&step).unwrap();
        sim.run_until_quiet(100_000).unwrap();
    }
    parse_log(&sim.log().to_json_lines()).unwrap()
}

fn allocs_of(sim: &Simulator, job: &str, group: &str) -> Vec<AllocId> {
    let mut allocs: Vec<_> = sim
        .server
        .store
        .allocs_by_job(job)
        .filter(|a| a.task_group == group)
        .map(|a| a.id.clone())
        .collect();
    allocs.sort();
    allocs
}

#[test]
fn simulator_logs_of_the_models_job_validate_in_full() {
    let runs: Vec<Vec<LogEntry>> = vec![
        log_of(|_| vec![stop("web", false, true)]),
        log_of(|_| {
            vec![
                stop("web", false, false),
                Step::StartJob { job: "web".into() },
                stop("web", false, true),
            ]
        }),
        log_of(|ids| {
            vec![
                Step::StopAlloc {
                    alloc: ids[1].clone(),
                    no_shutdown_delay: true,
                },
                stop("web", true, true),
            ]
        }),
        log_of(|ids| {
            vec![
                Step::StopAlloc {
                    alloc: ids[0].clone(),
                    no_shutdown_delay: false,
                },
                Step::ClientRestart,
            ]
        }),
    ];
    for log in runs {
        let report = validate(&log).unwrap_or_else(|e| panic!("{e}"));
        assert!(report.fully_judged(), "{:?}", report.parts);
        assert_eq!(report.parts.len(), 1);
        // Every entry but the registration is a step the model replayed, the start-up too.
        assert_eq!(report.replayed(), log.len() - 1, "{report:?}");
        assert!(report.effects > 10, "{report:?}");
    }
}

/// Two jobs that are no model part's, in one log: other names, counts three and two, two
/// groups, a poststop task; an alloc stop with the flag, a job stop without, a purge with.
#[test]
fn a_log_of_several_jobs_that_are_no_model_part_validates_in_full() {
    let mut other = api_job();
    other.id = "batch".into();
    other.task_groups.truncate(1);
    let log = run(vec![api_job(), other], |sim| {
        vec![
            Step::StopAlloc {
                alloc: allocs_of(sim, "api", "front")[1].clone(),
                no_shutdown_delay: true,
            },
            stop("api", false, false),
            stop("batch", true, true),
            Step::StartJob { job: "api".into() },
        ]
    });
    let report = validate(&log).unwrap_or_else(|e| panic!("{e}"));
    assert!(report.fully_judged(), "{:?}", report.parts);
    let parts: Vec<(&str, &str, usize)> = report
        .parts
        .iter()
        .map(|p| (p.job.as_str(), p.group.as_str(), p.allocs))
        .collect();
    // api/front: 3 placed, 1 replacement for the stopped one, 3 placed by the start.
    assert_eq!(
        parts,
        [
            ("api", "front", 7),
            ("api", "back", 4),
            ("batch", "front", 3)
        ]
    );
}

fn expect_refused(log: &[LogEntry], seq: u64, wanted: &str) -> TraceError {
    let error = validate(log).unwrap_err();
    assert_eq!(error.seq, seq, "{error}");
    assert!(error.why.contains(wanted), "{error}");
    error
}

/// The position of the first entry whose step is `name` and whose effects satisfy `has`.
fn find(log: &[LogEntry], name: &str, has: impl Fn(&[Effect]) -> bool) -> usize {
    log.iter()
        .position(|e| e.name() == name && has(&e.effects))
        .unwrap_or_else(|| panic!("no {name}"))
}

fn signal(effects: &[Effect]) -> bool {
    effects.iter().any(|e| matches!(e, Effect::Signal { .. }))
}

#[test]
fn a_tampered_log_fails_at_the_first_step_the_model_forbids() {
    let mut log = log_of(|_| vec![stop("web", false, false)]);
    // Drop the first GroupPreKill: the leader's kill can then not begin.
    let dropped = find(&log, "GroupPreKill", |_| true);
    let alloc = log[dropped].as_step().unwrap().alloc().cloned();
    log.remove(dropped);
    let error = validate(&log).unwrap_err();
    let failed = log.iter().find(|e| e.seq == error.seq).unwrap();
    assert_eq!(failed.as_step().unwrap().alloc().cloned(), alloc);
    assert_eq!(failed.name(), "GroupDelayElapsed", "{error}");
}

/// A second kill signal for the same kill — what a restarted agent sent before its
/// supervisor refused repeats — is refused, wherever the log puts it.
#[test]
fn a_task_signalled_twice_is_refused() {
    let mut log = log_of(|_| vec![stop("web", false, true)]);
    let signalled = find(&log, "TaskPreKill", signal);
    let effect = log[signalled]
        .effects
        .iter()
        .find(|e| matches!(e, Effect::Signal { .. }))
        .unwrap()
        .clone();
    let Effect::Signal { task, .. } = &effect else {
        unreachable!()
    };
    let alloc = log[signalled].as_step().unwrap().alloc().cloned();
    let exit = log
        .iter()
        .position(|e| {
            matches!(e.as_step(), Some(Step::TaskExit { alloc: a, task: t }) if Some(a) == alloc.as_ref() && **t == **task)
        })
        .unwrap();
    log[exit].effects.push(effect);
    let seq = log[exit].seq;
    expect_refused(&log, seq, "again for kill 1");
}

// invariant: prestop_hooks_always_run
/// A kill signal before the task's services are deregistered is refused: by the rules
/// (services still registered) when the deregistration is missing.
#[test]
fn a_signal_before_the_deregistration_is_refused() {
    let mut log = log_of(|_| vec![stop("web", false, true)]);
    let signalled = find(&log, "TaskPreKill", |effects| {
        signal(effects)
            && effects
                .iter()
                .any(|e| matches!(e, Effect::Deregister { .. }))
    });
    log[signalled]
        .effects
        .retain(|e| !matches!(e, Effect::Deregister { .. }));
    let seq = log[signalled].seq;
    expect_refused(&log, seq, "still registered");
}

// invariant: kill_timeout_respected
/// SIGKILL anywhere but in its task's kill timeout is refused.
#[test]
fn a_sigkill_outside_the_kill_timeout_is_refused() {
    let mut log = log_of(|_| vec![stop("web", false, true)]);
    let signalled = find(&log, "TaskPreKill", signal);
    let Some(Effect::Signal { task, kill, .. }) = log[signalled]
        .effects
        .iter()
        .find(|e| matches!(e, Effect::Signal { .. }))
        .cloned()
    else {
        unreachable!()
    };
    log[signalled].effects.push(Effect::SigKill { task, kill });
    let seq = log[signalled].seq;
    expect_refused(&log, seq, "not by its kill timeout");
}

// invariant: kill_timeout_respected
/// A SIGKILL logged sooner than its kill timeout after the kill signal is refused, by the
/// entries' times: what the agent's stale timer (fixed in c4fedda) did, and the model,
/// which has no clock, cannot see. A task that ignores its signal, a 3 s kill timeout: the
/// log as written validates; with its KillTimeout moved a second earlier, it is refused.
#[test]
fn a_sigkill_before_its_kill_timeout_has_run_is_refused() {
    let mut stubborn = task("server", 0, None);
    stubborn.kill_timeout_ns = Some(3 * SECOND);
    stubborn.config = Some([("ignore_signal".to_string(), serde_json::json!(true))].into());
    let job = Job {
        id: "stubborn".into(),
        task_groups: vec![TaskGroup {
            name: "g".into(),
            count: Some(1),
            tasks: vec![stubborn],
            ..TaskGroup::default()
        }],
        ..Job::default()
    };
    let mut log = run(vec![job], |_| vec![stop("stubborn", false, false)]);
    validate(&log).unwrap_or_else(|e| panic!("{e}"));
    let signalled = find(&log, "TaskPreKill", signal);
    let killed = find(&log, "KillTimeout", |effects| {
        effects.iter().any(|e| matches!(e, Effect::SigKill { .. }))
    });
    assert_eq!(log[killed].time_ns - log[signalled].time_ns, 3 * SECOND);
    log[killed].time_ns -= SECOND;
    let seq = log[killed].seq;
    expect_refused(
        &log,
        seq,
        "2000 ms after kill 1's timeout began, before its end at 3000 ms",
    );
}

/// A step with an effect the model's step does not imply — a launch at a kill — is refused
/// by the model even where the rules have nothing against it.
#[test]
fn an_effect_the_model_does_not_imply_is_refused() {
    let mut log = log_of(|_| vec![stop("web", false, false)]);
    let pre_kill = find(&log, "GroupPreKill", |_| true);
    log[pre_kill].effects.push(Effect::Launch {
        task: "poststop-that-never-was".into(),
    });
    let seq = log[pre_kill].seq;
    expect_refused(&log, seq, "does not imply");
}

/// Past the model's bounds (five tasks), the model cannot judge — and says so, naming the
/// job and the reason — while the effect rules still hold the log to account.
#[test]
fn a_job_past_the_models_bounds_is_not_judged_but_its_effects_are() {
    let mut job = api_job();
    job.task_groups.truncate(1);
    for name in ["a", "b", "c"] {
        job.task_groups[0].tasks.push(task(name, 0, None));
    }
    let log = run(vec![job], |_| vec![stop("api", false, true)]);
    let report = validate(&log).unwrap_or_else(|e| panic!("{e}"));
    assert!(!report.fully_judged());
    let Judged::Until { seq, why } = &report.parts[0].judged else {
        panic!("{report:?}")
    };
    assert_eq!(*seq, 1, "from its registration");
    assert!(why.contains("at most 4"), "{why}");
    assert!(report.effects > 10);
    let mut tampered = log.clone();
    let signalled = find(&tampered, "TaskPreKill", signal);
    let effect = tampered[signalled].effects.last().unwrap().clone();
    tampered[signalled].effects.push(effect);
    let seq = tampered[signalled].seq;
    expect_refused(&tampered, seq, "again for kill 1");
}

/// `job` whose front leader exits with code 3 after `run_for_s` seconds of every run.
fn leader_crashing_after(mut job: Job, run_for_s: i64) -> Job {
    job.task_groups[0].tasks[0].config = Some(
        [
            ("run_for".to_string(), serde_json::json!(run_for_s * SECOND)),
            ("exit_code".to_string(), serde_json::json!(3)),
        ]
        .into(),
    );
    job
}

/// No restart: a crash fails the allocation.
fn no_restarts() -> Option<quiesce_core::spec::RestartPolicy> {
    Some(quiesce_core::spec::RestartPolicy {
        attempts: Some(0),
        mode: Some("fail".into()),
        ..Default::default()
    })
}

/// `api` whose front leader crashes 40 s into every run, with one restart allowed (after
/// 5 s): it runs twice, then its allocation fails and the rest is killed.
fn crashing_api_job() -> Job {
    let mut job = leader_crashing_after(api_job(), 40);
    let front = &mut job.task_groups[0];
    front.restart_policy = Some(quiesce_core::spec::RestartPolicy {
        attempts: Some(1),
        delay_ns: Some(5 * SECOND),
        ..Default::default()
    });
    job
}

/// Crashes, the restart policy's decisions and delays, an allocation failing, and in-place
/// restarts with and without the flag: the simulator's log of them validates in full.
#[test]
fn crashes_and_restarts_validate_in_full() {
    let log = run(vec![crashing_api_job()], |sim| {
        let back = allocs_of(sim, "api", "back");
        vec![
            Step::RestartAlloc {
                alloc: back[0].clone(),
                task: Some("worker".into()),
                no_shutdown_delay: true,
            },
            Step::RestartAlloc {
                alloc: back[0].clone(),
                task: None,
                no_shutdown_delay: false,
            },
            stop("api", false, false),
        ]
    });
    for name in [
        "RestartDecision",
        "RestartDelayElapsed",
        "RestartAlloc",
        "TaskExit",
    ] {
        assert!(log.iter().any(|e| e.name() == name), "no {name} in the log");
    }
    let report = validate(&log).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        report.parts.iter().all(|p| p.judged == Judged::Full),
        "{report:?}"
    );
}

// invariant: restart_policy_respected
/// A run that ends in an error the driver reports (a lost process) is not retried: the
/// decision says so, the allocation fails at once, and the log validates in full.
#[test]
fn an_unrecoverable_end_fails_the_allocation_and_validates() {
    let mut job = crashing_api_job();
    let config = job.task_groups[0].tasks[0].config.as_mut().unwrap();
    config.insert("lost".into(), serde_json::json!(true));
    let log = run(vec![job], |_| Vec::new());
    let decision = log
        .iter()
        .find(|e| e.name() == "RestartDecision")
        .expect("a decision");
    assert!(
        matches!(
            decision.as_step(),
            Some(Step::RestartDecision {
                unrecoverable: true,
                ..
            })
        ),
        "{decision:?}"
    );
    assert!(!log.iter().any(|e| e.name() == "RestartDelayElapsed"));
    let report = validate(&log).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        report.parts.iter().all(|p| p.judged == Judged::Full),
        "{report:?}"
    );
}

// invariant: services_restored
/// A crash whose entry does not deregister the task's service is refused at that entry:
/// the model's crash takes the task out of the registry.
#[test]
fn a_crash_that_keeps_its_service_is_refused() {
    let mut log = run(vec![crashing_api_job()], |_| Vec::new());
    let crash = find(&log, "TaskExit", |effects| {
        effects.iter().any(
            |e| matches!(e, Effect::Deregister { services, .. } if services[..] == ["api-server"]),
        )
    });
    log[crash].effects.clear();
    let seq = log[crash].seq;
    expect_refused(&log, seq, "Deregister of task \"server\"");
}

#[test]
fn a_log_line_that_is_not_json_is_named() {
    let error =
        parse_log("{\"seq\":1,\"time_ns\":0,\"step\":\"ClientRestart\"}\nnot json\n").unwrap_err();
    assert!(
        error.starts_with("line 2: not an event-log line"),
        "{error}"
    );
}

/// A task that crashes again after its restart interval is over gets a fresh count in the
/// implementation (Nomad's tracker) but not in the model, which keeps every crash in one
/// interval: the instance is judged up to that decision, and says why.
#[test]
fn a_crash_after_the_restart_interval_ends_the_judging_with_the_reason() {
    let mut job = crashing_api_job();
    job.task_groups[0].restart_policy = Some(quiesce_core::spec::RestartPolicy {
        attempts: Some(1),
        delay_ns: Some(SECOND),
        interval_ns: Some(5 * SECOND),
        ..Default::default()
    });
    let mut sim = Simulator::new(1, 7);
    sim.register(job).unwrap();
    // The task crashes every 40 s and is restarted for ever: run a bounded number of steps.
    let _ = sim.run_until_quiet(200);
    let log = parse_log(&sim.log().to_json_lines()).unwrap();
    assert!(
        log.iter()
            .filter(|e| e.name() == "RestartDelayElapsed")
            .count()
            >= 2,
        "restarted past its one attempt, in new intervals"
    );
    let report = validate(&log).unwrap_or_else(|e| panic!("{e}"));
    let front = report.parts.iter().find(|p| p.group == "front").unwrap();
    let Judged::Until { why, .. } = &front.judged else {
        panic!("{report:?}")
    };
    assert!(why.contains("after its restart interval"), "{why}");
}

/// A re-registration that changes what a group runs but not its stop path is the model's
/// rollout: the old version's stops (one at a time, through their delays) and the new
/// version's runs are judged, through two updates and a flagged stop.
// invariant: rollout_bounded
#[test]
fn rollouts_of_a_job_that_is_no_model_part_validate_in_full() {
    let update = || Step::UpdateJob { job: "api".into() };
    let log = run(vec![api_job()], |_| {
        vec![update(), update(), stop("api", false, true)]
    });
    let report = validate(&log).unwrap_or_else(|e| panic!("{e}"));
    assert!(report.fully_judged(), "{:?}", report.parts);
    let parts: Vec<(&str, &str, usize)> = report
        .parts
        .iter()
        .map(|p| (p.job.as_str(), p.group.as_str(), p.allocs))
        .collect();
    // Each group's allocations, replaced twice.
    assert_eq!(parts, [("api", "front", 9), ("api", "back", 6)]);
    let healthy = log.iter().filter(|e| e.name() == "AllocHealthy").count();
    assert_eq!(
        healthy, 15,
        "every allocation turned healthy: the registration's 5 (its own deployment), and \
         each of the 10 replacements before the next batch"
    );
}

/// A new version whose replacement fails before it is healthy fails its deployment, which
/// the model's deployments never do: the log says so, and the judging stops there with the
/// reason (what came before was judged).
#[test]
fn a_failed_deployment_is_logged_and_ends_the_judging() {
    // The same restart policy in both versions: only what the task runs changes.
    let mut sim = Simulator::new(1, 7);
    let mut first = api_job();
    first.task_groups[0].restart_policy = no_restarts();
    sim.register(first.clone()).unwrap();
    sim.run_until_quiet(100_000).unwrap();
    sim.register(leader_crashing_after(first, 1)).unwrap();
    sim.run_until_quiet(100_000).unwrap();
    let log = parse_log(&sim.log().to_json_lines()).unwrap();
    let noted = log
        .iter()
        .find(|e| e.name() == "Deployment")
        .expect("the failed deployment is logged");
    let report = validate(&log).unwrap_or_else(|e| panic!("{e}"));
    let front = &report.parts[0];
    assert_eq!(front.group, "front");
    match &front.judged {
        Judged::Until { seq, why } => {
            assert_eq!(*seq, noted.seq);
            assert!(why.contains("deployment was failed"), "{why}");
        }
        Judged::Full => panic!("judged past a failed deployment: {report:?}"),
    }
    assert!(front.replayed > 10, "{report:?}");
    let deployment = sim.server.store.latest_deployment("api").unwrap();
    assert_eq!(deployment.status, "failed");
}

/// Two at a time (`max_parallel = 2`) over four allocations: whichever two of the alike
/// older allocations the implementation stops first (the oldest), the model's rollout
/// allows it, and the log validates in full.
// invariant: rollout_bounded
#[test]
fn a_rollout_two_at_a_time_validates_whichever_alike_allocations_go_first() {
    let mut job = api_job();
    job.task_groups.truncate(1);
    job.task_groups[0].count = Some(4);
    job.task_groups[0].update = Some(quiesce_core::spec::UpdateStrategy {
        max_parallel: Some(2),
        ..Default::default()
    });
    let log = run(vec![job], |_| vec![Step::UpdateJob { job: "api".into() }]);
    let report = validate(&log).unwrap_or_else(|e| panic!("{e}"));
    assert!(report.fully_judged(), "{:?}", report.parts);
    assert_eq!(report.parts[0].allocs, 8);
    // Every entry but the first registration (which builds the model) was replayed.
    assert_eq!(report.judged, log.len() - 1);
}

/// A job purged and registered again, three times over, the second time after its
/// deployment failed (the judging of that registration ended there): each registration is
/// judged afresh from its own start, and a new allocation of the third is never taken for
/// one of the first's, purged (the last CI failure: "ClientSync names an allocation the
/// model has not placed").
#[test]
fn each_registration_after_a_purge_is_judged_afresh() {
    let mut job = api_job();
    job.task_groups.truncate(1);
    job.task_groups[0].count = Some(1);
    job.task_groups[0].restart_policy = no_restarts();
    job.task_groups[0].update = Some(quiesce_core::spec::UpdateStrategy {
        max_parallel: Some(1),
        ..Default::default()
    });
    let crashing = leader_crashing_after(job.clone(), 1);
    let mut sim = Simulator::new(1, 7);
    for spec in [job.clone(), crashing, job] {
        sim.register(spec).unwrap();
        sim.run_until_quiet(100_000).unwrap();
        sim.apply(&stop("api", true, false)).unwrap();
        sim.run_until_quiet(100_000).unwrap();
    }
    let log = parse_log(&sim.log().to_json_lines()).unwrap();
    assert!(
        log.iter().any(|e| e.name() == "Deployment"),
        "the second registration's deployment failed"
    );
    let report = validate(&log).unwrap_or_else(|e| panic!("{e}"));
    let judged: Vec<(u64, bool, usize)> = report
        .parts
        .iter()
        .map(|p| (p.registered_at, p.judged == Judged::Full, p.allocs))
        .collect();
    assert_eq!(judged.len(), 3, "one instance per registration: {report:?}");
    assert_eq!(
        judged.iter().map(|&(_, full, _)| full).collect::<Vec<_>>(),
        [true, false, true],
        "{report:?}"
    );
    assert!(
        judged.iter().all(|&(_, _, allocs)| allocs == 1),
        "{report:?}"
    );
}
