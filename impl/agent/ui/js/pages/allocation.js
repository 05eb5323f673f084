// `/ui/allocations/<id>`: the allocation's tasks with their states and events, the group's
// and each task's services with their registration state, its node and its previous and
// next allocations, and its stop drawn as a timeline; the actions Stop and Restart (with or
// without the shutdown delay, one task or all) and Skip the remaining delay.

import { h, fill, link, table, badge, facts } from "../dom.js";
import { get, seg, agentNow } from "../api.js";
import { duration, when, short, seconds } from "../format.js";
import { can } from "../access.js";
import { timeline, delayWaiting } from "../timeline.js";
import { confirmAction, stopAlloc, restartAlloc, delayWords, skippedWords, FLAG_WARNING } from "../actions.js";
import { menu, tick } from "./job.js";

const now = agentNow;

export default {
  title: ([id]) => `Allocation ${short(id)}`,
  async render(view, ctx) {
    const [id] = ctx.params;
    let alloc = null;
    let services = [];
    const load = async () => {
      const answer = await get(`/v1/allocation/${seg(id)}`, ctx.signal);
      const record = answer.data;
      let registered = [];
      try {
        registered = (await get(`/v1/job/${seg(record.JobID)}/services`, ctx.signal)).data || [];
      } catch (error) {
        // A purged job has no services left; a page being left stops here.
        if (ctx.signal.aborted) throw error;
      }
      [alloc, services] = [record, registered];
      return answer.index;
    };
    const head = h("div", { class: "page-head" });
    const actions = h("div", { class: "actions" });
    const rest = h("div", {});
    fill(view, head, actions, rest);
    const draw = () => {
      const parts = page(alloc, services);
      fill(head, ...parts.head);
      drawActions(actions, alloc, parts.group, parts.tasks, parts.waiting, ctx);
      fill(rest, ...parts.rest);
    };
    const index = await load();
    draw();
    ctx.every(200, () => tick(view));
    ctx.live([`Allocation:${alloc.ID}`, `Job:${alloc.JobID}`, `Service:${alloc.JobID}`], index + 1, async () => { await load(); draw(); });
  },
};

function page(alloc, registered) {
  const job = alloc.Job || {};
  const group = (job.TaskGroups || []).find((g) => g.Name === alloc.TaskGroup) || { Name: alloc.TaskGroup };
  const tasks = group.Tasks || [];
  const mine = registered.filter((r) => r.AllocID === alloc.ID);
  const drawing = timeline([alloc], now());
  const waiting = delayWaiting(alloc, now());
  return {
    group,
    tasks,
    waiting,
    head: [
      h("h1", {}, `Allocation ${short(alloc.ID)} `, badge(alloc.ClientStatus)),
      facts([
        ["Name", alloc.Name],
        ["Job", link(`/ui/jobs/${encodeURIComponent(alloc.JobID)}@default`, alloc.JobID)],
        ["Job version", String(alloc.JobVersion ?? (job.Version ?? ""))],
        ["Client", link(`/ui/clients/${encodeURIComponent(alloc.NodeID)}`, alloc.NodeName || short(alloc.NodeID))],
        ["Desired", `${alloc.DesiredStatus}${alloc.DesiredDescription ? ` (${alloc.DesiredDescription})` : ""}`],
        ["Client status", alloc.ClientDescription ? `${alloc.ClientStatus}: ${alloc.ClientDescription}` : alloc.ClientStatus],
        ["Previous allocation", alloc.PreviousAllocation ? link(`/ui/allocations/${encodeURIComponent(alloc.PreviousAllocation)}`, short(alloc.PreviousAllocation)) : "none"],
        ["Next allocation", alloc.NextAllocation ? link(`/ui/allocations/${encodeURIComponent(alloc.NextAllocation)}`, short(alloc.NextAllocation)) : "none"],
        ["Created", when(alloc.CreateTime)],
        ["Modified", when(alloc.ModifyTime)],
      ]),
    ],
    rest: [
      waiting ? h("p", { class: "waiting", role: "status" }, `${waiting.lane}: ${waiting.label}, `, h("span", { class: "countdown", "data-deadline": String(waiting.end) }, `${seconds(waiting.end - now())} left`)) : null,
      h("h2", {}, "Services"),
      table([
        ["Service", (s) => s.name],
        ["Of", (s) => s.of],
        ["Registration", (s) => badge(s.state)],
        ["Address", (s) => s.address],
      ], serviceRows(alloc, group, tasks, mine), (s) => ({ "data-service": s.name, "data-state": s.state })),
      h("h2", {}, "Tasks"),
      Object.keys(alloc.TaskStates || {}).sort().map((name) => taskSection(name, alloc.TaskStates[name], tasks.find((t) => t.Name === name) || {})),
      h("h2", {}, "The stop"),
      drawing || h("p", { class: "muted" }, "This allocation has not been stopped."),
    ],
  };
}

