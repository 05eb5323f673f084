//! The stop path's scenarios: a flagged and an unflagged job stop over the whole kill
//! order, alloc stops of two allocations (the flag scoped), a task that ignores its kill
//! signal, and (where advertised) the restart flag.

use super::super::api::{escape, now_ns, Answer};
use super::super::judge;
use super::super::judge::short;
use super::super::judge::stream;
use super::super::observe::{self, kinds, AllocView};
use super::super::run::{Ctx, Extensions, Running};
use super::super::stream::StreamView;
use super::super::verdict::{self, ms, names, Delay, DelaySeen, Judgement, Verdict};
use super::*;

/// Judges a stop of `running` (flagged or not), answered with `answer`, from what it left
/// behind; with what the event stream showed of it, if there is one.
pub(super) fn judge_stop(
    ctx: &Ctx,
    running: &Running,
    sent: i64,
    flag: bool,
    answer: &Answer,
) -> Result<(Vec<Judgement>, Option<StreamView>), String> {
    let request = &answer.sent.to_string();
    let index = stop_index(answer);
    let ids: Vec<String> = running.allocs.iter().map(|a| a.id.clone()).collect();
    let limit = ctx.stop_limit(&running.spec);
    let (allocs, done) = ctx.wait_terminal(&ids, limit)?;
    let streamed = ctx.streamed(&allocs);
    let mut delays = Vec::new();
    let mut unseen = Vec::new();
    let mut prestop = Vec::new();
    let mut order = Vec::new();
    for alloc in &allocs {
        let witnessed = ctx.witnessed(&running.spec, &alloc.id);
        let (seen, missing) = judge::stop_delays(
            &running.spec,
            alloc,
            sent,
            running.skew(alloc),
            ctx.extensions.has(Extensions::GROUP_DELAY_EVENTS),
            &witnessed,
        );
        delays.extend(seen);
        unseen.extend(missing);
        prestop.push(judge::prestop(&running.spec, alloc, sent, &witnessed, true));
        prestop.extend(streamed.as_ref().and_then(|view| {
            stream::deregistered_before_the_end(view, &running.spec, &alloc.id, index, true)
        }));
        order.push(judge::kill_order(&running.spec, alloc));
    }
    let with_unseen = |v: Verdict| {
        let mut parts = vec![v];
        parts.extend(unseen.iter().cloned());
        Verdict::all(parts)
    };
    let mut out = Vec::new();
    if flag {
        out.push(judged(
            names::FLAG_IS_HONOURED,
            with_unseen(verdict::flag_is_honoured(&delays, request)),
        ));
        let recorded: Vec<Verdict> = allocs
            .iter()
            .map(|a| {
                if a.flagged() {
                    Verdict::Holds(format!("alloc {} shows NoShutdownDelay=true", short(&a.id)))
                } else {
                    Verdict::Violated(format!(
                        "after {request}, alloc {} shows DesiredTransition.NoShutdownDelay={}",
                        short(&a.id),
                        observe::shown(a.no_shutdown_delay)
                    ))
                }
            })
            .chain(streamed.iter().flat_map(|view| {
                allocs
                    .iter()
                    .map(|a| stream::flag_with_stop(view, &a.id, index, request))
            }))
            .collect();
        out.push(judged(names::STOP_RECORDED, Verdict::all(recorded)));
    } else {
        out.push(no(names::FLAG_IS_HONOURED, "this stop carries no flag"));
    }
    out.push(judged(
        names::DELAY_SKIPPED_ONLY_WHEN_FLAGGED,
        with_unseen(verdict::delay_skipped_only_when_flagged(&delays)),
    ));
    out.push(judged(
        names::PRESTOP_HOOKS_ALWAYS_RUN,
        Verdict::all(prestop),
    ));
    out.push(judged(names::KILL_ORDER, Verdict::all(order)));
    out.push(judged(
        names::STOP_COMPLETES,
        judge::stop_completes(ctx.api, &running.spec, &allocs, done, limit)?,
    ));
    Ok((out, streamed))
}

