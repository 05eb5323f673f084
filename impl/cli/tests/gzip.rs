//! gzip and `Content-Length` on the agent's answers (`daemon/http/gzip.rs`, issue 29 goal
//! 5), on an agent in this process: a request that takes gzip gets a body that decompresses
//! to exactly the plain answer, with `Content-Encoding`, `Vary` and `Content-Length` right;
//! one that does not gets the plain bytes; blocking queries and the event stream work as
//! before; and a list's shared answer, keyed on the tables it reads, still follows every
//! write to them and every ACL change, while a client holds its older copy.

mod support;

use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};
use support::{wait_for, PATIENCE};

/// An answer as sent: status, headers (names in lower case), body bytes.
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn index(&self) -> u64 {
        self.header("x-nomad-index")
            .and_then(|v| v.parse().ok())
            .expect("an X-Nomad-Index")
    }

    /// The body as the client reads it: decompressed if it says it is gzip.
    fn read(&self) -> Vec<u8> {
        match self.header("content-encoding") {
            None => self.body.clone(),
            Some("gzip") => gunzip(&self.body),
            Some(other) => panic!("an encoding no one asked for: {other}"),
        }
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.read()).expect("a JSON body")
    }

    /// A whole answer: its `Content-Length` is its body's, and it is not chunked.
    fn assert_whole(&self) {
        assert_eq!(self.header("transfer-encoding"), None);
        assert_eq!(
            self.header("content-length"),
            Some(self.body.len().to_string().as_str())
        );
        assert_eq!(self.header("vary"), Some("Accept-Encoding"));
    }
}

fn gunzip(bytes: &[u8]) -> Vec<u8> {
    let mut plain = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_end(&mut plain)
        .expect("a gzip body");
    plain
}

/// An answer's head, from `text` (up to the blank line; its body left empty), and where
/// its body starts.
fn parse_head(text: &[u8]) -> Option<(Answer, usize)> {
    let end = text.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&text[..end]);
    let mut lines = head.lines();
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let head = Answer {
        status,
        headers,
        body: Vec::new(),
    };
    Some((head, end + 4))
}

/// The head of a request: `extra` headers after `Host`.
fn head(method: &str, path: &str, extra: &[(&str, &str)], body_len: usize) -> String {
    let extra: String = extra.iter().map(|(n, v)| format!("{n}: {v}\r\n")).collect();
    format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}Content-Length: {body_len}\r\n\r\n"
    )
}

/// An agent in this process, its data dir removed with it.
struct InProcess {
    address: String,
    agent: support::Agent,
    token: Option<String>,
}

impl InProcess {
    fn start(name: &str, acl_enabled: bool) -> InProcess {
        let agent = support::Agent::start("gzip", name, |config| {
            config.acl_enabled = acl_enabled;
        });
        let mut running = InProcess {
            address: agent.address.clone(),
            agent,
            token: None,
        };
        if acl_enabled {
            let bootstrap = running.call("POST", "/v1/acl/bootstrap", None);
            running.token = bootstrap["SecretID"].as_str().map(str::to_string);
        }
        running
    }

    fn connect(&self) -> TcpStream {
        let stream = TcpStream::connect(&self.address).expect("the agent accepts");
        stream.set_read_timeout(Some(PATIENCE)).expect("a timeout");
        stream
    }

    /// One request on its own connection, with `token` and `extra` headers; the answer,
    /// read to the end of the connection.
    fn get_as(&self, path: &str, token: Option<&str>, extra: &[(&str, &str)]) -> Answer {
        let mut headers = vec![("Connection", "close")];
        headers.extend(token.map(|t| ("X-Nomad-Token", t)));
        headers.extend_from_slice(extra);
        let mut stream = self.connect();
        stream
            .write_all(head("GET", path, &headers, 0).as_bytes())
            .expect("sent");
        let mut text = Vec::new();
        stream.read_to_end(&mut text).expect("an answer");
        let (head, start) = parse_head(&text).expect("a head");
        Answer {
            body: text.split_off(start),
            ..head
        }
    }

    /// A `GET` with the agent's token, asking for gzip or not.
    fn get(&self, path: &str, accept_encoding: Option<&str>) -> Answer {
        let extra: Vec<(&str, &str)> = accept_encoding
            .map(|a| ("Accept-Encoding", a))
            .into_iter()
            .collect();
        self.get_as(path, self.token.as_deref(), &extra)
    }

