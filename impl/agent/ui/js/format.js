// Numbers as an operator reads them.

const NS = { h: 3600e9, m: 60e9, s: 1e9, ms: 1e6, µs: 1e3, ns: 1 };

/** A duration in nanoseconds as Go prints one: `30s`, `1m30s`, `250ms`, `0s`. */
export function duration(ns) {
  if (!ns) return "0s";
  if (ns < 1e9) {
    for (const unit of ["ms", "µs", "ns"]) {
      if (ns >= NS[unit]) return `${+(ns / NS[unit]).toFixed(3)}${unit}`;
    }
  }
  let rest = Math.round(ns / 1e6) / 1e3;
  let out = "";
  const hours = Math.floor(rest / 3600);
  if (hours) { out += `${hours}h`; rest -= hours * 3600; }
  const minutes = Math.floor(rest / 60);
  if (minutes || hours) { out += `${minutes}m`; rest -= minutes * 60; }
  return `${out}${+rest.toFixed(3)}s`;
}

/** Seconds, for a countdown: `12.3 s`. */
export function seconds(ns) {
  return `${(Math.max(0, ns) / 1e9).toFixed(1)} s`;
}

/** A Unix-nanosecond or RFC 3339 time as a local date and time. */
export function when(value) {
  if (!value) return "";
  const date = typeof value === "number" ? new Date(value / 1e6) : new Date(value);
  if (Number.isNaN(date.getTime()) || date.getFullYear() < 1971) return "";
  const pad = (n) => String(n).padStart(2, "0");
  return `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())} ` +
    `${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())}`;
}

/** A Unix-nanosecond or RFC 3339 time as nanoseconds. */
export function nanos(value) {
  if (typeof value === "number") return value;
  const ms = Date.parse(value);
  return Number.isNaN(ms) ? 0 : ms * 1e6;
}

/** The first 8 characters of an ID, as Nomad shows them. */
export function short(id) {
  return (id || "").slice(0, 8);
}

/** `1 allocation`, `2 allocations`. */
export function plural(n, word) {
  return `${n} ${word}${n === 1 ? "" : "s"}`;
}
