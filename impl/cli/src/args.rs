//! The command line's shape: every command and flag, as clap parses them (after
//! `double_dash` has made Nomad's single-dash flags clap's long ones).

use clap::{Args, Parser, Subcommand};
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
    /// Deployment commands: the rollouts of a job's new versions.
    #[command(subcommand)]
    Deployment(DeploymentCommand),
    /// Server commands.
    #[command(subcommand)]
    Server(ServerCommand),
    /// Service registration commands (Nomad's native services).
    #[command(subcommand)]
    Service(ServiceCommand),
    /// System commands.
    #[command(subcommand)]
    System(SystemCommand),
    /// Print this CLI's version.
    Version,
    /// ACL commands: the bootstrap, policies and tokens.
    #[command(subcommand)]
    Acl(AclCommand),
    /// Node commands.
    #[command(subcommand)]
    Node(NodeCommand),
    /// Register a job from a jobspec file (as `job run`).
    Run(RunArgs),
    /// Stop jobs (as `job stop`).
    Stop(StopArgs),
    /// List the jobs, or show the job, allocation, evaluation or node an ID (or a prefix of
    /// one) names, as Nomad's `status`.
    Status(StatusArgs),
    /// Print a task's log (as `alloc logs`).
    Logs(LogsArgs),
    /// Read an allocation's directory (as `alloc fs`).
    Fs(FsArgs),
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
    Run(RunArgs),
    /// List jobs, or show one job and its allocations.
    Status(StatusArgs),
    /// Stop one or more jobs, and wait until their tasks are dead.
    Stop(StopArgs),
    /// Print a job's stored specification as JSON (`{"Job": …}`, as Nomad's).
    Inspect {
        job: String,
        /// Print the job alone, not wrapped in `{"Job": …}`.
        #[arg(long)]
        json: bool,
        /// Print the source the job was submitted as (HCL, or JSON), not the stored job.
        #[arg(long)]
        hcl: bool,
        /// That version of the job (default: the latest).
        #[arg(long)]
        version: Option<u64>,
        #[command(flatten)]
        address: Address,
    },
    /// List a job's stored versions, newest first.
    History {
        job: String,
        /// Show what changed from each version to the next.
        #[arg(short = 'p')]
        diffs: bool,
        #[command(flatten)]
        address: Address,
    },
    /// What running a jobspec file would change: the diff and each group's updates, from a
    /// dry run of the scheduler. Exits 1 if allocations would be created or destroyed.
    Plan {
        file: PathBuf,
        #[command(flatten)]
        variables: VariableArgs,
        #[command(flatten)]
        address: Address,
    },
    /// Check a jobspec file as the agent would register it, without registering it.
    Validate {
        file: PathBuf,
        #[command(flatten)]
        variables: VariableArgs,
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
    /// Write an example jobspec (default `example.nomad.hcl`) that uses the stop path's
    /// fields.
    Init { file: Option<PathBuf> },
    /// List a job's allocations.
    Allocs {
        job: String,
        /// Full IDs.
        #[arg(long)]
        verbose: bool,
        #[command(flatten)]
        address: Address,
    },
    /// List a job's deployments, newest first.
    Deployments {
        job: String,
        /// Only the latest deployment.
        #[arg(long)]
        latest: bool,
        /// Full IDs.
        #[arg(long)]
        verbose: bool,
        #[command(flatten)]
        address: Address,
    },
    /// Revert a job to an older version: its specification is registered again as a new
    /// version and rolled out (through the stop path's delays).
    Revert {
        job: String,
        version: u64,
        /// Return immediately instead of monitoring the evaluation.
        #[arg(long)]
        detach: bool,
        #[command(flatten)]
        address: Address,
    },
    /// Display the most recent scaling events for a job, newest first (the agent keeps
    /// 20 per group).
    ScalingEvents {
        job: String,
        /// Display full information: each event's error flag, message and evaluation ID.
        #[arg(long)]
        verbose: bool,
        #[command(flatten)]
        address: Address,
    },
    /// Change a group's count: `job scale JOB [GROUP] COUNT` (the group may be left out when
    /// the job has one).
    Scale {
        job: String,
        #[arg(num_args = 1..=2, required = true, value_name = "[GROUP] COUNT")]
        group_and_count: Vec<String>,
        /// Return immediately instead of monitoring the evaluation.
        #[arg(long)]
        detach: bool,
        #[command(flatten)]
        address: Address,
    },
}

