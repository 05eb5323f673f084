//! The simulator's enabled steps: every internal step it could take now, in the step
//! alphabet's terms, for the lockstep walk to compare with the model's.

use super::Simulator;
use crate::client::{AllocRunner, RunnerStep, TaskPhase, Timer};
use crate::server::structs::AllocId;
use crate::spec::TaskRole;
use crate::step::Step;

impl Simulator {
    /// Every internal step enabled now, in a fixed order: the scheduler, pulls, runner
    /// steps, timers, exits. Operator requests are not listed: they are always offered.
    pub fn enabled_steps(&self) -> Vec<Step> {
        let mut steps = Vec::new();
        if let Some(job) = self.server.next_eval_job() {
            steps.push(Step::ProcessEval { job: job.clone() });
        }
        for alloc in self.pending_sync.iter() {
            steps.push(Step::ClientSync {
                alloc: alloc.clone(),
            });
        }
        for client in self.clients.values() {
            for (id, runner) in client.runners.iter() {
                self.push_runner_steps(id, runner, &mut steps);
            }
        }
        steps
    }

    fn push_runner_steps(&self, id: &AllocId, runner: &AllocRunner, steps: &mut Vec<Step>) {
        let alloc = id.clone();
        let task = |ix: usize| runner.tasks[ix].name.clone();
        for step in runner.ready_steps() {
            steps.push(step_of_runner(id, runner, step));
        }
        if self.schedule.has_timer(id, Timer::GroupDelay) {
            steps.push(Step::GroupDelayElapsed {
                alloc: alloc.clone(),
            });
        }
        if self.schedule.has_timer(id, Timer::Healthy) {
            steps.push(Step::AllocHealthy {
                alloc: alloc.clone(),
            });
        }
        // Not `AllocUnhealthy`: the model has no health deadline, so the walks never fire
        // it (a timed run does, in its turn, and a replayed log may).
        for (ix, t) in runner.tasks.iter().enumerate() {
            match (t.role, t.phase) {
                (TaskRole::Poststop, TaskPhase::Running) => steps.push(Step::PoststopExit {
                    alloc: alloc.clone(),
                    task: task(ix),
                }),
                (_, TaskPhase::Delaying) => {
                    steps.push(Step::TaskDelayElapsed {
                        alloc: alloc.clone(),
                        task: task(ix),
                    });
                    steps.push(Step::TaskExit {
                        alloc: alloc.clone(),
                        task: task(ix),
                    });
                }
                (_, TaskPhase::Signalled) => {
                    steps.push(Step::TaskExit {
                        alloc: alloc.clone(),
                        task: task(ix),
                    });
                    if self.schedule.has_timer(id, Timer::KillTimeout(ix)) {
                        steps.push(Step::KillTimeout {
                            alloc: alloc.clone(),
                            task: task(ix),
                        });
                    }
                }
                // A task whose mock process is scripted to end on its own may do so at any
                // moment it runs (the model's crash).
                (_, TaskPhase::Running) if self.ends_on_its_own(&alloc, ix) => {
                    steps.push(Step::TaskExit {
                        alloc: alloc.clone(),
                        task: task(ix),
                    })
                }
                (_, TaskPhase::Restarting)
                    if self.schedule.has_timer(id, Timer::RestartDelay(ix)) =>
                {
                    steps.push(Step::RestartDelayElapsed {
                        alloc: alloc.clone(),
                        task: task(ix),
                    })
                }
                _ => {}
            }
        }
    }

    /// The mock process of the allocation's task `ix` is scripted to end by itself.
    fn ends_on_its_own(&self, alloc: &AllocId, ix: usize) -> bool {
        self.schedule
            .handle(alloc, ix)
            .and_then(|handle| self.driver.next_exit_at(handle))
            .is_some()
    }
}

/// The step alphabet's name for a runner's ready step.
pub(super) fn step_of_runner(alloc: &AllocId, runner: &AllocRunner, step: RunnerStep) -> Step {
    let alloc = alloc.clone();
    let task = |ix: usize| runner.tasks[ix].name.clone();
    match step {
        RunnerStep::GroupPreKill => Step::GroupPreKill { alloc },
        RunnerStep::TaskPreKill(ix) => Step::TaskPreKill {
            alloc,
            task: task(ix),
        },
        RunnerStep::PoststopStart(ix) => Step::PoststopStart {
            alloc,
            task: task(ix),
        },
        RunnerStep::RestartDecision(ix) => Step::RestartDecision {
            alloc,
            task: task(ix),
            unrecoverable: runner.tasks[ix].unrecoverable(),
        },
    }
}
