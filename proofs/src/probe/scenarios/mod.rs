//! The scenarios: each a job, the requests an operator would send, and the invariants the
//! answers, the allocations, the task events and the witness show. `stops.rs` holds the
//! stop path's own scenarios (and the restart flag's); `nomad.rs` Nomad's own tests recast
//! as black-box sequences (`reference/nomad-tests-and-clients.md` §1). This file: the list,
//! and what they share (the jobs, the requests, reading an answer as Nomad's tests do).
//!
//! | scenario | requests | observes |
//! |---|---|---|
//! | `job-stop-flagged` | two allocations (leader, main, poststart sidecar, poststop; group and task delays, services); `DELETE /v1/job/:id?no_shutdown_delay=true` | flag_is_honoured, delay_skipped_only_when_flagged, prestop_hooks_always_run, jobspec_unchanged, kill_order, stop_completes, stop_recorded |
//! | `job-stop` | the same job, stopped without the flag, then started as `nomad job start` does | delay_skipped_only_when_flagged, prestop_hooks_always_run, jobspec_unchanged (stop and start), kill_order, stop_completes |
//! | `alloc-stop-scoped` | `alloc stop -no-shutdown-delay` of A, then `alloc stop` of B | flag_is_honoured, flag_scoped, delay_skipped_only_when_flagged, prestop_hooks_always_run, stop_recorded, stop_completes |
//! | `kill-timeout` | a flagged stop of a witness that ignores its kill signal | kill_timeout_respected, flag_is_honoured, stop_completes |
//! | `nomad-alloc-stop` | plain, flagged and (batch) `reschedule=true` alloc stops, and an unknown allocation's | stop_recorded, flag_scoped |
//! | `nomad-deregister` | an unknown job's stop; a stop; a second, flagged stop during a 4 s delay; a purge | stop_recorded, flag_is_honoured, stop_completes |
//! | `flag-values` | alloc stops with `no_shutdown_delay` = `true`, `false`, `1`, `0`, `maybe` | stop_recorded (Go's `ParseBool`; the malformed value refused, nothing changed) |
//! | `nomad-overlap` | a static port; an unflagged stop, then a second job on that node and port during the delay; the same with the flag | resources_held, flag_is_honoured |
//! | `restart-flag` | (advertised extension) a flagged restart, then an unflagged one | flag_is_honoured, restart_flag_one_shot, prestop_hooks_always_run |

mod nomad;
mod stops;

use super::api::{escape, now_ns, Answer};
use super::jobs::{JobSpec, Role, TaskSpec};
use super::judge;
use super::judge::short;
use super::observe::{self, AllocView};
use super::run::Ctx;
use super::verdict::{Judgement, Verdict};
use serde_json::Value;

pub struct Scenario {
    pub name: &'static str,
    pub about: &'static str,
    pub run: fn(&mut Ctx) -> Result<Vec<Judgement>, String>,
}

pub const SCENARIOS: [Scenario; 9] = [
    Scenario { name: "job-stop-flagged", about: "job stop -no-shutdown-delay on two allocations of a leader, a main task, a sidecar and a poststop task, with group and task delays", run: stops::job_stop_flagged },
    Scenario { name: "job-stop", about: "job stop without the flag, then a start", run: stops::job_stop_then_start },
    Scenario { name: "alloc-stop-scoped", about: "alloc stop -no-shutdown-delay of A, then alloc stop of B (Nomad's TestJobRestartCommand_shutdownDelay_reschedule)", run: stops::alloc_stop_scoped },
    Scenario { name: "kill-timeout", about: "a flagged stop of a task that ignores its kill signal", run: stops::kill_timeout },
    Scenario { name: "nomad-alloc-stop", about: "Nomad's TestAllocStop_Run and TestAllocations_Stop: what each alloc stop records", run: nomad::nomad_alloc_stop },
    Scenario { name: "nomad-deregister", about: "Nomad's TestJobs_Deregister: a second, flagged stop of a stopped job during its delay, then a purge", run: nomad::nomad_deregister },
    Scenario { name: "flag-values", about: "no_shutdown_delay=true, false, 1, 0 and a malformed value", run: nomad::flag_values },
    Scenario { name: "nomad-overlap", about: "Nomad's TestOverlap: a static port held through the delay, freed at once by a flagged stop", run: nomad::overlap },
    Scenario { name: "restart-flag", about: "alloc restart -no-shutdown-delay, then an unflagged restart (a quiesce extension)", run: stops::restart_flag },
];

