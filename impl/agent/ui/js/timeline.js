// The stop of an allocation drawn as a timeline: a lane for its group and one for each of
// its tasks on a time axis from the moment the stop began, with the services deregistered,
// each shutdown delay waited, skipped or cut short (its length drawn), the kill signal, a
// SIGKILL if any, each exit, and the poststop tasks. Drawn from the task events the API
// serves (Nomad's event types, and the group-delay ones quiesce adds), so it draws any
// server whose events carry the same. Every mark has its own shape and a written label, so
// it reads without colour; the same marks are listed in time order under the drawing.
// The class names are the model's counterexample drawing's too (`quiesce-model check
// --draw`).

import { h, s } from "./dom.js";
import { duration } from "./format.js";

const T = {
  KILLING: "Killing",
  WAITING: "Waiting for shutdown delay",
  SKIPPING: "Skipping shutdown delay",
  CUT: "Shutdown delay cut short",
  GROUP_WAITING: "Waiting for group shutdown delay",
  GROUP_SKIPPING: "Skipping group shutdown delay",
  GROUP_CUT: "Group shutdown delay cut short",
  STARTED: "Started",
  TERMINATED: "Terminated",
};
const STOP_TYPES = new Set([T.KILLING, T.WAITING, T.SKIPPING, T.CUT, T.GROUP_WAITING, T.GROUP_SKIPPING, T.GROUP_CUT]);

const SIGNALS = { 1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 9: "SIGKILL", 10: "SIGUSR1", 12: "SIGUSR2", 15: "SIGTERM" };

/** The marks of one allocation's stop, by lane: `{start, lanes: [{name, marks}]}`, or null
 * if it has not been stopped. `now` is the agent's clock (`agentNow()`). */