/// The stop-path job with `count` allocations, run, stopped (flagged or not) and the stop
/// judged; with the job as stored after it (now, and its latest version).
/// The stop-path job with `count` allocations, run, stopped (flagged or not) and the stop
/// judged; with whether the stop stored the job unchanged, as read after it and as the
/// event stream showed the stop's write, and the job as stored after it.
fn stop_path_stopped(
    ctx: &mut Ctx,
    scenario: &str,
    count: u32,
    flag: bool,
) -> Result<(Running, Vec<Judgement>, Vec<Verdict>, Value), String> {
    let spec = stop_path_job(ctx, ctx.job_id(scenario, ""), count);
    let running = ctx.run_job(spec)?;
    let (sent, answer) = job_stop(ctx, &running.spec.id, flag)?;
    let (out, streamed) = judge_stop(ctx, &running, sent, flag, &answer)?;
    let (after, latest) = stored_after(ctx, &running.spec.id)?;
    let mut spec_verdicts = vec![jobspec_unchanged_by_stop(
        &running.stored,
        &after,
        latest.as_ref(),
    )];
    if let Some(view) = &streamed {
        spec_verdicts.push(
            match stream::job_at(view, &running.spec.id, stop_index(&answer)) {
                Ok(job) => stream_job_unchanged(&running.stored, &job),
                Err(why) => Verdict::NotObservable(why),
            },
        );
    }
    // Where the server streams: a replay opened now, after the writes, shows history as
    // each write left it. One that cannot show it is said, its findings left out (as a
    // live stream that did not catch up).
    if ctx.stream.is_some() {
        let registered = running.stored["JobModifyIndex"].as_u64().unwrap_or(0);
        let stop = stop_index(&answer);
        let replayed = ctx
            .replayed(registered, stop)
            .map(|view| replayed_job(&running.stored, &view, &running.spec.id, registered, stop));
        match replayed {
            Ok(Verdict::NotObservable(why)) | Err(why) => ctx
                .stream_missed
                .borrow_mut()
                .push(format!("a replay from index {registered}: {why}")),
            Ok(verdict) => spec_verdicts.push(verdict),
        }
    }
    Ok((running, out, spec_verdicts, after))
}

/// What a replay of the event stream, opened after the stop, shows of the job's
/// registration and of the stop: each as its write stored it — the job as it ran, not
/// stopped, then the same job stopped. A server that shows today's job for an old write
/// shows `Stop=true` at the registration.
fn replayed_job(
    before: &Value,
    view: &StreamView,
    job: &str,
    registered: u64,
    stop: u64,
) -> Verdict {
    let registration = match stream::job_at(view, job, registered) {
        Err(why) => Verdict::NotObservable(format!("the registration: {why}")),
        Ok(first) if first["Stop"].as_bool() == Some(true) => Verdict::Violated(format!(
            "a replay of the event stream shows the registration's write (index {registered}) \
             storing Stop=true: the job as it is now, not as that write stored it"
        )),
        Ok(first) => match judge::spec_differences(before, &first).as_slice() {
            [] => Verdict::Holds(format!(
                "a replay of the event stream shows the registration's write (index \
                 {registered}) storing the job as it ran"
            )),
            differ => Verdict::Violated(format!(
                "a replay of the event stream shows the registration's write (index \
                 {registered}) storing a job other than the one that ran: {}",
                differ.join("; ")
            )),
        },
    };
    let stopped = match stream::job_at(view, job, stop) {
        Ok(stored) => match stream_job_unchanged(before, &stored) {
            Verdict::Holds(why) => Verdict::Holds(format!("in a replay, {why}")),
            Verdict::Violated(why) => Verdict::Violated(format!("in a replay, {why}")),
            other => other,
        },
        Err(why) => Verdict::NotObservable(format!("the stop: {why}")),
    };
    Verdict::all(vec![registration, stopped])
}

