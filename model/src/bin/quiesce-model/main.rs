//! `quiesce-model`: model-check the stop path, explore it, list the planted faults, and
//! print the invariant index.
//!
//! `check` builds each part of a configuration with `ModelCfg::into_model` and runs
//! quiesce's depth-first search (`quiesce_model::checker`; stateright's with
//! `--stateright`), on one thread unless `--threads` says otherwise, with the model's own
//! symmetry classes unless `--no-symmetry`. It prints one verdict
//! per property, then the counts. `--bfs` gives shortest counterexamples and needs
//! `--no-symmetry`, since stateright applies symmetry in DFS only. A depth-first search
//! keeps the first violating state it reached (stateright's the last), often deep, so for
//! each violated invariant `check` prints the
//! shortest counterexample instead (`report::shortest_counterexample`), in the operator's
//! words. `--draw FILE` also writes those counterexamples to one static HTML page, each a
//! timeline (`report::draw`); the page is written even when nothing is violated.

mod index;

use clap::{Args, Parser, Subcommand};
use quiesce_model::checker;
use quiesce_model::config::{self, ModelCfg, Operator};
use quiesce_model::report::{self, Verdict};
use quiesce_model::{
    fingerprint_fn, representative, Checker, Fault, History, Model, StopPathModel,
};
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// A check clones, fingerprints and drops a state per transition, millions a second on each
/// thread: mimalloc's thread-local free lists cost less than glibc's malloc and free (as for
/// `quiesce-conform`'s walk).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "quiesce-model",
    version,
    about = "Model-check the stop path with -no-shutdown-delay"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Check every part of a configuration: one line per property, then the state counts.
    Check(CheckArgs),
    /// Serve stateright's Explorer for one part of a configuration.
    Explore {
        /// small, standard or large.
        #[arg(long, default_value = "standard")]
        config: String,
        /// The part to explore (default: the first).
        #[arg(long)]
        part: Option<String>,
        /// Address to listen on.
        #[arg(default_value = "127.0.0.1:3000")]
        addr: String,
    },
    /// List the planted faults, one name per line.
    Faults,
    /// The invariant index: each invariant's property, the code tagged as upholding it,
    /// the tests that name it and the probe's judge; exits 1 if any is missing.
    Invariants {
        /// The workspace's root (default: found from the current folder).
        #[arg(long)]
        root: Option<std::path::PathBuf>,
    },
}

#[derive(Args)]
struct CheckArgs {
    /// small, standard or large.
    #[arg(long, default_value = "standard")]
    config: String,
    /// full or lean (default: the configuration's own).
    #[arg(long)]
    history: Option<String>,
    /// Checker threads, each searching its own part of the state space (one by default,
    /// which visits the states in stateright's order and reports its depth).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Depth-first search (the default).
    #[arg(long, conflicts_with = "bfs")]
    dfs: bool,
    /// Breadth-first search: shortest counterexamples; needs --no-symmetry.
    #[arg(long)]
    bfs: bool,
    /// Check without the symmetry reduction over allocations.
    #[arg(long)]
    no_symmetry: bool,
    /// Use stateright's own depth-first search instead of quiesce's
    /// (`quiesce_model::checker`), which visits the same states in the same order: the
    /// cross-check of its counts, and the yardstick of its speed.
    #[arg(long, conflicts_with = "bfs")]
    stateright: bool,
    /// Plant one fault (see `quiesce-model faults`).
    #[arg(long)]
    fault: Option<String>,
    /// Also write each violated invariant's counterexample, drawn as a timeline, to FILE: one
    /// static HTML page (written even when every invariant holds).
    #[arg(long, value_name = "FILE")]
    draw: Option<std::path::PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Check(args) => check(args),
        Command::Explore { config, part, addr } => explore(&config, part.as_deref(), &addr),
        Command::Faults => {
            for fault in Fault::ALL {
                println!("{fault}");
            }
            Ok(true)
        }
        Command::Invariants { root } => index::scan(&index::find_root(root)).map(|index| {
            print!("{}", index::render(&index));
            index.problems.is_empty()
        }),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(message) => {
            eprintln!("quiesce-model: {message}");
            ExitCode::from(2)
        }
    }
}

fn check(args: CheckArgs) -> Result<bool, String> {
    let mut parts = config::configuration(&args.config)?;
    let history = args.history.as_deref().map(History::parse).transpose()?;
    let fault = args.fault.as_deref().map(Fault::parse).transpose()?;
    let symmetry = !args.no_symmetry;
    if args.bfs && symmetry {
        return Err("stateright applies symmetry only in depth-first search: \
                    add --no-symmetry to use --bfs"
            .to_string());
    }
    if args.threads == 0 {
        return Err("--threads must be at least 1".to_string());
    }
    let threads = args.threads;
    let search = if args.bfs {
        Search::StaterightBfs
    } else if args.stateright {
        Search::StaterightDfs
    } else {
        Search::DepthFirst
    };
    for part in &mut parts {
        if let Some(history) = history {
            part.history = history;
        }
        part.fault = fault;
    }
    let started = Instant::now();
    let (mut all_as_expected, mut total_states) = (true, 0);
    let mut drawings = Vec::new();
    for part in parts.iter() {
        println!(
            "== {} ({})",
            part.name,
            describe_part(part, symmetry, args.bfs)
        );
        let outcome = check_part(part.clone(), threads, search, symmetry);
        all_as_expected &= outcome.as_expected;
        total_states += outcome.unique_states;
        drawings.extend(outcome.drawings);
    }
    if parts.len() > 1 {
        println!(
            "total: {} parts, {} unique states, {:.1} s",
            parts.len(),
            group_digits(total_states),
            started.elapsed().as_secs_f64()
        );
    }
    println!(
        "{}",
        if all_as_expected {
            "every property as expected"
        } else {
            "FAILED"
        }
    );
    if let Some(path) = &args.draw {
        let names: Vec<_> = parts.iter().map(|part| part.name.clone()).collect();
        let page = report::draw::page(&args.config, args.fault.as_deref(), &names, &drawings);
        std::fs::write(path, page)
            .map_err(|error| format!("cannot write the drawing to {}: {error}", path.display()))?;
    }
    Ok(all_as_expected)
}

