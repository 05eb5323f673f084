//! The probe's only window on the cluster: Nomad's HTTP API. Every request is remembered
//! (method, path, when it was sent and answered, on the probe's clock) so that a verdict can
//! cite the requests it rests on.

use quiesce_api::{exchange, Failure};
use serde_json::Value;
use std::cell::RefCell;
use std::time::Duration;

/// One request the probe sent, with its times (Unix nanoseconds, the probe's clock).
#[derive(Clone, Debug)]
pub struct Sent {
    pub method: String,
    pub path: String,
    pub sent_ns: i64,
    pub answered_ns: i64,
    pub status: u16,
}

impl std::fmt::Display for Sent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} → {}", self.method, self.path, self.status)
    }
}

/// An answer: its status, its body as JSON (`Null` if it was not JSON), the body's text (for
/// error messages) and `X-Nomad-Index`.
#[derive(Clone, Debug)]
pub struct Answer {
    pub status: u16,
    pub body: Value,
    pub text: String,
    pub index: u64,
    pub sent: Sent,
}

impl Answer {
    pub fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The answer's body if it is a 2xx, else an error naming the request and the reply.
    pub fn into_ok(self) -> Result<Value, String> {
        if self.ok() {
            Ok(self.body)
        } else {
            Err(format!("{}: {}", self.sent, shorten(&self.text, 300)))
        }
    }
}

pub struct Api {
    base: String,
    token: Option<String>,
    namespace: Option<String>,
    agent: ureq::Agent,
    log: RefCell<Vec<Sent>>,
}

/// The longest answer the probe reads: a job's allocations with their events stay far below.
const MAX_ANSWER: u64 = 16 << 20;

impl Api {
    pub fn new(
        address: &str,
        token: Option<String>,
        namespace: Option<String>,
    ) -> Result<Api, String> {
        let base = address.trim_end_matches('/').to_string();
        if !base.starts_with("http://") {
            return Err(format!(
                "--address {address:?} is not an http:// URL (the probe speaks plain HTTP)"
            ));
        }
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(90)))
            .build();
        Ok(Api {
            base,
            token: token.filter(|t| !t.is_empty()),
            namespace: namespace.filter(|n| !n.is_empty()),
            agent: config.into(),
            log: RefCell::new(Vec::new()),
        })
    }

    pub fn address(&self) -> &str {
        &self.base
    }

    pub fn token(&self) -> &str {
        self.token.as_deref().unwrap_or_default()
    }

    pub fn namespace(&self) -> &str {
        self.namespace.as_deref().unwrap_or("default")
    }

    /// Every request sent so far.
    pub fn sent(&self) -> Vec<Sent> {
        self.log.borrow().clone()
    }

    /// `path` may carry a query; `?namespace=` is added when the probe was given one.
    pub fn send(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Answer, String> {
        let mut path = path.to_string();
        if let Some(namespace) = &self.namespace {
            let join = if path.contains('?') { '&' } else { '?' };
            path = format!("{path}{join}namespace={}", escape(namespace));
        }
        let url = format!("{}{path}", self.base);
        let token = self.token.as_deref().unwrap_or_default();
        let bytes = body.map(|b| b.to_string().into_bytes());
        let sent_ns = now_ns();
        let (status, index, text) = exchange(
            &self.agent,
            method,
            &url,
            token,
            bytes.as_deref(),
            MAX_ANSWER,
        )
        .map_err(|failure| match failure {
            Failure::NoAnswer(e) => format!(
                "{method} {path}: the server at {} did not answer: {e}",
                self.base
            ),
            Failure::Reading(e) => format!("{method} {path}: reading the answer: {e}"),
        })?;
        let sent = Sent {
            method: method.to_string(),
            path,
            sent_ns,
            answered_ns: now_ns(),
            status,
        };
        self.log.borrow_mut().push(sent.clone());
        Ok(Answer {
            status,
            body: serde_json::from_str(&text).unwrap_or(Value::Null),
            text,
            index,
            sent,
        })
    }

    pub fn get(&self, path: &str) -> Result<Value, String> {
        self.send("GET", path, None)?.into_ok()
    }
}

/// Unix nanoseconds on the probe's clock.
pub fn now_ns() -> i64 {
    quiesce_core::gotime::unix_now_ns()
}

/// Percent-escapes a path segment or a query value.
pub fn escape(text: &str) -> String {
    let mut out = String::new();
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(byte as char)
            }
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

pub fn shorten(text: &str, limit: usize) -> String {
    let mut shown: String = text.trim().chars().take(limit).collect();
    if shown.len() < text.trim().len() {
        shown.push('…');
    }
    shown
}
