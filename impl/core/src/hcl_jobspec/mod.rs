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
//! * `variable` blocks, `-var`, `-var-file` and `NOMAD_VAR_*` values, and `locals` blocks
//!   (`variables.rs`); `var.<name>` and `local.<name>` are evaluated wherever a value is
//!   written, also inside strings (`"${var.image}"`), and so are operators and conditionals
//!   over them; no function is (`values.rs`);
//! * any other `${...}` in strings is kept as text: the agent interpolates `${NOMAD_*}`,
//!   `${node.*}`, `${attr.*}`, `${meta.*}` and the task's `env` when it starts a task.
//!
//! The blocks beside the stop path (`meta`, `constraint`, `network`, `resources`, `template`,
//! `restart`, `update`, `logs`, …) are read into their API fields (`blocks.rs`), where the
//! agent honours them, warns that it does not, or refuses them, by name
//! (`spec::fields`). Anything else — an unknown attribute or block, a function call — is an
//! error, never silently dropped.
//!
//! Every error names where it is: the file, line and column (`web.hcl:3:5: …`, or in
//! Nomad's form `input.hcl:3,5-16: …` for the HTTP API, see [`Error`]), and the block path
//! (`job "web".group "g".task "t"`). The text is parsed with hcl-edit, the parser hcl-rs
//! itself builds on, because it keeps each item's byte range (`error.rs`). What is checked
//! later, on the JSON (`spec::parse_register_body`), names the JSON field; [`parse_placed`]
//! also records where each field was written, so that [`Placed::check`] names both
//! (`web.hcl:3:5: TaskGroups[0].Count: …`, `places.rs`).

mod blocks;
mod error;
mod places;
mod values;
mod variables;

pub use error::{Error, Input, LineColumn, Place};
pub use places::{Places, MAX_PLACES, MAX_PLACE_PATH_BYTES};
pub use values::MAX_EXPANDED_BYTES;
pub use variables::{var_flag, VariableInputs, MAX_VARIABLES, MAX_VAR_FILES};

use error::Problem;
use hcl::edit::structure::{Attribute, Block, Body};
use hcl::edit::Span;
use serde_json::{json, Map, Value};
use values::{value, Scope};

/// The error text of `/v1/jobs/parse` and `job run` for HCL that cannot be read.
pub fn error(what: impl std::fmt::Display) -> String {
    format!("Failed to parse job: {what}")
}

/// Parses an HCL jobspec that uses no variables into the API's Job object (not wrapped in
/// `{"Job": …}`); its errors name it `input.hcl`, as Nomad's HTTP API does.
pub fn parse_job(text: &str) -> Result<Value, Error> {
    let jobspec = Input {
        name: "input.hcl",
        text,
    };
    parse(jobspec, &VariableInputs::default())
}

/// Parses an HCL jobspec into the API's Job object (not wrapped in `{"Job": …}`), its
/// variables given their values from `inputs`.
pub fn parse(jobspec: Input, inputs: &VariableInputs) -> Result<Value, Error> {
    parse_placed(jobspec, inputs).map(|placed| placed.job)
}

/// A jobspec converted, and where each of its fields was written (for validation errors).
#[derive(Debug, Clone)]
pub struct Placed {
    pub job: Value,
    pub places: Places,
}

impl Placed {
    /// The job checked as the agent registers it (`spec`: decoded, Nomad's defaults
    /// applied, validated), each problem placed where its field was written
    /// (`web.nomad.hcl:7:5: TaskGroups[0].Count: …`).
    pub fn check(&self) -> Result<(), Vec<Error>> {
        let body = serde_json::to_vec(&json!({ "Job": &self.job })).expect("JSON values serialize");
        crate::spec::parse_register_body(&body)
            .map(|_| ())
            .map_err(|errors| errors.0.iter().map(|e| self.places.locate(e)).collect())
    }
}

