//! Counterexamples told in the operator's language. Each step is an [`Action`] and the typed
//! [`Change`]s it made: the narration prints them as text, the drawing
//! ([`super::draw`]) draws the same list, so the two never disagree.

use crate::config::History;
use crate::state::TaskPhase;
use crate::state::{Alloc, Delay, Deployment, RestartMark, RunnerPhase, ServerView, State};
use crate::step::Action;
use crate::StopPathModel;

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

/// An allocation's name as the narration and the drawing spell it: `web[0]`.
pub fn alloc_name(model: &StopPathModel, ix: usize) -> String {
    format!("{}[{ix}]", model.cfg.group.name)
}

/// A task's name from its position in the group.
pub fn task_name(model: &StopPathModel, task: usize) -> &str {
    &model.cfg.group.tasks[task].name
}

/// One step: what happened, then what it changed that matters to the invariants.
pub fn describe(model: &StopPathModel, before: &State, action: Action, after: &State) -> String {
    let what = action_words(model, before, action);
    let changes: Vec<_> = changes(model, before, after)
        .iter()
        .filter_map(|change| change.text(model))
        .collect();
    if changes.is_empty() {
        what
    } else {
        format!("{what}: {}", changes.join("; "))
    }
}

/// The operator's command an action stands for (`job stop -no-shutdown-delay web`), or
/// `None` for what the cluster does on its own.
pub fn command(model: &StopPathModel, action: Action) -> Option<String> {
    let job = &model.cfg.job;
    let flag = |on: bool| if on { " -no-shutdown-delay" } else { "" };
    let alloc = |ix: u8| alloc_name(model, usize::from(ix));
    Some(match action {
        Action::StopJob {
            purge,
            no_shutdown_delay,
        } => format!(
            "job stop{}{} {job}",
            if purge { " -purge" } else { "" },
            flag(no_shutdown_delay)
        ),
        Action::StopAlloc {
            alloc: ix,
            no_shutdown_delay,
        } => format!("alloc stop{} {}", flag(no_shutdown_delay), alloc(ix)),
        Action::StartJob => format!("job start {job}"),
        Action::RestartAlloc {
            alloc: ix,
            task,
            no_shutdown_delay,
        } => format!(
            "alloc restart{} {}{}",
            flag(no_shutdown_delay),
            alloc(ix),
            task.map_or(String::new(), |task| format!(
                " {}",
                task_name(model, usize::from(task))
            ))
        ),
        _ => return None,
    })
}

/// What the action was, before its changes: the first half of a narrated step.
fn action_words(model: &StopPathModel, before: &State, action: Action) -> String {
    if let Some(command) = command(model, action) {
        return format!("operator runs `{command}`");
    }
    let alloc = |ix: u8| alloc_name(model, usize::from(ix));
    let task = |ix: u8| task_name(model, usize::from(ix));
    match action {
        Action::ProcessEval => "scheduler processes the evaluation".to_string(),
        Action::ClientSync { alloc: ix } => format!("client pulls alloc {}", alloc(ix)),
        Action::GroupPreKill { alloc: ix } => format!("{}: the runner begins the stop", alloc(ix)),
        Action::GroupDelayElapsed { alloc: ix } => {
            format!("{}: group shutdown_delay timer fires", alloc(ix))
        }
        Action::TaskPreKill { alloc: a, task: t } => {
            format!("{} task {}: Killing", alloc(a), task(t))
        }
        Action::TaskDelayElapsed { alloc: a, task: t } => {
            format!("{} task {}: shutdown_delay timer fires", alloc(a), task(t))
        }
        Action::KillTimeout { alloc: a, task: t } => {
            format!("{} task {}: kill_timeout fires, SIGKILL", alloc(a), task(t))
        }
        Action::PoststopStart { alloc: a, task: t } => {
            format!("{} poststop task {} starts", alloc(a), task(t))
        }
        Action::PoststopExit { alloc: a, task: t } => {
            format!("{} poststop task {} finishes", alloc(a), task(t))
        }
        Action::ClientRestart => "client agent restarts and restores its runners".to_string(),
        Action::TaskExit { alloc: a, task: t }
            if before.allocs[usize::from(a)].tasks[usize::from(t)].phase == TaskPhase::Running =>
        {
            format!("{} task {} exits on its own", alloc(a), task(t))
        }
        Action::TaskExit { alloc: a, task: t } => format!("{} task {} exits", alloc(a), task(t)),
        Action::RestartDecision {
            alloc: a,
            task: t,
            unrecoverable,
        } => format!(
            "{} task {}: the restart policy decides{}",
            alloc(a),
            task(t),
            if unrecoverable {
                " (an unrecoverable error)"
            } else {
                ""
            }
        ),
        Action::RestartDelayElapsed { alloc: a, task: t } => {
            format!("{} task {}: restart delay timer fires", alloc(a), task(t))
        }
        Action::UpdateJob => format!("operator runs `job run` with a changed {}", model.cfg.job),
        Action::AllocHealthy { alloc: ix } => format!(
            "{}: healthy for min_healthy_time, reported by its client",
            alloc(ix)
        ),
        Action::StopJob { .. }
        | Action::StopAlloc { .. }
        | Action::StartJob
        | Action::RestartAlloc { .. } => unreachable!("a command, worded above"),
    }
}