/** The group's and each task's services, registered now or not. */
function serviceRows(alloc, group, tasks, mine) {
  const state = (name) => {
    const found = mine.find((r) => r.ServiceName === name);
    return found ? { state: "registered", address: `${found.Address}:${found.Port}` } : { state: "deregistered", address: "" };
  };
  const live = alloc.ClientStatus === "running" || alloc.ClientStatus === "pending";
  const rows = [];
  for (const service of group.Services || []) rows.push({ name: service.Name, of: `group ${group.Name}`, ...state(service.Name) });
  for (const task of tasks) {
    for (const service of task.Services || []) rows.push({ name: service.Name, of: `task ${task.Name}`, ...state(service.Name) });
  }
  return rows.map((r) => (r.state === "deregistered" && live && alloc.DesiredStatus === "run" ? { ...r, state: "not registered" } : r));
}

function taskSection(name, state, spec) {
  return h("section", { class: "task", "data-task": name },
    h("h3", {}, `Task ${name} `, badge(state.State), state.Failed ? badge("failed") : null),
    facts([
      ["Lifecycle", (spec.Lifecycle && spec.Lifecycle.Hook) || "main"],
      ["shutdown_delay", duration(spec.ShutdownDelay || 0)],
      ["kill_timeout", duration(spec.KillTimeout || 5e9)],
      ["Restarts", String(state.Restarts || 0)],
      ["Started", when(state.StartedAt)],
      ["Finished", when(state.FinishedAt)],
    ]),
    table([
      ["Time", (e) => when(e.Time)],
      ["Type", (e) => e.Type],
      ["Description", (e) => e.DisplayMessage || e.Message || ""],
    ], [...(state.Events || [])].reverse(), (e) => ({ "data-event": e.Type })));
}

/** The allocation's actions, redrawn only when what they offer changes and no menu is open. */
function drawActions(bar, alloc, group, tasks, waiting, ctx) {
  const states = alloc.TaskStates || {};
  const running = tasks.filter((t) => states[t.Name] && states[t.Name].State === "running");
  const key = JSON.stringify([alloc.DesiredStatus, alloc.ClientStatus, running.map((t) => t.Name), Boolean(waiting), can("alloc-lifecycle")]);
  if (bar.dataset.key === key || bar.querySelector("details[open]")) return;
  bar.dataset.key = key;
  fill(bar, actions(alloc, group, tasks, running, waiting, ctx.signal));
}

function actions(alloc, group, tasks, running, waiting, leave) {
  if (!can("alloc-lifecycle")) return h("span", { class: "muted" }, "This token may only read this allocation.");
  const items = [];
  const live = alloc.DesiredStatus === "run" && !["complete", "failed", "lost"].includes(alloc.ClientStatus);
  if (live) {
    items.push(menu("Stop", [
      ["Stop", () => confirmAction({
        title: `Stop allocation ${short(alloc.ID)}`,
        lines: [`It ${delayWords(group)}; then its tasks get their kill signals. A replacement is placed, as for any stopped allocation of a running job.`],
        verb: "Stop", danger: true, leave,
        act: () => stopAlloc(alloc.ID, false).then(() => "Stopping."),
      })],
      ["Stop without shutdown delay", () => confirmAction({
        title: `Stop allocation ${short(alloc.ID)} without shutdown delay`,
        lines: [`It ${skippedWords(group)}: services are deregistered and its tasks signalled at once.`, FLAG_WARNING,
          "The flag is not stored: its replacement waits its delays when it is stopped in turn."],
        verb: "Stop now", danger: true, leave,
        act: () => stopAlloc(alloc.ID, true).then(() => "Stopping without the delays."),
      })],
    ]));
    const restart = (task, flag) => () => confirmAction({
      title: `Restart ${task ? `task ${task.Name}` : "all tasks"} of ${short(alloc.ID)}${flag ? " without shutdown delay" : ""}`,
      lines: [task
        ? `Task ${task.Name} is restarted in place; ${flag ? `its ${duration(task.ShutdownDelay || 0)} delay is skipped.` : `it waits its ${duration(task.ShutdownDelay || 0)} delay first.`}`
        : `Every task is restarted in place; ${flag ? skippedWords({ ...group, ShutdownDelay: 0 }) : `each waits its own delay (${tasks.map((t) => `${t.Name} ${duration(t.ShutdownDelay || 0)}`).join(", ")})`}.`,
      flag ? FLAG_WARNING : null],
      verb: "Restart", danger: true, leave,
      act: () => restartAlloc(alloc.ID, { task: task && task.Name, flag }).then(() => "Restarting."),
    });
    items.push(menu("Restart", [
      ["Restart all tasks", restart(null, false)],
      ["Restart all tasks without shutdown delay", restart(null, true)],
      ...running.flatMap((t) => [[`Restart task ${t.Name}`, restart(t, false)], [`Restart task ${t.Name} without shutdown delay`, restart(t, true)]]),
    ]));
  }
  if (waiting && alloc.DesiredStatus !== "run") {
    items.push(h("button", { type: "button", class: "danger", "data-action": "Skip the remaining delay", onclick: () => confirmAction({
      title: "Skip the remaining delay",
      lines: [`${waiting.lane} is waiting: ${waiting.label}. A stop without shutdown delay on top of this one cuts it short: the tasks get their kill signals now, and the events say "cut short".`, FLAG_WARNING],
      verb: "Skip the remaining delay", danger: true, leave,
      act: () => stopAlloc(alloc.ID, true).then(() => "Cut short."),
    }) }, "Skip the remaining delay"));
  }
  return items.length ? items : h("span", { class: "muted" }, "Nothing to do: this allocation has ended.");
}
