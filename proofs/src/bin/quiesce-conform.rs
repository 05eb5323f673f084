//! `quiesce-conform`: model-check a configuration, then walk it in lockstep with the
//! implementation's simulator; or validate an event log against the model.

use clap::{Parser, Subcommand};
use quiesce_model::config::{self, ModelCfg};
use quiesce_model::report;
use quiesce_model::{checker, class_fingerprint, Checker};
use quiesce_proofs::lockstep::{walk, WalkOptions};
use quiesce_proofs::trace;
use std::process::ExitCode;
use std::time::Instant;

/// The lockstep walk clones, changes and drops a simulator per model transition: millions
/// of small allocations a second, for which mimalloc's thread-local free lists cost a
/// fraction of glibc's malloc (the main job's CPU time about a quarter less).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    /// Check and walk this many parts at once (default: one per core). What is printed is
    /// the same, in the same order, whatever the number.
    #[arg(long)]
    threads: Option<usize>,
    /// Check and walk only these parts of the configuration (repeatable; every part when
    /// none is named). For working on one part: the main job names none.
    #[arg(long = "part")]
    parts: Vec<String>,
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

/// What one piece of the main job found, as the lines it prints and its figures.
#[derive(Default)]
struct Outcome {
    lines: Vec<String>,
    ok: bool,
    transitions: usize,
    states: usize,
    mismatches: usize,
}

/// One part, model-checked: its verdicts, and its count of unique states.
fn check_part(part: &ModelCfg) -> (Outcome, usize) {
    let mut out = Outcome {
        lines: vec![format!("== {}", part.name)],
        ok: true,
        ..Outcome::default()
    };
    let check_started = Instant::now();
    // One thread: the parts themselves are checked in parallel.
    let checker = checker::depth_first(part.clone().into_model(), class_fingerprint, 1).join();
    let verdicts = report::verdicts(&checker);
    out.lines.extend(report::verdict_lines(&verdicts));
    out.ok = !verdicts.iter().any(|v| v.verdict.is_failure());
    out.lines.push(format!(
        "model: {} unique states, depth {}, {:.2} s",
        checker.unique_state_count(),
        checker.max_depth(),
        check_started.elapsed().as_secs_f64()
    ));
    (out, checker.unique_state_count())
}

/// One part, walked in lockstep with the implementation.
fn walk_part(part: &ModelCfg, options: WalkOptions) -> Result<Outcome, String> {
    if let Some(why) = quiesce_proofs::lockstep::not_walkable(part) {
        return Ok(Outcome {
            lines: vec![format!("lockstep: not walked: {why}")],
            ok: true,
            ..Outcome::default()
        });
    }
    let report = walk(part, options)?;
    let mut lines: Vec<String> = report.mismatches.iter().map(|m| m.to_string()).collect();
    lines.push(format!(
        "lockstep: {} transitions checked, {} states, mismatches {}, {:.2} s ({:.0} transitions/s)",
        report.transitions,
        report.states,
        report.mismatches.len(),
        report.seconds,
        report.transitions as f64 / report.seconds.max(1e-9)
    ));
    Ok(Outcome {
        lines,
        ok: report.mismatches.is_empty(),
        transitions: report.transitions,
        states: report.states,
        mismatches: report.mismatches.len(),
    })
}

/// The random long runs beyond the model's bounds.
fn conform_random(cases: u32, seed: u64) -> Outcome {
    let started = Instant::now();
    match quiesce_proofs::random::runs(&quiesce_proofs::random::large_cfg(), cases, seed, 100) {
        Ok(summary) => Outcome {
            lines: vec![format!(
                "random: {} runs (seed {}), {} steps checked, {} requests ({} in-place restarts), {} restart-policy decisions, up to {} allocations, mismatches 0, {:.2} s",
                summary.runs,
                seed,
                summary.steps,
                summary.requests,
                summary.restarts,
                summary.decisions,
                summary.max_allocs,
                started.elapsed().as_secs_f64()
            )],
            ok: true,
            ..Outcome::default()
        },
        Err(failure) => Outcome {
            lines: vec![format!("random: {failure}")],
            ..Outcome::default()
        },
    }
}

