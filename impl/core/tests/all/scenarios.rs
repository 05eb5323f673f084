//! Scenario tests of the stop path on the simulator: the behaviour Nomad's tests pin, and
//! the cases they miss (`reference/nomad-stop-path.md` §5.1).

use quiesce_core::server::structs::{event_types as ev, AllocId, ClientStatus, DesiredStatus};
use quiesce_core::server::{ServerError, StopJobOptions};
use quiesce_core::sim::{SimError, Simulator};
use quiesce_core::spec::{Job, Lifecycle, Service, Task, TaskGroup};
use quiesce_core::step::Step;

const SECOND: i64 = 1_000_000_000;
const GROUP_DELAY: i64 = 30 * SECOND;
const TASK_DELAY: i64 = 20 * SECOND;
const SIDECAR_DELAY: i64 = 5 * SECOND;
const STEPS: usize = 100_000;
/// Every delay waited in full, then the poststop task's second.
const FULL_WAIT: i64 = GROUP_DELAY + TASK_DELAY + SIDECAR_DELAY + SECOND;

fn service(name: &str) -> Option<Vec<Service>> {
    Some(vec![Service {
        name: name.to_string(),
        provider: "nomad".to_string(),
        ..Service::default()
    }])
}

fn mock(name: &str) -> Task {
    Task {
        name: name.to_string(),
        driver: "mock_driver".to_string(),
        ..Task::default()
    }
}

/// DESIGN.md's job: a group service and delay; a leader with a task delay and a service; a
/// prestart sidecar with its own delay; a poststop task that runs for a second.
fn web_job(count: i64) -> Job {
    let mut app = mock("app");
    app.leader = true;
    app.shutdown_delay_ns = TASK_DELAY;
    app.services = service("app");
    let mut proxy = mock("proxy");
    proxy.shutdown_delay_ns = SIDECAR_DELAY;
    proxy.lifecycle = Some(Lifecycle {
        hook: "prestart".into(),
        sidecar: true,
    });
    let mut flush = mock("flush");
    flush.lifecycle = Some(Lifecycle {
        hook: "poststop".into(),
        sidecar: false,
    });
    flush.config = Some([("run_for".to_string(), serde_json::json!(SECOND))].into());
    Job {
        id: "web".to_string(),
        task_groups: vec![TaskGroup {
            name: "web".to_string(),
            count: Some(count),
            shutdown_delay_ns: Some(GROUP_DELAY),
            services: service("web"),
            tasks: vec![app, proxy, flush],
            ..TaskGroup::default()
        }],
        ..Job::default()
    }
}

/// A running cluster: the job registered, placed, pulled and started, and the
/// registration's deployment done (each allocation healthy at once, the clock unmoved).
fn running(job: Job) -> Simulator {
    let mut sim = Simulator::new(1, 42);
    sim.register(job).unwrap();
    sim.run_until_idle(STEPS).unwrap();
    while let Some(healthy) = sim
        .enabled_steps()
        .into_iter()
        .find(|step| matches!(step, Step::AllocHealthy { .. }))
    {
        sim.apply(&healthy).unwrap();
        sim.run_until_idle(STEPS).unwrap();
    }
    sim
}

/// Allocation IDs in placement order.
fn allocs(sim: &Simulator) -> Vec<AllocId> {
    let mut allocs: Vec<_> = sim.server.store.allocs_by_job("web").collect();
    allocs.sort_by_key(|a| (a.create_index, a.name.clone()));
    allocs.into_iter().map(|a| a.id.clone()).collect()
}

fn event_types(sim: &Simulator, alloc: &str, task: &str) -> Vec<String> {
    let runner = sim.runner(alloc).unwrap();
    let task = runner.tasks.iter().find(|t| *t.name == *task).unwrap();
    task.state
        .events
        .iter()
        .map(|e| e.event_type.to_string())
        .collect()
}

