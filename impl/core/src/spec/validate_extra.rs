//! The validation of the fields beside the stop path (issue 13, part 4): meta, constraints,
//! networks and their ports, resources, templates, service tags — each with a limit, and
//! each refused by name where this agent could not honour it.

use super::{Constraint, Job, Network, Resources, Service, Template};
use std::collections::{BTreeMap, BTreeSet};

const MAX_META: usize = 256;
const MAX_META_BYTES: usize = 64 << 10;
const MAX_CONSTRAINTS: usize = 32;
const MAX_PORTS: usize = 64;
const MAX_TEMPLATES: usize = 64;
const MAX_TEMPLATE_BYTES: usize = 1 << 20;
const MAX_TAGS: usize = 64;
/// How deep a task's `Config` may nest (JSON readers stop at 128 levels, and a job is stored
/// a few levels down in an allocation's record).
const MAX_CONFIG_DEPTH: usize = 32;

/// How deep a value nests (a scalar is 0).
fn depth(value: &serde_json::Value) -> usize {
    // Iterative: the value came from a reader that bounds it, but this must not recurse.
    let mut deepest = 0;
    let mut todo = vec![(value, 0usize)];
    while let Some((value, at)) = todo.pop() {
        deepest = deepest.max(at);
        match value {
            serde_json::Value::Array(items) => todo.extend(items.iter().map(|v| (v, at + 1))),
            serde_json::Value::Object(members) => {
                todo.extend(members.values().map(|v| (v, at + 1)))
            }
            _ => {}
        }
    }
    deepest
}

/// The constraint operands judged on the node's attributes.
pub const OPERANDS: [&str; 7] = ["=", "==", "is", "!=", "not", "is_set", "is_not_set"];

/// The targets a constraint can name: the node's attributes and fields.
pub fn target_problem(target: &str) -> Option<String> {
    let inner = target.strip_prefix("${").and_then(|t| t.strip_suffix('}'));
    match inner {
        Some(name)
            if name.starts_with("attr.")
                || name.starts_with("meta.")
                || matches!(
                    name,
                    "node.datacenter"
                        | "node.unique.id"
                        | "node.unique.name"
                        | "node.class"
                        | "node.pool"
                ) =>
        {
            None
        }
        _ => Some(format!(
            "{target:?} is not a node attribute this agent judges (${{attr.NAME}}, \
             ${{meta.NAME}}, ${{node.datacenter}}, ${{node.unique.id}}, ${{node.unique.name}}, \
             ${{node.class}}, ${{node.pool}})"
        )),
    }
}

/// The most datacenters a job names, and the longest.
const MAX_DATACENTERS: usize = 64;

pub(super) fn check(job: &Job, fail: &mut dyn FnMut(String, String)) {
    if job.datacenters.len() > MAX_DATACENTERS {
        fail(
            "Datacenters".into(),
            format!("at most {MAX_DATACENTERS} (got {})", job.datacenters.len()),
        );
    }
    if let Some(dc) = job
        .datacenters
        .iter()
        .find(|dc| dc.is_empty() || dc.len() > 128 || dc.chars().any(char::is_control))
    {
        fail(
            "Datacenters".into(),
            format!("{dc:?} is not a datacenter (1 to 128 bytes, no control characters)"),
        );
    }
    if !matches!(job.node_pool.as_str(), "" | "default") {
        fail(
            "NodePool".into(),
            format!(
                "only the \"default\" node pool exists here (got {:?})",
                job.node_pool
            ),
        );
    }
    meta(fail, "Meta", job.meta.as_ref());
    constraints(fail, "Constraints", job.constraints.as_deref());
    for (g, group) in job.task_groups.iter().enumerate() {
        let at = format!("TaskGroups[{g}]");
        meta(fail, &format!("{at}.Meta"), group.meta.as_ref());
        constraints(
            fail,
            &format!("{at}.Constraints"),
            group.constraints.as_deref(),
        );
        let labels = networks(fail, &at, group.networks.as_deref());
        services(
            fail,
            &format!("{at}.Services"),
            group.services.as_deref(),
            &labels,
        );
        super::validate_checks::per_alloc(fail, &at, group);
        for (t, task) in group.tasks.iter().enumerate() {
            let at = format!("{at}.Tasks[{t}]");
            meta(fail, &format!("{at}.Meta"), task.meta.as_ref());
            if let Some(config) = &task.config {
                let deepest = config.values().map(depth).max().unwrap_or(0);
                if deepest > MAX_CONFIG_DEPTH {
                    fail(
                        format!("{at}.Config"),
                        format!(
                            "nested {deepest} deep, at most {MAX_CONFIG_DEPTH} (the agent stores \
                             the job inside other records, which must read back)"
                        ),
                    );
                }
            }
            constraints(
                fail,
                &format!("{at}.Constraints"),
                task.constraints.as_deref(),
            );
            resources(fail, &format!("{at}.Resources"), task.resources.as_ref());
            templates(fail, &format!("{at}.Templates"), task.templates.as_deref());
            services(
                fail,
                &format!("{at}.Services"),
                task.services.as_deref(),
                &labels,
            );
        }
    }
}

