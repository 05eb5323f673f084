//! The route table (`daemon/http/routes.rs`) walked with ACLs on: every route that needs
//! something of the token refuses one without it (a 403, before its handler runs), and
//! takes one with exactly what it names; the routes that need nothing refuse no one. A new
//! route is in this walk by being in the table, so the table's check cannot be left out for
//! it; whether what a route declares is the right need is the e2e ACL tests' to show
//! (proofs/e2e/test_acl.py, with Nomad's clients and policies).

use quiesce_agent::daemon::http::routes::{Pattern, ROUTES};
use quiesce_agent::daemon::{self, AgentConfig};
use serde_json::{json, Value};
use std::path::Path;

struct Running {
    base: String,
    http: ureq::Agent,
    data_dir: std::path::PathBuf,
    _agent: daemon::Agent,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.data_dir);
    }
}

impl Running {
    fn start() -> Running {
        let data_dir = std::env::temp_dir().join(format!("quiesce-routes-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&data_dir);
        let mut config = AgentConfig::new(
            data_dir.clone(),
            "127.0.0.1:0".parse().expect("an address"),
            Path::new(env!("CARGO_BIN_EXE_quiesce")).to_path_buf(),
        );
        config.client_enabled = false;
        config.acl_enabled = true;
        let agent = daemon::spawn(config).expect("the agent starts");
        let http: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        Running {
            base: format!("http://{}", agent.shared.config.bind),
            http,
            data_dir,
            _agent: agent,
        }
    }

    /// The status and body of `method path` with `token`.
    fn call(&self, method: &str, path: &str, token: &str, body: Option<&Value>) -> (u16, String) {
        let body = body.map(|b| serde_json::to_vec(b).expect("JSON"));
        let url = format!("{}{path}", self.base);
        let (status, _, text) =
            quiesce_api::exchange(&self.http, method, &url, token, body.as_deref(), 1 << 20)
                .unwrap_or_else(|_| panic!("{method} {path}: no answer"));
        (status, text)
    }

    /// A client token holding one policy of `rules`; its secret.
    fn token(&self, management: &str, name: &str, rules: &str) -> String {
        let policy = json!({"Name": name, "Rules": rules});
        let (status, text) = self.call(
            "PUT",
            &format!("/v1/acl/policy/{name}"),
            management,
            Some(&policy),
        );
        assert_eq!(status, 200, "policy {name}: {text}");
        let token = json!({"Name": name, "Type": "client", "Policies": [name]});
        let (status, text) = self.call("PUT", "/v1/acl/token", management, Some(&token));
        assert_eq!(status, 200, "token {name}: {text}");
        let token: Value = serde_json::from_str(&text).expect("a token");
        token["SecretID"].as_str().expect("a secret").to_string()
    }
}

/// The rules that grant exactly what a route needs.
fn rules_for(need: quiesce_agent::daemon::http::acl::Need) -> Option<String> {
    use quiesce_agent::daemon::http::acl::Need;
    let namespace = |cap: &str| format!(r#"namespace "default" {{ capabilities = ["{cap}"] }}"#);
    Some(match need {
        Need::Nothing | Need::Filtered | Need::Own | Need::Management => return None,
        Need::Capability(cap) | Need::Either(cap, _) => namespace(cap),
        Need::AgentRead => r#"agent { policy = "read" }"#.to_string(),
        Need::AgentWrite => r#"agent { policy = "write" }"#.to_string(),
        Need::NodeRead => r#"node { policy = "read" }"#.to_string(),
        Need::NodeReadAnd(cap) => format!("{}\n{}", r#"node { policy = "read" }"#, namespace(cap)),
    })
}

#[test]
fn every_route_refuses_a_token_without_what_it_needs_and_takes_one_with_it() {
    use quiesce_agent::daemon::http::acl::Need;
    let agent = Running::start();
    let (status, text) = agent.call("PUT", "/v1/acl/bootstrap", "", None);
    assert_eq!(status, 200, "{text}");
    let management: Value = serde_json::from_str(&text).expect("a token");
    let management = management["SecretID"]
        .as_str()
        .expect("a secret")
        .to_string();
    // Every right, but in another namespace: it grants nothing here.
    let elsewhere = agent.token(
        &management,
        "elsewhere",
        "namespace \"other\" {\n  policy = \"write\"\n  capabilities = [\"alloc-lifecycle\", \"read-logs\"]\n}",
    );
    let mut walked = 0;
    for (n, route) in ROUTES.iter().enumerate() {
        // The stream is answered by the connection layer, which checks each topic
        // (tests/e2e's test_event_stream.py); a GET here would open it.
        if route.path == Pattern::Fixed("/v1/event/stream") {
            continue;
        }
        let method = route.methods.example();
        let path = route.path.example("x");
        let what = format!("{method} {path} (needs {:?})", route.need);
        for token in ["", elsewhere.as_str()] {
            let (status, text) = agent.call(method, &path, token, None);
            match route.need {
                // Refused before its handler: Nomad's 403 and text.
                Need::Capability(_)
                | Need::Either(..)
                | Need::AgentRead
                | Need::AgentWrite
                | Need::NodeRead
                | Need::NodeReadAnd(_)
                | Need::Management => assert_eq!(
                    (status, text.as_str()),
                    (403, "Permission denied"),
                    "{what} with token {token:?}"
                ),
                Need::Nothing | Need::Filtered => {
                    assert_ne!(status, 403, "{what} refused a token: {text}")
                }
                // Its handler decides, by the record: not the walk's to say.
                Need::Own => {}
            }
        }
        let holder = match route.need {
            Need::Management => Some(management.clone()),
            need => rules_for(need).map(|rules| agent.token(&management, &format!("r{n}"), &rules)),
        };
        if let Some(holder) = holder {
            let (status, text) = agent.call(method, &path, &holder, None);
            // Taken, and routed to its handler (not a path or method the table lacks).
            assert!(
                status != 403 && status != 405 && !text.contains("not an endpoint"),
                "{what} with a token that has it: {status} {text}"
            );
        }
        // Each half of what it needs is not enough alone; either capability of two is.
        let namespace =
            |cap: &str| format!(r#"namespace "default" {{ capabilities = ["{cap}"] }}"#);
        let halves: Vec<(String, bool)> = match route.need {
            Need::Either(a, b) => vec![(namespace(a), true), (namespace(b), true)],
            Need::NodeReadAnd(cap) => vec![
                (r#"node { policy = "read" }"#.to_string(), false),
                (namespace(cap), false),
            ],
            _ => Vec::new(),
        };
        for (k, (rules, enough)) in halves.iter().enumerate() {
            let token = agent.token(&management, &format!("h{n}-{k}"), rules);
            let (status, text) = agent.call(method, &path, &token, None);
            assert_eq!(
                status != 403,
                *enough,
                "{what} with only {rules}: {status} {text}"
            );
        }
        walked += 1;
    }
    assert_eq!(
        walked,
        ROUTES.len() - 1,
        "every route but the stream's walked"
    );
    // What the table does not hold: a path it does not serve, a method a path does not take.
    let (status, text) = agent.call("GET", "/v1/nosuch", &management, None);
    assert!(
        status == 404 && text.contains("not an endpoint"),
        "{status} {text}"
    );
    let (status, text) = agent.call("DELETE", "/v1/jobs", &management, None);
    assert_eq!((status, text.as_str()), (405, "Invalid method"));
    let (status, text) = agent.call("GET", "/v1/job/x/dispatch", &management, None);
    assert!(
        status == 404 && text.contains("\"dispatch\" is not served"),
        "{status} {text}"
    );
    // IDs: a job's may hold `/` (told by its suffix); an allocation's may not.
    let (status, text) = agent.call("GET", "/v1/job/a/b/versions", &management, None);
    assert_eq!((status, text.as_str()), (404, "job versions not found"));
    let (status, text) = agent.call("GET", "/v1/allocation/a/b", &management, None);
    assert!(
        status == 404 && text.contains("not an endpoint"),
        "{status} {text}"
    );
    let (status, text) = agent.call("GET", "/v1/acl/nosuch", &management, None);
    assert_eq!(
        (status, text.as_str()),
        (404, ""),
        "Nomad's empty 404 for an ACL path"
    );
}