// invariant: jobspec_unchanged
/// The job in the stop's own write, as the event stream showed it.
fn stream_job_unchanged(before: &Value, job: &Value) -> Verdict {
    let differ = judge::spec_differences(before, job);
    if job["Stop"].as_bool() != Some(true) {
        Verdict::Violated(format!(
            "the event stream shows the stop's write storing Stop={}",
            job["Stop"]
        ))
    } else if !differ.is_empty() {
        Verdict::Violated(format!(
            "the event stream shows the stop's write storing a changed job: {}",
            differ.join("; ")
        ))
    } else {
        Verdict::Holds(format!(
            "the event stream shows the stop's write storing version {} unchanged but for Stop",
            job["Version"]
        ))
    }
}

pub(super) fn job_stop_flagged(ctx: &mut Ctx) -> Result<Vec<Judgement>, String> {
    let (_, mut out, spec_verdicts, _) = stop_path_stopped(ctx, "job-stop-flagged", 2, true)?;
    out.push(judged(
        names::JOBSPEC_UNCHANGED,
        Verdict::all(spec_verdicts),
    ));
    Ok(out)
}

pub(super) fn job_stop_then_start(ctx: &mut Ctx) -> Result<Vec<Judgement>, String> {
    let (running, mut out, mut spec_verdicts, after) =
        stop_path_stopped(ctx, "job-stop", 1, false)?;
    // A start, as `nomad job start` and the UI make it: the stored stopped job, registered
    // again with `Stop=false` (here over the index it was read at, so that nothing else
    // could have changed it in between).
    let mut job = after.clone();
    job["Stop"] = false.into();
    let body = serde_json::json!({
        "Job": job,
        "EnforceIndex": true,
        "JobModifyIndex": after["JobModifyIndex"],
    });
    let path = format!("/v1/job/{}", escape(&running.spec.id));
    let answer = ctx.api.send("PUT", &path, Some(&body))?;
    if !answer.ok() {
        return Err(format!(
            "the start was refused: {}",
            answer.into_ok().unwrap_err()
        ));
    }
    let started = ctx
        .api
        .get(&format!("/v1/job/{}", escape(&running.spec.id)))?;
    let differ = judge::spec_differences(&running.stored, &started);
    spec_verdicts.push(if started["Stop"].as_bool() == Some(true) {
        Verdict::Violated("after the start, GET /v1/job still shows Stop=true".into())
    } else if !differ.is_empty() {
        Verdict::Violated(format!(
            "after the start the job differs from the job first run: {}",
            differ.join("; ")
        ))
    } else {
        Verdict::Holds(format!(
            "started again as version {}, the spec as first run",
            started["Version"]
        ))
    });
    out.push(judged(
        names::JOBSPEC_UNCHANGED,
        Verdict::all(spec_verdicts),
    ));
    Ok(out)
}

