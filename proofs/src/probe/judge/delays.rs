//! A stop's delays as the times show them — and the events, where they say otherwise.
//!
//! A task's own delay is timed on the client's clock alone: from its `Killing` event to
//! the kill signal as the witness received it; without the witness, to its `Terminated`
//! event (a task that ignores its signal then cannot be timed). Where a delay's own events
//! (`Skipping shutdown delay`, or a `Waiting for shutdown delay` not cut short) say
//! otherwise than its times, the delay is *unclear*: neither is trusted over the other.
//! Nomad has no event for the group delay, so it is timed from the stop request (the
//! probe's clock) to the first `Killing` (the client's), the two clocks related by
//! `Skew`, one per node: an allocation's first event happened after the probe sent the
//! registration and before the probe saw it. When that bound is wider than a quarter of
//! the delay, the group delay is *not observable*. Where the server advertises quiesce's
//! group-delay events, the gap runs from `Waiting for` or `Skipping group shutdown delay`
//! to the first `Killing`, on the client's clock alone.

use super::short;
use crate::probe::jobs::{JobSpec, Role};
use crate::probe::observe::{kinds, AllocView, Kill, Skew, Witnessed};
use crate::probe::verdict::{ms, Delay, DelaySeen, Verdict};
use std::collections::BTreeMap;

/// The witness's first kill signal at or after `from` (client clock).
pub fn signal_after(records: &[Witnessed], from: i64) -> Option<&Witnessed> {
    records
        .iter()
        .find(|r| matches!(r, Witnessed::Signal { unix_ns, .. } if *unix_ns >= from))
}

/// The delays of one allocation's stop, as the times show them. The group delay: with
/// quiesce's group-delay events (`group_events`), from the last `Waiting for`/`Skipping
/// group shutdown delay` to the first task's `Killing`, on the client's clock alone;
/// otherwise from the stop request, on the probe's clock, to the first `Killing`, through
/// `skew`, the bound on that node's clock. Each task's: from its `Killing` to its kill
/// signal as the witness recorded it, else to its end. Where a delay's events say
/// otherwise than its times, it is unclear.
pub fn stop_delays(
    spec: &JobSpec,
    alloc: &AllocView,
    stop_sent_ns: i64,
    skew: Option<Skew>,
    group_events: bool,
    witnessed: &BTreeMap<&'static str, Result<Vec<Witnessed>, String>>,
) -> (Vec<DelaySeen>, Vec<Verdict>) {
    let short = short(&alloc.id);
    let mut seen = Vec::new();
    let mut unseen = Vec::new();
    if spec.group_delay_ns > 0 {
        let (clock, events, why) = group_delay(spec, alloc, stop_sent_ns, skew, group_events);
        match (events, clock) {
            (Some(events), Some(clock)) if events.how == clock.how => seen.push(events),
            (Some(events), Some(clock)) if clock.how == Delay::Unclear => seen.push(events),
            (Some(events), Some(clock)) if events.how == Delay::Unclear => seen.push(clock),
            (Some(mut events), Some(clock)) => {
                events.what = format!("{}, but {}", events.told(), clock.told());
                events.how = Delay::Unclear;
                seen.push(events);
            }
            (Some(one), None) | (None, Some(one)) => seen.push(one),
            (None, None) => unseen.push(Verdict::NotObservable(format!(
                "alloc {short} group delay: {why}"
            ))),
        }
    }
    for task in spec
        .tasks
        .iter()
        .filter(|t| t.delay_ns > 0 && t.role != Role::Poststop)
    {
        let Some(kill) = alloc.tasks.get(task.name).and_then(|t| t.kill()) else {
            unseen.push(Verdict::NotObservable(format!(
                "alloc {short} task {}: no Killing event",
                task.name
            )));
            continue;
        };
        let signal = witnessed
            .get(task.name)
            .and_then(|r| r.as_ref().ok())
            .and_then(|r| signal_after(r, kill.killing));
        let what = format!("alloc {short} task {}", task.name);
        match (signal, kill.end) {
            (Some(Witnessed::Signal { unix_ns, .. }), _) => {
                let gap = unix_ns - kill.killing;
                seen.push(agreeing(
                    DelaySeen::new(
                        format!("{what} (Killing → signal received)"),
                        task.delay_ns,
                        gap,
                        gap,
                        alloc.flagged(),
                    ),
                    told_by_events(&kill),
                ));
            }
            (_, Some(end)) if !task.ignores_signal => {
                let gap = end - kill.killing;
                let delay = DelaySeen::new(
                    format!("{what} (Killing → Terminated)"),
                    task.delay_ns,
                    gap,
                    gap,
                    alloc.flagged(),
                );
                seen.push(agreeing(delay, told_by_events(&kill)));
            }
            _ => unseen.push(Verdict::NotObservable(format!(
                "{what}: its kill signal's time is not known"
            ))),
        }
    }
    (seen, unseen)
}

