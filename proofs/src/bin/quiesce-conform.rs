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
    /// Run scenarios against a Nomad-API cluster over its HTTP API alone, and judge the
    /// invariants visible from outside: one line per scenario and invariant, then
    /// `conforms` (exit 0) or `FAILED` (exit 1).
    Probe(ProbeArgs),
    /// Print a part's job as a register body (`{"Job": ...}`, mock_driver tasks), to run
    /// the model's job on a real agent and validate the agent's event log.
    Jobspec {
        #[arg(long, default_value = "standard")]
        config: String,
        #[arg(long)]
        part: Option<String>,
    },
}

/// `quiesce-conform probe`'s options.
#[derive(clap::Args)]
struct ProbeArgs {
    /// The cluster's HTTP address.
    #[arg(long, env = "NOMAD_ADDR", required_unless_present = "list")]
    address: Option<String>,
    /// Sent as X-Nomad-Token (needs submit-job, read-job, alloc-lifecycle, read-logs; and
    /// agent:read for the server's version).
    #[arg(long, env = "NOMAD_TOKEN", hide_env_values = true)]
    token: Option<String>,
    #[arg(long, env = "NOMAD_NAMESPACE")]
    namespace: Option<String>,
    /// Run only this scenario (repeatable); all by default.
    #[arg(long = "scenario", value_name = "NAME")]
    scenarios: Vec<String>,
    /// The scenarios' shutdown delay (Go duration).
    #[arg(long, default_value = "1s")]
    delay: String,
    /// The witness's path on the cluster's nodes (`quiesce-witness`): its record of the
    /// signals and the services it saw is read back through /v1/client/fs/logs. Without
    /// it the tasks run /bin/sleep and what only the witness shows is not observable.
    #[arg(long)]
    witness: Option<String>,
    /// How long a wait may last beyond the delays it covers (Go duration).
    #[arg(long, default_value = "60s")]
    patience: String,
    /// Also write the verdicts as JSON here.
    #[arg(long, value_name = "FILE.json")]
    report: Option<String>,
    /// List the scenarios and the invariants, and exit.
    #[arg(long)]
    list: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Some(Command::ValidateLog { file, require_full }) => validate_log(file, *require_full),
        Some(Command::Probe(args)) if args.list => {
            list_probe();
            Ok(true)
        }
        Some(Command::Probe(args)) => probe(args),
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

fn duration(flag: &str, text: &str) -> Result<i64, String> {
    quiesce_core::gotime::parse_go_duration(text)
        .filter(|ns| *ns > 0 && *ns <= 600_000_000_000)
        .ok_or_else(|| {
            format!("{flag} {text:?}: not a duration between 1ns and 10m such as 500ms or 2s")
        })
}

fn list_probe() {
    use quiesce_proofs::probe::{scenarios::SCENARIOS, verdict::INVARIANTS};
    println!("scenarios:");
    for scenario in &SCENARIOS {
        println!("  {:<20} {}", scenario.name, scenario.about);
    }
    println!("invariants:");
    for (name, what) in INVARIANTS {
        println!("  {name:<32} {what}");
    }
}

fn probe(args: &ProbeArgs) -> Result<bool, String> {
    let options = quiesce_proofs::probe::Options {
        address: args.address.clone().unwrap_or_default(),
        token: args.token.clone(),
        namespace: args.namespace.clone(),
        scenarios: args.scenarios.clone(),
        delay_ns: duration("--delay", &args.delay)?,
        witness: args.witness.clone(),
        patience: std::time::Duration::from_nanos(duration("--patience", &args.patience)? as u64),
    };
    let outcome = quiesce_proofs::probe::probe(&options, |line| println!("{line}"))?;
    if let Some(file) = &args.report {
        let text = serde_json::to_string_pretty(&outcome.to_json()).map_err(|e| e.to_string())?;
        std::fs::write(file, text + "\n").map_err(|e| format!("--report {file}: {e}"))?;
    }
    Ok(outcome.conforms())
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
            let allocs: usize = report.parts.iter().map(|part| part.allocs).sum();
            let judged = if report.fully_judged() {
                format!(
                    "valid: judged all {} entries ({allocs} allocations)",
                    report.entries
                )
            } else {
                let not_judged: Vec<String> = report
                    .parts
                    .iter()
                    .filter_map(|part| match &part.judged {
                        trace::Judged::Until { why, .. } => {
                            Some(format!("job {:?} group {:?}: {why}", part.job, part.group))
                        }
                        trace::Judged::Full => None,
                    })
                    .collect();
                format!(
                    "no violation in what was judged: judged {} of {} entries ({allocs} \
                     allocations); not judged: {}",
                    report.judged,
                    report.entries,
                    not_judged.join("; ")
                )
            };
            println!(
                "{file}: {judged}; {} effects checked (kill signals once per kill and after \
                 the services; SIGKILL after the kill timeout; no task launched twice)",
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