fn stop_job(sim: &mut Simulator, purge: bool, flag: bool) {
    sim.apply(&Step::StopJob {
        job: "web".into(),
        purge,
        no_shutdown_delay: flag,
    })
    .unwrap();
}

/// Stops the job, runs until quiet, and returns how long the stop took (virtual time).
fn stop_and_run(sim: &mut Simulator, purge: bool, flag: bool) -> i64 {
    let before = sim.now_ns();
    stop_job(sim, purge, flag);
    sim.run_until_quiet(STEPS).unwrap();
    sim.now_ns() - before
}

fn stop_alloc(sim: &mut Simulator, alloc: &str, flag: bool) {
    sim.apply(&Step::StopAlloc {
        alloc: alloc.into(),
        no_shutdown_delay: flag,
    })
    .unwrap();
}

fn flag_of(sim: &Simulator, alloc: &str) -> Option<bool> {
    sim.server
        .store
        .alloc_for_client(alloc)
        .unwrap()
        .desired_transition
        .no_shutdown_delay
}

/// Takes run-until-quiet steps until `until` holds (bounded).
fn run_until(sim: &mut Simulator, until: impl Fn(&Simulator) -> bool) {
    for _ in 0..STEPS {
        if until(sim) {
            return;
        }
        assert_eq!(
            sim.run_until_quiet(1).unwrap_or(1),
            1,
            "went quiet before the condition held"
        );
    }
    panic!("condition never held");
}

fn client_terminal(sim: &Simulator, alloc: &str) -> bool {
    sim.server
        .store
        .alloc_for_client(alloc)
        .is_none_or(|a| a.client_status.is_terminal())
}

// invariant: delay_skipped_only_when_flagged
#[test]
fn without_the_flag_every_delay_is_waited_and_events_say_so() {
    let mut sim = running(web_job(1));
    let start = sim.now_ns();
    stop_job(&mut sim, false, false);
    sim.run_until_quiet(STEPS).unwrap();
    let alloc = &allocs(&sim)[0];
    // Group delay, then the leader's delay, then the sidecar's: 30 + 20 + 5 s, plus the
    // poststop task's second.
    assert_eq!(sim.now_ns() - start, FULL_WAIT);
    assert_eq!(
        event_types(&sim, alloc, "app")[2..],
        [
            ev::WAITING_FOR_GROUP_SHUTDOWN_DELAY,
            ev::KILLING,
            ev::WAITING_FOR_SHUTDOWN_DELAY,
            ev::TERMINATED,
            ev::KILLED,
        ]
    );
    assert!(client_terminal(&sim, alloc));
    assert_eq!(
        sim.server.store.services().count(),
        0,
        "every service deregistered"
    );
}

// invariant: prestop_hooks_always_run
#[test]
fn with_the_flag_no_delay_is_waited_and_hooks_and_poststop_still_run() {
    let mut sim = running(web_job(2));
    let start = sim.now_ns();
    stop_job(&mut sim, false, true);
    sim.run_until_quiet(STEPS).unwrap();
    // Only the poststop task's own second passes: no shutdown_delay at all.
    assert_eq!(sim.now_ns() - start, SECOND);
    for alloc in allocs(&sim) {
        assert_eq!(
            event_types(&sim, &alloc, "app")[2..],
            [
                ev::SKIPPING_GROUP_SHUTDOWN_DELAY,
                ev::KILLING,
                ev::SKIPPING_SHUTDOWN_DELAY,
                ev::TERMINATED,
                ev::KILLED,
            ]
        );
        assert_eq!(
            event_types(&sim, &alloc, "flush"),
            [ev::RECEIVED, ev::STARTED, ev::TERMINATED]
        );
        let runner = sim.runner(&alloc).unwrap();
        assert!(runner.group_pre_kill_done && runner.tasks.iter().take(2).all(|t| t.pre_kill_done));
        assert_eq!(flag_of(&sim, &alloc), Some(true));
    }
    assert_eq!(sim.server.store.services().count(), 0);
}

