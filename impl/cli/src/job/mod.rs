//! The `job` commands: `run`, `plan` and `validate` read a jobspec file (`run.rs`);
//! `status`, `inspect`, `allocs` and `scaling-events` show what is stored (`show.rs`),
//! `history` its versions; `stop`, `start` and `restart` act on a stored job, asking for
//! confirmation when a job is named by a prefix.

mod run;
mod show;

pub(super) use run::run;
pub(super) use show::status;

use super::alloc::monitor;
use super::api::{fields, put_json, resolve_job, segment, text, Api};
use super::{JobCommand, StopArgs};
use quiesce_core::spec::Job;
use serde_json::Value;
use std::io::{BufRead, Write};

pub(super) fn job(command: JobCommand) -> Result<(), String> {
    match command {
        JobCommand::Run(args) => run(args),
        JobCommand::Status(args) => status(args, false),
        JobCommand::Stop(args) => stop(args),
        JobCommand::Inspect {
            job,
            json,
            hcl,
            version,
            address,
        } => show::inspect(&address.api()?, &job, json, hcl, version),
        JobCommand::History {
            job,
            diffs,
            address,
        } => history(&address.api()?, &job, diffs),
        JobCommand::Init { file } => super::cluster::job_init(file.as_deref()),
        JobCommand::Allocs {
            job,
            verbose,
            address,
        } => show::job_allocs(&address.api()?, &job, verbose),
        JobCommand::Deployments {
            job,
            latest,
            verbose,
            address,
        } => super::deployment::job_deployments(&address.api()?, &job, latest, verbose),
        JobCommand::Revert {
            job,
            version,
            detach,
            address,
        } => revert(&address.api()?, &job, version, detach),
        JobCommand::Scale {
            job,
            group_and_count,
            detach,
            address,
        } => scale(&address.api()?, &job, &group_and_count, detach),
        JobCommand::Promote {
            job,
            groups,
            detach,
            address,
        } => super::deployment::job_promote(&address.api()?, &job, &groups, detach),
        JobCommand::ScalingEvents {
            job,
            verbose,
            address,
        } => show::scaling_events(&address.api()?, &job, verbose),
        JobCommand::Plan {
            file,
            variables,
            address,
        } => run::plan(&file, &variables, &address),
        JobCommand::Validate {
            file,
            variables,
            address,
        } => run::validate(&file, &variables, &address),
        JobCommand::Restart {
            job,
            groups,
            tasks,
            all_tasks,
            reschedule,
            no_shutdown_delay,
            batch_size,
            batch_wait,
            on_error,
            yes,
            verbose,
            address,
        } => {
            let api = address.api()?;
            super::restart::job_restart(
                &api,
                super::restart::JobRestart {
                    job,
                    job_type: String::new(),
                    groups,
                    tasks,
                    all_tasks,
                    reschedule,
                    no_shutdown_delay,
                    batch_size,
                    batch_wait,
                    on_error,
                    yes,
                    verbose,
                },
            )
        }
        JobCommand::Start {
            job,
            detach,
            address,
        } => {
            let api = address.api()?;
            let id = resolve_job(&api, &job)?;
            let mut stored = api.get(&format!("/v1/job/{}", segment(&id)))?;
            if stored["Stop"] != Value::Bool(true) {
                return Err(format!("Job {id:?} is not stopped: nothing to start"));
            }
            stored["Stop"] = Value::Bool(false);
            // The stopped version's source goes with it, as Nomad's UI sends it, so the new
            // version keeps it (`job inspect -hcl`); a job registered without one has none.
            let version = stored["Version"]
                .as_u64()
                .ok_or_else(|| format!("the agent's job {id:?} has no Version"))?;
            let submission = api
                .call_found(
                    "GET",
                    &format!("/v1/job/{}/submission?version={version}", segment(&id)),
                    None,
                )
                .map_err(|e| format!("job {id:?} version {version}: its source: {e}"))?
                .map(|(submission, _)| submission);
            let job: Job = serde_json::from_value(stored)
                .map_err(|e| format!("the agent's job does not decode: {e}"))?;
            let mut body = serde_json::json!({ "Job": job });
            if let Some(submission) = submission {
                body["Submission"] = submission;
            }
            let body = serde_json::to_vec(&body).expect("JSON values serialize");
            let answer = api.call("PUT", &format!("/v1/job/{}", segment(&id)), Some(&body))?;
            let eval = text(&answer, "EvalID");
            if detach {
                println!("Job start successful\nEvaluation ID: {eval}");
                return Ok(());
            }
            monitor(&api, &eval, None)
        }
    }
}

/// `job stop` (and `stop`): each job in turn, its monitor to the end before the next, as
/// Nomad's.
pub(super) fn stop(args: StopArgs) -> Result<(), String> {
    let api = args.address.api()?;
    for (n, job) in args.jobs.iter().enumerate() {
        if n > 0 {
            println!();
        }
        let options = StopOptions {
            purge: args.purge,
            global: args.global,
            no_shutdown_delay: args.no_shutdown_delay,
            detach: args.detach,
            yes: args.yes,
            eval_priority: args.eval_priority,
        };
        stop_job(&api, job, &options)?;
    }
    Ok(())
}

