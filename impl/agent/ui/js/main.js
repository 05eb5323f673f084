// The app: a router over Nomad's UI paths, the navigation, and each page's lifetime. A page
// is a module with `render(view, ctx)`; when the operator leaves it, `ctx.signal` aborts,
// which ends its event stream, its timers and its fetches, so a page left open holds only
// what it shows.

import { h, fill, errorBox } from "./dom.js";
import { follow } from "./api.js";
import { loadAccess, needsToken, current } from "./access.js";
import jobs from "./pages/jobs.js";
import job from "./pages/job.js";
import allocation from "./pages/allocation.js";
import { clientsPage, clientPage } from "./pages/clients.js";
import evaluations from "./pages/evaluations.js";
import tokens from "./pages/tokens.js";

const ROUTES = [
  [/^\/ui\/?$/, jobs],
  [/^\/ui\/jobs\/?$/, jobs],
  [/^\/ui\/jobs\/([^/]+)(?:\/(allocations|versions|definition|evaluations))?\/?$/, job],
  // Nomad's task page (`/ui/allocations/<id>/<task>`) shows the allocation here.
  [/^\/ui\/allocations\/([^/]+)(?:\/[^/]+)?\/?$/, allocation],
  [/^\/ui\/clients\/?$/, clientsPage],
  [/^\/ui\/clients\/([^/]+)\/?$/, clientPage],
  [/^\/ui\/evaluations\/?$/, evaluations],
  [/^\/ui\/settings\/tokens\/?$/, tokens],
];

const notFound = {
  title: () => "Not found",
  render(view) {
    fill(view, h("h1", {}, "Not found"), h("p", {}, `This agent's UI has no page at ${location.pathname}.`));
  },
};

let leaving = null;

/** The page of the current URL, drawn afresh. */
async function route() {
  if (leaving) leaving.abort();
  const controller = new AbortController();
  leaving = controller;
  // Each page draws into an element of its own: a page left while it was still reading
  // draws, if at all, into an element no longer shown.
  const view = h("div", { class: "page" });
  document.getElementById("view").replaceChildren(view);
  const path = location.pathname;
  let page = notFound;
  let params = [];
  for (const [pattern, candidate] of ROUTES) {
    const match = path.match(pattern);
    if (match) {
      try {
        // Nomad's UI names a job `<id>@<namespace>`; this agent has the default only.
        params = match.slice(1).map((p) => (p === undefined ? p : decodeURIComponent(p).replace(/@default$/, "")));
        page = candidate;
      } catch (malformed) {
        page = notFound;
      }
      break;
    }
  }
  if (page !== tokens && needsToken()) {
    navigate(`/ui/settings/tokens?next=${encodeURIComponent(path + location.search)}`, { replace: true });
    return;
  }
  markNav(path);
  const ctx = {
    params,
    query: new URLSearchParams(location.search),
    signal: controller.signal,
    navigate,
    setQuery,
    live: (topics, index, refresh) => live(topics, index, refresh, controller.signal, view),
    every: (ms, tick) => every(ms, tick, controller.signal),
    accessChanged: async () => { await loadAccess(); drawWho(); },
  };
  document.title = `${page.title(params)} · quiesce`;
  view.replaceChildren(h("p", { class: "loading" }, "Loading…"));
  try {
    await page.render(view, ctx);
  } catch (error) {
    if (!controller.signal.aborted) fill(view, errorBox(error));
  }
}

/**
 * Keeps a page current: one event stream for `topics` from `index`; after each batch of
 * events, `refresh()` runs again, at most one at a time and at most every 250 ms.
 */
function live(topics, index, refresh, signal, view) {
  let running = false;
  let again = false;
  let banner = null;
  let stale = null;
  const run = async () => {
    if (signal.aborted) return;
    if (running) { again = true; return; }
    running = true;
    try {
      await refresh();
      if (stale) { stale.remove(); stale = null; }
    } catch (error) {
      // The page keeps what it last read, and says why it is no longer current, in the
      // API's words (the job was purged, the token deleted, …).
      if (!signal.aborted) {
        if (stale) stale.remove();
        stale = h("div", { class: "error stale", role: "alert" },
          `This page is no longer current: ${error.status ? `${error.status}: ` : ""}${error.message}`);
        view.prepend(stale);
      }
    }
    await new Promise((resolve) => setTimeout(resolve, 250));
    running = false;
    if (again && !signal.aborted) { again = false; run(); }
  };
  follow(topics, index, signal, run, (error) => {
    if (banner) { banner.remove(); banner = null; }
    if (error && !signal.aborted) {
      banner = h("div", { class: "error stale", role: "alert" },
        `Live updates refused (${error.status}): ${error.message}`);
      view.prepend(banner);
    }
  });
}

/** Runs `tick` every `ms` until the page is left (never, if it has been already). */
function every(ms, tick, signal) {
  if (signal.aborted) return;
  const timer = setInterval(tick, ms);
  signal.addEventListener("abort", () => clearInterval(timer), { once: true });
}

/** Goes to `path` inside the app. */
export function navigate(path, { replace } = {}) {
  if (replace) history.replaceState(null, "", path);
  else history.pushState(null, "", path);
  route();
}

/** Changes the page's query (a filter, a sort) without a new history entry or a redraw. */
function setQuery(values) {
  const query = new URLSearchParams(location.search);
  for (const [key, value] of Object.entries(values)) {
    if (value === "" || value === null || value === undefined || value === false) query.delete(key);
    else query.set(key, value);
  }
  const text = query.toString();
  history.replaceState(null, "", location.pathname + (text ? `?${text}` : ""));
}

function markNav(path) {
  for (const a of document.querySelectorAll("nav.main a")) {
    const section = a.getAttribute("href");
    a.toggleAttribute("aria-current", path === section || path.startsWith(`${section}/`) || (section === "/ui/jobs" && path === "/ui/"));
  }
}

function drawWho() {
  const who = document.getElementById("who");
  const access = current();
  if (!access.enabled) fill(who, "ACLs off");
  else if (access.token) fill(who, h("a", { href: "/ui/settings/tokens", "data-link": "" }, `Signed in as ${access.token.Name || access.token.AccessorID.slice(0, 8)}`));
  else fill(who, h("a", { href: "/ui/settings/tokens", "data-link": "" }, "Sign in"));
}

document.addEventListener("click", (event) => {
  const a = event.target.closest("a[data-link]");
  if (!a || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
  event.preventDefault();
  navigate(a.getAttribute("href"));
});
window.addEventListener("popstate", route);

loadAccess().then(() => { drawWho(); route(); });
