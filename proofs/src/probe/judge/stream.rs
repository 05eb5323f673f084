//! What the event stream shows of a stop, in the server's own order of its writes: the
//! flag written with the stop (never after the allocation was set to stop), every service
//! deregistered before the server heard its task had ended, and the job as the stop stored
//! it. Each is a reading polling cannot give: two reads can miss a state in between.
//!
//! One more reading: an allocation nobody flagged is never shown flagged, even for one
//! write (`flag_scoped`). A deregistration the stream shows before its task's end does not
//! time it against the kill signal, so the stream never makes `prestop_hooks_always_run`
//! hold by itself: that is the witness's.

use super::super::jobs::{JobSpec, Role};
use super::super::stream::{StreamEvent, StreamView};
use super::super::verdict::Verdict;
use super::short;
use serde_json::Value;

fn alloc_events<'a>(view: &'a StreamView, alloc: &'a str) -> impl Iterator<Item = &'a StreamEvent> {
    view.events
        .iter()
        .filter(move |e| e.topic == "Allocation" && e.record["ID"] == alloc)
}

fn ended(view: &StreamView) -> String {
    view.ended
        .as_deref()
        .map_or(String::new(), |why| format!(" (the stream ended: {why})"))
}

/// A flagged stop answered at `stop_index`: the stream must show the allocation flagged in
/// that write (or before), and never set to stop before it was flagged.
pub fn flag_with_stop(view: &StreamView, alloc: &str, stop_index: u64, request: &str) -> Verdict {
    let short = short(alloc);
    let flagged = alloc_events(view, alloc)
        .find(|e| e.record["DesiredTransition"]["NoShutdownDelay"] == true)
        .map(|e| e.index);
    let stopped = alloc_events(view, alloc)
        .find(|e| e.index >= stop_index && e.record["DesiredStatus"] == "stop")
        .map(|e| e.index);
    match (flagged, stopped) {
        (None, None) => Verdict::NotObservable(format!(
            "the stream showed alloc {short} neither flagged nor stopped after {request} (index {stop_index}){}",
            ended(view)
        )),
        (None, Some(stopped)) => Verdict::Violated(format!(
            "the stream shows alloc {short} set to stop at index {stopped} after {request} (index {stop_index}), and never flagged"
        )),
        (Some(flagged), _) if flagged > stop_index => Verdict::Violated(format!(
            "the stream shows the flag reaching alloc {short} at index {flagged}, after the write of {request} (index {stop_index})"
        )),
        (Some(flagged), Some(stopped)) if stopped < flagged => Verdict::Violated(format!(
            "the stream shows alloc {short} set to stop at index {stopped}, before the flag reached it at index {flagged}"
        )),
        (Some(flagged), stopped) => Verdict::Holds(format!(
            "the stream shows alloc {short} flagged at index {flagged}, in the write of {request}{}",
            stopped.map_or(String::new(), |s| format!(", before it was set to stop (index {s})"))
        )),
    }
}

// invariant: flag_scoped
/// An allocation nobody flagged: the stream must never show it flagged (in any write,
/// however briefly).
pub fn never_flagged(view: &StreamView, alloc: &str) -> Verdict {
    let short = short(alloc);
    let mut seen = alloc_events(view, alloc).peekable();
    if seen.peek().is_none() {
        return Verdict::NotObservable(format!(
            "the stream showed no write of alloc {short}{}",
            ended(view)
        ));
    }
    match seen.find(|e| e.record["DesiredTransition"]["NoShutdownDelay"] == true) {
        Some(e) => Verdict::Violated(format!(
            "the stream shows alloc {short}, which nobody flagged, flagged at index {}",
            e.index
        )),
        None => Verdict::Holds(format!("the stream never shows alloc {short} flagged")),
    }
}

/// Whether the record shows `task` ended of its kill: a `Terminated` after its last
/// `Killing` (a task that ended and restarted before the stop has an older `Terminated`).
fn shows_ended(record: &Value, task: &str) -> bool {
    let Some(events) = record["TaskStates"][task]["Events"].as_array() else {
        return false;
    };
    events
        .iter()
        .rposition(|e| e["Type"] == "Killing")
        .is_some_and(|killing| events[killing..].iter().any(|e| e["Type"] == "Terminated"))
}

// invariant: prestop_hooks_always_run
/// A violation if the stream shows the server hearing that a task ended before it heard
/// that one of the services the task's kill must find gone was deregistered (the task's
/// own, and with `with_group` its group's). The other order is what a correct server
/// shows, but it does not time the deregistration against the signal: that is the
/// witness's to say, so it adds nothing here.
pub fn deregistered_before_the_end(
    view: &StreamView,
    spec: &JobSpec,
    alloc: &str,
    from_index: u64,
    with_group: bool,
) -> Option<Verdict> {
    let short = short(alloc);
    let mut found = Vec::new();
    for task in spec.tasks.iter().filter(|t| t.role != Role::Poststop) {
        let Some(end) = alloc_events(view, alloc)
            .find(|e| e.index >= from_index && shows_ended(&e.record, task.name))
            .map(|e| e.index)
        else {
            continue;
        };
        let mut watched = Vec::new();
        if task.service {
            watched.push(spec.task_service_name(task.name));
        }
        if with_group && spec.group_service {
            watched.push(spec.group_service_name());
        }
        for service in watched {
            let deregistered = view
                .events
                .iter()
                .find(|e| {
                    e.topic == "Service"
                        && e.kind == "ServiceDeregistration"
                        && e.index >= from_index
                        && e.record["AllocID"] == alloc
                        && e.record["ServiceName"] == service.as_str()
                })
                .map(|e| e.index);
            match deregistered {
                Some(at) if at < end => {}
                Some(at) => found.push(format!(
                    "the stream shows the server hearing alloc {short} task {} ended at index {end}, and {service} deregistered only at index {at}",
                    task.name
                )),
                None => found.push(format!(
                    "the stream shows alloc {short} task {} ended at index {end}, and {service} never deregistered{}",
                    task.name,
                    ended(view)
                )),
            }
        }
    }
    (!found.is_empty()).then(|| Verdict::Violated(found.join("; ")))
}

