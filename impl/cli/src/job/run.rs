//! `job run`, `job plan`, `job validate`: a jobspec file (JSON, or HCL parsed here as
//! Nomad's CLI does) as the register body the agent takes, with the source it was
//! submitted as. An HCL file's validation errors name the file, line and column of the
//! field (`run` and `plan` check it here before sending it; `validate` places the agent's
//! answer); a JSON file's name the field, as the agent's do.

use super::super::alloc::monitor_with;
use super::super::api::{segment, text};
use super::super::{Address, RunArgs, VariableArgs};
use quiesce_core::hcl_jobspec::{Input, Placed, Places, VariableInputs};
use serde_json::{json, Value};
use std::path::Path;

/// A jobspec file read: the register body (`{"Job": …, "Submission": …}`), and for an HCL
/// file the job as converted with the places its fields were written at.
pub(super) struct Jobspec {
    pub body: Vec<u8>,
    pub placed: Option<Placed>,
}

impl Jobspec {
    /// An HCL jobspec checked here as the agent will check it, so that each problem names
    /// the file, line and column its field was written at (the agent's answer names only
    /// the JSON field); nothing is sent for a job with problems. A JSON jobspec is left to
    /// the agent, whose errors name the field.
    fn check(&self) -> Result<(), String> {
        let Some(placed) = &self.placed else {
            return Ok(());
        };
        placed.check().map_err(|errors| {
            let lines: Vec<String> = errors.iter().map(|e| format!("* {e}")).collect();
            format!("Job validation errors:\n{}", lines.join("\n"))
        })
    }

    /// The places of an HCL jobspec's fields, for the agent's answers.
    fn places(&self) -> Option<&Places> {
        self.placed.as_ref().map(|placed| &placed.places)
    }
}

/// The text of a jobspec file, or of standard input for `-` (as Nomad's CLI reads it), at
/// most the agent's limit on a submission (a larger one is refused here, not sent).
fn read_source(file: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let limit = quiesce_core::spec::MAX_SUBMISSION_BYTES;
    let reader: Box<dyn Read> = if file == Path::new("-") {
        Box::new(std::io::stdin().lock())
    } else {
        Box::new(std::fs::File::open(file)?)
    };
    let mut bytes = Vec::new();
    reader.take(limit as u64 + 1).read_to_end(&mut bytes)?;
    if bytes.len() > limit {
        return Err(std::io::Error::other(format!(
            "larger than {limit} bytes, the most a job's source may be"
        )));
    }
    String::from_utf8(bytes).map_err(|_| std::io::Error::other("not UTF-8 text"))
}

/// The name a jobspec's errors give it: its path, or `<stdin>` for `-`.
fn shown_name(file: &Path) -> String {
    if file == Path::new("-") {
        "<stdin>".into()
    } else {
        file.display().to_string()
    }
}

/// The `-var` flags (each `name=value`), the `-var-file`s' texts, and the environment's
/// `NOMAD_VAR_<name>` values, as read for one HCL jobspec.
struct Variables {
    flags: Vec<(String, String)>,
    files: Vec<(String, String)>,
    env: Vec<(String, String)>,
}

impl Variables {
    fn read(args: &VariableArgs) -> Result<Variables, String> {
        let flags = args
            .var
            .iter()
            .map(|flag| quiesce_core::hcl_jobspec::var_flag(flag))
            .collect::<Result<_, _>>()?;
        let files = args
            .var_file
            .iter()
            .map(|path| {
                read_source(path)
                    .map(|text| (shown_name(path), text))
                    .map_err(|e| format!("Error reading var-file {}: {e}", path.display()))
            })
            .collect::<Result<_, _>>()?;
        // Names that are not UTF-8 cannot be HCL identifiers: skipped, as Nomad's.
        let env = std::env::vars_os()
            .filter_map(|(name, value)| Some((name.into_string().ok()?, value.into_string().ok()?)))
            .filter_map(|(name, value)| Some((name.strip_prefix("NOMAD_VAR_")?.to_string(), value)))
            .collect();
        Ok(Variables { flags, files, env })
    }

