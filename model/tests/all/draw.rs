//! Counterexamples drawn as timelines (`report::draw`, `check --draw`): the drawing shows the
//! wrong order a fault causes, marks the step where the invariant breaks, says so when
//! nothing is violated, and escapes every name a configuration brings.

use quiesce_model::config::{self, ModelCfg};
use quiesce_model::properties::{self, names};
use quiesce_model::report::{self, draw};
use quiesce_model::{Action, Fault, State};

type Path = Vec<(State, Option<Action>)>;

/// The shortest counterexample of `invariant` in `part` with `fault` planted, drawn.
fn drawn(part: ModelCfg, fault: Fault, invariant: &'static str) -> (Path, String) {
    let model = part.with_fault(Some(fault)).into_model();
    let path = report::shortest_counterexample(&model, invariant, 30).expect("a counterexample");
    let section = draw::section(&model, invariant, &path);
    (path, section)
}

fn standard_part(name: &str) -> ModelCfg {
    config::standard()
        .into_iter()
        .find(|part| part.name == name)
        .unwrap()
}

/// Every event of `kind` in a drawing, as (step, lane).
fn events(html: &str, kind: &str) -> Vec<(usize, String)> {
    let opening = format!("<g class=\"tl-ev tl-ev-{kind}\" data-step=\"");
    html.match_indices(&opening)
        .map(|(at, _)| {
            let rest = &html[at + opening.len()..];
            let (step, rest) = rest.split_once('"').unwrap();
            let lane = rest.strip_prefix(" data-lane=\"").unwrap();
            (
                step.parse().unwrap(),
                lane.split_once('"').unwrap().0.to_string(),
            )
        })
        .collect()
}

/// The step of the broken-invariant marker, if drawn.
fn broken_step(html: &str) -> Option<usize> {
    let opening = "<g class=\"tl-broken\" data-step=\"";
    let at = html.find(opening)? + opening.len();
    html[at..].split_once('"')?.0.parse().ok()
}

/// Under `signal-before-deregistration` the drawing shows a task's kill signal with its
/// services still registered: on the task's lane, the signal triangle comes before any
/// deregistered square.
#[test]
fn signal_before_deregistration_is_drawn_in_its_wrong_order() {
    let fault = Fault::SignalBeforeDeregistration;
    let invariant = fault.intended_property();
    let (path, html) = drawn(config::small().remove(0), fault, invariant);
    let last = path.len() - 1;
    assert!(
        html.contains(&format!("data-invariant=\"{invariant}\"")),
        "{html}"
    );
    assert!(html.contains(&draw::escape(properties::statement(invariant).unwrap())));
    assert_eq!(broken_step(&html), Some(last), "{html}");
    let signals: Vec<_> = events(&html, "signal")
        .into_iter()
        .filter(|(_, lane)| lane.contains(" · "))
        .collect();
    assert!(!signals.is_empty(), "no kill signal on a task lane: {html}");
    let deregistered = events(&html, "deregistered");
    for (signal_step, lane) in &signals {
        let task_deregistered = deregistered.iter().find(|(_, l)| l == lane);
        assert!(
            task_deregistered.is_none_or(|(step, _)| step > signal_step),
            "{lane}: signalled at step {signal_step}, deregistered at {task_deregistered:?}"
        );
    }
    // The narrated steps under the drawing are numbered as the x axis.
    assert!(html.contains(&format!("<li value=\"{last}\" class=\"tl-broken-step\">")));
    assert_eq!(html.matches("<li value=").count(), last);
}

