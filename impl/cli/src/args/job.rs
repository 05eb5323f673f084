//! The `job` commands' arguments: `job run|status|stop|…`, and the top-level `run`, `status` and
//! `stop` that share them.

use super::Address;
use clap::{Args, Subcommand};
use std::path::PathBuf;

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
        /// The job's ID, or a prefix of it.
        job: String,
        /// Output the job in its JSON format, alone (not wrapped in `{"Job": …}`). Cannot be
        /// used with -hcl.
        #[arg(long)]
        json: bool,
        /// Output the original source submitted with the job (HCL, or JSON). Cannot be used
        /// with -json.
        #[arg(long)]
        hcl: bool,
        /// Display the job at the given job version. Defaults to the current version.
        #[arg(long)]
        version: Option<u64>,
        #[command(flatten)]
        address: Address,
    },
    /// List a job's stored versions, newest first.
    History {
        /// The job's ID, or a prefix of it.
        job: String,
        /// Display the difference between each version of the job and the version before
        /// it.
        #[arg(short = 'p')]
        diffs: bool,
        #[command(flatten)]
        address: Address,
    },
    /// What running a jobspec file would change: the diff and each group's updates, from a
    /// dry run of the scheduler. Exits 1 if allocations would be created or destroyed.
    Plan {
        /// The jobspec file (HCL, or JSON in the API's shape); `-` reads standard input.
        file: PathBuf,
        #[command(flatten)]
        variables: VariableArgs,
        #[command(flatten)]
        address: Address,
    },
    /// Check a jobspec file as the agent would register it, without registering it.
    Validate {
        /// The jobspec file (HCL, or JSON in the API's shape); `-` reads standard input.
        file: PathBuf,
        #[command(flatten)]
        variables: VariableArgs,
        #[command(flatten)]
        address: Address,
    },
    /// Restart a job's allocations: their tasks in place (through each task's pre-kill
    /// hooks and delay), or with -reschedule stopped and replaced; in batches.
    Restart {
        /// The job's ID, or a prefix of it.
        job: String,
        /// Only restart allocations of the given group. Can be specified multiple times. If
        /// no group is set, all allocations of the job are restarted.
        #[arg(long = "group", value_name = "group-name")]
        groups: Vec<String>,
        /// Specify the task to restart. Can be specified multiple times. If no task is set,
        /// only tasks that are currently running are restarted. Cannot be used with
        /// -all-tasks or -reschedule.
        #[arg(long = "task", value_name = "task-name")]
        tasks: Vec<String>,
        /// Restart all tasks of the allocations, even the ones that have already run, in
        /// their lifecycle order. Cannot be used with -task.
        #[arg(long = "all-tasks")]
        all_tasks: bool,
        /// Stop and migrate the allocations instead of restarting them in place: each is
        /// stopped through the stop path and the command waits until its replacement runs.
        /// Cannot be used with -task.
        #[arg(long)]
        reschedule: bool,
        /// Ignore the group and task shutdown_delay configuration so that there is no delay
        /// between service deregistration and task shutdown or restart. Note that using this
        /// flag will result in failed network connections to the allocations being
        /// restarted. It holds for these restarts only (with -reschedule, for these stops):
        /// the stored job does not change.
        #[arg(long = "no-shutdown-delay")]
        no_shutdown_delay: bool,
        /// Number of allocations to restart at once: a number, or a percentage of the
        /// running allocations (`25%`, rounded up).
        #[arg(long = "batch-size", default_value = "1", value_name = "n|n%")]
        batch_size: String,
        /// Time to wait between restart batches. If set to `ask`, the command halts between
        /// batches and waits for the user to say how to proceed.
        #[arg(long = "batch-wait", default_value = "0s", value_name = "duration|ask")]
        batch_wait: String,
        /// What to do when an error happens during a restart batch: `ask` stops and waits
        /// for the user's confirmation, `fail` exits immediately.
        #[arg(long = "on-error", default_value = "ask", value_name = "ask|fail")]
        on_error: String,
        /// Automatic yes to prompts: batch errors are ignored and the remaining batches go
        /// on without waiting.
        #[arg(long)]
        yes: bool,
        /// Display full information.
        #[arg(long)]
        verbose: bool,
        #[command(flatten)]
        address: Address,
    },
    /// Start a stopped job again (its latest version, with Stop=false).
    Start {
        /// The job's ID, or a prefix of it.
        job: String,
        /// Return immediately instead of entering monitor mode: the new evaluation's ID is
        /// printed, for `eval status`.
        #[arg(long)]
        detach: bool,
        #[command(flatten)]
        address: Address,
    },
    /// Write an example jobspec (default `example.nomad.hcl`) that uses the stop path's
    /// fields.
    Init {
        /// The file to write (default `example.nomad.hcl`); an existing file is not
        /// overwritten.
        file: Option<PathBuf>,
    },
    /// List a job's allocations.
    Allocs {
        /// The job's ID, or a prefix of it.
        job: String,
        /// Display full information: full IDs.
        #[arg(long)]
        verbose: bool,
        #[command(flatten)]
        address: Address,
    },
    /// List a job's deployments, newest first.
    Deployments {
        /// The job's ID, or a prefix of it.
        job: String,
        /// Display the latest deployment only, as `deployment status` shows it.
        #[arg(long)]
        latest: bool,
        /// Display full information: full IDs.
        #[arg(long)]
        verbose: bool,
        #[command(flatten)]
        address: Address,
    },
    /// Revert a job to an older version: its specification is registered again as a new
    /// version and rolled out (through the stop path's delays).
    Revert {
        /// The job's ID, or a prefix of it.
        job: String,
        /// The version to revert to.
        version: u64,
        /// Return immediately instead of entering monitor mode: the evaluation's ID is
        /// printed, for `eval status`.
        #[arg(long)]
        detach: bool,
        #[command(flatten)]
        address: Address,
    },
    /// Promote the canaries of the job's most recent deployment once they are healthy,
    /// which unblocks the rolling update of the remaining allocations.
    Promote {
        /// The job's ID, or a prefix of it.
        job: String,
        /// Promote this group; may be given many times. If no group is given, all groups
        /// are promoted.
        #[arg(long = "group")]
        groups: Vec<String>,
        /// Return immediately instead of entering monitor mode: the evaluation's ID is
        /// printed, for `eval status`.
        #[arg(long)]
        detach: bool,
        #[command(flatten)]
        address: Address,
    },
    /// Display the most recent scaling events for a job, newest first (the agent keeps
    /// 20 per group).
    ScalingEvents {
        /// The job's ID, or a prefix of it.
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
        /// The job's ID, or a prefix of it.
        job: String,
        /// The group (may be left out when the job has one) and its new count.
        #[arg(num_args = 1..=2, required = true, value_name = "[GROUP] COUNT")]
        group_and_count: Vec<String>,
        /// Return immediately instead of entering monitor mode: the evaluation's ID is
        /// printed, for `eval status`.
        #[arg(long)]
        detach: bool,
        #[command(flatten)]
        address: Address,
    },
}

