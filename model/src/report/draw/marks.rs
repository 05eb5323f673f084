//! The marks of a drawn counterexample: each step's request and typed [`Change`]s, placed on
//! the lanes they concern; a delay becomes a bar from the step its wait began.

use super::{Kind, Lane, Mark};
use crate::config::TaskKind;
use crate::report::narrate::{
    alloc_name, changes, command, task_name, Change, ServerMark, SpecNote,
};
use crate::state::{Delay, RunnerPhase, State, TaskPhase};
use crate::step::Action;
use crate::StopPathModel;

/// Every mark of the drawn steps, from each step's command and typed changes.
pub(crate) fn marks(
    model: &StopPathModel,
    steps: &[(State, Option<Action>)],
    lanes: &[Lane],
) -> Vec<Mark> {
    let lane_of = |lane: Lane| lanes.iter().position(|&l| l == lane).unwrap_or(0);
    let mut out = Vec::new();
    // A delay being waited, by lane: the step it began.
    let mut waiting: Vec<Option<usize>> = vec![None; lanes.len()];
    let mut bars = Vec::new();
    for (index, pair) in steps.windows(2).enumerate() {
        let step = index + 1;
        let (before, after) = (&pair[0].0, &pair[1].0);
        let Some(action) = pair[0].1 else { continue };
        let mut mark = |lane: Lane, kind: Kind, label: &str, title: String| {
            out.push(Mark {
                step,
                end: step,
                lane: lane_of(lane),
                kind,
                label: label.to_string(),
                title,
            });
        };
        let request = match action {
            Action::UpdateJob => Some((Kind::Request, "job run (changed spec)".to_string())),
            Action::ProcessEval => Some((Kind::Cluster, "evaluation processed".to_string())),
            Action::ClientRestart => Some((Kind::Cluster, "client agent restarts".to_string())),
            _ => command(model, action).map(|command| (Kind::Request, command)),
        };
        if let Some((kind, label)) = request {
            mark(
                Lane::Operator,
                kind,
                &label,
                format!("step {step}: {label}"),
            );
        }
        for change in changes(model, before, after) {
            let title = format!("step {step}: {}", change.text(model).unwrap_or_default());
            let task_kind = |task: usize| model.cfg.group.tasks[task].kind;
            match change {
                Change::JobVersion {
                    version,
                    stop,
                    spec,
                } => {
                    let changed = if spec == SpecNote::Changed {
                        ", SPEC CHANGED"
                    } else {
                        ""
                    };
                    let label = format!(
                        "job v{version}{}{changed}",
                        if stop { " stopped" } else { "" }
                    );
                    mark(Lane::Operator, Kind::Cluster, &label, title);
                }
                Change::JobPurged => mark(Lane::Operator, Kind::Cluster, "job purged", title),
                Change::Deployment(status) => {
                    let label = format!("deployment {status:?}").to_lowercase();
                    mark(Lane::Operator, Kind::Cluster, &label, title);
                }
                Change::Placed { allocs } => {
                    for alloc in allocs {
                        mark(Lane::Alloc(alloc), Kind::Placed, "placed", title.clone());
                    }
                }
                Change::Server { alloc, marks } => {
                    for server in marks {
                        let (kind, label) = match server {
                            ServerMark::DesiredStop => (Kind::Stop, "desired stop"),
                            ServerMark::Tombstone => (Kind::Stop, "tombstone"),
                            ServerMark::NoShutdownDelay(true) => (Kind::Flag, "flag set"),
                            ServerMark::NoShutdownDelay(false) => (Kind::Flag, "flag erased"),
                            ServerMark::Migrate => (Kind::Server, "migrate"),
                            ServerMark::ReplacedByRollout => (Kind::Server, "replaced"),
                            ServerMark::Healthy => (Kind::Server, "healthy"),
                        };
                        mark(Lane::Alloc(alloc), kind, label, title.clone());
                    }
                }
                Change::Pulled { alloc, view } => {
                    let label = match (view.stop, view.no_shutdown_delay) {
                        (true, true) => "pulled: stop, flag",
                        (true, false) => "pulled: stop",
                        (false, true) => "pulled: flag",
                        (false, false) => "pulled",
                    };
                    mark(Lane::Alloc(alloc), Kind::Pulled, label, title);
                }
                Change::DelaysCancelled { alloc, cancelled } => {
                    let label = if cancelled {
                        "delays cancelled"
                    } else {
                        "delays re-armed"
                    };
                    mark(Lane::Alloc(alloc), Kind::Server, label, title);
                }
                Change::GroupPreKill { alloc } => {
                    let title = format!("{title}: group services deregistered");
                    mark(
                        Lane::Alloc(alloc),
                        Kind::Deregistered,
                        "deregistered",
                        title,
                    );
                }
                Change::TaskPreKill { alloc, task } => {
                    let title = format!("{title}: its services deregistered");
                    mark(
                        Lane::Task(alloc, task),
                        Kind::Deregistered,
                        "deregistered",
                        title,
                    );
                }
                Change::GroupDelay { alloc, delay } => {
                    let lane = lane_of(Lane::Alloc(alloc));
                    bars.extend(delay_mark(&mut waiting[lane], step, lane, delay, title));
                }
                Change::TaskDelay { alloc, task, delay } => {
                    let lane = lane_of(Lane::Task(alloc, task));
                    bars.extend(delay_mark(&mut waiting[lane], step, lane, delay, title));
                }
                Change::Signalled { alloc, task } => {
                    mark(Lane::Task(alloc, task), Kind::Signal, "kill signal", title);
                }
                Change::Sigkilled { alloc, task } => {
                    mark(Lane::Task(alloc, task), Kind::Sigkill, "SIGKILL", title);
                }
                Change::Restarting { alloc, task } => {
                    mark(Lane::Task(alloc, task), Kind::Restart, "restart", title);
                }
                Change::ServiceRegistered { alloc, task } => {
                    mark(
                        Lane::Task(alloc, task),
                        Kind::Registered,
                        "registered",
                        title,
                    );
                }
                Change::TaskPhase {
                    alloc,
                    task,
                    from,
                    to,
                } => {
                    let poststop = task_kind(task) == TaskKind::Poststop;
                    let title = format!(
                        "step {step}: {} task {} {}",
                        alloc_name(model, alloc),
                        task_name(model, task),
                        phase_word(to)
                    );
                    let (kind, label) = match (to, poststop) {
                        (TaskPhase::Running, true) => (Kind::Poststop, "poststop starts"),
                        (TaskPhase::Exited, true) => (Kind::Poststop, "poststop done"),
                        (TaskPhase::Running, false) if from == TaskPhase::NotStarted => {
                            (Kind::Started, "started")
                        }
                        (TaskPhase::Running, false) => (Kind::Started, "runs again"),
                        (TaskPhase::Exited, false) => (Kind::Exit, "exit"),
                        (TaskPhase::Crashed, _) => (Kind::Exit, "crashed"),
                        (TaskPhase::Restarting, _) => (Kind::Restart, "restart delay"),
                        _ => continue,
                    };
                    mark(Lane::Task(alloc, task), kind, label, title);
                }
                Change::Failed { alloc } => mark(Lane::Alloc(alloc), Kind::Stop, "FAILED", title),
                Change::Runner {
                    alloc,
                    phase: RunnerPhase::Terminal,
                } => {
                    mark(Lane::Alloc(alloc), Kind::Terminal, "client-terminal", title);
                }
                Change::Runner { .. } => {}
            }
        }
    }
    out.append(&mut bars);
    // A wait still running when the counterexample ends: an open bar to its end.
    let last = steps.len().saturating_sub(1);
    for (lane, begun) in waiting.into_iter().enumerate() {
        if let Some(begun) = begun {
            let title = format!(
                "from step {begun}: the delay is still being waited when the counterexample ends"
            );
            out.push(Mark {
                step: begun,
                end: last,
                lane,
                kind: Kind::DelayWaiting,
                label: "delay waiting".to_string(),
                title,
            });
        }
    }
    out
}