/// [`parse`], with the places of the job's fields in the text ([`Places`]).
pub fn parse_placed(jobspec: Input, inputs: &VariableInputs) -> Result<Placed, Error> {
    let in_jobspec = |problem| Error::in_input(&jobspec, problem);
    let body = parse_body(jobspec.text).map_err(in_jobspec)?;
    let (job, declarations, locals) = top_level(&body).map_err(in_jobspec)?;
    let variables = variables::resolve(&jobspec, &declarations, inputs)?;
    let mut scope = Scope::new(jobspec.text, &variables);
    variables::evaluate_locals(&mut scope, &locals).map_err(in_jobspec)?;
    let job = read_job(&scope, job).map_err(in_jobspec)?;
    let places = Places::new(jobspec.name, jobspec.text, scope.places.into_spans());
    Ok(Placed { job, places })
}

/// HCL text as hcl-edit's body, which keeps each item's byte range; a syntax error at the
/// place the parser stopped.
fn parse_body(text: &str) -> Result<Body, Problem> {
    hcl::edit::parser::parse_body(text).map_err(|e| {
        let offset = e.location().offset();
        // The character the parser stopped at, or none at the end of a line.
        let end = text
            .get(offset..)
            .and_then(|rest| rest.chars().next())
            .filter(|c| *c != '\n')
            .map_or(offset, |c| offset + c.len_utf8());
        Problem::at(Some(offset..end), e.message().to_string())
    })
}

/// The job block, the `variable` blocks and the `locals` blocks; nothing else may be at
/// the top.
fn top_level(body: &Body) -> Result<(&Block, Vec<&Block>, Vec<&Block>), Problem> {
    if let Some(attribute) = body.attributes().next() {
        return Err(Problem::at(
            attribute.key.span(),
            format!(
                "unexpected attribute {:?} outside the job block",
                attribute.key.as_str()
            ),
        ));
    }
    let (mut jobs, mut declarations, mut locals) = (Vec::new(), Vec::new(), Vec::new());
    for block in body.blocks() {
        match block.ident.as_str() {
            "job" => jobs.push(block),
            "variable" => declarations.push(block),
            "locals" => locals.push(block),
            other => {
                return Err(Problem::at(
                    block.ident.span(),
                    format!("unexpected block {other:?}: a jobspec holds one job block"),
                ))
            }
        }
    }
    match jobs[..] {
        [job] => Ok((job, declarations, locals)),
        [] => Err(Problem::nowhere("no job block")),
        [_, second, ..] => Err(Problem::at(
            second.ident.span(),
            "more than one job block: a jobspec holds one job",
        )),
    }
}

/// Where a value is read: its HCL path, which the converter's errors name (`job
/// "web".group "g"`, and as this type's `Display`), and its JSON path in the job, which
/// validation errors name (`TaskGroups[0]`; the job itself is `""`).
#[derive(Debug, Clone)]
pub(super) struct At {
    pub hcl: String,
    pub json: String,
}

impl At {
    /// A block inside this one: `hcl` is appended to the HCL path, `json` is its JSON path.
    fn inner(&self, hcl: impl std::fmt::Display, json: String) -> At {
        At {
            hcl: format!("{}.{hcl}", self.hcl),
            json,
        }
    }

    /// The JSON path of this object's member `key`.
    fn field(&self, key: &str) -> String {
        if self.json.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.json)
        }
    }
}

impl std::fmt::Display for At {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.hcl)
    }
}

/// A block's header, `task "server"`: where a validation error about the whole block, or
/// about its name, is placed.
fn header(block: &Block) -> Option<std::ops::Range<usize>> {
    let start = block.ident.span()?.start;
    let end = match block.labels.last() {
        Some(label) => label.span()?.end,
        None => block.ident.span()?.end,
    };
    Some(start..end)
}

/// The label of a block, where its name goes (`TaskGroups[0].Name`).
fn label_span(block: &Block) -> Option<std::ops::Range<usize>> {
    block.labels.first().and_then(|label| label.span())
}

/// Puts `read` in `out` as `key`, recording that the field was written at `attribute`.
fn put(
    scope: &Scope,
    out: &mut Map<String, Value>,
    at: &At,
    key: &str,
    attribute: &Attribute,
    read: Value,
) {
    scope.places.record(at.field(key), attribute.span());
    out.insert(key.into(), read);
}

