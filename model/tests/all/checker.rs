//! quiesce's own checker (`quiesce_model::checker`) against stateright's DFS: on one thread
//! the same unique states, generated states, depth and verdicts, part by part; on two the
//! same counts and verdicts; its discoveries replay to states that show them; and on toy
//! models, stateright's early end and `eventually` properties.

use quiesce_model::checker;
use quiesce_model::config::{self, ModelCfg};
use quiesce_model::report::{self, Verdict};
use quiesce_model::{
    class_fingerprint, fingerprint_fn, representative, Checker, Fault, History, Model,
    StopPathModel,
};
use stateright::{Expectation, Property};

/// What a check concluded, to compare two checkers by.
#[derive(Debug, PartialEq)]
struct Outcome {
    unique: usize,
    states: usize,
    depth: Option<usize>,
    verdicts: Vec<(&'static str, Verdict)>,
}

fn summary(checker: &impl Checker<StopPathModel>, with_depth: bool) -> Outcome {
    Outcome {
        unique: checker.unique_state_count(),
        states: checker.state_count(),
        depth: with_depth.then(|| checker.max_depth()),
        verdicts: report::verdicts(checker)
            .into_iter()
            .map(|v| (v.name, v.verdict))
            .collect(),
    }
}

fn stateright(part: &ModelCfg, symmetry: bool) -> Outcome {
    let mut builder = part.clone().into_model().checker().threads(1);
    if symmetry {
        builder = builder.symmetry_fn(representative);
    }
    summary(&builder.spawn_dfs().join(), true)
}

fn ours(part: &ModelCfg, symmetry: bool, threads: usize) -> Outcome {
    let fingerprint = fingerprint_fn(symmetry);
    let checker = checker::depth_first(part.clone().into_model(), fingerprint, threads).join();
    assert_discoveries_replay(&checker);
    summary(&checker, threads == 1)
}

/// Each discovery's path ends in a state that shows it: an invariant false, a witness true.
fn assert_discoveries_replay(checker: &impl Checker<StopPathModel>) {
    let model = checker.model();
    for property in model.properties() {
        if let Some(path) = checker.discovery(property.name) {
            let holds = (property.condition)(model, path.last_state());
            match property.expectation {
                Expectation::Always => assert!(!holds, "{} holds at its discovery", property.name),
                Expectation::Sometimes => {
                    assert!(holds, "{} is false at its discovery", property.name)
                }
                // Judged on the whole path, not its last state.
                Expectation::Eventually => {}
            }
        }
    }
}

/// The parts of `standard` under 100,000 states with full history, and `small`.
fn parts() -> Vec<ModelCfg> {
    let mut parts = config::small();
    parts.extend(config::standard().into_iter().filter(|part| {
        ![
            "count2-budget2",
            "count1-main-budget2",
            "start-after-flagged-stop",
            "unflagged-alloc-stop-after-flagged",
            "count1-crash-attempts1",
        ]
        .contains(&part.name.as_str())
    }));
    parts
}

#[test]
fn one_thread_counts_what_stateright_counts() {
    for part in parts() {
        for history in [History::Full, History::Lean] {
            let part = part.clone().with_history(history);
            for symmetry in [true, false] {
                assert_eq!(
                    ours(&part, symmetry, 1),
                    stateright(&part, symmetry),
                    "{} ({history:?}, symmetry {symmetry})",
                    part.name
                );
            }
        }
    }
}

#[test]
fn two_threads_count_what_one_counts() {
    let one_thread = |part: &ModelCfg| Outcome {
        depth: None,
        ..ours(part, true, 1)
    };
    for part in parts() {
        assert_eq!(ours(&part, true, 2), one_thread(&part), "{}", part.name);
    }
    let large = config::standard().remove(0).with_history(History::Lean);
    assert_eq!(ours(&large, true, 2), one_thread(&large));
}

/// On three threads on the largest part the threads out of work are handed some, more than
/// once each, and the counts stay those of one thread.
#[test]
fn threads_out_of_work_are_handed_some() {
    let part = config::standard().remove(0).with_history(History::Lean);
    let checker = checker::depth_first(part.clone().into_model(), class_fingerprint, 3).join();
    assert!(
        checker.hand_overs() > 2,
        "{} hand-overs",
        checker.hand_overs()
    );
    assert_discoveries_replay(&checker);
    let one = ours(&part, true, 1);
    assert_eq!(
        (checker.unique_state_count(), checker.state_count()),
        (one.unique, one.states)
    );
}

/// Every planted fault, on `small`: the same verdicts and counts as stateright's, on one
/// thread and on two.
#[test]
fn faults_are_found_alike() {
    let mut caught = 0;
    for fault in Fault::ALL {
        let part = config::small()
            .remove(0)
            .with_history(History::Lean)
            .with_fault(Some(fault));
        let one = ours(&part, true, 1);
        assert_eq!(one, stateright(&part, true), "{fault}");
        let two = ours(&part, true, 2);
        assert_eq!(
            (two.unique, &two.verdicts),
            (one.unique, &one.verdicts),
            "{fault}"
        );
        caught += usize::from(one.verdicts.iter().any(|(_, v)| *v == Verdict::Violated));
    }
    assert!(
        caught >= 10,
        "only {caught} faults break an invariant on small"
    );
}

/// A toy model: a counter from each of `init` that adds one of `steps` while it stays up to
/// `top`; a step of 3 is an action without a next state.
struct Counter {
    init: &'static [u32],
    top: u32,
    steps: &'static [u32],
    properties: fn() -> Vec<Property<Counter>>,
}

impl Model for Counter {
    type State = u32;
    type Action = u32;

