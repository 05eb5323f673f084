//! The timeline's SVG: lanes, the step axis, the bands read from the states, the marks and
//! the broken-step line. Positions are computed here, from a few constants.

use super::escape;
use super::marks::marks;
use super::{lane_name, lanes, Kind, Lane, Mark};
use crate::state::{Alloc, RunnerPhase, State};
use crate::step::Action;
use crate::StopPathModel;
use std::fmt::Write;

/// Distance between two steps on the x axis, in pixels.
const COLUMN: f64 = 104.0;
/// Width of one character of a label (11 px monospace: 0.6 em, with a margin).
const CHAR: f64 = 6.8;
const LABEL_ROW: f64 = 14.0;
/// From a lane's top: the delay bars (under their labels), in a lane that has any.
const BAR_TOP: f64 = 17.0;
/// From the top of a lane, or from the bottom of its bars: the marks' centre.
const MARK_Y: f64 = 24.0;
/// From the marks' centre: the first label's baseline.
const FIRST_LABEL: f64 = 23.0;
/// Above the lanes: the broken-step label, then the axis.
const AXIS_Y: f64 = 44.0;
const LANES_TOP: f64 = 54.0;

fn text_width(text: &str) -> f64 {
    text.chars().count() as f64 * CHAR
}

/// The timeline of `steps` as an inline `<svg>`; `total` is the counterexample's length (more
/// than drawn when it was cut at [`MAX_DRAWN_STEPS`]).
pub(crate) fn svg(
    model: &StopPathModel,
    invariant: &str,
    steps: &[(State, Option<Action>)],
    total: usize,
) -> String {
    let lanes = lanes(model, steps);
    let marks = marks(model, steps, &lanes);
    let drawn = steps.len().saturating_sub(1);
    let names: Vec<String> = lanes.iter().map(|&lane| lane_name(model, lane)).collect();
    // A task lane's label also says the task's role: it decides when the task is killed.
    let roles: Vec<String> = lanes
        .iter()
        .map(|&lane| match lane {
            Lane::Task(_, task) => {
                format!(" {:?}", model.cfg.group.tasks[task].kind).to_lowercase()
            }
            _ => String::new(),
        })
        .collect();
    let gutter = names
        .iter()
        .zip(&roles)
        .map(|(name, role)| text_width(name) + text_width(role))
        .fold(120.0, f64::max)
        + 28.0;
    let x = |step: usize| gutter + 36.0 + step as f64 * COLUMN;
    let label_x = |mark: &Mark| x(mark.step) - 6.0;

    // Labels go in rows under the marks, the first row each fits without overlapping.
    let mut order: Vec<usize> = (0..marks.len()).collect();
    order.sort_by(|&a, &b| (marks[a].lane, marks[a].step).cmp(&(marks[b].lane, marks[b].step)));
    let mut row = vec![0; marks.len()];
    let mut row_ends: Vec<Vec<f64>> = vec![Vec::new(); lanes.len()];
    for &ix in order.iter().filter(|&&ix| !marks[ix].kind.is_bar()) {
        let (start, ends) = (label_x(&marks[ix]), &mut row_ends[marks[ix].lane]);
        let free = ends.iter().position(|&end| end + 10.0 <= start);
        row[ix] = free.unwrap_or(ends.len());
        let end = start + text_width(&marks[ix].label);
        match free {
            Some(r) => ends[r] = end,
            None => ends.push(end),
        }
    }
    // Each lane's top and marks' centre: lower by a bar's height where delays are drawn.
    let mut tops = Vec::with_capacity(lanes.len());
    let mut centres = Vec::with_capacity(lanes.len());
    let mut y = LANES_TOP;
    for (lane, ends) in row_ends.iter().enumerate() {
        let has_bars = marks
            .iter()
            .any(|mark| mark.lane == lane && mark.kind.is_bar());
        let centre = y + MARK_Y + if has_bars { BAR_TOP + 10.0 } else { 0.0 };
        tops.push(y);
        centres.push(centre);
        y = centre + FIRST_LABEL + ends.len().saturating_sub(1) as f64 * LABEL_ROW + 10.0;
    }
    let height = y + 8.0;
    let broken = (total == drawn && drawn > 0).then(|| x(drawn) + COLUMN / 2.0);
    let broken_label = format!("invariant broken here: {invariant}");
    let mut width = x(drawn) + COLUMN;
    for mark in &marks {
        width = width.max(label_x(mark) + text_width(&mark.label) + 12.0);
    }
    // The broken-step label ends at its line, or starts there if it has no room on the left.
    let broken = broken.map(|line_x| {
        if line_x - text_width(&broken_label) * 1.15 - 8.0 > gutter {
            (line_x, line_x - 6.0, "end")
        } else {
            width = width.max(line_x + text_width(&broken_label) * 1.15 + 18.0);
            (line_x, line_x + 6.0, "start")
        }
    });

    let mut out = String::new();
    let _ = writeln!(out, "<div class=\"tl-scroll\"><svg class=\"tl\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{height:.0}\" viewBox=\"0 0 {width:.0} {height:.0}\" role=\"img\">");
    // Lanes, with their labels.
    for (ix, name) in names.iter().enumerate() {
        let bottom = tops.get(ix + 1).copied().unwrap_or(y);
        let indent = if matches!(lanes[ix], Lane::Task(..)) {
            18.0
        } else {
            6.0
        };
        let class = match lanes[ix] {
            Lane::Operator => "tl-lane tl-lane-operator",
            Lane::Alloc(_) => "tl-lane tl-lane-alloc",
            Lane::Task(..) => "tl-lane tl-lane-task",
        };
        let _ = writeln!(
            out,
            "<g class=\"{class}\" data-lane=\"{}\"><rect class=\"tl-lane-bg\" x=\"0\" y=\"{:.0}\" width=\"{width:.0}\" height=\"{:.0}\"/>\
             <text class=\"tl-lane-label\" x=\"{indent}\" y=\"{:.0}\">{}<tspan class=\"tl-lane-role\">{}</tspan></text></g>",
            escape(name),
            tops[ix],
            bottom - tops[ix],
            centres[ix] + 4.0,
            escape(name),
            escape(&roles[ix])
        );
    }
    // The axis: one column per step, "start" for the state before the first.
    let _ = write!(out, "<g class=\"tl-axis\">");
    for step in 0..=drawn {
        let label = if step == 0 {
            "start".to_string()
        } else {
            step.to_string()
        };
        let _ = write!(
            out,
            "<line x1=\"{0:.0}\" y1=\"{1:.0}\" x2=\"{0:.0}\" y2=\"{2:.0}\"/><text x=\"{0:.0}\" y=\"{3:.0}\">{label}</text>",
            x(step),
            LANES_TOP,
            height - 4.0,
            AXIS_Y
        );
    }
    let _ = writeln!(
        out,
        "<text class=\"tl-axis-title\" x=\"6\" y=\"{AXIS_Y:.0}\">step</text></g>"
    );
    out.push_str(&bands(steps, &lanes, &centres, &x));
    if let Some((line_x, text_x, anchor)) = broken {
        let _ = writeln!(
            out,
            "<g class=\"tl-broken\" data-step=\"{drawn}\" data-invariant=\"{0}\"><title>after step {drawn} the state breaks {0}</title>\
             <rect x=\"{1:.0}\" y=\"{2:.0}\" width=\"{3:.0}\" height=\"{4:.0}\"/>\
             <line x1=\"{5:.0}\" y1=\"8\" x2=\"{5:.0}\" y2=\"{6:.0}\"/>\
             <text x=\"{text_x:.0}\" y=\"18\" text-anchor=\"{anchor}\">{7}</text></g>",
            escape(invariant),
            x(drawn) - COLUMN / 2.0,
            LANES_TOP,
            COLUMN,
            height - LANES_TOP - 4.0,
            line_x,
            height - 4.0,
            escape(&broken_label)
        );
    }
    // Marks that share a lane and a step stand side by side.
    let mut seen: Vec<(usize, usize)> = Vec::new();
    for (ix, mark) in marks.iter().enumerate() {
        let (top, centre) = (tops[mark.lane], centres[mark.lane]);
        let shifted = if mark.kind.is_bar() || mark.kind == Kind::DelaySkipped {
            0.0
        } else {
            let before = seen
                .iter()
                .filter(|&&key| key == (mark.lane, mark.step))
                .count();
            seen.push((mark.lane, mark.step));
            before as f64 * 16.0
        };
        let cx = x(mark.step) + shifted;
        let shape = shape(
            mark.kind,
            cx,
            centre,
            x(mark.end),
            top + BAR_TOP,
            mark.end == drawn && mark.kind == Kind::DelayWaiting,
        );
        let _ = writeln!(
            out,
            "<g class=\"tl-ev tl-ev-{0}\" data-step=\"{1}\" data-lane=\"{2}\" data-kind=\"{0}\"{3}><title>{4}</title>{shape}\
             <text x=\"{5:.0}\" y=\"{6:.0}\">{7}</text></g>",
            mark.kind.name(),
            mark.step,
            escape(&names[mark.lane]),
            if mark.end != mark.step { format!(" data-end-step=\"{}\"", mark.end) } else { String::new() },
            escape(&mark.title),
            if mark.kind.is_bar() { x(mark.step) + 2.0 } else { label_x(mark) },
            if mark.kind.is_bar() { top + BAR_TOP - 4.0 } else { centre + FIRST_LABEL + row[ix] as f64 * LABEL_ROW },
            escape(&mark.label)
        );
    }
    out.push_str("</svg></div>\n");
    out
}

