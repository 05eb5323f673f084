//! The `quiesce` command line: the agent, and a client CLI that mirrors Nomad's (`job
//! run|status|stop|start`, `alloc status|stop`, `eval status`), with Nomad's single-dash
//! flags, `-address` / `NOMAD_ADDR`, ID prefixes resolved as Nomad resolves them, and the
//! evaluation monitor — which, for a stop, goes on until the stopped tasks are dead.

mod acl;
mod agent;
mod agent_config;
mod alloc;
mod api;
mod job;
mod node;
mod restart;

pub use api::{exchange, rfc3339, shown, Api, Failure};

use acl::acl;
use agent::agent;
use alloc::{alloc, eval_status};
use clap::{Args, Parser, Subcommand};
use job::job;
use std::net::IpAddr;
use std::path::PathBuf;

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
    /// ACL commands: the bootstrap, policies and tokens.
    #[command(subcommand)]
    Acl(AclCommand),
    /// Node commands.
    #[command(subcommand)]
    Node(NodeCommand),
    /// List the jobs (as `job status`).
    Status {
        #[command(flatten)]
        address: Address,
    },
    /// (internal) Supervise one raw_exec task: run by the agent.
    #[command(hide = true)]
    Supervise {
        dir: PathBuf,
        /// The user to run the task as.
        #[arg(long)]
        user: Option<String>,
        /// The cgroup (v2) the task runs in, made by the agent.
        #[arg(long)]
        cgroup: Option<PathBuf>,
        #[arg(last = true, required = true)]
        argv: Vec<String>,
    },
}

#[derive(Args, Debug)]
pub struct AgentArgs {
    /// Development mode: server and client in one process.
    #[arg(long)]
    pub dev: bool,
    /// A configuration file in Nomad's format (JSON or HCL); repeatable, later files win.
    /// Without -dev, the agent is a server, with a client if `client.enabled` is true.
    #[arg(long = "config")]
    pub config: Vec<PathBuf>,
    /// Where state, task directories and the event log live (default: the config's
    /// `data_dir`, else a new temporary directory).
    #[arg(long = "data-dir")]
    pub data_dir: Option<PathBuf>,
    /// The address to listen on (default: the config's `bind_addr`, else 127.0.0.1).
    #[arg(long)]
    pub bind: Option<IpAddr>,
    /// The HTTP port; 0 picks a free one (printed at start-up) (default: the config's
    /// `ports.http`, else 4646).
    #[arg(long)]
    pub port: Option<u16>,
    /// The agent's and its node's name (default: the host's name).
    #[arg(long)]
    pub node: Option<String>,
    #[arg(long)]
    pub region: Option<String>,
    #[arg(long)]
    pub dc: Option<String>,
    /// Check every request's ACL token (off by default, as in Nomad's dev agent).
    #[arg(long = "acl-enabled")]
    pub acl_enabled: bool,
}

#[derive(Args, Debug, Clone)]
pub struct Address {
    /// The agent's HTTP address (default: $NOMAD_ADDR, else http://127.0.0.1:4646).
    #[arg(long, global = true)]
    pub address: Option<String>,
    /// The ACL token's secret (default: $NOMAD_TOKEN).
    #[arg(long, global = true)]
    pub token: Option<String>,
}

