//! Nomad's own tests, recast as black-box scenarios over the API
//! (`reference/nomad-tests-and-clients.md` §1): `TestAllocStop_Run` and
//! `TestAllocations_Stop`, `TestJobs_Deregister`, the flag's values, `TestOverlap`.

use super::super::api::{escape, now_ns};
use super::super::judge::short;
use super::super::observe;
use super::super::run::Ctx;
use super::super::verdict::{ms, names, Delay, DelaySeen, Judgement, Verdict};
use super::*;

pub(super) fn nomad_alloc_stop(ctx: &mut Ctx) -> Result<Vec<Judgement>, String> {
    let service = ctx.run_job(single_task_job(
        ctx.job_id("nomad-alloc-stop", "-service"),
        2,
        0,
    ))?;
    let mut batch_spec = single_task_job(ctx.job_id("nomad-alloc-stop", "-batch"), 1, 0);
    batch_spec.batch = true;
    batch_spec.tasks[0].service = false;
    let batch = ctx.run_job(batch_spec)?;
    let (a, b, c) = (
        &service.allocs[0].id,
        &service.allocs[1].id,
        &batch.allocs[0].id,
    );
    let mut parts = Vec::new();
    let (_, plain) = alloc_stop(ctx, a, "")?;
    parts.push(write_answer("alloc stop", &plain));
    let (_, flagged) = alloc_stop(ctx, b, "?no_shutdown_delay=true")?;
    parts.push(write_answer("alloc stop ?no_shutdown_delay=true", &flagged));
    // `nomad alloc stop` adds reschedule=true for a batch job.
    let (_, rescheduled) = alloc_stop(ctx, c, "?reschedule=true")?;
    parts.push(write_answer(
        "batch alloc stop ?reschedule=true",
        &rescheduled,
    ));
    parts.push(transition_is(
        "service alloc stopped plainly",
        &read_alloc(ctx, a)?,
        true,
        false,
        false,
    ));
    parts.push(transition_is(
        "service alloc stopped with the flag",
        &read_alloc(ctx, b)?,
        true,
        false,
        true,
    ));
    let batch_view = read_alloc(ctx, c)?;
    // `reschedule` on an alloc stop is Nomad 1.11's (#26961; 1.10.6 and 1.8.18 Enterprise).
    let maybe_before_reschedule = !ctx.quiesce && ctx.nomad_version.is_none_or(|v| v < (1, 11));
    parts.push(if maybe_before_reschedule && !batch_view.reschedule {
        Verdict::NotObservable(format!(
            "batch alloc stopped with reschedule: Reschedule not shown, and Nomad {} may predate \
             alloc stop's reschedule (1.11)",
            ctx.nomad_version
                .map_or("of unknown version".to_string(), |(a, b)| format!(
                    "{a}.{b}"
                ))
        ))
    } else {
        transition_is(
            "batch alloc stopped with reschedule",
            &batch_view,
            true,
            true,
            false,
        )
    });
    let missing = "5bd3e4c1-0000-4000-8000-000000000000";
    let (_, unknown) = alloc_stop(ctx, missing, "")?;
    parts.push(if unknown.ok() {
        Verdict::Violated(format!(
            "{} was accepted for an allocation that does not exist",
            unknown.sent
        ))
    } else {
        Verdict::Holds(format!(
            "an unknown allocation's stop answered {}",
            unknown.status
        ))
    });
    let plain_now = read_alloc(ctx, a)?;
    Ok(vec![
        judged(names::STOP_RECORDED, Verdict::all(parts)),
        judged(
            names::FLAG_SCOPED,
            if plain_now.flagged() {
                Verdict::Violated(format!(
                    "alloc {} shows NoShutdownDelay after another allocation's flagged stop",
                    short(a)
                ))
            } else {
                Verdict::Holds(format!(
                    "alloc {} unflagged beside the flagged {}",
                    short(a),
                    short(b)
                ))
            },
        ),
    ])
}

