//! The validation pass over a canonical jobspec: every problem, each naming its field.
//!
//! Names are checked as what they become. A task's name is a directory under the data dir
//! (`alloc/<alloc>/<task>`), so it is one path component; a job's ID is a URL path (clients
//! put it in `/v1/job/<ID>` unescaped, `reference/http-api.md` §1), so it addresses only
//! itself; a service's name is a DNS label, as Nomad requires. And every count has a limit,
//! so that no registration can exhaust the agent.

use super::{Job, RestartPolicy, Service, SpecError, SpecErrors};
use std::collections::BTreeSet;

/// The longest job ID, job name, group or task name, in bytes.
pub const MAX_NAME_BYTES: usize = 128;
/// The longest service name (a DNS label, RFC 1123).
const MAX_SERVICE_NAME_BYTES: usize = 63;
/// The most allocations one job may ask for (the sum of its groups' `Count`s).
pub const MAX_ALLOCS_PER_JOB: i64 = 10_000;
/// The most task groups in a job.
pub const MAX_GROUPS_PER_JOB: usize = 64;
/// The most tasks in a task group.
pub const MAX_TASKS_PER_GROUP: usize = 64;
/// The most services a group or a task declares.
const MAX_SERVICES: usize = 64;
/// The most variables in a task's `Env`.
const MAX_ENV: usize = 1024;
/// The longest shutdown delay or kill timeout: a week.
const MAX_DURATION_NS: i64 = 7 * 24 * 3600 * 1_000_000_000;

/// The suffixes Nomad's API gives `/v1/job/<ID>/…`: a job ID ending in one of them (after
/// a `/`) would name another job's endpoint, so it is refused.
pub const JOB_ENDPOINT_SUFFIXES: [&str; 17] = [
    "allocations",
    "evaluate",
    "evaluations",
    "deployment",
    "deployments",
    "dispatch",
    "versions",
    "revert",
    "stable",
    "scale",
    "summary",
    "plan",
    "periodic/force",
    "services",
    "submission",
    "actions",
    "action",
];

const JOB_TYPES: [&str; 4] = ["service", "batch", "system", "sysbatch"];
const HOOKS: [&str; 3] = ["prestart", "poststart", "poststop"];
const SIGNALS: [&str; 12] = [
    "SIGHUP", "SIGINT", "SIGQUIT", "SIGKILL", "SIGUSR1", "SIGUSR2", "SIGTERM", "SIGCONT",
    "SIGSTOP", "SIGTSTP", "SIGWINCH", "SIGABRT",
];

