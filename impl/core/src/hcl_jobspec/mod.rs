//! HCL2 jobspecs: the subset of Nomad's jobspec language (`jobspec2`) that the stop path
//! needs, mapped to the JSON API shape that [`crate::spec::parse_register_body`] reads.
//!
//! * `job "<id>"` (the label is the ID, and the name unless `name` is set) with `type`,
//!   `priority`, `datacenters`, `region`, `namespace`, `name`;
//! * `group "<name>"` with `count`, `shutdown_delay`, `service`, `task`; a `task` directly
//!   under `job` becomes its own group, as in Nomad;
//! * `task "<name>"` with `driver`, `user`, `leader`, `kill_timeout`, `kill_signal`,
//!   `shutdown_delay`, `config {}` (free-form), `env {}`, `lifecycle {}`, `service {}`;
//! * durations as Go duration strings (`"30s"`), converted to integer nanoseconds;
//! * `${...}` in strings is kept as text; the agent interpolates `${NOMAD_*}` and the task's
//!   `env` when it starts a raw_exec task.
//!
//! The blocks beside the stop path (`meta`, `constraint`, `network`, `resources`, `template`,
//! `restart`, `update`, `logs`, …) are read into their API fields (`blocks.rs`), where the
//! agent honours them, warns that it does not, or refuses them, by name
//! (`spec::fields`). Anything else — an unknown attribute or block, an expression that needs
//! evaluating (variables, functions, conditionals) — is an error naming where it is, never
//! silently dropped.

mod blocks;

use serde_json::{json, Map, Value};

/// The error text of `/v1/jobs/parse` and `job run` for HCL that cannot be read.
pub fn error(what: impl std::fmt::Display) -> String {
    format!("Failed to parse job: {what}")
}

/// Parses an HCL jobspec into the API's Job object (not wrapped in `{"Job": …}`).
pub fn parse_job(text: &str) -> Result<Value, String> {
    let body = hcl::parse(text).map_err(error)?;
    if let Some(attribute) = body.attributes().next() {
        return Err(error(format!(
            "unexpected attribute {:?} outside the job block",
            attribute.key()
        )));
    }
    if let Some(block) = body
        .blocks()
        .find(|b| matches!(b.identifier.as_str(), "variable" | "locals"))
    {
        return Err(error(format!(
            "{:?} blocks are not supported by this agent: write the values into the job \
             (HCL2 variables and locals are not evaluated)",
            block.identifier.as_str()
        )));
    }
    let mut jobs = body.blocks();
    let job = match (jobs.next(), jobs.next()) {
        (Some(job), None) if job.identifier.as_str() == "job" => job,
        (None, _) => return Err(error("no job block")),
        (Some(block), None) => {
            return Err(error(format!(
                "unexpected block {:?}: a jobspec holds one job block",
                block.identifier.as_str()
            )))
        }
        (Some(_), Some(_)) => return Err(error("more than one block: a jobspec holds one job")),
    };
    let id = single_label(job, "job")?;
    let mut out = Map::new();
    out.insert("ID".into(), json!(id));
    out.insert("Name".into(), json!(id));
    let at = format!("job {id:?}");
    for attribute in job.body.attributes() {
        let key = match attribute.key() {
            "type" => "Type",
            "priority" => "Priority",
            "datacenters" => "Datacenters",
            "region" => "Region",
            "namespace" => "Namespace",
            "name" => "Name",
            "all_at_once" => "AllAtOnce",
            "node_pool" => "NodePool",
            "vault_token" => "VaultToken",
            "consul_token" => "ConsulToken",
            other => return Err(unknown_attribute(&at, other)),
        };
        out.insert(
            key.into(),
            value(attribute.expr(), &format!("{at}.{}", attribute.key()))?,
        );
    }
    let mut groups = Vec::new();
    for block in job.body.blocks() {
        match block.identifier.as_str() {
            "group" => groups.push(group(block, &at)?),
            "task" => {
                // A task directly under the job is a group of its own, named after it.
                let task_value = task(block, &at)?;
                let name = task_value["Name"].clone();
                groups.push(json!({"Name": name, "Tasks": [task_value]}));
            }
            other => match blocks::job_block(other) {
                Some(kind) => blocks::add(&mut out, kind, block, &at)?,
                None => return Err(unknown_block(&at, other)),
            },
        }
    }
    out.insert("TaskGroups".into(), Value::Array(groups));
    Ok(Value::Object(out))
}