fn read_job(scope: &Scope, job: &Block) -> Result<Value, Problem> {
    let id = single_label(job, "job")?;
    let mut out = Map::new();
    out.insert("ID".into(), json!(id));
    out.insert("Name".into(), json!(id));
    let at = At {
        hcl: format!("job {id:?}"),
        json: String::new(),
    };
    scope.places.record(String::new(), header(job));
    scope.places.record("ID".into(), label_span(job));
    scope.places.record("Name".into(), label_span(job));
    for attribute in job.body.attributes() {
        let key = match attribute.key.as_str() {
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
            _ => return Err(unknown_attribute(&at.hcl, attribute)),
        };
        let read = attribute_value(scope, attribute, &at.hcl)?;
        put(scope, &mut out, &at, key, attribute, read);
    }
    let mut groups = Vec::new();
    for block in job.body.blocks() {
        let json = format!("TaskGroups[{}]", groups.len());
        match block.ident.as_str() {
            "group" => groups.push(group(scope, block, &at, json)?),
            "task" => {
                // A task directly under the job is a group of its own, named after it.
                scope.places.record(json.clone(), header(block));
                scope
                    .places
                    .record(format!("{json}.Name"), label_span(block));
                let task_value = task(scope, block, &at, format!("{json}.Tasks[0]"))?;
                let name = task_value["Name"].clone();
                groups.push(json!({"Name": name, "Tasks": [task_value]}));
            }
            other => match blocks::job_block(other) {
                Some(kind) => blocks::add(scope, &mut out, kind, block, &at)?,
                None => return Err(unknown_block(&at.hcl, block)),
            },
        }
    }
    out.insert("TaskGroups".into(), Value::Array(groups));
    Ok(Value::Object(out))
}

fn single_label(block: &Block, kind: &str) -> Result<String, Problem> {
    match block.labels.as_slice() {
        [label] => Ok(label.as_str().to_string()),
        [] => Err(Problem::at(
            block.ident.span(),
            format!("a {kind} block needs exactly one label (its name)"),
        )),
        [_, extra, ..] => Err(Problem::at(
            extra.span(),
            format!("a {kind} block needs exactly one label (its name)"),
        )),
    }
}

fn unknown_attribute(at: &str, attribute: &Attribute) -> Problem {
    Problem::at(
        attribute.key.span(),
        format!("{at}: unsupported attribute {:?}", attribute.key.as_str()),
    )
}

fn unknown_block(at: &str, block: &Block) -> Problem {
    Problem::at(
        block.ident.span(),
        format!("{at}: unsupported block {:?}", block.ident.as_str()),
    )
}

/// An attribute's value; errors name it as `{at}.{key}`.
fn attribute_value(scope: &Scope, attribute: &Attribute, at: &str) -> Result<Value, Problem> {
    value(
        scope,
        &attribute.value,
        &format!("{at}.{}", attribute.key.as_str()),
    )
}

/// An attribute's value as a duration; errors name it as `{at}.{key}`.
fn attribute_duration(scope: &Scope, attribute: &Attribute, at: &str) -> Result<Value, Problem> {
    duration(
        scope,
        attribute,
        &format!("{at}.{}", attribute.key.as_str()),
    )
}