impl Job {
    /// Every problem, each naming its field. Run after [`Job::canonicalize`].
    pub fn validate(&self) -> Result<(), SpecErrors> {
        let mut errors = Vec::new();
        let mut fail = |field: String, problem: String| errors.push(SpecError { field, problem });
        if let Err(problem) = job_id_problem(&self.id) {
            fail("ID".into(), problem);
        }
        if let Err(problem) = job_name_problem(&self.name) {
            fail("Name".into(), problem);
        }
        if !JOB_TYPES.contains(&self.job_type.as_str()) {
            fail(
                "Type".into(),
                format!(
                    "must be one of {} (got {:?})",
                    JOB_TYPES.join(", "),
                    self.job_type
                ),
            );
        }
        if !(1..=100).contains(&self.priority) {
            fail(
                "Priority".into(),
                format!("must be between 1 and 100 (got {})", self.priority),
            );
        }
        if self.task_groups.is_empty() {
            fail(
                "TaskGroups".into(),
                "must have at least one task group".into(),
            );
        } else if self.task_groups.len() > MAX_GROUPS_PER_JOB {
            fail(
                "TaskGroups".into(),
                format!(
                    "at most {MAX_GROUPS_PER_JOB} task groups (got {})",
                    self.task_groups.len()
                ),
            );
        }
        let allocs: i64 = self
            .task_groups
            .iter()
            .filter_map(|group| group.count)
            .filter(|count| *count > 0)
            .fold(0, i64::saturating_add);
        if allocs > MAX_ALLOCS_PER_JOB {
            fail(
                "TaskGroups".into(),
                format!(
                    "the groups' Counts ask for {allocs} allocations, at most \
                     {MAX_ALLOCS_PER_JOB} per job"
                ),
            );
        }
        let mut group_names = BTreeSet::new();
        for (g, group) in self.task_groups.iter().enumerate() {
            let at = format!("TaskGroups[{g}]");
            if let Err(problem) = component_problem(&group.name) {
                fail(format!("{at}.Name"), problem);
            } else if !group_names.insert(group.name.as_str()) {
                fail(
                    format!("{at}.Name"),
                    format!("duplicate task group name {:?}", group.name),
                );
            }
            if let Some(count) = group.count.filter(|count| *count < 0) {
                fail(
                    format!("{at}.Count"),
                    format!("must not be negative (got {count})"),
                );
            }
            if let Some(count) = group.count.filter(|c| *c > 1 && self.job_type == "system") {
                fail(
                    format!("{at}.Count"),
                    format!(
                        "Job task group {} has count {count}. Count cannot exceed 1 with \
                         system scheduler",
                        group.name
                    ),
                );
            }
            if let Some(problem) = group.shutdown_delay_ns.and_then(duration_problem) {
                fail(format!("{at}.ShutdownDelay"), problem);
            }
            restart_policy_problems(
                &mut fail,
                &format!("{at}.RestartPolicy"),
                &self.job_type,
                group.restart_policy.as_ref(),
                None,
            );
            services_problems(&mut fail, &at, group.services.as_deref());
            if group.tasks.is_empty() {
                fail(format!("{at}.Tasks"), "must have at least one task".into());
            } else if group.tasks.len() > MAX_TASKS_PER_GROUP {
                fail(
                    format!("{at}.Tasks"),
                    format!(
                        "at most {MAX_TASKS_PER_GROUP} tasks per group (got {})",
                        group.tasks.len()
                    ),
                );
            }
            let leaders = group.tasks.iter().filter(|task| task.leader).count();
            if leaders > 1 {
                fail(
                    format!("{at}.Tasks"),
                    format!("at most one task may be the leader (got {leaders})"),
                );
            }
            let mut task_names = BTreeSet::new();
            for (t, task) in group.tasks.iter().enumerate() {
                let at = format!("{at}.Tasks[{t}]");
                if let Err(problem) = component_problem(&task.name) {
                    fail(format!("{at}.Name"), problem);
                } else if !task_names.insert(task.name.as_str()) {
                    fail(
                        format!("{at}.Name"),
                        format!("duplicate task name {:?}", task.name),
                    );
                }
                if task.driver.is_empty() {
                    fail(format!("{at}.Driver"), "is required".into());
                }
                if let Err(problem) = user_problem(&task.user) {
                    fail(format!("{at}.User"), problem);
                }
                if let Some(problem) = task.kill_timeout_ns.and_then(duration_problem) {
                    fail(format!("{at}.KillTimeout"), problem);
                }
                if let Some(problem) = duration_problem(task.shutdown_delay_ns) {
                    fail(format!("{at}.ShutdownDelay"), problem);
                }
                if task.restart_policy.is_some() {
                    restart_policy_problems(
                        &mut fail,
                        &format!("{at}.RestartPolicy"),
                        &self.job_type,
                        group.restart_policy.as_ref(),
                        task.restart_policy.as_ref(),
                    );
                }
                if !task.kill_signal.is_empty() && !SIGNALS.contains(&task.kill_signal.as_str()) {
                    fail(
                        format!("{at}.KillSignal"),
                        format!("unknown signal {:?}", task.kill_signal),
                    );
                }
                if let Some(env) = &task.env {
                    if env.len() > MAX_ENV {
                        fail(
                            format!("{at}.Env"),
                            format!("at most {MAX_ENV} variables (got {})", env.len()),
                        );
                    }
                    for (key, value) in env {
                        if key.is_empty() || key.contains(['=', '\0']) {
                            fail(
                                format!("{at}.Env"),
                                format!("{key:?} is not a variable name (empty, or with = or NUL)"),
                            );
                        } else if value.contains('\0') {
                            fail(format!("{at}.Env[{key:?}]"), "must contain no NUL".into());
                        }
                    }
                }
                services_problems(&mut fail, &at, task.services.as_deref());
                if let Some(lifecycle) = &task.lifecycle {
                    if !HOOKS.contains(&lifecycle.hook.as_str()) {
                        fail(
                            format!("{at}.Lifecycle.Hook"),
                            format!(
                                "must be one of {} (got {:?})",
                                HOOKS.join(", "),
                                lifecycle.hook
                            ),
                        );
                    } else if lifecycle.hook == "poststop" && lifecycle.sidecar {
                        fail(
                            format!("{at}.Lifecycle.Sidecar"),
                            "a poststop task cannot be a sidecar".into(),
                        );
                    }
                }
            }
        }
        super::validate_extra::check(self, &mut fail);
        super::validate_update::check(self, &mut fail);
        if errors.is_empty() {
            Ok(())
        } else {
            Err(SpecErrors(errors))
        }
    }
}

