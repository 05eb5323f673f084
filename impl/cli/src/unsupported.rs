//! Nomad's commands that this CLI does not serve: a user who types one gets a one-line
//! error naming it as Nomad's and unsupported here, and where the supported list is — not
//! clap's "unrecognized subcommand" with a tip toward an unrelated or internal command.
//!
//! What is served is read from the clap tree itself, so a command added there stops being
//! reported here without an edit.

use super::Cli;
use clap::CommandFactory;

/// Nomad's top-level commands (`nomad -help`, Nomad 1.9–2.0), aliases included.
const NOMAD_COMMANDS: &[&str] = &[
    "acl",
    "action",
    "agent",
    "agent-info",
    "alloc",
    "config",
    "deployment",
    "eval",
    "exec",
    "fmt",
    "fs",
    "init",
    "inspect",
    "job",
    "license",
    "login",
    "logs",
    "monitor",
    "namespace",
    "node",
    "node-pool",
    "operator",
    "plan",
    "plugin",
    "quota",
    "recommendation",
    "run",
    "scaling",
    "sentinel",
    "server",
    "service",
    "setup",
    "status",
    "stop",
    "system",
    "tls",
    "ui",
    "validate",
    "var",
    "version",
    "volume",
];

/// Nomad's subcommands of the groups this CLI serves in part.
const NOMAD_SUBCOMMANDS: &[(&str, &[&str])] = &[
    (
        "job",
        &[
            "action",
            "allocs",
            "deployments",
            "dispatch",
            "eval",
            "history",
            "init",
            "inspect",
            "periodic",
            "plan",
            "promote",
            "restart",
            "revert",
            "run",
            "scale",
            "scaling-events",
            "start",
            "status",
            "stop",
            "tag",
            "validate",
        ],
    ),
    (
        "alloc",
        &[
            "checks", "exec", "fs", "logs", "pause", "restart", "signal", "status", "stop",
        ],
    ),
    ("eval", &["delete", "list", "status"]),
    (
        "node",
        &[
            "config",
            "drain",
            "eligibility",
            "identity",
            "meta",
            "status",
        ],
    ),
    (
        "acl",
        &[
            "auth-method",
            "binding-rule",
            "bootstrap",
            "policy",
            "role",
            "token",
        ],
    ),
    ("server", &["force-leave", "join", "members"]),
    ("service", &["delete", "info", "list"]),
    ("system", &["gc", "reconcile"]),
    (
        "deployment",
        &[
            "fail", "list", "pause", "promote", "resume", "status", "unblock",
        ],
    ),
];

/// The error for `args` (the whole command line) if its command is Nomad's and not served
/// here, or unknown to both; `None` when clap should parse it.
pub fn refusal(args: &[String]) -> Option<String> {
    let words: Vec<&str> = args
        .iter()
        .skip(1)
        .map(String::as_str)
        .take_while(|word| !word.starts_with('-'))
        .take(2)
        .collect();
    let top = *words.first()?;
    if top == "help" {
        return None;
    }
    let cli = Cli::command();
    let served = |command: &clap::Command, name: &str| {
        command
            .get_subcommands()
            .any(|sub| !sub.is_hide_set() && sub.get_name() == name)
    };
    let Some(group) = cli.find_subcommand(top).filter(|_| served(&cli, top)) else {
        return Some(if NOMAD_COMMANDS.contains(&top) {
            not_served(top)
        } else {
            format!("unknown command {top:?}; the commands are listed by `quiesce -help`")
        });
    };
    let sub = *words.get(1)?;
    // clap's own `help` subcommand is added when the tree is built, not in it here.
    if group.get_subcommands().next().is_none() || sub == "help" || served(group, sub) {
        return None;
    }
    let nomads = NOMAD_SUBCOMMANDS
        .iter()
        .find(|(name, _)| *name == top)
        .is_some_and(|(_, subs)| subs.contains(&sub));
    Some(if nomads {
        not_served(&format!("{top} {sub}"))
    } else {
        format!("unknown command \"{top} {sub}\"; the commands are listed by `quiesce {top} -help`")
    })
}

fn not_served(command: &str) -> String {
    format!(
        "\"nomad {command}\" is not supported by this agent; the supported commands are listed \
         by `quiesce -help` and in the README's \"The CLI\""
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(line: &str) -> Option<String> {
        let args: Vec<String> = std::iter::once("quiesce")
            .chain(line.split_whitespace())
            .map(String::from)
            .collect();
        refusal(&args)
    }

    #[test]
    fn a_nomad_command_not_served_is_named_as_such() {
        for line in [
            "var list",
            "job dispatch web",
            "alloc exec a1 sh",
            "server join 10.0.0.1",
            "deployment unblock d1",
        ] {
            let error = refused(line).unwrap();
            let command: Vec<&str> = line.split_whitespace().collect();
            let named = if command[0] == "var" {
                command[0].to_string()
            } else {
                command[..2].join(" ")
            };
            assert!(
                error.contains(&format!("\"nomad {named}\" is not supported by this agent")),
                "{line}: {error}"
            );
            assert!(!error.contains("supervise"), "{error}");
        }
    }

    #[test]
    fn served_commands_and_flags_go_to_clap() {
        for line in [
            "job status",
            "job help stop",
            "job stop -no-shutdown-delay web",
            "server members",
            "service list",
            "version",
            "eval list",
            "alloc status a1",
            "-help",
            "job -help",
            "agent -dev",
            "",
        ] {
            assert_eq!(refused(line), None, "{line}");
        }
    }

    #[test]
    fn internal_and_unknown_commands_get_no_tip_toward_internal_ones() {
        let error = refused("supervise").unwrap();
        assert!(
            error.starts_with("unknown command \"supervise\""),
            "{error}"
        );
        let error = refused("sevrer").unwrap();
        assert!(
            error.contains("quiesce -help") && !error.contains("supervise"),
            "{error}"
        );
        let error = refused("job frobnicate").unwrap();
        assert!(error.contains("quiesce job -help"), "{error}");
    }
}