    /// A request with the agent's token that must succeed: its JSON answer.
    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Value {
        let body = body.map_or_else(Vec::new, |b| serde_json::to_vec(b).expect("JSON"));
        let mut headers = vec![("Connection", "close")];
        headers.extend(self.token.as_deref().map(|t| ("X-Nomad-Token", t)));
        let mut stream = self.connect();
        stream
            .write_all(head(method, path, &headers, body.len()).as_bytes())
            .expect("sent");
        stream.write_all(&body).expect("sent");
        let mut text = Vec::new();
        stream.read_to_end(&mut text).expect("an answer");
        let (head, start) = parse_head(&text).expect("a head");
        let body = String::from_utf8_lossy(&text[start..]);
        assert_eq!(head.status, 200, "{method} {path}: {body}");
        serde_json::from_str(&body).unwrap_or(Value::Null)
    }

    /// Runs `count` idle allocations of job `id` and waits for them.
    fn run(&self, id: &str, count: usize) {
        let job = json!({"Job": {"ID": id, "Datacenters": ["dc1"], "TaskGroups": [{
            "Name": "g", "Count": count,
            "Tasks": [{"Name": "idle", "Driver": "mock_driver", "Config": {}}],
        }]}});
        self.call("PUT", "/v1/jobs", Some(&job));
        wait_for(&format!("{count} allocations of {id} running"), || {
            let allocs = self.call("GET", &format!("/v1/job/{id}/allocations"), None);
            let running = allocs
                .as_array()
                .expect("a list")
                .iter()
                .filter(|a| a["ClientStatus"] == "running")
                .count();
            (running == count).then_some(())
        });
    }

    /// A client that asks for `path` and never reads: the agent holds the answer's bytes
    /// until the connection goes (the answer must be larger than the sockets' buffers).
    fn hold(&self, path: &str, token: Option<&str>) -> TcpStream {
        let before = self.agent.agent.shared.answers.unsent();
        let mut headers = vec![("Connection", "close")];
        headers.extend(token.map(|t| ("X-Nomad-Token", t)));
        let mut stream = self.connect();
        stream
            .write_all(head("GET", path, &headers, 0).as_bytes())
            .expect("sent");
        wait_for("the answer held for a client that does not read", || {
            (self.agent.agent.shared.answers.unsent() > before).then_some(())
        });
        stream
    }
}

#[test]
fn a_gzip_answer_decompresses_to_exactly_the_plain_one() {
    let agent = InProcess::start("same", false);
    agent.run("web", 50);

    let plain = agent.get("/v1/allocations", None);
    assert_eq!(plain.status, 200);
    assert_eq!(plain.header("content-encoding"), None);
    plain.assert_whole();
    let gzip = agent.get("/v1/allocations", Some("gzip"));
    assert_eq!(gzip.status, 200);
    assert_eq!(gzip.header("content-encoding"), Some("gzip"));
    gzip.assert_whole();
    assert_eq!(gunzip(&gzip.body), plain.body, "exactly the plain answer");
    assert!(
        gzip.body.len() * 5 < plain.body.len(),
        "{} bytes compressed to {}",
        plain.body.len(),
        gzip.body.len()
    );
    assert_eq!(gzip.index(), plain.index());
    assert_eq!(gzip.header("content-type"), Some("application/json"));

    // As Go's and Python's clients ask; and asked not to, plain bytes.
    let asked = agent.get("/v1/allocations", Some("gzip, deflate"));
    assert_eq!(asked.header("content-encoding"), Some("gzip"));
    assert_eq!(gunzip(&asked.body), plain.body);
    for refused in ["deflate", "gzip;q=0", "identity"] {
        let answer = agent.get("/v1/allocations", Some(refused));
        assert_eq!(answer.header("content-encoding"), None, "{refused}");
        assert_eq!(answer.body, plain.body, "{refused}");
        answer.assert_whole();
    }

    // A small answer, and an error, go plain, with their length.
    let jobs = agent.get("/v1/jobs", Some("gzip"));
    assert_eq!(jobs.header("content-encoding"), None);
    jobs.assert_whole();
    assert_eq!(jobs.json()[0]["ID"], "web");
    let missing = agent.get("/v1/job/nope", Some("gzip"));
    assert_eq!(missing.status, 404);
    assert_eq!(missing.header("content-encoding"), None);
    missing.assert_whole();
    assert_eq!(missing.body, b"job not found");

    // On one kept-alive connection, each answer read by its Content-Length alone.
    let mut stream = agent.connect();
    let asks = [Some("gzip"), None, Some("gzip")];
    for ask in asks {
        let extra: Vec<(&str, &str)> = ask.map(|a| ("Accept-Encoding", a)).into_iter().collect();
        stream
            .write_all(head("GET", "/v1/allocations", &extra, 0).as_bytes())
            .expect("sent");
    }
    let mut text: Vec<u8> = Vec::new();
    for ask in asks {
        let (head, start) = wait_for("an answer's head", || {
            parse_head(&text).or_else(|| {
                let mut more = [0u8; 64 << 10];
                let n = stream.read(&mut more).expect("the connection stays open");
                text.extend_from_slice(&more[..n]);
                None
            })
        });
        let length: usize = head
            .header("content-length")
            .and_then(|v| v.parse().ok())
            .expect("a Content-Length");
        while text.len() < start + length {
            let mut more = [0u8; 64 << 10];
            let n = stream.read(&mut more).expect("the body");
            assert!(n > 0, "the connection closed before the body's end");
            text.extend_from_slice(&more[..n]);
        }
        let rest = text.split_off(start + length);
        let answer = Answer {
            body: text.split_off(start),
            ..head
        };
        text = rest;
        assert_eq!(answer.status, 200);
        assert_eq!(answer.header("content-encoding").is_some(), ask.is_some());
        assert_eq!(answer.read(), plain.body);
    }
}