/// Runs `work` on pieces `0..order.len()` on `threads` threads, taking them in `order`,
/// and hands each result to `done` in the pieces' own order, as soon as it and every piece
/// before it are done.
fn in_parallel<T: Send>(
    threads: usize,
    order: &[usize],
    work: impl Fn(usize) -> T + Sync,
    mut done: impl FnMut(usize, T),
) {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let (sender, finished) = std::sync::mpsc::channel::<(usize, T)>();
    std::thread::scope(|scope| {
        for _ in 0..threads.clamp(1, order.len().max(1)) {
            let sender = sender.clone();
            let (next, work) = (&next, &work);
            scope.spawn(move || {
                while let Some(&piece) =
                    order.get(next.fetch_add(1, std::sync::atomic::Ordering::SeqCst))
                {
                    if sender.send((piece, work(piece))).is_err() {
                        break;
                    }
                }
            });
        }
        drop(sender);
        let mut waiting = std::collections::BTreeMap::new();
        let mut handed = 0;
        for (piece, result) in finished {
            waiting.insert(piece, result);
            while let Some(result) = waiting.remove(&handed) {
                done(handed, result);
                handed += 1;
            }
        }
    });
}

/// The main job: every part model-checked, then walked in lockstep, then the random runs,
/// on `--threads` threads (the parts are independent). The walks take the parts with the
/// most states first, so that the longest is not left for last; what is printed, and its
/// order, is the same whatever the number of threads.
fn conform(cli: &Cli) -> Result<bool, String> {
    let mut parts = config::configuration(&cli.config)?;
    if !cli.parts.is_empty() {
        for name in &cli.parts {
            config::named_part(&cli.config, Some(name))?;
        }
        parts.retain(|part| cli.parts.contains(&part.name));
    }
    let options = WalkOptions {
        max_depth: cli.depth,
        symmetry: !cli.no_symmetry,
        max_mismatches: 1,
    };
    let started = Instant::now();
    let threads = cli
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let mut checked = Vec::with_capacity(parts.len());
    let all: Vec<usize> = (0..parts.len()).collect();
    in_parallel(
        threads,
        &all,
        |i| check_part(&parts[i]),
        |_, c| checked.push(c),
    );
    // The random runs are the last piece.
    let mut order: Vec<usize> = (0..=parts.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(checked.get(i).map_or(0, |(_, states)| *states)));
    let (mut ok, mut transitions, mut states, mut mismatches) = (true, 0, 0, 0);
    let mut failed = None;
    let mut checked = checked.into_iter();
    in_parallel(
        threads,
        &order,
        |i| match parts.get(i) {
            Some(part) => walk_part(part, options),
            None => Ok(match cli.random {
                Some(cases) => conform_random(cases, cli.seed),
                None => Outcome {
                    ok: true,
                    ..Outcome::default()
                },
            }),
        },
        |_, walked| {
            let mut tell = |outcome: Outcome| {
                for line in &outcome.lines {
                    println!("{line}");
                }
                ok &= outcome.ok;
                transitions += outcome.transitions;
                states += outcome.states;
                mismatches += outcome.mismatches;
            };
            // A part's check, then its walk; the random runs have no check.
            if let Some((check, _)) = checked.next() {
                tell(check);
            }
            match walked {
                Ok(outcome) => tell(outcome),
                Err(message) => {
                    failed.get_or_insert(message);
                }
            }
        },
    );
    if let Some(message) = failed {
        return Err(message);
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
                // Each reason once, with how many registrations it ended (a job purged
                // and registered again is judged afresh each time).
                let mut reasons: Vec<(String, usize)> = Vec::new();
                for part in &report.parts {
                    if let trace::Judged::Until { why, .. } = &part.judged {
                        let reason = format!("job {:?} group {:?}: {why}", part.job, part.group);
                        match reasons.iter_mut().find(|(seen, _)| *seen == reason) {
                            Some((_, count)) => *count += 1,
                            None => reasons.push((reason, 1)),
                        }
                    }
                }
                let not_judged: Vec<String> = reasons
                    .into_iter()
                    .map(|(reason, count)| match count {
                        1 => reason,
                        _ => format!("{reason} ({count} registrations)"),
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