/// A display name: present, not too long, no control characters (NUL, newlines, escapes).
fn text_problem(text: &str) -> Result<(), String> {
    if text.is_empty() {
        return Err("is required".into());
    }
    if text.len() > MAX_NAME_BYTES {
        return Err(format!(
            "at most {MAX_NAME_BYTES} bytes (got {})",
            text.len()
        ));
    }
    if let Some(c) = text.chars().find(|c| c.is_control()) {
        return Err(format!(
            "must contain no control characters (got {c:?} in {text:?})"
        ));
    }
    Ok(())
}

/// A group's or task's name: a display name that is also one path component.
fn component_problem(name: &str) -> Result<(), String> {
    text_problem(name)?;
    if name.contains('/') {
        return Err(format!("must contain no '/' (got {name:?})"));
    }
    if name == "." || name == ".." {
        return Err(format!("must not be {name:?}"));
    }
    Ok(())
}

/// A job's name (its ID unless given), by Nomad's rules: present, no NUL, within the length
/// of a name (the CLI escapes control characters when it prints one).
fn job_name_problem(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("is required".into());
    }
    if name.len() > MAX_NAME_BYTES {
        return Err(format!(
            "at most {MAX_NAME_BYTES} bytes (got {})",
            name.len()
        ));
    }
    if name.contains('\0') {
        return Err(format!("must contain no NUL (got {name:?})"));
    }
    Ok(())
}

/// A job's ID, by Nomad's rules — present, no space, no NUL; any other character, a control
/// character included, is the user's (Nomad's API clients escape IDs in URLs; the CLI
/// escapes control characters when it prints one) — within the length of a name, and
/// addressing only its own job as a URL path: where it has `/`, no empty, `.` or `..`
/// segment (clients and proxies rewrite those) and no ending that is a job endpoint's
/// suffix.
fn job_id_problem(id: &str) -> Result<(), String> {
    if id.is_empty() {
        return Err("is required".into());
    }
    if id.len() > MAX_NAME_BYTES {
        return Err(format!("at most {MAX_NAME_BYTES} bytes (got {})", id.len()));
    }
    if let Some(c) = id.chars().find(|c| matches!(c, ' ' | '\0')) {
        return Err(format!("must contain no {c:?} (got {id:?})"));
    }
    if id
        .split('/')
        .any(|segment| matches!(segment, "" | "." | ".."))
    {
        return Err(format!(
            "must not begin or end with '/' or have an empty, \".\" or \"..\" segment (got {id:?})"
        ));
    }
    if let Some(suffix) = JOB_ENDPOINT_SUFFIXES
        .iter()
        .find(|suffix| id.ends_with(&format!("/{suffix}")))
    {
        return Err(format!(
            "must not end in \"/{suffix}\" (got {id:?}): /v1/job/{id} is the {suffix:?} endpoint \
             of job {:?}",
            &id[..id.len() - suffix.len() - 1]
        ));
    }
    Ok(())
}

/// A user's name, if any: at most 32 bytes (Linux's limit), no control characters, `:` or
/// `/` (whether the user exists is the client's question: the driver's, at registration).
fn user_problem(user: &str) -> Result<(), String> {
    if user.is_empty() {
        return Ok(());
    }
    if user.len() > 32 {
        return Err(format!("at most 32 bytes (got {})", user.len()));
    }
    if user.chars().any(|c| c.is_control() || c == ':' || c == '/') {
        return Err(format!("{user:?} is not a user name"));
    }
    Ok(())
}

/// The most restart attempts a policy may allow in its interval.
const MAX_RESTART_ATTEMPTS: i64 = 1000;