    fn init_states(&self) -> Vec<u32> {
        self.init.to_vec()
    }

    fn actions(&self, state: &u32, actions: &mut Vec<u32>) {
        actions.extend(self.steps.iter().filter(|&step| state + step <= self.top));
    }

    fn next_state(&self, state: &u32, action: u32) -> Option<u32> {
        assert!(*state != 4321, "the model panics at 4321");
        (action != 3).then_some(state + action)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        (self.properties)()
    }
}

fn counter(top: u32, steps: &'static [u32], properties: fn() -> Vec<Property<Counter>>) -> Counter {
    Counter {
        init: &[0],
        top,
        steps,
        properties,
    }
}

/// Unique states, generated states and the names discovered.
type Counted = (usize, usize, Vec<&'static str>);

/// stateright's count, then ours.
fn count(counter: fn() -> Counter) -> [Counted; 2] {
    let stateright = counter().checker().threads(1).spawn_dfs().join();
    let ours = checker::depth_first(counter(), checker::fingerprint::<u32>, 1).join();
    [counted(&stateright), counted(&ours)]
}

fn counted(checker: &impl Checker<Counter>) -> Counted {
    let mut names: Vec<_> = checker.discoveries().into_keys().collect();
    names.sort_unstable();
    (checker.unique_state_count(), checker.state_count(), names)
}

/// Once every property has its discovery the search ends at once; stateright's (its
/// default, `HasDiscoveries::All`) ends at the end of its block of 1,500 states, so the
/// counts of such a check differ. No configuration of quiesce's is one.
#[test]
fn the_search_ends_when_every_property_is_discovered() {
    let [stateright, ours] = count(|| {
        counter(3000, &[1], || {
            vec![
                Property::always("below 30", |_, n| *n < 30),
                Property::sometimes("seven", |_, n| *n == 7),
            ]
        })
    });
    assert_eq!(stateright, (1501, 1501, vec!["below 30", "seven"]));
    assert_eq!(ours, (31, 31, vec!["below 30", "seven"]));
}

/// An `eventually` property is judged along the path to a terminal state, as stateright
/// judges it: the first path to 20 takes the even steps, so it passes 10 and skips 19.
/// (An invariant that holds keeps either search going to the end.)
#[test]
fn eventually_properties_are_judged_along_the_path() {
    let [stateright, ours] = count(|| {
        counter(20, &[1, 2], || {
            vec![
                Property::always("true", |_, _| true),
                Property::eventually("passes 10", |_, n| *n == 10),
                Property::eventually("passes 19", |_, n| *n == 19),
            ]
        })
    });
    assert_eq!(ours, stateright);
    assert_eq!(ours, (21, 40, vec!["passes 19"]));
}

/// Several init states and actions without a next state: the same counts, and the
/// discovery's path (action indices counted over every action) replays to its state.
#[test]
fn paths_replay_from_any_init_state_over_actions_without_a_next_state() {
    let make = || Counter {
        init: &[0, 7],
        top: 40,
        steps: &[3, 1, 2],
        properties: || {
            vec![
                Property::always("true", |_, _| true),
                Property::sometimes("at 15", |_, n| *n == 15),
            ]
        },
    };
    let [stateright, ours] = count(make);
    assert_eq!(ours, stateright);
    let checker = checker::depth_first(make(), checker::fingerprint::<u32>, 1).join();
    let path = checker.discovery("at 15").unwrap();
    assert_eq!(*path.last_state(), 15);
    // The search starts from the last init state, as stateright's does.
    assert_eq!(path.into_vec()[0].0, 7);
}

/// A panic in the model ends the check, on every thread, and `join` passes it on: the
/// check does not wait for ever.
#[test]
fn a_panic_in_the_model_ends_the_check() {
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let joined = std::panic::catch_unwind(|| {
            checker::depth_first(
                counter(100_000, &[1, 2], || {
                    vec![Property::always("true", |_, _| true)]
                }),
                checker::fingerprint::<u32>,
                2,
            )
            .join()
        });
        sender.send(joined.is_err()).unwrap();
    });
    let panicked = receiver
        .recv_timeout(std::time::Duration::from_secs(120))
        .expect("the check did not end within two minutes");
    assert!(panicked, "join did not pass the panic on");
}