export function stopMarks(alloc, now) {
  // A running allocation's kills and delays are a restart's, not a stop's.
  if (alloc.DesiredStatus === "run" && ["running", "pending"].includes(alloc.ClientStatus)) return null;
  const states = alloc.TaskStates || {};
  const job = alloc.Job || {};
  const group = (job.TaskGroups || []).find((g) => g.Name === alloc.TaskGroup) || {};
  const specs = new Map((group.Tasks || []).map((t) => [t.Name, t]));
  const every = Object.entries(states).flatMap(([task, state]) => (state.Events || []).map((e) => ({ ...e, task })));
  // A restart kills and delays too: only what came after the last one is this stop's.
  const restarted = Math.max(0, ...every.filter((e) => e.Type === "Restarting").map((e) => e.Time));
  const all = every.filter((e) => e.Time > restarted).sort((a, b) => a.Time - b.Time);
  const stopEvents = all.filter((e) => STOP_TYPES.has(e.Type));
  if (stopEvents.length === 0) return null;
  const start = stopEvents[0].Time;
  const first = (events, type, after = start) => events.find((e) => e.Type === type && e.Time >= after);
  const name = alloc.Name || alloc.ID;
  const lanes = [];

  // The group: its services go, then its delay, which ends when the tasks' kills begin.
  const groupMarks = [];
  const groupServices = (group.Services || []).length > 0;
  const waiting = first(all, T.GROUP_WAITING);
  const skipped = first(all, T.GROUP_SKIPPING);
  const firstKill = first(all, T.KILLING);
  const deregisteredAt = (waiting || skipped || firstKill || {}).Time;
  if (groupServices && deregisteredAt !== undefined) {
    groupMarks.push({ kind: "deregistered", at: deregisteredAt, label: "services deregistered" });
  }
  const groupDelay = group.ShutdownDelay || 0;
  if (waiting) {
    const cut = first(all, T.GROUP_CUT, waiting.Time);
    const over = all.find((e) => e.Time > waiting.Time && [T.KILLING, T.WAITING, T.SKIPPING, T.TERMINATED].includes(e.Type));
    groupMarks.push(delayBar(waiting.Time, groupDelay, cut, over && over.Time, now, "group"));
  } else if (skipped) {
    groupMarks.push({ kind: "delay-skipped", at: skipped.Time, label: `delay ${duration(groupDelay)} skipped` });
  }
  if (groupMarks.length) lanes.push({ name: `${name} · group ${alloc.TaskGroup}`, marks: groupMarks });

  const names = Object.keys(states).sort((a, b) => rank(specs.get(a)) - rank(specs.get(b)) || (a < b ? -1 : 1));
  for (const task of names) {
    const spec = specs.get(task) || {};
    const events = all.filter((e) => e.task === task);
    const marks = [];
    const ended = first(events, T.TERMINATED);
    const hook = spec.Lifecycle && spec.Lifecycle.Hook;
    if (hook === "poststop") {
      const started = first(events, T.STARTED);
      if (started) marks.push({ kind: "poststop", at: started.Time, label: "poststop started" });
    } else {
      const wait = first(events, T.WAITING);
      const skip = first(events, T.SKIPPING);
      const killing = first(events, T.KILLING);
      const services = (spec.Services || []).length > 0;
      const began = wait || skip || killing;
      if (services && began) marks.push({ kind: "deregistered", at: began.Time, label: "services deregistered" });
      // The signal goes when the task's delay is over: at once if skipped or cut short.
      let signalAt = killing ? killing.Time : null;
      if (wait) {
        const delay = spec.ShutdownDelay || 0;
        const cut = first(events, T.CUT, wait.Time);
        const exitedEarly = ended && !cut && ended.Time < wait.Time + delay;
        // Over: at the task's exit if it came first, else when the delay ran out (known from
        // its exit, or else from the clock: the task may take its kill_timeout to exit).
        let over = null;
        if (exitedEarly) over = ended.Time;
        else if (ended || now >= wait.Time + delay) over = wait.Time + delay;
        const bar = delayBar(wait.Time, delay, cut, over, now, "task");
        marks.push(bar);
        signalAt = bar.running || exitedEarly ? null : bar.at + bar.length;
      } else if (skip) {
        marks.push({ kind: "delay-skipped", at: skip.Time, label: `delay ${duration(spec.ShutdownDelay || 0)} skipped` });
        signalAt = skip.Time;
      }
      if (signalAt !== null && began && (!ended || ended.Time >= signalAt)) {
        marks.push({ kind: "signal", at: signalAt, label: `${spec.KillSignal || "SIGINT"} sent` });
      }
    }
    if (ended) {
      const details = ended.Details || {};
      const signal = details.signal && details.signal !== "0" ? SIGNALS[details.signal] || `signal ${details.signal}` : "";
      if (signal === "SIGKILL") marks.push({ kind: "sigkill", at: ended.Time, label: "SIGKILL, exited" });
      else marks.push({ kind: "exit", at: ended.Time, label: `exit ${details.exit_code ?? "?"}${signal ? ` (${signal})` : ""}` });
    }
    if (marks.length) lanes.push({ name: `${name} · ${task}`, marks });
  }
  return { start, lanes };
}

/** Lifecycle order: prestart, main, poststart, poststop. */
function rank(spec) {
  const hook = spec && spec.Lifecycle && spec.Lifecycle.Hook;
  return { prestart: 0, poststart: 2, poststop: 3 }[hook] ?? 1;
}

/**
 * A delay's bar from `at`: cut short by `cut`, or over at `over` (the event that shows it
 * ended), or still being waited — which the events decide, not the clock; `now` only says
 * how much of it is drawn.
 */
function delayBar(at, length, cut, over, now, whose) {
  if (cut && cut.Time >= at) {
    return { kind: "delay-cut", at, length: cut.Time - at, label: `${whose} delay ${duration(length)} cut short after ${duration(cut.Time - at)}` };
  }
  if (over !== undefined && over !== null) {
    const waited = Math.max(0, over - at);
    const label = waited + 5e7 < length ? `${whose} delay ${duration(length)} ended after ${duration(waited)}` : `${whose} delay ${duration(length)} waited`;
    return { kind: "delay-waited", at, length: Math.min(waited, length || waited), label };
  }
  return {
    kind: "delay-waited", at, length: Math.min(Math.max(0, now - at), length), running: true, end: at + length,
    label: `${whose} delay ${duration(length)} waiting`,
  };
}

