//! Judging a stop from what it left behind: its delays as the times show them
//! (`delays.rs`), the services each kill signal found (the witness), the kill order from the
//! task events, completion, and where a stored job changed. Pure functions of what was read.

mod delays;
pub mod stream;
#[cfg(test)]
mod tests;

pub use delays::{signal_after, stop_delays};

use super::api::{escape, Api};
use super::jobs::{JobSpec, Role};
use super::observe::{kinds, AllocView, Witnessed};
use super::verdict::{ms, Verdict};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;

// invariant: prestop_hooks_always_run
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

// invariant: kill_order
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

// invariant: stop_completes
/// The stopped allocations ended client-terminal and their services are gone.
pub fn stop_completes(
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