/// Nomad's own test of the flag on job stop never creates an allocation; this one has a
/// terminal allocation too, which also gets the flag (§1.4 step 2).
#[test]
fn flagged_job_stop_reaches_running_and_terminal_allocations() {
    let mut sim = running(web_job(2));
    let first = allocs(&sim)[0].clone();
    stop_alloc(&mut sim, &first, false);
    sim.run_until_quiet(STEPS).unwrap();
    assert!(client_terminal(&sim, &first));
    let all = allocs(&sim);
    assert_eq!(all.len(), 3, "the stopped allocation was replaced");
    let before = sim.now_ns();
    stop_job(&mut sim, false, true);
    for alloc in &all {
        assert_eq!(flag_of(&sim, alloc), Some(true), "{alloc}");
    }
    sim.run_until_quiet(STEPS).unwrap();
    assert_eq!(sim.now_ns() - before, SECOND);
    assert!(all.iter().all(|alloc| client_terminal(&sim, alloc)));
}

// invariant: flag_is_honoured
#[test]
fn flagged_alloc_stop_cuts_a_group_delay_short() {
    let mut sim = running(web_job(1));
    let alloc = allocs(&sim)[0].clone();
    stop_job(&mut sim, false, false);
    run_until(&mut sim, |sim| {
        sim.enabled_steps().contains(&Step::GroupDelayElapsed {
            alloc: alloc.clone(),
        })
    });
    let waiting_since = sim.now_ns();
    stop_alloc(&mut sim, &alloc, true);
    sim.run_until_quiet(STEPS).unwrap();
    assert_eq!(
        sim.now_ns() - waiting_since,
        SECOND,
        "only the poststop second"
    );
    assert_eq!(
        event_types(&sim, &alloc, "app")[2..5],
        [
            ev::WAITING_FOR_GROUP_SHUTDOWN_DELAY,
            ev::GROUP_SHUTDOWN_DELAY_CUT_SHORT,
            ev::KILLING,
        ]
    );
    assert_eq!(
        event_types(&sim, &alloc, "app")[5],
        ev::SKIPPING_SHUTDOWN_DELAY
    );
}

// invariant: flag_is_honoured
#[test]
fn flagged_alloc_stop_cuts_a_task_delay_short() {
    let mut sim = running(web_job(1));
    let alloc = allocs(&sim)[0].clone();
    stop_job(&mut sim, false, false);
    let app_waiting = Step::TaskDelayElapsed {
        alloc: alloc.clone(),
        task: "app".into(),
    };
    run_until(&mut sim, |sim| sim.enabled_steps().contains(&app_waiting));
    let waiting_since = sim.now_ns();
    stop_alloc(&mut sim, &alloc, true);
    sim.run_until_quiet(STEPS).unwrap();
    assert_eq!(sim.now_ns() - waiting_since, SECOND);
    assert_eq!(
        event_types(&sim, &alloc, "app")[3..],
        [
            ev::KILLING,
            ev::WAITING_FOR_SHUTDOWN_DELAY,
            ev::SHUTDOWN_DELAY_CUT_SHORT,
            ev::TERMINATED,
            ev::KILLED,
        ]
    );
    assert_eq!(
        event_types(&sim, &alloc, "proxy")[4],
        ev::SKIPPING_SHUTDOWN_DELAY,
        "later waits skipped"
    );
}

// invariant: jobspec_unchanged
#[test]
fn second_flagged_job_stop_rescues_a_stopped_job_and_changes_no_spec() {
    let mut sim = running(web_job(1));
    stop_job(&mut sim, false, false);
    run_until(&mut sim, |sim| {
        sim.enabled_steps()
            .iter()
            .any(|s| matches!(s, Step::GroupDelayElapsed { .. }))
    });
    assert_eq!(stop_and_run(&mut sim, false, true), SECOND);
    let versions = sim.server.store.job_versions("web").unwrap();
    assert_eq!(
        versions
            .iter()
            .map(|v| (v.version, v.stop))
            .collect::<Vec<_>>(),
        [(0, false), (1, true), (2, true)]
    );
    assert!(
        versions
            .iter()
            .all(|v| v.spec_only() == versions[0].spec_only()),
        "jobspec_unchanged"
    );
}