fn single_label(block: &hcl::Block, kind: &str) -> Result<String, String> {
    match block.labels.as_slice() {
        [label] => Ok(label.as_str().to_string()),
        _ => Err(error(format!(
            "a {kind} block needs exactly one label (its name)"
        ))),
    }
}

fn unknown_attribute(at: &str, key: &str) -> String {
    error(format!("{at}: unsupported attribute {key:?}"))
}

fn unknown_block(at: &str, kind: &str) -> String {
    error(format!("{at}: unsupported block {kind:?}"))
}

fn group(block: &hcl::Block, parent: &str) -> Result<Value, String> {
    let name = single_label(block, "group")?;
    let at = format!("{parent}.group {name:?}");
    let mut out = Map::new();
    out.insert("Name".into(), json!(name));
    for attribute in block.body.attributes() {
        let path = format!("{at}.{}", attribute.key());
        match attribute.key() {
            "count" => out.insert("Count".into(), value(attribute.expr(), &path)?),
            "shutdown_delay" => {
                out.insert("ShutdownDelay".into(), duration(attribute.expr(), &path)?)
            }
            "stop_after_client_disconnect" => out.insert(
                "StopAfterClientDisconnect".into(),
                duration(attribute.expr(), &path)?,
            ),
            "max_client_disconnect" => out.insert(
                "MaxClientDisconnect".into(),
                duration(attribute.expr(), &path)?,
            ),
            "prevent_reschedule_on_lost" => out.insert(
                "PreventRescheduleOnLost".into(),
                value(attribute.expr(), &path)?,
            ),
            other => return Err(unknown_attribute(&at, other)),
        };
    }
    let mut tasks = Vec::new();
    let mut services = Vec::new();
    for inner in block.body.blocks() {
        match inner.identifier.as_str() {
            "task" => tasks.push(task(inner, &at)?),
            "service" => services.push(service(inner, &at)?),
            other => match blocks::group_block(other) {
                Some(kind) => blocks::add(&mut out, kind, inner, &at)?,
                None => return Err(unknown_block(&at, other)),
            },
        }
    }
    out.insert("Tasks".into(), Value::Array(tasks));
    if !services.is_empty() {
        out.insert("Services".into(), Value::Array(services));
    }
    Ok(Value::Object(out))
}

fn task(block: &hcl::Block, parent: &str) -> Result<Value, String> {
    let name = single_label(block, "task")?;
    let at = format!("{parent}.task {name:?}");
    let mut out = Map::new();
    out.insert("Name".into(), json!(name));
    for attribute in block.body.attributes() {
        let path = format!("{at}.{}", attribute.key());
        let expr = attribute.expr();
        match attribute.key() {
            "driver" => out.insert("Driver".into(), value(expr, &path)?),
            "leader" => out.insert("Leader".into(), value(expr, &path)?),
            "kill_signal" => out.insert("KillSignal".into(), value(expr, &path)?),
            "kill_timeout" => out.insert("KillTimeout".into(), duration(expr, &path)?),
            "shutdown_delay" => out.insert("ShutdownDelay".into(), duration(expr, &path)?),
            "user" => out.insert("User".into(), value(expr, &path)?),
            "kind" => out.insert("Kind".into(), value(expr, &path)?),
            other => return Err(unknown_attribute(&at, other)),
        };
    }
    let mut services = Vec::new();
    for inner in block.body.blocks() {
        let path = format!("{at}.{}", inner.identifier.as_str());
        match inner.identifier.as_str() {
            "config" => {
                out.insert("Config".into(), free_map(&inner.body, &path)?);
            }
            "env" => {
                out.insert("Env".into(), free_map(&inner.body, &path)?);
            }
            "lifecycle" => {
                let mut lifecycle = Map::new();
                for attribute in inner.body.attributes() {
                    let key = match attribute.key() {
                        "hook" => "Hook",
                        "sidecar" => "Sidecar",
                        other => return Err(unknown_attribute(&path, other)),
                    };
                    lifecycle.insert(key.into(), value(attribute.expr(), &path)?);
                }
                out.insert("Lifecycle".into(), Value::Object(lifecycle));
            }
            "service" => services.push(service(inner, &at)?),
            other => match blocks::task_block(other) {
                Some(kind) => blocks::add(&mut out, kind, inner, &at)?,
                None => return Err(unknown_block(&at, other)),
            },
        }
    }
    if !services.is_empty() {
        out.insert("Services".into(), Value::Array(services));
    }
    Ok(Value::Object(out))
}