/// Behind the marks, per state: a grey band while the lane's process (a task) or runner (an
/// allocation) is alive, a line under it while its service is registered.
fn bands(
    steps: &[(State, Option<Action>)],
    lanes: &[Lane],
    centres: &[f64],
    x: &dyn Fn(usize) -> f64,
) -> String {
    let last = steps.len().saturating_sub(1);
    let span = |k: usize| {
        (
            x(k),
            if k == last {
                x(k) + COLUMN / 2.0
            } else {
                x(k + 1)
            },
        )
    };
    let mut out = String::from("<g class=\"tl-bands\">");
    for (ix, &lane) in lanes.iter().enumerate() {
        let at = |state: &State| -> (bool, bool) {
            let alloc = |a: usize| state.allocs.get(a).filter(|alloc| !alloc.removed);
            match lane {
                Lane::Operator => (false, false),
                Lane::Alloc(a) => alloc(a).map_or((false, false), |alloc: &Alloc| {
                    let live =
                        !matches!(alloc.runner, RunnerPhase::Pending | RunnerPhase::Terminal);
                    (live, alloc.group_service_registered)
                }),
                Lane::Task(a, t) => alloc(a).map_or((false, false), |alloc| {
                    (alloc.tasks[t].is_live(), alloc.tasks[t].service_registered)
                }),
            }
        };
        let mut k = 0;
        while k <= last {
            let here = at(&steps[k].0);
            let run_end = (k..=last)
                .take_while(|&j| at(&steps[j].0) == here)
                .last()
                .unwrap_or(k);
            let (from, to) = (span(k).0, span(run_end).1);
            let y = centres[ix];
            if here.0 {
                let _ = write!(out, "<rect class=\"tl-band-process\" x=\"{from:.0}\" y=\"{:.0}\" width=\"{:.0}\" height=\"10\"/>", y - 5.0, to - from);
            }
            if here.1 {
                let _ = write!(out, "<line class=\"tl-band-service\" x1=\"{from:.0}\" y1=\"{0:.0}\" x2=\"{to:.0}\" y2=\"{0:.0}\"/>", y + 9.0);
            }
            k = run_end + 1;
        }
    }
    out.push_str("</g>\n");
    out
}

