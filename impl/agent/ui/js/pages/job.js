// `/ui/jobs/<id>` (and its `allocations`, `versions`, `definition` tabs, Nomad's paths): the
// job's groups and tasks with their delays, its allocations with any stop in progress
// counted down, its versions with what changed, its stored definition; and the actions:
// Stop (with or without the shutdown delay, purge or not), Start, Restart all allocations,
// and Skip the remaining delay while a stop waits.

import { h, fill, link, table, badge, facts } from "../dom.js";
import { get, seg, agentNow } from "../api.js";
import { duration, when, short, plural, seconds } from "../format.js";
import { can } from "../access.js";
import { timeline, delayWaiting } from "../timeline.js";
import {
  confirmAction, stopJob, startJob, stopAlloc, restartJob, delayWords, skippedWords, killWords, restartWords,
  FLAG_WARNING,
} from "../actions.js";

const now = agentNow;
/** At most this many stopped allocations are drawn on the job's timeline. */
const TIMELINE_ALLOCS = 6;

export default {
  title: ([id]) => id,
  async render(view, ctx) {
    const [id, tab = "overview"] = ctx.params;
    const base = `/ui/jobs/${encodeURIComponent(id)}@default`;
    const header = h("div", { class: "page-head" });
    const actions = h("div", { class: "actions" });
    const body = h("div", { class: "tab-body" });
    const tabs = h("nav", { class: "tabs", "aria-label": "Job sections" },
      [["overview", "Overview", base], ["allocations", "Allocations", `${base}/allocations`],
        ["versions", "Versions", `${base}/versions`], ["evaluations", "Evaluations", `${base}/evaluations`],
        ["definition", "Definition", `${base}/definition`]]
        .map(([key, label, path]) => h("a", { href: path, "data-link": "", "aria-current": key === tab ? "page" : undefined }, label)));
    fill(view, header, actions, tabs, body);

    let state = null;
    const load = async () => {
      const [job, allocs] = await Promise.all([
        get(`/v1/job/${seg(id)}`, ctx.signal),
        get(`/v1/job/${seg(id)}/allocations`, ctx.signal),
      ]);
      // Every version kept: an allocation's delays are its own version's.
      const versions = (await get(`/v1/job/${seg(id)}/versions?diffs=${tab === "versions"}`, ctx.signal)).data;
      const extra = {};
      if (tab === "evaluations") extra.evaluations = (await get(`/v1/job/${seg(id)}/evaluations`, ctx.signal)).data;
      if (tab === "overview") extra.stopped = await stoppedAllocs(allocs.data, ctx.signal);
      const specs = new Map((versions.Versions || []).map((v) => [v.Version, v]));
      state = { job: job.data, allocs: allocs.data, versions, specOf: (a) => specs.get(a.JobVersion) || job.data, ...extra };
      return Math.max(job.index, allocs.index);
    };
    const draw = () => {
      const { job, allocs } = state;
      fill(header,
        h("h1", {}, job.Name, " ", badge(job.Status)),
        facts([["Type", job.Type], ["Version", String(job.Version)], ["Submitted", when(job.SubmitTime)],
          ["Stopped", job.Stop ? "yes (Start submits it again)" : "no"]]));
      drawActions(actions, job, allocs, state.specOf, ctx);
      if (tab === "overview") fill(body, overview(job, allocs, state.stopped, state.specOf, ctx));
      else if (tab === "allocations") fill(body, allocationTable(allocs, state.specOf, ctx));
      else if (tab === "versions") fill(body, versions(state.versions));
      else if (tab === "evaluations") fill(body, evaluationTable(state.evaluations));
      else fill(body, h("pre", { class: "definition" }, JSON.stringify(job, null, 2)));
    };
    const index = await load();
    draw();
    ctx.every(200, () => tick(view));
    ctx.live([`Job:${id}`, `Allocation:${id}`], index + 1, async () => { await load(); draw(); });
  },
};