fn service(block: &hcl::Block, parent: &str) -> Result<Value, String> {
    let at = format!("{parent}.service");
    let mut out = Map::new();
    for attribute in block.body.attributes() {
        let path = format!("{at}.{}", attribute.key());
        match attribute.key() {
            "name" => out.insert("Name".into(), value(attribute.expr(), &path)?),
            "provider" => out.insert("Provider".into(), value(attribute.expr(), &path)?),
            "port" => out.insert("PortLabel".into(), value(attribute.expr(), &path)?),
            "tags" => out.insert("Tags".into(), value(attribute.expr(), &path)?),
            "task" => out.insert("TaskName".into(), value(attribute.expr(), &path)?),
            "canary_tags" => out.insert("CanaryTags".into(), value(attribute.expr(), &path)?),
            "address_mode" => out.insert("AddressMode".into(), value(attribute.expr(), &path)?),
            "address" => out.insert("Address".into(), value(attribute.expr(), &path)?),
            "enable_tag_override" => {
                out.insert("EnableTagOverride".into(), value(attribute.expr(), &path)?)
            }
            "on_update" => out.insert("OnUpdate".into(), value(attribute.expr(), &path)?),
            other => return Err(unknown_attribute(&at, other)),
        };
    }
    for inner in block.body.blocks() {
        let kind = inner.identifier.as_str();
        match blocks::service_block(kind) {
            Some(kind) => blocks::add(&mut out, kind, inner, &at)?,
            None => return Err(unknown_block(&at, kind)),
        }
    }
    Ok(Value::Object(out))
}

/// A free-form block (`config`, `env`): attributes as values, nested blocks as objects.
fn free_map(body: &hcl::Body, at: &str) -> Result<Value, String> {
    let mut out = Map::new();
    for attribute in body.attributes() {
        let path = format!("{at}.{}", attribute.key());
        out.insert(attribute.key().to_string(), value(attribute.expr(), &path)?);
    }
    for block in body.blocks() {
        let path = format!("{at}.{}", block.identifier.as_str());
        out.insert(
            block.identifier.as_str().to_string(),
            free_map(&block.body, &path)?,
        );
    }
    Ok(Value::Object(out))
}

/// A Go duration string as integer nanoseconds.
fn duration(expr: &hcl::Expression, at: &str) -> Result<Value, String> {
    match value(expr, at)? {
        Value::String(text) => crate::gotime::parse_go_duration(&text)
            .map(|ns| json!(ns))
            .ok_or_else(|| {
                error(format!(
                    "{at}: {text:?} is not a duration (e.g. \"30s\", \"1m30s\")"
                ))
            }),
        other => Err(error(format!(
            "{at}: a duration is a string such as \"30s\" (got {other})"
        ))),
    }
}

/// A literal expression as JSON; anything that needs evaluating is an error.
fn value(expr: &hcl::Expression, at: &str) -> Result<Value, String> {
    use hcl::Expression as E;
    Ok(match expr {
        E::Null => Value::Null,
        E::Bool(b) => json!(b),
        E::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => json!(i),
            (None, Some(f)) => json!(f),
            (None, None) => return Err(error(format!("{at}: number out of range"))),
        },
        E::String(s) => json!(s),
        E::Array(items) => Value::Array(
            items
                .iter()
                .map(|item| value(item, at))
                .collect::<Result<_, _>>()?,
        ),
        E::Object(object) => {
            let mut out = Map::new();
            for (key, item) in object {
                let key = match key {
                    hcl::ObjectKey::Identifier(ident) => ident.as_str().to_string(),
                    hcl::ObjectKey::Expression(expr) => match value(expr, at)? {
                        Value::String(s) => s,
                        other => other.to_string(),
                    },
                    _ => return Err(error(format!("{at}: unsupported object key"))),
                };
                let path = format!("{at}.{key}");
                out.insert(key, value(item, &path)?);
            }
            Value::Object(out)
        }
        // Kept as text: `${NOMAD_ALLOC_DIR}` is interpolated when the task starts.
        E::TemplateExpr(template) => match template.as_ref() {
            hcl::TemplateExpr::QuotedString(raw) => json!(unescape(raw)),
            hcl::TemplateExpr::Heredoc(heredoc) => json!(heredoc.template),
        },
        E::Parenthesis(inner) => value(inner, at)?,
        _ => {
            return Err(error(format!(
                "{at}: expressions (variables, functions, operators) are not supported; write a literal value"
            )))
        }
    })
}

