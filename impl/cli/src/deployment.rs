//! The `deployment` commands (`list`, `status`, `fail`, `pause`, `resume`, `promote`) and
//! `job deployments`, with Nomad's layouts: a list's `ID|Job ID|Job Version|Status|
//! Description`, a status's fields and its `Deployed` table.

use super::alloc::monitor;
use super::api::{fields, now, put_json, resolve, resolve_job, segment, short, table, text, Api};
use super::DeploymentCommand;
use serde_json::{json, Value};

pub(super) fn deployment(command: DeploymentCommand) -> Result<(), String> {
    match command {
        DeploymentCommand::List { verbose, address } => {
            let api = address.api()?;
            let listed = api.get("/v1/deployments")?;
            let mut listed = listed.as_array().cloned().unwrap_or_default();
            // Newest first, as Nomad's CLI sorts them.
            listed.reverse();
            print_list(&listed, verbose);
            Ok(())
        }
        DeploymentCommand::Status {
            deployment,
            verbose,
            address,
        } => {
            let api = address.api()?;
            let id = resolve_deployment(&api, &deployment)?;
            let found = api.get(&format!("/v1/deployment/{}", segment(&id)))?;
            println!("{}", status_text(&found, verbose));
            Ok(())
        }
        DeploymentCommand::Fail {
            deployment,
            detach,
            address,
        } => {
            let api = address.api()?;
            let id = resolve_deployment(&api, &deployment)?;
            let answer = api.call(
                "PUT",
                &format!("/v1/deployment/fail/{}", segment(&id)),
                None,
            )?;
            match answer["RevertedJobVersion"].as_u64() {
                Some(version) => println!(
                    "Deployment {:?} failed. Auto-reverted to job version {version}.",
                    short(&id)
                ),
                None => println!("Deployment {:?} failed", short(&id)),
            }
            follow(&api, &answer, detach)
        }
        DeploymentCommand::Pause {
            deployment,
            address,
        } => {
            let api = address.api()?;
            pause(&api, &deployment, true)?;
            Ok(())
        }
        DeploymentCommand::Resume {
            deployment,
            detach,
            address,
        } => {
            let api = address.api()?;
            let answer = pause(&api, &deployment, false)?;
            follow(&api, &answer, detach)
        }
        DeploymentCommand::Promote {
            deployment,
            groups,
            detach,
            address,
        } => {
            let api = address.api()?;
            let id = resolve_deployment(&api, &deployment)?;
            let answer = promote(&api, &id, &groups)?;
            follow(&api, &answer, detach)
        }
    }
}

/// Promotes the deployment `id`'s `groups` (all when none is named).
fn promote(api: &Api, id: &str, groups: &[String]) -> Result<Value, String> {
    let body = json!({"DeploymentID": id, "All": groups.is_empty(), "Groups": groups});
    put_json(
        api,
        &format!("/v1/deployment/promote/{}", segment(id)),
        &body,
    )
}

/// `job promote JOB`: promotes the job's most recent deployment, as Nomad's does (with
/// its errors' words).
pub(super) fn job_promote(
    api: &Api,
    job: &str,
    groups: &[String],
    detach: bool,
) -> Result<(), String> {
    let job_id = resolve_job(api, job)?;
    let latest = api
        .get(&format!("/v1/job/{}/deployment", segment(&job_id)))
        .map_err(|e| format!("Error retrieving deployment: {e}"))?;
    if latest.is_null() {
        return Err(format!("Job {job_id:?} has no deployment to promote"));
    }
    let id = text(&latest, "ID");
    let answer = promote(api, &id, groups)
        .map_err(|e| format!("Error promoting deployment {id:?} for job {job_id:?}: {e}"))?;
    follow(api, &answer, detach)
}

/// `job deployments JOB`: the job's deployments, newest first (`-latest`: the newest).
pub(super) fn job_deployments(
    api: &Api,
    job: &str,
    latest: bool,
    verbose: bool,
) -> Result<(), String> {
    let id = resolve_job(api, job)?;
    if latest {
        // As Nomad's: the latest deployment as `deployment status` shows it.
        let newest = api.get(&format!("/v1/job/{}/deployment", segment(&id)))?;
        if newest.is_null() {
            println!("No deployments found");
        } else {
            println!("{}", status_text(&newest, verbose));
        }
        return Ok(());
    }
    let all = api.get(&format!("/v1/job/{}/deployments", segment(&id)))?;
    print_list(&all.as_array().cloned().unwrap_or_default(), verbose);
    Ok(())
}

