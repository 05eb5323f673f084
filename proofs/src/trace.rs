//! Trace validation: replay an event log (JSON lines, DESIGN.md "The event log") against the
//! model and report the first step the model does not allow.
//!
//! The log names allocations by ID, the model by position. An ID is bound to a position when
//! it first appears; while several positions could take it (allocations placed together
//! are alike), every choice is followed, as trace validation of a nondeterministic
//! specification does, and the log is valid if one choice survives to the end.
//!
//! The model starts with the job running. Entries before the first operator request are the
//! job's start-up (evaluation, first pulls): they bind the initial allocations, in the order
//! their first pulls appear, and are not replayed.

use quiesce::sim::log::LogEntry;
use quiesce_model::config::{ModelCfg, Operator};
use quiesce_model::{Action, Model, State, StopPathModel};
use std::collections::HashSet;

/// Where replay stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceError {
    /// The entry's sequence number.
    pub seq: u64,
    pub line: String,
    pub why: String,
}

impl std::fmt::Display for TraceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "step {} is not allowed by the model: {}\n  {}",
            self.seq, self.why, self.line
        )
    }
}

/// What a valid replay covered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceReport {
    pub setup_entries: usize,
    pub replayed: usize,
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct Candidate {
    state: State,
    /// The allocation ID bound to each model position, if any yet.
    bound: Vec<Option<String>>,
}

/// The model a log is replayed against: `part`'s job, with no limit on operator requests
/// (a log may hold any number) and client restarts at any time.
pub fn model_for(part: &ModelCfg) -> StopPathModel {
    let mut cfg = part.clone();
    cfg.operator = Operator::Budget(u8::MAX);
    cfg.budget_restarts = true;
    cfg.witnesses.clear();
    cfg.into_model()
}

fn is_request(step: &str) -> bool {
    matches!(step, "StopJob" | "StopAlloc" | "StartJob" | "ClientRestart")
}

/// Parses JSON lines into entries; a bad line is an error naming its line number.
pub fn parse_log(text: &str) -> Result<Vec<LogEntry>, String> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(number, line)| {
            LogEntry::parse_line(line).map_err(|e| format!("line {}: {e}", number + 1))
        })
        .collect()
}

pub fn validate(part: &ModelCfg, entries: &[LogEntry]) -> Result<TraceReport, TraceError> {
    let model = model_for(part);
    let setup = entries
        .iter()
        .position(|entry| is_request(&entry.step))
        .unwrap_or(entries.len());
    let mut initial_ids: Vec<String> = Vec::new();
    for entry in &entries[..setup] {
        if let (Some(alloc), "ClientSync") = (&entry.alloc, entry.step.as_str()) {
            if !initial_ids.contains(alloc) {
                initial_ids.push(alloc.clone());
            }
        }
    }
    let init = model.init_states().remove(0);
    let mut bound: Vec<Option<String>> = initial_ids.into_iter().map(Some).collect();
    bound.resize(init.allocs.len(), None);
    let mut candidates = vec![Candidate { state: init, bound }];
    for entry in &entries[setup..] {
        let mut next = HashSet::new();
        let mut why = String::from("no enabled action matches it");
        for candidate in &candidates {
            match successors(&model, candidate, entry) {
                Ok(found) => next.extend(found),
                Err(reason) => why = reason,
            }
        }
        if next.is_empty() {
            return Err(TraceError {
                seq: entry.seq,
                line: entry.to_json_line(),
                why,
            });
        }
        candidates = next.into_iter().collect();
    }
    Ok(TraceReport {
        setup_entries: setup,
        replayed: entries.len() - setup,
    })
}

/// Every way `entry` can be a step of the model from `candidate`.
fn successors(
    model: &StopPathModel,
    candidate: &Candidate,
    entry: &LogEntry,
) -> Result<Vec<Candidate>, String> {
    let task = match &entry.task {
        None => None,
        Some(name) => Some(
            model
                .cfg
                .group
                .tasks
                .iter()
                .position(|t| &t.name == name)
                .ok_or_else(|| format!("unknown task {name:?}"))? as u8,
        ),
    };
    if entry.job.as_deref().is_some_and(|job| job != model.cfg.job) {
        return Err(format!("unknown job {:?}", entry.job));
    }
    let mut bound = candidate.bound.clone();
    bound.resize(candidate.state.allocs.len(), None);
    // The positions the entry's allocation may be: the one bound to it, or any unbound one.
    let positions: Vec<usize> = match &entry.alloc {
        None => vec![usize::MAX],
        Some(id) => match bound.iter().position(|b| b.as_deref() == Some(id)) {
            Some(ix) => vec![ix],
            None => (0..bound.len()).filter(|&ix| bound[ix].is_none()).collect(),
        },
    };
    let mut enabled = Vec::new();
    model.actions(&candidate.state, &mut enabled);
    let mut out = Vec::new();
    for position in positions {
        let Some(action) = action_for(entry, position, task) else {
            continue;
        };
        if !enabled.contains(&action) {
            continue;
        }
        let Some(state) = model.next_state(&candidate.state, action) else {
            continue;
        };
        let mut bound = bound.clone();
        if let (Some(id), true) = (&entry.alloc, position != usize::MAX) {
            bound[position] = Some(id.clone());
        }
        out.push(Candidate { state, bound });
    }
    if out.is_empty() {
        return Err(format!(
            "{} is not enabled in any state the log can be in",
            entry.step
        ));
    }
    Ok(out)
}

fn action_for(entry: &LogEntry, position: usize, task: Option<u8>) -> Option<Action> {
    let alloc = u8::try_from(position).ok();
    let flag = entry.no_shutdown_delay.unwrap_or(false);
    Some(match entry.step.as_str() {
        "StopJob" => Action::StopJob {
            purge: entry.purge.unwrap_or(false),
            no_shutdown_delay: flag,
        },
        "StopAlloc" => Action::StopAlloc {
            alloc: alloc?,
            no_shutdown_delay: flag,
        },
        "StartJob" => Action::StartJob,
        "ProcessEval" => Action::ProcessEval,
        "ClientRestart" => Action::ClientRestart,
        "ClientSync" => Action::ClientSync { alloc: alloc? },
        "GroupPreKill" => Action::GroupPreKill { alloc: alloc? },
        "GroupDelayElapsed" => Action::GroupDelayElapsed { alloc: alloc? },
        "TaskPreKill" => Action::TaskPreKill {
            alloc: alloc?,
            task: task?,
        },
        "TaskDelayElapsed" => Action::TaskDelayElapsed {
            alloc: alloc?,
            task: task?,
        },
        "TaskExit" => Action::TaskExit {
            alloc: alloc?,
            task: task?,
        },
        "KillTimeout" => Action::KillTimeout {
            alloc: alloc?,
            task: task?,
        },
        "PoststopStart" => Action::PoststopStart {
            alloc: alloc?,
            task: task?,
        },
        "PoststopExit" => Action::PoststopExit {
            alloc: alloc?,
            task: task?,
        },
        _ => return None,
    })
}