/// Nomad's in-place restart ignoring the flag: a flagged `alloc restart`, then the task's
/// delay waited anyway — a bar still open when the invariant breaks, and no skipped delay.
#[test]
fn inplace_restart_ignoring_the_flag_is_drawn_waiting() {
    let fault = Fault::NomadInplaceRestartIgnoresFlag;
    let (path, html) = drawn(
        standard_part("count1-restart-budget2"),
        fault,
        names::FLAG_IS_HONOURED,
    );
    let last = path.len() - 1;
    assert!(html.contains("data-invariant=\"flag_is_honoured\""));
    assert!(html.contains("data-fault=\"nomad-inplace-restart-ignores-flag\""));
    assert_eq!(broken_step(&html), Some(last));
    let requests = events(&html, "request");
    assert!(
        requests
            .iter()
            .any(|(_, lane)| lane == "operator / scheduler"),
        "{html}"
    );
    assert!(
        html.contains("alloc restart -no-shutdown-delay web["),
        "{html}"
    );
    let waiting = events(&html, "delay-waiting");
    assert!(
        waiting.iter().any(|(_, lane)| lane.contains(" · ")),
        "no task delay waiting: {html}"
    );
    assert!(events(&html, "delay-skipped").is_empty(), "{html}");
}

#[test]
fn a_page_without_violations_says_every_invariant_holds() {
    let page = draw::page("small", None, &["count1-budget2".to_string()], &[]);
    assert!(page.contains("every invariant holds in these parts"));
    assert!(page.contains("count1-budget2"));
    assert!(page.starts_with("<!DOCTYPE html>"));
}

/// The page stands alone: inline style and SVG, no script, nothing fetched.
#[test]
fn the_page_is_self_contained() {
    let fault = Fault::SignalBeforeDeregistration;
    let (_, section) = drawn(config::small().remove(0), fault, fault.intended_property());
    let page = draw::page("small", Some(fault.name()), &[], &[section]);
    assert!(page.contains("<style>") && page.contains("<svg"));
    for forbidden in ["<script", "src=", "href=", "@import", "url("] {
        assert!(!page.contains(forbidden), "{forbidden}");
    }
}

/// Names come from configurations: a hostile group, job or task name stays text.
#[test]
fn hostile_names_are_escaped() {
    let mut part = config::small().remove(0);
    part.name = "<script>alert(1)</script>".to_string();
    part.job = "j\"ob".to_string();
    part.group.name = "<img src=x onerror=alert(1)>".to_string();
    part.group.tasks[0].name = "a'\"&b".to_string();
    let fault = Fault::SignalBeforeDeregistration;
    let (_, section) = drawn(part, fault, fault.intended_property());
    let page = draw::page("<b>", Some(fault.name()), &["<i>".to_string()], &[section]);
    assert!(!page.contains("<script>alert"), "{page}");
    assert!(!page.contains("<img"), "{page}");
    assert!(!page.contains("a'\"&b"), "{page}");
    assert!(!page.contains("<i>"), "{page}");
    assert!(page.contains("configuration <b>&lt;b&gt;</b>"), "{page}");
    assert!(page.contains("&lt;img src=x onerror=alert(1)&gt;[0] · a&#39;&quot;&amp;b"));
    assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
}

/// A counterexample longer than the bound is drawn up to the bound, and says so.
#[test]
fn a_long_counterexample_is_cut_at_the_bound() {
    let model = config::small().remove(0).into_model();
    let state = quiesce_model::Model::init_states(&model).remove(0);
    let steps = draw::MAX_DRAWN_STEPS + 50;
    let mut path: Path = vec![(state.clone(), Some(Action::ProcessEval)); steps];
    path.push((state, None));
    let html = draw::section(&model, names::STOP_COMPLETES, &path);
    assert!(html.contains(&format!(
        "This counterexample has {steps} steps; the first 200"
    )));
    assert_eq!(broken_step(&html), None);
    let drawn_steps = events(&html, "cluster");
    assert_eq!(drawn_steps.last().map(|(step, _)| *step), Some(200));
    assert_eq!(html.matches("<li value=").count(), 200);
}

#[test]
fn every_invariant_states_its_demand() {
    for (name, _) in properties::INVARIANTS {
        let statement = properties::statement(name).unwrap_or_else(|| panic!("{name}"));
        assert!(statement.ends_with('.'), "{name}");
    }
    assert_eq!(properties::statement("full_delay_waited"), None);
}