// invariant: kill_order
#[test]
fn kill_order_is_leader_then_sidecar_then_poststop() {
    let mut job = web_job(1);
    let mut worker = mock("worker");
    worker.shutdown_delay_ns = SECOND;
    job.task_groups[0].tasks.insert(1, worker);
    let mut sim = running(job);
    stop_job(&mut sim, false, false);
    sim.run_until_quiet(STEPS).unwrap();
    let order: Vec<(String, String)> = sim
        .log()
        .entries()
        .iter()
        .filter(|e| {
            matches!(
                e.name(),
                "TaskPreKill" | "TaskExit" | "PoststopStart" | "PoststopExit"
            )
        })
        .map(|e| {
            let task = e.as_step().and_then(Step::task).unwrap();
            (e.name().to_string(), task.to_string())
        })
        .collect();
    let step = |s: &str, t: &str| (s.to_string(), t.to_string());
    assert_eq!(
        order,
        [
            step("TaskPreKill", "app"),
            step("TaskExit", "app"),
            step("TaskPreKill", "worker"),
            step("TaskExit", "worker"),
            step("TaskPreKill", "proxy"),
            step("TaskExit", "proxy"),
            step("PoststopStart", "flush"),
            step("PoststopExit", "flush"),
        ]
    );
}

// invariant: jobspec_unchanged
#[test]
fn job_start_after_a_flagged_stop_waits_full_delays_again() {
    let mut sim = running(web_job(1));
    stop_job(&mut sim, false, true);
    sim.run_until_quiet(STEPS).unwrap();
    sim.apply(&Step::StartJob { job: "web".into() }).unwrap();
    sim.run_until_quiet(STEPS).unwrap();
    let fresh = allocs(&sim)[1].clone();
    assert_eq!(
        flag_of(&sim, &fresh),
        None,
        "a new allocation never carries the flag"
    );
    assert_eq!(stop_and_run(&mut sim, false, false), FULL_WAIT);
    let versions = sim.server.store.job_versions("web").unwrap();
    assert_eq!(versions.len(), 4);
    assert!(versions
        .iter()
        .all(|v| v.spec_only() == versions[0].spec_only()));
}

// invariant: flag_is_honoured
#[test]
fn purge_with_the_flag_deletes_the_job_at_once_and_honours_the_flag() {
    let mut sim = running(web_job(2));
    let all = allocs(&sim);
    let before = sim.now_ns();
    stop_job(&mut sim, true, true);
    assert!(
        sim.server.store.job("web").is_none(),
        "GET /v1/job/web answers 404 at once"
    );
    assert!(
        all.iter().all(|a| sim.server.store.alloc(a).is_none()),
        "tombstones answer 404"
    );
    assert!(all
        .iter()
        .all(|a| sim.server.store.alloc_for_client(a).unwrap().tombstone));
    sim.run_until_quiet(STEPS).unwrap();
    assert_eq!(
        sim.now_ns() - before,
        SECOND,
        "the flag was honoured: no delay waited"
    );
    for alloc in &all {
        assert_eq!(
            event_types(&sim, alloc, "app")[2],
            ev::SKIPPING_GROUP_SHUTDOWN_DELAY
        );
        assert!(
            sim.server.store.alloc_for_client(alloc).is_none(),
            "tombstone removed once terminal"
        );
    }
}

#[test]
fn unflagged_alloc_stop_after_a_flagged_one_leaves_the_flag_set() {
    let mut sim = running(web_job(1));
    let alloc = allocs(&sim)[0].clone();
    stop_alloc(&mut sim, &alloc, true);
    stop_alloc(&mut sim, &alloc, false);
    assert_eq!(flag_of(&sim, &alloc), Some(true), "sticky, unlike Nomad");
    let before = sim.now_ns();
    sim.run_until_quiet(STEPS).unwrap();
    assert_eq!(sim.now_ns() - before, SECOND);
}

