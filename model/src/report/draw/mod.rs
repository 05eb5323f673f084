//! Counterexamples drawn as a timeline: one self-contained HTML page (inline CSS and SVG, no
//! script, nothing fetched) with a section per violated invariant.
//!
//! The model has no clock, so x is the step number. There is a lane for the operator and the
//! scheduler, one per allocation and one per task of each allocation. Every mark comes from
//! a step's [`command`](super::command) and its typed [`changes`](super::changes) — the very list the narration prints — and
//! the bands behind the marks (a process running, a service registered) from the states
//! themselves. The class names (`tl-lane`, `tl-ev-signal`, …) are the timeline vocabulary the
//! agent's web UI shares.
//!
//! `marks.rs` turns steps into marks on lanes, `svg.rs` places them, `style.rs` is the page's
//! inline style sheet and legend.

mod marks;
mod style;
mod svg;

use super::narrate::{alloc_name, narrate, task_name};
use crate::state::State;
use crate::step::Action;
use crate::StopPathModel;
use std::fmt::Write;
use style::{LEGEND, STYLE};
use svg::svg;

/// The most steps drawn of one counterexample; a longer one is drawn up to here, and says so.
pub const MAX_DRAWN_STEPS: usize = 200;

/// What a mark on the timeline stands for. The class and the shape go together, so that
/// the drawing reads without colour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Request,
    Cluster,
    Placed,
    Stop,
    Flag,
    Server,
    Pulled,
    Deregistered,
    Registered,
    DelayWaited,
    DelayExited,
    DelayWaiting,
    DelaySkipped,
    DelayCut,
    Signal,
    Sigkill,
    Started,
    Exit,
    Restart,
    Poststop,
    Terminal,
}

impl Kind {
    /// The `data-kind` value, and the class after `tl-ev-`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Request => "request",
            Kind::Cluster => "cluster",
            Kind::Placed => "placed",
            Kind::Stop => "stop",
            Kind::Flag => "flag",
            Kind::Server => "server",
            Kind::Pulled => "pulled",
            Kind::Deregistered => "deregistered",
            Kind::Registered => "registered",
            Kind::DelayWaited => "delay-waited",
            Kind::DelayExited => "delay-exited",
            Kind::DelayWaiting => "delay-waiting",
            Kind::DelaySkipped => "delay-skipped",
            Kind::DelayCut => "delay-cut",
            Kind::Signal => "signal",
            Kind::Sigkill => "sigkill",
            Kind::Started => "started",
            Kind::Exit => "exit",
            Kind::Restart => "restart",
            Kind::Poststop => "poststop",
            Kind::Terminal => "terminal",
        }
    }

    pub(crate) fn is_bar(self) -> bool {
        matches!(
            self,
            Kind::DelayWaited | Kind::DelayExited | Kind::DelayWaiting | Kind::DelayCut
        )
    }
}

/// One mark: at `step` (a bar: from `step` to `end`) on lane `lane`.
#[derive(Clone, Debug)]
pub(crate) struct Mark {
    pub(crate) step: usize,
    pub(crate) end: usize,
    pub(crate) lane: usize,
    pub(crate) kind: Kind,
    pub(crate) label: String,
    pub(crate) title: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lane {
    Operator,
    Alloc(usize),
    Task(usize, usize),
}

/// One violated invariant's counterexample as an HTML `<section>`: heading, timeline, and the
/// narrated steps numbered as the x axis. `steps` ends at the first state that breaks
/// `invariant`.
pub fn section(
    model: &StopPathModel,
    invariant: &str,
    steps: &[(State, Option<Action>)],
) -> String {
    let total = steps.len().saturating_sub(1);
    let drawn = &steps[..steps.len().min(MAX_DRAWN_STEPS + 1)];
    let fault = model.cfg.fault.map_or("none", |fault| fault.name());
    let demand = crate::properties::statement(invariant).unwrap_or("");
    let mut out = String::new();
    let _ = write!(
        out,
        "<section class=\"tl-section\" data-invariant=\"{}\" data-part=\"{}\" data-fault=\"{}\">\n\
         <h2><code>{}</code> is broken</h2>\n<p class=\"tl-demand\">{}</p>\n\
         <p class=\"tl-meta\">part <b>{}</b>, fault <b>{}</b>, {} step{}</p>\n",
        escape(invariant),
        escape(&model.cfg.name),
        escape(fault),
        escape(invariant),
        escape(demand),
        escape(&model.cfg.name),
        escape(fault),
        total,
        if total == 1 { "" } else { "s" }
    );
    if total > MAX_DRAWN_STEPS {
        let _ = writeln!(
            out,
            "<p class=\"tl-note\">This counterexample has {total} steps; the first \
             {MAX_DRAWN_STEPS} are drawn, and the invariant breaks after step {total}.</p>"
        );
    }
    out.push_str(&svg(model, invariant, drawn, total));
    out.push_str("<ol class=\"tl-steps\">\n");
    for (index, line) in narrate(model, drawn).iter().enumerate() {
        let number = index + 1;
        let text = line
            .split_once(". ")
            .map_or(line.as_str(), |(_, text)| text);
        let broken = if number == total {
            " class=\"tl-broken-step\""
        } else {
            ""
        };
        let _ = writeln!(out, "<li value=\"{number}\"{broken}>{}</li>", escape(text));
    }
    out.push_str("</ol>\n</section>\n");
    out
}

/// The whole page. With no section it says that every invariant holds in `parts`, so a
/// script can rely on the file existing.
pub fn page(config: &str, fault: Option<&str>, parts: &[String], sections: &[String]) -> String {
    let fault = fault.unwrap_or("none");
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>quiesce-model counterexamples: {}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n\
         <h1>Counterexamples of the stop path model</h1>\n\
         <p class=\"tl-meta\">configuration <b>{}</b>, fault <b>{}</b>, parts: {}</p>\n",
        escape(fault),
        escape(config),
        escape(fault),
        escape(&parts.join(", "))
    );
    if sections.is_empty() {
        out.push_str("<p class=\"tl-holds\">every invariant holds in these parts</p>\n");
    } else {
        out.push_str(LEGEND);
        for section in sections {
            out.push_str(section);
        }
    }
    out.push_str("</body>\n</html>\n");
    out
}

/// Text or an attribute value, safe in HTML and SVG: names come from configurations.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

pub(crate) fn lanes(model: &StopPathModel, steps: &[(State, Option<Action>)]) -> Vec<Lane> {
    let allocs = steps
        .iter()
        .map(|(state, _)| state.allocs.len())
        .max()
        .unwrap_or(0);
    let tasks = model.cfg.group.tasks.len();
    let mut lanes = vec![Lane::Operator];
    for alloc in 0..allocs {
        lanes.push(Lane::Alloc(alloc));
        lanes.extend((0..tasks).map(|task| Lane::Task(alloc, task)));
    }
    lanes
}

pub(crate) fn lane_name(model: &StopPathModel, lane: Lane) -> String {
    match lane {
        Lane::Operator => "operator / scheduler".to_string(),
        Lane::Alloc(alloc) => alloc_name(model, alloc),
        Lane::Task(alloc, task) => {
            format!("{} · {}", alloc_name(model, alloc), task_name(model, task))
        }
    }
}
