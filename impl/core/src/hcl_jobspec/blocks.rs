//! The jobspec's blocks beside the stop path, in the API's shape: those the agent honours
//! converted field by field (`meta`, `constraint`, `network` and its ports, `resources`,
//! `template`), the others converted generically (attributes and blocks under their API
//! names) so that `spec::fields` can warn about them or refuse them by name — never
//! dropped here.

use super::{
    attribute_duration, attribute_value, free_map, header, label_span, put, single_label,
    unknown_attribute, unknown_block, At, Problem, Scope,
};
use hcl::edit::structure::{Block, Body};
use hcl::edit::Span;
use serde_json::{json, Map, Value};

/// Where an HCL block goes in the API's object, and how it is read.
pub enum Kind {
    /// The user's map (`meta`): string values.
    Meta,
    /// A list of `constraint` blocks.
    Constraints,
    /// A group's `network` (one, as a list of one).
    Network,
    Resources,
    /// A list of `template` blocks.
    Templates,
    /// `restart`: `interval` and `delay` are durations.
    Restart,
    /// `update`: its deadlines and times are durations.
    Update,
    /// A list of a service's `check` blocks: `interval` and `timeout` are durations, `port`
    /// is `PortLabel`.
    Checks,
    /// Any other block: `(API key, whether several make a list)`.
    Generic(&'static str, bool),
}

/// The blocks a job, a group, a task and a service may hold beside the ones `mod.rs`
/// reads, and their API names.
pub fn job_block(name: &str) -> Option<Kind> {
    Some(match name {
        "meta" => Kind::Meta,
        "constraint" => Kind::Constraints,
        "affinity" => Kind::Generic("Affinities", true),
        "spread" => Kind::Generic("Spreads", true),
        "update" => Kind::Update,
        "migrate" => Kind::Generic("Migrate", false),
        "reschedule" => Kind::Generic("Reschedule", false),
        "ui" => Kind::Generic("UI", false),
        "periodic" => Kind::Generic("Periodic", false),
        "parameterized" => Kind::Generic("ParameterizedJob", false),
        "multiregion" => Kind::Generic("Multiregion", false),
        _ => return None,
    })
}

pub fn group_block(name: &str) -> Option<Kind> {
    Some(match name {
        "meta" => Kind::Meta,
        "constraint" => Kind::Constraints,
        "network" => Kind::Network,
        "restart" => Kind::Restart,
        "reschedule" => Kind::Generic("ReschedulePolicy", false),
        "update" => Kind::Update,
        "migrate" => Kind::Generic("Migrate", false),
        "ephemeral_disk" => Kind::Generic("EphemeralDisk", false),
        "affinity" => Kind::Generic("Affinities", true),
        "spread" => Kind::Generic("Spreads", true),
        "volume" => Kind::Generic("Volumes", true),
        "scaling" => Kind::Generic("Scaling", false),
        "disconnect" => Kind::Generic("Disconnect", false),
        "consul" => Kind::Generic("Consul", false),
        _ => return None,
    })
}

pub fn task_block(name: &str) -> Option<Kind> {
    Some(match name {
        "meta" => Kind::Meta,
        "constraint" => Kind::Constraints,
        "resources" => Kind::Resources,
        "template" => Kind::Templates,
        "logs" => Kind::Generic("LogConfig", false),
        "artifact" => Kind::Generic("Artifacts", true),
        "restart" => Kind::Restart,
        "affinity" => Kind::Generic("Affinities", true),
        "identity" => Kind::Generic("Identities", true),
        "vault" => Kind::Generic("Vault", false),
        "volume_mount" => Kind::Generic("VolumeMounts", true),
        "dispatch_payload" => Kind::Generic("DispatchPayload", false),
        "scaling" => Kind::Generic("ScalingPolicies", true),
        "consul" => Kind::Generic("Consul", false),
        "action" => Kind::Generic("Actions", true),
        "schedule" => Kind::Generic("Schedule", false),
        _ => return None,
    })
}

pub fn service_block(name: &str) -> Option<Kind> {
    Some(match name {
        "meta" => Kind::Meta,
        "check" => Kind::Checks,
        "check_restart" => Kind::Generic("CheckRestart", false),
        "connect" => Kind::Generic("Connect", false),
        _ => return None,
    })
}

/// `snake_case` as the API's `PascalCase`.
fn pascal(name: &str) -> String {
    name.split('_')
        .map(|word| {
            let mut chars = word.chars();
            chars.next().map_or_else(String::new, |first| {
                first.to_ascii_uppercase().to_string() + chars.as_str()
            })
        })
        .collect()
}

/// A block's attributes and blocks under their API names.
fn generic(scope: &Scope, body: &Body, at: &At) -> Result<Value, Problem> {
    let mut out = Map::new();
    for attribute in body.attributes() {
        let read = attribute_value(scope, attribute, &at.hcl)?;
        put(
            scope,
            &mut out,
            at,
            &pascal(attribute.key.as_str()),
            attribute,
            read,
        );
    }
    for block in body.blocks() {
        let key = pascal(block.ident.as_str());
        let inner = at.inner(block.ident.as_str(), at.field(&key));
        scope.places.record(inner.json.clone(), header(block));
        out.insert(key, generic(scope, &block.body, &inner)?);
    }
    Ok(Value::Object(out))
}

/// Adds `block` to `out` as `kind` says, recording where its fields were written.
pub fn add(
    scope: &Scope,
    out: &mut Map<String, Value>,
    kind: Kind,
    block: &Block,
    parent: &At,
) -> Result<(), Problem> {
    let ident = block.ident.as_str();
    // The block as the `key` of its parent, or as the next item of the list at `key`.
    let single = |key: &str| parent.inner(ident, parent.field(key));
    let next = |out: &Map<String, Value>, key: &str| {
        let index = out.get(key).and_then(Value::as_array).map_or(0, Vec::len);
        parent.inner(ident, parent.field(&format!("{key}[{index}]")))
    };
    let push = |out: &mut Map<String, Value>, key: &str, item: Value| {
        let list = out.entry(key).or_insert_with(|| json!([]));
        if let Value::Array(items) = list {
            items.push(item);
        }
    };
    let at = match &kind {
        Kind::Meta => single("Meta"),
        Kind::Constraints => next(out, "Constraints"),
        Kind::Network => next(out, "Networks"),
        Kind::Resources => single("Resources"),
        Kind::Templates => next(out, "Templates"),
        Kind::Restart => single("RestartPolicy"),
        Kind::Update => single("Update"),
        Kind::Checks => next(out, "Checks"),
        Kind::Generic(key, true) => next(out, key),
        Kind::Generic(key, false) => single(key),
    };
    scope.places.record(at.json.clone(), header(block));
    match kind {
        Kind::Meta => {
            let mut meta = Map::new();
            let Value::Object(read) = free_map(scope, &block.body, &at.hcl)? else {
                unreachable!("free_map reads an object")
            };
            for (key, item) in read {
                let text = match item {
                    Value::String(text) => text,
                    Value::Number(_) | Value::Bool(_) => item.to_string(),
                    _ => {
                        let span = block
                            .body
                            .iter()
                            .find(|item| {
                                item.is_attribute()
                                    && item.as_attribute().is_some_and(|a| a.key.as_str() == key)
                                    || item.as_block().is_some_and(|b| b.ident.as_str() == key)
                            })
                            .and_then(|item| item.span());
                        return Err(Problem::at(
                            span,
                            format!("{at}.{key}: a meta value is a string"),
                        ));
                    }
                };
                meta.insert(key, json!(text));
            }
            let existing = out.entry("Meta").or_insert_with(|| json!({}));
            if let Value::Object(existing) = existing {
                existing.extend(meta);
            }
        }
        Kind::Constraints => push(out, "Constraints", constraint(scope, &block.body, &at)?),
        Kind::Network => push(out, "Networks", network(scope, &block.body, &at)?),
        Kind::Resources => {
            out.insert("Resources".into(), resources(scope, &block.body, &at)?);
        }
        Kind::Templates => push(out, "Templates", template(scope, &block.body, &at)?),
        Kind::Restart => {
            once(out, "RestartPolicy", block, &at.hcl)?;
            out.insert("RestartPolicy".into(), restart(scope, &block.body, &at)?);
        }
        Kind::Update => {
            once(out, "Update", block, &at.hcl)?;
            out.insert("Update".into(), update(scope, &block.body, &at)?);
        }
        Kind::Checks => push(out, "Checks", check(scope, &block.body, &at)?),
        Kind::Generic(key, true) => push(out, key, generic(scope, &block.body, &at)?),
        Kind::Generic(key, false) => {
            out.insert(key.into(), generic(scope, &block.body, &at)?);
        }
    }
    Ok(())
}

/// `restart { attempts interval delay mode render_templates }`, durations in nanoseconds.
fn restart(scope: &Scope, body: &Body, at: &At) -> Result<Value, Problem> {
    flat_block(
        scope,
        body,
        at,
        &["interval", "delay"],
        &["attempts", "mode", "render_templates"],
    )
}

/// A block of attributes only: each of `durations` read as a duration (nanoseconds), each
/// of `values` as it is; any other attribute, or any block, refused by name.
fn flat_block(
    scope: &Scope,
    body: &Body,
    at: &At,
    durations: &[&str],
    values: &[&str],
) -> Result<Value, Problem> {
    let mut out = Map::new();
    for attribute in body.attributes() {
        let key = attribute.key.as_str();
        let read = if durations.contains(&key) {
            attribute_duration(scope, attribute, &at.hcl)?
        } else if values.contains(&key) {
            attribute_value(scope, attribute, &at.hcl)?
        } else {
            return Err(unknown_attribute(&at.hcl, attribute));
        };
        put(scope, &mut out, at, &pascal(key), attribute, read);
    }
    if let Some(block) = body.blocks().next() {
        return Err(unknown_block(&at.hcl, block));
    }
    Ok(Value::Object(out))
}

/// A block that may be given once in its scope (Nomad's "Duplicate … block").
fn once(out: &Map<String, Value>, key: &str, block: &Block, at: &str) -> Result<(), Problem> {
    if out.contains_key(key) {
        return Err(Problem::at(
            block.ident.span(),
            format!("{at}: duplicate block: only one is allowed here"),
        ));
    }
    Ok(())
}

/// `update { max_parallel health_check min_healthy_time healthy_deadline progress_deadline
/// auto_revert auto_promote canary stagger }`, durations in nanoseconds.
fn update(scope: &Scope, body: &Body, at: &At) -> Result<Value, Problem> {
    flat_block(
        scope,
        body,
        at,
        &[
            "stagger",
            "min_healthy_time",
            "healthy_deadline",
            "progress_deadline",
        ],
        &[
            "max_parallel",
            "health_check",
            "auto_revert",
            "auto_promote",
            "canary",
        ],
    )
}

/// `check { name type path method protocol port interval timeout on_update … }`: the
/// durations in nanoseconds, `port` as `PortLabel`, any other attribute or block under its
/// API name (for `spec::fields` to warn of or refuse).
fn check(scope: &Scope, body: &Body, at: &At) -> Result<Value, Problem> {
    let mut out = match generic(scope, body, at)? {
        Value::Object(out) => out,
        _ => unreachable!("generic reads an object"),
    };
    for attribute in body.attributes() {
        match attribute.key.as_str() {
            "interval" | "timeout" => {
                let value = attribute_duration(scope, attribute, &at.hcl)?;
                out.insert(pascal(attribute.key.as_str()), value);
            }
            "port" => {
                out.remove("Port");
                out.insert(
                    "PortLabel".into(),
                    attribute_value(scope, attribute, &at.hcl)?,
                );
            }
            // Nomad's `task` of a group service's check: accepted and warned of.
            "task" => {
                out.remove("Task");
                let task = attribute_value(scope, attribute, &at.hcl)?;
                out.insert("TaskName".into(), task);
            }
            "grpc_service" | "grpc_use_tls" | "tls_server_name" | "tls_skip_verify" => {
                let key = pascal(attribute.key.as_str());
                let value = out.remove(&key);
                let api_key = match attribute.key.as_str() {
                    "grpc_service" => "GRPCService",
                    "grpc_use_tls" => "GRPCUseTLS",
                    "tls_server_name" => "TLSServerName",
                    _ => "TLSSkipVerify",
                };
                out.extend(value.map(|value| (api_key.to_string(), value)));
            }
            _ => {}
        }
    }
    Ok(Value::Object(out))
}

fn constraint(scope: &Scope, body: &Body, at: &At) -> Result<Value, Problem> {
    let mut out = Map::new();
    for attribute in body.attributes() {
        let read = attribute_value(scope, attribute, &at.hcl)?;
        let text = match &read {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        };
        match attribute.key.as_str() {
            "attribute" => put(scope, &mut out, at, "LTarget", attribute, json!(text)),
            "value" => put(scope, &mut out, at, "RTarget", attribute, json!(text)),
            "operator" => put(scope, &mut out, at, "Operand", attribute, json!(text)),
            // Nomad's shorthands: `distinct_hosts = true` and the like name the operator.
            shorthand @ ("distinct_hosts" | "distinct_property" | "regexp" | "version"
            | "semver" | "set_contains" | "set_contains_any") => {
                put(scope, &mut out, at, "Operand", attribute, json!(shorthand));
                put(scope, &mut out, at, "RTarget", attribute, json!(text));
            }
            _ => return Err(unknown_attribute(&at.hcl, attribute)),
        };
    }
    Ok(Value::Object(out))
}

fn network(scope: &Scope, body: &Body, at: &At) -> Result<Value, Problem> {
    let mut out = Map::new();
    for attribute in body.attributes() {
        let read = attribute_value(scope, attribute, &at.hcl)?;
        put(
            scope,
            &mut out,
            at,
            &pascal(attribute.key.as_str()),
            attribute,
            read,
        );
    }
    let (mut dynamic, mut reserved) = (Vec::new(), Vec::new());
    for block in body.blocks() {
        let path = format!("{at}.{}", block.ident.as_str());
        if block.ident.as_str() != "port" {
            let key = pascal(block.ident.as_str());
            let inner = at.inner(block.ident.as_str(), at.field(&key));
            scope.places.record(inner.json.clone(), header(block));
            out.insert(key, generic(scope, &block.body, &inner)?);
            continue;
        }
        let label = single_label(block, "port")?;
        let mut port = Map::new();
        port.insert("Label".into(), json!(label));
        let mut is_static = false;
        // Where each field was written, recorded once the port's list is known.
        let mut written = vec![("Label", label_span(block))];
        for attribute in block.body.attributes() {
            let read = attribute_value(scope, attribute, &path)?;
            let key = match attribute.key.as_str() {
                "static" => {
                    is_static = true;
                    "Value"
                }
                "to" => "To",
                "host_network" => "HostNetwork",
                _ => return Err(unknown_attribute(&path, attribute)),
            };
            written.push((key, attribute.span()));
            port.insert(key.into(), read);
        }
        let list = if is_static {
            &mut reserved
        } else {
            &mut dynamic
        };
        let key = if is_static {
            "ReservedPorts"
        } else {
            "DynamicPorts"
        };
        let port_at = at.inner(
            block.ident.as_str(),
            at.field(&format!("{key}[{}]", list.len())),
        );
        scope.places.record(port_at.json.clone(), header(block));
        for (field, span) in written {
            scope.places.record(port_at.field(field), span);
        }
        list.push(Value::Object(port));
    }
    out.insert("DynamicPorts".into(), Value::Array(dynamic));
    out.insert("ReservedPorts".into(), Value::Array(reserved));
    Ok(Value::Object(out))
}

fn resources(scope: &Scope, body: &Body, at: &At) -> Result<Value, Problem> {
    let mut out = Map::new();
    for attribute in body.attributes() {
        let key = match attribute.key.as_str() {
            "cpu" => "CPU".to_string(),
            "cores" => "Cores".into(),
            "memory" => "MemoryMB".into(),
            "memory_max" => "MemoryMaxMB".into(),
            "disk" => "DiskMB".into(),
            "iops" => "IOPS".into(),
            "secrets" => "SecretsMB".into(),
            other => pascal(other),
        };
        let read = attribute_value(scope, attribute, &at.hcl)?;
        put(scope, &mut out, at, &key, attribute, read);
    }
    for block in body.blocks() {
        let key = match block.ident.as_str() {
            "device" => "Devices".to_string(),
            "network" => "Networks".into(),
            "numa" => "NUMA".into(),
            other => pascal(other),
        };
        let inner = at.inner(block.ident.as_str(), at.field(&key));
        scope.places.record(inner.json.clone(), header(block));
        out.insert(key, generic(scope, &block.body, &inner)?);
    }
    Ok(Value::Object(out))
}

fn template(scope: &Scope, body: &Body, at: &At) -> Result<Value, Problem> {
    let mut out = Map::new();
    for attribute in body.attributes() {
        let key = match attribute.key.as_str() {
            "data" => "EmbeddedTmpl".to_string(),
            "destination" => "DestPath".into(),
            "source" => "SourcePath".into(),
            "perms" => "Perms".into(),
            "env" => "Envvars".into(),
            "splay"
            | "change_mode"
            | "change_signal"
            | "left_delimiter"
            | "right_delimiter"
            | "uid"
            | "gid"
            | "error_on_missing_key"
            | "once" => match attribute.key.as_str() {
                "left_delimiter" => "LeftDelim".into(),
                "right_delimiter" => "RightDelim".into(),
                "error_on_missing_key" => "ErrMissingKey".into(),
                other => pascal(other),
            },
            _ => return Err(unknown_attribute(&at.hcl, attribute)),
        };
        let read = if key == "Splay" {
            attribute_duration(scope, attribute, &at.hcl)?
        } else {
            attribute_value(scope, attribute, &at.hcl)?
        };
        put(scope, &mut out, at, &key, attribute, read);
    }
    for block in body.blocks() {
        let key = pascal(block.ident.as_str());
        let inner = at.inner(block.ident.as_str(), at.field(&key));
        scope.places.record(inner.json.clone(), header(block));
        out.insert(key, generic(scope, &block.body, &inner)?);
    }
    Ok(Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::super::parse_job;

    #[test]
    fn the_blocks_beside_the_stop_path_read_into_the_api_shape() {
        let job = parse_job(
            r#"job "web" {
  node_pool = "default"
  meta { team = "edge" }
  constraint {
    attribute = "${attr.kernel.name}"
    value     = "linux"
  }
  update { max_parallel = 2 }
  group "g" {
    network {
      port "http" {}
      port "admin" { static = 8081 }
    }
    restart {
      attempts = 2
      interval = "10m"
      delay    = "5s"
      mode     = "fail"
    }
    task "t" {
      driver = "raw_exec"
      config { command = "/bin/sleep" }
      resources {
        cpu    = 200
        memory = 128
      }
      template {
        data        = "hello"
        destination = "local/hello.txt"
      }
      artifact { source = "https://example.com/x" }
      service {
        name = "web"
        port = "http"
        tags = ["edge", "v1"]
      }
    }
  }
}"#,
        )
        .unwrap();
        assert_eq!(job["Meta"]["team"], "edge");
        assert_eq!(job["Constraints"][0]["LTarget"], "${attr.kernel.name}");
        assert_eq!(job["Update"]["MaxParallel"], 2);
        let group = &job["TaskGroups"][0];
        assert_eq!(group["Networks"][0]["DynamicPorts"][0]["Label"], "http");
        assert_eq!(group["Networks"][0]["ReservedPorts"][0]["Value"], 8081);
        assert_eq!(group["RestartPolicy"]["Attempts"], 2);
        assert_eq!(group["RestartPolicy"]["Interval"], 600_000_000_000i64);
        assert_eq!(group["RestartPolicy"]["Delay"], 5_000_000_000i64);
        assert_eq!(group["RestartPolicy"]["Mode"], "fail");
        let task = &group["Tasks"][0];
        assert_eq!(task["Resources"]["MemoryMB"], 128);
        assert_eq!(task["Templates"][0]["DestPath"], "local/hello.txt");
        assert_eq!(task["Artifacts"][0]["Source"], "https://example.com/x");
        assert_eq!(task["Services"][0]["PortLabel"], "http");
        assert_eq!(task["Services"][0]["Tags"][1], "v1");
    }

    #[test]
    fn an_update_or_restart_block_given_twice_is_refused_where_it_stands() {
        for block in ["update { max_parallel = 1 }", "restart { attempts = 1 }"] {
            let text = format!(
                "job \"web\" {{\n group \"g\" {{\n {block}\n {block}\n task \"t\" {{ driver = \"raw_exec\" }}\n }}\n}}"
            );
            let refused = parse_job(&text).unwrap_err().to_string();
            assert!(refused.contains("duplicate block"), "{block}: {refused}");
        }
    }
}
