// Small helpers shared by every page: building DOM, calling the API, formatting numbers and times.

/** Create an element: h("a", {href: "#/", class: "x", onclick: fn}, "text", child, [more]). */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") {
      el.addEventListener(key.slice(2), value);
    } else if (key === "dataset") {
      Object.assign(el.dataset, value);
    } else if (key === "style") {
      // Through the CSSOM: the Content-Security-Policy forbids inline style attributes.
      el.style.cssText = value;
    } else if (key === "value") {
      el.value = value;
    } else if (key === "checked" || key === "selected" || key === "disabled") {
      el[key] = Boolean(value);
    } else {
      el.setAttribute(key, value === true ? "" : String(value));
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else el.append(child instanceof Node ? child : String(child));
  }
}

/** Replace an element's content. */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/** An error response of the API: `fields` lists {field, reason}. */
export class ApiError extends Error {
  constructor(status, body) {
    const error = (body && body.error) || {};
    super(error.message || `HTTP ${status}`);
    this.status = status;
    this.code = error.code;
    this.fields = error.fields || [];
  }
}

/** Call the API; JSON in and out. Throws ApiError for an error status. */
export async function api(path, { method = "GET", body } = {}) {
  const init = { method, headers: { accept: "application/json" } };
  if (body !== undefined) {
    init.headers["content-type"] = "application/json";
    init.body = typeof body === "string" ? body : JSON.stringify(body);
  }
  const response = await fetch(path, init);
  const text = await response.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = null; }
  if (response.status === 401 && !path.startsWith("/v1/session") && !path.startsWith("/v1/whoami")) {
    // The session ended (signed out elsewhere, key revoked): back to the sign-in page.
    window.dispatchEvent(new CustomEvent("marlforge:signed-out"));
  }
  if (!response.ok) throw new ApiError(response.status, data);
  return data;
}

/** A compact number: 1234567 -> 1.23M, 0.000123 -> 1.23e-4. */
export function num(value, digits = 3) {
  if (value === null || value === undefined || Number.isNaN(value)) return "–";
  const abs = Math.abs(value);
  if (abs >= 1e6) return (value / 1e6).toPrecision(digits) + "M";
  if (abs >= 1e4) return (value / 1e3).toPrecision(digits) + "k";
  if (abs !== 0 && abs < 1e-3) return value.toExponential(digits - 1);
  return Number(value.toPrecision(digits)).toString();
}

/** "3 min", "2 h", "5 d" since an ISO time. */
export function age(iso) {
  const seconds = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (seconds < 60) return `${Math.floor(seconds)} s`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)} h`;
  return `${Math.floor(seconds / 86400)} d`;
}

/** A local date and time for an ISO time. */
export function when(iso) {
  return iso ? new Date(iso).toLocaleString() : "–";
}

export function bytes(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1 << 20) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / (1 << 20)).toFixed(1)} MiB`;
}

export const TERMINAL = new Set(["succeeded", "failed", "cancelled"]);

export function badge(status) {
  return h("span", { class: `badge ${status}`, "data-status": status }, status);
}

export function progressBar(fraction, wide = false) {
  const pct = Math.round(Math.min(1, Math.max(0, fraction)) * 100);
  return h("span", { class: wide ? "progress wide" : "progress", role: "progressbar",
                     "aria-valuenow": pct, "aria-valuemin": 0, "aria-valuemax": 100,
                     title: `${pct}%` },
           h("span", { style: `width:${pct}%` }));
}

/** The env of a spec as "suite/id". */
export function envName(spec) {
  return spec && spec.env ? `${spec.env.id}` : "–";
}

/** Parse "#/path?x=1" into {path, params}. */
export function route() {
  const hash = location.hash.replace(/^#/, "") || "/";
  const [path, query = ""] = hash.split("?");
  return { path, params: new URLSearchParams(query) };
}

/** The catalogue's scenarios a match is played in (`matches`: competitive, with several teams),
 *  by env id: Map id -> {suite, id, teams}. */
export function competitiveScenarios(catalogue) {
  const found = new Map();
  for (const a of catalogue) {
    for (const e of a.environments) {
      if (e.matches && e.teams.length > 1 && !found.has(e.id)) found.set(e.id, { suite: e.suite, id: e.id, teams: e.teams });
    }
  }
  return found;
}

/** A form's way of showing a refused request (422): each field's reason next to the field it
 *  belongs to (`.field[data-field=path]`, else its nearest named parent; a team's box takes its
 *  reason on its last line), the rest listed in `summary` under `refused`. */
export function formErrors(form, summary, refused) {
  function fieldFor(path) {
    for (let p = path; p; p = p.includes(".") ? p.slice(0, p.lastIndexOf(".")) : "") {
      const el = form.querySelector(`.field[data-field="${CSS.escape(p)}"]`);
      if (el) return el;
    }
    return null;
  }
  return {
    clear() {
      fill(summary);
      form.querySelectorAll(".field.invalid").forEach((f) => f.classList.remove("invalid"));
      form.querySelectorAll(".field-error").forEach((f) => fill(f));
    },
    /** Show `e`'s fields; with `place` false (a JSON editor), all of them in the summary. */
    show(e, place = true) {
      const unplaced = [];
      for (const f of e.fields || []) {
        const el = place ? fieldFor(f.field) : null;
        if (!el) { unplaced.push(`${f.field}: ${f.reason}`); continue; }
        el.classList.add("invalid");
        const line = el.dataset.team ? el.lastElementChild : el.querySelector(".field-error");
        line.append(h("div", {}, f.reason));
      }
      if (!(e.fields || []).length) fill(summary, e.message);
      else fill(summary, unplaced.length ? [h("div", {}, refused),
        unplaced.map((u) => h("div", { class: "small" }, u))] : null);
    },
  };
}

/** A run's tags as typed in a form ("baseline, lr:3e-4"): a list, blanks dropped, strings kept
 *  as strings ("1" stays a tag, not a number). */
export function parseTags(text) {
  return text.split(",").map((t) => t.trim()).filter(Boolean);
}

/** Name the tag a refused edit or spec means: the server's `tags.1` says which, the user typed a
 *  word. Rewrites `e.fields` in place and returns `e`. */
export function explainTags(e, tags) {
  for (const f of e.fields || []) {
    const index = f.field.match(/^tags\.(\d+)$/);
    if (index && tags[Number(index[1])] !== undefined) f.reason = `"${tags[Number(index[1])]}": ${f.reason}`;
  }
  return e;
}

/** A run's tags as small labels, each a link (`href(tag)`) to the runs it labels. */
export function tagLabels(tags, href) {
  if (!tags || !tags.length) return null;
  return h("span", { class: "tags" }, tags.map((t) => h("a", { class: "tag", href: href(t), "data-tag": t }, t)));
}
