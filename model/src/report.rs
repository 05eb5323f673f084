//! Verdicts of a finished check, and counterexamples told in the operator's language.
//! Pure functions: the binary prints what they return.

use crate::config::History;
use crate::state::{Alloc, Delay, RestartMark, RunnerPhase, State, TaskPhase};
use crate::step::Action;
use crate::StopPathModel;
use stateright::{Checker, Expectation, HasDiscoveries, Model, Path};
use std::collections::BTreeSet;

/// What a check concluded about one property.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Holds,
    Violated,
    ExampleFound,
    NoExample,
}

impl Verdict {
    pub fn label(self) -> &'static str {
        match self {
            Verdict::Holds => "holds",
            Verdict::Violated => "VIOLATED",
            Verdict::ExampleFound => "example found",
            Verdict::NoExample => "NO EXAMPLE",
        }
    }

    pub fn is_failure(self) -> bool {
        matches!(self, Verdict::Violated | Verdict::NoExample)
    }
}

/// One line of a check's result.
#[derive(Clone, Debug)]
pub struct PropertyVerdict {
    pub name: &'static str,
    pub verdict: Verdict,
    /// The counterexample of a violated invariant: each state with the step taken from it,
    /// ending at the first state that violates it.
    pub counterexample: Option<Vec<(State, Option<Action>)>>,
}

/// The verdict on every property of a finished (joined) checker, in the model's order.
pub fn verdicts(checker: &impl Checker<StopPathModel>) -> Vec<PropertyVerdict> {
    let model = checker.model();
    let discoveries = checker.discoveries();
    model
        .properties()
        .into_iter()
        .map(|property| {
            let found = discoveries.get(property.name);
            let verdict = match (property.expectation, found.is_some()) {
                (Expectation::Sometimes, true) => Verdict::ExampleFound,
                (Expectation::Sometimes, false) => Verdict::NoExample,
                (_, true) => Verdict::Violated,
                (_, false) => Verdict::Holds,
            };
            let counterexample = match (verdict, found) {
                (Verdict::Violated, Some(path)) => {
                    Some(shortest_prefix(model, property.condition, path.clone()))
                }
                _ => None,
            };
            PropertyVerdict {
                name: property.name,
                verdict,
                counterexample,
            }
        })
        .collect()
}

/// One line per property, as `check` prints them: the name, padded, then the verdict.
pub fn verdict_lines(verdicts: &[PropertyVerdict]) -> Vec<String> {
    let width = verdicts.iter().map(|v| v.name.len()).max().unwrap_or(0);
    verdicts
        .iter()
        .map(|v| format!("{:width$}  {}", v.name, v.verdict.label()))
        .collect()
}

/// The shortest counterexample of one invariant, by iterative deepening: single-threaded
/// breadth-first searches bounded at 1, 2, 3… steps, each stopping once the invariant is
/// violated. `None` if none is found within `max_steps`. (A full check records whichever
/// violating state it reached last, often deep; even a BFS overwrites its first discovery
/// with later ones of the same block.)
pub fn shortest_counterexample(
    model: &StopPathModel,
    property: &'static str,
    max_steps: usize,
) -> Option<Vec<(State, Option<Action>)>> {
    (1..=max_steps).find_map(|steps| {
        let checker = model
            .clone()
            .checker()
            .threads(1)
            .target_max_depth(steps + 1)
            .finish_when(HasDiscoveries::AnyOf(BTreeSet::from([property])))
            .spawn_bfs()
            .join();
        verdicts(&checker)
            .into_iter()
            .find(|verdict| verdict.name == property)?
            .counterexample
    })
}

/// stateright records the last violating state a search reached, not the first: cut the
/// path at the first state that violates the property.
fn shortest_prefix(
    model: &StopPathModel,
    holds: fn(&StopPathModel, &State) -> bool,
    path: Path<State, Action>,
) -> Vec<(State, Option<Action>)> {
    let mut steps = path.into_vec();
    if let Some(first) = steps.iter().position(|(state, _)| !holds(model, state)) {
        steps.truncate(first + 1);
        steps[first].1 = None;
    }
    steps
}

/// A path as numbered steps in the operator's language, e.g. "3. client pulls alloc
/// web[1]: desired stop, NoShutdownDelay=true; group delay cut short".
pub fn narrate(model: &StopPathModel, steps: &[(State, Option<Action>)]) -> Vec<String> {
    steps
        .windows(2)
        .enumerate()
        .filter_map(|(number, pair)| {
            let (before, action) = (&pair[0].0, pair[0].1?);
            Some(format!(
                "{}. {}",
                number + 1,
                describe(model, before, action, &pair[1].0)
            ))
        })
        .collect()
}

fn alloc_name(model: &StopPathModel, ix: usize) -> String {
    format!("{}[{ix}]", model.cfg.group.name)
}

fn task_name(model: &StopPathModel, task: u8) -> &str {
    &model.cfg.group.tasks[usize::from(task)].name
}

