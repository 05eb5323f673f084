//! The small commands a Nomad user types around the stop path, with Nomad's layouts:
//! `version`, `job init`, `eval list`, `server members`, `service list|info`, `system gc`.

use super::api::{short, table, text, Api};
use serde_json::Value;
use std::path::Path;

/// `version`: this CLI's version, in the shape of Nomad's first line (`Nomad v1.10.0`).
/// Nomad's `BuildDate` and `Revision` lines follow only when its build recorded them;
/// quiesce's build records neither.
pub(super) fn version() {
    println!("Quiesce v{}", env!("CARGO_PKG_VERSION"));
}

/// The example `job init` writes: a service job whose fields are the stop path's.
const EXAMPLE: &str = r#"# An example job: a web server whose stop drains through the stop path.
# `quiesce job stop web` waits the delays below; `quiesce job stop -no-shutdown-delay web`
# skips them (every pre-stop hook still runs), and the job stored here never changes.
job "example" {
  datacenters = ["*"]
  type        = "service"

  group "web" {
    count = 2

    # After the group's services are deregistered, wait this long before killing tasks.
    shutdown_delay = "10s"

    # A changed spec rolls out one allocation at a time, each stopped through the stop
    # path, the next once the new one has run for min_healthy_time.
    update {
      max_parallel     = 1
      min_healthy_time = "10s"
    }

    network {
      port "http" {}
    }

    service {
      name     = "example-web"
      provider = "nomad"
      port     = "http"
    }

    task "server" {
      driver = "raw_exec"

      # After this task's services are deregistered, wait this long before its signal.
      shutdown_delay = "5s"
      # Then SIGKILL if it has not exited this long after its kill signal.
      kill_timeout = "10s"
      kill_signal  = "SIGINT"

      config {
        command = "/usr/bin/python3"
        args    = ["-m", "http.server", "--bind", "127.0.0.1", "${NOMAD_PORT_http}"]
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
"#;

/// `job init [FILE]`: writes the example job (default `example.nomad.hcl`); refuses to
/// write over a file that is there.
pub(super) fn job_init(file: Option<&Path>) -> Result<(), String> {
    let file = file.unwrap_or(Path::new("example.nomad.hcl"));
    let created = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(file);
    let mut out = match created {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(format!("Job '{}' already exists", file.display()));
        }
        Err(e) => return Err(format!("Failed to write '{}': {e}", file.display())),
    };
    use std::io::Write;
    out.write_all(EXAMPLE.as_bytes())
        .map_err(|e| format!("Failed to write '{}': {e}", file.display()))?;
    println!("Example job file written to {}", file.display());
    Ok(())
}

/// `eval list`: every evaluation, newest first.
pub(super) fn eval_list(api: &Api, verbose: bool) -> Result<(), String> {
    let evals = api.get("/v1/evaluations")?;
    let mut evals = evals.as_array().cloned().unwrap_or_default();
    if evals.is_empty() {
        println!("No evals found");
        return Ok(());
    }
    evals.sort_by_key(|eval| std::cmp::Reverse(eval["CreateIndex"].as_u64().unwrap_or(0)));
    let id = |value: String| {
        if verbose {
            value
        } else {
            short(&value).to_string()
        }
    };
    let mut rows = vec![[
        "ID",
        "Priority",
        "Triggered By",
        "Job ID",
        "Namespace",
        "Node ID",
        "Status",
        "Placement Failures",
    ]
    .map(String::from)
    .to_vec()];
    for eval in &evals {
        let node = text(eval, "NodeID");
        let failures = eval["FailedTGAllocs"]
            .as_object()
            .is_some_and(|failed| !failed.is_empty());
        rows.push(vec![
            id(text(eval, "ID")),
            text(eval, "Priority"),
            text(eval, "TriggeredBy"),
            text(eval, "JobID"),
            text(eval, "Namespace"),
            if node.is_empty() {
                "<none>".into()
            } else {
                id(node)
            },
            text(eval, "Status"),
            failures.to_string(),
        ]);
    }
    println!("{}", table(&rows));
    Ok(())
}

/// `server members`: the servers this agent knows, itself the leader.
pub(super) fn server_members(api: &Api) -> Result<(), String> {
    let members = api.get("/v1/agent/members")?;
    let leader = api.get("/v1/status/leader")?;
    let leader = leader.as_str().unwrap_or_default().to_string();
    let mut rows = vec![[
        "Name",
        "Address",
        "Port",
        "Status",
        "Leader",
        "Raft Version",
        "Build",
        "Datacenter",
        "Region",
    ]
    .map(String::from)
    .to_vec()];
    for member in members["Members"].as_array().into_iter().flatten() {
        let tags = &member["Tags"];
        let address = format!("{}:{}", text(member, "Addr"), text(member, "Port"));
        rows.push(vec![
            text(member, "Name"),
            text(member, "Addr"),
            text(member, "Port"),
            text(member, "Status"),
            (address == leader).to_string(),
            "3".into(),
            text(tags, "build"),
            text(tags, "dc"),
            text(tags, "region"),
        ]);
    }
    println!("{}", table(&rows));
    Ok(())
}

/// `service list`: each service name with its tags.
pub(super) fn service_list(api: &Api) -> Result<(), String> {
    let listed = api.get("/v1/services")?;
    let mut rows = vec![vec!["Service Name".to_string(), "Tags".into()]];
    for namespace in listed.as_array().into_iter().flatten() {
        for service in namespace["Services"].as_array().into_iter().flatten() {
            rows.push(vec![text(service, "ServiceName"), tags(&service["Tags"])]);
        }
    }
    if rows.len() == 1 {
        println!("No service registrations found");
    } else {
        println!("{}", table(&rows));
    }
    Ok(())
}

/// `service info NAME`: each registration of the service.
pub(super) fn service_info(api: &Api, name: &str) -> Result<(), String> {
    let found = api.get(&format!("/v1/service/{}", super::api::segment(name)))?;
    let found = found.as_array().cloned().unwrap_or_default();
    if found.is_empty() {
        return Err(format!("No service registrations found for {name:?}"));
    }
    let mut rows = vec![["Job ID", "Address", "Tags", "Node ID", "Alloc ID"]
        .map(String::from)
        .to_vec()];
    for registration in &found {
        rows.push(vec![
            text(registration, "JobID"),
            format!(
                "{}:{}",
                text(registration, "Address"),
                text(registration, "Port")
            ),
            tags(&registration["Tags"]),
            short(&text(registration, "NodeID")).to_string(),
            short(&text(registration, "AllocID")).to_string(),
        ]);
    }
    println!("{}", table(&rows));
    Ok(())
}

/// Tags as Nomad's CLI prints them: `[a,b]`.
fn tags(value: &Value) -> String {
    let tags: Vec<&str> = value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    format!("[{}]", tags.join(","))
}

/// `system gc`: a garbage collection pass now (evaluations and terminal allocations past
/// their thresholds, and the jobs left with nothing). Prints nothing, as Nomad's.
pub(super) fn system_gc(api: &Api) -> Result<(), String> {
    api.call("PUT", "/v1/system/gc", None).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_example_job_parses_and_uses_the_stop_paths_fields() {
        let job = quiesce_core::hcl_jobspec::parse_job(EXAMPLE).unwrap();
        let group = &job["TaskGroups"][0];
        assert_eq!(group["ShutdownDelay"], 10_000_000_000i64);
        assert_eq!(group["Update"]["MaxParallel"], 1);
        let task = &group["Tasks"][0];
        assert_eq!(task["ShutdownDelay"], 5_000_000_000i64);
        assert_eq!(task["KillTimeout"], 10_000_000_000i64);
    }

    #[test]
    fn job_init_writes_once_and_refuses_to_write_over_a_file() {
        let dir = std::env::temp_dir().join(format!("quiesce-init-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("example.nomad.hcl");
        let _ = std::fs::remove_file(&file);
        job_init(Some(&file)).unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), EXAMPLE);
        std::fs::write(&file, "mine").unwrap();
        let refused = job_init(Some(&file)).unwrap_err();
        assert!(refused.contains("already exists"), "{refused}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "mine");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