/// `job run` (and `run`).
#[derive(Args, Debug)]
pub struct RunArgs {
    /// The jobspec (HCL, or JSON in the API's shape); `-` reads it from standard input.
    pub file: PathBuf,
    /// Return immediately instead of entering monitor mode: after the job is registered,
    /// its evaluation's ID is printed, for `eval status`.
    #[arg(long)]
    pub detach: bool,
    /// Register or update the job only if the stored job's modify index is this one, as
    /// `job plan` printed it; 0 registers it only if it does not exist yet.
    #[arg(long = "check-index")]
    pub check_index: Option<u64>,
    /// Output the JSON that would be submitted to the HTTP API (`{"Job": …}`) without
    /// submitting the job.
    #[arg(long)]
    pub output: bool,
    /// Display full information: full IDs in the monitor's lines.
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
    /// The job's ID, or a prefix of it; none lists every job.
    pub id: Option<String>,
    /// Display full information: full IDs.
    #[arg(long)]
    pub verbose: bool,
    /// Output the job status in JSON format (its stored specification and status).
    #[arg(long)]
    pub json: bool,
    /// Display short output: only the job's own fields, without its summary, deployment
    /// and allocations.
    #[arg(long)]
    pub short: bool,
    #[command(flatten)]
    pub address: Address,
}

/// `job stop` (and `stop`).
#[derive(Args, Debug)]
pub struct StopArgs {
    /// The jobs to stop, each by its ID or a prefix of it; stopped one after the other.
    #[arg(required = true)]
    pub jobs: Vec<String>,
    /// Stop the job and purge it from the system at once (a GET answers 404); without it
    /// the stopped job stays queryable until the garbage collector purges it. Its
    /// allocations are stopped through the stop path either way.
    #[arg(long)]
    pub purge: bool,
    /// Stop a multi-region job in all its regions. Ignored for single-region jobs (this
    /// agent has one region).
    #[arg(long)]
    pub global: bool,
    /// Ignore the group and task shutdown_delay configuration so that there is no delay
    /// between service deregistration and task shutdown. Note that using this flag will
    /// result in failed network connections to the allocations being stopped. Every
    /// pre-kill hook still runs, and the stored job does not change: a later `job start`
    /// waits the delays again.
    #[arg(long = "no-shutdown-delay")]
    pub no_shutdown_delay: bool,
    /// Return immediately instead of entering monitor mode: the new evaluation's ID is
    /// printed, for `eval status`. Without it the command monitors the stop until every
    /// stopped task is dead.
    #[arg(long)]
    pub detach: bool,
    /// Automatic yes to prompts (asked when a job is named by a prefix of its ID).
    #[arg(long)]
    pub yes: bool,
    /// Override the priority of the evaluations produced by this stop (1 to 100). By
    /// default, this is set to the priority of the job.
    #[arg(long = "eval-priority")]
    pub eval_priority: Option<i64>,
    #[command(flatten)]
    pub address: Address,
}