    fn is_given(args: &VariableArgs) -> bool {
        !args.var.is_empty() || !args.var_file.is_empty()
    }

    /// The inputs of `hcl_jobspec::parse`, borrowing the texts read.
    fn inputs(&self) -> VariableInputs<'_> {
        VariableInputs {
            files: self
                .files
                .iter()
                .map(|(name, text)| Input { name, text })
                .collect(),
            flags: self.flags.clone(),
            env: self.env.clone(),
        }
    }

    /// The submission's `VariableFlags` (the `-var` flags, the last of a name winning, or
    /// null for none) and `Variables` (the var-files' texts, one after another), as
    /// Nomad's CLI sends them so the job can be parsed again from its submission.
    fn submitted(&self) -> (Value, String) {
        let flags: serde_json::Map<String, Value> = self
            .flags
            .iter()
            .map(|(name, value)| (name.clone(), json!(value)))
            .collect();
        let flags = if flags.is_empty() {
            Value::Null
        } else {
            Value::Object(flags)
        };
        let texts: Vec<&str> = self.files.iter().map(|(_, text)| text.as_str()).collect();
        (flags, texts.join("\n"))
    }
}

/// A jobspec file as a register body: JSON (wrapped in `{"Job": …}` if it is not already),
/// or HCL with its variables' values; with its source as `Submission` (Nomad's CLI sends
/// it, so that `job inspect -hcl` shows the file as it was, and the variables it had).
pub(super) fn read_jobspec(file: &Path, variable_args: &VariableArgs) -> Result<Jobspec, String> {
    let text =
        read_source(file).map_err(|e| format!("Error reading job file {}: {e}", file.display()))?;
    let is_json =
        file.extension().is_some_and(|e| e == "json") || text.trim_start().starts_with('{');
    let mut submitted = (Value::Null, String::new());
    let mut placed = None;
    let value: Value = if is_json {
        if Variables::is_given(variable_args) {
            return Err(format!(
                "Error parsing job file {}: -var and -var-file are for HCL jobspecs, and this \
                 one is JSON",
                file.display()
            ));
        }
        serde_json::from_str(&text).map_err(|e| {
            format!(
                "Error parsing job file {}: invalid JSON: {e}",
                file.display()
            )
        })?
    } else {
        let variables = Variables::read(variable_args)?;
        let name = shown_name(file);
        let jobspec = Input {
            name: &name,
            text: &text,
        };
        submitted = variables.submitted();
        // The place first on its own line, as compilers (and Nomad's CLI) write it.
        let converted = quiesce_core::hcl_jobspec::parse_placed(jobspec, &variables.inputs())
            .map_err(|e| format!("Error parsing job file {}:\n{e}", file.display()))?;
        let job = converted.job.clone();
        placed = Some(converted);
        job
    };
    let mut wrapped = match value.as_object() {
        Some(object) if object.keys().any(|k| k.eq_ignore_ascii_case("job")) => value,
        _ => json!({ "Job": value }),
    };
    let format = if is_json { "json" } else { "hcl2" };
    if let Some(object) = wrapped.as_object_mut() {
        if !object.keys().any(|k| k.eq_ignore_ascii_case("submission")) {
            let (flags, variables) = submitted;
            object.insert(
                "Submission".into(),
                json!({"Source": text, "Format": format, "VariableFlags": flags,
                       "Variables": variables}),
            );
        }
    }
    Ok(Jobspec {
        body: serde_json::to_vec(&wrapped).expect("JSON values serialize"),
        placed,
    })
}