const LABEL_WIDTH = 230;
const PLOT_WIDTH = 740;
const LANE_TOP = 18;
const ROW_HEIGHT = 12;
const CHAR_WIDTH = 5.6;

/** Each mark's label row and anchor, so that no two labels of a lane overlap. */
function placeLabels(marks, x) {
  const rowEnds = [];
  return [...marks].sort((a, b) => a.at - b.at).map((mark) => {
    const mx = x(mark.at);
    const width = mark.label.length * CHAR_WIDTH;
    const right = mx > LABEL_WIDTH + PLOT_WIDTH * 0.6;
    const [from, to] = right ? [mx - width, mx] : [mx, mx + width];
    let row = rowEnds.findIndex((end) => end < from - 4);
    if (row < 0) row = rowEnds.push(0) - 1;
    rowEnds[row] = to;
    return { mark, mx, row, anchor: right ? "end" : "start" };
  });
}

/** The drawing of the stops of `allocs`, with the list of its marks; null if none stopped. */
export function timeline(allocs, now) {
  let stops = allocs.map((a) => stopMarks(a, now)).filter(Boolean);
  if (stops.length === 0) return null;
  // Stops of one moment on one axis: those that began within ten minutes of the latest.
  const latest = Math.max(...stops.map((st) => st.start));
  stops = stops.filter((st) => st.start >= latest - 600e9);
  const start = Math.min(...stops.map((st) => st.start));
  const lanes = stops.flatMap((st) => st.lanes);
  const ends = lanes.flatMap((l) => l.marks.map((m) => Math.max(m.at + (m.length || 0), m.end || 0)));
  const span = Math.max(1e9, Math.max(...ends) - start) * 1.05;
  const x = (t) => LABEL_WIDTH + ((t - start) / span) * PLOT_WIDTH;
  const width = LABEL_WIDTH + PLOT_WIDTH + 20;

  const svg = s("svg", { class: "tl", role: "img", "aria-label": "Timeline of the stop: one lane per group and task" });
  let y = LANE_TOP;
  for (const lane of lanes) {
    const placed = placeLabels(lane.marks, x);
    const rows = Math.max(1, ...placed.map((p) => p.row + 1));
    const g = s("g", { class: "tl-lane", "data-lane": lane.name });
    g.append(
      s("text", { class: "tl-lane-label", x: 4, y: y + 4 }, lane.name),
      s("line", { class: "tl-lane-line", x1: LABEL_WIDTH, x2: LABEL_WIDTH + PLOT_WIDTH, y1: y, y2: y }),
    );
    for (const p of placed) g.append(drawMark(p, y, x, lane.name, start));
    svg.append(g);
    y += 22 + rows * ROW_HEIGHT;
  }
  // The axis: seconds since the stop began.
  const axisY = y - 4;
  const axis = s("g", { class: "tl-axis" }, s("line", { x1: LABEL_WIDTH, x2: LABEL_WIDTH + PLOT_WIDTH, y1: axisY, y2: axisY }));
  const step = niceStep(span / 1e9);
  for (let t = 0; t <= span / 1e9; t += step) {
    const tx = x(start + t * 1e9);
    axis.append(
      s("line", { x1: tx, x2: tx, y1: axisY, y2: axisY + 4 }),
      s("text", { x: tx, y: axisY + 16, "text-anchor": "middle" }, `${+t.toFixed(2)} s`),
    );
  }
  axis.append(s("text", { x: 4, y: axisY + 16 }, "since the stop began"));
  svg.append(axis);
  svg.setAttribute("viewBox", `0 0 ${width} ${axisY + 24}`);

  const list = h("ol", { class: "tl-list" }, lanes
    .flatMap((lane) => lane.marks.map((m) => ({ lane: lane.name, ...m })))
    .sort((a, b) => a.at - b.at)
    .map((m) => h("li", { "data-lane": m.lane, "data-kind": m.kind, "data-t": ((m.at - start) / 1e6).toFixed(1) },
      h("span", { class: "tl-when" }, `+${((m.at - start) / 1e9).toFixed(3)} s`), " ",
      h("span", { class: "tl-who" }, m.lane), " — ", m.label)));
  return h("figure", { class: "timeline" }, svg, legend(), h("figcaption", {}, "Every mark, in time order:"), list);
}

