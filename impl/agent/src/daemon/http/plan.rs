//! `PUT /v1/job/:id/plan`: what registering the job would do — each group's
//! `DesiredTGUpdates` from a dry run of the scheduler, and with `Diff` the job's fields that
//! would change, in Nomad's `JobDiff` shape (`Type` Added, Deleted, Edited or None; `Fields`
//! with `Old` and `New`; `TaskGroups`, each with its `Tasks` and `Updates`). Nested values
//! are given as fields with dotted names (`Config.args`, `Env[GREETING]`).

use super::*;

/// One field's change, as Nomad's `FieldDiff`.
fn field(name: &str, old: Option<&Value>, new: Option<&Value>) -> Option<Value> {
    let text = |v: Option<&Value>| match v {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => clipped(s),
        Some(other) => clipped(&other.to_string()),
    };
    let (old_text, new_text) = (text(old), text(new));
    let kind = match (old_text.is_empty(), new_text.is_empty()) {
        _ if old_text == new_text => return None,
        (true, false) => "Added",
        (false, true) => "Deleted",
        _ => "Edited",
    };
    Some(
        json!({"Type": kind, "Name": name, "Old": old_text, "New": new_text,
                "Annotations": null}),
    )
}

/// The most fields a diff lists, how deep it goes into a value, and how much of a name or a
/// value it shows: a jobspec's `Config` is the user's own, and its diff must stay small.
const MAX_FIELDS: usize = 1000;
const MAX_DEPTH: usize = 3;
const MAX_SHOWN: usize = 256;

fn clipped(text: &str) -> String {
    if text.len() <= MAX_SHOWN {
        return text.to_string();
    }
    let mut end = MAX_SHOWN;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// The changed fields of two objects, flattened; `skip` keys are diffed elsewhere. Below
/// [`MAX_DEPTH`] a value is compared whole, as its JSON.
fn fields(old: &Value, new: &Value, prefix: &str, skip: &[&str], out: &mut Vec<Value>) {
    fields_at(old, new, prefix, skip, out, 0)
}

fn fields_at(
    old: &Value,
    new: &Value,
    prefix: &str,
    skip: &[&str],
    out: &mut Vec<Value>,
    depth: usize,
) {
    let empty = Map::new();
    let (old_map, new_map) = (
        old.as_object().unwrap_or(&empty),
        new.as_object().unwrap_or(&empty),
    );
    let keys: std::collections::BTreeSet<&String> = old_map.keys().chain(new_map.keys()).collect();
    for key in keys {
        if out.len() >= MAX_FIELDS {
            return;
        }
        if prefix.is_empty() && skip.contains(&key.as_str()) {
            continue;
        }
        let name = if prefix.is_empty() {
            key.clone()
        } else if matches!(prefix, "Env" | "Meta")
            || prefix.ends_with(".Env")
            || prefix.ends_with(".Meta")
        {
            format!("{prefix}[{key}]")
        } else {
            format!("{prefix}.{key}")
        };
        let name = clipped(&name);
        let (o, n) = (old_map.get(key), new_map.get(key));
        let objects = o.is_none_or(Value::is_object)
            && n.is_none_or(Value::is_object)
            && (o.is_some() || n.is_some());
        if objects && depth < MAX_DEPTH {
            let null = Value::Null;
            fields_at(
                o.unwrap_or(&null),
                n.unwrap_or(&null),
                &name,
                &[],
                out,
                depth + 1,
            );
        } else if let Some(diff) = field(&name, o, n) {
            out.push(diff);
        }
    }
}

fn kind_of(old: Option<&Value>, new: Option<&Value>, changed: bool) -> &'static str {
    match (old, new) {
        (None, Some(_)) => "Added",
        (Some(_), None) => "Deleted",
        _ if changed => "Edited",
        _ => "None",
    }
}

/// The named members of a list (`TaskGroups`, `Tasks`), by name.
fn by_name(list: Option<&Value>) -> BTreeMap<String, Value> {
    list.and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|item| {
            (
                item["Name"].as_str().unwrap_or_default().to_string(),
                item.clone(),
            )
        })
        .collect()
}

fn task_diffs(old: Option<&Value>, new: Option<&Value>) -> Vec<Value> {
    let (old, new) = (by_name(old), by_name(new));
    let names: std::collections::BTreeSet<&String> = old.keys().chain(new.keys()).collect();
    names
        .into_iter()
        .map(|name| {
            let (o, n) = (old.get(name), new.get(name));
            let mut changed = Vec::new();
            let null = Value::Null;
            fields(
                o.unwrap_or(&null),
                n.unwrap_or(&null),
                "",
                &["Name"],
                &mut changed,
            );
            json!({"Type": kind_of(o, n, !changed.is_empty()), "Name": name,
                   "Fields": changed, "Objects": null, "Annotations": null})
        })
        .collect()
}