// invariant: flag_scoped
#[test]
fn a_replacement_never_carries_the_flag_and_waits_in_full() {
    let mut sim = running(web_job(2));
    let [first, second] = <[AllocId; 2]>::try_from(allocs(&sim)).unwrap();
    stop_alloc(&mut sim, &first, true);
    sim.run_until_quiet(STEPS).unwrap();
    let replacement = allocs(&sim)[2].clone();
    let record = sim.server.store.alloc(&replacement).unwrap();
    assert_eq!(record.previous_allocation.as_deref(), Some(first.as_str()));
    assert_eq!(record.desired_transition.no_shutdown_delay, None);
    assert_eq!(
        flag_of(&sim, &second),
        None,
        "flag_scoped: the other allocation is untouched"
    );
    assert_eq!(stop_and_run(&mut sim, false, false), FULL_WAIT);
}

// invariant: kill_timeout_respected
#[test]
fn kill_timeout_is_capped_by_max_kill_timeout() {
    let mut job = web_job(1);
    let app = &mut job.task_groups[0].tasks[0];
    app.kill_timeout_ns = Some(120 * SECOND);
    app.config = Some([("ignore_signal".to_string(), serde_json::json!(true))].into());
    let mut sim = Simulator::with_max_kill_timeout(1, 42, 30 * SECOND);
    sim.register(job).unwrap();
    sim.run_until_quiet(STEPS).unwrap();
    stop_job(&mut sim, false, true);
    sim.run_until_quiet(STEPS).unwrap();
    let alloc = &allocs(&sim)[0];
    let runner = sim.runner(alloc).unwrap();
    let app = &runner.tasks[0];
    assert!(app.sigkilled);
    let killing = app
        .state
        .events
        .iter()
        .find(|e| e.event_type == ev::KILLING)
        .unwrap();
    assert_eq!(killing.details["kill_timeout"], "30s");
    let terminated = app
        .state
        .events
        .iter()
        .find(|e| e.event_type == ev::TERMINATED)
        .unwrap();
    // Events recorded at one instant are a nanosecond apart (Killing came after others).
    let waited = terminated.time - killing.time;
    assert!(
        (30 * SECOND - 10..=30 * SECOND).contains(&waited),
        "SIGKILL at the capped timeout: {waited} ns after Killing"
    );
    assert_eq!(terminated.details["signal"], "9");
}

#[test]
fn bad_input_is_refused_with_the_store_unchanged() {
    let mut sim = running(web_job(1));
    let index = sim.server.store.index();
    let mut bad = web_job(1);
    bad.task_groups[0].tasks[0].shutdown_delay_ns = -1;
    let error = sim.register(bad).unwrap_err();
    assert_eq!(
        error.to_string(),
        "invalid job: TaskGroups[0].Tasks[0].ShutdownDelay: must not be negative (got -1 ns)"
    );
    let unknown = Step::StopAlloc {
        alloc: "00000000-0000-4000-8000-000000000000".into(),
        no_shutdown_delay: true,
    };
    assert!(matches!(
        sim.apply(&unknown),
        Err(SimError::Server(ServerError::AllocNotFound(_)))
    ));
    let options = StopJobOptions {
        eval_priority: Some(101),
        ..StopJobOptions::default()
    };
    assert_eq!(
        sim.server.stop_job("web", options),
        Err(ServerError::EvalPriorityOutOfRange(101))
    );
    assert_eq!(sim.server.store.index(), index, "nothing was written");
    assert_eq!(sim.server.store.job_versions("web").unwrap().len(), 1);
    let alloc = sim.server.store.alloc(&allocs(&sim)[0]).unwrap();
    assert_eq!(
        (alloc.desired_status, alloc.client_status),
        (DesiredStatus::Run, ClientStatus::Running)
    );
}

