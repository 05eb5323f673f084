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

/** What an in-place restart of `group`'s tasks waits: each task's own delay, never the
 * group's (a restart deregisters no group service). */
export function restartWords(group, flag) {
  const tasks = (group.Tasks || []).filter((t) => !(t.Lifecycle && t.Lifecycle.Hook === "poststop"));
  const delayed = tasks.filter((t) => t.ShutdownDelay);
  if (delayed.length === 0) return "no task has a shutdown_delay: each is signalled once its services are deregistered";
  const words = delayed.map((t) => `task ${t.Name}'s ${duration(t.ShutdownDelay)}`).join(" and ");
  return flag ? `skips ${words}` : `waits ${words} after deregistering the task's services`;
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
 * button `verb`. `act({progress, signal})` runs on confirmation: `progress(text)` says how
 * far it got, `signal` aborts when the dialog is closed (Cancel, Esc) or the page is left;
 * its error is shown in the dialog, as the API worded it. `extra` is an optional form part
 * (a field) read by `act`.
 */
export function confirmAction({ title, lines, verb, danger, extra, act, leave }) {
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
  const stop = new AbortController();
  mine.addEventListener("close", () => {
    stop.abort();
    mine.remove();
    if (dialog === mine) dialog = null;
  });
  if (leave) leave.addEventListener("abort", () => mine.open && mine.close(), { once: true });
  go.addEventListener("click", async () => {
    go.disabled = true;
    status.replaceChildren("Sending…");
    try {
      const done = await act({ progress: (text) => status.replaceChildren(text), signal: stop.signal });
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
  const body = { Job: job, EnforceIndex: true, JobModifyIndex: job.JobModifyIndex };
  // The stopped version's source goes with it, as `quiesce job start` and Nomad's UI send
  // it, so that the new version keeps it; a job registered without one has none (404).
  try {
    body.Submission = (await get(`/v1/job/${seg(jobId)}/submission?version=${job.Version}`)).data;
  } catch (error) {
    if (error.status !== 404) throw error;
  }
  // EnforceIndex: a change made since the job was read is refused, not overwritten.
  return write("PUT", `/v1/job/${seg(jobId)}`, body);
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

/**
 * `job restart` in the browser: the job's running allocations restarted in place, `size`
 * at a time, each batch's tasks running again before the next (Nomad's CLI does the same;
 * its default batch is 1). `progress(text)` is told each step; `signal` stops it between
 * steps. A failure says how far it got.
 */
export async function restartJob(jobId, { flag, size }, { progress, signal }) {
  const { data: allocs } = await get(`/v1/job/${seg(jobId)}/allocations`);
  const running = allocs.filter((a) => a.ClientStatus === "running" && a.DesiredStatus === "run");
  if (running.length === 0) throw new Error("no running allocation to restart");
  let done = 0;
  try {
    for (let i = 0; i < running.length; i += size) {
      if (signal.aborted) throw new Error("cancelled");
      const batch = running.slice(i, i + size);
      progress(`Restarting ${batch.map((a) => a.Name).join(", ")} (${done} of ${running.length} done)…`);
      const records = await Promise.all(batch.map(async (a) => (await get(`/v1/allocation/${seg(a.ID)}`)).data));
      await Promise.all(batch.map((a) => restartAlloc(a.ID, { flag })));
      await Promise.all(records.map((record) => runningAgain(record, flag, signal)));
      done += batch.length;
    }
  } catch (error) {
    error.message = `${error.message} (after restarting ${done} of ${running.length} allocations)`;
    throw error;
  }
  return `Restarted ${plural(running.length, "allocation")}.`;
}

/**
 * Waits until every task that ran in `before` (an allocation's record) runs again after
 * one more restart, or its allocation has ended; gives up after the tasks' delays (unless
 * skipped) and kill timeouts plus five minutes.
 */
async function runningAgain(before, flag, signal) {
  const group = ((before.Job || {}).TaskGroups || []).find((g) => g.Name === before.TaskGroup) || {};
  const slowest = Math.max(0, ...(group.Tasks || []).map((t) => (flag ? 0 : t.ShutdownDelay || 0) + (t.KillTimeout || 5e9)));
  const deadline = Date.now() + slowest / 1e6 + 300e3;
  const counts = Object.entries(before.TaskStates || {})
    .filter(([, state]) => state.State === "running")
    .map(([task, state]) => [task, state.Restarts || 0]);
  while (Date.now() < deadline) {
    if (signal.aborted) throw new Error("cancelled");
    const { data: alloc } = await get(`/v1/allocation/${seg(before.ID)}`);
    if (alloc.ClientStatus !== "running" && alloc.ClientStatus !== "pending") return;
    const now = alloc.TaskStates || {};
    const again = ([task, count]) => now[task] && now[task].State === "running" && (now[task].Restarts || 0) > count;
    if (counts.every(again)) return;
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  throw new Error(`allocation ${before.Name} did not run again in time`);
}
