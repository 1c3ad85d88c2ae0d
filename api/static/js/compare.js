// Compare runs: their curves overlaid on shared axes (one chart per metric), and their specs side
// by side with the differing values highlighted.

import { LineChart, PALETTE } from "./chart.js";
import { api, badge, fill, h } from "./util.js";

const DEFAULT_METRICS = ["train/episode_return", "eval/episode_return"];
// A competitive run's per-team returns (`eval/episode_return/adversary`) are shown by default too.
const TEAM_RETURN = /^(train|eval)\/episode_return\/[^/]+$/;

/** A spec as dotted keys: {"env.id": "Pendulum-v1", "hyperparameters.tau": 0.005, ...}. */
export function flatten(value, prefix = "", out = {}) {
  if (value && typeof value === "object" && !Array.isArray(value)) {
    for (const [key, inner] of Object.entries(value)) flatten(inner, prefix ? `${prefix}.${key}` : key, out);
  } else {
    out[prefix] = value;
  }
  return out;
}

function show(value) {
  return value === undefined ? "–" : JSON.stringify(value);
}

export async function mount(root, params) {
  const chosen = new Set((params.get("ids") || "").split(",").filter(Boolean));
  const metrics = new Set(DEFAULT_METRICS);
  const offered = new Set(); // every metric the picker has shown: a default is added only once
  const recent = (await api("/v1/experiments?limit=100")).items;
  // Runs named in the link but older than the list still belong in the picker.
  for (const id of chosen) {
    if (!recent.some((r) => r.id === id)) recent.push(await api(`/v1/experiments/${id}`));
  }
  const picker = h("div", { class: "picker", id: "picker" });
  const metricPicker = h("div", { class: "row small", id: "metric-picker" });
  const charts = h("div", { class: "grid", id: "compare-charts" });
  const table = h("div", { class: "table-wrap" });
  let live = [];

  fill(root, h("h1", {}, "Compare runs"),
    h("div", { class: "grid" },
      h("div", { class: "card" }, h("h2", {}, "Runs"), picker),
      h("div", { class: "card" }, h("h2", {}, "Metrics"), metricPicker)),
    charts,
    h("div", { class: "card" }, h("h2", {}, "Hyperparameters"),
      h("p", { class: "small muted" }, "Rows whose values differ between the runs are highlighted."), table));

  fill(picker, recent.map((r) => h("label", {},
    h("input", { type: "checkbox", value: r.id, checked: chosen.has(r.id),
                 onchange: (e) => { if (e.target.checked) chosen.add(r.id); else chosen.delete(r.id); update(); } }),
    h("span", {}, r.name), badge(r.status), h("span", { class: "small muted" }, `${r.algorithm} · ${r.id.slice(-6)}`))));

  async function update() {
    history.replaceState(null, "", `#/compare?ids=${[...chosen].join(",")}`);
    const runs = recent.filter((r) => chosen.has(r.id));
    if (runs.length === 0) {
      fill(charts, h("p", { class: "muted" }, "Pick two or more runs."));
      fill(table);
      fill(metricPicker);
      return;
    }
    const body = await api(`/v1/metrics?experiment_ids=${runs.map((r) => r.id).join(",")}&max_points=500`);
    const names = [...new Set(body.series.map((s) => s.name))].sort();
    for (const name of names) {
      if (!offered.has(name) && TEAM_RETURN.test(name)) metrics.add(name);
      offered.add(name);
    }
    drawMetricPicker(names, runs, body);
    drawCharts(runs, body);
    drawTable(runs);
  }

  function drawMetricPicker(names, runs, body) {
    fill(metricPicker, names.map((name) => h("label", {},
      h("input", { type: "checkbox", value: name, checked: metrics.has(name),
                   onchange: (e) => { if (e.target.checked) metrics.add(name); else metrics.delete(name); drawCharts(runs, body); } }),
      ` ${name}`)));
  }

  function drawCharts(runs, body) {
    live.forEach((c) => c.destroy());
    live = [...metrics].sort().map((name) => {
      const chart = new LineChart({ title: name, id: name });
      chart.set(runs.map((r, i) => {
        const s = body.series.find((x) => x.experiment_id === r.id && x.name === name);
        return { key: r.id, label: `${r.name} (${r.id.slice(-6)})`, color: PALETTE[i % PALETTE.length],
                 steps: s ? s.steps : [], values: s ? s.values : [] };
      }));
      return chart;
    });
    fill(charts, live.map((c) => c.el));
  }

  function drawTable(runs) {
    const flat = runs.map((r) => flatten(r.spec));
    const keys = [...new Set(flat.flatMap((f) => Object.keys(f)))].sort();
    const rows = keys.map((key) => {
      const values = flat.map((f) => show(f[key]));
      const differs = new Set(values).size > 1;
      return h("tr", { class: differs ? "differs" : null, "data-key": key },
        h("td", {}, key), values.map((v) => h("td", {}, v)));
    });
    fill(table, h("table", { id: "hyperparameters" },
      h("thead", {}, h("tr", {}, h("th", {}, "Setting"), runs.map((r) => h("th", {}, r.name)))),
      h("tbody", {}, rows)));
  }

  await update();
  return () => live.forEach((c) => c.destroy());
}
