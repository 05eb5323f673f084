//! A small client of the Nomad HTTP API, as the `quiesce` CLI and the conformance probe use
//! it: one exchange ([`exchange`]: any status is an answer, the body read up to a limit),
//! and [`Api`], which adds the address and token defaults Nomad's CLI has (`NOMAD_ADDR`,
//! `NOMAD_TOKEN`) and turns a non-2xx answer into the error the CLI prints.
//!
//! Architecture Invariant: this crate knows HTTP and JSON only. It depends on no other
//! quiesce crate, so a client of the agent never links the agent.

use serde_json::Value;

/// The agent's API, as the CLI uses it.
pub struct Api {
    base: String,
    /// Sent as `X-Nomad-Token`: `-token`, else `$NOMAD_TOKEN`.
    token: Option<String>,
    agent: ureq::Agent,
}

impl Api {
    /// An API at `address` (else `$NOMAD_ADDR`, else `http://127.0.0.1:4646`) sending
    /// `token` (else `$NOMAD_TOKEN`) with each request.
    pub fn new(address: Option<String>, token: Option<String>) -> Result<Api, String> {
        let base = address
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
        let token = token
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

    /// `GET path`, answered with bytes (`text/plain`), not JSON: a file's contents.
    pub fn get_bytes(&self, path: &str) -> Result<Vec<u8>, String> {
        let (status, _, bytes) = self.exchange_bytes("GET", path, None)?;
        if !(200..300).contains(&status) {
            return Err(format!(
                "Unexpected response code: {status} ({})",
                String::from_utf8_lossy(&bytes).trim()
            ));
        }
        Ok(bytes)
    }

    fn exchange(
        &self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
    ) -> Result<(u16, u64, String), String> {
        let (status, index, bytes) = self.exchange_bytes(method, path, body)?;
        let text = String::from_utf8(bytes)
            .map_err(|_| "reading the agent's answer: not UTF-8 text".to_string())?;
        Ok((status, index, text))
    }

    fn exchange_bytes(
        &self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
    ) -> Result<(u16, u64, Vec<u8>), String> {
        let url = format!("{}{path}", self.base);
        let token = self.token.as_deref().unwrap_or_default();
        exchange_bytes(&self.agent, method, &url, token, body, CLI_MAX_ANSWER).map_err(|failure| {
                match failure {
                    Failure::NoAnswer(e) => format!(
                        "Error querying the agent at {}: {e} (is `quiesce agent -dev` running? set -address or NOMAD_ADDR)",
                        self.base
                    ),
                    Failure::Reading(e) => format!("reading the agent's answer: {e}"),
                }
            })
    }

    /// `GET path`.
    pub fn get(&self, path: &str) -> Result<Value, String> {
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
    let (status, index, bytes) = exchange_bytes(agent, method, url, token, body, limit)?;
    let text = String::from_utf8(bytes)
        .map_err(|_| Failure::Reading("the answer is not UTF-8 text".into()))?;
    Ok((status, index, text))
}

/// As [`exchange`], the body as the bytes sent (a file of an allocation may be anything).
pub fn exchange_bytes(
    agent: &ureq::Agent,
    method: &str,
    url: &str,
    token: &str,
    body: Option<&[u8]>,
    limit: u64,
) -> Result<(u16, u64, Vec<u8>), Failure> {
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
    let bytes = response
        .body_mut()
        .with_config()
        .limit(limit)
        .read_to_vec()
        .map_err(|e| Failure::Reading(e.to_string()))?;
    Ok((status, index, bytes))
}

/// Escapes a path segment (IDs may hold spaces or `/`; the agent decodes them).
pub fn segment(id: &str) -> String {
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