/// After `job run`'s evaluation, as Nomad's monitor: if the evaluation opened a deployment
/// for the job's version, it is followed until it ends — the time and its status at each
/// change — and the command fails unless it succeeded. (On a terminal, a last line says
/// how it ended, as Nomad's.)
pub(super) fn monitor_deployment(api: &Api, eval_id: &str, verbose: bool) -> Result<(), String> {
    let eval = api.get(&format!("/v1/evaluation/{}", segment(eval_id)))?;
    // What could not be placed waits for capacity (said above, and the command exits 2):
    // the deployment cannot progress before, and the command returns.
    let blocked = !text(&eval, "BlockedEval").is_empty()
        || eval["FailedTGAllocs"]
            .as_object()
            .is_some_and(|failed| !failed.is_empty());
    if blocked {
        return Ok(());
    }
    let job_id = text(&eval, "JobID");
    let Some((job, _)) = api.call_found("GET", &format!("/v1/job/{}", segment(&job_id)), None)?
    else {
        return Ok(());
    };
    let latest = api.get(&format!("/v1/job/{}/deployment", segment(&job_id)))?;
    let active = |d: &Value| matches!(text(d, "Status").as_str(), "running" | "paused");
    if latest.is_null() || latest["JobVersion"] != job["Version"] || !active(&latest) {
        return Ok(());
    }
    let id = text(&latest, "ID");
    let shown = if verbose { id.as_str() } else { short(&id) };
    println!("==> {}: Monitoring deployment {shown:?}", now());
    let mut index = 0;
    let status = loop {
        let (found, next) = api.call_indexed(
            "GET",
            &format!("/v1/deployment/{}?index={index}&wait=60s", segment(&id)),
            None,
        )?;
        if next != index {
            println!("\n  {}\n{}", now(), status_text(&found, verbose));
        }
        index = next;
        if !active(&found) {
            break text(&found, "Status");
        }
    };
    use std::io::IsTerminal;
    if std::io::stdout().is_terminal() {
        let mark = if status == "successful" { "✓" } else { "!" };
        println!("\n{mark} Deployment {shown:?} {status}");
    }
    if status == "successful" {
        Ok(())
    } else {
        Err(format!("Deployment {shown:?} {status}"))
    }
}

fn resolve_deployment(api: &Api, prefix: &str) -> Result<String, String> {
    Ok(text(
        &resolve(api, "Deployment", "deployments", prefix)?,
        "ID",
    ))
}

/// Pauses (or resumes) the deployment a prefix names; prints what Nomad's CLI prints.
fn pause(api: &Api, deployment: &str, pause: bool) -> Result<Value, String> {
    let id = resolve_deployment(api, deployment)?;
    let body = json!({"DeploymentID": id, "Pause": pause});
    let answer = put_json(
        api,
        &format!("/v1/deployment/pause/{}", segment(&id)),
        &body,
    )?;
    let done = if pause { "paused" } else { "resumed" };
    println!("Deployment {:?} {done}", short(&id));
    Ok(answer)
}

/// After a deployment write: its evaluation monitored, or (`detach`) its ID printed.
fn follow(api: &Api, answer: &Value, detach: bool) -> Result<(), String> {
    let eval = text(answer, "EvalID");
    if eval.is_empty() {
        return Ok(());
    }
    if detach {
        println!("{eval}");
        return Ok(());
    }
    monitor(api, &eval, None)
}

fn print_list(deployments: &[Value], verbose: bool) {
    if deployments.is_empty() {
        println!("No deployments found");
        return;
    }
    let mut rows = vec![["ID", "Job ID", "Job Version", "Status", "Description"]
        .map(String::from)
        .to_vec()];
    for deployment in deployments {
        let id = text(deployment, "ID");
        rows.push(vec![
            if verbose {
                id.clone()
            } else {
                short(&id).to_string()
            },
            text(deployment, "JobID"),
            text(deployment, "JobVersion"),
            text(deployment, "Status"),
            text(deployment, "StatusDescription"),
        ]);
    }
    println!("{}", table(&rows));
}

