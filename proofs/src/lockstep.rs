//! The lockstep walk: the full-history model's reachable state graph, walked depth-first in
//! step with the simulator (cloned at every branch), so that every transition of the model
//! is checked once. After every step: (a) the two observations are equal; (b) at every
//! state reached, the sets of enabled internal steps are equal, both ways — the
//! implementation may neither refuse a step the model allows nor take one it forbids.
//! Operator requests are offered to both whenever the model's budget or script offers them.
//!
//! The walk, for one part in full history:
//!
//! 1. The simulator is brought to the model's initial state: the part's job
//!    (`adapter::jobspec`: delays of 30 s and 20 s, every task on the mock driver, a task
//!    that may crash ending on its own, failing, a minute into each run, the part's restart
//!    attempts with a 15 s delay) is registered and run until idle, the clock standing
//!    still so that nothing has crashed. Its allocation IDs, in placement order, are the
//!    model's positions, and the two initial observations must be equal.
//! 2. Depth-first over model states, one per symmetry class, each paired with a simulator
//!    in the same state: at each, the model's enabled internal steps (mapped by `step_of`)
//!    must equal `Simulator::enabled_steps`, both ways.
//! 3. Every action the model offers there, operator requests included, is applied to a
//!    clone of the simulator (the last one takes the simulator itself); the implementation
//!    must accept it, and the observations after it must be equal. Only unvisited states
//!    are explored further.
//! 4. The first mismatch stops the walk and prints the path from the initial state, the
//!    step, and the observation diff or the two sets of enabled steps.
//!
//! Every restart part is walked. A part fixes each task's kind of crash
//! (`TaskCfg::crash_unrecoverable`) so that the mock driver can script it; only trace
//! validation's models offer both outcomes for every crash ([`not_walkable`] says so).

use crate::adapter::{extend_ids, jobspec, step_of};
use crate::observe::{diff, of_model, of_sim, of_sim_cached, GenerationCache};
use quiesce_core::server::structs::AllocId;
use quiesce_core::sim::Simulator;
use quiesce_core::step::Step;
use quiesce_model::{Action, History, Model, ModelCfg, State, StopPathModel};
use std::collections::{BTreeSet, HashMap};
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::rc::Rc;
use std::time::Instant;

/// One difference between the model and the implementation.
#[derive(Clone, Debug)]
pub struct Mismatch {
    /// The steps from the initial state, in model terms.
    pub path: Vec<String>,
    /// The step taken (or, for an enabledness mismatch, the state's steps).
    pub step: String,
    pub what: String,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "mismatch after {} steps:", self.path.len())?;
        for (number, step) in self.path.iter().enumerate() {
            writeln!(f, "  {}. {step}", number + 1)?;
        }
        writeln!(f, "  then: {}", self.step)?;
        write!(f, "{}", self.what)
    }
}

#[derive(Clone, Debug, Default)]
pub struct WalkReport {
    /// Distinct model states reached (one per symmetry class when symmetry is on).
    pub states: usize,
    /// Model transitions checked, each applied to a simulator clone.
    pub transitions: usize,
    pub mismatches: Vec<Mismatch>,
    pub seconds: f64,
}

/// How far and how the walk goes.
#[derive(Clone, Copy, Debug)]
pub struct WalkOptions {
    /// Stop descending at this many steps from the initial state.
    pub max_depth: Option<usize>,
    /// Visit one state per symmetry class (allocations sorted), as the checker does.
    pub symmetry: bool,
    /// Stop after this many mismatches.
    pub max_mismatches: usize,
}

impl Default for WalkOptions {
    fn default() -> Self {
        WalkOptions {
            max_depth: None,
            symmetry: true,
            max_mismatches: 1,
        }
    }
}

/// A persistent list of the actions leading to a state, shared between siblings.
struct PathNode {
    action: Action,
    parent: Option<Rc<PathNode>>,
}

fn path_of(node: &Option<Rc<PathNode>>) -> Vec<Action> {
    let mut actions = Vec::new();
    let mut current = node.clone();
    while let Some(node) = current {
        actions.push(node.action);
        current = node.parent.clone();
    }
    actions.reverse();
    actions
}

