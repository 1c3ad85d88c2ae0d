// Sweeps: the project's sweeps (one base spec trained over a search space × seeds), newest first,
// with where their runs stand; reread every few seconds while any of them is running. The helpers
// here are shared with the sweep's own page (sweep.js).

import { canWrite } from "./session.js";
import { age, api, badge, fill, h, progressBar } from "./util.js";

export const REFRESH_MS = 3000;
// The order a sweep's runs are counted in after "k/n succeeded".
const OTHERS = ["running", "queued", "pending", "cancelling", "failed", "cancelled"];

/** "4/6 succeeded, 1 running, 1 pending": a sweep's runs by status. */
export function countsText(runs) {
  const rest = OTHERS.filter((s) => runs[s]).map((s) => `${runs[s]} ${s}`);
  return [`${runs.succeeded || 0}/${runs.total} succeeded`, ...rest].join(", ");
}

/** "2 configurations × 3 seeds"; a search's "2 of 6 configurations (tpe) × 3 seeds"; a PBT
 *  search's "pbt: 4 members, round 2 of 5"; early stopping's "4 configurations × 2 seeds, asha
 *  rungs at 2,000". */
export function sizeText(sweep) {
  const n = sweep.configurations.length, k = sweep.seeds.length;
  const seeds = `${k} seed${k === 1 ? "" : "s"}`;
  let search = sweep.spec.search;
  const stopping = sweep.spec.early_stopping || (search?.method === "asha" ? search : null);
  if (search?.method === "asha") search = null;  // early stopping spelled as the search
  const rungs = stopping
    ? `, asha rungs at ${stopping.rungs.map((r) => r.toLocaleString("en-US")).join(", ")}`
    : "";
  if (search?.method === "pbt") {
    const rounds = Math.floor(sweep.spec.base.total_steps / search.round_steps);
    const round = Math.max(0, ...sweep.configurations.map((c) => c.round ?? 0));
    return `pbt: ${search.population} members, round ${round + 1} of ${rounds}`;
  }
  if (search) return `${n} of ${search.trials} configurations (${search.method}) × ${seeds}${rungs}`;
  return `${n} configuration${n === 1 ? "" : "s"} × ${seeds}${rungs}`;
}

/** What the base spec trains: "ddpg · torch · Pendulum-v1". */
export function baseText(sweep) {
  const base = sweep.spec.base || {};
  return [base.algorithm, base.backend, base.env?.id].filter(Boolean).join(" · ");
}

function row(sweep) {
  return h("tr", { "data-sweep": sweep.id, "data-status": sweep.status },
    h("td", {}, h("a", { href: `#/sweeps/${sweep.id}`, class: "sweep-link" }, sweep.name),
      h("div", { class: "small muted" }, baseText(sweep))),
    h("td", {}, badge(sweep.status)),
    h("td", { "data-col": "runs" }, countsText(sweep.runs)),
    h("td", {}, progressBar(sweep.progress.fraction), " ",
      h("span", { class: "small muted" }, `${Math.round(sweep.progress.fraction * 100)}%`)),
    h("td", { class: "small hide-narrow" }, sizeText(sweep)),
    h("td", { class: "num hide-narrow", title: sweep.created_at }, age(sweep.created_at)));
}

/** The sweeps table (#/sweeps). */
export async function mountList(root) {
  const body = h("tbody");
  const error = h("div", { class: "errors" });
  const count = h("span", { class: "muted small" });
  fill(root,
    h("div", { class: "row spread" }, h("h1", {}, "Sweeps"),
      h("div", { class: "row" }, count,
        canWrite() && h("a", { class: "button primary", href: "#/sweeps/new", "data-action": "new-sweep" }, "New sweep"))),
    h("p", { class: "small muted" }, "One base spec trained over a grid or a random search of its settings, each configuration ",
      "with several seeds; a sweep's page ranks the configurations by the interquartile mean of their runs' final returns."),
    error,
    h("div", { class: "card table-wrap" },
      h("table", { id: "sweeps" },
        h("thead", {}, h("tr", {}, ["Name", "Status", "Runs", "Progress", "Space", "Created"]
          .map((t, i) => h("th", { class: i >= 4 ? "hide-narrow" : null }, t)))),
        body)));

  let running = false;
  async function load() {
    const page = await api("/v1/sweeps?limit=200");
    fill(error);
    fill(body, page.items.length ? page.items.map(row)
      : h("tr", {}, h("td", { colspan: 6, class: "muted" }, "No sweeps yet: start one with New sweep.")));
    count.textContent = `${page.items.length} sweep${page.items.length === 1 ? "" : "s"}`;
    running = page.items.some((s) => s.status === "running");
  }

  const refresh = () => load().catch((e) => fill(error, `Could not load the sweeps: ${e.message}`));
  await refresh();
  // Finished sweeps do not change: reread only while one is running.
  const timer = setInterval(() => { if (running && !document.hidden) refresh(); }, REFRESH_MS);
  return () => clearInterval(timer);
}
