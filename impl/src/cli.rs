//! The `quiesce` command line: the agent, and a client CLI that mirrors Nomad's (`job
//! run|status|stop|start`, `alloc status|stop`, `eval status`), with Nomad's single-dash
//! flags, `-address` / `NOMAD_ADDR`, ID prefixes resolved as Nomad resolves them, and the
//! evaluation monitor — which, for a stop, goes on until the stopped tasks are dead.

use crate::daemon::{self, AgentConfig};
use crate::spec::Job;
use clap::{Args, Parser, Subcommand};
use serde_json::Value;
use std::io::{BufRead, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(Parser, Debug)]
#[command(
    name = "quiesce",
    version,
    about = "The reference daemon for Nomad's stop path, and its Nomad-style CLI.",
    after_help = "Flags may be written with one dash, as Nomad's are: `-no-shutdown-delay`."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Top,
}

#[derive(Subcommand, Debug)]
pub enum Top {
    /// Run the agent: server and client in one process.
    Agent(AgentArgs),
    /// Job commands.
    #[command(subcommand)]
    Job(JobCommand),
    /// Allocation commands.
    #[command(subcommand)]
    Alloc(AllocCommand),
    /// Evaluation commands.
    #[command(subcommand)]
    Eval(EvalCommand),
    /// (internal) Supervise one raw_exec task: run by the agent.
    #[command(hide = true)]
    Supervise {
        dir: PathBuf,
        /// The user to run the task as.
        #[arg(long)]
        user: Option<String>,
        #[arg(last = true, required = true)]
        argv: Vec<String>,
    },
}

#[derive(Args, Debug)]
pub struct AgentArgs {
    /// Development mode: server and client in one process (the only mode).
    #[arg(long)]
    pub dev: bool,
    /// Where state, task directories and the event log live (default: a new temporary
    /// directory).
    #[arg(long = "data-dir")]
    pub data_dir: Option<PathBuf>,
    #[arg(long, default_value = "127.0.0.1")]
    pub bind: IpAddr,
    /// 0 picks a free port (printed at start-up).
    #[arg(long, default_value_t = 4646)]
    pub port: u16,
}

#[derive(Args, Debug, Clone)]
pub struct Address {
    /// The agent's HTTP address (default: $NOMAD_ADDR, else http://127.0.0.1:4646).
    #[arg(long, global = true)]
    pub address: Option<String>,
}

#[derive(Subcommand, Debug)]
pub enum JobCommand {
    /// Register a job from a jobspec file (HCL, or JSON in the API's shape) and monitor its
    /// evaluation.
    Run {
        file: PathBuf,
        #[arg(long)]
        detach: bool,
        #[command(flatten)]
        address: Address,
    },
    /// List jobs, or show one job and its allocations.
    Status {
        job: Option<String>,
        #[command(flatten)]
        address: Address,
    },
    /// Stop a job, and wait until its tasks are dead.
    Stop {
        job: String,
        #[arg(long)]
        purge: bool,
        /// Skip the group and task shutdown_delay waits (pre-stop hooks still run).
        #[arg(long = "no-shutdown-delay")]
        no_shutdown_delay: bool,
        #[arg(long)]
        detach: bool,
        /// Do not ask for confirmation when JOB is only a prefix.
        #[arg(long)]
        yes: bool,
        #[arg(long = "eval-priority")]
        eval_priority: Option<i64>,
        #[command(flatten)]
        address: Address,
    },
    /// Start a stopped job again (its latest version, with Stop=false).
    Start {
        job: String,
        #[arg(long)]
        detach: bool,
        #[command(flatten)]
        address: Address,
    },
}

#[derive(Subcommand, Debug)]
pub enum AllocCommand {
    Status {
        alloc: String,
        #[command(flatten)]
        address: Address,
    },
    /// Stop one allocation (it is replaced), and wait until its tasks are dead.
    Stop {
        alloc: String,
        #[arg(long = "no-shutdown-delay")]
        no_shutdown_delay: bool,
        #[arg(long)]
        detach: bool,
        #[command(flatten)]
        address: Address,
    },
}