/// A group block, whose JSON path is `json` (`TaskGroups[0]`).
fn group(scope: &Scope, block: &Block, parent: &At, json: String) -> Result<Value, Problem> {
    let name = single_label(block, "group")?;
    let at = parent.inner(format_args!("group {name:?}"), json);
    scope.places.record(at.json.clone(), header(block));
    scope.places.record(at.field("Name"), label_span(block));
    let mut out = Map::new();
    out.insert("Name".into(), json!(name));
    for attribute in block.body.attributes() {
        let hcl = &at.hcl;
        let (key, read) = match attribute.key.as_str() {
            "count" => ("Count", attribute_value(scope, attribute, hcl)?),
            "shutdown_delay" => ("ShutdownDelay", attribute_duration(scope, attribute, hcl)?),
            "stop_after_client_disconnect" => (
                "StopAfterClientDisconnect",
                attribute_duration(scope, attribute, hcl)?,
            ),
            "max_client_disconnect" => (
                "MaxClientDisconnect",
                attribute_duration(scope, attribute, hcl)?,
            ),
            "prevent_reschedule_on_lost" => (
                "PreventRescheduleOnLost",
                attribute_value(scope, attribute, hcl)?,
            ),
            _ => return Err(unknown_attribute(hcl, attribute)),
        };
        put(scope, &mut out, &at, key, attribute, read);
    }
    let mut tasks = Vec::new();
    let mut services = Vec::new();
    for inner in block.body.blocks() {
        match inner.ident.as_str() {
            "task" => {
                let json = at.field(&format!("Tasks[{}]", tasks.len()));
                tasks.push(task(scope, inner, &at, json)?);
            }
            "service" => {
                let json = at.field(&format!("Services[{}]", services.len()));
                services.push(service(scope, inner, &at, json)?);
            }
            other => match blocks::group_block(other) {
                Some(kind) => blocks::add(scope, &mut out, kind, inner, &at)?,
                None => return Err(unknown_block(&at.hcl, inner)),
            },
        }
    }
    out.insert("Tasks".into(), Value::Array(tasks));
    if !services.is_empty() {
        out.insert("Services".into(), Value::Array(services));
    }
    Ok(Value::Object(out))
}

/// A task block, whose JSON path is `json` (`TaskGroups[0].Tasks[1]`).
fn task(scope: &Scope, block: &Block, parent: &At, json: String) -> Result<Value, Problem> {
    let name = single_label(block, "task")?;
    let at = parent.inner(format_args!("task {name:?}"), json);
    scope.places.record(at.json.clone(), header(block));
    scope.places.record(at.field("Name"), label_span(block));
    let mut out = Map::new();
    out.insert("Name".into(), json!(name));
    for attribute in block.body.attributes() {
        let hcl = &at.hcl;
        let (key, read) = match attribute.key.as_str() {
            "driver" => ("Driver", attribute_value(scope, attribute, hcl)?),
            "leader" => ("Leader", attribute_value(scope, attribute, hcl)?),
            "kill_signal" => ("KillSignal", attribute_value(scope, attribute, hcl)?),
            "kill_timeout" => ("KillTimeout", attribute_duration(scope, attribute, hcl)?),
            "shutdown_delay" => ("ShutdownDelay", attribute_duration(scope, attribute, hcl)?),
            "user" => ("User", attribute_value(scope, attribute, hcl)?),
            "kind" => ("Kind", attribute_value(scope, attribute, hcl)?),
            _ => return Err(unknown_attribute(hcl, attribute)),
        };
        put(scope, &mut out, &at, key, attribute, read);
    }
    let mut services = Vec::new();
    for inner in block.body.blocks() {
        let path = format!("{at}.{}", inner.ident.as_str());
        match inner.ident.as_str() {
            "config" => {
                scope.places.record(at.field("Config"), header(inner));
                out.insert("Config".into(), free_map(scope, &inner.body, &path)?);
            }
            "env" => {
                scope.places.record(at.field("Env"), header(inner));
                out.insert("Env".into(), free_map(scope, &inner.body, &path)?);
            }
            "lifecycle" => {
                let lifecycle_at = at.inner("lifecycle", at.field("Lifecycle"));
                scope
                    .places
                    .record(lifecycle_at.json.clone(), header(inner));
                let mut lifecycle = Map::new();
                for attribute in inner.body.attributes() {
                    let key = match attribute.key.as_str() {
                        "hook" => "Hook",
                        "sidecar" => "Sidecar",
                        _ => return Err(unknown_attribute(&path, attribute)),
                    };
                    let read = attribute_value(scope, attribute, &path)?;
                    put(scope, &mut lifecycle, &lifecycle_at, key, attribute, read);
                }
                out.insert("Lifecycle".into(), Value::Object(lifecycle));
            }
            "service" => {
                let json = at.field(&format!("Services[{}]", services.len()));
                services.push(service(scope, inner, &at, json)?);
            }
            other => match blocks::task_block(other) {
                Some(kind) => blocks::add(scope, &mut out, kind, inner, &at)?,
                None => return Err(unknown_block(&at.hcl, inner)),
            },
        }
    }
    if !services.is_empty() {
        out.insert("Services".into(), Value::Array(services));
    }
    Ok(Value::Object(out))
}