/// How a new job version's spec compares with what the operator registered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpecNote {
    /// Differs from the registered spec of its generation (invariant `jobspec_unchanged`).
    Changed,
    /// A newer generation: the operator's `job run` of an edited spec.
    NewSpec,
    Unchanged,
}

/// A change to the server's record of an allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerMark {
    DesiredStop,
    Migrate,
    NoShutdownDelay(bool),
    Tombstone,
    ReplacedByRollout,
    Healthy,
}

/// What a step changed that matters to a reader of a counterexample, in the order the
/// narration tells it. `alloc` and `task` are positions (in the state and in the group).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    JobVersion {
        version: usize,
        stop: bool,
        spec: SpecNote,
    },
    JobPurged,
    Deployment(Deployment),
    Placed {
        allocs: std::ops::Range<usize>,
    },
    Server {
        alloc: usize,
        marks: Vec<ServerMark>,
    },
    Pulled {
        alloc: usize,
        view: ServerView,
    },
    DelaysCancelled {
        alloc: usize,
        cancelled: bool,
    },
    /// The group pre-kill hooks ran: the group's services are deregistered.
    GroupPreKill {
        alloc: usize,
    },
    GroupDelay {
        alloc: usize,
        delay: Delay,
    },
    TaskDelay {
        alloc: usize,
        task: usize,
        delay: Delay,
    },
    Signalled {
        alloc: usize,
        task: usize,
    },
    Sigkilled {
        alloc: usize,
        task: usize,
    },
    /// The task's pre-kill hooks ran: its services are deregistered.
    TaskPreKill {
        alloc: usize,
        task: usize,
    },
    Restarting {
        alloc: usize,
        task: usize,
    },
    /// Every change of phase; the narration tells only some (the drawing shows starts and
    /// exits too).
    TaskPhase {
        alloc: usize,
        task: usize,
        from: TaskPhase,
        to: TaskPhase,
    },
    ServiceRegistered {
        alloc: usize,
        task: usize,
    },
    Failed {
        alloc: usize,
    },
    Runner {
        alloc: usize,
        phase: RunnerPhase,
    },
}