pub(super) fn no(invariant: &'static str, why: &str) -> Judgement {
    Judgement::new(invariant, Verdict::NotObservable(why.to_string()))
}

pub(super) fn judged(invariant: &'static str, verdict: Verdict) -> Judgement {
    Judgement::new(invariant, verdict)
}

/// The stop-path job: a group delay and service, a leader, a main task and a poststart
/// sidecar each with a delay and a service, and a poststop task.
pub(super) fn stop_path_job(ctx: &Ctx, id: String, count: u32) -> JobSpec {
    let d = ctx.delay_ns;
    let mut spec = JobSpec::new(
        id,
        count,
        vec![
            TaskSpec::new("leader", Role::Leader, d),
            TaskSpec::new("helper", Role::Main, d),
            TaskSpec::new("sidecar", Role::Sidecar, d),
            TaskSpec::new("cleanup", Role::Poststop, 0),
        ],
    );
    spec.group_delay_ns = d;
    spec.group_service = true;
    spec
}

pub(super) fn job_stop(ctx: &Ctx, job: &str, flag: bool) -> Result<(i64, Answer), String> {
    let query = if flag { "?no_shutdown_delay=true" } else { "" };
    let sent = now_ns();
    let answer = ctx
        .api
        .send("DELETE", &format!("/v1/job/{}{query}", escape(job)), None)?;
    if !answer.ok() {
        return Err(format!(
            "the stop was refused: {}",
            answer.into_ok().unwrap_err()
        ));
    }
    Ok((sent, answer))
}

pub(super) fn alloc_stop(ctx: &Ctx, alloc: &str, query: &str) -> Result<(i64, Answer), String> {
    let sent = now_ns();
    let answer = ctx.api.send(
        "PUT",
        &format!("/v1/allocation/{}/stop{query}", escape(alloc)),
        None,
    )?;
    Ok((sent, answer))
}

/// The index of a stop's write: its answer's `Index`, else its `X-Nomad-Index`.
pub(super) fn stop_index(answer: &Answer) -> u64 {
    answer.body["Index"].as_u64().unwrap_or(answer.index)
}

/// The job as stored now, and its versions' latest.
pub(super) fn stored_after(ctx: &Ctx, job: &str) -> Result<(Value, Option<Value>), String> {
    let now = ctx.api.get(&format!("/v1/job/{}", escape(job)))?;
    let versions = ctx.api.get(&format!("/v1/job/{}/versions", escape(job)))?;
    let latest = versions["Versions"]
        .as_array()
        .and_then(|v| v.iter().max_by_key(|j| j["Version"].as_u64().unwrap_or(0)))
        .cloned();
    Ok((now, latest))
}

// invariant: jobspec_unchanged
pub(super) fn jobspec_unchanged_by_stop(
    before: &Value,
    after: &Value,
    latest: Option<&Value>,
) -> Verdict {
    let mut parts = Vec::new();
    if after["Stop"].as_bool() != Some(true) {
        parts.push(Verdict::Violated(format!(
            "GET /v1/job shows Stop={} after the stop",
            after["Stop"]
        )));
    }
    for (what, job) in [
        ("GET /v1/job", Some(after)),
        ("the latest of /v1/job/:id/versions", latest),
    ] {
        let Some(job) = job else {
            parts.push(Verdict::NotObservable(format!("{what}: no version listed")));
            continue;
        };
        let differ = judge::spec_differences(before, job);
        parts.push(if differ.is_empty() {
            Verdict::Holds(format!(
                "{what}: the spec as before the stop (version {})",
                job["Version"]
            ))
        } else {
            Verdict::Violated(format!(
                "{what} after the stop differs from the job before it: {}",
                differ.join("; ")
            ))
        });
    }
    Verdict::all(parts)
}