/// A service block, whose JSON path is `json` (`TaskGroups[0].Services[0]`).
fn service(scope: &Scope, block: &Block, parent: &At, json: String) -> Result<Value, Problem> {
    let at = parent.inner("service", json);
    scope.places.record(at.json.clone(), header(block));
    let mut out = Map::new();
    for attribute in block.body.attributes() {
        let key = match attribute.key.as_str() {
            "name" => "Name",
            "provider" => "Provider",
            "port" => "PortLabel",
            "tags" => "Tags",
            "task" => "TaskName",
            "canary_tags" => "CanaryTags",
            "address_mode" => "AddressMode",
            "address" => "Address",
            "enable_tag_override" => "EnableTagOverride",
            "on_update" => "OnUpdate",
            _ => return Err(unknown_attribute(&at.hcl, attribute)),
        };
        let read = attribute_value(scope, attribute, &at.hcl)?;
        put(scope, &mut out, &at, key, attribute, read);
    }
    for inner in block.body.blocks() {
        match blocks::service_block(inner.ident.as_str()) {
            Some(kind) => blocks::add(scope, &mut out, kind, inner, &at)?,
            None => return Err(unknown_block(&at.hcl, inner)),
        }
    }
    Ok(Value::Object(out))
}

/// A free-form block (`config`, `env`): attributes as values, nested blocks as objects.
fn free_map(scope: &Scope, body: &Body, at: &str) -> Result<Value, Problem> {
    let mut out = Map::new();
    for attribute in body.attributes() {
        out.insert(
            attribute.key.as_str().to_string(),
            attribute_value(scope, attribute, at)?,
        );
    }
    for block in body.blocks() {
        let path = format!("{at}.{}", block.ident.as_str());
        out.insert(
            block.ident.as_str().to_string(),
            free_map(scope, &block.body, &path)?,
        );
    }
    Ok(Value::Object(out))
}

/// A Go duration string as integer nanoseconds; errors name `at` and point at the value.
fn duration(scope: &Scope, attribute: &Attribute, at: &str) -> Result<Value, Problem> {
    let span = attribute.value.span();
    match value(scope, &attribute.value, at)? {
        Value::String(text) => crate::gotime::parse_go_duration(&text)
            .map(|ns| json!(ns))
            .ok_or_else(|| {
                Problem::at(
                    span,
                    format!("{at}: {text:?} is not a duration (e.g. \"30s\", \"1m30s\")"),
                )
            }),
        other => Err(Problem::at(
            span,
            format!("{at}: a duration is a string such as \"30s\" (got {other})"),
        )),
    }
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
        type     = "http"
        path     = "/health"
        port     = "http"
        task     = "server"
        interval = "5s"
        timeout  = "2s"
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
        let check = &group["Services"][0]["Checks"][0];
        assert_eq!(check["PortLabel"], "http");
        assert_eq!(check["TaskName"], "server");
        assert_eq!(check.get("Task"), None);
        assert_eq!(check["Interval"], 5_000_000_000i64);
        assert_eq!(check["Timeout"], 2_000_000_000i64);
        assert_eq!(check["Path"], "/health");
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
                "job \"a\".priority: there is no variable \"p\"",
            ),
            (
                "job \"a\" {\n priority = max(1, 2)\n}".into(),
                "function calls are not supported (max())",
            ),
            ("job \"a\" {".into(), "input.hcl:1:"),
            ("group \"g\" {}".into(), "a jobspec holds one job block"),
            (
                "variable \"v\" {}\njob \"a\" {}".into(),
                "Required variable \"v\" is not set",
            ),
        ];
        for (text, expected) in cases {
            let text = text.as_str();
            let problem = parse_job(text).unwrap_err().to_string();
            assert!(problem.contains(expected), "{text}: {problem}");
            assert!(problem.starts_with("input.hcl:"), "{problem}");
        }
    }
}