pub(super) fn alloc_stop_scoped(ctx: &mut Ctx) -> Result<Vec<Judgement>, String> {
    let spec = single_task_job(ctx.job_id("alloc-stop-scoped", ""), 2, ctx.delay_ns * 2);
    let running = ctx.run_job(spec)?;
    let (a, b) = (running.allocs[0].id.clone(), running.allocs[1].id.clone());
    let (sent_a, answer_a) = alloc_stop(ctx, &a, "?no_shutdown_delay=true")?;
    let (sent_b, answer_b) = alloc_stop(ctx, &b, "")?;
    for answer in [&answer_a, &answer_b] {
        if !answer.ok() {
            return Err(format!(
                "the stop was refused: {}",
                answer.clone().into_ok().unwrap_err()
            ));
        }
    }
    let limit = ctx.stop_limit(&running.spec);
    let (allocs, done) = ctx.wait_terminal(&[a.clone(), b.clone()], limit)?;
    let streamed = ctx.streamed(&allocs);
    let (index_a, index_b) = (stop_index(&answer_a), stop_index(&answer_b));
    let delays_of = |alloc: &AllocView, sent: i64| {
        let witnessed = ctx.witnessed(&running.spec, &alloc.id);
        let (seen, unseen) = judge::stop_delays(
            &running.spec,
            alloc,
            sent,
            running.skew(alloc),
            ctx.extensions.has(Extensions::GROUP_DELAY_EVENTS),
            &witnessed,
        );
        let prestop = judge::prestop(&running.spec, alloc, sent, &witnessed, false);
        (seen, unseen, prestop)
    };
    let (seen_a, unseen_a, prestop_a) = delays_of(&allocs[0], sent_a);
    let (seen_b, mut unseen_b, prestop_b) = delays_of(&allocs[1], sent_b);
    let mut prestop = vec![prestop_a, prestop_b];
    let mut flag_in_stream = Vec::new();
    if let Some(view) = &streamed {
        for (alloc, index) in [(&a, index_a), (&b, index_b)] {
            prestop.extend(stream::deregistered_before_the_end(
                view,
                &running.spec,
                alloc,
                index,
                false,
            ));
        }
        flag_in_stream.push(stream::flag_with_stop(
            view,
            &a,
            index_a,
            &answer_a.sent.to_string(),
        ));
        unseen_b.push(stream::never_flagged(view, &b));
    }
    let with = |v: Verdict, unseen: &[Verdict]| {
        let mut parts = vec![v];
        parts.extend(unseen.iter().cloned());
        Verdict::all(parts)
    };
    let recorded = Verdict::all(
        allocs
            .iter()
            .map(|alloc| {
                if alloc.migrate {
                    Verdict::Holds(format!("alloc {} shows Migrate=true", short(&alloc.id)))
                } else {
                    Verdict::Violated(format!(
                        "alloc {} was stopped, yet shows DesiredTransition.Migrate=false",
                        short(&alloc.id)
                    ))
                }
            })
            .chain(flag_in_stream)
            .chain([if allocs[0].flagged() {
                Verdict::Holds(format!("alloc {} shows NoShutdownDelay=true", short(&a)))
            } else {
                Verdict::Violated(format!(
                    "after {}, alloc {} shows NoShutdownDelay={}",
                    answer_a.sent,
                    short(&a),
                    observe::shown(allocs[0].no_shutdown_delay)
                ))
            }])
            .collect(),
    );
    let mut skipped = seen_a.clone();
    skipped.extend(seen_b.iter().cloned());
    Ok(vec![
        judged(
            names::FLAG_IS_HONOURED,
            with(
                verdict::flag_is_honoured(&seen_a, &answer_a.sent.to_string()),
                &unseen_a,
            ),
        ),
        judged(
            names::FLAG_SCOPED,
            with(
                verdict::flag_scoped(short(&b), allocs[1].flagged(), &seen_b),
                &unseen_b,
            ),
        ),
        judged(
            names::DELAY_SKIPPED_ONLY_WHEN_FLAGGED,
            verdict::delay_skipped_only_when_flagged(&skipped),
        ),
        judged(names::PRESTOP_HOOKS_ALWAYS_RUN, Verdict::all(prestop)),
        judged(names::STOP_RECORDED, recorded),
        judged(
            names::STOP_COMPLETES,
            judge::stop_completes(ctx.api, &running.spec, &allocs, done, limit)?,
        ),
    ])
}

/// How much earlier than the kill timeout after the witness received its signal the task's
/// `Terminated` event may be stamped and still count as respecting it: a client may stamp
/// it with its kill timer's deadline, counted from when it *sent* the signal, before the
/// task received it. A SIGKILL sent with the signal, or anywhere well inside the timeout,
/// still shows.
const KILL_TIMEOUT_SLACK_NS: i64 = 50_000_000;