pub(super) fn single_task_job(id: String, count: u32, delay_ns: i64) -> JobSpec {
    JobSpec::new(
        id,
        count,
        vec![TaskSpec::new("leader", Role::Leader, delay_ns)],
    )
}

/// A write's answer as Nomad's tests check it: an `EvalID` that is a UUIDv4, and
/// `X-Nomad-Index` > 0 equal to the body's `Index` where it has one.
pub(super) fn write_answer(what: &str, answer: &Answer) -> Verdict {
    if !answer.ok() {
        return Verdict::Violated(format!(
            "{what}: {} answered {}",
            answer.sent,
            super::api::shorten(&answer.text, 200)
        ));
    }
    let eval = answer.body["EvalID"].as_str().unwrap_or_default();
    if !is_uuid(eval) {
        return Verdict::Violated(format!("{what}: EvalID {eval:?} is not a UUID"));
    }
    if answer.index == 0 {
        return Verdict::Violated(format!("{what}: no X-Nomad-Index (or 0)"));
    }
    if let Some(index) = answer.body["Index"].as_u64() {
        if index != answer.index {
            return Verdict::Violated(format!(
                "{what}: body Index {index} but X-Nomad-Index {}",
                answer.index
            ));
        }
    }
    Verdict::Holds(format!(
        "{what}: EvalID {}, index {}",
        short(eval),
        answer.index
    ))
}

/// The shape Nomad's tests check (`must.UUIDv4`: 8-4-4-4-12 hex digits). Nomad's IDs are
/// 16 random bytes, their version and variant bits not set, so nothing more is asked.
pub fn is_uuid(id: &str) -> bool {
    let bytes = id.as_bytes();
    bytes.len() == 36
        && [8, 13, 18, 23].iter().all(|i| bytes[*i] == b'-')
        && bytes
            .iter()
            .enumerate()
            .all(|(i, b)| [8, 13, 18, 23].contains(&i) || b.is_ascii_hexdigit())
}

pub(super) fn transition_is(
    what: &str,
    alloc: &AllocView,
    migrate: bool,
    reschedule: bool,
    flag: bool,
) -> Verdict {
    let shown = (alloc.migrate, alloc.reschedule, alloc.flagged());
    if shown == (migrate, reschedule, flag) {
        Verdict::Holds(format!(
            "{what}: Migrate={migrate} Reschedule={reschedule} NoShutdownDelay={flag}"
        ))
    } else {
        Verdict::Violated(format!(
            "{what}: DesiredTransition shows Migrate={} Reschedule={} NoShutdownDelay={}, expected Migrate={migrate} Reschedule={reschedule} NoShutdownDelay={flag}",
            alloc.migrate, alloc.reschedule, observe::shown(alloc.no_shutdown_delay)
        ))
    }
}

pub(super) fn read_alloc(ctx: &Ctx, id: &str) -> Result<AllocView, String> {
    observe::alloc(ctx.api, id)?.ok_or_else(|| format!("allocation {id} is gone (404)"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn uuids_are_told_from_other_ids_by_their_shape() {
        assert!(super::is_uuid("0f8fad5b-d9cb-469f-a165-70867728950e"));
        // Nomad's: random bytes, no version or variant bits.
        assert!(super::is_uuid("0f8fad5b-d9cb-169f-c165-70867728950e"));
        assert!(!super::is_uuid("0f8fad5b-d9cb-469f-a165-70867728950"));
        assert!(!super::is_uuid("0f8fad5b_d9cb-469f-a165-70867728950e"));
        assert!(!super::is_uuid("0f8fad5b-d9cb-469f-a165-70867728950g"));
        assert!(!super::is_uuid(""));
    }
}
