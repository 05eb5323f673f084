// Nomad's HTTP API, as the page calls it: the operator's token on every request, errors
// kept as the API worded them, and one event stream per page to learn what changed.

const TOKEN_KEY = "quiesce.token";

/** The secret the operator pasted, kept for this browser session only. */
export function token() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

export function setToken(secret) {
  if (secret) sessionStorage.setItem(TOKEN_KEY, secret);
  else sessionStorage.removeItem(TOKEN_KEY);
}

/** An answer that was not a success: its status and the API's own text. */
export class ApiError extends Error {
  constructor(status, message) {
    super(message || `HTTP ${status}`);
    this.status = status;
  }
}

function headers(extra) {
  const all = { ...extra };
  if (token()) all["X-Nomad-Token"] = token();
  return all;
}

/** The largest answer the page takes (a job with thousands of allocations is far less). */
const MAX_ANSWER_BYTES = 64 << 20;

async function send(method, path, body, signal) {
  const response = await fetch(path, {
    method,
    headers: headers(body === undefined ? {} : { "Content-Type": "application/json" }),
    body: body === undefined ? undefined : JSON.stringify(body),
    signal,
    cache: "no-store",
  });
  learnClock(response);
  const text = await response.text();
  if (!response.ok) throw new ApiError(response.status, text.trim());
  if (text.length > MAX_ANSWER_BYTES) throw new ApiError(0, `answer of ${path} too large`);
  const index = Number(response.headers.get("X-Nomad-Index") || 0);
  return { data: text ? JSON.parse(text) : null, index };
}

/** How far the agent's clock is ahead of the browser's, in ms (from each answer's `Date`). */
let clockOffset = 0;

function learnClock(response) {
  const date = Date.parse(response.headers.get("Date") || "");
  // `Date` has whole seconds: only an offset of more than a second is taken.
  if (!Number.isNaN(date)) {
    const offset = date - Date.now();
    clockOffset = Math.abs(offset) > 1500 ? offset : 0;
  }
}

/** The agent's time now, in Unix nanoseconds (task events carry the agent's clock). */
export function agentNow() {
  return (Date.now() + clockOffset) * 1e6;
}

/** `GET path`: `{data, index}`. */
export function get(path, signal) {
  return send("GET", path, undefined, signal);
}

/** A write (`PUT`, `POST`, `DELETE`) with an optional JSON body. */
export function write(method, path, body) {
  return send(method, path, body);
}

/** A path segment, escaped. */
export function seg(id) {
  return encodeURIComponent(id);
}

const sleep = (ms, signal) => new Promise((resolve) => {
  const done = () => {
    clearTimeout(timer);
    signal.removeEventListener("abort", done);
    resolve();
  };
  const timer = setTimeout(done, ms);
  signal.addEventListener("abort", done, { once: true });
});

/** The most bytes of one unfinished line the page holds from the event stream. */
const MAX_LINE_BYTES = 16 << 20;

/**
 * Follows the agent's event stream for `topics` (Nomad's `Topic` or `Topic:key`) from
 * `index`, on one connection, until `signal` aborts; calls `changed()` after each batch of
 * events. A dropped stream is taken up again from the last index seen; a refused one
 * (403, say) is reported once through `failed` and tried again after a pause.
 */
export function follow(topics, index, signal, changed, failed) {
  let next = index;
  (async () => {
    while (!signal.aborted) {
      const query = topics.map((t) => `topic=${encodeURIComponent(t)}`).join("&");
      try {
        const response = await fetch(`/v1/event/stream?${query}&index=${next}`, {
          headers: headers({}), signal, cache: "no-store",
        });
        if (!response.ok) {
          failed(new ApiError(response.status, (await response.text()).trim()));
          await sleep(5000, signal);
          continue;
        }
        failed(null);
        const decoder = new TextDecoder();
        const reader = response.body.getReader();
        let buffer = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += decoder.decode(value, { stream: true });
          let newline;
          while ((newline = buffer.indexOf("\n")) >= 0) {
            const line = buffer.slice(0, newline).trim();
            buffer = buffer.slice(newline + 1);
            if (!line || line === "{}") continue;
            const batch = JSON.parse(line);
            if (batch.Index) next = batch.Index + 1;
            changed();
          }
          if (buffer.length > MAX_LINE_BYTES) throw new Error("event stream line too long");
        }
      } catch (error) {
        if (signal.aborted) return;
      }
      await sleep(1000, signal);
    }
  })();
}