// invariant: kill_timeout_respected
pub(super) fn kill_timeout(ctx: &mut Ctx) -> Result<Vec<Judgement>, String> {
    if ctx.tasks.witness().is_none() {
        let why = format!(
            "needs the witness, to ignore its kill signal and say when it came ({})",
            ctx.tasks.no_witness_reason()
        );
        return Ok(vec![
            no(names::KILL_TIMEOUT_RESPECTED, &why),
            no(names::FLAG_IS_HONOURED, &why),
        ]);
    }
    let timeout = (ctx.delay_ns * 2).max(1_000_000_000);
    let mut spec = single_task_job(ctx.job_id("kill-timeout", ""), 1, ctx.delay_ns);
    spec.tasks[0].ignores_signal = true;
    spec.tasks[0].kill_timeout_ns = Some(timeout);
    let running = ctx.run_job(spec)?;
    let (sent, answer) = job_stop(ctx, &running.spec.id, true)?;
    let (mut out, _) = judge_stop(ctx, &running, sent, true, &answer)?;
    out.retain(|j| matches!(j.invariant, names::FLAG_IS_HONOURED | names::STOP_COMPLETES));
    let alloc =
        observe::alloc(ctx.api, &running.allocs[0].id)?.ok_or("the allocation disappeared")?;
    let witnessed = ctx.witnessed(&running.spec, &alloc.id);
    let task = alloc.tasks.get("leader").and_then(|t| t.kill());
    let verdict = match (witnessed.get("leader"), task) {
        (Some(Ok(records)), Some(kill)) => {
            match (judge::signal_after(records, kill.killing), kill.end) {
                (Some(observe::Witnessed::Signal { unix_ns, name, .. }), Some(end)) => {
                    let gap = end - unix_ns;
                    let killed = kill.end_signal == Some(9);
                    if gap < timeout - KILL_TIMEOUT_SLACK_NS {
                        Verdict::Violated(format!(
                        "the task received {name} and ended (signal {:?}) {} later, within its {} kill timeout",
                        kill.end_signal,
                        ms(gap),
                        ms(timeout)
                    ))
                    } else if !killed {
                        Verdict::NotObservable(format!("the task ended {} after {name}, but its Terminated event shows signal {:?}, not SIGKILL", ms(gap), kill.end_signal))
                    } else {
                        Verdict::Holds(format!(
                            "{name} received, SIGKILL's end {} later (kill timeout {})",
                            ms(gap),
                            ms(timeout)
                        ))
                    }
                }
                _ => Verdict::NotObservable(
                    "the witness recorded no kill signal, or the task no end".into(),
                ),
            }
        }
        (Some(Err(why)), _) => Verdict::NotObservable(why.clone()),
        _ => Verdict::NotObservable("the task has no Killing event".into()),
    };
    out.push(judged(names::KILL_TIMEOUT_RESPECTED, verdict));
    Ok(out)
}

pub(super) fn restart(ctx: &Ctx, alloc: &str, flag: bool) -> Result<(i64, Answer), String> {
    let body = serde_json::json!({"TaskName": "leader", "NoShutdownDelay": flag});
    let sent = now_ns();
    let answer = ctx.api.send(
        "PUT",
        &format!("/v1/client/allocation/{}/restart", escape(alloc)),
        Some(&body),
    )?;
    if !answer.ok() {
        return Err(format!(
            "the restart was refused: {}",
            answer.into_ok().unwrap_err()
        ));
    }
    Ok((sent, answer))
}