struct PartOutcome {
    as_expected: bool,
    unique_states: usize,
    /// Each violated invariant's counterexample, drawn (`report::draw::section`).
    drawings: Vec<String>,
}

/// Which checker runs a part.
#[derive(Clone, Copy)]
enum Search {
    /// quiesce's own depth-first search, on `--threads` threads (`quiesce_model::checker`).
    DepthFirst,
    StaterightDfs,
    StaterightBfs,
}

fn check_part(part: ModelCfg, threads: usize, search: Search, symmetry: bool) -> PartOutcome {
    let name = part.name.clone();
    let model = part.into_model();
    let started = Instant::now();
    let stateright = || {
        let builder = model.clone().checker().threads(threads);
        if symmetry {
            builder.symmetry_fn(representative)
        } else {
            builder
        }
    };
    match search {
        Search::DepthFirst => {
            let checker = checker::depth_first(model.clone(), fingerprint_fn(symmetry), threads);
            report_part(&model, &name, checker, started)
        }
        Search::StaterightDfs => report_part(&model, &name, stateright().spawn_dfs(), started),
        Search::StaterightBfs => report_part(&model, &name, stateright().spawn_bfs(), started),
    }
}

fn report_part(
    model: &StopPathModel,
    name: &str,
    checker: impl Checker<StopPathModel>,
    started: Instant,
) -> PartOutcome {
    show_progress(&checker, name, started);
    let checker = checker.join();
    let seconds = started.elapsed().as_secs_f64();
    let verdicts = report::verdicts(&checker);
    let mut drawings = Vec::new();
    for (verdict, line) in verdicts.iter().zip(report::verdict_lines(&verdicts)) {
        println!("{line}");
        if verdict.verdict == Verdict::Violated {
            // The shortest path to the violation reads best; the search's own is the fallback.
            let shortest =
                report::shortest_counterexample(model, verdict.name, checker.max_depth());
            if let Some(path) = shortest.as_ref().or(verdict.counterexample.as_ref()) {
                for line in report::narrate(model, path) {
                    println!("    {line}");
                }
                drawings.push(report::draw::section(model, verdict.name, path));
            }
        }
    }
    let unique_states = checker.unique_state_count();
    println!(
        "{name}: {} unique states, depth {}, {seconds:.2} s",
        group_digits(unique_states),
        checker.max_depth()
    );
    PartOutcome {
        as_expected: !verdicts.iter().any(|v| v.verdict.is_failure()),
        unique_states,
        drawings,
    }
}

/// Progress on stderr while a check runs: a line every two seconds, overwritten on a terminal.
fn show_progress(checker: &impl Checker<StopPathModel>, name: &str, started: Instant) {
    let tty = std::io::stderr().is_terminal();
    let mut shown = false;
    let mut next_report = Duration::from_secs(2);
    while !checker.is_done() {
        std::thread::sleep(Duration::from_millis(10));
        let elapsed = started.elapsed();
        if elapsed < next_report {
            continue;
        }
        next_report += Duration::from_secs(2);
        let line = format!(
            "  {name}: {} unique states, depth {}, {:.0} s",
            group_digits(checker.unique_state_count()),
            checker.max_depth(),
            elapsed.as_secs_f64()
        );
        if tty {
            eprint!("\r{line}");
        } else {
            eprintln!("{line}");
        }
        let _ = std::io::stderr().flush();
        shown = true;
    }
    if shown && tty {
        eprintln!();
    }
}

fn describe_part(part: &ModelCfg, symmetry: bool, bfs: bool) -> String {
    let tasks: Vec<_> = part
        .group
        .tasks
        .iter()
        .map(|task| format!("{:?}", task.kind))
        .collect();
    let operator = match &part.operator {
        Operator::Budget(budget) => format!("budget {budget}"),
        Operator::Script(script) => {
            let steps: Vec<_> = script.iter().map(|request| request.to_string()).collect();
            format!("script: {}", steps.join(" → "))
        }
    };
    let mut words = vec![
        format!("count {}", part.count),
        format!("tasks {}", tasks.join("+")),
        operator,
        format!("{:?} history", part.history).to_lowercase(),
        if bfs { "BFS" } else { "DFS" }.to_string(),
        if symmetry { "symmetry" } else { "no symmetry" }.to_string(),
    ];
    if part.nodes > 1 {
        words.insert(1, format!("{} nodes", part.nodes));
    }
    if part.canary > 0 {
        let place = if part.canary_in_place {
            ", in place"
        } else {
            ""
        };
        words.insert(2, format!("canary {} (auto_promote{place})", part.canary));
    }
    if let Some(fault) = part.fault {
        words.push(format!("fault {fault}"));
    }
    words.join(", ")
}

fn explore(config: &str, part: Option<&str>, addr: &str) -> Result<bool, String> {
    let chosen = config::named_part(config, part)?;
    // tiny_http panics on a bind failure; find out first, with a message.
    std::net::TcpListener::bind(addr)
        .map_err(|error| format!("cannot listen on {addr}: {error}"))?;
    println!("Explorer for {} ({config}) on http://{addr}/", chosen.name);
    chosen.into_model().checker().serve(addr);
    Ok(true)
}

fn group_digits(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