#[derive(Subcommand, Debug)]
pub enum EvalCommand {
    Status {
        eval: String,
        #[command(flatten)]
        address: Address,
    },
}

/// Nomad's flags have one dash (`-no-shutdown-delay`); clap's long flags have two. Rewrites
/// each single-dash word longer than one letter, up to a `--`.
pub fn double_dash(args: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut out = Vec::new();
    let mut literal = false;
    for arg in args {
        if arg == "--" {
            literal = true;
        }
        let single = !literal
            && arg.starts_with('-')
            && !arg.starts_with("--")
            && arg.len() > 2
            && !arg[1..].starts_with(|c: char| c.is_ascii_digit());
        out.push(if single { format!("-{arg}") } else { arg });
    }
    out
}

/// Runs the command line; returns the process exit code.
pub fn main(args: Vec<String>) -> i32 {
    // `supervise DIR -- COMMAND…` runs once per task: it skips clap, whose parsing would
    // touch memory that the supervisor's exit then has to tear down again, in the middle
    // of a stop of many tasks. Any other shape goes to clap, for its errors.
    if args.get(1).map(String::as_str) == Some("parse-hcl") && args.len() == 2 {
        return crate::hcl_jobspec::parse_hcl_main();
    }
    if let [_, supervise, dir, rest @ ..] = args.as_slice() {
        let (user, rest) = match rest {
            [flag, user, rest @ ..] if flag == "--user" => (Some(user.as_str()), rest),
            _ => (None, rest),
        };
        if let [dash, argv @ ..] = rest {
            if supervise == "supervise" && dash == "--" && !argv.is_empty() {
                let dir = std::path::Path::new(dir);
                return crate::client::raw_exec::supervise(dir, user, argv);
            }
        }
    }
    let cli = match Cli::try_parse_from(double_dash(args)) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 1 } else { 0 };
        }
    };
    let result = match cli.command {
        Top::Supervise { dir, user, argv } => {
            return crate::client::raw_exec::supervise(&dir, user.as_deref(), &argv)
        }
        Top::Agent(args) => agent(args),
        Top::Job(command) => job(command),
        Top::Alloc(command) => alloc(command),
        Top::Eval(EvalCommand::Status { eval, address }) => {
            Api::new(&address).and_then(|api| eval_status(&api, &eval))
        }
    };
    match result {
        Ok(()) => 0,
        Err(message) => {
            eprintln!("Error: {message}");
            1
        }
    }
}

fn agent(args: AgentArgs) -> Result<(), String> {
    if !args.dev {
        return Err("only -dev mode is supported: run `quiesce agent -dev`".into());
    }
    let data_dir = match args.data_dir {
        Some(dir) => dir,
        None => {
            let dir = std::env::temp_dir().join(format!("quiesce-{}", std::process::id()));
            create_data_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            dir
        }
    };
    let data_dir = std::fs::canonicalize(&data_dir)
        .or_else(|_| {
            create_data_dir(&data_dir)?;
            std::fs::canonicalize(&data_dir)
        })
        .map_err(|e| format!("data dir {}: {e}", data_dir.display()))?;
    let supervisor = std::env::current_exe().map_err(|e| format!("finding this program: {e}"))?;
    // SIGINT and SIGTERM are taken by this thread (sigwait), so every thread the agent
    // starts inherits them blocked; tasks do not (std resets the mask of a child).
    let signals = shutdown_signals();
    let config = AgentConfig::new(
        data_dir.clone(),
        SocketAddr::new(args.bind, args.port),
        supervisor,
    );
    let agent = daemon::spawn(config)?;
    println!("==> quiesce agent started (dev mode)");
    println!("    HTTP address: http://{}", agent.shared.config.bind);
    println!("    Data dir:     {}", data_dir.display());
    println!(
        "    Event log:    {}",
        data_dir.join(daemon::persist::EVENT_LOG_FILE).display()
    );
    let _ = std::io::stdout().flush();
    let caught = wait_for(&signals);
    // A clean stop: everything queued is made durable first. Tasks keep running under their
    // supervisors; an agent started on the same data dir reattaches to them.
    agent.shared.core().commit_durably()?;
    println!("==> Caught signal {caught}: state saved; tasks keep running under their supervisors");
    Ok(())
}