impl Change {
    /// The change in the narration's words; `None` for what the narration leaves out.
    pub fn text(&self, model: &StopPathModel) -> Option<String> {
        let alloc = |ix: usize| alloc_name(model, ix);
        let task = |ix: usize| task_name(model, ix);
        Some(match self {
            Change::JobVersion {
                version,
                stop,
                spec,
            } => {
                let spec = match spec {
                    SpecNote::Changed => "SPEC CHANGED",
                    SpecNote::NewSpec => "the operator's new spec",
                    SpecNote::Unchanged => "spec unchanged",
                };
                format!("job version {version} (Stop={stop}, {spec})")
            }
            Change::JobPurged => "job purged".to_string(),
            Change::Deployment(Deployment::Canaries) => {
                "deployment running, its canaries awaiting promotion".to_string()
            }
            Change::Deployment(other) => format!("deployment {other:?}").to_lowercase(),
            Change::Placed { allocs } => {
                let placed: Vec<_> = allocs.clone().map(alloc).collect();
                format!("places {}", placed.join(", "))
            }
            Change::Server { alloc: a, marks } => {
                let marks: Vec<_> = marks.iter().map(|mark| mark.text()).collect();
                format!("{} {}", alloc(*a), marks.join(", "))
            }
            Change::Pulled { alloc: a, view } => format!(
                "client has {} with stop={} NoShutdownDelay={}{}",
                alloc(*a),
                view.stop,
                view.no_shutdown_delay,
                if view.tombstone { " (tombstone)" } else { "" }
            ),
            Change::DelaysCancelled {
                alloc: a,
                cancelled,
            } => format!(
                "{} delays {}",
                alloc(*a),
                if *cancelled { "cancelled" } else { "re-armed" }
            ),
            Change::GroupPreKill { alloc: a } => format!("{} group pre-kill hooks ran", alloc(*a)),
            Change::GroupDelay { alloc: a, delay } => {
                format!("{} group delay {}", alloc(*a), delay_word(*delay))
            }
            Change::TaskDelay {
                alloc: a,
                task: t,
                delay,
            } => format!(
                "{} task {} delay {}",
                alloc(*a),
                task(*t),
                delay_word(*delay)
            ),
            Change::Signalled { alloc: a, task: t } => {
                format!("{} task {} signalled", alloc(*a), task(*t))
            }
            Change::Sigkilled { alloc: a, task: t } => {
                format!("{} task {} SIGKILLed", alloc(*a), task(*t))
            }
            Change::TaskPreKill { alloc: a, task: t } => {
                format!("{} task {} pre-kill hooks ran", alloc(*a), task(*t))
            }
            Change::Restarting { alloc: a, task: t } => {
                format!("{} task {} restarting", alloc(*a), task(*t))
            }
            Change::TaskPhase {
                alloc: a,
                task: t,
                from,
                to,
            } => {
                let phase = match to {
                    TaskPhase::Running if *from != TaskPhase::NotStarted => "runs again",
                    TaskPhase::Crashed => "dead, awaiting the restart policy",
                    TaskPhase::Restarting => "waiting its restart delay",
                    _ => return None,
                };
                format!("{} task {} {phase}", alloc(*a), task(*t))
            }
            Change::ServiceRegistered { alloc: a, task: t } => {
                format!("{} task {} service registered", alloc(*a), task(*t))
            }
            Change::Failed { alloc: a } => {
                format!("{} FAILED: restart attempts used up", alloc(*a))
            }
            Change::Runner { alloc: a, phase } => {
                let phase = match phase {
                    RunnerPhase::Pending => "pending",
                    RunnerPhase::Running => "running",
                    RunnerPhase::PreKill => "stopping",
                    RunnerPhase::GroupDelay => return None,
                    RunnerPhase::Killing => "killing tasks",
                    RunnerPhase::Terminal => "client-terminal",
                };
                format!("{} {phase}", alloc(*a))
            }
        })
    }
}

impl ServerMark {
    fn text(self) -> String {
        match self {
            ServerMark::DesiredStop => "desired stop".to_string(),
            ServerMark::Migrate => "Migrate=true".to_string(),
            ServerMark::NoShutdownDelay(on) => format!("NoShutdownDelay={on}"),
            ServerMark::Tombstone => "tombstone".to_string(),
            ServerMark::ReplacedByRollout => "replaced by the rollout".to_string(),
            ServerMark::Healthy => "healthy".to_string(),
        }
    }
}