#[derive(Subcommand, Debug)]
pub enum DeploymentCommand {
    /// List the deployments.
    List {
        /// Full IDs.
        #[arg(long)]
        verbose: bool,
        #[command(flatten)]
        address: Address,
    },
    /// Show a deployment's status and each group's progress.
    Status {
        deployment: String,
        /// Full IDs.
        #[arg(long)]
        verbose: bool,
        #[command(flatten)]
        address: Address,
    },
    /// Mark a deployment failed: it replaces nothing more (and, with auto_revert, the job
    /// goes back to its last stable version).
    Fail {
        deployment: String,
        /// Return immediately instead of monitoring the evaluation.
        #[arg(long)]
        detach: bool,
        #[command(flatten)]
        address: Address,
    },
    /// Pause a deployment: it replaces nothing more until it is resumed.
    Pause {
        deployment: String,
        #[command(flatten)]
        address: Address,
    },
    /// Resume a paused deployment.
    Resume {
        deployment: String,
        /// Return immediately instead of monitoring the evaluation.
        #[arg(long)]
        detach: bool,
        #[command(flatten)]
        address: Address,
    },
    /// Promote a deployment's canaries (this agent places none: the groups are marked
    /// promoted).
    Promote {
        deployment: String,
        /// Only this group (repeatable); all groups without it.
        #[arg(long = "group")]
        groups: Vec<String>,
        /// Return immediately instead of monitoring the evaluation.
        #[arg(long)]
        detach: bool,
        #[command(flatten)]
        address: Address,
    },
}

#[derive(Subcommand, Debug)]
pub enum AllocCommand {
    /// Print a task's stdout (or stderr); TASK may be omitted when the allocation has one.
    Logs(LogsArgs),
    /// Show an allocation: its tasks' states and recent events, its stop's progress.
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
        /// Ignore the group and task shutdown_delay settings: the tasks are signalled as
        /// soon as their pre-kill hooks have run (their services are gone). Open
        /// connections may fail. The replacement waits its delays again when it stops.
        #[arg(long = "no-shutdown-delay")]
        no_shutdown_delay: bool,
        /// Mark the allocation for rescheduling too (`DesiredTransition.Reschedule`).
        #[arg(long)]
        reschedule: bool,
        /// Return immediately instead of monitoring the evaluation and the stop.
        #[arg(long)]
        detach: bool,
        #[command(flatten)]
        address: Address,
    },
    /// Read an allocation's directory: list a directory, print a file, or -stat either.
    /// PATH is relative to the allocation's directory (default `/`); the agent reads beneath
    /// it only, following no symbolic link.
    Fs(FsArgs),
    /// Send a signal to an allocation's tasks (all running ones, or TASK).
    Signal {
        /// The signal (default SIGKILL, as Nomad's).
        #[arg(short = 's', default_value = "SIGKILL")]
        signal: String,
        alloc: String,
        task: Option<String>,
        #[command(flatten)]
        address: Address,
    },
}

#[derive(Subcommand, Debug)]
pub enum ServerCommand {
    /// List the servers this agent knows (itself, the leader, and its peers).
    Members {
        #[command(flatten)]
        address: Address,
    },
}

#[derive(Subcommand, Debug)]
pub enum ServiceCommand {
    /// List the registered services and their tags.
    List {
        #[command(flatten)]
        address: Address,
    },
    /// Show a service's registrations: job, address, tags, node and allocation.
    Info {
        service: String,
        #[command(flatten)]
        address: Address,
    },
}

#[derive(Subcommand, Debug)]
pub enum SystemCommand {
    /// Collect garbage now: old evaluations, terminal allocations and the jobs left with
    /// nothing (Nomad's thresholds).
    Gc {
        #[command(flatten)]
        address: Address,
    },
}

#[derive(Subcommand, Debug)]
pub enum NodeCommand {
    /// List the nodes, or show one.
    Status {
        node: Option<String>,
        /// The node of the agent the CLI talks to.
        #[arg(long = "self", conflicts_with = "node")]
        self_node: bool,
        /// The node (or the list) as JSON, as the API has it.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        address: Address,
    },
}