/// The job as the stream shows the write at `index` stored it.
pub fn job_at(view: &StreamView, job: &str, index: u64) -> Result<Value, String> {
    view.events
        .iter()
        .find(|e| e.topic == "Job" && e.index == index && e.record["ID"] == job)
        .map(|e| e.record.clone())
        .ok_or_else(|| {
            format!(
                "the stream showed no Job event at index {index}{}",
                ended(view)
            )
        })
}

#[cfg(test)]
mod tests {
    use super::super::super::jobs::TaskSpec;
    use super::*;
    use serde_json::json;

    fn event(index: u64, topic: &str, kind: &str, record: Value) -> StreamEvent {
        StreamEvent {
            index,
            topic: topic.into(),
            kind: kind.into(),
            record,
            received_ns: 0,
        }
    }

    fn alloc(index: u64, desired: &str, flag: Option<bool>, ended: bool) -> StreamEvent {
        let events = if ended {
            json!([{"Type": "Started"}, {"Type": "Killing"}, {"Type": "Terminated"}])
        } else {
            // Ended once and restarted before the stop: that end is not the kill's.
            json!([{"Type": "Started"}, {"Type": "Terminated"}, {"Type": "Restarting"}, {"Type": "Started"}])
        };
        event(
            index,
            "Allocation",
            "AllocationUpdated",
            json!({"ID": "a1", "DesiredStatus": desired,
                   "DesiredTransition": {"NoShutdownDelay": flag},
                   "TaskStates": {"main": {"Events": events}}}),
        )
    }

    fn view(events: Vec<StreamEvent>) -> StreamView {
        StreamView {
            events,
            ended: None,
        }
    }

    #[test]
    fn the_flag_must_come_with_the_stop_and_before_the_desired_stop() {
        let word = |events| flag_with_stop(&view(events), "a1", 10, "DELETE").word();
        // The flag in the stop's write (10), the desired stop after it: holds.
        assert_eq!(
            word(vec![
                alloc(10, "run", Some(true), false),
                alloc(11, "stop", Some(true), false)
            ]),
            "holds"
        );
        // Set to stop unflagged, flagged a write later.
        assert_eq!(
            word(vec![
                alloc(11, "stop", None, false),
                alloc(12, "stop", Some(true), false)
            ]),
            "VIOLATED"
        );
        // Flagged only after the stop's own write, though before the desired stop.
        assert_eq!(
            word(vec![
                alloc(11, "run", Some(true), false),
                alloc(12, "stop", Some(true), false)
            ]),
            "VIOLATED"
        );
        // Stopped, never flagged.
        assert_eq!(word(vec![alloc(11, "stop", None, false)]), "VIOLATED");
        // Nothing seen.
        assert_eq!(word(vec![]), "not observable");
    }

    #[test]
    fn a_service_deregistered_after_the_task_ended_is_a_violation() {
        let mut spec = JobSpec::new("j".into(), 1, vec![TaskSpec::new("main", Role::Leader, 0)]);
        spec.tasks[0].service = true;
        spec.group_service = true;
        let dereg = |index, name: String| {
            event(
                index,
                "Service",
                "ServiceDeregistration",
                json!({"AllocID": "a1", "ServiceName": name}),
            )
        };
        let (task, group) = (spec.task_service_name("main"), spec.group_service_name());
        let good = view(vec![
            dereg(11, group.clone()),
            dereg(12, task.clone()),
            alloc(13, "stop", None, true),
        ]);
        assert_eq!(
            deregistered_before_the_end(&good, &spec, "a1", 10, true),
            None
        );
        let late = view(vec![
            dereg(11, group.clone()),
            alloc(12, "stop", None, true),
            dereg(13, task.clone()),
        ]);
        let found = deregistered_before_the_end(&late, &spec, "a1", 10, true).unwrap();
        assert!(
            found.is_violation() && found.detail().contains("only at index 13"),
            "{found:?}"
        );
        let never = view(vec![alloc(12, "stop", None, true)]);
        let found = deregistered_before_the_end(&never, &spec, "a1", 10, false).unwrap();
        assert!(found.detail().contains("never deregistered") && !found.detail().contains(&group));
        // A task the stream never showed ended: nothing to say.
        let running = view(vec![alloc(12, "stop", None, false)]);
        assert_eq!(
            deregistered_before_the_end(&running, &spec, "a1", 10, true),
            None
        );
    }
}