fn meta(fail: &mut dyn FnMut(String, String), at: &str, meta: Option<&BTreeMap<String, String>>) {
    let Some(meta) = meta else { return };
    if meta.len() > MAX_META {
        fail(
            at.into(),
            format!("at most {MAX_META} keys (got {})", meta.len()),
        );
    }
    let bytes: usize = meta.iter().map(|(k, v)| k.len() + v.len()).sum();
    if bytes > MAX_META_BYTES {
        fail(
            at.into(),
            format!("at most {MAX_META_BYTES} bytes in all (got {bytes})"),
        );
    }
    for (key, value) in meta {
        if key.is_empty() || key.len() > 128 || key.contains(['=', '\0']) {
            fail(
                at.into(),
                format!("{key:?} is not a meta key (1 to 128 bytes, no = or NUL)"),
            );
        } else if value.contains('\0') {
            fail(format!("{at}[{key:?}]"), "must contain no NUL".into());
        }
    }
}

fn constraints(fail: &mut dyn FnMut(String, String), at: &str, list: Option<&[Constraint]>) {
    let Some(list) = list else { return };
    if list.len() > MAX_CONSTRAINTS {
        fail(
            at.into(),
            format!("at most {MAX_CONSTRAINTS} (got {})", list.len()),
        );
    }
    for (c, constraint) in list.iter().enumerate() {
        let at = format!("{at}[{c}]");
        let operand = if constraint.operand.is_empty() {
            "="
        } else {
            constraint.operand.as_str()
        };
        if !OPERANDS.contains(&operand) {
            fail(
                format!("{at}.Operand"),
                format!(
                    "{operand:?} is not an operand this agent judges ({})",
                    OPERANDS.join(", ")
                ),
            );
        }
        if let Some(problem) = target_problem(&constraint.l_target) {
            fail(format!("{at}.LTarget"), problem);
        }
        if constraint.r_target.len() > 1024 || constraint.r_target.contains('\0') {
            fail(format!("{at}.RTarget"), "at most 1024 bytes, no NUL".into());
        }
    }
}

/// Checks the group's networks; returns their port labels.
fn networks(
    fail: &mut dyn FnMut(String, String),
    at: &str,
    networks: Option<&[Network]>,
) -> BTreeSet<String> {
    let mut labels = BTreeSet::new();
    let Some(networks) = networks else {
        return labels;
    };
    if networks.len() > 1 {
        fail(
            format!("{at}.Networks"),
            "at most one network per group".into(),
        );
    }
    let mut ports = 0;
    for (n, network) in networks.iter().enumerate() {
        let at = format!("{at}.Networks[{n}]");
        if !matches!(network.mode.as_str(), "" | "host") {
            fail(
                format!("{at}.Mode"),
                format!(
                    "only host networking is supported (got {:?}: it needs a network namespace)",
                    network.mode
                ),
            );
        }
        for (kind, list, reserved) in [
            ("DynamicPorts", &network.dynamic_ports, false),
            ("ReservedPorts", &network.reserved_ports, true),
        ] {
            for (p, port) in list.iter().flatten().enumerate() {
                ports += 1;
                let at = format!("{at}.{kind}[{p}]");
                let good_label = !port.label.is_empty()
                    && port.label.len() <= 64
                    && port
                        .label
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_');
                if !good_label {
                    fail(
                        format!("{at}.Label"),
                        format!(
                            "{:?} is not a port label (1 to 64 letters, digits or _: it names \
                             NOMAD_PORT_<label>)",
                            port.label
                        ),
                    );
                } else if !labels.insert(port.label.clone()) {
                    fail(
                        format!("{at}.Label"),
                        format!("duplicate port label {:?}", port.label),
                    );
                }
                if reserved && !(1..=65535).contains(&port.value) {
                    fail(
                        format!("{at}.Value"),
                        format!("must be 1 to 65535 (got {})", port.value),
                    );
                }
                if !reserved && port.value != 0 {
                    fail(format!("{at}.Value"), "a dynamic port has no value".into());
                }
                if !(-1..=65535).contains(&port.to) {
                    fail(
                        format!("{at}.To"),
                        format!("must be -1 to 65535 (got {})", port.to),
                    );
                }
                if !matches!(port.host_network.as_str(), "" | "default") {
                    fail(
                        format!("{at}.HostNetwork"),
                        format!(
                            "only the default host network exists (got {:?})",
                            port.host_network
                        ),
                    );
                }
            }
        }
    }
    if ports > MAX_PORTS {
        fail(
            format!("{at}.Networks"),
            format!("at most {MAX_PORTS} ports (got {ports})"),
        );
    }
    labels
}