#[test]
fn stopping_an_unknown_job_is_a_no_op() {
    let mut sim = running(web_job(1));
    let index = sim.server.store.index();
    let response = sim
        .server
        .stop_job("api", StopJobOptions::default())
        .unwrap();
    assert_eq!((response.eval_id.as_str(), response.index), ("", index));
}

#[test]
fn a_step_that_is_not_enabled_changes_nothing() {
    let mut sim = running(web_job(1));
    let alloc = allocs(&sim)[0].clone();
    let before = sim.log().len();
    let step = Step::GroupPreKill { alloc };
    assert_eq!(
        sim.apply(&step),
        Err(SimError::NotEnabled(step.to_string()))
    );
    assert_eq!(sim.log().len(), before);
}

#[test]
fn the_event_log_is_json_lines_in_step_alphabet_terms() {
    let mut sim = running(web_job(1));
    stop_job(&mut sim, false, true);
    sim.run_until_quiet(STEPS).unwrap();
    let lines = sim.log().to_json_lines();
    let entries: Vec<_> = lines
        .lines()
        .map(|l| quiesce_core::step::log::LogEntry::parse_line(l).unwrap())
        .collect();
    assert_eq!(entries.len(), sim.log().len());
    assert!(entries
        .windows(2)
        .all(|w| w[1].seq == w[0].seq + 1 && w[1].time_ns >= w[0].time_ns));
    let stop = entries
        .iter()
        .find_map(|e| match e.as_step() {
            Some(Step::StopJob {
                job,
                purge,
                no_shutdown_delay,
            }) => Some((job.as_str(), *purge, *no_shutdown_delay)),
            _ => None,
        })
        .unwrap();
    assert_eq!(stop, ("web", false, true));
    let first_line = lines.lines().next().unwrap();
    assert!(
        first_line.starts_with(r#"{"seq":1,"time_ns":0,"step":"RegisterJob","job":"web""#),
        "{first_line}"
    );
    // Every kill signal is logged as an effect of the step that sent it, after the
    // deregistration of the task's services in the same step.
    let kills: Vec<&quiesce_core::step::log::LogEntry> = entries
        .iter()
        .filter(|e| {
            e.effects
                .iter()
                .any(|effect| matches!(effect, quiesce_core::step::Effect::Signal { .. }))
        })
        .collect();
    assert!(!kills.is_empty());
    for entry in kills {
        assert_eq!(entry.name(), "TaskPreKill", "{entry:?}");
        assert!(entry.group.is_some() && entry.job.as_deref() == Some("web"));
    }
}

#[test]
fn the_simulator_is_deterministic_and_branches_by_clone() {
    let run = || {
        let mut sim = running(web_job(2));
        stop_job(&mut sim, false, true);
        sim.run_until_quiet(STEPS).unwrap();
        sim.log().to_json_lines()
    };
    assert_eq!(run(), run());
    let mut sim = running(web_job(1));
    stop_job(&mut sim, false, false);
    let branch = sim.clone();
    sim.run_until_quiet(STEPS).unwrap();
    assert!(
        branch.log().len() < sim.log().len(),
        "the clone did not move"
    );
}

// invariant: flag_is_honoured
/// DESIGN.md: a runner restored after a client restart applies the flag its stored
/// allocation carries (Nomad's would wait out the remaining delays).
#[test]
fn a_restored_runner_keeps_honouring_the_flag() {
    let mut sim = running(web_job(1));
    let alloc = allocs(&sim)[0].clone();
    let before = sim.now_ns();
    stop_job(&mut sim, false, true);
    run_until(&mut sim, |sim| {
        sim.log().entries().iter().any(|e| e.name() == "TaskExit")
    });
    sim.apply(&Step::ClientRestart).unwrap();
    assert!(
        sim.runner(&alloc).unwrap().cancelled,
        "restored with the flag applied"
    );
    sim.run_until_quiet(STEPS).unwrap();
    assert_eq!(sim.now_ns() - before, SECOND);
    assert_eq!(
        event_types(&sim, &alloc, "proxy")[4],
        ev::SKIPPING_SHUTDOWN_DELAY
    );
}

// invariant: jobspec_unchanged
#[test]
fn alloc_stop_writes_no_job_version() {
    let mut sim = running(web_job(2));
    let first = allocs(&sim)[0].clone();
    stop_alloc(&mut sim, &first, true);
    sim.run_until_quiet(STEPS).unwrap();
    assert_eq!(sim.server.store.job_versions("web").unwrap().len(), 1);
}

// invariant: stop_completes
/// A group without a poststop task ends as soon as its last task is dead, not before.
#[test]
fn a_group_without_poststop_ends_when_its_last_task_dies() {
    let mut job = web_job(1);
    job.task_groups[0].tasks.truncate(2);
    let mut sim = running(job);
    let alloc = allocs(&sim)[0].clone();
    stop_job(&mut sim, false, true);
    sim.apply(&Step::ProcessEval { job: "web".into() }).unwrap();
    sim.apply(&Step::ClientSync {
        alloc: alloc.clone(),
    })
    .unwrap();
    sim.apply(&Step::GroupPreKill {
        alloc: alloc.clone(),
    })
    .unwrap();
    assert!(!client_terminal(&sim, &alloc), "tasks still run");
    sim.run_until_quiet(STEPS).unwrap();
    assert!(client_terminal(&sim, &alloc));
    assert_eq!(
        event_types(&sim, &alloc, "proxy")
            .last()
            .map(String::as_str),
        Some(ev::KILLED)
    );
}

/// A timer that is not running (stale: cancelled, or already fired) changes nothing, as
/// the daemon's real timers may fire late.
#[test]
fn a_stale_timer_changes_nothing() {
    use quiesce_core::client::Timer;
    let sim = running(web_job(1));
    let alloc = allocs(&sim)[0].clone();
    let mut runner = sim.runner(&alloc).unwrap().clone();
    let before = runner.clone();
    let mut out = Vec::new();
    for timer in [
        Timer::GroupDelay,
        Timer::TaskDelay(0),
        Timer::KillTimeout(0),
        Timer::TaskDelay(9),
    ] {
        assert!(!runner.timer_fired(timer, 0, &mut out), "{timer:?}");
    }
    assert!(out.is_empty());
    assert_eq!(runner, before);
}

/// A task that exits on its own during its delay (its mock process's run ends first): the
/// wait ends with it, no signal is sent, and the run goes on without a stale timer.
#[test]
fn a_task_exiting_on_its_own_during_its_delay_ends_the_wait() {
    let mut job = web_job(1);
    job.task_groups[0].tasks[0].config =
        Some([("run_for".to_string(), serde_json::json!(40 * SECOND))].into());
    let mut sim = running(job);
    let alloc = allocs(&sim)[0].clone();
    stop_job(&mut sim, false, false);
    sim.run_until_quiet(STEPS).unwrap();
    let app = &sim.runner(&alloc).unwrap().tasks[0];
    assert_eq!(app.delay, quiesce_core::client::DelayOutcome::ExitedDuring);
    assert!(!app.signalled, "no signal for a task that is already gone");
    assert_eq!(
        event_types(&sim, &alloc, "app")[2..],
        [
            ev::WAITING_FOR_GROUP_SHUTDOWN_DELAY,
            ev::KILLING,
            ev::WAITING_FOR_SHUTDOWN_DELAY,
            ev::TERMINATED,
        ]
    );
    // It exited 40 s after it started: 10 s into its 20 s delay, after the 30 s group delay.
    let terminated = app
        .state
        .events
        .iter()
        .find(|e| e.event_type == ev::TERMINATED)
        .unwrap();
    assert_eq!(terminated.time, 40 * SECOND);
    assert!(client_terminal(&sim, &alloc));
}

/// A poststop task that fails marks the allocation failed; killed tasks do not.
#[test]
fn a_failing_poststop_task_fails_the_allocation() {
    let mut job = web_job(1);
    let flush = &mut job.task_groups[0].tasks[2];
    flush.config = Some(
        [
            ("run_for".to_string(), serde_json::json!(SECOND)),
            ("exit_code".to_string(), serde_json::json!(3)),
        ]
        .into(),
    );
    let mut sim = running(job);
    let alloc = allocs(&sim)[0].clone();
    stop_job(&mut sim, false, true);
    sim.run_until_quiet(STEPS).unwrap();
    assert_eq!(
        sim.server.store.alloc(&alloc).unwrap().client_status,
        ClientStatus::Failed
    );
    let mut sim = running(web_job(1));
    let alloc = allocs(&sim)[0].clone();
    stop_job(&mut sim, false, true);
    sim.run_until_quiet(STEPS).unwrap();
    assert_eq!(
        sim.server.store.alloc(&alloc).unwrap().client_status,
        ClientStatus::Complete
    );
}

// invariant: kill_timeout_respected
/// A restored runner re-arms the timers it had: a task that ignores its kill signal is
/// still SIGKILLed when its kill timeout runs out after the client restarted.
#[test]
fn a_restored_runner_rearms_the_kill_timeout() {
    let mut job = web_job(1);
    let app = &mut job.task_groups[0].tasks[0];
    app.kill_timeout_ns = Some(10 * SECOND);
    app.config = Some([("ignore_signal".to_string(), serde_json::json!(true))].into());
    let mut sim = running(job);
    let alloc = allocs(&sim)[0].clone();
    stop_job(&mut sim, false, true);
    let kill_timeout = Step::KillTimeout {
        alloc: alloc.clone(),
        task: "app".into(),
    };
    run_until(&mut sim, |sim| sim.enabled_steps().contains(&kill_timeout));
    sim.apply(&Step::ClientRestart).unwrap();
    assert!(
        sim.enabled_steps().contains(&kill_timeout),
        "the timer is running again"
    );
    sim.run_until_quiet(STEPS).unwrap();
    assert!(sim.runner(&alloc).unwrap().tasks[0].sigkilled);
    assert!(client_terminal(&sim, &alloc));
}

#[test]
fn a_rollout_healthy_in_time_cancels_each_health_deadline() {
    // A service job without an update block: Nomad's defaults, min_healthy_time 10 s and
    // healthy_deadline 5 min. Run until nothing is left to happen, the clock moving on: a
    // deadline left armed would fire, 5 minutes on, and fail the deployment.
    let mut sim = running(web_job(2));
    let before = sim.log().entries().len();
    sim.apply(&Step::UpdateJob { job: "web".into() }).unwrap();
    sim.run_until_quiet(STEPS).unwrap();
    let deployment = sim.server.store.latest_deployment("web").unwrap();
    assert_eq!(deployment.status, "successful");
    let entries = sim.log().entries().split_off(before);
    let named = |name: &str| entries.iter().filter(|e| e.name() == name).count();
    assert_eq!(named("AllocHealthy"), 2);
    assert_eq!(named("AllocUnhealthy"), 0);
}

#[test]
fn a_restored_runner_keeps_its_health_deadline_armed() {
    use quiesce_core::client::{AllocRunner, Command, Timer};
    let mut sim = running(web_job(2));
    sim.apply(&Step::UpdateJob { job: "web".into() }).unwrap();
    sim.run_until_idle(STEPS).unwrap();
    let watched = allocs(&sim)
        .into_iter()
        .find(|a| sim.runner(a).is_some_and(|r| r.health.deadline))
        .expect("a replacement whose deadline runs");
    let stored = sim.runner(&watched).unwrap().clone();
    let mut commands = Vec::new();
    let restored = AllocRunner::restore(stored, sim.now_ns(), &mut commands);
    assert!(restored.health.deadline);
    // Nomad's default healthy_deadline; the host keeps the due time it stored.
    assert!(
        commands.contains(&Command::StartTimer {
            timer: Timer::HealthyDeadline,
            after_ns: 300_000_000_000,
        }),
        "{commands:?}"
    );
}
