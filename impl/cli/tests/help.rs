//! Every command and every argument of the `quiesce` CLI says what it does (issue 27): the
//! walk below covers the whole `clap::Command` tree, so a flag added later without help
//! text fails here. The binary answers Nomad's `-help` spelling as well as `-h` and
//! `--help`, and its help speaks of flags with one dash, as Nomad's does.

use clap::{Arg, Command, CommandFactory};
use std::process::Command as Process;

/// Each command and argument under `command` that has no help text, by its path
/// (`quiesce job stop -purge`).
fn missing_help(command: &Command) -> Vec<String> {
    let mut missing = Vec::new();
    walk(command, command.get_name(), &mut missing);
    missing
}

fn walk(command: &Command, path: &str, missing: &mut Vec<String>) {
    if command.get_about().is_none() && command.get_long_about().is_none() {
        missing.push(path.to_string());
    }
    for arg in command.get_arguments() {
        if !has_help(arg) {
            missing.push(format!("{path} {}", arg_name(arg)));
        }
    }
    for sub in command.get_subcommands() {
        // clap's own `help` subcommand says what it does.
        walk(sub, &format!("{path} {}", sub.get_name()), missing);
    }
}

fn has_help(arg: &Arg) -> bool {
    let said = |text: Option<&clap::builder::StyledStr>| {
        text.is_some_and(|text| !text.to_string().trim().is_empty())
    };
    said(arg.get_help()) || said(arg.get_long_help())
}

fn arg_name(arg: &Arg) -> String {
    match (arg.get_long(), arg.get_short()) {
        (Some(long), _) => format!("-{long}"),
        (None, Some(short)) => format!("-{short}"),
        (None, None) => arg.get_id().to_string().to_uppercase(),
    }
}

#[test]
fn every_command_and_argument_has_help_text() {
    let mut cli = quiesce::Cli::command();
    cli.build();
    let missing = missing_help(&cli);
    assert!(
        missing.is_empty(),
        "without help text:\n  {}",
        missing.join("\n  ")
    );
}

#[test]
fn the_walk_finds_a_command_flag_or_positional_without_help() {
    let bare = Command::new("tool")
        .about("A tool.")
        .arg(Arg::new("said").long("said").help("Has help."))
        .arg(Arg::new("quiet").long("quiet"))
        .subcommand(
            Command::new("sub")
                .arg(Arg::new("target"))
                .arg(Arg::new("n").short('n').long_help("Only long help.")),
        );
    assert_eq!(
        missing_help(&bare),
        ["tool -quiet", "tool sub", "tool sub TARGET"]
    );
}

/// The binary's standard output and exit code for `args`.
fn run(args: &[&str]) -> (String, i32) {
    let done = Process::new(env!("CARGO_BIN_EXE_quiesce"))
        .args(args)
        .env_remove("NOMAD_ADDR")
        .output()
        .expect("the quiesce binary runs");
    let out = String::from_utf8(done.stdout).expect("help is UTF-8");
    (out, done.status.code().unwrap_or(-1))
}

#[test]
fn help_answers_nomads_spelling_and_clap_s() {
    for args in [
        ["job", "stop", "-help"],
        ["job", "stop", "--help"],
        ["alloc", "stop", "-h"],
        ["alloc", "stop", "-help"],
    ] {
        let (out, code) = run(&args);
        assert_eq!(code, 0, "quiesce {}: {out}", args.join(" "));
        assert!(out.contains("Usage: quiesce"), "{out}");
        // The flags in the user's spelling, one dash, with Nomad's substance.
        assert!(out.contains(" -no-shutdown-delay"), "{out}");
        assert!(!out.contains("--no-shutdown-delay"), "{out}");
        assert!(out.contains("-detach"), "{out}");
    }
    let (long, _) = run(&["job", "stop", "-help"]);
    assert!(
        long.contains("failed network connections to the allocations being stopped"),
        "{long}"
    );
    assert!(long.contains("Automatic yes to prompts"), "{long}");
    let (long, _) = run(&["alloc", "stop", "-help"]);
    assert!(
        long.contains("failed network connections to the allocation being stopped"),
        "{long}"
    );
}

#[test]
fn a_subcommand_s_help_lists_its_commands_with_their_text() {
    let (out, code) = run(&["job", "-help"]);
    assert_eq!(code, 0, "{out}");
    for line in ["stop ", "status ", "history ", "allocs ", "deployments "] {
        let listed = out.lines().find(|l| l.trim_start().starts_with(line));
        let listed = listed.unwrap_or_else(|| panic!("{line:?} not listed: {out}"));
        assert!(
            listed.trim().len() > line.len() + 4,
            "{listed:?} has no text"
        );
    }
}