/// The flags of `job stop`, for each job it stops.
struct StopOptions {
    purge: bool,
    global: bool,
    no_shutdown_delay: bool,
    detach: bool,
    yes: bool,
    eval_priority: Option<i64>,
}

fn stop_job(api: &Api, job: &str, options: &StopOptions) -> Result<(), String> {
    let id = resolve_job(api, job)?;
    if id != job
        && !options.yes
        && !confirm(&format!("Are you sure you want to stop job {id:?}? [y/N] "))?
    {
        println!("Cancelling job stop");
        return Ok(());
    }
    let mut path = format!(
        "/v1/job/{}?purge={}&global={}&no_shutdown_delay={}",
        segment(&id),
        options.purge,
        options.global,
        options.no_shutdown_delay
    );
    if let Some(priority) = options.eval_priority {
        path.push_str(&format!("&eval_priority={priority}"));
    }
    // The allocations this stop stops: those still meant to run and not yet ended.
    let allocs: Vec<String> = api
        .get(&format!("/v1/job/{}/allocations", segment(&id)))?
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| {
            let ended = matches!(
                text(a, "ClientStatus").as_str(),
                "complete" | "failed" | "lost"
            );
            !ended
        })
        .map(|a| text(a, "ID"))
        .collect();
    let answer = api.call("DELETE", &path, None)?;
    let eval = text(&answer, "EvalID");
    if options.detach {
        println!("{eval}");
        return Ok(());
    }
    monitor(api, &eval, Some(&allocs))
}

/// `job history JOB`: each stored version, newest first, as Nomad's (with `-p`, what
/// changed from the version before it).
fn history(api: &Api, job: &str, diffs: bool) -> Result<(), String> {
    let id = resolve_job(api, job)?;
    let answer = api.get(&format!("/v1/job/{}/versions?diffs={diffs}", segment(&id)))?;
    let versions = answer["Versions"].as_array().cloned().unwrap_or_default();
    for (n, version) in versions.iter().enumerate() {
        if n > 0 {
            println!();
        }
        let mut shown = vec![
            ("Version", text(version, "Version")),
            ("Stable", text(version, "Stable")),
            (
                "Submit Date",
                version["SubmitTime"]
                    .as_i64()
                    .filter(|&ns| ns > 0)
                    .map(quiesce_core::gotime::rfc3339)
                    .unwrap_or_default(),
            ),
        ];
        // The diff against the version before it (the oldest has none).
        let diff = diffs.then(|| &answer["Diffs"][n]).filter(|d| d.is_object());
        if diff.is_some() {
            shown.push(("Diff", String::new()));
        }
        println!("{}", fields(&shown));
        if let Some(diff) = diff {
            println!("{}", run::diff_text(diff, &Value::Null).0);
        }
    }
    Ok(())
}

/// `job revert JOB VERSION`: that version's spec registered again, its evaluation and
/// the rollout it starts monitored.
fn revert(api: &Api, job: &str, version: u64, detach: bool) -> Result<(), String> {
    let id = resolve_job(api, job)?;
    let body = serde_json::json!({"JobID": id, "JobVersion": version});
    let answer = put_json(api, &format!("/v1/job/{}/revert", segment(&id)), &body)?;
    let eval = text(&answer, "EvalID");
    if detach {
        println!("{eval}");
        return Ok(());
    }
    monitor(api, &eval, None)?;
    super::deployment::monitor_deployment(api, &eval, false)
}

/// `job scale JOB [GROUP] COUNT`: the group may be left out when the job has one (Nomad's
/// words otherwise).
fn scale(api: &Api, job: &str, group_and_count: &[String], detach: bool) -> Result<(), String> {
    let id = resolve_job(api, job)?;
    let (group, count) = match group_and_count {
        [count] => (None, count),
        [group, count] => (Some(group.clone()), count),
        _ => return Err("usage: job scale JOB [GROUP] COUNT".into()),
    };
    let count: i64 = count
        .parse()
        .map_err(|_| format!("Failed to read count: {count:?} is not a whole number"))?;
    let stored = api.get(&format!("/v1/job/{}", segment(&id)))?;
    let groups: Vec<String> = stored["TaskGroups"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|g| text(g, "Name"))
        .collect();
    let group = match (group, groups.as_slice()) {
        (Some(group), _) if groups.contains(&group) => group,
        (Some(group), _) => return Err(format!("Group {group} not found within job")),
        (None, [only]) => only.clone(),
        (None, _) => return Err("Group name required".into()),
    };
    let body = serde_json::json!({
        "Count": count,
        "Target": {"Job": id, "Group": group},
        "Message": "submitted using the Nomad CLI",
    });
    let answer = put_json(api, &format!("/v1/job/{}/scale", segment(&id)), &body)?;
    let eval = text(&answer, "EvalID");
    if detach {
        println!("Job scale successful\nEvaluation ID: {eval}");
        return Ok(());
    }
    monitor(api, &eval, None)
}

fn confirm(question: &str) -> Result<bool, String> {
    print!("{question}");
    let _ = std::io::stdout().flush();
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(|e| e.to_string())?;
    Ok(matches!(line.trim(), "y" | "Y" | "yes" | "Yes"))
}
