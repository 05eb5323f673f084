//! Judging a stop from what it left behind: its delays as the times show them, the
//! services each kill signal found (the witness), the kill order from the task events,
//! completion, and where a stored job changed. Pure functions of what was read.

use super::api::{escape, Api};
use super::jobs::{JobSpec, Role};
use super::observe::{kinds, AllocView, Kill, Skew, Witnessed};
use super::verdict::{ms, Delay, DelaySeen, Verdict};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;

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
        let first_killing = alloc
            .tasks
            .values()
            .filter_map(|t| t.kill())
            .map(|k| k.killing)
            .min();
        let group_event = |kinds: &[&str]| {
            alloc
                .tasks
                .values()
                .filter_map(|t| {
                    t.events
                        .iter()
                        .rev()
                        .find(|e| kinds.contains(&e.kind.as_str()))
                })
                .map(|e| (e.time, e.kind.clone()))
                .min()
        };
        let began = group_events
            .then(|| group_event(&[kinds::GROUP_WAITING, kinds::GROUP_SKIPPING]))
            .flatten()
            .filter(|(time, _)| first_killing.is_some_and(|k| *time <= k));
        match (first_killing, began, skew) {
            (Some(killing), Some((time, kind)), _) => {
                let gap = killing - time;
                let told = if kind == kinds::GROUP_SKIPPING {
                    Some(Delay::Skipped)
                } else if group_event(&[kinds::GROUP_CUT_SHORT]).is_some_and(|(t, _)| t >= time) {
                    None
                } else {
                    Some(Delay::Waited)
                };
                let delay = DelaySeen::new(
                    format!("alloc {short} group delay ({kind} → first Killing)"),
                    spec.group_delay_ns,
                    gap,
                    gap,
                    alloc.flagged(),
                );
                seen.push(agreeing(delay, told));
            }
            (Some(killing), None, Some(skew)) if skew.width() < spec.group_delay_ns / 4 => {
                let (low, high) = skew.gap(stop_sent_ns, killing);
                seen.push(DelaySeen::new(
                    format!("alloc {short} group delay (stop request → first Killing)"),
                    spec.group_delay_ns,
                    low.max(0),
                    high.max(0),
                    alloc.flagged(),
                ));
            }
            (Some(_), None, Some(skew)) => unseen.push(Verdict::NotObservable(format!(
                "alloc {short} group delay: the clock of node {} is known to within {} only",
                short_node(&alloc.node),
                ms(skew.width())
            ))),
            (Some(_), None, None) => unseen.push(Verdict::NotObservable(format!(
                "alloc {short} group delay: node {}'s clock is not known",
                short_node(&alloc.node)
            ))),
            (None, _, _) => unseen.push(Verdict::NotObservable(format!(
                "alloc {short}: no Killing event to time the group delay by"
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

fn short_node(node: &str) -> &str {
    short(node)
}

/// Each kill signal the witnesses received found the task's services and its group's
/// deregistered.
pub fn prestop(
    spec: &JobSpec,
    alloc: &AllocView,
    from: i64,
    witnessed: &BTreeMap<&'static str, Result<Vec<Witnessed>, String>>,
    with_group: bool,
) -> Verdict {
    let short = short(&alloc.id);
    let mut parts = Vec::new();
    for task in spec.tasks.iter().filter(|t| t.role != Role::Poststop) {
        let mut watched = Vec::new();
        if task.service {
            watched.push(spec.task_service_name(task.name));
        }
        if with_group && spec.group_service {
            watched.push(spec.group_service_name());
        }
        if watched.is_empty() {
            continue;
        }
        let records = match witnessed.get(task.name) {
            Some(Ok(records)) => records,
            Some(Err(why)) => {
                parts.push(Verdict::NotObservable(format!(
                    "alloc {short} task {}: {why}",
                    task.name
                )));
                continue;
            }
            None => continue,
        };
        let signals: Vec<&Witnessed> = records
            .iter()
            .filter(|r| matches!(r, Witnessed::Signal { unix_ns, .. } if *unix_ns >= from))
            .collect();
        if signals.is_empty() {
            parts.push(Verdict::NotObservable(format!(
                "alloc {short} task {}: the witness recorded no kill signal",
                task.name
            )));
        }
        for signal in signals {
            let Witnessed::Signal {
                name,
                services,
                error,
                ..
            } = signal
            else {
                continue;
            };
            let Some(services) = services else {
                parts.push(Verdict::NotObservable(format!(
                    "alloc {short} task {}: the witness could not list the services at its {name}: {}",
                    task.name,
                    error.as_deref().unwrap_or("no answer")
                )));
                continue;
            };
            let listed: Vec<String> = watched
                .iter()
                .filter(|s| services.get(*s).copied().unwrap_or(0) > 0)
                .cloned()
                .collect();
            parts.push(if listed.is_empty() {
                Verdict::Holds(format!(
                    "alloc {short} task {}: at its {name}, {} not listed",
                    task.name,
                    watched.join(", ")
                ))
            } else {
                Verdict::Violated(format!(
                    "alloc {short} task {} received {name} while the server still listed {}",
                    task.name,
                    listed.join(", ")
                ))
            });
        }
    }
    Verdict::all(parts)
}

/// The leader died before any other task's kill began; main tasks before sidecars';
/// poststop tasks started after every other task had ended.
pub fn kill_order(spec: &JobSpec, alloc: &AllocView) -> Verdict {
    let short = short(&alloc.id);
    let mut parts = Vec::new();
    let tasks: Vec<_> = spec
        .tasks
        .iter()
        .map(|t| (t, alloc.tasks.get(t.name)))
        .collect();
    for (later, later_state) in &tasks {
        let begun = match later.role {
            Role::Leader => continue,
            Role::Poststop => later_state
                .and_then(|s| s.first_after(kinds::STARTED, 0))
                .map(|e| (e.time, "Started")),
            _ => later_state
                .and_then(|s| s.kill())
                .map(|k| (k.killing, "Killing")),
        };
        let Some((begun, event)) = begun else {
            parts.push(Verdict::NotObservable(format!(
                "alloc {short} task {}: no {} event",
                later.name,
                if later.role == Role::Poststop {
                    "Started"
                } else {
                    "Killing"
                }
            )));
            continue;
        };
        for (earlier, earlier_state) in tasks
            .iter()
            .filter(|(t, _)| t.role.stage() < later.role.stage())
        {
            let Some(ended) = earlier_state.and_then(|s| s.ended()) else {
                parts.push(Verdict::NotObservable(format!(
                    "alloc {short} task {}: no end event",
                    earlier.name
                )));
                continue;
            };
            parts.push(if ended <= begun {
                Verdict::Holds(format!("alloc {short}: {} ended {} before {}'s {event}", earlier.name, ms(begun - ended), later.name))
            } else {
                Verdict::Violated(format!(
                    "alloc {short}: task {} ({event} at {begun}) began {} before task {} ended (at {ended})",
                    later.name,
                    ms(ended - begun),
                    earlier.name
                ))
            });
        }
    }
    Verdict::all(parts)
}

/// The stopped allocations ended client-terminal and their services are gone.
pub fn stops_complete(
    api: &Api,
    spec: &JobSpec,
    allocs: &[AllocView],
    done: bool,
    waited: Duration,
) -> Result<Verdict, String> {
    if !done {
        let stuck: Vec<String> = allocs
            .iter()
            .filter(|a| !a.client_terminal())
            .map(|a| {
                format!(
                    "alloc {} still {} (desired {})",
                    short(&a.id),
                    a.client,
                    a.desired
                )
            })
            .collect();
        return Ok(Verdict::Violated(format!(
            "after {} s: {}",
            waited.as_secs(),
            stuck.join("; ")
        )));
    }
    let mut left = Vec::new();
    for name in spec.service_names() {
        let listed = api.get(&format!("/v1/service/{}", escape(&name)))?;
        for registration in listed.as_array().into_iter().flatten() {
            if let Some(alloc) = allocs
                .iter()
                .find(|a| registration["AllocID"] == a.id.as_str())
            {
                left.push(format!("{name} of alloc {}", short(&alloc.id)));
            }
        }
    }
    Ok(if left.is_empty() {
        Verdict::Holds(format!(
            "{} allocation(s) {}, no service left",
            allocs.len(),
            allocs
                .iter()
                .map(|a| a.client.as_str())
                .collect::<Vec<_>>()
                .join("/")
        ))
    } else {
        Verdict::Violated(format!(
            "terminal, yet still registered: {}",
            left.join(", ")
        ))
    })
}

/// The fields of a job a stop or start may change; all others must stay.
const VOLATILE: [&str; 13] = [
    "Stop",
    "Status",
    "StatusDescription",
    "Version",
    "ModifyIndex",
    "JobModifyIndex",
    "CreateIndex",
    "SubmitTime",
    "Stable",
    "Meta",
    "VersionTag",
    "UI",
    "Submission",
];

/// Where two stored jobs differ, but for the fields a stop or start changes.
pub fn spec_differences(before: &Value, after: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let strip = |job: &Value| {
        let mut job = job.clone();
        if let Some(object) = job.as_object_mut() {
            for key in VOLATILE {
                object.remove(key);
            }
        }
        job
    };
    differences("", &strip(before), &strip(after), &mut out);
    out
}

fn differences(path: &str, a: &Value, b: &Value, out: &mut Vec<String>) {
    if out.len() >= 8 {
        return;
    }
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for key in x.keys().chain(y.keys().filter(|k| !x.contains_key(*k))) {
                let (p, q) = (
                    x.get(key).unwrap_or(&Value::Null),
                    y.get(key).unwrap_or(&Value::Null),
                );
                differences(&format!("{path}.{key}"), p, q, out);
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                differences(&format!("{path}[{i}]"), p, q, out);
            }
        }
        _ if a != b => out.push(format!(
            "{path}: {} became {}",
            short_json(a),
            short_json(b)
        )),
        _ => {}
    }
}

fn short_json(value: &Value) -> String {
    super::api::shorten(&value.to_string(), 80)
}

pub fn short(id: &str) -> &str {
    &id[..id.len().min(8)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::observe::{Event, TaskView};
    use serde_json::json;

    fn task(events: &[(&str, i64)]) -> TaskView {
        TaskView {
            state: "dead".into(),
            events: events
                .iter()
                .map(|(kind, time)| Event {
                    kind: kind.to_string(),
                    time: *time,
                    exit_code: None,
                    signal: None,
                })
                .collect(),
            ..TaskView::default()
        }
    }

    fn stop_job() -> JobSpec {
        use crate::probe::jobs::TaskSpec;
        JobSpec::new(
            "j".into(),
            1,
            vec![
                TaskSpec::new("leader", Role::Leader, 0),
                TaskSpec::new("helper", Role::Main, 0),
                TaskSpec::new("sidecar", Role::Sidecar, 0),
                TaskSpec::new("cleanup", Role::Poststop, 0),
            ],
        )
    }

    fn alloc(tasks: [(&str, TaskView); 4]) -> AllocView {
        AllocView {
            id: "abcdef0123".into(),
            tasks: tasks.into_iter().map(|(n, t)| (n.to_string(), t)).collect(),
            ..AllocView::default()
        }
    }

    #[test]
    fn a_sidecar_killed_before_the_leader_ended_breaks_kill_order() {
        let ordered = alloc([
            ("leader", task(&[("Killing", 10), ("Terminated", 20)])),
            ("helper", task(&[("Killing", 20), ("Terminated", 30)])),
            ("sidecar", task(&[("Killing", 31), ("Terminated", 40)])),
            ("cleanup", task(&[("Started", 41), ("Terminated", 42)])),
        ]);
        assert_eq!(kill_order(&stop_job(), &ordered).word(), "holds");
        let early = alloc([
            ("leader", task(&[("Killing", 10), ("Terminated", 20)])),
            ("helper", task(&[("Killing", 20), ("Terminated", 30)])),
            ("sidecar", task(&[("Killing", 15), ("Terminated", 40)])),
            ("cleanup", task(&[("Started", 41), ("Terminated", 42)])),
        ]);
        let verdict = kill_order(&stop_job(), &early);
        assert!(
            verdict.is_violation() && verdict.detail().contains("task sidecar (Killing at 15)"),
            "{verdict:?}"
        );
        let no_poststop_start = alloc([
            ("leader", task(&[("Killing", 10), ("Terminated", 20)])),
            ("helper", task(&[("Killing", 20), ("Terminated", 30)])),
            ("sidecar", task(&[("Killing", 31), ("Terminated", 40)])),
            ("cleanup", task(&[])),
        ]);
        assert_eq!(
            kill_order(&stop_job(), &no_poststop_start).word(),
            "not observable"
        );
    }

    #[test]
    fn a_signal_that_found_a_service_listed_breaks_prestop_and_names_it() {
        let mut spec = stop_job();
        spec.group_service = true;
        spec.tasks.truncate(1);
        let view = alloc([
            ("leader", task(&[])),
            ("x", task(&[])),
            ("y", task(&[])),
            ("z", task(&[])),
        ]);
        let signal = |group: u64| Witnessed::Signal {
            unix_ns: 100,
            name: "SIGINT".into(),
            services: Some([("j-group".to_string(), group), ("j-leader".to_string(), 0)].into()),
            error: None,
        };
        let records = |r: Vec<Witnessed>| BTreeMap::from([("leader", Ok(r))]);
        assert_eq!(
            prestop(&spec, &view, 50, &records(vec![signal(0)]), true).word(),
            "holds"
        );
        let verdict = prestop(&spec, &view, 50, &records(vec![signal(1)]), true);
        assert!(
            verdict.is_violation() && verdict.detail().contains("j-group"),
            "{verdict:?}"
        );
        // The group's services are not the restart's business.
        assert_eq!(
            prestop(&spec, &view, 50, &records(vec![signal(1)]), false).word(),
            "holds"
        );
        // A signal before the request is not this kill's.
        assert_eq!(
            prestop(&spec, &view, 150, &records(vec![signal(1)]), true).word(),
            "not observable"
        );
        let unreadable = BTreeMap::from([("leader", Err("no witness".to_string()))]);
        assert_eq!(
            prestop(&spec, &view, 50, &unreadable, true).word(),
            "not observable"
        );
    }

    #[test]
    fn a_changed_delay_is_a_spec_difference_and_stop_fields_are_not() {
        let before = json!({"ID": "j", "Stop": false, "Version": 0, "TaskGroups": [{"ShutdownDelay": 5, "Tasks": [{"ShutdownDelay": 1}]}]});
        let stopped = json!({"ID": "j", "Stop": true, "Version": 1, "TaskGroups": [{"ShutdownDelay": 5, "Tasks": [{"ShutdownDelay": 1}]}]});
        assert!(spec_differences(&before, &stopped).is_empty());
        let rewritten = json!({"ID": "j", "Stop": true, "Version": 1, "TaskGroups": [{"ShutdownDelay": 5, "Tasks": [{"ShutdownDelay": 2}]}]});
        assert_eq!(
            spec_differences(&before, &rewritten),
            [".TaskGroups[0].Tasks[0].ShutdownDelay: 1 became 2"]
        );
    }

    fn delayed_job(group_delay_ns: i64, task_delay_ns: i64) -> JobSpec {
        use crate::probe::jobs::TaskSpec;
        let mut spec = JobSpec::new(
            "j".into(),
            1,
            vec![TaskSpec::new("leader", Role::Leader, task_delay_ns)],
        );
        spec.group_delay_ns = group_delay_ns;
        spec
    }

    fn one_task(events: &[(&str, i64)]) -> AllocView {
        AllocView {
            id: "abcdef0123".into(),
            node: "n1".into(),
            tasks: [("leader".to_string(), task(events))].into(),
            ..AllocView::default()
        }
    }

    const S: i64 = 1_000_000_000;

    #[test]
    fn a_delay_whose_events_and_times_disagree_is_unclear() {
        let spec = delayed_job(0, S);
        let none = BTreeMap::new();
        // The times say skipped, the events say a wait began and was not cut short.
        let alloc = one_task(&[
            ("Killing", 0),
            ("Waiting for shutdown delay", 1),
            ("Terminated", 5_000_000),
        ]);
        let (seen, _) = stop_delays(&spec, &alloc, 0, None, false, &none);
        assert_eq!(seen[0].how, Delay::Unclear, "{seen:?}");
        // Both say waited.
        let alloc = one_task(&[
            ("Killing", 0),
            ("Waiting for shutdown delay", 1),
            ("Terminated", S + 3),
        ]);
        assert_eq!(
            stop_delays(&spec, &alloc, 0, None, false, &none).0[0].how,
            Delay::Waited
        );
        // The times say waited, the events say skipped.
        let alloc = one_task(&[
            ("Killing", 0),
            ("Skipping shutdown delay", 1),
            ("Terminated", S + 3),
        ]);
        assert_eq!(
            stop_delays(&spec, &alloc, 0, None, false, &none).0[0].how,
            Delay::Unclear
        );
    }

    #[test]
    fn the_group_delay_is_timed_by_its_events_where_offered_else_across_the_clocks() {
        let spec = delayed_job(S, 0);
        let none = BTreeMap::new();
        let alloc = one_task(&[
            ("Waiting for group shutdown delay", 10 * S),
            ("Killing", 11 * S),
            ("Terminated", 11 * S + 5),
        ]);
        // With the extension, on the client's clock alone, whatever the probe's.
        let (seen, unseen) = stop_delays(&spec, &alloc, 0, None, true, &none);
        assert!(unseen.is_empty(), "{unseen:?}");
        assert_eq!((seen[0].how.clone(), seen[0].low), (Delay::Waited, S));
        // Without it, through the node's clock bound: the stop sent at 9.9 s probe time,
        // the client 0.1 s ahead, known within 20 ms.
        let skew = Skew {
            low: S / 10 - 10_000_000,
            high: S / 10 + 10_000_000,
        };
        let (seen, _) = stop_delays(
            &spec,
            &alloc,
            10 * S - S / 10 - S / 10,
            Some(skew),
            false,
            &none,
        );
        assert_eq!(seen[0].how, Delay::Waited, "{seen:?}");
        // A bound too wide to tell is not observable.
        let wide = Skew { low: 0, high: S };
        let (seen, unseen) = stop_delays(&spec, &alloc, 9 * S, Some(wide), false, &none);
        assert!(
            seen.is_empty() && unseen[0].word() == "not observable",
            "{unseen:?}"
        );
    }

    #[test]
    fn the_clock_bound_comes_from_an_event_between_a_request_and_its_sighting() {
        // The client's clock runs 1000 ahead: the event at 1105 (client) happened between
        // 100 (sent) and 130 (seen) on the probe's clock.
        let skew = Skew::from_event(1105, 100, 130);
        assert_eq!((skew.low, skew.high, skew.width()), (975, 1005, 30));
        // A stop sent at 200 (probe) and a Killing at 1700 (client): 495 to 525 later.
        assert_eq!(skew.gap(200, 1700), (495, 525));
    }
}