pub(super) fn nomad_deregister(ctx: &mut Ctx) -> Result<Vec<Judgement>, String> {
    let mut parts = Vec::new();
    let nope = ctx.job_id("nomad-deregister", "-nope");
    let answer = ctx.api.send(
        "DELETE",
        &format!("/v1/job/{}?purge=false", escape(&nope)),
        None,
    )?;
    parts.push(if answer.ok() {
        Verdict::Holds(format!("stopping an unknown job answered {}", answer.status))
    } else {
        Verdict::NotObservable(format!(
            "stopping an unknown job answered {} (Nomad's TestJobs_Deregister expects no error; the model has no unknown jobs)",
            answer.status
        ))
    });
    let long = ctx.delay_ns * 4;
    let running = ctx.run_job(single_task_job(ctx.job_id("nomad-deregister", ""), 1, long))?;
    let id = running.spec.id.clone();
    let (_, first) = job_stop(ctx, &id, false)?;
    parts.push(write_answer("the first stop", &first));
    let alloc = running.allocs[0].id.clone();
    ctx.wait_until("the task's delay to begin", ctx.patience, || {
        Ok(read_alloc(ctx, &alloc)?
            .tasks
            .get("leader")
            .and_then(|t| t.kill())
            .map(|_| ()))
    })?;
    let job = ctx.api.get(&format!("/v1/job/{}", escape(&id)))?;
    parts.push(if job["Stop"].as_bool() == Some(true) {
        Verdict::Holds("the stopped job is still readable, Stop=true".into())
    } else {
        Verdict::Violated(format!(
            "after the stop, GET /v1/job shows Stop={}",
            job["Stop"]
        ))
    });
    // Read once more just before the flagged stop: a task still in its delay here ended
    // after this moment, whatever the clocks say (see below).
    let read_sent = now_ns();
    let in_delay_before = read_alloc(ctx, &alloc)?
        .tasks
        .get("leader")
        .and_then(|t| t.kill())
        .is_some_and(|kill| kill.end.is_none());
    let (second_sent, second) = job_stop(ctx, &id, true)?;
    parts.push(write_answer(
        "the second, flagged stop of the stopped job",
        &second,
    ));
    let (e1, e2) = (
        first.body["EvalID"].as_str(),
        second.body["EvalID"].as_str(),
    );
    parts.push(if e1 != e2 && second.index > first.index {
        Verdict::Holds("the second stop made a new evaluation at a higher index".into())
    } else {
        Verdict::Violated(format!(
            "the second stop answered EvalID {e2:?} index {} after {e1:?} index {}",
            second.index, first.index
        ))
    });
    let (allocs, done) =
        ctx.wait_terminal(std::slice::from_ref(&alloc), ctx.stop_limit(&running.spec))?;
    let view = &allocs[0];
    let honoured = match (
        view.tasks.get("leader").and_then(|t| t.kill()),
        running.skew(view),
    ) {
        (Some(kill), Some(skew)) => match kill.end {
            None => Verdict::NotObservable("the task has no end event".into()),
            // The task may have ended before the flagged stop was sent, on the client's
            // clock (the skew's bound is loose by the scheduling latency it was measured
            // across). It was still in its delay when the probe read it just before: if it
            // ended well inside the delay, on the client's own clock, the rest was not
            // waited — nothing but the flagged stop came between.
            Some(end) if end <= second_sent + skew.high => {
                let into = end - kill.killing;
                if in_delay_before && into < long / 2 {
                    Verdict::Holds(format!(
                        "the task was still in its delay when read {} before the flagged stop \
                         was sent, and ended {} into its {} delay (clocks too close to order the \
                         end and the stop)",
                        ms(second_sent - read_sent),
                        ms(into),
                        ms(long)
                    ))
                } else {
                    Verdict::NotObservable(format!(
                        "the task may have ended before the flagged stop was sent ({} into its \
                         {} delay{})",
                        ms(into),
                        ms(long),
                        if in_delay_before {
                            ""
                        } else {
                            "; no longer in it when read just before"
                        }
                    ))
                }
            }
            Some(end) => {
                let rest = long - (second_sent + skew.high - kill.killing);
                if rest < long / 2 || rest < 4 * skew.width() {
                    Verdict::NotObservable(format!(
                        "too little of the delay was left when the flagged stop was sent ({} of {})",
                        ms(rest),
                        ms(long)
                    ))
                } else {
                    let (low, high) = skew.gap(second_sent, end);
                    let seen = DelaySeen::new(
                        format!(
                            "alloc {} task leader, from the flagged stop to its end, the rest of its delay",
                            short(&alloc)
                        ),
                        rest,
                        low.max(0),
                        high.max(0),
                        view.flagged(),
                    );
                    match seen.how {
                        Delay::Waited => Verdict::Violated(format!(
                            "after {}, the rest of the delay was waited: {}",
                            second.sent,
                            seen.told()
                        )),
                        Delay::Skipped => Verdict::Holds(format!(
                            "the delay in progress was cut short: {}",
                            seen.told()
                        )),
                        Delay::Unclear => Verdict::NotObservable(seen.told()),
                    }
                }
            }
        },
        _ => Verdict::NotObservable("no Killing event, or the node's clock not known".into()),
    };
    let flag_shown = if view.flagged() {
        Verdict::Holds("the flag reached the allocation".into())
    } else {
        Verdict::Violated(format!(
            "after {}, the allocation shows NoShutdownDelay={}",
            second.sent,
            observe::shown(view.no_shutdown_delay)
        ))
    };
    parts.push(flag_shown);
    let complete = judge::stop_completes(
        ctx.api,
        &running.spec,
        &allocs,
        done,
        ctx.stop_limit(&running.spec),
    )?;
    let (_, purge) = {
        let sent = now_ns();
        (
            sent,
            ctx.api.send(
                "DELETE",
                &format!("/v1/job/{}?purge=true", escape(&id)),
                None,
            )?,
        )
    };
    parts.push(write_answer("the purge of the stopped job", &purge));
    let e3 = purge.body["EvalID"].as_str();
    if e3 == e2 || e3 == e1 {
        parts.push(Verdict::Violated(format!(
            "the purge answered an EvalID already given: {e3:?}"
        )));
    }
    let listed = ctx.api.get(&format!("/v1/jobs?prefix={}", escape(&id)))?;
    parts.push(
        if listed
            .as_array()
            .is_some_and(|l| l.iter().any(|j| j["ID"] == id.as_str()))
        {
            Verdict::Violated(format!("after the purge, GET /v1/jobs still lists {id}"))
        } else {
            Verdict::Holds("after the purge the job is not listed".into())
        },
    );
    Ok(vec![
        judged(names::STOP_RECORDED, Verdict::all(parts)),
        judged(names::FLAG_IS_HONOURED, honoured),
        judged(names::STOP_COMPLETES, complete),
    ])
}