/// A mark's shape at (`cx`, `cy`); a bar runs from `cx` to `end_x` at `bar_y`.
fn shape(kind: Kind, cx: f64, cy: f64, end_x: f64, bar_y: f64, open_end: bool) -> String {
    let bar = |to: f64| {
        format!(
            "<rect x=\"{cx:.0}\" y=\"{bar_y:.0}\" width=\"{:.0}\" height=\"10\"/>",
            (to - cx).max(2.0)
        )
    };
    let caps = |to: f64| {
        format!(
            "<path class=\"tl-cap\" d=\"M{cx:.0} {0:.0}V{1:.0}M{to:.0} {0:.0}V{1:.0}\"/>",
            bar_y - 3.0,
            bar_y + 13.0
        )
    };
    let (l, r, t, b) = (cx - 6.0, cx + 6.0, cy - 6.0, cy + 6.0);
    match kind {
        Kind::DelayWaited | Kind::DelayExited => format!("{}{}", bar(end_x), caps(end_x)),
        Kind::DelayCut => format!(
            "{}<path class=\"tl-stopmark\" d=\"M{end_x:.0} {:.0}V{:.0}M{:.0} {:.0}H{:.0}\"/>",
            bar(end_x),
            bar_y - 5.0,
            bar_y + 15.0,
            end_x - 5.0,
            bar_y - 5.0,
            end_x + 5.0
        ),
        Kind::DelayWaiting => {
            let to = if open_end { end_x + COLUMN / 2.0 - 6.0 } else { end_x };
            format!("{}<path class=\"tl-open\" d=\"M{to:.0} {:.0}l6 5l-6 5\"/>", bar(to), bar_y)
        }
        Kind::DelaySkipped => format!(
            "<path d=\"M{cx:.0} {:.0}V{:.0}M{:.0} {:.0}H{:.0}M{:.0} {:.0}H{:.0}\"/>",
            bar_y - 3.0,
            cy + 6.0,
            cx - 5.0,
            bar_y - 3.0,
            cx + 5.0,
            cx - 5.0,
            cy + 6.0,
            cx + 5.0
        ),
        Kind::Deregistered | Kind::Registered => {
            format!("<rect x=\"{l:.0}\" y=\"{t:.0}\" width=\"12\" height=\"12\"/>")
        }
        Kind::Signal => format!("<path d=\"M{l:.0} {b:.0}H{r:.0}L{cx:.0} {:.0}Z\"/>", cy - 7.0),
        Kind::Sigkill => format!("<path d=\"M{l:.0} {t:.0}L{r:.0} {b:.0}M{r:.0} {t:.0}L{l:.0} {b:.0}\"/>"),
        Kind::Exit | Kind::Started => format!("<circle cx=\"{cx:.0}\" cy=\"{cy:.0}\" r=\"6\"/>"),
        Kind::Poststop => format!(
            "<path d=\"M{l:.0} {cy:.0}L{:.0} {t:.0}H{:.0}L{r:.0} {cy:.0}L{:.0} {b:.0}H{:.0}Z\"/>",
            cx - 3.0,
            cx + 3.0,
            cx + 3.0,
            cx - 3.0
        ),
        Kind::Request | Kind::Cluster | Kind::Server => {
            let size = if kind == Kind::Request { 7.0 } else { 5.0 };
            format!(
                "<path d=\"M{cx:.0} {:.0}L{:.0} {cy:.0}L{cx:.0} {:.0}L{:.0} {cy:.0}Z\"/>",
                cy - size,
                cx + size,
                cy + size,
                cx - size
            )
        }
        Kind::Placed => format!("<path d=\"M{l:.0} {cy:.0}H{r:.0}M{cx:.0} {t:.0}V{b:.0}\"/>"),
        Kind::Stop => format!(
            "<path d=\"M{:.0} {t:.0}H{:.0}L{r:.0} {:.0}V{:.0}L{:.0} {b:.0}H{:.0}L{l:.0} {:.0}V{:.0}Z\"/>",
            cx - 2.5,
            cx + 2.5,
            cy - 2.5,
            cy + 2.5,
            cx + 2.5,
            cx - 2.5,
            cy + 2.5,
            cy - 2.5
        ),
        Kind::Flag => format!("<path d=\"M{:.0} {:.0}V{t:.0}L{r:.0} {:.0}L{:.0} {:.0}\"/>", cx - 4.0, cy + 7.0, cy - 3.0, cx - 4.0, cy),
        Kind::Pulled => format!("<path d=\"M{cx:.0} {t:.0}V{b:.0}M{l:.0} {:.0}L{cx:.0} {b:.0}L{r:.0} {:.0}\"/>", cy, cy),
        Kind::Restart => format!(
            "<path d=\"M{r:.0} {cy:.0}A6 6 0 1 1 {cx:.0} {t:.0}M{:.0} {:.0}L{:.0} {t:.0}L{:.0} {:.0}\"/>",
            cx - 3.0,
            cy - 9.0,
            cx + 1.0,
            cx - 3.0,
            cy - 3.0
        ),
        Kind::Terminal => format!("<path d=\"M{:.0} {t:.0}V{b:.0}M{:.0} {t:.0}V{b:.0}\"/>", cx - 2.0, cx + 3.0),
    }
}
