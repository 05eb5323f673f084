//! The `alloc` commands' arguments, and the top-level `logs` and `fs` that share them.

use super::Address;
use clap::{Args, Subcommand};

#[derive(Subcommand, Debug)]
pub enum AllocCommand {
    /// Print a task's stdout (or stderr); TASK may be omitted when the allocation has one.
    Logs(LogsArgs),
    /// Show an allocation: its tasks' states and recent events, its stop's progress.
    Status {
        /// The allocation's ID, or a prefix of it.
        alloc: String,
        /// Show full information: full IDs, the placement's metrics, and whether a stop
        /// skips the shutdown delays (`No Shutdown Delay`).
        #[arg(long)]
        verbose: bool,
        /// Output the allocation in its JSON format, as the API has it.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        address: Address,
    },
    /// Restart a task, or every running task, of an allocation in place (through its
    /// pre-kill hooks and delay), and wait until each runs again.
    Restart {
        /// The allocation's ID, or a prefix of it.
        alloc: String,
        /// The task to restart (as -task); without it, every running task.
        task: Option<String>,
        /// Specify the individual task to restart. If a task is given both as an argument
        /// and with -task, -task wins. Cannot be used with -all-tasks.
        #[arg(long = "task", value_name = "task-name")]
        task_flag: Option<String>,
        /// Restart all tasks of the allocation, even the ones that already ran. Cannot be
        /// used with -task or the TASK argument.
        #[arg(long = "all-tasks")]
        all_tasks: bool,
        /// Ignore the task shutdown_delay configuration so that there is no delay between
        /// service deregistration and task restart. Note that using this flag will result in
        /// failed network connections to the allocation being restarted. It holds for this
        /// restart only: a later restart or stop waits the delays again.
        #[arg(long = "no-shutdown-delay")]
        no_shutdown_delay: bool,
        /// Show full information.
        #[arg(long)]
        verbose: bool,
        #[command(flatten)]
        address: Address,
    },
    /// Stop one allocation (it is replaced), and wait until its tasks are dead.
    Stop {
        /// The allocation's ID, or a prefix of it.
        alloc: String,
        /// Ignore the group and task shutdown_delay configuration so that there is no delay
        /// between service deregistration and task shutdown. Note that using this flag will
        /// result in failed network connections to the allocation being stopped. Every
        /// pre-kill hook still runs; the replacement waits its delays again when it stops.
        #[arg(long = "no-shutdown-delay")]
        no_shutdown_delay: bool,
        /// Mark the allocation for rescheduling too (`DesiredTransition.Reschedule`).
        #[arg(long)]
        reschedule: bool,
        /// Return immediately instead of entering monitor mode: the new evaluation's ID is
        /// printed, for `eval status`. Without it the command monitors the stop until the
        /// allocation's tasks are dead.
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
        /// Specify the signal that the selected tasks should receive. Defaults to SIGKILL.
        #[arg(short = 's', default_value = "SIGKILL")]
        signal: String,
        /// The allocation's ID, or a prefix of it.
        alloc: String,
        /// The task to signal; without it, every running task.
        task: Option<String>,
        #[command(flatten)]
        address: Address,
    },
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
    /// Show full information (accepted as Nomad's is; `alloc fs` prints no IDs).
    #[arg(long)]
    pub verbose: bool,
    #[command(flatten)]
    pub address: Address,
}

/// `alloc logs` (and `logs`).
#[derive(Args, Debug)]
pub struct LogsArgs {
    /// The allocation's ID, or a prefix of it.
    pub alloc: String,
    /// The task whose log to print (as -task); may be left out when the allocation has one.
    pub task: Option<String>,
    /// Sets the task to view the logs of. If a task is given both as an argument and with
    /// -task, -task wins.
    #[arg(long = "task")]
    pub task_flag: Option<String>,
    /// Display stderr logs (instead of stdout).
    #[arg(long)]
    pub stderr: bool,
    /// Do not stop at the end of the log: wait for what the task writes next, until the
    /// allocation ends or the command is interrupted.
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
    /// Show the contents with offsets relative to the end: the last -n lines (10 if
    /// neither -n nor -c is given), or the last -c bytes.
    #[arg(long)]
    pub tail: bool,
    /// With -tail: the tail location in best-effort number of lines from the end.
    #[arg(short = 'n')]
    pub lines: Option<u64>,
    /// With -tail: the tail location in number of bytes from the end.
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