pub(super) fn flag_values(ctx: &mut Ctx) -> Result<Vec<Judgement>, String> {
    let running = ctx.run_job(single_task_job(ctx.job_id("flag-values", ""), 5, 0))?;
    let mut parts = Vec::new();
    let garbage = &running.allocs[4].id;
    let (_, refused) = alloc_stop(ctx, garbage, "?no_shutdown_delay=maybe")?;
    let after = read_alloc(ctx, garbage)?;
    parts.push(if refused.ok() {
        Verdict::Violated(format!("{} was accepted", refused.sent))
    } else if after.desired != "run" || after.migrate || after.no_shutdown_delay.is_some_and(|f| f)
    {
        Verdict::Violated(format!(
            "{} answered {}, yet changed the allocation (desired {}, Migrate={})",
            refused.sent, refused.status, after.desired, after.migrate
        ))
    } else {
        Verdict::Holds(format!(
            "no_shutdown_delay=maybe answered {} and changed nothing",
            refused.status
        ))
    });
    for (alloc, value, flagged) in [
        (0, "true", true),
        (1, "false", false),
        (2, "1", true),
        (3, "0", false),
    ] {
        let id = &running.allocs[alloc].id;
        let (_, answer) = alloc_stop(ctx, id, &format!("?no_shutdown_delay={value}"))?;
        parts.push(write_answer(&format!("no_shutdown_delay={value}"), &answer));
        parts.push(transition_is(
            &format!("no_shutdown_delay={value}"),
            &read_alloc(ctx, id)?,
            true,
            false,
            flagged,
        ));
    }
    Ok(vec![judged(names::STOP_RECORDED, Verdict::all(parts))])
}

