//! The arguments of the commands around jobs: `deployment`, `eval`, `node`, `server`,
//! `service`, `system` and `acl`.

use super::Address;
use clap::Subcommand;
use std::path::PathBuf;

#[derive(Subcommand, Debug)]
pub enum DeploymentCommand {
    /// List the deployments.
    List {
        /// Display full information: full IDs.
        #[arg(long)]
        verbose: bool,
        #[command(flatten)]
        address: Address,
    },
    /// Show a deployment's status and each group's progress.
    Status {
        /// The deployment's ID, or a prefix of it.
        deployment: String,
        /// Display full information: full IDs.
        #[arg(long)]
        verbose: bool,
        #[command(flatten)]
        address: Address,
    },
    /// Mark a deployment failed: it replaces nothing more (and, with auto_revert, the job
    /// goes back to its last stable version).
    Fail {
        /// The deployment's ID, or a prefix of it.
        deployment: String,
        /// Return immediately instead of entering monitor mode: the evaluation's ID is
        /// printed, for `eval status`.
        #[arg(long)]
        detach: bool,
        #[command(flatten)]
        address: Address,
    },
    /// Pause a deployment: it replaces nothing more until it is resumed.
    Pause {
        /// The deployment's ID, or a prefix of it.
        deployment: String,
        #[command(flatten)]
        address: Address,
    },
    /// Resume a paused deployment.
    Resume {
        /// The deployment's ID, or a prefix of it.
        deployment: String,
        /// Return immediately instead of entering monitor mode: the evaluation's ID is
        /// printed, for `eval status`.
        #[arg(long)]
        detach: bool,
        #[command(flatten)]
        address: Address,
    },
    /// Promote a deployment's canaries once they are healthy, which unblocks the rolling
    /// update of the remaining allocations.
    Promote {
        /// The deployment's ID, or a prefix of it.
        deployment: String,
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
        /// The service's name.
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
        /// The node's ID, or a prefix of it; none lists every node.
        node: Option<String>,
        /// Query the status of the local node: the node of the agent the CLI talks to.
        #[arg(long = "self", conflicts_with = "node")]
        self_node: bool,
        /// Output the node (or the list) in its JSON format, as the API has it.
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
        /// Display full information: full IDs.
        #[arg(long)]
        verbose: bool,
        #[command(flatten)]
        address: Address,
    },
    /// Show an evaluation: its status, trigger and job, and the allocations it placed.
    Status {
        /// The evaluation's ID, or a prefix of it.
        eval: String,
        #[command(flatten)]
        address: Address,
    },
}

#[derive(Subcommand, Debug)]
pub enum AclCommand {
    /// Make the first management token (once). FILE, if given, holds its secret (a UUID).
    Bootstrap {
        /// A file holding the management token's secret (a UUID); without it the agent
        /// makes one.
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
        /// A human readable description of the policy.
        #[arg(long)]
        description: Option<String>,
        /// The policy's name.
        name: String,
        /// The file holding the policy's rules (HCL or JSON); `-` reads standard input.
        file: PathBuf,
        #[command(flatten)]
        address: Address,
    },
}

#[derive(Subcommand, Debug)]
pub enum AclTokenCommand {
    /// Create a token: a client token with its policies, or a management token.
    Create {
        /// Sets the human readable name for the ACL token.
        #[arg(long)]
        name: Option<String>,
        /// Sets the type of token: `client` or `management`.
        #[arg(long = "type", default_value = "client")]
        kind: String,
        /// Specifies a policy to associate with the token; may be given many times.
        #[arg(long = "policy")]
        policies: Vec<String>,
        /// Replicate the token to all regions (accepted: this agent has one region).
        #[arg(long)]
        global: bool,
        #[command(flatten)]
        address: Address,
    },
}