#[derive(Subcommand, Debug)]
pub enum JobCommand {
    /// Register a job from a jobspec file (HCL, or JSON in the API's shape) and monitor its
    /// evaluation.
    Run {
        file: PathBuf,
        #[arg(long)]
        detach: bool,
        /// Register only if the stored job's modify index is this (0: only a new job), as
        /// `job plan` printed it.
        #[arg(long = "check-index")]
        check_index: Option<u64>,
        #[command(flatten)]
        address: Address,
    },
    /// List jobs, or show one job and its allocations.
    Status {
        job: Option<String>,
        /// Full IDs, not their first eight characters.
        #[arg(long)]
        verbose: bool,
        /// The job as JSON (its stored specification and status), as `job inspect -json`.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        address: Address,
    },
    /// Stop one or more jobs, and wait until their tasks are dead.
    Stop {
        #[arg(required = true)]
        jobs: Vec<String>,
        #[arg(long)]
        purge: bool,
        /// Stop a multiregion job in every region (accepted: this agent has one region).
        #[arg(long)]
        global: bool,
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
    /// Print a job's stored specification as JSON (`{"Job": …}`, as Nomad's).
    Inspect {
        job: String,
        /// Print the job alone, not wrapped in `{"Job": …}`.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        address: Address,
    },
    /// List a job's stored versions.
    History {
        job: String,
        #[command(flatten)]
        address: Address,
    },
    /// What running a jobspec file would change: the diff and each group's updates, from a
    /// dry run of the scheduler. Exits 1 if allocations would be created or destroyed.
    Plan {
        file: PathBuf,
        #[command(flatten)]
        address: Address,
    },
    /// Check a jobspec file as the agent would register it, without registering it.
    Validate {
        file: PathBuf,
        #[command(flatten)]
        address: Address,
    },
    /// Restart a job's allocations: their tasks in place (through each task's pre-kill
    /// hooks and delay), or with -reschedule stopped and replaced; in batches.
    Restart {
        job: String,
        /// Only this group's allocations (repeatable).
        #[arg(long = "group")]
        groups: Vec<String>,
        /// Only this task (repeatable).
        #[arg(long = "task")]
        tasks: Vec<String>,
        /// Every task, not only the running ones.
        #[arg(long = "all-tasks")]
        all_tasks: bool,
        /// Stop each allocation and wait until its replacement runs, instead of restarting
        /// in place.
        #[arg(long)]
        reschedule: bool,
        /// Skip the task delays of these restarts (or, with -reschedule, the stops' delays).
        #[arg(long = "no-shutdown-delay")]
        no_shutdown_delay: bool,
        /// Allocations per batch: a number, or a percentage of them (`25%`).
        #[arg(long = "batch-size", default_value = "1")]
        batch_size: String,
        /// The wait between batches (a duration), or `ask`.
        #[arg(long = "batch-wait", default_value = "0s")]
        batch_wait: String,
        /// What an error in a batch does: `ask`, or `fail`.
        #[arg(long = "on-error", default_value = "ask")]
        on_error: String,
        /// Answer yes to every question (errors are ignored, batches go on).
        #[arg(long)]
        yes: bool,
        #[arg(long)]
        verbose: bool,
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
    /// Print a task's stdout (or stderr); TASK may be omitted when the allocation has one.
    Logs {
        alloc: String,
        task: Option<String>,
        #[arg(long = "task")]
        task_flag: Option<String>,
        #[arg(long)]
        stderr: bool,
        /// Keep printing what the task writes (until interrupted).
        #[arg(short = 'f', long)]
        follow: bool,
        #[command(flatten)]
        address: Address,
    },
    Status {
        alloc: String,
        /// Full IDs, not their first eight characters.
        #[arg(long)]
        verbose: bool,
        /// The allocation as JSON, as the API has it.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        address: Address,
    },
    /// Restart a task, or every running task, of an allocation in place (through its
    /// pre-kill hooks and delay), and wait until each runs again.
    Restart {
        alloc: String,
        task: Option<String>,
        #[arg(long = "task")]
        task_flag: Option<String>,
        /// Every task, not only the running ones.
        #[arg(long = "all-tasks")]
        all_tasks: bool,
        /// Skip the task delays of this restart (that once: a later restart or stop waits).
        #[arg(long = "no-shutdown-delay")]
        no_shutdown_delay: bool,
        #[arg(long)]
        verbose: bool,
        #[command(flatten)]
        address: Address,
    },
    /// Stop one allocation (it is replaced), and wait until its tasks are dead.
    Stop {
        alloc: String,
        #[arg(long = "no-shutdown-delay")]
        no_shutdown_delay: bool,
        /// Mark the allocation for rescheduling too (`DesiredTransition.Reschedule`).
        #[arg(long)]
        reschedule: bool,
        #[arg(long)]
        detach: bool,
        #[command(flatten)]
        address: Address,
    },
}

#[derive(Subcommand, Debug)]
pub enum NodeCommand {
    /// List the nodes, or show one.
    Status {
        node: Option<String>,
        /// The node (or the list) as JSON, as the API has it.
        #[arg(long)]
        json: bool,
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

#[derive(Subcommand, Debug)]
pub enum AclCommand {
    /// Make the first management token (once). FILE, if given, holds its secret (a UUID).
    Bootstrap {
        file: Option<PathBuf>,
        #[command(flatten)]
        address: Address,
    },
    /// Policy commands.
    #[command(subcommand)]
    Policy(AclPolicyCommand),
    /// Token commands.
    #[command(subcommand)]
    Token(AclTokenCommand),
}

#[derive(Subcommand, Debug)]
pub enum AclPolicyCommand {
    /// Create or replace the policy NAME with the rules in FILE (`-` for stdin).
    Apply {
        #[arg(long)]
        description: Option<String>,
        name: String,
        file: PathBuf,
        #[command(flatten)]
        address: Address,
    },
}

#[derive(Subcommand, Debug)]
pub enum AclTokenCommand {
    /// Create a token: a client token with its policies, or a management token.
    Create {
        #[arg(long)]
        name: Option<String>,
        /// `client` or `management`.
        #[arg(long = "type", default_value = "client")]
        kind: String,
        /// A policy of the token (repeatable).
        #[arg(long = "policy")]
        policies: Vec<String>,
        #[arg(long)]
        global: bool,
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

/// Text from clap with its long flags (`--verbose`) written with one dash, as the user
/// types them; `--` alone (the end of flags) stays.
pub fn single_dash(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("--") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        let starts_flag = after.starts_with(|c: char| c.is_ascii_alphabetic());
        let preceded = out.ends_with(|c: char| c.is_alphanumeric() || c == '-');
        out.push_str(if starts_flag && !preceded { "-" } else { "--" });
        rest = after;
    }
    out.push_str(rest);
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
        let (cgroup, rest) = match rest {
            [flag, cgroup, rest @ ..] if flag == "--cgroup" => {
                (Some(std::path::Path::new(cgroup)), rest)
            }
            _ => (None, rest),
        };
        if let [dash, argv @ ..] = rest {
            if supervise == "supervise" && dash == "--" && !argv.is_empty() {
                let dir = std::path::Path::new(dir);
                return crate::client::raw_exec::supervise(dir, user, cgroup, argv);
            }
        }
    }
    let cli = match Cli::try_parse_from(double_dash(args)) {
        Ok(cli) => cli,
        Err(e) => {
            // In the user's spelling: Nomad's flags take one dash (`-verbose`), which
            // `double_dash` made two for clap.
            let text = single_dash(&e.render().to_string());
            use std::io::Write;
            let _ = if e.use_stderr() {
                std::io::stderr().lock().write_all(text.as_bytes())
            } else {
                std::io::stdout().lock().write_all(text.as_bytes())
            };
            return if e.use_stderr() { 1 } else { 0 };
        }
    };
    if !matches!(cli.command, Top::Agent(_) | Top::Supervise { .. }) {
        // A client command piped into `head` ends quietly when the pipe closes, as Nomad's
        // does, instead of panicking in `println!`.
        // SAFETY: the default disposition installs no handler: nothing runs in a signal
        // context.
        unsafe {
            let _ = nix::sys::signal::signal(
                nix::sys::signal::Signal::SIGPIPE,
                nix::sys::signal::SigHandler::SigDfl,
            );
        }
    }
    let result = match cli.command {
        Top::Supervise {
            dir,
            user,
            cgroup,
            argv,
        } => {
            return crate::client::raw_exec::supervise(
                &dir,
                user.as_deref(),
                cgroup.as_deref(),
                &argv,
            )
        }
        Top::Agent(args) => agent(args),
        Top::Job(command) => job(command),
        Top::Alloc(command) => alloc(command),
        Top::Eval(EvalCommand::Status { eval, address }) => {
            Api::new(&address).and_then(|api| eval_status(&api, &eval))
        }
        Top::Acl(command) => acl(command),
        Top::Node(NodeCommand::Status {
            node,
            json,
            address,
        }) => Api::new(&address).and_then(|api| node::node_status(&api, node.as_deref(), json)),
        Top::Status { address } => Api::new(&address).and_then(|api| job::list_jobs(&api)),
    };
    match result {
        Ok(()) => 0,
        Err(message) => {
            eprintln!("Error: {message}");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_speak_of_flags_as_the_user_typed_them() {
        let error = Cli::try_parse_from(double_dash(
            ["quiesce", "job", "status", "-verbosity"].map(String::from),
        ))
        .unwrap_err();
        let text = single_dash(&error.render().to_string());
        assert!(
            text.contains("'-verbosity'") && !text.contains("--verbosity"),
            "{text}"
        );
        // clap's tip names the flag that exists, in Nomad's spelling too.
        assert!(!text.contains("--verbose"), "{text}");
        assert_eq!(single_dash("a -- b --x c--d"), "a -- b -x c--d");
    }

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
}
