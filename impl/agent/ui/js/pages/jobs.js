// `/ui/jobs`: every job with its type, status, version and allocations by client status;
// filtered by name (`search`), `status` and `type`, sorted by `sort` (`desc`), as in
// Nomad's UI, so its bookmarks carry over.

import { h, fill, link, table, badge } from "../dom.js";
import { get, ApiError } from "../api.js";

const STATUSES = ["pending", "running", "dead"];
const TYPES = ["service", "batch", "system", "sysbatch"];
const CLIENT_STATUSES = ["running", "pending", "complete", "failed", "lost"];

/** One row, from `/v1/jobs/statuses` (with versions) or else `/v1/jobs`. */
function fromStatuses(job) {
  const counts = Object.fromEntries(CLIENT_STATUSES.map((s) => [s, 0]));
  for (const alloc of job.Allocs || []) {
    if (alloc.ClientStatus in counts) counts[alloc.ClientStatus] += 1;
  }
  return { id: job.ID, name: job.Name, type: job.Type, status: job.Status, version: job.Version, stop: job.Stop, counts };
}

function fromStub(job) {
  const counts = Object.fromEntries(CLIENT_STATUSES.map((s) => [s, 0]));
  for (const group of Object.values((job.JobSummary && job.JobSummary.Summary) || {})) {
    counts.running += group.Running || 0;
    counts.pending += (group.Starting || 0) + (group.Queued || 0);
    counts.complete += group.Complete || 0;
    counts.failed += group.Failed || 0;
    counts.lost += group.Lost || 0;
  }
  return { id: job.ID, name: job.Name, type: job.Type, status: job.Status, version: null, stop: job.Stop, counts };
}

async function load(signal) {
  try {
    const { data, index } = await get("/v1/jobs/statuses", signal);
    return { rows: data.map(fromStatuses), index };
  } catch (error) {
    if (!(error instanceof ApiError) || (error.status !== 404 && error.status !== 405)) throw error;
    const { data, index } = await get("/v1/jobs", signal);
    return { rows: data.map(fromStub), index };
  }
}

function allocationBar(counts) {
  const parts = CLIENT_STATUSES.filter((s) => counts[s] > 0);
  if (parts.length === 0) return h("span", { class: "muted" }, "none");
  return h("span", { class: "alloc-counts" }, parts.map((s) => h("span", { class: `count count-${s}`, "data-status": s }, `${counts[s]} ${s}`)));
}

export default {
  title: () => "Jobs",
  async render(view, ctx) {
    const query = ctx.query;
    const search = h("input", { type: "search", placeholder: "Filter by name", value: query.get("search") || "", "aria-label": "Filter jobs by name", name: "search" });
    const status = h("select", { "aria-label": "Status", name: "status" }, h("option", { value: "" }, "Any status"), STATUSES.map((s) => h("option", { value: s, selected: query.get("status") === s }, s)));
    const type = h("select", { "aria-label": "Type", name: "type" }, h("option", { value: "" }, "Any type"), TYPES.map((t) => h("option", { value: t, selected: query.get("type") === t }, t)));
    const list = h("div", { class: "list" });
    fill(view, h("h1", {}, "Jobs"), h("div", { class: "filters" }, search, status, type), list);

    let rows = [];
    const sortKeys = { name: (r) => r.name.toLowerCase(), type: (r) => r.type, status: (r) => r.status, version: (r) => r.version ?? -1 };
    const draw = () => {
      const q = new URLSearchParams(location.search);
      const words = (q.get("search") || "").toLowerCase();
      const sort = sortKeys[q.get("sort")] ? q.get("sort") : "name";
      const desc = q.get("desc") === "true";
      const shown = rows
        .filter((r) => !words || r.name.toLowerCase().includes(words) || r.id.toLowerCase().includes(words))
        .filter((r) => !q.get("status") || r.status === q.get("status"))
        .filter((r) => !q.get("type") || r.type === q.get("type"))
        .sort((a, b) => {
          const [x, y] = [sortKeys[sort](a), sortKeys[sort](b)];
          return (x < y ? -1 : x > y ? 1 : 0) * (desc ? -1 : 1);
        });
      const heading = (label, key) => {
        const active = sort === key;
        const next = new URLSearchParams(location.search);
        next.set("sort", key);
        next.set("desc", String(active ? !desc : false));
        return h("a", { href: `/ui/jobs?${next}`, "data-link": "", class: active ? "sorted" : "", "aria-sort": active ? (desc ? "descending" : "ascending") : undefined }, label, active ? (desc ? " ▼" : " ▲") : "");
      };
      fill(list, table([
        [heading("Name", "name"), (r) => link(`/ui/jobs/${encodeURIComponent(r.id)}@default`, r.name)],
        [heading("Type", "type"), (r) => r.type],
        [heading("Status", "status"), (r) => badge(r.status)],
        [heading("Version", "version"), (r) => (r.version === null ? "" : String(r.version))],
        ["Allocations", (r) => allocationBar(r.counts)],
      ], shown, (r) => ({ "data-job": r.id })), h("p", { class: "muted" }, `${shown.length} of ${rows.length} jobs`));
    };
    const refresh = async () => {
      rows = (await load(ctx.signal)).rows;
      draw();
    };
    const first = await load(ctx.signal);
    rows = first.rows;
    draw();
    search.addEventListener("input", () => { ctx.setQuery({ search: search.value }); draw(); });
    status.addEventListener("change", () => { ctx.setQuery({ status: status.value }); draw(); });
    type.addEventListener("change", () => { ctx.setQuery({ type: type.value }); draw(); });
    ctx.live(["Job", "Allocation"], first.index + 1, refresh);
  },
};