pub(super) fn overlap(ctx: &mut Ctx) -> Result<Vec<Judgement>, String> {
    let held = ctx.delay_ns * 3;
    let base = 40_000 + (now_ns().rem_euclid(9_000) as u16);
    let mut halves = Vec::new();
    let mut honoured = Vec::new();
    for (half, flag) in [("-held", false), ("-freed", true)] {
        let port = base + u16::from(flag);
        let mut first = single_task_job(ctx.job_id("nomad-overlap", half), 1, held);
        first.tasks[0].service = false;
        first.static_port = Some(port);
        let running = ctx.run_job(first)?;
        let alloc = running.allocs[0].id.clone();
        let (sent, answer) = job_stop(ctx, &running.spec.id, flag)?;
        if !flag {
            // TestOverlap: the old allocation is stopped but its client still runs it (in
            // its delay Nomad shows the task, and so the allocation, as pending).
            ctx.wait_until(
                "the allocation desired stop, not yet ended",
                ctx.patience,
                || {
                    let view = read_alloc(ctx, &alloc)?;
                    Ok((view.desired == "stop" && !view.client_terminal()).then_some(()))
                },
            )?;
        }
        let mut second = single_task_job(ctx.job_id("nomad-overlap", &format!("{half}-2")), 1, 0);
        second.tasks[0].service = false;
        second.static_port = Some(port);
        second.node = Some(running.allocs[0].node.clone());
        ctx.register(&second)?;
        let ended_before = read_alloc(ctx, &alloc)?.client_terminal();
        let limit = ctx.stop_limit(&running.spec);
        // Until the second job runs: was it ever placed while the old allocation ran? The
        // new job is read first: an old allocation, once ended, stays ended.
        let mut overlapped = None;
        let mut placed: Option<(i64, i64)> = None;
        let mut last_unplaced = sent;
        ctx.wait_until(
            &format!("job {} running once port {port} is free", second.id),
            limit,
            || {
                let new = observe::job_allocs(ctx.api, &second.id)?;
                let polled = now_ns();
                let old = read_alloc(ctx, &alloc)?;
                let Some(new_alloc) = new.iter().find(|a| a.desired == "run") else {
                    last_unplaced = polled;
                    return Ok(None);
                };
                placed.get_or_insert((last_unplaced, polled));
                if !old.client_terminal() && overlapped.is_none() {
                    overlapped = Some(format!(
                    "alloc {} of {} was placed on port {port} while alloc {} had not ended ({})",
                    short(&new_alloc.id),
                    second.id,
                    short(&alloc),
                    old.client
                ));
                }
                Ok((new_alloc.client == "running").then_some(()))
            },
        )?;
        let (not_yet, seen_placed) = placed.unwrap_or((sent, sent));
        let verdict = match (overlapped, flag) {
            (Some(what), _) => Verdict::Violated(what),
            (None, false) if ended_before => Verdict::NotObservable(format!(
                "port {port}: the stopping allocation had ended before the second job was registered"
            )),
            (None, false) => Verdict::Holds(format!(
                "port {port}: the second job was placed only once the stopping allocation had ended"
            )),
            (None, true) => Verdict::Holds(format!(
                "port {port}: the second job was placed {} after the flagged stop",
                ms(seen_placed - sent)
            )),
        };
        halves.push(verdict);
        if flag {
            let seen = DelaySeen::new(
                format!(
                    "port {port} held after {} (until the second job was placed)",
                    answer.sent
                ),
                held,
                (not_yet - sent).max(0),
                seen_placed - sent,
                true,
            );
            honoured.push(match seen.how {
                Delay::Waited => Verdict::Violated(format!(
                    "the flagged stop kept the port for its delay: {}",
                    seen.told()
                )),
                Delay::Skipped => Verdict::Holds(seen.told()),
                Delay::Unclear => Verdict::NotObservable(seen.told()),
            });
        }
    }
    Ok(vec![
        judged(names::RESOURCES_HELD, Verdict::all(halves)),
        judged(names::FLAG_IS_HONOURED, Verdict::all(honoured)),
    ])
}