fn phase_word(phase: TaskPhase) -> &'static str {
    match phase {
        TaskPhase::NotStarted => "not started",
        TaskPhase::Running => "runs",
        TaskPhase::Delaying => "waits its shutdown_delay",
        TaskPhase::Signalled => "signalled",
        TaskPhase::Exited => "dead",
        TaskPhase::Crashed => "exited on its own",
        TaskPhase::Restarting => "waits its restart delay",
    }
}

/// A delay's change on one lane: a wait begins (nothing drawn yet) or ends (a bar from its
/// beginning), or is skipped (a zero-length tick).
fn delay_mark(
    waiting: &mut Option<usize>,
    step: usize,
    lane: usize,
    delay: Delay,
    title: String,
) -> Option<Mark> {
    let (kind, label) = match delay {
        Delay::Waiting => {
            *waiting = Some(step);
            return None;
        }
        Delay::None => {
            *waiting = None;
            return None;
        }
        Delay::Elapsed => (Kind::DelayWaited, "delay waited"),
        Delay::CutShort => (Kind::DelayCut, "cut short"),
        Delay::ExitedDuring => (Kind::DelayExited, "delay (task exited)"),
        Delay::Skipped => (Kind::DelaySkipped, "delay skipped"),
    };
    let begun = waiting.take().unwrap_or(step);
    Some(Mark {
        step: begun,
        end: step,
        lane,
        kind,
        label: label.to_string(),
        title,
    })
}