/// `deployment status`: the deployment's fields, then its `Deployed` table, whose
/// optional columns appear as Nomad's do (`Auto Revert` if a group reverts, `Promoted` and
/// `Canaries` if a group wants canaries, `Progress Deadline` if a group has one).
pub(super) fn status_text(deployment: &Value, verbose: bool) -> String {
    let id = text(deployment, "ID");
    let head = fields(&[
        (
            "ID",
            if verbose {
                id.clone()
            } else {
                short(&id).to_string()
            },
        ),
        ("Job ID", text(deployment, "JobID")),
        ("Job Version", text(deployment, "JobVersion")),
        ("Status", text(deployment, "Status")),
        ("Description", text(deployment, "StatusDescription")),
    ]);
    let groups: Vec<(&String, &Value)> = deployment["TaskGroups"]
        .as_object()
        .map(|groups| groups.iter().collect())
        .unwrap_or_default();
    if groups.is_empty() {
        return head;
    }
    let auto_revert = groups.iter().any(|(_, g)| g["AutoRevert"] == json!(true));
    let deadline = groups
        .iter()
        .any(|(_, g)| g["ProgressDeadline"].as_i64().is_some_and(|ns| ns > 0));
    let canaries = groups
        .iter()
        .any(|(_, g)| g["DesiredCanaries"].as_u64().is_some_and(|n| n > 0));
    let mut header = vec!["Task Group".to_string()];
    if auto_revert {
        header.push("Auto Revert".into());
    }
    if canaries {
        header.push("Promoted".into());
    }
    header.push("Desired".into());
    if canaries {
        header.push("Canaries".into());
    }
    header.extend(["Placed", "Healthy", "Unhealthy"].map(String::from));
    if deadline {
        header.push("Progress Deadline".into());
    }
    let mut rows = vec![header];
    for (name, group) in groups {
        let mut row = vec![name.clone()];
        if auto_revert {
            row.push(text(group, "AutoRevert"));
        }
        let wants_canaries = group["DesiredCanaries"].as_u64().is_some_and(|n| n > 0);
        if canaries {
            row.push(if wants_canaries {
                text(group, "Promoted")
            } else {
                "N/A".into()
            });
        }
        row.push(text(group, "DesiredTotal"));
        if canaries {
            row.push(text(group, "DesiredCanaries"));
        }
        for key in ["PlacedAllocs", "HealthyAllocs", "UnhealthyAllocs"] {
            row.push(text(group, key));
        }
        if deadline {
            // Go's zero time on the wire means none was set.
            let by = text(group, "RequireProgressBy");
            let set = !by.is_empty() && !by.starts_with("0001-01-01");
            row.push(if set { by } else { "N/A".into() });
        }
        rows.push(row);
    }
    format!("{head}\n\nDeployed\n{}", table(&rows))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deployment_status_has_nomads_fields_and_columns_in_order() {
        let deployment = json!({
            "ID": "0b23b149-2f1c-4b59-b0ab-2f5e5a4c7c11", "JobID": "web", "JobVersion": 1,
            "Status": "successful", "StatusDescription": "Deployment completed successfully",
            "TaskGroups": {"web": {"AutoRevert": true, "DesiredTotal": 3, "PlacedAllocs": 3,
                "HealthyAllocs": 3, "UnhealthyAllocs": 0, "ProgressDeadline": 600_000_000_000i64,
                "RequireProgressBy": "0001-01-01T00:00:00Z"}},
        });
        let shown = status_text(&deployment, false);
        let lines: Vec<&str> = shown.lines().collect();
        assert_eq!(
            lines[..5],
            [
                "ID          = 0b23b149",
                "Job ID      = web",
                "Job Version = 1",
                "Status      = successful",
                "Description = Deployment completed successfully",
            ]
        );
        assert_eq!(lines[6], "Deployed");
        let header: Vec<&str> = lines[7].split("  ").filter(|c| !c.is_empty()).collect();
        assert_eq!(
            header,
            [
                "Task Group",
                "Auto Revert",
                "Desired",
                "Placed",
                "Healthy",
                "Unhealthy",
                "Progress Deadline"
            ]
        );
        let row: Vec<&str> = lines[8].split_whitespace().collect();
        assert_eq!(row, ["web", "true", "3", "3", "3", "0", "N/A"]);
    }

    #[test]
    fn canaries_add_nomads_promoted_and_canaries_columns() {
        let deployment = json!({
            "ID": "0b23b149-2f1c-4b59-b0ab-2f5e5a4c7c11", "JobID": "web", "JobVersion": 1,
            "Status": "running",
            "StatusDescription": "Deployment is running pending automatic promotion",
            "TaskGroups": {
                "api": {"DesiredTotal": 1, "DesiredCanaries": 0, "PlacedAllocs": 0,
                    "HealthyAllocs": 0, "UnhealthyAllocs": 0},
                "web": {"DesiredTotal": 2, "DesiredCanaries": 1, "Promoted": false,
                    "PlacedAllocs": 1, "HealthyAllocs": 0, "UnhealthyAllocs": 0},
            },
        });
        let shown = status_text(&deployment, false);
        let lines: Vec<&str> = shown.lines().collect();
        let header: Vec<&str> = lines[7].split("  ").filter(|c| !c.is_empty()).collect();
        assert_eq!(
            header,
            [
                "Task Group",
                "Promoted",
                "Desired",
                "Canaries",
                "Placed",
                "Healthy",
                "Unhealthy"
            ]
        );
        let rows: Vec<Vec<&str>> = lines[8..]
            .iter()
            .map(|line| line.split_whitespace().collect())
            .collect();
        assert_eq!(
            rows,
            [
                vec!["api", "N/A", "1", "0", "0", "0", "0"],
                vec!["web", "false", "2", "1", "1", "0", "0"],
            ]
        );
    }
}