/// Nomad's checks of a restart policy (`structs.RestartPolicy.Validate`), on the fields as
/// given and on the policy they make with the defaults (`task` overriding `group`).
fn restart_policy_problems(
    fail: &mut impl FnMut(String, String),
    at: &str,
    job_type: &str,
    group: Option<&RestartPolicy>,
    task: Option<&RestartPolicy>,
) {
    let Some(given) = task.or(group) else {
        return;
    };
    if let Some(attempts) = given.attempts {
        if !(0..=MAX_RESTART_ATTEMPTS).contains(&attempts) {
            fail(
                format!("{at}.Attempts"),
                format!("must be between 0 and {MAX_RESTART_ATTEMPTS} (got {attempts})"),
            );
            return;
        }
    }
    for (field, value) in [("Interval", given.interval_ns), ("Delay", given.delay_ns)] {
        if let Some(problem) = value.and_then(duration_problem) {
            fail(format!("{at}.{field}"), problem);
            return;
        }
    }
    if let Some(mode) = given.mode.as_deref() {
        if mode != "fail" && mode != "delay" {
            fail(
                format!("{at}.Mode"),
                format!("Unsupported restart mode: {mode:?} (valid modes: fail, delay)"),
            );
            return;
        }
    }
    let policy = RestartPolicy::effective(job_type, group, task);
    let delay = crate::gotime::go_duration(policy.delay_ns);
    let interval = crate::gotime::go_duration(policy.interval_ns);
    if policy.attempts == 0 && policy.mode == super::RestartMode::Delay {
        fail(
            format!("{at}.Attempts"),
            format!(
                "Restart policy \"delay\" with {} attempts is ambiguous",
                policy.attempts
            ),
        );
    }
    if policy.interval_ns < 5_000_000_000 {
        fail(
            format!("{at}.Interval"),
            format!("Interval can not be less than 5s (got {interval})"),
        );
    }
    if i128::from(policy.attempts) * i128::from(policy.delay_ns) > i128::from(policy.interval_ns) {
        fail(
            at.to_string(),
            format!(
                "Nomad can't restart the TaskGroup {} times in an interval of {interval} with a delay of {delay}",
                policy.attempts
            ),
        );
    }
}

/// A duration field: not negative, at most [`MAX_DURATION_NS`].
fn duration_problem(ns: i64) -> Option<String> {
    if ns < 0 {
        Some(format!("must not be negative (got {ns} ns)"))
    } else if ns > MAX_DURATION_NS {
        Some(format!(
            "at most a week, {MAX_DURATION_NS} ns (got {ns} ns)"
        ))
    } else {
        None
    }
}

/// The services of a group or task at `at`: how many, and each name a DNS label.
fn services_problems(
    fail: &mut impl FnMut(String, String),
    at: &str,
    services: Option<&[Service]>,
) {
    let services = services.unwrap_or_default();
    if services.len() > MAX_SERVICES {
        fail(
            format!("{at}.Services"),
            format!("at most {MAX_SERVICES} (got {})", services.len()),
        );
        return;
    }
    for (s, service) in services.iter().enumerate() {
        if let Err(problem) = service_name_problem(&service.name) {
            fail(format!("{at}.Services[{s}].Name"), problem);
        }
    }
}