function drawMark({ mark, mx, row, anchor }, y, x, lane, start) {
  const attrs = { class: `tl-ev tl-ev-${mark.kind}`, "data-kind": mark.kind, "data-lane": lane, "data-t": ((mark.at - start) / 1e6).toFixed(1) };
  const g = s("g", attrs, s("title", {}, mark.label));
  switch (mark.kind) {
    case "deregistered":
      g.append(s("rect", { x: mx - 5, y: y - 5, width: 10, height: 10 }));
      break;
    case "delay-waited":
    case "delay-cut": {
      const end = x(mark.at + mark.length);
      g.append(s("rect", { class: mark.running ? "tl-bar tl-running" : "tl-bar", x: mx, y: y - 4, width: Math.max(1, end - mx), height: 8 }));
      if (mark.kind === "delay-cut") g.append(s("line", { class: "tl-stop", x1: end, x2: end, y1: y - 9, y2: y + 9 }));
      if (mark.running) g.append(s("rect", { class: "tl-bar-rest", x: end, y: y - 4, width: Math.max(1, x(mark.end) - end), height: 8 }));
      break;
    }
    case "delay-skipped":
      g.append(s("line", { class: "tl-skip", x1: mx, x2: mx, y1: y - 9, y2: y + 9 }));
      break;
    case "signal":
      g.append(s("polygon", { points: `${mx - 6},${y - 7} ${mx + 6},${y - 7} ${mx},${y + 4}` }));
      break;
    case "sigkill":
      g.append(s("path", { d: `M${mx - 5},${y - 5}L${mx + 5},${y + 5}M${mx - 5},${y + 5}L${mx + 5},${y - 5}` }));
      break;
    default: // exit, poststop
      g.append(s("circle", { cx: mx, cy: y, r: 5 }));
  }
  g.append(s("text", { class: "tl-label", x: mx, y: y + 19 + row * ROW_HEIGHT, "text-anchor": anchor }, mark.label));
  return g;
}

function legend() {
  const item = (kind, shape, words) => h("li", { class: `tl-key tl-ev-${kind}` }, s("svg", { viewBox: "-8 -8 16 16", width: 16, height: 16, "aria-hidden": "true" }, shape), ` ${words}`);
  return h("ul", { class: "tl-legend" },
    item("deregistered", s("rect", { x: -5, y: -5, width: 10, height: 10 }), "services deregistered"),
    item("delay-waited", s("rect", { class: "tl-bar", x: -7, y: -3, width: 14, height: 6 }), "delay waited"),
    item("delay-cut", s("line", { class: "tl-stop", x1: 0, x2: 0, y1: -7, y2: 7 }), "delay cut short"),
    item("delay-skipped", s("line", { class: "tl-skip", x1: 0, x2: 0, y1: -7, y2: 7 }), "delay skipped"),
    item("signal", s("polygon", { points: "-6,-6 6,-6 0,5" }), "kill signal sent"),
    item("sigkill", s("path", { d: "M-5,-5L5,5M-5,5L5,-5" }), "SIGKILL"),
    item("exit", s("circle", { r: 5 }), "exit / poststop started"));
}

function niceStep(seconds) {
  for (const step of [0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600]) {
    if (seconds / step <= 10) return step;
  }
  return 3600;
}

/** The delay an allocation is waiting now, if any: `{whose, end}` (Unix ns). */
export function delayWaiting(alloc, now) {
  const marks = stopMarks(alloc, now);
  if (!marks) return null;
  for (const lane of marks.lanes) {
    for (const mark of lane.marks) {
      if (mark.running) return { lane: lane.name, end: mark.end, label: mark.label };
    }
  }
  return null;
}