/// One step: what happened, then what it changed that matters to the invariants.
pub fn describe(model: &StopPathModel, before: &State, action: Action, after: &State) -> String {
    let job = &model.cfg.job;
    let flag = |on: bool| if on { " -no-shutdown-delay" } else { "" };
    let what = match action {
        Action::StopJob {
            purge,
            no_shutdown_delay,
        } => format!(
            "operator runs `job stop{}{} {job}`",
            if purge { " -purge" } else { "" },
            flag(no_shutdown_delay)
        ),
        Action::StopAlloc {
            alloc,
            no_shutdown_delay,
        } => format!(
            "operator runs `alloc stop{} {}`",
            flag(no_shutdown_delay),
            alloc_name(model, usize::from(alloc))
        ),
        Action::StartJob => format!("operator runs `job start {job}`"),
        Action::ProcessEval => "scheduler processes the evaluation".to_string(),
        Action::ClientSync { alloc } => {
            format!(
                "client pulls alloc {}",
                alloc_name(model, usize::from(alloc))
            )
        }
        Action::GroupPreKill { alloc } => {
            format!(
                "{}: the runner begins the stop",
                alloc_name(model, usize::from(alloc))
            )
        }
        Action::GroupDelayElapsed { alloc } => {
            format!(
                "{}: group shutdown_delay timer fires",
                alloc_name(model, usize::from(alloc))
            )
        }
        Action::TaskPreKill { alloc, task } => format!(
            "{} task {}: Killing",
            alloc_name(model, usize::from(alloc)),
            task_name(model, task)
        ),
        Action::TaskDelayElapsed { alloc, task } => format!(
            "{} task {}: shutdown_delay timer fires",
            alloc_name(model, usize::from(alloc)),
            task_name(model, task)
        ),
        Action::KillTimeout { alloc, task } => format!(
            "{} task {}: kill_timeout fires, SIGKILL",
            alloc_name(model, usize::from(alloc)),
            task_name(model, task)
        ),
        Action::PoststopStart { alloc, task } => format!(
            "{} poststop task {} starts",
            alloc_name(model, usize::from(alloc)),
            task_name(model, task)
        ),
        Action::PoststopExit { alloc, task } => format!(
            "{} poststop task {} finishes",
            alloc_name(model, usize::from(alloc)),
            task_name(model, task)
        ),
        Action::ClientRestart => "client agent restarts and restores its runners".to_string(),
        Action::RestartAlloc {
            alloc,
            task,
            no_shutdown_delay,
        } => format!(
            "operator runs `alloc restart{} {}{}`",
            flag(no_shutdown_delay),
            alloc_name(model, usize::from(alloc)),
            task.map_or(String::new(), |task| format!(" {}", task_name(model, task)))
        ),
        Action::TaskExit { alloc, task }
            if before.allocs[usize::from(alloc)].tasks[usize::from(task)].phase
                == TaskPhase::Running =>
        {
            format!(
                "{} task {} exits on its own",
                alloc_name(model, usize::from(alloc)),
                task_name(model, task)
            )
        }
        Action::TaskExit { alloc, task } => format!(
            "{} task {} exits",
            alloc_name(model, usize::from(alloc)),
            task_name(model, task)
        ),
        Action::RestartDecision {
            alloc,
            task,
            unrecoverable,
        } => format!(
            "{} task {}: the restart policy decides{}",
            alloc_name(model, usize::from(alloc)),
            task_name(model, task),
            if unrecoverable {
                " (an unrecoverable error)"
            } else {
                ""
            }
        ),
        Action::RestartDelayElapsed { alloc, task } => format!(
            "{} task {}: restart delay timer fires",
            alloc_name(model, usize::from(alloc)),
            task_name(model, task)
        ),
        Action::UpdateJob => format!("operator runs `job run` with a changed {job}"),
        Action::AllocHealthy { alloc } => format!(
            "{}: healthy for min_healthy_time, reported by its client",
            alloc_name(model, usize::from(alloc))
        ),
    };
    let changes = changes(model, before, after);
    if changes.is_empty() {
        what
    } else {
        format!("{what}: {}", changes.join("; "))
    }
}

