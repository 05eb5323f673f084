// `/ui/settings/tokens`: the operator pastes a secret; it is kept for this browser session
// and sent as `X-Nomad-Token`. The page says whose it is and what its policies are.

import { h, fill, facts, errorBox } from "../dom.js";
import { setToken, token } from "../api.js";
import { loadAccess, current } from "../access.js";

export default {
  title: () => "ACL Tokens",
  async render(view, ctx) {
    const next = ctx.query.get("next");
    const draw = (problem) => {
      const access = current();
      const secret = h("input", { type: "password", name: "secret", autocomplete: "off", "aria-label": "Secret ID", placeholder: "Secret ID" });
      const form = h("form", { class: "token-form" }, h("label", { class: "field" }, "Secret ID ", secret),
        h("button", { type: "submit", class: "primary" }, "Sign in"));
      form.addEventListener("submit", async (event) => {
        event.preventDefault();
        setToken(secret.value.trim());
        await ctx.accessChanged();
        if (!current().token && current().enabled) {
          const error = current().error;
          setToken("");
          await ctx.accessChanged();
          draw(error || new Error("the agent did not take this token"));
          return;
        }
        if (next && next.startsWith("/ui/")) ctx.navigate(next);
        else draw(null);
      });
      const out = h("button", { type: "button", onclick: async () => { setToken(""); await ctx.accessChanged(); draw(null); } }, "Sign out");
      const parts = [h("h1", {}, "ACL Tokens")];
      if (!access.enabled) parts.push(h("p", {}, "ACLs are not enabled on this agent: every action is open to whoever reaches it."));
      if (problem) parts.push(errorBox(problem));
      if (access.token) {
        const t = access.token;
        parts.push(h("p", { class: "signed-in" }, `Signed in as ${t.Name || "(unnamed token)"}`),
          facts([["Type", t.Type], ["Accessor ID", t.AccessorID], ["Policies", (t.Policies || []).join(", ") || "none"]]), out);
      } else if (access.enabled) {
        parts.push(h("p", {}, next ? "ACLs are enabled on this agent: paste a token's secret to go on." : "Paste a token's secret. It is kept for this browser session only."), form);
      } else if (token()) {
        parts.push(out);
      }
      fill(view, ...parts);
    };
    draw(null);
  },
};