/** The full records of the job's most recently stopped allocations (their timelines). */
async function stoppedAllocs(stubs, signal) {
  const stopping = stubs
    .filter((a) => Object.values(a.TaskStates || {}).some((t) => (t.Events || []).some((e) => e.Type === "Killing" || /shutdown delay/i.test(e.Type))))
    .sort((a, b) => b.ModifyIndex - a.ModifyIndex)
    .slice(0, TIMELINE_ALLOCS);
  return Promise.all(stopping.map(async (a) => (await get(`/v1/allocation/${seg(a.ID)}`, signal)).data));
}

/** Counts down every `[data-deadline]` of the page (the agent's clock). */
export function tick(view) {
  for (const element of view.querySelectorAll("[data-deadline]")) {
    const left = Number(element.dataset.deadline) - now();
    element.textContent = left > 0 ? `${seconds(left)} left` : "ending";
  }
}

function countdown(deadline) {
  return h("span", { class: "countdown", "data-deadline": String(deadline) }, `${seconds(deadline - now())} left`);
}

function overview(job, allocs, stopped, specOf, ctx) {
  const groups = job.TaskGroups || [];
  const tasks = groups.flatMap((g) => (g.Tasks || []).map((t) => ({ group: g.Name, ...t })));
  const drawing = timeline(stopped || [], now());
  return [
    h("h2", {}, "Task groups"),
    table([
      ["Group", (g) => g.Name],
      ["Count", (g) => String(g.Count)],
      ["shutdown_delay", (g) => duration(g.ShutdownDelay || 0)],
      ["Services", (g) => (g.Services || []).map((s) => s.Name).join(", ") || "none"],
      ["A stop", (g) => delayWords(g)],
    ], groups),
    h("h2", {}, "Tasks"),
    table([
      ["Task", (t) => t.Name],
      ["Group", (t) => t.group],
      ["Lifecycle", (t) => (t.Lifecycle && t.Lifecycle.Hook) || "main"],
      ["shutdown_delay", (t) => duration(t.ShutdownDelay || 0)],
      ["kill_timeout", (t) => duration(t.KillTimeout || 5e9)],
      ["kill_signal", (t) => t.KillSignal || "SIGINT"],
      ["Services", (t) => (t.Services || []).map((s) => s.Name).join(", ") || "none"],
    ], tasks),
    h("h2", {}, "Allocations"),
    allocationTable(allocs, specOf, ctx),
    h("h2", {}, "Stops"),
    drawing || h("p", { class: "muted" }, "No allocation of this job has been stopped yet."),
  ];
}

function allocationTable(allocs, specOf, ctx) {
  const sorted = [...allocs].sort((a, b) => b.CreateIndex - a.CreateIndex);
  return table([
    ["ID", (a) => link(`/ui/allocations/${encodeURIComponent(a.ID)}`, short(a.ID))],
    ["Name", (a) => a.Name],
    ["Version", (a) => String(a.JobVersion)],
    ["Desired", (a) => a.DesiredStatus],
    ["Status", (a) => badge(a.ClientStatus)],
    ["Stop", (a) => stopCell(a, specOf(a), ctx)],
    ["Created", (a) => when(a.CreateTime)],
    ["Modified", (a) => when(a.ModifyTime)],
  ], sorted, (a) => ({ "data-alloc": a.ID }));
}

/** A stop in progress: which delay is being waited, how long is left, and Skip. */
function stopCell(alloc, job, ctx) {
  const waiting = delayWaiting({ ...alloc, Job: job }, now());
  if (!waiting) return alloc.DesiredStatus === "run" ? "" : "stopped";
  // A restart's delay is counted down too, but Skip is a stop's: a flagged stop on top.
  const skip = can("alloc-lifecycle") && alloc.DesiredStatus !== "run" && h("button", { type: "button", class: "danger small", "data-skip": alloc.ID, onclick: () => confirmAction({
    title: `Skip the remaining delay of ${alloc.Name}`,
    lines: [`${waiting.label}: a stop without shutdown delay on top of this one cuts it short, and the tasks of ${short(alloc.ID)} get their kill signals now. The other allocations go on waiting.`, FLAG_WARNING],
    verb: "Skip the remaining delay", danger: true, leave: ctx.signal,
    act: () => stopAlloc(alloc.ID, true).then(() => "Cut short."),
  }) }, "Skip");
  return h("span", { class: "waiting" }, `${waiting.label}: `, countdown(waiting.end), " ", skip);
}