/// The escapes of a quoted HCL string (the template keeps them raw).
fn unescape(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some('"') => out.push('"'),
            Some('\\') => out.push('\\'),
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const WEB: &str = r#"
job "web" {
  datacenters = ["dc1"]
  group "web" {
    count          = 2
    shutdown_delay = "30s"
    service {
      name     = "web"
      provider = "nomad"
      check {
        type = "http"
      }
    }
    network {
      port "http" {}
    }
    task "server" {
      driver         = "raw_exec"
      leader         = true
      shutdown_delay = "1m30s"
      kill_timeout   = "10s"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo \"${NOMAD_ALLOC_DIR}\"; sleep 1"]
      }
      env {
        MODE = "serve"
      }
      resources {
        cpu = 100
      }
    }
    task "cleanup" {
      driver = "raw_exec"
      lifecycle {
        hook = "poststop"
      }
      config {
        command = "/bin/true"
      }
    }
  }
}
"#;

    #[test]
    fn a_jobspec_maps_to_the_api_shape_with_durations_in_nanoseconds() {
        let job = parse_job(WEB).unwrap();
        assert_eq!(job["ID"], "web");
        let group = &job["TaskGroups"][0];
        assert_eq!(group["Count"], 2);
        assert_eq!(group["ShutdownDelay"], 30_000_000_000i64);
        assert_eq!(group["Services"][0]["Name"], "web");
        let server = &group["Tasks"][0];
        assert_eq!(server["ShutdownDelay"], 90_000_000_000i64);
        assert_eq!(server["KillTimeout"], 10_000_000_000i64);
        assert_eq!(server["Leader"], true);
        assert_eq!(
            server["Config"]["args"][1],
            "echo \"${NOMAD_ALLOC_DIR}\"; sleep 1"
        );
        assert_eq!(server["Env"]["MODE"], "serve");
        assert_eq!(group["Tasks"][1]["Lifecycle"]["Hook"], "poststop");
        let body = serde_json::to_vec(&json!({ "Job": job })).unwrap();
        let parsed = crate::spec::parse_register_body(&body).unwrap();
        assert_eq!(parsed.task_groups[0].tasks.len(), 2);
    }

    #[test]
    fn a_task_under_the_job_is_its_own_group() {
        let job = parse_job("job \"one\" {\n task \"t\" {\n driver = \"raw_exec\"\n }\n}").unwrap();
        assert_eq!(job["TaskGroups"][0]["Name"], "t");
        assert_eq!(job["TaskGroups"][0]["Tasks"][0]["Driver"], "raw_exec");
    }

    #[test]
    fn what_it_cannot_read_is_named() {
        let group = |inner: &str| format!("job \"a\" {{\n group \"g\" {{\n {inner}\n }}\n}}");
        let cases = [
            (
                group("shutdown_delay = 30"),
                "shutdown_delay: a duration is a string",
            ),
            (
                group("shutdown_delay = \"soon\""),
                "\"soon\" is not a duration",
            ),
            (group("sprocket {}"), "unsupported block \"sprocket\""),
            (
                group("task \"t\" {\n colour = \"red\"\n }"),
                "unsupported attribute \"colour\"",
            ),
            (
                "job \"a\" {\n priority = var.p\n}".into(),
                "job \"a\".priority: expressions",
            ),
            ("job \"a\" {".into(), "Failed to parse job"),
            ("group \"g\" {}".into(), "a jobspec holds one job block"),
            (
                "variable \"v\" {}\njob \"a\" {}".into(),
                "\"variable\" blocks are not supported",
            ),
        ];
        for (text, expected) in cases {
            let text = text.as_str();
            let problem = parse_job(text).unwrap_err();
            assert!(problem.contains(expected), "{text}: {problem}");
            assert!(problem.starts_with("Failed to parse job: "), "{problem}");
        }
    }
}
