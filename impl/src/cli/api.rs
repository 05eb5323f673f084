//! The CLI's HTTP client for the agent ([`Api`]), and the helpers every command shares:
//! path-segment escaping, output formatting (RFC 3339 times, short IDs, Nomad-style tables
//! and `key = value` fields), and resolving allocation, evaluation and job ID prefixes as
//! Nomad does.

use super::Address;
use crate::daemon;
use serde_json::Value;

/// The agent's API, as the CLI uses it.
pub struct Api {
    base: String,
    /// Sent as `X-Nomad-Token`: `-token`, else `$NOMAD_TOKEN`.
    token: Option<String>,
    agent: ureq::Agent,
}

impl Api {
    pub fn new(address: &Address) -> Result<Api, String> {
        let base = address
            .address
            .clone()
            .or_else(|| std::env::var("NOMAD_ADDR").ok().filter(|a| !a.is_empty()))
            .unwrap_or_else(|| "http://127.0.0.1:4646".into());
        let base = base.trim_end_matches('/').to_string();
        if !base.starts_with("http://") {
            return Err(format!(
                "address {base:?} is not an http:// URL (this CLI speaks plain HTTP)"
            ));
        }
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build();
        let token = address
            .token
            .clone()
            .or_else(|| std::env::var("NOMAD_TOKEN").ok())
            .filter(|t| !t.is_empty());
        Ok(Api {
            base,
            token,
            agent: config.into(),
        })
    }

    /// Sends a request; a non-2xx answer is an error carrying the agent's message.
    pub fn call(&self, method: &str, path: &str, body: Option<&[u8]>) -> Result<Value, String> {
        self.call_indexed(method, path, body)
            .map(|(value, _)| value)
    }

    /// Sends a request; returns the answer and its `X-Nomad-Index`.
    pub fn call_indexed(
        &self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
    ) -> Result<(Value, u64), String> {
        let (status, index, text) = self.exchange(method, path, body)?;
        answered(status, index, &text)
    }

    /// As [`Api::call_indexed`], with a 404 answered as `None`: what is not there.
    pub fn call_found(
        &self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
    ) -> Result<Option<(Value, u64)>, String> {
        let (status, index, text) = self.exchange(method, path, body)?;
        if status == 404 {
            return Ok(None);
        }
        answered(status, index, &text).map(Some)
    }

    fn exchange(
        &self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
    ) -> Result<(u16, u64, String), String> {
        let url = format!("{}{path}", self.base);
        let token = self.token.as_deref().unwrap_or_default();
        exchange(&self.agent, method, &url, token, body, CLI_MAX_ANSWER).map_err(|failure| {
                match failure {
                    Failure::NoAnswer(e) => format!(
                        "Error querying the agent at {}: {e} (is `quiesce agent -dev` running? set -address or NOMAD_ADDR)",
                        self.base
                    ),
                    Failure::Reading(e) => format!("reading the agent's answer: {e}"),
                }
            })
    }

    pub(super) fn get(&self, path: &str) -> Result<Value, String> {
        self.call("GET", path, None)
    }
}

/// A 2xx answer's JSON, or the error the CLI shows for any other.
fn answered(status: u16, index: u64, text: &str) -> Result<(Value, u64), String> {
    if !(200..300).contains(&status) {
        return Err(format!(
            "Unexpected response code: {status} ({})",
            text.trim()
        ));
    }
    let value =
        serde_json::from_str(text).map_err(|e| format!("the agent's answer is not JSON: {e}"))?;
    Ok((value, index))
}

/// The longest answer the CLI reads (ureq's default).
const CLI_MAX_ANSWER: u64 = 10 << 20;

/// Why an exchange with the server failed.
pub enum Failure {
    /// No answer: the connection or the request failed.
    NoAnswer(String),
    /// The answer's body could not be read (or was longer than the limit).
    Reading(String),
}

/// One exchange with a Nomad-API server, as the CLI and the conformance probe both make
/// it: `method` on `url` with `X-Nomad-Token`, the body if any (PUT and POST); the answer's
/// status, `X-Nomad-Index` (0 if absent) and body text, read up to `limit` bytes. Any status
/// is an answer.
pub fn exchange(
    agent: &ureq::Agent,
    method: &str,
    url: &str,
    token: &str,
    body: Option<&[u8]>,
    limit: u64,
) -> Result<(u16, u64, String), Failure> {
    let response = match (method, body) {
        ("GET", _) => agent.get(url).header("X-Nomad-Token", token).call(),
        ("DELETE", _) => agent.delete(url).header("X-Nomad-Token", token).call(),
        ("PUT", Some(body)) => agent.put(url).header("X-Nomad-Token", token).send(body),
        ("PUT", None) => agent.put(url).header("X-Nomad-Token", token).send_empty(),
        (_, Some(body)) => agent.post(url).header("X-Nomad-Token", token).send(body),
        (_, None) => agent.post(url).header("X-Nomad-Token", token).send_empty(),
    };
    let mut response = response.map_err(|e| Failure::NoAnswer(e.to_string()))?;
    let status = response.status().as_u16();
    let index = response
        .headers()
        .get("X-Nomad-Index")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let text = response
        .body_mut()
        .with_config()
        .limit(limit)
        .read_to_string()
        .map_err(|e| Failure::Reading(e.to_string()))?;
    Ok((status, index, text))
}

/// Escapes a path segment (IDs may hold spaces or `/`; the agent decodes them).
pub(super) fn segment(id: &str) -> String {
    let mut out = String::new();
    for byte in id.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                out.push(byte as char)
            }
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

// ---------------------------------------------------------------------------- formatting

/// Unix nanoseconds as RFC 3339 (UTC, seconds).
pub use crate::gotime::rfc3339;

pub(super) fn now() -> String {
    rfc3339(daemon::unix_now_ns())
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

/// Columns padded to their widest cell, as Nomad's tables are.
/// A value as the terminal is shown it: control characters (C0, DEL, C1 — a job ID may hold
/// any, by Nomad's rules, and an escape sequence would be run by the operator's terminal)
/// written as escapes.
pub fn shown(text: &str) -> String {
    if !text.chars().any(char::is_control) {
        return text.to_string();
    }
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

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

    #[test]
    fn control_characters_are_shown_escaped() {
        assert_eq!(shown("web"), "web");
        assert_eq!(shown("a\u{1b}]52;c;x\u{7}b\n"), "a\\u{1b}]52;c;x\\u{7}b\\n");
        assert!(!table(&[vec!["\u{1b}[2J".into()]]).contains('\u{1b}'));
        assert!(!fields(&[("ID", "\u{9b}31m".into())]).contains('\u{9b}'));
    }

    #[test]
    fn times_print_as_rfc3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_796_040_000_000_000_000), "2026-11-30T12:00:00Z");
    }
}
