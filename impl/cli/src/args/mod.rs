//! The command line's shape: every command and flag, as clap parses them (after
//! `double_dash` has made Nomad's single-dash flags clap's long ones).

use clap::{Args, Parser, Subcommand};
use std::net::IpAddr;
use std::path::PathBuf;

mod alloc;
mod cluster;
mod job;

pub use alloc::*;
pub use cluster::*;
pub use job::*;

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
        /// The task's directory, where its exit and signal records go.
        dir: PathBuf,
        /// The user to run the task as.
        #[arg(long)]
        user: Option<String>,
        /// The cgroup (v2) the task runs in, made by the agent.
        #[arg(long)]
        cgroup: Option<PathBuf>,
        /// The task's command and its arguments, after `--`.
        #[arg(last = true, required = true)]
        argv: Vec<String>,
    },
}

#[derive(Args, Debug)]
pub struct AgentArgs {
    /// Start the agent in development mode: a pre-configured agent that is both server and
    /// client, which needs no other configuration.
    #[arg(long)]
    pub dev: bool,
    /// A configuration file in Nomad's format (JSON or HCL). May be given many times: the
    /// files are merged, later ones over earlier ones. Without -dev, the agent is a server,
    /// with a client if `client.enabled` is true.
    #[arg(long = "config")]
    pub config: Vec<PathBuf>,
    /// The data directory, where state, task directories and the event log live (default:
    /// the config's `data_dir`, else a new temporary directory).
    #[arg(long = "data-dir")]
    pub data_dir: Option<PathBuf>,
    /// The address the agent binds to for its network services (default: the config's
    /// `bind_addr`, else 127.0.0.1).
    #[arg(long)]
    pub bind: Option<IpAddr>,
    /// The HTTP port; 0 picks a free one (printed at start-up) (default: the config's
    /// `ports.http`, else 4646).
    #[arg(long)]
    pub port: Option<u16>,
    /// The name of the local agent and its node, unique in the region (default: the host's
    /// name).
    #[arg(long)]
    pub node: Option<String>,
    /// The region the agent is a member of (default: `global`).
    #[arg(long)]
    pub region: Option<String>,
    /// The name of the datacenter the agent is a member of (default: `dc1`).
    #[arg(long)]
    pub dc: Option<String>,
    /// Enable ACLs: check every request's token (off by default, as in Nomad's dev agent).
    #[arg(long = "acl-enabled")]
    pub acl_enabled: bool,
}

#[derive(Args, Debug, Clone)]
pub struct Address {
    /// The address of the agent (Nomad's server). Overrides the NOMAD_ADDR environment
    /// variable if set. Default: http://127.0.0.1:4646.
    #[arg(long, global = true)]
    pub address: Option<String>,
    /// The SecretID of an ACL token to authenticate API requests with. Overrides the
    /// NOMAD_TOKEN environment variable if set.
    #[arg(long, global = true)]
    pub token: Option<String>,
}