fn services(
    fail: &mut dyn FnMut(String, String),
    at: &str,
    services: Option<&[Service]>,
    labels: &BTreeSet<String>,
) {
    for (s, service) in services.into_iter().flatten().enumerate() {
        let at = format!("{at}[{s}]");
        let tags = service.tags.as_deref().unwrap_or_default();
        if tags.len() > MAX_TAGS {
            fail(
                format!("{at}.Tags"),
                format!("at most {MAX_TAGS} (got {})", tags.len()),
            );
        }
        if let Some(tag) = tags
            .iter()
            .find(|t| t.is_empty() || t.len() > 255 || t.chars().any(char::is_control))
        {
            fail(
                format!("{at}.Tags"),
                format!("{tag:?} is not a tag (1 to 255 bytes, no control characters)"),
            );
        }
        if !service.port_label.is_empty() && !labels.contains(&service.port_label) {
            fail(
                format!("{at}.PortLabel"),
                format!("no port {:?} in the group's network", service.port_label),
            );
        }
        meta(fail, &format!("{at}.Meta"), service.meta.as_ref());
        if let Some(checks) = &service.checks {
            super::validate_checks::checks(fail, &at, checks, &service.port_label, labels);
        }
    }
}

fn resources(fail: &mut dyn FnMut(String, String), at: &str, resources: Option<&Resources>) {
    let Some(resources) = resources else { return };
    for (name, value, most) in [
        ("CPU", resources.cpu, 10_000_000),
        ("Cores", resources.cores, 4096),
        ("MemoryMB", resources.memory_mb, 100_000_000),
        ("MemoryMaxMB", resources.memory_max_mb, 100_000_000),
    ] {
        if let Some(value) = value.filter(|v| !(0..=most).contains(v)) {
            fail(
                format!("{at}.{name}"),
                format!("must be 0 to {most} (got {value})"),
            );
        }
    }
}

fn templates(fail: &mut dyn FnMut(String, String), at: &str, templates: Option<&[Template]>) {
    let Some(templates) = templates else { return };
    if templates.len() > MAX_TEMPLATES {
        fail(
            at.into(),
            format!("at most {MAX_TEMPLATES} (got {})", templates.len()),
        );
    }
    let mut dests = BTreeSet::new();
    for (t, template) in templates.iter().enumerate() {
        let at = format!("{at}[{t}]");
        let dest = std::path::Path::new(&template.dest_path);
        // Under `local/` (`NOMAD_TASK_DIR`): the task directory's own files (its logs,
        // `exit.json`) are the agent's.
        let inside = template.dest_path.len() <= 256
            && !template.dest_path.contains('\0')
            && dest
                .components()
                .all(|c| matches!(c, std::path::Component::Normal(_)))
            && dest.starts_with("local")
            && dest.components().count() > 1;
        if !inside {
            fail(
                format!("{at}.DestPath"),
                format!(
                    "{:?} is not a path inside the task's local/ directory (local/..., no \
                     \"..\", at most 256 bytes)",
                    template.dest_path
                ),
            );
        } else if !dests.insert(&template.dest_path) {
            fail(
                format!("{at}.DestPath"),
                format!("two templates write {:?}", template.dest_path),
            );
        }
        if template.embedded_tmpl.len() > MAX_TEMPLATE_BYTES {
            fail(
                format!("{at}.EmbeddedTmpl"),
                format!(
                    "at most {MAX_TEMPLATE_BYTES} bytes (got {})",
                    template.embedded_tmpl.len()
                ),
            );
        }
        if template.embedded_tmpl.contains("{{") {
            fail(
                format!("{at}.EmbeddedTmpl"),
                "template directives ({{ ... }}) are not rendered by this agent: give the file's \
                 contents as they are"
                    .into(),
            );
        }
        let perms_ok = template.perms.is_empty()
            || (template.perms.len() <= 4
                && u32::from_str_radix(&template.perms, 8).is_ok_and(|p| p <= 0o777));
        if !perms_ok {
            fail(
                format!("{at}.Perms"),
                format!("{:?} is not octal permissions", template.perms),
            );
        }
    }
}
