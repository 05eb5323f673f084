// `/ui/clients` and `/ui/clients/<id>`: the nodes, and one node with its allocations.

import { h, fill, link, table, badge, facts } from "../dom.js";
import { get, seg } from "../api.js";
import { when, short } from "../format.js";

export const clientsPage = {
  title: () => "Clients",
  async render(view, ctx) {
    const draw = (nodes) => fill(view, h("h1", {}, "Clients"), table([
      ["ID", (n) => link(`/ui/clients/${encodeURIComponent(n.ID)}`, short(n.ID))],
      ["Name", (n) => n.Name],
      ["Class", (n) => n.NodeClass || "<none>"],
      ["Address", (n) => n.Address],
      ["Status", (n) => badge(n.Status)],
      ["Eligibility", (n) => n.SchedulingEligibility],
      ["Drain", (n) => (n.Drain ? "yes" : "no")],
      ["Version", (n) => n.Version],
    ], nodes, (n) => ({ "data-node": n.ID })));
    const { data, index } = await get("/v1/nodes", ctx.signal);
    draw(data);
    ctx.live(["Node"], index + 1, async () => draw((await get("/v1/nodes", ctx.signal)).data));
  },
};

export const clientPage = {
  title: ([id]) => `Client ${short(id)}`,
  async render(view, ctx) {
    const [id] = ctx.params;
    const load = async () => {
      const [node, allocs] = await Promise.all([
        get(`/v1/node/${seg(id)}`, ctx.signal), get(`/v1/node/${seg(id)}/allocations`, ctx.signal),
      ]);
      return { node: node.data, allocs: allocs.data, index: Math.max(node.index, allocs.index) };
    };
    const draw = ({ node, allocs }) => fill(view,
      h("div", { class: "page-head" }, h("h1", {}, `Client ${node.Name} `, badge(node.Status)),
        facts([["ID", node.ID], ["Address", node.HTTPAddr || node.Address || ""], ["Datacenter", node.Datacenter],
          ["Class", node.NodeClass || "<none>"], ["Node pool", node.NodePool], ["Eligibility", node.SchedulingEligibility],
          ["Drivers", Object.keys(node.Drivers || {}).sort().join(", ")]])),
      h("h2", {}, "Allocations"),
      table([
        ["ID", (a) => link(`/ui/allocations/${encodeURIComponent(a.ID)}`, short(a.ID))],
        ["Job", (a) => link(`/ui/jobs/${encodeURIComponent(a.JobID)}@default`, a.JobID)],
        ["Name", (a) => a.Name],
        ["Desired", (a) => a.DesiredStatus],
        ["Status", (a) => badge(a.ClientStatus)],
        ["Modified", (a) => when(a.ModifyTime)],
      ], [...allocs].sort((a, b) => b.CreateIndex - a.CreateIndex)));
    const first = await load();
    draw(first);
    ctx.live([`Node:${id}`, "Allocation"], first.index + 1, async () => draw(await load()));
  },
};