/// `job run` (and `run`).
pub(crate) fn run(args: RunArgs) -> Result<(), String> {
    let jobspec = read_jobspec(&args.file, &args.variables)?;
    if !args.output {
        // `-output` prints the job as converted, checked or not (as Nomad's does).
        jobspec.check()?;
    }
    let mut body = jobspec.body;
    if args.output {
        // What would be registered, as Nomad's `-output`: the job, without its source.
        let mut value: Value = serde_json::from_slice(&body).expect("our own JSON");
        if let Some(object) = value.as_object_mut() {
            object.retain(|key, _| key.eq_ignore_ascii_case("job"));
        }
        println!("{}", serde_json::to_string_pretty(&value).expect("JSON"));
        return Ok(());
    }
    let api = args.address.api()?;
    if let Some(index) = args.check_index {
        let mut value: Value = serde_json::from_slice(&body).expect("our own JSON");
        value["EnforceIndex"] = Value::Bool(true);
        value["JobModifyIndex"] = json!(index);
        body = serde_json::to_vec(&value).expect("JSON values serialize");
    }
    let answer = api.call("PUT", "/v1/jobs", Some(&body))?;
    print_warnings(&answer);
    let eval = text(&answer, "EvalID");
    if eval.is_empty() {
        println!("Job registered; no evaluation was created");
        return Ok(());
    }
    if args.detach {
        println!("Job registration successful\nEvaluation ID: {eval}");
        return Ok(());
    }
    monitor_with(&api, &eval, None, args.verbose)?;
    super::super::deployment::monitor_deployment(&api, &eval, args.verbose)
}

/// `job plan`: what running FILE would change, from a dry run of the scheduler; exits
/// as Nomad's (0: no change to allocations, 1: some, 255: an error).
pub(super) fn plan(file: &Path, variables: &VariableArgs, address: &Address) -> Result<(), String> {
    // Nomad's exit codes: 0 no change to allocations, 1 some, 255 an error.
    let planned = (|| {
        let api = address.api()?;
        let jobspec = read_jobspec(file, variables)?;
        jobspec.check()?;
        let mut value: Value = serde_json::from_slice(&jobspec.body).expect("our own JSON");
        let member = |object: &Value, name: &str| {
            object
                .as_object()
                .and_then(|o| o.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)))
                .map(|(_, v)| v.clone())
                .unwrap_or(Value::Null)
        };
        let job = member(&value, "Job");
        let id = member(&job, "ID").as_str().unwrap_or_default().to_string();
        value["Diff"] = Value::Bool(true);
        let body = serde_json::to_vec(&value).expect("JSON values serialize");
        api.call(
            "PUT",
            &format!("/v1/job/{}/plan", segment(&id)),
            Some(&body),
        )
    })();
    let answer = match planned {
        Ok(answer) => answer,
        Err(message) => {
            eprintln!("Error: {message}");
            std::process::exit(255);
        }
    };
    let changes = print_plan(&answer, file);
    if changes {
        use std::io::Write;
        let _ = std::io::stdout().flush();
        std::process::exit(1);
    }
    Ok(())
}

/// `job validate`: FILE checked as the agent would register it.
pub(super) fn validate(
    file: &Path,
    variables: &VariableArgs,
    address: &Address,
) -> Result<(), String> {
    let api = address.api()?;
    let jobspec = read_jobspec(file, variables)?;
    let answer = api.call("PUT", "/v1/validate/job", Some(&jobspec.body))?;
    print_warnings(&answer);
    match answer["ValidationErrors"].as_array() {
        Some(errors) if !errors.is_empty() => {
            // The agent's errors name the field; an HCL file's also name where it is.
            let placed = |error: &str| match jobspec.places() {
                Some(places) => places.locate_text(error),
                None => error.to_string(),
            };
            let lines: Vec<String> = errors
                .iter()
                .map(|e| format!("* {}", placed(e.as_str().unwrap_or_default())))
                .collect();
            Err(format!("Job validation errors:\n{}", lines.join("\n")))
        }
        _ => {
            println!("Job validation successful");
            Ok(())
        }
    }
}

/// The answer's warnings, as Nomad's CLI prints them: "Job Warnings:" and the server's
/// text, then a blank line.
pub(super) fn print_warnings(answer: &Value) {
    let warnings = text(answer, "Warnings");
    if !warnings.is_empty() {
        println!("Job Warnings:\n{warnings}\n");
    }
}