/**
 * The job's actions. Redrawn only when what they offer changes, and never while a menu is
 * open: a live update must not close a menu under the operator's cursor.
 */
function drawActions(bar, job, allocs, specOf, ctx) {
  const write = can("submit-job");
  const lifecycle = can("alloc-lifecycle");
  const live = allocs.filter((a) => a.DesiredStatus === "run" && !["complete", "failed", "lost"].includes(a.ClientStatus));
  const waiting = allocs.map((a) => delayWaiting({ ...a, Job: specOf(a) }, now())).filter(Boolean);
  const key = JSON.stringify([job.Version, job.Stop, live.length, waiting.length > 0, write, lifecycle]);
  if (bar.dataset.key === key || bar.querySelector("details[open]")) return;
  bar.dataset.key = key;
  const groups = job.TaskGroups || [];
  const leave = ctx.signal;
  const items = [];
  const purge = (flag) => () => confirmAction({
    title: `Purge job ${job.Name}${flag ? " without shutdown delay" : ""}`,
    lines: [live.length
      ? `Stops ${plural(live.length, "allocation")}, ${flag ? `now (${groups.map(skippedWords).join("; ")})` : `each waiting its delays (${groups.map(delayWords).join("; ")})`}, and removes the job from the agent.`
      : "Removes the stopped job, with its versions, from the agent.",
    "It cannot be started again from here.", flag ? FLAG_WARNING : null],
    verb: "Purge", danger: true, leave,
    act: () => stopJob(job.ID, { purge: true, flag }).then(() => { ctx.navigate("/ui/jobs"); return "Purged."; }),
  });
  if (write && !job.Stop) {
    items.push(menu("Stop", [
      ["Stop", () => confirmAction({
        title: `Stop job ${job.Name}`,
        lines: [`Stops ${plural(live.length, "allocation")}. In each, ${groups.map(delayWords).join("; ")}.`,
          `Then ${groups.map(killWords).join("; ")}.`],
        verb: "Stop", danger: true, leave,
        act: () => stopJob(job.ID, {}).then(() => "Stopping: the delays are being waited."),
      })],
      ["Stop without shutdown delay", () => confirmAction({
        title: `Stop job ${job.Name} without shutdown delay`,
        lines: [`Stops ${plural(live.length, "allocation")} now: ${groups.map(skippedWords).join("; ")}. ` +
          "Services are still deregistered first and every pre-stop hook still runs.", FLAG_WARNING,
        "The stored job is not changed: Start runs it again with its delays."],
        verb: "Stop now", danger: true, leave,
        act: () => stopJob(job.ID, { flag: true }).then(() => "Stopping without the delays."),
      })],
      ["Purge", purge(false)],
      ["Purge without shutdown delay", purge(true)],
    ]));
  }
  if (write && job.Stop) {
    items.push(h("button", { type: "button", class: "primary", "data-action": "Start", onclick: () => confirmAction({
      title: `Start job ${job.Name}`,
      lines: [`Submits the stored job (version ${job.Version}) again with Stop = false: a new version, the same definition.`,
        `Its delays are back, for the next stop: ${groups.map(delayWords).join("; ")}.`],
      verb: "Start", leave,
      act: () => startJob(job.ID).then(() => "Submitted."),
    }) }, "Start"));
    items.push(menu("Purge", [["Purge", purge(false)], ...(live.length || waiting.length ? [["Purge without shutdown delay", purge(true)]] : [])]));
  }
  if (lifecycle && live.length) {
    const restart = (flag) => () => {
      const size = h("input", { type: "number", min: 1, max: live.length, value: 1, name: "batch-size", "aria-label": "Allocations per batch" });
      confirmAction({
        title: `Restart all allocations of ${job.Name}${flag ? " without shutdown delay" : ""}`,
        lines: [`Restarts ${plural(live.length, "running allocation")} in place, a batch at a time; each batch's tasks run again before the next. Closing this dialog stops after the current batch.`,
          `In each, ${groups.map((g) => restartWords(g, flag)).join("; ")}.`,
          flag ? FLAG_WARNING : null],
        extra: h("label", { class: "field" }, "Allocations per batch ", size),
        verb: "Restart", danger: true, leave,
        act: (run) => restartJob(job.ID, { flag, size: Math.max(1, Math.floor(Number(size.value)) || 1) }, run),
      });
    };
    items.push(menu("Restart", [["Restart all allocations", restart(false)], ["Restart all allocations without shutdown delay", restart(true)]]));
  }
  if (write && job.Stop && waiting.length) {
    items.push(h("button", { type: "button", class: "danger", "data-action": "Skip the remaining delay", onclick: () => confirmAction({
      title: "Skip the remaining delay",
      lines: [`${plural(waiting.length, "allocation")} of ${job.Name} still wait a shutdown delay. ` +
        "A stop without shutdown delay on top of this one cuts each short: its tasks get their kill signals now, and the events say \"cut short\".", FLAG_WARNING],
      verb: "Skip the remaining delay", danger: true, leave,
      act: () => stopJob(job.ID, { flag: true }).then(() => "The delays were cut short."),
    }) }, "Skip the remaining delay"));
  }
  fill(bar, items.length ? items : h("span", { class: "muted" }, write || lifecycle ? "" : "This token may only read this job."));
}