/// The changes between two states that matter to a reader of a counterexample.
pub fn changes(model: &StopPathModel, before: &State, after: &State) -> Vec<Change> {
    let mut out = Vec::new();
    if after.job.versions.len() > before.job.versions.len() {
        let version = after.job.versions.len() - 1;
        let latest = after.job.versions[version];
        let previous = before.job.latest().map(|version| version.spec);
        let spec = if latest.spec != model.spec_of(latest.spec.generation) {
            SpecNote::Changed
        } else if previous.is_some_and(|spec| spec.generation < latest.spec.generation) {
            SpecNote::NewSpec
        } else {
            SpecNote::Unchanged
        };
        out.push(Change::JobVersion {
            version,
            stop: latest.stop,
            spec,
        });
    }
    if after.job.purged && !before.job.purged {
        out.push(Change::JobPurged);
    }
    if after.deployment != before.deployment {
        out.push(Change::Deployment(after.deployment));
    }
    if after.allocs.len() > before.allocs.len() {
        out.push(Change::Placed {
            allocs: before.allocs.len()..after.allocs.len(),
        });
    }
    // Records are compared by position; lean history may erase finished ones.
    if before.allocs.len() == after.allocs.len() || model.cfg.history == History::Full {
        for (ix, (old, new)) in before.allocs.iter().zip(&after.allocs).enumerate() {
            alloc_changes(model, ix, old, new, &mut out);
        }
    }
    out
}

fn alloc_changes(
    model: &StopPathModel,
    alloc: usize,
    old: &Alloc,
    new: &Alloc,
    out: &mut Vec<Change>,
) {
    let mut marks = Vec::new();
    if new.desired_stop && !old.desired_stop {
        marks.push(ServerMark::DesiredStop);
    }
    if new.migrate && !old.migrate {
        marks.push(ServerMark::Migrate);
    }
    if new.no_shutdown_delay != old.no_shutdown_delay {
        marks.push(ServerMark::NoShutdownDelay(new.no_shutdown_delay));
    }
    if new.tombstone && !old.tombstone {
        marks.push(ServerMark::Tombstone);
    }
    if new.rollout_stop && !old.rollout_stop {
        marks.push(ServerMark::ReplacedByRollout);
    }
    if old.watched && !new.watched && !new.failed {
        marks.push(ServerMark::Healthy);
    }
    if !marks.is_empty() {
        out.push(Change::Server { alloc, marks });
    }
    if new.pulled != old.pulled {
        if let Some(view) = new.pulled {
            out.push(Change::Pulled { alloc, view });
        }
    }
    if new.cancelled != old.cancelled {
        out.push(Change::DelaysCancelled {
            alloc,
            cancelled: new.cancelled,
        });
    }
    if new.group_pre_kill && !old.group_pre_kill {
        out.push(Change::GroupPreKill { alloc });
    }
    if new.group_delay != old.group_delay {
        out.push(Change::GroupDelay {
            alloc,
            delay: new.group_delay,
        });
    }
    let tasks = old.tasks.iter().zip(&new.tasks);
    for (task, (old_task, new_task)) in tasks.take(model.cfg.group.tasks.len()).enumerate() {
        if new_task.delay != old_task.delay {
            out.push(Change::TaskDelay {
                alloc,
                task,
                delay: new_task.delay,
            });
        }
        if new_task.signalled && !old_task.signalled {
            out.push(Change::Signalled { alloc, task });
        }
        if new_task.sigkilled && !old_task.sigkilled {
            out.push(Change::Sigkilled { alloc, task });
        }
        if new_task.pre_kill && !old_task.pre_kill {
            out.push(Change::TaskPreKill { alloc, task });
        }
        if new_task.restart != old_task.restart && new_task.restart != RestartMark::None {
            out.push(Change::Restarting { alloc, task });
        }
        if new_task.phase != old_task.phase {
            out.push(Change::TaskPhase {
                alloc,
                task,
                from: old_task.phase,
                to: new_task.phase,
            });
        }
        if new_task.service_registered && !old_task.service_registered {
            out.push(Change::ServiceRegistered { alloc, task });
        }
    }
    if new.failed && !old.failed {
        out.push(Change::Failed { alloc });
    }
    if new.runner != old.runner {
        out.push(Change::Runner {
            alloc,
            phase: new.runner,
        });
    }
}

/// How a delay ended, or where it stands, in the narration's words.
pub fn delay_word(delay: Delay) -> &'static str {
    match delay {
        Delay::None => "none",
        Delay::Waiting => "waiting",
        Delay::Elapsed => "elapsed in full",
        Delay::Skipped => "skipped",
        Delay::CutShort => "cut short",
        Delay::ExitedDuring => "ended by the task exiting",
    }
}