struct Frame {
    state: State,
    sim: Simulator,
    ids: Vec<AllocId>,
    path: Option<Rc<PathNode>>,
    depth: usize,
}

/// The visited states' keys are their fingerprints, hashes already: the map takes them as
/// they are rather than hashing them again with SipHash.
#[derive(Default)]
struct FingerprintHasher(u64);

impl Hasher for FingerprintHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, _: &[u8]) {
        unreachable!("the visited map hashes only u64 fingerprints");
    }

    fn write_u64(&mut self, fingerprint: u64) {
        self.0 = fingerprint;
    }
}

/// Each state's fingerprint with the least depth it was reached at.
type Visited = HashMap<u64, usize, BuildHasherDefault<FingerprintHasher>>;

fn fingerprint(state: &State, symmetry: bool) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    if symmetry {
        state.representative().hash(&mut hasher);
    } else {
        state.hash(&mut hasher);
    }
    hasher.finish()
}

/// The simulator in the model's initial state: the job registered, placed and running.
pub fn initial_sim(cfg: &ModelCfg) -> Result<(Simulator, Vec<AllocId>), String> {
    let mut sim = Simulator::new(usize::from(cfg.nodes), 1);
    sim.register(jobspec(cfg))
        .map_err(|e| format!("cannot register the job: {e}"))?;
    // Only what waits for nothing: a task that may crash must not have crashed yet.
    sim.run_until_idle(100_000)
        .map_err(|e| format!("the job does not start: {e}"))?;
    // With an `update` block the registration opened a deployment: each allocation turns
    // healthy and it succeeds, as in the model's initial state.
    while let Some(healthy) = sim
        .enabled_steps()
        .into_iter()
        .find(|step| matches!(step, quiesce_core::step::Step::AllocHealthy { .. }))
    {
        sim.apply(&healthy)
            .and_then(|()| sim.run_until_idle(100_000).map(drop))
            .map_err(|e| format!("the first deployment does not succeed: {e}"))?;
    }
    let mut ids = Vec::new();
    extend_ids(&sim, &cfg.job, &mut ids);
    Ok((sim, ids))
}

/// Walks one configuration part in lockstep.
/// Why a part cannot be walked, if it cannot: with `unrecoverable_crashes` the model
/// offers both outcomes of a decision about the same crash (an error the driver reported,
/// or not), which the simulator's mock driver scripts one way (a part fixes each task's
/// kind of crash instead: `TaskCfg::crash_unrecoverable`).
pub fn not_walkable(cfg: &ModelCfg) -> Option<&'static str> {
    cfg.unrecoverable_crashes.then_some(
        "its decisions may find an error the driver reported or not, for the same crash; the \
         mock driver scripts a crash one way (trace validation replays both)",
    )
}

