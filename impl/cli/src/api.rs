//! The helpers every command shares: the agent's API at the `-address` given
//! ([`Address::api`]; the client itself is `quiesce-api`'s), output formatting (RFC 3339
//! times, short IDs, Nomad-style tables and `key = value` fields), and resolving
//! allocation, evaluation and job ID prefixes as Nomad does.

use super::Address;
pub(crate) use quiesce_api::{segment, Api};
use quiesce_core::gotime::unix_now_ns;
pub(crate) use quiesce_core::text::shown;
use serde_json::Value;

impl Address {
    /// The agent's API at `-address` with `-token` (else their environment variables).
    pub fn api(&self) -> Result<Api, String> {
        Api::new(self.address.clone(), self.token.clone())
    }
}

/// `PUT path` with `body` as JSON: Nomad's writes that take a small request object.
pub(super) fn put_json(api: &Api, path: &str, body: &Value) -> Result<Value, String> {
    api.call("PUT", path, Some(body.to_string().as_bytes()))
}

// ---------------------------------------------------------------------------- formatting

/// Unix nanoseconds as RFC 3339 (UTC, seconds).
pub use quiesce_core::gotime::rfc3339;

pub(super) fn now() -> String {
    rfc3339(unix_now_ns())
}

pub(super) fn short(id: &str) -> &str {
    &id[..id.len().min(8)]
}

pub(super) fn text(value: &Value, key: &str) -> String {
    match &value[key] {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// How long ago `ns` (Unix nanoseconds) was, as Nomad's CLI says it (`1m5s ago`).
pub(super) fn ago(ns: i64) -> String {
    let seconds = (quiesce_core::gotime::unix_now_ns() - ns).max(0) / 1_000_000_000;
    let (days, hours, minutes, seconds) = (
        seconds / 86_400,
        seconds % 86_400 / 3600,
        seconds % 3600 / 60,
        seconds % 60,
    );
    match (days, hours, minutes) {
        (0, 0, 0) => format!("{seconds}s ago"),
        (0, 0, _) => format!("{minutes}m{seconds}s ago"),
        (0, _, _) => format!("{hours}h{minutes}m ago"),
        _ => format!("{days}d{hours}h ago"),
    }
}

pub(super) fn alloc_rows(allocs: &[Value], verbose: bool) -> String {
    let id = |value: &str| {
        if verbose {
            value.to_string()
        } else {
            short(value).to_string()
        }
    };
    let mut rows = vec![vec![
        "ID".to_string(),
        "Node ID".into(),
        "Task Group".into(),
        "Version".into(),
        "Desired".into(),
        "Status".into(),
        "Created".into(),
        "Modified".into(),
    ]];
    let time = |alloc: &Value, key: &str| alloc[key].as_i64().map(ago).unwrap_or_default();
    for alloc in allocs {
        rows.push(vec![
            id(&text(alloc, "ID")),
            id(&text(alloc, "NodeID")),
            text(alloc, "TaskGroup"),
            // A full allocation (a node's list) carries its version in its job.
            match text(alloc, "JobVersion") {
                none if none.is_empty() => text(&alloc["Job"], "Version"),
                version => version,
            },
            text(alloc, "DesiredStatus"),
            text(alloc, "ClientStatus"),
            time(alloc, "CreateTime"),
            time(alloc, "ModifyTime"),
        ]);
    }
    table(&rows)
}

/// Columns padded to their widest cell, as Nomad's tables are.
pub(super) fn table(rows: &[Vec<String>]) -> String {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|row| row.iter().map(|cell| shown(cell)).collect())
        .collect();
    let widths: Vec<usize> = (0..rows.first().map_or(0, Vec::len))
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    rows.iter()
        .map(|row| {
            let cells: Vec<String> = row
                .iter()
                .zip(&widths)
                .map(|(cell, width)| format!("{cell:width$}"))
                .collect();
            cells.join("  ").trim_end().to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

pub(super) fn fields(pairs: &[(&str, String)]) -> String {
    let width = pairs.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    pairs
        .iter()
        .map(|(k, v)| format!("{k:width$} = {}", shown(v)))
        .collect::<Vec<_>>()
        .join("\n")
}

// ---------------------------------------------------------------------------- prefixes

/// Resolves an allocation or evaluation ID prefix as Nomad does: at least two characters,
/// exactly one match.
pub(super) fn resolve(api: &Api, kind: &str, list: &str, prefix: &str) -> Result<Value, String> {
    if prefix.len() < 2 {
        return Err(format!("{kind} ID must contain at least two characters."));
    }
    let matches = api.get(&format!("/v1/{list}?prefix={}", segment(prefix)))?;
    let matches = matches.as_array().cloned().unwrap_or_default();
    match matches.len() {
        0 => Err(format!(
            "No {} with prefix or id {prefix:?} found",
            kind.to_lowercase()
        )),
        1 => Ok(matches[0].clone()),
        _ => {
            let ids: Vec<String> = matches.iter().map(|m| text(m, "ID")).collect();
            Err(format!(
                "Prefix matched multiple {}s:\n{}",
                kind.to_lowercase(),
                ids.join("\n")
            ))
        }
    }
}

/// A job by exact ID, else by a prefix matching exactly one job.
pub(super) fn resolve_job(api: &Api, given: &str) -> Result<String, String> {
    let jobs = api.get(&format!("/v1/jobs?prefix={}", segment(given)))?;
    let ids: Vec<String> = jobs
        .as_array()
        .map(|jobs| jobs.iter().map(|j| text(j, "ID")).collect())
        .unwrap_or_default();
    if ids.iter().any(|id| id == given) {
        return Ok(given.to_string());
    }
    match ids.len() {
        0 => Err(format!("No job(s) with prefix or ID {given:?} found")),
        1 => Ok(ids[0].clone()),
        _ => Err(format!("Prefix matched multiple jobs:\n{}", ids.join("\n"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `shown` itself is tested where it lives (`quiesce_core::text`); here, that tables and
    /// fields go through it.
    #[test]
    fn tables_and_fields_show_control_characters_escaped() {
        assert!(!table(&[vec!["\u{1b}[2J".into()]]).contains('\u{1b}'));
        assert!(!fields(&[("ID", "\u{9b}31m".into())]).contains('\u{9b}'));
    }
}