/// The changes between two states that matter to a reader of a counterexample.
fn changes(model: &StopPathModel, before: &State, after: &State) -> Vec<String> {
    let mut out = Vec::new();
    if after.job.versions.len() > before.job.versions.len() {
        let version = after.job.versions.len() - 1;
        let latest = after.job.versions[version];
        let previous = before.job.latest().map(|version| version.spec);
        let spec = if latest.spec != model.spec_of(latest.spec.generation) {
            "SPEC CHANGED"
        } else if previous.is_some_and(|spec| spec.generation < latest.spec.generation) {
            "the operator's new spec"
        } else {
            "spec unchanged"
        };
        out.push(format!(
            "job version {version} (Stop={}, {spec})",
            latest.stop
        ));
    }
    if after.job.purged && !before.job.purged {
        out.push("job purged".to_string());
    }
    if after.deployment != before.deployment {
        out.push(match after.deployment {
            crate::state::Deployment::Canaries => {
                "deployment running, its canaries awaiting promotion".to_string()
            }
            other => format!("deployment {other:?}").to_lowercase(),
        });
    }
    if after.allocs.len() > before.allocs.len() {
        let placed: Vec<_> = (before.allocs.len()..after.allocs.len())
            .map(|ix| alloc_name(model, ix))
            .collect();
        out.push(format!("places {}", placed.join(", ")));
    }
    // Records are compared by position; lean history may erase finished ones.
    if before.allocs.len() == after.allocs.len() || model.cfg.history == History::Full {
        for (ix, (old, new)) in before.allocs.iter().zip(&after.allocs).enumerate() {
            out.extend(alloc_changes(model, &alloc_name(model, ix), old, new));
        }
    }
    out
}

fn alloc_changes(model: &StopPathModel, name: &str, old: &Alloc, new: &Alloc) -> Vec<String> {
    let mut out = Vec::new();
    let mut server = Vec::new();
    if new.desired_stop && !old.desired_stop {
        server.push("desired stop".to_string());
    }
    if new.migrate && !old.migrate {
        server.push("Migrate=true".to_string());
    }
    if new.no_shutdown_delay != old.no_shutdown_delay {
        server.push(format!("NoShutdownDelay={}", new.no_shutdown_delay));
    }
    if new.tombstone && !old.tombstone {
        server.push("tombstone".to_string());
    }
    if new.rollout_stop && !old.rollout_stop {
        server.push("replaced by the rollout".to_string());
    }
    if old.watched && !new.watched && !new.failed {
        server.push("healthy".to_string());
    }
    if !server.is_empty() {
        out.push(format!("{name} {}", server.join(", ")));
    }
    if new.pulled != old.pulled {
        if let Some(view) = new.pulled {
            out.push(format!(
                "client has {name} with stop={} NoShutdownDelay={}{}",
                view.stop,
                view.no_shutdown_delay,
                if view.tombstone { " (tombstone)" } else { "" }
            ));
        }
    }
    if new.cancelled != old.cancelled {
        out.push(format!(
            "{name} delays {}",
            if new.cancelled {
                "cancelled"
            } else {
                "re-armed"
            }
        ));
    }
    if new.group_pre_kill && !old.group_pre_kill {
        out.push(format!("{name} group pre-kill hooks ran"));
    }
    if new.group_delay != old.group_delay {
        out.push(format!(
            "{name} group delay {}",
            delay_word(new.group_delay)
        ));
    }
    for (ix, (old_task, new_task)) in old.tasks.iter().zip(&new.tasks).enumerate() {
        let Some(cfg) = model.cfg.group.tasks.get(ix) else {
            break;
        };
        if new_task.delay != old_task.delay {
            out.push(format!(
                "{name} task {} delay {}",
                cfg.name,
                delay_word(new_task.delay)
            ));
        }
        if new_task.signalled && !old_task.signalled {
            out.push(format!("{name} task {} signalled", cfg.name));
        }
        if new_task.sigkilled && !old_task.sigkilled {
            out.push(format!("{name} task {} SIGKILLed", cfg.name));
        }
        if new_task.pre_kill && !old_task.pre_kill {
            out.push(format!("{name} task {} pre-kill hooks ran", cfg.name));
        }
        if new_task.restart != old_task.restart && new_task.restart != RestartMark::None {
            out.push(format!("{name} task {} restarting", cfg.name));
        }
        if new_task.phase != old_task.phase {
            let phase = match new_task.phase {
                TaskPhase::Running if old_task.phase != TaskPhase::NotStarted => "runs again",
                TaskPhase::Crashed => "dead, awaiting the restart policy",
                TaskPhase::Restarting => "waiting its restart delay",
                _ => "",
            };
            if !phase.is_empty() {
                out.push(format!("{name} task {} {phase}", cfg.name));
            }
        }
        if new_task.service_registered && !old_task.service_registered {
            out.push(format!("{name} task {} service registered", cfg.name));
        }
    }
    if new.failed && !old.failed {
        out.push(format!("{name} FAILED: restart attempts used up"));
    }
    if new.runner != old.runner {
        let phase = match new.runner {
            RunnerPhase::Pending => "pending",
            RunnerPhase::Running => "running",
            RunnerPhase::PreKill => "stopping",
            RunnerPhase::GroupDelay => return out,
            RunnerPhase::Killing => "killing tasks",
            RunnerPhase::Terminal => "client-terminal",
        };
        out.push(format!("{name} {phase}"));
    }
    out
}

fn delay_word(delay: Delay) -> &'static str {
    match delay {
        Delay::None => "none",
        Delay::Waiting => "waiting",
        Delay::Elapsed => "elapsed in full",
        Delay::Skipped => "skipped",
        Delay::CutShort => "cut short",
        Delay::ExitedDuring => "ended by the task exiting",
    }
}