pub(super) fn restart_flag(ctx: &mut Ctx) -> Result<Vec<Judgement>, String> {
    if !ctx.extensions.has(Extensions::RESTART_FLAG) {
        let why = "the server does not advertise quiesce's restart flag (Nomad's restart request has no NoShutdownDelay)";
        return Ok(vec![
            no(names::RESTART_FLAG_ONE_SHOT, why),
            no(names::FLAG_IS_HONOURED, why),
        ]);
    }
    let delay = ctx.delay_ns * 2;
    let mut spec = single_task_job(ctx.job_id("restart-flag", ""), 1, delay);
    spec.group_service = true;
    let running = ctx.run_job(spec)?;
    let alloc = running.allocs[0].id.clone();
    let mut gaps = Vec::new();
    let mut prestop = Vec::new();
    for (round, flag) in [(1u64, true), (2, false)] {
        let (sent, answer) = restart(ctx, &alloc, flag)?;
        let view = ctx.wait_until(
            &format!("restart {round} to run the task again"),
            ctx.stop_limit(&running.spec),
            || {
                let view = read_alloc(ctx, &alloc)?;
                let task = view.tasks.get("leader").cloned().unwrap_or_default();
                Ok((task.restarts >= round && task.state == "running").then_some(view))
            },
        )?;
        let task = &view.tasks["leader"];
        let signaled = task
            .events
            .iter()
            .rev()
            .find(|e| e.kind == kinds::RESTART_SIGNALED)
            .map(|e| e.time);
        let end = signaled
            .and_then(|s| task.first_after(kinds::TERMINATED, s))
            .map(|e| e.time);
        let witnessed = ctx.witnessed(&running.spec, &alloc);
        prestop.push(judge::prestop(
            &running.spec,
            &view,
            sent,
            &witnessed,
            false,
        ));
        let what = format!("restart {round} ({})", answer.sent);
        gaps.push(match (signaled, end) {
            (Some(s), Some(e)) => Ok(DelaySeen::new(
                format!("{what}: Restart Signaled → Terminated"),
                delay,
                e - s,
                e - s,
                flag,
            )),
            _ => Err(Verdict::NotObservable(format!(
                "{what}: no Restart Signaled and Terminated events"
            ))),
        });
    }
    let verdict_of = |seen: &Result<DelaySeen, Verdict>, want: Delay| match seen {
        Ok(seen) if seen.how == want => Verdict::Holds(seen.told()),
        Ok(seen) if seen.how == Delay::Unclear => Verdict::NotObservable(seen.told()),
        Ok(seen) => Verdict::Violated(seen.told()),
        Err(v) => v.clone(),
    };
    Ok(vec![
        judged(
            names::FLAG_IS_HONOURED,
            verdict_of(&gaps[0], Delay::Skipped),
        ),
        judged(
            names::RESTART_FLAG_ONE_SHOT,
            verdict_of(&gaps[1], Delay::Waited),
        ),
        judged(names::PRESTOP_HOOKS_ALWAYS_RUN, Verdict::all(prestop)),
    ])
}

#[cfg(test)]
mod tests {
    use super::super::super::stream::StreamEvent;
    use super::*;
    use serde_json::json;

    fn job_event(index: u64, stop: bool, delay: i64) -> StreamEvent {
        StreamEvent {
            index,
            topic: "Job".into(),
            kind: "JobRegistered".into(),
            record: json!({"ID": "j", "Stop": stop, "Version": index,
                           "TaskGroups": [{"ShutdownDelay": delay}]}),
            received_ns: 0,
        }
    }

    #[test]
    fn a_replay_must_show_each_write_as_it_stored_the_job() {
        let before = json!({"ID": "j", "Stop": false, "TaskGroups": [{"ShutdownDelay": 5}]});
        let judge = |events| {
            let view = StreamView {
                events,
                ended: None,
            };
            replayed_job(&before, &view, "j", 3, 9)
        };
        // As each write left it: the job as it ran, then stopped and otherwise the same.
        let found = judge(vec![job_event(3, false, 5), job_event(9, true, 5)]);
        assert_eq!(found.word(), "holds", "{found:?}");
        // Today's job shown for the registration: what a journal without copies shows.
        let found = judge(vec![job_event(3, true, 5), job_event(9, true, 5)]);
        assert!(
            found.is_violation() && found.detail().contains("as it is now"),
            "{found:?}"
        );
        // The stop's write storing a changed job.
        let found = judge(vec![job_event(3, false, 5), job_event(9, true, 0)]);
        assert!(
            found.is_violation() && found.detail().contains("in a replay"),
            "{found:?}"
        );
        // The registration not replayed (fallen out of a server's buffer): not observable.
        assert_eq!(judge(vec![job_event(9, true, 5)]).word(), "not observable");
    }
}
