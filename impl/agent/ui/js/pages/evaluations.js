// `/ui/evaluations`: the evaluations, newest first, with why one is blocked.

import { h, fill, link, table, badge } from "../dom.js";
import { get } from "../api.js";
import { when, short } from "../format.js";

/** Why an evaluation could not place everything: its groups' failed placements. */
function blockedReason(evaluation) {
  const failed = Object.entries(evaluation.FailedTGAllocs || {});
  const reasons = failed.map(([group, metric]) => {
    const why = [
      ...Object.entries(metric.DimensionExhausted || {}).map(([d, n]) => `${d} exhausted on ${n}`),
      ...Object.entries(metric.ConstraintFiltered || {}).map(([c, n]) => `${c} filtered ${n}`),
      ...Object.entries(metric.ClassFiltered || {}).map(([c, n]) => `class ${c} filtered ${n}`),
    ];
    const placed = metric.CoalescedFailures ? ` (${metric.CoalescedFailures + 1} not placed)` : "";
    return `${group}${placed}: ${why.join(", ") || `${metric.NodesEvaluated || 0} nodes evaluated, none fit`}`;
  });
  if (evaluation.BlockedEval) reasons.push(`blocked evaluation ${short(evaluation.BlockedEval)} waits for capacity`);
  if (evaluation.Status === "blocked" && evaluation.StatusDescription) reasons.unshift(evaluation.StatusDescription);
  return reasons.join("; ");
}

export default {
  title: () => "Evaluations",
  async render(view, ctx) {
    const draw = (evaluations) => fill(view, h("h1", {}, "Evaluations"), table([
      ["ID", (e) => short(e.ID)],
      ["Job", (e) => link(`/ui/jobs/${encodeURIComponent(e.JobID)}@default`, e.JobID)],
      ["Triggered by", (e) => e.TriggeredBy],
      ["Status", (e) => badge(e.Status)],
      ["Description", (e) => e.StatusDescription || ""],
      ["Blocked because", (e) => blockedReason(e)],
      ["Created", (e) => when(e.CreateTime)],
    ], [...evaluations].sort((a, b) => b.CreateIndex - a.CreateIndex), (e) => ({ "data-eval": e.ID })));
    const { data, index } = await get("/v1/evaluations", ctx.signal);
    draw(data);
    ctx.live(["Evaluation"], index + 1, async () => draw((await get("/v1/evaluations", ctx.signal)).data));
  },
};