fn shutdown_signals() -> libc::sigset_t {
    // SAFETY: sigset operations on a local set; pthread_sigmask on the calling thread.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

fn wait_for(signals: &libc::sigset_t) -> i32 {
    let mut caught = 0;
    // SAFETY: the set is initialised and blocked in this thread.
    unsafe { libc::sigwait(signals, &mut caught) };
    caught
}

// ---------------------------------------------------------------------------- HTTP client

/// The agent's API, as the CLI uses it.
pub struct Api {
    base: String,
    agent: ureq::Agent,
}

impl Api {
    pub fn new(address: &Address) -> Result<Api, String> {
        let base = address
            .address
            .clone()
            .or_else(|| std::env::var("NOMAD_ADDR").ok().filter(|a| !a.is_empty()))
            .unwrap_or_else(|| "http://127.0.0.1:4646".into());
        let base = base.trim_end_matches('/').to_string();
        if !base.starts_with("http://") {
            return Err(format!(
                "address {base:?} is not an http:// URL (this CLI speaks plain HTTP)"
            ));
        }
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build();
        Ok(Api {
            base,
            agent: config.into(),
        })
    }

    /// Sends a request; a non-2xx answer is an error carrying the agent's message.
    pub fn call(&self, method: &str, path: &str, body: Option<&[u8]>) -> Result<Value, String> {
        self.call_indexed(method, path, body)
            .map(|(value, _)| value)
    }

    /// Sends a request; returns the answer and its `X-Nomad-Index`.
    pub fn call_indexed(
        &self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
    ) -> Result<(Value, u64), String> {
        let url = format!("{}{path}", self.base);
        let response = match (method, body) {
            ("GET", _) => self.agent.get(&url).call(),
            ("DELETE", _) => self.agent.delete(&url).call(),
            ("PUT", Some(body)) => self.agent.put(&url).send(body),
            ("PUT", None) => self.agent.put(&url).send_empty(),
            _ => self.agent.post(&url).send_empty(),
        };
        let mut response = response.map_err(|e| {
            format!(
                "Error querying the agent at {}: {e} (is `quiesce agent -dev` running? set -address or NOMAD_ADDR)",
                self.base
            )
        })?;
        let status = response.status().as_u16();
        let index = response
            .headers()
            .get("X-Nomad-Index")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let text = response
            .body_mut()
            .read_to_string()
            .map_err(|e| format!("reading the agent's answer: {e}"))?;
        if !(200..300).contains(&status) {
            return Err(format!(
                "Unexpected response code: {status} ({})",
                text.trim()
            ));
        }
        let value = serde_json::from_str(&text)
            .map_err(|e| format!("the agent's answer is not JSON: {e}"))?;
        Ok((value, index))
    }

    fn get(&self, path: &str) -> Result<Value, String> {
        self.call("GET", path, None)
    }
}

/// Escapes a path segment (IDs may hold spaces or `/`; the agent decodes them).
fn segment(id: &str) -> String {
    let mut out = String::new();
    for byte in id.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                out.push(byte as char)
            }
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

// ---------------------------------------------------------------------------- formatting

/// Unix nanoseconds as RFC 3339 (UTC, seconds).
pub fn rfc3339(ns: i64) -> String {
    let secs = ns.div_euclid(1_000_000_000);
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's civil-from-days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

fn now() -> String {
    rfc3339(daemon::unix_now_ns())
}

fn short(id: &str) -> &str {
    &id[..id.len().min(8)]
}

fn text(value: &Value, key: &str) -> String {
    match &value[key] {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// Columns padded to their widest cell, as Nomad's tables are.
fn table(rows: &[Vec<String>]) -> String {
    let widths: Vec<usize> = (0..rows.first().map_or(0, Vec::len))
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    rows.iter()
        .map(|row| {
            let cells: Vec<String> = row
                .iter()
                .zip(&widths)
                .map(|(cell, width)| format!("{cell:width$}"))
                .collect();
            cells.join("  ").trim_end().to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn fields(pairs: &[(&str, String)]) -> String {
    let width = pairs.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    pairs
        .iter()
        .map(|(k, v)| format!("{k:width$} = {v}"))
        .collect::<Vec<_>>()
        .join("\n")
}

// ---------------------------------------------------------------------------- prefixes

/// Resolves an allocation or evaluation ID prefix as Nomad does: at least two characters,
/// exactly one match.
fn resolve(api: &Api, kind: &str, list: &str, prefix: &str) -> Result<Value, String> {
    if prefix.len() < 2 {
        return Err(format!("{kind} ID must contain at least two characters."));
    }
    let matches = api.get(&format!("/v1/{list}?prefix={}", segment(prefix)))?;
    let matches = matches.as_array().cloned().unwrap_or_default();
    match matches.len() {
        0 => Err(format!(
            "No {} with prefix or id {prefix:?} found",
            kind.to_lowercase()
        )),
        1 => Ok(matches[0].clone()),
        _ => {
            let ids: Vec<String> = matches.iter().map(|m| text(m, "ID")).collect();
            Err(format!(
                "Prefix matched multiple {}s:\n{}",
                kind.to_lowercase(),
                ids.join("\n")
            ))
        }
    }
}

/// A job by exact ID, else by a prefix matching exactly one job.
fn resolve_job(api: &Api, given: &str) -> Result<String, String> {
    let jobs = api.get(&format!("/v1/jobs?prefix={}", segment(given)))?;
    let ids: Vec<String> = jobs
        .as_array()
        .map(|jobs| jobs.iter().map(|j| text(j, "ID")).collect())
        .unwrap_or_default();
    if ids.iter().any(|id| id == given) {
        return Ok(given.to_string());
    }
    match ids.len() {
        0 => Err(format!("No job(s) with prefix or ID {given:?} found")),
        1 => Ok(ids[0].clone()),
        _ => Err(format!("Prefix matched multiple jobs:\n{}", ids.join("\n"))),
    }
}

// ---------------------------------------------------------------------------- jobs

/// A jobspec file as a register body: JSON (wrapped in `{"Job": …}` if it is not already),
/// or HCL (parsed here, as Nomad's CLI does).
fn read_jobspec(file: &Path) -> Result<Vec<u8>, String> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| format!("Error reading job file {}: {e}", file.display()))?;
    let is_json =
        file.extension().is_some_and(|e| e == "json") || text.trim_start().starts_with('{');
    let value: Value = if is_json {
        serde_json::from_str(&text).map_err(|e| {
            format!(
                "Error parsing job file {}: invalid JSON: {e}",
                file.display()
            )
        })?
    } else {
        crate::hcl_jobspec::parse_job(&text)
            .map_err(|e| format!("Error parsing job file {}: {e}", file.display()))?
    };
    let wrapped = match value.as_object() {
        Some(object) if object.keys().any(|k| k.eq_ignore_ascii_case("job")) => value,
        _ => serde_json::json!({ "Job": value }),
    };
    Ok(serde_json::to_vec(&wrapped).expect("JSON values serialize"))
}

fn job(command: JobCommand) -> Result<(), String> {
    match command {
        JobCommand::Run {
            file,
            detach,
            address,
        } => {
            let api = Api::new(&address)?;
            let body = read_jobspec(&file)?;
            let answer = api.call("PUT", "/v1/jobs", Some(&body))?;
            let eval = text(&answer, "EvalID");
            if eval.is_empty() {
                println!("Job registered; no evaluation was created");
                return Ok(());
            }
            if detach {
                println!("Job registration successful\nEvaluation ID: {eval}");
                return Ok(());
            }
            monitor(&api, &eval, None)
        }
        JobCommand::Status { job, address } => {
            let api = Api::new(&address)?;
            match job {
                None => list_jobs(&api),
                Some(job) => {
                    let id = resolve_job(&api, &job)?;
                    job_status(&api, &id)
                }
            }
        }
        JobCommand::Stop {
            job,
            purge,
            no_shutdown_delay,
            detach,
            yes,
            eval_priority,
            address,
        } => {
            let api = Api::new(&address)?;
            let id = resolve_job(&api, &job)?;
            if id != job
                && !yes
                && !confirm(&format!("Are you sure you want to stop job {id:?}? [y/N] "))?
            {
                println!("Cancelling job stop");
                return Ok(());
            }
            let mut path = format!(
                "/v1/job/{}?purge={purge}&no_shutdown_delay={no_shutdown_delay}",
                segment(&id)
            );
            if let Some(priority) = eval_priority {
                path.push_str(&format!("&eval_priority={priority}"));
            }
            let allocs: Vec<String> = api
                .get(&format!("/v1/job/{}/allocations", segment(&id)))?
                .as_array()
                .map(|a| a.iter().map(|a| text(a, "ID")).collect())
                .unwrap_or_default();
            let answer = api.call("DELETE", &path, None)?;
            let eval = text(&answer, "EvalID");
            if detach {
                println!("{eval}");
                return Ok(());
            }
            monitor(&api, &eval, Some(&allocs))
        }
        JobCommand::Start {
            job,
            detach,
            address,
        } => {
            let api = Api::new(&address)?;
            let id = resolve_job(&api, &job)?;
            let mut stored = api.get(&format!("/v1/job/{}", segment(&id)))?;
            if stored["Stop"] != Value::Bool(true) {
                return Err(format!("Job {id:?} is not stopped: nothing to start"));
            }
            stored["Stop"] = Value::Bool(false);
            let job: Job = serde_json::from_value(stored)
                .map_err(|e| format!("the agent's job does not decode: {e}"))?;
            let body = serde_json::to_vec(&serde_json::json!({ "Job": job }))
                .expect("JSON values serialize");
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

fn list_jobs(api: &Api) -> Result<(), String> {
    let jobs = api.get("/v1/jobs")?;
    let jobs = jobs.as_array().cloned().unwrap_or_default();
    if jobs.is_empty() {
        println!("No running jobs");
        return Ok(());
    }
    let mut rows = vec![vec![
        "ID".to_string(),
        "Type".into(),
        "Priority".into(),
        "Status".into(),
    ]];
    for job in &jobs {
        rows.push(vec![
            text(job, "ID"),
            text(job, "Type"),
            text(job, "Priority"),
            text(job, "Status"),
        ]);
    }
    println!("{}", table(&rows));
    Ok(())
}

fn alloc_rows(allocs: &[Value]) -> String {
    let mut rows = vec![vec![
        "ID".to_string(),
        "Node ID".into(),
        "Task Group".into(),
        "Version".into(),
        "Desired".into(),
        "Status".into(),
    ]];
    for alloc in allocs {
        rows.push(vec![
            short(&text(alloc, "ID")).to_string(),
            short(&text(alloc, "NodeID")).to_string(),
            text(alloc, "TaskGroup"),
            text(alloc, "JobVersion"),
            text(alloc, "DesiredStatus"),
            text(alloc, "ClientStatus"),
        ]);
    }
    table(&rows)
}

fn job_status(api: &Api, id: &str) -> Result<(), String> {
    let job = api.get(&format!("/v1/job/{}", segment(id)))?;
    println!(
        "{}",
        fields(&[
            ("ID", text(&job, "ID")),
            ("Name", text(&job, "Name")),
            ("Type", text(&job, "Type")),
            ("Priority", text(&job, "Priority")),
            (
                "Datacenters",
                job["Datacenters"].as_array().map_or(String::new(), |d| {
                    d.iter()
                        .map(|x| x.as_str().unwrap_or("").to_string())
                        .collect::<Vec<_>>()
                        .join(",")
                })
            ),
            ("Namespace", text(&job, "Namespace")),
            ("Status", text(&job, "Status")),
            ("Version", text(&job, "Version")),
            ("Stop", text(&job, "Stop")),
        ])
    );
    let allocs = api.get(&format!("/v1/job/{}/allocations", segment(id)))?;
    let allocs = allocs.as_array().cloned().unwrap_or_default();
    println!("\nAllocations");
    if allocs.is_empty() {
        println!("No allocations placed");
    } else {
        println!("{}", alloc_rows(&allocs));
    }
    Ok(())
}

// ---------------------------------------------------------------------------- allocations

fn alloc(command: AllocCommand) -> Result<(), String> {
    match command {
        AllocCommand::Status { alloc, address } => {
            let api = Api::new(&address)?;
            let stub = resolve(&api, "Alloc", "allocations", &alloc)?;
            alloc_status(&api, &text(&stub, "ID"))
        }
        AllocCommand::Stop {
            alloc,
            no_shutdown_delay,
            detach,
            address,
        } => {
            let api = Api::new(&address)?;
            let stub = resolve(&api, "Alloc", "allocations", &alloc)?;
            let id = text(&stub, "ID");
            let answer = api.call(
                "PUT",
                &format!("/v1/allocation/{id}/stop?no_shutdown_delay={no_shutdown_delay}"),
                None,
            )?;
            let eval = text(&answer, "EvalID");
            if detach {
                println!("{eval}");
                return Ok(());
            }
            monitor(&api, &eval, Some(&[id]))
        }
    }
}

fn alloc_status(api: &Api, id: &str) -> Result<(), String> {
    let alloc = api.get(&format!("/v1/allocation/{id}"))?;
    let flag = alloc["DesiredTransition"]["NoShutdownDelay"] == Value::Bool(true);
    println!(
        "{}",
        fields(&[
            ("ID", text(&alloc, "ID")),
            ("Eval ID", short(&text(&alloc, "EvalID")).to_string()),
            ("Name", text(&alloc, "Name")),
            ("Node ID", text(&alloc, "NodeID")),
            ("Job ID", text(&alloc, "JobID")),
            ("Job Version", text(&alloc, "JobVersion")),
            ("Client Status", text(&alloc, "ClientStatus")),
            ("Client Description", text(&alloc, "ClientDescription")),
            ("Desired Status", text(&alloc, "DesiredStatus")),
            ("Desired Description", text(&alloc, "DesiredDescription")),
            ("No Shutdown Delay", flag.to_string()),
        ])
    );
    if let Some(states) = alloc["TaskStates"].as_object() {
        for (task, state) in states {
            println!("\nTask {task:?} is {:?}", text(state, "State"));
            let mut rows = vec![vec![
                "Time".to_string(),
                "Type".into(),
                "Description".into(),
            ]];
            let events = state["Events"].as_array().cloned().unwrap_or_default();
            for event in events.iter().rev() {
                rows.push(vec![
                    rfc3339(event["Time"].as_i64().unwrap_or(0)),
                    text(event, "Type"),
                    text(event, "DisplayMessage"),
                ]);
            }
            println!("Recent Events:\n{}", table(&rows));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------- evaluations

fn eval_status(api: &Api, prefix: &str) -> Result<(), String> {
    let stub = resolve(api, "Eval", "evaluations", prefix)?;
    let eval = api.get(&format!("/v1/evaluation/{}", text(&stub, "ID")))?;
    println!(
        "{}",
        fields(&[
            ("ID", text(&eval, "ID")),
            ("Status", text(&eval, "Status")),
            ("Status Description", text(&eval, "StatusDescription")),
            ("Type", text(&eval, "Type")),
            ("TriggeredBy", text(&eval, "TriggeredBy")),
            ("Job ID", text(&eval, "JobID")),
            ("Priority", text(&eval, "Priority")),
        ])
    );
    Ok(())
}

/// Nomad's evaluation monitor. With `stopped`, it then waits until each of those
/// allocations is client-terminal (its tasks dead), reporting each as it ends.
fn monitor(api: &Api, eval_id: &str, stopped: Option<&[String]>) -> Result<(), String> {
    println!("==> {}: Monitoring evaluation {:?}", now(), short(eval_id));
    let mut index = 0u64;
    let mut last_status = String::new();
    let eval = loop {
        let eval = api.get(&format!("/v1/evaluation/{eval_id}?index={index}&wait=5s"))?;
        let status = text(&eval, "Status");
        if last_status.is_empty() {
            println!(
                "    {}: Evaluation triggered by job {:?}",
                now(),
                text(&eval, "JobID")
            );
        } else if status != last_status {
            println!(
                "    {}: Evaluation status changed: {last_status:?} -> {status:?}",
                now()
            );
        }
        if status != "pending" {
            break eval;
        }
        last_status = status;
        index = eval["ModifyIndex"].as_u64().unwrap_or(index);
    };
    let status = text(&eval, "Status");
    println!(
        "==> {}: Evaluation {:?} finished with status {status:?}",
        now(),
        short(eval_id)
    );
    match stopped {
        None => {
            let allocs = api.get(&format!("/v1/evaluation/{eval_id}/allocations"))?;
            for alloc in allocs.as_array().cloned().unwrap_or_default() {
                println!(
                    "    {}: Allocation {:?} created: node {:?}, group {:?}",
                    now(),
                    short(&text(&alloc, "ID")),
                    short(&text(&alloc, "NodeID")),
                    text(&alloc, "TaskGroup")
                );
            }
            Ok(())
        }
        Some(allocs) => wait_stopped(api, allocs),
    }
}

/// Waits until every allocation in `ids` is client-terminal or gone (purged).
fn wait_stopped(api: &Api, ids: &[String]) -> Result<(), String> {
    let mut left: Vec<String> = ids.to_vec();
    let started = Instant::now();
    let mut index = 0u64;
    while !left.is_empty() {
        let (answer, next) = api.call_indexed(
            "GET",
            &format!("/v1/allocations?index={index}&wait=5s"),
            None,
        )?;
        let allocs = answer.as_array().cloned().unwrap_or_default();
        left.retain(|id| {
            let found = allocs.iter().find(|a| text(a, "ID") == *id);
            let done = match found {
                None => {
                    println!(
                        "    {}: Allocation {:?} stopped and purged",
                        now(),
                        short(id)
                    );
                    true
                }
                Some(alloc) => {
                    let status = text(alloc, "ClientStatus");
                    let done = matches!(status.as_str(), "complete" | "failed" | "lost");
                    if done {
                        println!(
                            "    {}: Allocation {:?} stopped: tasks dead, client status {status:?}",
                            now(),
                            short(id)
                        );
                    }
                    done
                }
            };
            !done
        });
        index = next;
    }
    println!(
        "==> {}: Stop complete: {} allocation(s) stopped in {:.1}s",
        now(),
        ids.len(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// A data dir this agent makes: others may pass through it but not list it
/// (`daemon::persist::DATA_DIR`).
fn create_data_dir(dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(crate::daemon::persist::DATA_DIR)
        .create(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_dash_flags_become_long_flags_up_to_a_double_dash() {
        let args = [
            "quiesce",
            "job",
            "stop",
            "-no-shutdown-delay",
            "-yes",
            "web",
            "--",
            "-x",
        ];
        let out = double_dash(args.iter().map(|s| s.to_string()));
        assert_eq!(
            out,
            [
                "quiesce",
                "job",
                "stop",
                "--no-shutdown-delay",
                "--yes",
                "web",
                "--",
                "-x"
            ]
        );
        let out = double_dash(["-h".to_string(), "-address=http://x".to_string()]);
        assert_eq!(out, ["-h", "--address=http://x"]);
    }

    #[test]
    fn times_print_as_rfc3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_796_040_000_000_000_000), "2026-11-30T12:00:00Z");
    }
}