pub fn walk(cfg: &ModelCfg, options: WalkOptions) -> Result<WalkReport, String> {
    if let Some(why) = not_walkable(cfg) {
        return Err(format!("part {} is not walked: {why}", cfg.name));
    }
    if cfg.history != History::Full {
        return Err(format!(
            "part {}: the lockstep walk needs full history",
            cfg.name
        ));
    }
    let started = Instant::now();
    let model = cfg.clone().into_model();
    let (sim, ids) = initial_sim(cfg)?;
    let init = model.init_states().remove(0);
    let mut report = WalkReport::default();
    let tasks = cfg.group.tasks.len();
    let first = of_model(&model, &init);
    let actual = of_sim(&sim, &cfg.job, tasks, &ids);
    if first != actual {
        report.mismatches.push(Mismatch {
            path: Vec::new(),
            step: "(initial state)".into(),
            what: diff(&first, &actual),
        });
        return Ok(report);
    }
    // Each state's fingerprint with the least depth it was reached at: under a depth bound,
    // a state first reached deep is explored again when a shorter path reaches it.
    let mut visited = Visited::default();
    visited.insert(fingerprint(&init, options.symmetry), 0);
    let mut stack = vec![Frame {
        state: init,
        sim,
        ids,
        path: None,
        depth: 0,
    }];
    let mut actions = Vec::new();
    let mut generations = GenerationCache::default();
    while let Some(mut frame) = stack.pop() {
        if let Some(mismatch) = compare_enabled(&model, &frame) {
            report.mismatches.push(mismatch);
        }
        if report.mismatches.len() >= options.max_mismatches {
            break;
        }
        if options.max_depth.is_some_and(|max| frame.depth >= max) {
            continue;
        }
        actions.clear();
        model.actions(&frame.state, &mut actions);
        let last = actions.len().saturating_sub(1);
        for (ix, &action) in actions.iter().enumerate() {
            let Some(next) = model.next_state(&frame.state, action) else {
                continue;
            };
            report.transitions += 1;
            // The last branch takes the frame's simulator instead of a clone.
            let mut sim = if ix == last {
                std::mem::replace(&mut frame.sim, Simulator::new(0, 0))
            } else {
                frame.sim.clone()
            };
            let step = step_of(cfg, &frame.ids, action);
            let fail = |what: String| Mismatch {
                path: describe_path(&path_of(&frame.path)),
                step: format!("{action} = {step}"),
                what,
            };
            if let Err(error) = sim.apply(&step) {
                report
                    .mismatches
                    .push(fail(format!("  the implementation refused it: {error}\n")));
                continue;
            }
            let mut ids = frame.ids.clone();
            extend_ids(&sim, &cfg.job, &mut ids);
            let expected = of_model(&model, &next);
            let actual = of_sim_cached(&sim, &cfg.job, tasks, &ids, &mut generations);
            if expected != actual {
                report.mismatches.push(fail(diff(&expected, &actual)));
                continue;
            }
            let depth = frame.depth + 1;
            let seen = visited
                .entry(fingerprint(&next, options.symmetry))
                .or_insert(usize::MAX);
            // Unbounded, a state is explored once; bounded, again from a shorter path.
            let explore = match options.max_depth {
                None => *seen == usize::MAX,
                Some(_) => depth < *seen,
            };
            if explore {
                *seen = (*seen).min(depth);
                let path = Some(Rc::new(PathNode {
                    action,
                    parent: frame.path.clone(),
                }));
                stack.push(Frame {
                    state: next,
                    sim,
                    ids,
                    path,
                    depth,
                });
            }
        }
        if report.mismatches.len() >= options.max_mismatches {
            break;
        }
    }
    report.states = visited.len();
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

fn describe_path(actions: &[Action]) -> Vec<String> {
    actions.iter().map(|action| action.to_string()).collect()
}

/// (b): the internal steps enabled on both sides are the same set.
fn compare_enabled(model: &StopPathModel, frame: &Frame) -> Option<Mismatch> {
    let mut internal = Vec::new();
    model.internal_actions(&frame.state, &mut internal);
    let expected: BTreeSet<Step> = internal
        .iter()
        .map(|&action| step_of(&model.cfg, &frame.ids, action))
        .collect();
    let mut actual: BTreeSet<Step> = frame.sim.enabled_steps().into_iter().collect();
    // A part's crash budget spent: the crashes it forbids are the environment's choice, not
    // the implementation's (the mock driver would still crash a task on its minute).
    if model.cfg.crash_budget > 0 && frame.state.crashes >= model.cfg.crash_budget {
        let unbounded = State {
            crashes: 0,
            ..frame.state.clone()
        };
        let mut any = Vec::new();
        model.internal_actions(&unbounded, &mut any);
        for action in any.iter().filter(|action| !internal.contains(action)) {
            actual.remove(&step_of(&model.cfg, &frame.ids, *action));
        }
    }
    if expected == actual {
        return None;
    }
    let only = |a: &BTreeSet<Step>, b: &BTreeSet<Step>| {
        a.difference(b)
            .map(|step| step.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    Some(Mismatch {
        path: describe_path(&path_of(&frame.path)),
        step: "(enabled steps compared)".into(),
        what: format!(
            "  enabled in the model only: [{}]\n  enabled in the implementation only: [{}]\n",
            only(&expected, &actual),
            only(&actual, &expected)
        ),
    })
}