/// Nomad's rule for a service name: RFC 1123, letters, digits and dashes, neither first nor
/// last a dash, at most 63 bytes.
fn service_name_problem(name: &str) -> Result<(), String> {
    let valid = !name.is_empty()
        && name.len() <= MAX_SERVICE_NAME_BYTES
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if valid {
        Ok(())
    } else {
        Err(format!(
            "must be valid per RFC 1123: letters, digits and dashes, not beginning or ending \
             with a dash, at most {MAX_SERVICE_NAME_BYTES} bytes (got {name:?})"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse_register_body;
    use super::*;

    #[test]
    fn every_problem_names_its_field() {
        let body = r#"{"Job": {"ID": "my job", "Priority": 101, "TaskGroups": [
            {"Name": "g", "ShutdownDelay": -1, "Tasks": [
                {"Name": "a", "Driver": "raw_exec", "Leader": true, "KillSignal": "SIGNOPE"},
                {"Name": "a", "Leader": true, "KillTimeout": -5,
                 "Lifecycle": {"Hook": "poststop", "Sidecar": true}}]}]}}"#;
        let errors = parse_register_body(body.as_bytes()).unwrap_err();
        let fields: Vec<_> = errors.0.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "ID",
                "Priority",
                "TaskGroups[0].ShutdownDelay",
                "TaskGroups[0].Tasks",
                "TaskGroups[0].Tasks[0].KillSignal",
                "TaskGroups[0].Tasks[1].Name",
                "TaskGroups[0].Tasks[1].Driver",
                "TaskGroups[0].Tasks[1].KillTimeout",
                "TaskGroups[0].Tasks[1].Lifecycle.Sidecar",
            ]
        );
        assert!(errors
            .to_string()
            .contains("Priority: must be between 1 and 100 (got 101)"));
    }

    #[test]
    fn missing_groups_are_reported() {
        let errors = parse_register_body(br#"{"Job": {"ID": "x"}}"#).unwrap_err();
        assert_eq!(
            errors.to_string(),
            "invalid job: TaskGroups: must have at least one task group"
        );
    }

    /// A job of one group `g` with one task `t`, with `edit` applied to its JSON.
    fn job_with(edit: impl FnOnce(&mut serde_json::Value)) -> Result<Job, SpecErrors> {
        let mut value = serde_json::json!({"Job": {"ID": "web", "TaskGroups": [{"Name": "g",
            "Tasks": [{"Name": "t", "Driver": "raw_exec",
                       "Config": {"command": "/bin/sleep"}}]}]}});
        edit(&mut value["Job"]);
        parse_register_body(value.to_string().as_bytes())
    }

    fn problem_at(field: &str, edit: impl FnOnce(&mut serde_json::Value)) -> String {
        let errors = job_with(edit).expect_err("refused");
        let found = errors.0.iter().find(|e| e.field == field);
        found
            .unwrap_or_else(|| panic!("no problem at {field}: {errors}"))
            .problem
            .clone()
    }

    #[test]
    fn a_task_name_is_one_path_component() {
        let long = "x".repeat(MAX_NAME_BYTES + 1);
        for name in [
            "/",
            "../../../../../../../../../../tmp/x",
            "/tmp/abs",
            ".",
            "..",
            "a\0b",
            &long,
        ] {
            let problem = problem_at("TaskGroups[0].Tasks[0].Name", |job| {
                job["TaskGroups"][0]["Tasks"][0]["Name"] = name.into();
            });
            assert!(!problem.is_empty(), "{name:?}");
        }
        let ok = job_with(|job| job["TaskGroups"][0]["Tasks"][0]["Name"] = "web server.v2".into());
        assert!(ok.is_ok(), "{ok:?}");
    }

    #[test]
    fn group_names_have_no_slash_or_control_characters() {
        for name in ["a/b", "tab\there", "esc\u{1b}[31m"] {
            problem_at("TaskGroups[0].Name", |job| {
                job["TaskGroups"][0]["Name"] = name.into()
            });
        }
    }

    #[test]
    fn a_job_id_addresses_only_its_own_job() {
        let problem = problem_at("ID", |job| job["ID"] = "web/allocations".into());
        assert!(
            problem.contains("\"allocations\" endpoint of job \"web\""),
            "{problem}"
        );
        for id in ["web/", "/web", "a//b", "a/../b", "my job", "a\0b", ""] {
            problem_at("ID", |job| job["ID"] = id.into());
        }
        // Nomad's rules otherwise: its API test registers this one.
        for id in [
            "team/web.v2_1",
            "job-id/with\\troublesome:characters\n?&字",
            "a#b%20",
        ] {
            assert!(job_with(|job| job["ID"] = id.into()).is_ok(), "{id:?}");
        }
    }

    #[test]
    fn service_names_are_dns_labels() {
        for name in ["web_svc", "-web", "web-", "", "a.b", &"s".repeat(64)] {
            problem_at("TaskGroups[0].Services[0].Name", |job| {
                job["TaskGroups"][0]["Services"] = serde_json::json!([{"Name": name}]);
            });
        }
        let ok = job_with(|job| {
            job["TaskGroups"][0]["Tasks"][0]["Services"] = serde_json::json!([{"Name": "web-1"}]);
        });
        assert!(ok.is_ok(), "{ok:?}");
    }

    #[test]
    fn counts_tasks_and_durations_have_limits() {
        let problem = problem_at("TaskGroups", |job| {
            job["TaskGroups"][0]["Count"] = 1_000_000_000.into()
        });
        assert!(
            problem.contains("1000000000 allocations, at most 10000"),
            "{problem}"
        );
        assert!(job_with(|job| job["TaskGroups"][0]["Count"] = MAX_ALLOCS_PER_JOB.into()).is_ok());
        let tasks: Vec<_> = (0..=MAX_TASKS_PER_GROUP)
            .map(|i| serde_json::json!({"Name": format!("t{i}"), "Driver": "raw_exec"}))
            .collect();
        problem_at("TaskGroups[0].Tasks", |job| {
            job["TaskGroups"][0]["Tasks"] = tasks.into()
        });
        problem_at("TaskGroups[0].Tasks[0].KillTimeout", |job| {
            job["TaskGroups"][0]["Tasks"][0]["KillTimeout"] = i64::MAX.into();
        });
        problem_at("TaskGroups[0].ShutdownDelay", |job| {
            job["TaskGroups"][0]["ShutdownDelay"] = (MAX_DURATION_NS + 1).into();
        });
    }

    #[test]
    fn env_names_and_values_can_be_passed_to_a_process() {
        for (key, value) in [("A=B", "1"), ("", "1"), ("K\0", "1")] {
            problem_at("TaskGroups[0].Tasks[0].Env", |job| {
                job["TaskGroups"][0]["Tasks"][0]["Env"] = serde_json::json!({ key: value });
            });
        }
        problem_at("TaskGroups[0].Tasks[0].Env[\"K\"]", |job| {
            job["TaskGroups"][0]["Tasks"][0]["Env"] = serde_json::json!({"K": "a\0b"});
        });
    }
}