/// A job diff as Nomad's CLI prints it (`+/- Job: …`, its groups, tasks and fields), each
/// group with its scheduler's `updates` (`DesiredTGUpdates`) if there are any; and whether
/// those would create or destroy allocations.
pub(super) fn diff_text(diff: &Value, updates: &Value) -> (String, bool) {
    let mark = |kind: &Value| match kind.as_str() {
        Some("Added") => "+",
        Some("Deleted") => "-",
        Some("Edited") => "+/-",
        _ => "",
    };
    let mut out = Vec::new();
    let field_line = |out: &mut Vec<String>, indent: &str, field: &Value| {
        let (old, new) = (text(field, "Old"), text(field, "New"));
        let change = match field["Type"].as_str() {
            Some("Added") => format!("{new:?}"),
            Some("Deleted") => format!("{old:?}"),
            _ => format!("{old:?} => {new:?}"),
        };
        out.push(format!(
            "{indent}{} {}: {change}",
            mark(&field["Type"]),
            text(field, "Name")
        ));
    };
    out.push(format!(
        "{} Job: {:?}",
        mark(&diff["Type"]),
        text(diff, "ID")
    ));
    for field in diff["Fields"].as_array().into_iter().flatten() {
        field_line(&mut out, "", field);
    }
    let mut changes = false;
    for group in diff["TaskGroups"].as_array().into_iter().flatten() {
        let updates = &updates[text(group, "Name")];
        let count = |key: &str| updates[key].as_u64().unwrap_or(0);
        let mut said = Vec::new();
        for (key, words) in [
            ("Place", "create"),
            ("DestructiveUpdate", "create/destroy update"),
            ("InPlaceUpdate", "in-place update"),
            ("Stop", "destroy"),
            ("Migrate", "migrate"),
            ("Ignore", "ignore"),
        ] {
            if count(key) > 0 {
                said.push(format!("{} {words}", count(key)));
            }
        }
        changes |= ["Place", "DestructiveUpdate", "Stop", "Migrate"]
            .iter()
            .any(|key| count(key) > 0);
        let said = if updates.is_null() {
            String::new()
        } else {
            format!(" ({})", said.join(", "))
        };
        out.push(format!(
            "{} Task Group: {:?}{said}",
            mark(&group["Type"]),
            text(group, "Name"),
        ));
        for field in group["Fields"].as_array().into_iter().flatten() {
            field_line(&mut out, "  ", field);
        }
        for task in group["Tasks"].as_array().into_iter().flatten() {
            let forces = count("DestructiveUpdate") > 0 && task["Type"] == "Edited";
            out.push(format!(
                "  {} Task: {:?}{}",
                mark(&task["Type"]),
                text(task, "Name"),
                if forces {
                    " (forces create/destroy update)"
                } else {
                    ""
                }
            ));
            for field in task["Fields"].as_array().into_iter().flatten() {
                field_line(&mut out, "    ", field);
            }
        }
    }
    (out.join("\n"), changes)
}