#[derive(Subcommand, Debug)]
pub enum EvalCommand {
    /// List the evaluations, newest first.
    List {
        /// Full IDs.
        #[arg(long)]
        verbose: bool,
        #[command(flatten)]
        address: Address,
    },
    /// Show an evaluation: its status, trigger and job.
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

/// `job run` (and `run`).
#[derive(Args, Debug)]
pub struct RunArgs {
    /// The jobspec (HCL, or JSON in the API's shape); `-` reads it from standard input.
    pub file: PathBuf,
    /// Return once the job is registered, printing its evaluation's ID.
    #[arg(long)]
    pub detach: bool,
    /// Register only if the stored job's modify index is this (0: only a new job), as
    /// `job plan` printed it.
    #[arg(long = "check-index")]
    pub check_index: Option<u64>,
    /// Print the JSON the job would be registered with (`{"Job": …}`), and register nothing.
    #[arg(long)]
    pub output: bool,
    /// Full IDs in the monitor's lines, not their first eight characters.
    #[arg(long)]
    pub verbose: bool,
    #[command(flatten)]
    pub variables: VariableArgs,
    #[command(flatten)]
    pub address: Address,
}

/// The values of an HCL jobspec's variables (`job run`, `job plan`, `job validate`), in
/// Nomad's words; the environment's `NOMAD_VAR_<name>` are read too.
#[derive(Args, Debug, Default)]
pub struct VariableArgs {
    /// Variable for template, can be used multiple times.
    #[arg(long = "var", value_name = "key=value")]
    pub var: Vec<String>,
    /// Path to HCL2 file containing user variables.
    #[arg(long = "var-file", value_name = "path")]
    pub var_file: Vec<PathBuf>,
}

/// `job status` (and `status`, which also takes an allocation's, evaluation's or node's ID).
#[derive(Args, Debug)]
pub struct StatusArgs {
    pub id: Option<String>,
    /// Full IDs, not their first eight characters.
    #[arg(long)]
    pub verbose: bool,
    /// The job as JSON (its stored specification and status), as `job inspect -json`.
    #[arg(long)]
    pub json: bool,
    /// Only the job's own fields: no allocations.
    #[arg(long)]
    pub short: bool,
    #[command(flatten)]
    pub address: Address,
}

/// `job stop` (and `stop`).
#[derive(Args, Debug)]
pub struct StopArgs {
    #[arg(required = true)]
    pub jobs: Vec<String>,
    /// Purge the job: it is deleted at once (a GET answers 404), and its allocations are
    /// stopped through the stop path (with -no-shutdown-delay, without the waits).
    #[arg(long)]
    pub purge: bool,
    /// Stop a multiregion job in every region (accepted: this agent has one region).
    #[arg(long)]
    pub global: bool,
    /// Ignore the group and task shutdown_delay settings: each task is signalled as soon as
    /// its pre-kill hooks have run (its services are gone). Open connections may fail. The
    /// stored job does not change: a later `job start` waits the delays again.
    #[arg(long = "no-shutdown-delay")]
    pub no_shutdown_delay: bool,
    /// Return immediately, printing the evaluation's ID, instead of monitoring the stop
    /// until every stopped task is dead.
    #[arg(long)]
    pub detach: bool,
    /// Do not ask for confirmation when JOB is only a prefix.
    #[arg(long)]
    pub yes: bool,
    /// The priority of the stop's evaluation (1 to 100; default: the job's).
    #[arg(long = "eval-priority")]
    pub eval_priority: Option<i64>,
    #[command(flatten)]
    pub address: Address,
}

/// `alloc fs` (and `fs`).
#[derive(Args, Debug)]
pub struct FsArgs {
    /// The allocation (an ID or a prefix of one); with -job, the job.
    pub alloc: String,
    /// The path in the allocation's directory (default `/`).
    pub path: Option<String>,
    /// Machine friendly output: sizes in bytes.
    #[arg(short = 'H')]
    pub machine: bool,
    /// Show information about the file or directory instead of its contents.
    #[arg(long)]
    pub stat: bool,
    /// Use a running allocation of this job (the first argument is the job's ID), or the
    /// latest one if none runs.
    #[arg(long)]
    pub job: bool,
    #[command(flatten)]
    pub tail: TailArgs,
    /// Accepted as Nomad's is (it shows full IDs there); `alloc fs` prints no IDs.
    #[arg(long)]
    pub verbose: bool,
    #[command(flatten)]
    pub address: Address,
}

/// `alloc logs` (and `logs`).
#[derive(Args, Debug)]
pub struct LogsArgs {
    pub alloc: String,
    pub task: Option<String>,
    /// The task (as the positional TASK).
    #[arg(long = "task")]
    pub task_flag: Option<String>,
    /// Print the task's stderr instead of its stdout.
    #[arg(long)]
    pub stderr: bool,
    /// Keep printing what the task writes (until interrupted).
    #[arg(short = 'f', long)]
    pub follow: bool,
    #[command(flatten)]
    pub tail: TailArgs,
    #[command(flatten)]
    pub address: Address,
}

/// `-tail`, `-n` and `-c` of `alloc logs` and `alloc fs`.
#[derive(Args, Debug)]
pub struct TailArgs {
    /// Start from the end: the last -n lines (10 if neither -n nor -c is given), or the
    /// last -c bytes.
    #[arg(long)]
    pub tail: bool,
    /// With -tail: this many lines from the end.
    #[arg(short = 'n')]
    pub lines: Option<u64>,
    /// With -tail: this many bytes from the end.
    #[arg(short = 'c')]
    pub bytes: Option<u64>,
}

/// Where `-tail` starts: the last lines or bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tail {
    Lines(u64),
    Bytes(u64),
}

impl TailArgs {
    /// The end asked for, if any; `-n` or `-c` without `-tail`, or both, are errors.
    pub fn chosen(&self) -> Result<Option<Tail>, String> {
        match (self.tail, self.lines, self.bytes) {
            (false, None, None) => Ok(None),
            (false, _, _) => Err("-n and -c are offsets from the end: give -tail".into()),
            (true, Some(_), Some(_)) => Err("-n and -c cannot both be given".into()),
            (true, _, Some(bytes)) => Ok(Some(Tail::Bytes(bytes))),
            (true, lines, None) => Ok(Some(Tail::Lines(lines.unwrap_or(10)))),
        }
    }
}