#[test]
fn blocking_queries_and_the_event_stream_work_with_gzip() {
    let agent = InProcess::start("blocking", false);
    agent.run("web", 20);
    let allocs = agent.get("/v1/allocations", Some("gzip"));
    let jobs = agent.get("/v1/jobs", Some("gzip"));
    let blocked = |path: String| {
        let address = agent.address.clone();
        std::thread::spawn(move || {
            let agent = Blocked { address };
            agent.get(&path)
        })
    };
    let on_allocs = blocked(format!("/v1/allocations?index={}&wait=60s", allocs.index()));
    let on_jobs = blocked(format!("/v1/jobs?index={}&wait=60s", jobs.index()));
    wait_for("both queries waiting", || {
        (agent.agent.agent.shared.watchers.counts().waiting == 2).then_some(())
    });

    // The event stream is not compressed (Nomad's drops gzip from it): ndjson in chunks.
    let mut events = agent.connect();
    events
        .write_all(
            head(
                "GET",
                "/v1/event/stream?topic=Job",
                &[("Accept-Encoding", "gzip")],
                0,
            )
            .as_bytes(),
        )
        .expect("sent");
    let mut seen = Vec::new();
    let (head, _) = wait_for("the event stream's head", || {
        parse_head(&seen).or_else(|| {
            let mut more = [0u8; 4096];
            let n = events.read(&mut more).expect("the stream's head");
            seen.extend_from_slice(&more[..n]);
            None
        })
    });
    assert_eq!(head.status, 200);
    assert_eq!(head.header("content-encoding"), None);
    assert_eq!(head.header("transfer-encoding"), Some("chunked"));
    assert_eq!(head.header("vary"), Some("Accept-Encoding"));

    agent.run("other", 1);
    let on_allocs = on_allocs.join().expect("the query on allocations");
    assert_eq!(on_allocs.header("content-encoding"), Some("gzip"));
    on_allocs.assert_whole();
    assert!(on_allocs.index() > allocs.index());
    let listed = on_allocs.json();
    assert!(
        listed
            .as_array()
            .expect("a list")
            .iter()
            .any(|a| a["JobID"] == "other"),
        "woken by the placement of other's allocation"
    );
    let on_jobs = on_jobs.join().expect("the query on jobs");
    assert_eq!(on_jobs.status, 200);
    assert!(on_jobs.index() > jobs.index());
    let ids: Vec<Value> = on_jobs
        .json()
        .as_array()
        .expect("a list")
        .iter()
        .map(|j| j["ID"].clone())
        .collect();
    assert!(ids.contains(&json!("other")), "{ids:?}");

    wait_for("other's job event on the stream", || {
        let mut more = [0u8; 4096];
        let n = events.read(&mut more).expect("the stream goes on");
        seen.extend_from_slice(&more[..n]);
        String::from_utf8_lossy(&seen)
            .contains(r#""ID":"other""#)
            .then_some(())
    });
}

/// A client on another thread, for a blocking query asking for gzip.
struct Blocked {
    address: String,
}

impl Blocked {
    fn get(&self, path: &str) -> Answer {
        let mut stream = TcpStream::connect(&self.address).expect("the agent accepts");
        stream.set_read_timeout(Some(PATIENCE)).expect("a timeout");
        let extra = [("Connection", "close"), ("Accept-Encoding", "gzip")];
        stream
            .write_all(head("GET", path, &extra, 0).as_bytes())
            .expect("sent");
        let mut text = Vec::new();
        stream.read_to_end(&mut text).expect("an answer");
        let (head, start) = parse_head(&text).expect("a head");
        Answer {
            body: text.split_off(start),
            ..head
        }
    }
}

/// The list is keyed on its tables' index and the ACL's, not the store's: a client holds
/// an older copy throughout, and every read still sees every write to what it lists, and a
/// token's rights as they are now.
#[test]
fn a_shared_list_follows_its_writes_and_acl_changes_while_an_older_copy_is_held() {
    let agent = InProcess::start("keys", true);
    // About 0.8 MB of allocations: more than the sockets of a client that does not read
    // take, so the agent holds the rest.
    agent.run("many", 400);
    agent.call(
        "POST",
        "/v1/acl/policy/readers",
        Some(&json!({"Name": "readers", "Rules": r#"namespace "default" { policy = "read" }"#})),
    );
    let token = agent.call(
        "POST",
        "/v1/acl/token",
        Some(&json!({"Name": "reader", "Type": "client", "Policies": ["readers"]})),
    );
    let reader = token["SecretID"].as_str().expect("a secret").to_string();
    let read = |encoding: &str| {
        let answer = agent.get_as(
            "/v1/allocations",
            Some(&reader),
            &[("Accept-Encoding", encoding)],
        );
        assert_eq!(
            answer.status,
            200,
            "{}",
            String::from_utf8_lossy(&answer.body)
        );
        answer
    };
    let first = read("gzip");
    let _old = agent.hold("/v1/allocations", Some(&reader));

    // A write to other tables (a job with no allocation: a job and an evaluation) leaves
    // the list as it was, at its index.
    let empty = json!({"Job": {"ID": "empty", "TaskGroups": [{"Name": "g", "Count": 0,
        "Tasks": [{"Name": "t", "Driver": "mock_driver", "Config": {}}]}]}});
    agent.call("PUT", "/v1/jobs", Some(&empty));
    let after_other = read("gzip");
    assert_eq!(after_other.index(), first.index());
    assert_eq!(after_other.read(), first.read());

    // A write to an allocation is in the next read, gzip or not.
    let id = first.json()[0]["ID"].as_str().expect("an ID").to_string();
    agent.call("PUT", &format!("/v1/allocation/{id}/stop"), None);
    for encoding in ["gzip", "identity"] {
        let answer = read(encoding);
        assert!(answer.index() > first.index());
        let stopped = answer.json();
        let alloc = stopped
            .as_array()
            .expect("a list")
            .iter()
            .find(|a| a["ID"] == id.as_str())
            .expect("still listed")
            .clone();
        assert_eq!(alloc["DesiredStatus"], "stop", "{encoding}");
    }

    // The token loses its policy while its current answer is held: refused all the same.
    let _current = agent.hold("/v1/allocations", Some(&reader));
    agent.call("DELETE", "/v1/acl/policy/readers", None);
    for encoding in ["gzip", "identity"] {
        let answer = agent.get_as(
            "/v1/allocations",
            Some(&reader),
            &[("Accept-Encoding", encoding)],
        );
        assert_eq!(answer.status, 403, "{encoding}");
    }
}

/// A blocking query that waited out is answered at its own index; while a client still
/// holds that answer, the same query sent again waits its `wait` as well (Go's watchers
/// send it again as it is), not given the held answer at once.
#[test]
fn a_blocking_query_again_waits_though_an_answer_that_waited_out_is_held() {
    let agent = InProcess::start("waited", false);
    agent.run("many", 400);
    let index = agent.get("/v1/allocations", None).index();
    let path = format!("/v1/allocations?index={index}&wait=1s");
    let _held = agent.hold(&path, None);
    let asked = Instant::now();
    let again = agent.get(&path, None);
    let waited = asked.elapsed();
    assert_eq!((again.status, again.index()), (200, index));
    // The held answer would come in milliseconds; the query's own wait is a second.
    assert!(
        waited >= Duration::from_millis(800),
        "answered after {waited:?}, without waiting"
    );
}
