//! Verdicts of a finished check, and counterexamples told in the operator's language
//! ([`narrate`]) or drawn as a timeline ([`draw`]), both from one list of typed changes per
//! step ([`changes`]). Pure functions: the binary prints or writes what they return.

pub mod draw;
mod narrate;

pub use narrate::{
    alloc_name, changes, command, delay_word, describe, narrate, task_name, Change, ServerMark,
    SpecNote,
};

use crate::state::State;
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
/// violated. `None` if none is found within `max_steps`. (A depth-first check records the
/// first violating state it reached, stateright's the last, often deep; even a BFS
/// overwrites its first discovery with later ones of the same block.)
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
