// The operator's actions, each behind a confirmation that says in plain numbers what will
// happen, and each sent as Nomad's own clients send it. What the API answers is shown as
// it worded it.

import { h, errorBox } from "./dom.js";
import { write, seg, get } from "./api.js";
import { duration, plural } from "./format.js";

/** Nomad's words for what the flag costs (`job stop -help`). */
export const FLAG_WARNING =
  "Ignoring the group and task shutdown_delay means there is no delay between service " +
  "deregistration and task shutdown: open network connections to the allocations being " +
  "stopped will fail.";

/** What a stop of `group` waits, in words: "waits 30s after deregistering …". */
export function delayWords(group) {
  const parts = [];
  const services = (group.Services || []).length;
  if (group.ShutdownDelay) {
    parts.push(`waits ${duration(group.ShutdownDelay)} after deregistering the group's ` +
      `${services === 1 ? "service" : plural(services, "service")}`);
  }
  for (const task of group.Tasks || []) {
    if (task.ShutdownDelay) parts.push(`${duration(task.ShutdownDelay)} for task ${task.Name}`);
  }
  if (parts.length === 0) return `group ${group.Name} has no shutdown_delay: its tasks are signalled once their services are deregistered`;
  return `group ${group.Name} ${parts.join(", then ")}`;
}

/** The delays a flagged stop of `group` skips, in words. */
export function skippedWords(group) {
  const skipped = [];
  if (group.ShutdownDelay) skipped.push(`group ${group.Name}'s ${duration(group.ShutdownDelay)}`);
  for (const task of group.Tasks || []) {
    if (task.ShutdownDelay) skipped.push(`task ${task.Name}'s ${duration(task.ShutdownDelay)}`);
  }
  return skipped.length ? `skips ${skipped.join(" and ")}` : `skips nothing (group ${group.Name} has no delay)`;
}

/** What the tasks get once their delays are over. */
export function killWords(group) {
  return (group.Tasks || [])
    .filter((t) => !(t.Lifecycle && t.Lifecycle.Hook === "poststop"))
    .map((t) => `${t.Name} gets ${t.KillSignal || "SIGINT"}, then SIGKILL after ${duration(t.KillTimeout || 5e9)} if still running`)
    .join("; ");
}

let dialog = null;

/**
 * Asks before acting: a modal with `title`, the `lines` that say what will happen, and a
 * button `verb`. `act()` runs on confirmation; its error is shown in the dialog, as worded.
 * `extra` is an optional form part (a select, a checkbox) read by `act`.
 */
export function confirmAction({ title, lines, verb, danger, extra, act }) {
  if (dialog) dialog.remove();
  const status = h("div", { class: "dialog-status", "aria-live": "polite" });
  const go = h("button", { type: "button", class: danger ? "danger" : "primary", "data-confirm": "" }, verb);
  const cancel = h("button", { type: "button", "data-cancel": "" }, "Cancel");
  const mine = h("dialog", { class: "confirm", "aria-label": title },
    h("h2", {}, title),
    lines.filter(Boolean).map((line) => h("p", {}, line)),
    extra || null,
    status,
    h("div", { class: "dialog-buttons" }, cancel, go));
  dialog = mine;
  document.body.append(mine);
  cancel.addEventListener("click", () => mine.close());
  mine.addEventListener("close", () => {
    mine.remove();
    if (dialog === mine) dialog = null;
  });
  go.addEventListener("click", async () => {
    go.disabled = true;
    status.replaceChildren("Sending…");
    try {
      const done = await act();
      status.replaceChildren(done || "Done.");
      setTimeout(() => mine.open && mine.close(), 400);
    } catch (error) {
      status.replaceChildren(errorBox(error));
      go.disabled = false;
    }
  });
  mine.showModal();
  go.focus();
}

/** `DELETE /v1/job/:id`, with `purge` and `no_shutdown_delay` as asked. */
export function stopJob(jobId, { purge, flag }) {
  const query = [purge && "purge=true", flag && "no_shutdown_delay=true"].filter(Boolean).join("&");
  return write("DELETE", `/v1/job/${seg(jobId)}${query ? `?${query}` : ""}`);
}

/**
 * Start: the stored job submitted again with `Stop = false`, as Nomad's UI does. The
 * stored job never held the flag, so its delays are back.
 */
export async function startJob(jobId) {
  const { data: job } = await get(`/v1/job/${seg(jobId)}`);
  job.Stop = false;
  return write("POST", "/v1/jobs", { Job: job });
}

/** `POST /v1/allocation/:id/stop`, flagged or not. */
export function stopAlloc(allocId, flag) {
  return write("POST", `/v1/allocation/${seg(allocId)}/stop${flag ? "?no_shutdown_delay=true" : ""}`);
}

/** An in-place restart of one task or all, flagged or not. */
export function restartAlloc(allocId, { task, flag }) {
  const body = task ? { TaskName: task, NoShutdownDelay: flag } : { AllTasks: true, NoShutdownDelay: flag };
  return write("POST", `/v1/client/allocation/${seg(allocId)}/restart`, body);
}

/** Each running task of `alloc` with its count of restarts. */
function starts(alloc) {
  const counts = {};
  for (const [name, state] of Object.entries(alloc.TaskStates || {})) {
    if (state.State === "running") counts[name] = state.Restarts || 0;
  }
  return counts;
}

/**
 * `job restart` in the browser: the job's running allocations restarted in place, `size`
 * at a time, each batch's tasks running again before the next (Nomad's CLI does the same;
 * its default batch is 1). `progress(text)` is told each step.
 */
export async function restartJob(jobId, { flag, size }, progress) {
  const { data: allocs } = await get(`/v1/job/${seg(jobId)}/allocations`);
  const running = allocs.filter((a) => a.ClientStatus === "running" && a.DesiredStatus === "run");
  if (running.length === 0) throw new Error("no running allocation to restart");
  for (let i = 0; i < running.length; i += size) {
    const batch = running.slice(i, i + size);
    progress(`Restarting ${Math.min(i + size, running.length)} of ${running.length}…`);
    const before = await Promise.all(batch.map(async (a) => starts((await get(`/v1/allocation/${seg(a.ID)}`)).data)));
    await Promise.all(batch.map((a) => restartAlloc(a.ID, { flag })));
    await Promise.all(batch.map((a, j) => runningAgain(a.ID, before[j])));
  }
  return `Restarted ${plural(running.length, "allocation")}.`;
}

/** Waits (at most 10 minutes) until every task that ran in `before` runs again. */
async function runningAgain(allocId, before) {
  const deadline = Date.now() + 600e3;
  while (Date.now() < deadline) {
    const { data: alloc } = await get(`/v1/allocation/${seg(allocId)}`);
    if (alloc.ClientStatus !== "running" && alloc.ClientStatus !== "pending") return;
    const now = alloc.TaskStates || {};
    const again = ([task, count]) => now[task] && now[task].State === "running" && (now[task].Restarts || 0) > count;
    if (Object.entries(before).every(again)) return;
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  throw new Error(`allocation ${allocId.slice(0, 8)} did not run again within 10 minutes`);
}