/** A button that opens a short list of actions. */
export function menu(label, entries) {
  const list = h("div", { class: "menu-items", role: "menu" }, entries.map(([text, run]) =>
    h("button", { type: "button", role: "menuitem", "data-action": text, onclick: (event) => {
      event.target.closest("details").open = false;
      run();
    } }, text)));
  return h("details", { class: "menu" }, h("summary", { "data-menu": label }, label), list);
}

/** The job's versions, newest first, each with what changed from the one before. */
function versions(answer) {
  const list = answer.Versions || [];
  const diffs = answer.Diffs || [];
  return h("ol", { class: "versions" }, list.map((version, i) => h("li", { "data-version": String(version.Version) },
    h("h3", {}, `Version ${version.Version}`, version.Stop ? " (stopped)" : ""),
    facts([["Submitted", when(version.SubmitTime)], ["Stable", version.Stable ? "yes" : "no"]]),
    i < diffs.length && diffs[i] ? diffLines(diffs[i]) : h("p", { class: "muted" }, "The oldest version kept: nothing to compare it with."))));
}

/** A job diff (Nomad's `JobDiff`) as lines: `group web · task server: ShutdownDelay 2s → 5s`. */
function diffLines(diff) {
  const lines = [];
  const walk = (node, where) => {
    for (const field of node.Fields || []) {
      if (field.Type === "None") continue;
      lines.push(`${where}${field.Name}: ${field.Old || "(none)"} → ${field.New || "(none)"}`);
    }
    for (const object of node.Objects || []) walk(object, `${where}${object.Name} · `);
    for (const group of node.TaskGroups || []) walk(group, `${where}group ${group.Name} · `);
    for (const task of node.Tasks || []) walk(task, `${where}task ${task.Name} · `);
  };
  walk(diff, "");
  if (lines.length === 0) return h("p", { class: "muted" }, "No change from the version before.");
  return h("ul", { class: "diff" }, lines.map((line) => h("li", {}, line)));
}


/** The job's evaluations, newest first. */
function evaluationTable(evaluations) {
  return table([
    ["ID", (e) => short(e.ID)],
    ["Triggered by", (e) => e.TriggeredBy],
    ["Status", (e) => badge(e.Status)],
    ["Description", (e) => e.StatusDescription || ""],
    ["Created", (e) => when(e.CreateTime)],
  ], [...(evaluations || [])].sort((a, b) => b.CreateIndex - a.CreateIndex), (e) => ({ "data-eval": e.ID }));
}
