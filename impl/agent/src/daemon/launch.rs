//! What a raw_exec task is started with: its command line, its environment (Nomad's
//! `NOMAD_*` variables — the allocation's, its meta, its resources, its ports — and the
//! task's `Env`), interpolated as Nomad does at run time, and its templates' files.

use crate::raw_exec::{self, Launch};
use quiesce_core::client::AllocRunner;
use quiesce_core::spec::Task;
use std::collections::BTreeMap;

/// The command line and environment of a raw_exec task (`Config.command`, `Config.args`,
/// `Env`, and Nomad's `NOMAD_*` variables).
pub(super) fn launch_of(
    task: &Task,
    runner: &AllocRunner,
    dir: &std::path::Path,
    agent: &super::AgentConfig,
) -> Launch {
    let config = task.config.clone().unwrap_or_default();
    let command = config
        .get("command")
        .and_then(|c| c.as_str())
        .unwrap_or_default()
        .to_string();
    let args: Vec<String> = config
        .get("args")
        .and_then(|a| a.as_array())
        .map(|args| {
            args.iter()
                .map(|a| a.as_str().map_or_else(|| a.to_string(), str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let alloc = &runner.alloc;
    let alloc_dir = dir.parent().unwrap_or(dir).to_path_buf();
    let mut env: Vec<(String, String)> = vec![
        ("NOMAD_ALLOC_ID".into(), alloc.id.to_string()),
        ("NOMAD_ALLOC_NAME".into(), alloc.name.clone()),
        ("NOMAD_ALLOC_DIR".into(), alloc_dir.display().to_string()),
        (
            "NOMAD_TASK_DIR".into(),
            dir.join(raw_exec::LOCAL_DIR).display().to_string(),
        ),
        ("NOMAD_TASK_NAME".into(), task.name.clone()),
        ("NOMAD_GROUP_NAME".into(), alloc.task_group.to_string()),
        ("NOMAD_JOB_ID".into(), alloc.job_id.to_string()),
        ("NOMAD_JOB_NAME".into(), alloc.job.name.clone()),
        ("NOMAD_NAMESPACE".into(), alloc.namespace.clone()),
        ("NOMAD_REGION".into(), alloc.job.region.clone()),
        ("NOMAD_DC".into(), agent.datacenter.clone()),
    ];
    env.extend(nomad_env(task, runner, agent));
    env.extend(task.env.clone().unwrap_or_default());
    let files = task
        .templates
        .iter()
        .flatten()
        .map(|template| {
            let mode = u32::from_str_radix(&template.perms, 8).unwrap_or(0o644);
            let path = std::path::PathBuf::from(&template.dest_path);
            (path, template.embedded_tmpl.clone().into_bytes(), mode)
        })
        .collect();
    Launch {
        state: None,
        cgroups: agent.cgroups.clone(),
        dir: dir.to_path_buf(),
        command: interpolate(&command, &env),
        args: args.iter().map(|arg| interpolate(arg, &env)).collect(),
        env,
        user: (!task.user.is_empty()).then(|| task.user.clone()),
        files,
    }
}

/// Nomad's variables for what the job asks beside the command: its meta (the job's, then
/// the group's, then the task's, a later one winning; each key as written and in upper
/// case, as Nomad sets both), the task's resources, and the group's ports on the host.
fn nomad_env(
    task: &Task,
    runner: &AllocRunner,
    config: &super::AgentConfig,
) -> Vec<(String, String)> {
    let alloc = &runner.alloc;
    let group = alloc
        .job
        .task_groups
        .iter()
        .find(|group| group.name == alloc.task_group);
    let mut meta = BTreeMap::new();
    for level in [
        alloc.job.meta.as_ref(),
        group.and_then(|g| g.meta.as_ref()),
        task.meta.as_ref(),
    ]
    .into_iter()
    .flatten()
    {
        meta.extend(level.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    let mut env = Vec::new();
    for (key, value) in meta {
        let safe: String = key
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        env.push((format!("NOMAD_META_{safe}"), value.clone()));
        env.push((format!("NOMAD_META_{}", safe.to_ascii_uppercase()), value));
    }
    if let Some(resources) = &task.resources {
        // A task that asks for cores has no MHz of its own (its `CPU` is 0): no limit told.
        if let Some(cpu) = resources
            .cpu
            .filter(|&cpu| cpu > 0 || resources.cores.unwrap_or(0) == 0)
        {
            env.push(("NOMAD_CPU_LIMIT".into(), cpu.to_string()));
        }
        if let Some(memory) = resources.memory_mb {
            env.push(("NOMAD_MEMORY_LIMIT".into(), memory.to_string()));
        }
        if let Some(max) = resources.memory_max_mb {
            env.push(("NOMAD_MEMORY_MAX_LIMIT".into(), max.to_string()));
        }
    }
    let ip = config.bind.ip().to_string();
    for port in &alloc.ports {
        let label = &port.label;
        let value = port.value.to_string();
        env.push((format!("NOMAD_IP_{label}"), ip.clone()));
        env.push((format!("NOMAD_PORT_{label}"), value.clone()));
        env.push((format!("NOMAD_HOST_PORT_{label}"), value.clone()));
        env.push((format!("NOMAD_ADDR_{label}"), format!("{ip}:{value}")));
        env.push((format!("NOMAD_HOST_ADDR_{label}"), format!("{ip}:{value}")));
        env.push((format!("NOMAD_HOST_IP_{label}"), ip.clone()));
    }
    env
}

/// Nomad's runtime interpolation, for the task's own variables: `${NAME}` becomes the value
/// of `NAME` in the task's environment (`NOMAD_ALLOC_DIR`, `env` entries); anything else is
/// left as written.
fn interpolate(text: &str, env: &[(String, String)]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        match after.find('}') {
            Some(end) => {
                let name = &after[..end];
                let name = name.strip_prefix("env.").unwrap_or(name);
                match env.iter().rev().find(|(key, _)| key == name) {
                    Some((_, value)) => out.push_str(value),
                    None => out.push_str(&rest[start..start + 2 + end + 1]),
                }
                rest = &after[end + 1..];
            }
            None => {
                out.push_str(&rest[start..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn task_variables_are_interpolated_and_others_left_alone() {
        let env = vec![
            ("NOMAD_ALLOC_DIR".to_string(), "/data/alloc/a".to_string()),
            ("MODE".to_string(), "serve".to_string()),
        ];
        assert_eq!(
            super::interpolate(
                "${NOMAD_ALLOC_DIR}/x ${env.MODE} ${node.class} $HOME ${",
                &env
            ),
            "/data/alloc/a/x serve ${node.class} $HOME ${"
        );
    }
}
