//! `quiesce-conform`: model-check a configuration, then walk it in lockstep with the
//! implementation's simulator; or validate an event log against the model.

use clap::{Parser, Subcommand};
use quiesce_model::config;
use quiesce_model::report;
use quiesce_model::{representative, Checker, Model};
use quiesce_proofs::lockstep::{walk, WalkOptions};
use quiesce_proofs::trace;
use std::process::ExitCode;
use std::time::Instant;

#[derive(Parser)]
#[command(
    name = "quiesce-conform",
    version,
    about = "Check that quiesce's implementation conforms to its model"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// small or standard.
    #[arg(long, default_value = "small")]
    config: String,
    /// Walk at most this many steps deep.
    #[arg(long)]
    depth: Option<usize>,
    /// Walk every model state, not one per symmetry class.
    #[arg(long)]
    no_symmetry: bool,
    /// Also take this many random long runs beyond the model's bounds.
    #[arg(long)]
    random: Option<u32>,
    /// The seed of the random runs.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

#[derive(Subcommand)]
enum Command {
    /// Replay an event log (JSON lines) of any jobs against the model, checking every effect
    /// it records; report the first step it does not allow, and say what it cannot judge.
    ValidateLog {
        file: String,
        /// Fail (exit 3) if the model could not follow every step.
        #[arg(long)]
        require_full: bool,
    },
    /// Print a part's job as a register body (`{"Job": ...}`, mock_driver tasks), to run
    /// the model's job on a real agent and validate the agent's event log.
    Jobspec {
        #[arg(long, default_value = "standard")]
        config: String,
        #[arg(long)]
        part: Option<String>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Some(Command::ValidateLog { file, require_full }) => validate_log(file, *require_full),
        Some(Command::Jobspec { config, part }) => {
            config::named_part(config, part.as_deref()).map(|chosen| {
                let job = quiesce_proofs::adapter::jobspec(&chosen);
                println!("{}", serde_json::json!({ "Job": job }));
                true
            })
        }
        None => conform(&cli),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(message) => {
            eprintln!("quiesce-conform: {message}");
            ExitCode::from(2)
        }
    }
}

fn conform(cli: &Cli) -> Result<bool, String> {
    let parts = config::configuration(&cli.config)?;
    let options = WalkOptions {
        max_depth: cli.depth,
        symmetry: !cli.no_symmetry,
        max_mismatches: 1,
    };
    let started = Instant::now();
    let (mut ok, mut transitions, mut states, mut mismatches) = (true, 0, 0, 0);
    for part in &parts {
        println!("== {}", part.name);
        let model = part.clone().into_model();
        let check_started = Instant::now();
        let checker = model
            .clone()
            .checker()
            .symmetry_fn(representative)
            .spawn_dfs()
            .join();
        let verdicts = report::verdicts(&checker);
        for line in report::verdict_lines(&verdicts) {
            println!("{line}");
        }
        ok &= !verdicts.iter().any(|v| v.verdict.is_failure());
        println!(
            "model: {} unique states, depth {}, {:.2} s",
            checker.unique_state_count(),
            checker.max_depth(),
            check_started.elapsed().as_secs_f64()
        );
        if let Some(why) = quiesce_proofs::lockstep::not_walkable(part) {
            println!("lockstep: not walked: {why}");
            continue;
        }
        let report = walk(part, options)?;
        for mismatch in &report.mismatches {
            println!("{mismatch}");
        }
        println!(
            "lockstep: {} transitions checked, {} states, mismatches {}, {:.2} s ({:.0} transitions/s)",
            report.transitions,
            report.states,
            report.mismatches.len(),
            report.seconds,
            report.transitions as f64 / report.seconds.max(1e-9)
        );
        ok &= report.mismatches.is_empty();
        transitions += report.transitions;
        states += report.states;
        mismatches += report.mismatches.len();
    }
    if let Some(cases) = cli.random {
        let random_started = Instant::now();
        match quiesce_proofs::random::runs(&quiesce_proofs::random::large_cfg(), cases, cli.seed, 100) {
            Ok(summary) => println!(
                "random: {} runs (seed {}), {} steps checked, {} requests ({} in-place restarts), {} restart-policy decisions, up to {} allocations, mismatches 0, {:.2} s",
                summary.runs,
                cli.seed,
                summary.steps,
                summary.requests,
                summary.restarts,
                summary.decisions,
                summary.max_allocs,
                random_started.elapsed().as_secs_f64()
            ),
            Err(failure) => {
                println!("random: {failure}");
                ok = false;
            }
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "total: {} parts, transitions checked {transitions}, states {states}, mismatches {mismatches}, {seconds:.1} s",
        parts.len()
    );
    println!("{}", if ok { "conforms" } else { "FAILED" });
    Ok(ok)
}

fn validate_log(file: &str, require_full: bool) -> Result<bool, String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("cannot read {file}: {e}"))?;
    let entries = trace::parse_log(&text).map_err(|e| format!("{file}: {e}"))?;
    match trace::validate(&entries) {
        Ok(report) => {
            println!(
                "{file}: valid: {} entries, {} steps replayed against the model, {} effects \
                 checked (kill signals once per kill and after the services; SIGKILL after \
                 the kill timeout; no task launched twice)",
                report.entries,
                report.replayed(),
                report.effects
            );
            for part in &report.parts {
                println!("  {part}");
            }
            if require_full && !report.fully_judged() {
                println!("{file}: not every step could be judged (--require-full)");
                std::process::exit(3);
            }
            Ok(true)
        }
        Err(error) => {
            println!("{file}: {error}");
            Ok(false)
        }
    }
}
