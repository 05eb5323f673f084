// Building the page without HTML strings: every text from the API goes in as a text node,
// never as markup, so a job named `<img onerror=…>` is shown, not run.

const SVG = "http://www.w3.org/2000/svg";

function build(element, attrs, children) {
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) {
      element.addEventListener(name.slice(2), value);
    } else if (name === "dataset") {
      Object.assign(element.dataset, value);
    } else {
      element.setAttribute(name, value === true ? "" : String(value));
    }
  }
  append(element, children);
  return element;
}

function append(element, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** An HTML element: `h("a", {href: "/ui/jobs"}, "Jobs")`. */
export function h(tag, attrs, ...children) {
  return build(document.createElement(tag), attrs, children);
}

/** An SVG element, the same way. */
export function s(tag, attrs, ...children) {
  return build(document.createElementNS(SVG, tag), attrs, children);
}

/** Replaces what `element` holds. */
export function fill(element, ...children) {
  element.replaceChildren();
  append(element, children);
  return element;
}

/** A link inside the app: followed by the router, without a reload. */
export function link(path, ...children) {
  return h("a", { href: path, "data-link": "" }, ...children);
}

/** A table: `columns` are [heading, cell(row)] pairs; `attrs` go on each row. */
export function table(columns, rows, rowAttrs) {
  return h(
    "table",
    {},
    h("thead", {}, h("tr", {}, columns.map(([heading]) => h("th", { scope: "col" }, heading)))),
    h(
      "tbody",
      {},
      rows.length === 0
        ? h("tr", {}, h("td", { colspan: columns.length, class: "empty" }, "None"))
        : rows.map((row) => h("tr", rowAttrs ? rowAttrs(row) : {}, columns.map(([, cell]) => h("td", {}, cell(row))))),
    ),
  );
}

/** A list of `term: description` pairs. */
export function facts(pairs) {
  return h("dl", { class: "facts" }, pairs.filter(Boolean).map(([term, value]) => [h("dt", {}, term), h("dd", {}, value)]));
}

/** A badge for a status word; the word is always written, colour only repeats it. */
export function badge(word) {
  const text = word || "unknown";
  return h("span", { class: `badge badge-${text.replace(/[^a-z]/gi, "").toLowerCase()}` }, text);
}

/** An API error shown as the API worded it. */
export function errorBox(error) {
  const status = error && error.status ? `${error.status}: ` : "";
  return h("div", { class: "error", role: "alert" }, status + (error && error.message ? error.message : String(error)));
}
