//! The `quiesce` command line: the agent, and a client CLI that mirrors Nomad's (`job
//! run|status|stop|start|revert|scale`, `alloc status|stop`, `eval status`, `deployment`),
//! with Nomad's single-dash
//! flags, `-address` / `NOMAD_ADDR`, ID prefixes resolved as Nomad resolves them, and the
//! evaluation monitor — which, for a stop, goes on until the stopped tasks are dead.
//!
//! Architecture Invariant: the CLI is the top of the stack. It depends on the core, the
//! agent and the API client, and nothing depends on it but the benchmarks. It decides
//! nothing of the stop path: a client command reaches an agent only over HTTP, through
//! `quiesce-api`.

mod acl;
mod agent;
mod agent_config;
mod alloc;
mod alloc_fs;
mod alloc_status;
mod api;
mod args;
mod cluster;
mod deployment;
mod job;
mod node;
mod restart;
mod unsupported;

use acl::acl;
use agent::agent;
use alloc::alloc;
use alloc_status::eval_status;
pub use args::*;
use clap::Parser;
use job::job;

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
        return quiesce_agent::daemon::http::parse_hcl::parse_hcl_main();
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
                return quiesce_agent::raw_exec::supervise(dir, user, cgroup, argv);
            }
        }
    }
    if let Some(message) = unsupported::refusal(&args) {
        eprintln!("Error: {message}");
        return 1;
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
            return quiesce_agent::raw_exec::supervise(
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
            address.api().and_then(|api| eval_status(&api, &eval))
        }
        Top::Eval(EvalCommand::List { verbose, address }) => address
            .api()
            .and_then(|api| cluster::eval_list(&api, verbose)),
        Top::Server(ServerCommand::Members { address }) => {
            address.api().and_then(|api| cluster::server_members(&api))
        }
        Top::Service(ServiceCommand::List { address }) => {
            address.api().and_then(|api| cluster::service_list(&api))
        }
        Top::Service(ServiceCommand::Info { service, address }) => address
            .api()
            .and_then(|api| cluster::service_info(&api, &service)),
        Top::System(SystemCommand::Gc { address }) => {
            address.api().and_then(|api| cluster::system_gc(&api))
        }
        Top::Version => {
            cluster::version();
            Ok(())
        }
        Top::Deployment(command) => deployment::deployment(command),
        Top::Acl(command) => acl(command),
        Top::Node(NodeCommand::Status {
            node,
            self_node,
            json,
            address,
        }) => address.api().and_then(|api| {
            let node = if self_node {
                let agent = api.get("/v1/agent/self")?;
                let id = agent["stats"]["client"]["node_id"].as_str().unwrap_or("");
                if id.is_empty() {
                    return Err("the agent runs no client: it has no node".into());
                }
                Some(id.to_string())
            } else {
                node
            };
            node::node_status(&api, node.as_deref(), json)
        }),
        Top::Run(args) => job::run(args),
        Top::Stop(args) => job::stop(args),
        Top::Status(args) => job::status(args, true),
        Top::Logs(args) => alloc::logs_command(args),
        Top::Fs(args) => alloc_fs::fs_command(args),
    };
    match result {
        Ok(()) if PLACEMENT_FAILED.load(std::sync::atomic::Ordering::Relaxed) => 2,
        Ok(()) => 0,
        Err(message) => {
            eprintln!("Error: {message}");
            1
        }
    }
}

/// An evaluation the command monitored could not place everything: it exits 2, as Nomad's
/// `job run` does for placement issues (0 submitted and scheduled, 1 any other error).
static PLACEMENT_FAILED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

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