/// The group delay of one allocation's stop, read two ways: across the clocks (the stop
/// request, on the probe's clock, to the first `Killing` of this stop, on the client's,
/// through the node's `skew`), and, where quiesce's group-delay events are offered, on the
/// client's clock alone (the latest `Waiting for` / `Skipping group shutdown delay` before
/// that `Killing`, to it); and why neither could be had.
fn group_delay(
    spec: &JobSpec,
    alloc: &AllocView,
    stop_sent_ns: i64,
    skew: Option<Skew>,
    group_events: bool,
) -> (Option<DelaySeen>, Option<DelaySeen>, String) {
    let id = short(&alloc.id);
    let delay = spec.group_delay_ns;
    // Nothing of this stop's comes before the request (on the client's clock, at the least).
    let after = skew.map_or(i64::MIN, |s| stop_sent_ns + s.low);
    let events = || {
        alloc
            .tasks
            .values()
            .flat_map(|t| t.events.iter())
            .filter(|e| e.time >= after)
    };
    let Some(killing) = events()
        .filter(|e| e.kind == kinds::KILLING)
        .map(|e| e.time)
        .min()
    else {
        return (None, None, "no Killing event to time it by".into());
    };
    let mut why = String::new();
    let clock = match skew {
        Some(skew) if skew.width() < delay / 4 => {
            let (low, high) = skew.gap(stop_sent_ns, killing);
            Some(DelaySeen::new(
                format!("alloc {id} group delay (stop request → first Killing)"),
                delay,
                low.max(0),
                high.max(0),
                alloc.flagged(),
            ))
        }
        Some(skew) => {
            why = format!(
                "the clock of node {} is known to within {} only",
                short(&alloc.node),
                ms(skew.width())
            );
            None
        }
        None => {
            why = format!("node {}'s clock is not known", short(&alloc.node));
            None
        }
    };
    let began = events()
        .filter(|e| e.time <= killing)
        .filter(|e| e.kind == kinds::GROUP_WAITING || e.kind == kinds::GROUP_SKIPPING)
        .max_by_key(|e| e.time);
    let by_events = match began {
        Some(began) if group_events => {
            let told = if began.kind == kinds::GROUP_SKIPPING {
                Some(Delay::Skipped)
            } else if events().any(|e| {
                e.kind == kinds::GROUP_CUT_SHORT && (began.time..=killing).contains(&e.time)
            }) {
                None
            } else {
                Some(Delay::Waited)
            };
            let gap = killing - began.time;
            let seen = DelaySeen::new(
                format!("alloc {id} group delay ({} → first Killing)", began.kind),
                delay,
                gap,
                gap,
                alloc.flagged(),
            );
            Some(agreeing(seen, told))
        }
        _ => None,
    };
    (clock, by_events, why)
}

/// What a task's own events say of its delay: `Skipping shutdown delay`, skipped; a wait
/// begun and not cut short (quiesce's `Shutdown delay cut short`), waited; else nothing.
/// Nomad has no cut-short event, so a flag that ends its wait midway says nothing here.
fn told_by_events(kill: &Kill) -> Option<Delay> {
    if kill.skipping_event {
        Some(Delay::Skipped)
    } else if kill.waiting_event && !kill.cut_short_event {
        Some(Delay::Waited)
    } else {
        None
    }
}

/// A delay whose events and times disagree is unclear: neither is trusted over the other.
fn agreeing(mut delay: DelaySeen, told: Option<Delay>) -> DelaySeen {
    if let Some(told) = told {
        if delay.how != Delay::Unclear && delay.how != told {
            delay.what = format!("{} (its events say {told:?})", delay.what);
            delay.how = Delay::Unclear;
        }
    }
    delay
}