/// Prints a plan as Nomad's CLI does; returns whether allocations would be created or
/// destroyed.
fn print_plan(answer: &Value, file: &Path) -> bool {
    let diff = &answer["Diff"];
    let (shown, mut changes) = diff_text(diff, &answer["Annotations"]["DesiredTGUpdates"]);
    println!("{shown}");
    match answer["FailedTGAllocs"].as_object() {
        Some(failed) if !failed.is_empty() => {
            let warnings = text(answer, "Warnings");
            if !warnings.is_empty() {
                println!("\nJob Warnings:\n{warnings}");
            }
            // No change to the job: nothing to run, whatever the scheduler would place (Nomad's).
            if diff["Type"] == "None" {
                changes = false;
            }
            println!("\nScheduler dry-run:\n- WARNING: Failed to place all allocations.");
            for (group, metric) in failed {
                let count = metric["CoalescedFailures"].as_u64().unwrap_or(0) + 1;
                println!("  Task Group {group:?} (failed to place {count} allocation(s)):");
                println!(
                    "    * No node is ready that meets its constraints and has its ports free"
                );
            }
        }
        _ => println!("\nScheduler dry-run:\n- All tasks successfully allocated."),
    }
    let index = text(answer, "JobModifyIndex");
    println!(
        "\nJob Modify Index: {index}\nTo submit the job with version verification run:\n\n\
         quiesce job run -check-index {index} {}\n\nWhen running the job with the check-index \
         flag, the job will only be run if the\njob modify index given matches the server-side \
         version. If the index has\nchanged, another user has modified the job and the plan's \
         results are\npotentially invalid.",
        file.display()
    );
    changes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_hcl_file_s_variables_fill_the_job_and_its_submission_and_errors_name_the_place() {
        let dir = std::env::temp_dir().join(format!("quiesce-vars-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let spec = dir.join("web.hcl");
        let source = "variable \"count\" {\n  type = number\n}\nvariable \"dc\" {}\n\
                      job \"web\" {\n  datacenters = [var.dc]\n  group \"g\" {\n    count = var.count\n  }\n}\n";
        std::fs::write(&spec, source).unwrap();
        let var_file = dir.join("prod.vars.hcl");
        std::fs::write(&var_file, "dc = \"dc2\"\ncount = 1\n").unwrap();
        let args = VariableArgs {
            var: vec!["count=2".into()],
            var_file: vec![var_file.clone()],
        };
        let body: Value =
            serde_json::from_slice(&read_jobspec(&spec, &args).unwrap().body).unwrap();
        assert_eq!(body["Job"]["TaskGroups"][0]["Count"], 2);
        assert_eq!(body["Job"]["Datacenters"], json!(["dc2"]));
        let submission = &body["Submission"];
        assert_eq!(submission["VariableFlags"], json!({"count": "2"}));
        assert_eq!(submission["Variables"], "dc = \"dc2\"\ncount = 1\n");
        assert_eq!(submission["Source"], source);

        let wrong = VariableArgs {
            var: vec!["count=two".into()],
            var_file: vec![var_file],
        };
        let refused = read_jobspec(&spec, &wrong).err().unwrap();
        assert!(refused.contains("a number is required"), "{refused}");
        std::fs::write(
            &spec,
            "job \"web\" {\n  group \"g\" {\n    kil_timeout = 1\n  }\n}\n",
        )
        .unwrap();
        let refused = read_jobspec(&spec, &VariableArgs::default()).err().unwrap();
        let place = format!(
            "{}:3:5: job \"web\".group \"g\": unsupported",
            spec.display()
        );
        assert!(refused.contains(&place), "{refused}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_hcl_file_s_validation_errors_name_their_place_and_a_json_file_s_are_the_agent_s() {
        let dir = std::env::temp_dir().join(format!("quiesce-places-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let spec = dir.join("bad.nomad.hcl");
        std::fs::write(
            &spec,
            "job \"bad\" {\n  group \"g\" {\n    count = -1\n    task \"t\" {\n      \
             driver = \"raw_exec\"\n    }\n  }\n}\n",
        )
        .unwrap();
        let jobspec = read_jobspec(&spec, &VariableArgs::default()).unwrap();
        let refused = jobspec.check().unwrap_err();
        assert_eq!(
            refused,
            format!(
                "Job validation errors:\n* {}:3:5: TaskGroups[0].Count: must not be negative \
                 (got -1)",
                spec.display()
            )
        );
        // The agent's answer, placed the same way.
        let places = jobspec.places().unwrap();
        assert_eq!(
            places.locate_text("TaskGroups[0].Tasks[0].Driver: no such driver"),
            format!(
                "{}:5:7: TaskGroups[0].Tasks[0].Driver: no such driver",
                spec.display()
            )
        );
        let as_json = dir.join("bad.json");
        std::fs::write(&as_json, serde_json::to_vec(&placed_job(&jobspec)).unwrap()).unwrap();
        let jobspec = read_jobspec(&as_json, &VariableArgs::default()).unwrap();
        assert!(jobspec.places().is_none());
        assert_eq!(jobspec.check(), Ok(()), "a JSON file is left to the agent");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn placed_job(jobspec: &Jobspec) -> Value {
        json!({ "Job": jobspec.placed.as_ref().unwrap().job })
    }
}
