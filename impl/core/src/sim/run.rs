//! Running until quiet: steps that wait for nothing first, then whatever is due earliest,
//! the clock advanced to it.

use super::apply::{runner_context, StepContext};
use super::enabled::step_of_runner;
use super::{SimError, Simulator};
use crate::client::Timer;
use crate::spec::TaskRole;
use crate::step::Step;
use std::sync::Arc;

impl Simulator {
    /// Takes steps with a realistic policy until nothing is left to do: steps that wait for
    /// nothing (the scheduler, pulls, runner steps) first; then the timer or process exit
    /// due earliest, advancing the clock to it. At most `max_steps` steps.
    pub fn run_until_quiet(&mut self, max_steps: usize) -> Result<usize, SimError> {
        for taken in 0..max_steps {
            let Some((step, context)) = self.next_immediate().or_else(|| self.next_timed()) else {
                return Ok(taken);
            };
            self.apply_with(&step, context)?;
        }
        Err(SimError::NotQuiet { steps: max_steps })
    }

    /// Applies a step found here, in its context if the search found that too (a runner's
    /// step: its node and its allocation's job and group, without looking them up again).
    fn apply_with(&mut self, step: &Step, context: Option<StepContext>) -> Result<(), SimError> {
        match context {
            Some(context) => self.apply_in(step, context),
            None => self.apply(step),
        }
    }

    /// Takes only the steps that wait for nothing (the scheduler, pulls, runner steps) until
    /// none is left, the clock standing still: a job registered so is placed and running,
    /// and no timer or scripted exit has come. At most `max_steps` steps.
    pub fn run_until_idle(&mut self, max_steps: usize) -> Result<usize, SimError> {
        for taken in 0..max_steps {
            let Some((step, context)) = self.next_immediate() else {
                return Ok(taken);
            };
            self.apply_with(&step, context)?;
        }
        Err(SimError::NotQuiet { steps: max_steps })
    }

    /// The next step that waits for nothing, with its context when it is a runner's.
    fn next_immediate(&mut self) -> Option<(Step, Option<StepContext>)> {
        if let Some(job) = self.server.next_eval_job() {
            return Some((Step::ProcessEval { job: job.clone() }, None));
        }
        if let Some(alloc) = self.pending_sync.first() {
            let alloc = alloc.clone();
            return Some((Step::ClientSync { alloc }, None));
        }
        // `execute` keeps in `ready_runners` the runners with a step ready. (Should one be
        // there with none, or be gone, it is dropped here rather than stop the run.)
        while let Some(alloc) = self.ready_runners.first().cloned() {
            let step = self.node_and_runner(&alloc).and_then(|(node, runner)| {
                runner.ready_steps().first().map(|&step| {
                    (
                        step_of_runner(&alloc, runner, step),
                        Some(runner_context(node, runner)),
                    )
                })
            });
            match step {
                Some(step) => return Some(step),
                None => {
                    Arc::make_mut(&mut self.ready_runners).remove(&alloc);
                }
            }
        }
        None
    }

    /// The timer or process exit due earliest, the clock advanced to it, with its context.
    fn next_timed(&mut self) -> Option<(Step, Option<StepContext>)> {
        let timer = self.schedule.first_timer();
        let exit = self.schedule.first_exit();
        let take_exit = match (&timer, &exit) {
            (None, None) => return None,
            (Some(_), None) => false,
            (None, Some(_)) => true,
            // A process exiting at the same instant as a timer wins: it was already going.
            (Some((timer_at, ..)), Some((exit_at, ..))) => exit_at <= timer_at,
        };
        if take_exit {
            let (at, alloc, ix) = exit.expect("checked");
            self.now_ns = self.now_ns.max(at);
            let (node, runner) = self.node_and_runner(&alloc)?;
            let context = Some(runner_context(node, runner));
            let task = runner.tasks[ix].name.clone();
            let step = if runner.tasks[ix].role == TaskRole::Poststop {
                Step::PoststopExit { alloc, task }
            } else {
                Step::TaskExit { alloc, task }
            };
            return Some((step, context));
        }
        let (at, alloc, timer) = timer.expect("checked");
        self.now_ns = self.now_ns.max(at);
        let (node, runner) = self.node_and_runner(&alloc)?;
        let context = Some(runner_context(node, runner));
        let step = match timer {
            Timer::GroupDelay => Step::GroupDelayElapsed { alloc },
            Timer::TaskDelay(ix) => Step::TaskDelayElapsed {
                alloc,
                task: runner.tasks[ix].name.clone(),
            },
            Timer::KillTimeout(ix) => Step::KillTimeout {
                alloc,
                task: runner.tasks[ix].name.clone(),
            },
            Timer::RestartDelay(ix) => Step::RestartDelayElapsed {
                alloc,
                task: runner.tasks[ix].name.clone(),
            },
            Timer::Healthy => Step::AllocHealthy { alloc },
            Timer::HealthyDeadline => Step::AllocUnhealthy { alloc },
        };
        Some((step, context))
    }
}