/// The diff of two versions of a job (`old` none when it is new), as spec JSON.
pub(super) fn job_diff(
    old: Option<&Value>,
    new: &Value,
    updates: &BTreeMap<String, Value>,
) -> Value {
    let null = Value::Null;
    let mut changed = Vec::new();
    fields(
        old.unwrap_or(&null),
        new,
        "",
        &["TaskGroups", "ID"],
        &mut changed,
    );
    let (old_groups, new_groups) = (
        by_name(old.and_then(|o| o.get("TaskGroups"))),
        by_name(new.get("TaskGroups")),
    );
    let names: std::collections::BTreeSet<&String> =
        old_groups.keys().chain(new_groups.keys()).collect();
    let mut any = !changed.is_empty();
    let groups: Vec<Value> = names
        .into_iter()
        .map(|name| {
            let (o, n) = (old_groups.get(name), new_groups.get(name));
            let mut group_fields = Vec::new();
            fields(
                o.unwrap_or(&null),
                n.unwrap_or(&null),
                "",
                &["Name", "Tasks"],
                &mut group_fields,
            );
            let tasks = task_diffs(
                o.and_then(|g| g.get("Tasks")),
                n.and_then(|g| g.get("Tasks")),
            );
            let tasks_changed = tasks.iter().any(|t| t["Type"] != "None");
            let kind = kind_of(o, n, !group_fields.is_empty() || tasks_changed);
            any |= kind != "None";
            json!({"Type": kind, "Name": name, "Fields": group_fields, "Objects": null,
                   "Tasks": tasks, "Updates": updates.get(name.as_str()).cloned()})
        })
        .collect();
    let kind = match old {
        None => "Added",
        Some(_) if any => "Edited",
        Some(_) => "None",
    };
    json!({"Type": kind, "ID": new["ID"], "Fields": changed, "Objects": null,
           "TaskGroups": groups})
}

/// A stored version as `job history -p` compares it: its spec and its `Stop`.
pub(super) fn version_json(job: &Job) -> Value {
    let mut value = spec_json(job);
    value["Stop"] = json!(job.stop);
    value
}

/// The spec's JSON, its bookkeeping cleared (what a version is, for a diff).
fn spec_json(job: &Job) -> Value {
    let mut value = serde_json::to_value(job.spec_only()).expect("jobs serialize");
    if let Some(object) = value.as_object_mut() {
        for key in [
            "Version",
            "CreateIndex",
            "ModifyIndex",
            "JobModifyIndex",
            "Stop",
        ] {
            object.remove(key);
        }
    }
    value
}

pub(super) fn plan_job(shared: &Shared, path_id: &str, body: &[u8]) -> Result<Reply, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(error(400, "Request body is empty"));
    }
    let request: Value =
        serde_json::from_slice(body).map_err(|e| error(400, format!("invalid JSON: {e}")))?;
    let want_diff = request
        .as_object()
        .and_then(|o| o.iter().find(|(k, _)| k.eq_ignore_ascii_case("Diff")))
        .is_some_and(|(_, v)| v.as_bool() == Some(true));
    let (job, warnings) = accepted_job(body)?;
    if job.id != path_id {
        return Err(error(400, "Job ID does not match"));
    }
    let core = shared.core();
    let old = core.server.store.job(&job.id).map(spec_json);
    let outcome = core.server.plan_job(job)?;
    let index = core.server.store.index();
    drop(core);
    let updates: BTreeMap<String, Value> = outcome
        .updates
        .iter()
        .map(|(group, u)| {
            (
                group.clone(),
                serde_json::to_value(u).expect("updates serialize"),
            )
        })
        .collect();
    // A group diff's `Updates` in Nomad's words, the non-zero ones (`scheduler/annotate.go`).
    let group_updates: BTreeMap<String, Value> = outcome
        .updates
        .iter()
        .map(|(group, u)| {
            let mut words = Map::new();
            for (key, n) in [
                ("ignore", u.ignore),
                ("create", u.place),
                ("destroy", u.stop),
                ("migrate", u.migrate),
                ("canary", u.canary),
                ("in-place update", u.in_place_update),
                ("create/destroy update", u.destructive_update),
            ] {
                if n > 0 {
                    words.insert(key.into(), json!(n));
                }
            }
            (group.clone(), Value::Object(words))
        })
        .collect();
    // Nomad's `AllocMetric` per group that failed; what it says here is how many.
    let failed: Option<Map<String, Value>> = (!outcome.failed.is_empty()).then(|| {
        outcome
            .failed
            .iter()
            .map(|(group, n)| {
                (
                    group.clone(),
                    json!({"CoalescedFailures": n.saturating_sub(1),
                                                    "NodesEvaluated": 1, "NodesFiltered": 1}),
                )
            })
            .collect()
    });
    let diff = want_diff.then(|| job_diff(old.as_ref(), &spec_json(&outcome.job), &group_updates));
    ok(
        json!({"Annotations": {"DesiredTGUpdates": updates, "PreemptedAllocs": null},
               "FailedTGAllocs": failed, "JobModifyIndex": outcome.job_modify_index,
               "CreatedEvals": outcome.created.iter().map(eval_json).collect::<Vec<_>>(),
               "Diff": diff,
               "NextPeriodicLaunch": "0001-01-01T00:00:00Z",
               "Warnings": spec::fields::warnings_text(&warnings), "Index": index}),
        index,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_diff_stays_small_whatever_the_config() {
        let key = "k".repeat(100_000);
        let wide: Map<String, Value> = (0..5000).map(|i| (format!("a{i}"), json!(i))).collect();
        let new = json!({"Config": {key.clone(): wide}});
        let mut out = Vec::new();
        fields(&json!({}), &new, "", &[], &mut out);
        assert!(out.len() <= MAX_FIELDS, "{}", out.len());
        assert!(out
            .iter()
            .all(|f| f["Name"].as_str().unwrap().len() <= MAX_SHOWN + 4));
        // Deeper than MAX_DEPTH, a value is one field, shown clipped.
        let deep = json!({"A": {"B": {"C": {"D": {"E": "x".repeat(10_000)}}}}});
        let mut out = Vec::new();
        fields(&json!({}), &deep, "", &[], &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0]["Name"], "A.B.C.D");
        assert!(out[0]["New"].as_str().unwrap().len() <= MAX_SHOWN + 4);
    }
}
