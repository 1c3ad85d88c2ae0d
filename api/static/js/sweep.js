// One sweep: where its runs stand (cancel and resume them together), its configurations ranked by
// the IQM of their runs' final values with bootstrap intervals and P(best > it) (GET
// /v1/sweeps/{id}/summary, also as CSV), each configuration's mean curve with its 95% band (a PBT
// search: each member's history as one line), one click from a configuration to its runs, and a
// PBT search's lineage tree (lineage.js). Reread every few seconds while the sweep runs.

import { LineChart, PALETTE } from "./chart.js";
import { isPopulation, lineageCard } from "./lineage.js";
import { canWrite } from "./session.js";
import { REFRESH_MS, baseText, countsText, sizeText } from "./sweeps.js";
import { ApiError, api, badge, fill, h, num, progressBar, when } from "./util.js";

const DEFAULT_METRIC = "eval/episode_return";

/** A swept path as a column's name: hyperparameters are the usual case, so they go unprefixed. */
function paramName(path) {
  return path.replace(/^hyperparameters\./, "");
}

function paramValue(value) {
  return typeof value === "object" && value !== null ? JSON.stringify(value) : String(value);
}

/** A number and its 95% interval below it. */
function withCi(col, value, ci) {
  if (value === null || value === undefined) return h("td", { class: "num", "data-col": col }, "–");
  return h("td", { class: "num", "data-col": col },
    h("span", { class: "value" }, num(value)),
    h("div", { class: "small muted ci" }, `[${num(ci[0])}, ${num(ci[1])}]`));
}

export async function mount(root, params, id) {
  let sweep;
  try {
    sweep = await api(`/v1/sweeps/${id}`);
  } catch (e) {
    fill(root, h("div", { class: "card errors" }, e instanceof ApiError && e.status === 404 ? `No sweep ${id}.` : e.message));
    return () => {};
  }
  let metric = params.get("metric") || DEFAULT_METRIC;
  let summary = null;
  let runs = new Map(); // id -> run
  const open = new Set(); // configurations whose runs are listed
  const colors = new Map(sweep.configurations.map((c, i) => [c.key, PALETTE[i % PALETTE.length]]));

  const header = h("div", { class: "card", id: "sweep-header" });
  const metrics = h("select", { name: "metric", onchange: () => { metric = metrics.value; rereadSummary(); } });
  const csv = h("a", { class: "button", "data-action": "csv", download: "" }, "CSV");
  const problem = h("div", { class: "errors", role: "alert" });
  const table = h("table", { id: "configurations" });
  const chart = new LineChart({ title: metric, id: "curves" });
  const lineage = h("div", { id: "lineage-slot" });
  fill(root, header, lineage,
    h("div", { class: "card" },
      h("div", { class: "row spread" }, h("h2", {}, "Configurations"),
        h("div", { class: "row" }, h("label", { class: "small" }, "Metric ", metrics), csv)),
      h("p", { class: "small muted" }, "Ranked by the interquartile mean (IQM) of the final values of each configuration's ",
        "runs that finished their budget (not those early stopping stopped at a rung), with 95% bootstrap intervals over runs; P(best > it) is the chance that a run of the best ",
        "configuration beats a run of this one."),
      problem, h("div", { class: "table-wrap" }, table)),
    chart.el);

  function drawHeader() {
    const r = sweep.runs;
    const canCancel = canWrite() && (r.pending + r.queued + r.running) > 0;
    const canResume = canWrite() && (r.cancelled + r.failed) > 0;
    fill(header,
      h("div", { class: "row spread" },
        h("div", {}, h("h1", {}, sweep.name, " ", badge(sweep.status)),
          h("div", { class: "muted small" }, sweep.id)),
        h("div", { class: "row" },
          h("a", { href: `#/?sweep_id=${sweep.id}`, "data-action": "all-runs" }, "Its runs"),
          h("a", { href: "#/sweeps" }, "All sweeps"),
          canCancel && h("button", { class: "danger", "data-action": "cancel", onclick: () => act("cancel") }, "Cancel"),
          canResume && h("button", { class: "primary", "data-action": "resume", onclick: () => act("resume") }, "Resume"))),
      h("div", { class: "facts" },
        fact("Runs", h("span", { id: "sweep-counts" }, countsText(r))),
        fact("Trains", baseText(sweep)),
        fact("Space", sizeText(sweep)),
        fact("Seeds", sweep.seeds.join(", ")),
        fact("At once", `at most ${sweep.max_concurrent}`),
        fact("Created", when(sweep.created_at))),
      h("div", { style: "margin-top:.6rem" }, progressBar(sweep.progress.fraction, true)));
  }

  function fact(label, value) { return h("div", {}, h("b", {}, label), value); }

  async function act(what) {
    try {
      sweep = await api(`/v1/sweeps/${id}/${what}`, { method: "POST" });
      drawHeader();
      await reread();
      poll();
    } catch (e) {
      header.append(h("div", { class: "errors", role: "alert" }, e.message));
    }
  }

  /** The metrics the sweep's runs report, the compared one first; rebuilt only when they change. */
  function drawMetrics() {
    const names = new Set([DEFAULT_METRIC, "train/episode_return", metric]);
    for (const run of runs.values()) Object.keys(run.latest_metrics).forEach((n) => names.add(n));
    const sorted = [...names].sort((a, b) => (a === DEFAULT_METRIC ? -1 : b === DEFAULT_METRIC ? 1 : a.localeCompare(b)));
    if (sorted.join("\n") !== [...metrics.options].map((o) => o.value).join("\n")) {
      fill(metrics, sorted.map((n) => h("option", { value: n }, n)));
    }
    metrics.value = metric;
    csv.href = `/v1/sweeps/${id}/summary.csv?metric=${encodeURIComponent(metric)}`;
  }

  function drawTable() {
    const swept = summary.params;
    const columns = ["Rank", "Configuration", ...swept.map(paramName), "Seeds done", "Mean", "IQM", "P(best > it)", "Runs"];
    fill(table,
      h("thead", {}, h("tr", {}, columns.map((t, i) => h("th", { title: swept[i - 2] ?? null }, t)))),
      h("tbody", {}, summary.configurations.map((c) => [configRow(c, swept), open.has(c.key) && runsRow(c, columns.length)])));
  }

  function configRow(c, swept) {
    const best = c.key === summary.best;
    // A run a rung of early stopping stopped succeeded short of its budget: it has no final value.
    const stopped = c.stopped_early || 0;
    const seeds = `${c.succeeded - stopped} finished of ${c.runs}` + (stopped ? `, ${stopped} stopped early` : "")
      + (c.failed ? `, ${c.failed} failed` : "") + (c.active ? `, ${c.active} not finished` : "");
    const better = c.improvement;
    return h("tr", { "data-config": c.key, class: best ? "best" : null },
      h("td", { class: "num", "data-col": "rank" }, c.rank ?? "–"),
      h("td", { "data-col": "key" }, h("span", { class: "swatch", style: `--c:${colors.get(c.key)}` }), h("b", {}, c.key),
        best && h("span", { class: "badge best" }, "best")),
      swept.map((p) => h("td", { "data-param": p }, paramValue(c.params[p]))),
      h("td", { class: "num", "data-col": "seeds", title: seeds }, `${c.succeeded - stopped}/${c.runs}`,
        stopped ? h("div", { class: "small muted" }, `${stopped} stopped early`) : null,
        c.failed ? h("div", { class: "small errors" }, `${c.failed} failed`) : null),
      withCi("mean", c.final?.mean, c.final?.mean_ci95),
      withCi("iqm", c.final?.iqm, c.final?.iqm_ci95),
      best ? h("td", { class: "num muted", "data-col": "improvement" }, "best")
        : withCi("improvement", better?.probability, better?.ci95),
      h("td", {}, h("button", { type: "button", "data-action": "runs", "aria-expanded": String(open.has(c.key)),
        onclick: () => { if (open.has(c.key)) open.delete(c.key); else open.add(c.key); drawTable(); } },
        `${c.runs} run${c.runs === 1 ? "" : "s"} ${open.has(c.key) ? "▾" : "▸"}`)));
  }

  /** The runs of one configuration, under its row: each links to its page. */
  function runsRow(c, span) {
    const items = c.experiment_ids.map((rid) => runs.get(rid)).filter(Boolean);
    return h("tr", { class: "config-runs", "data-runs-of": c.key },
      h("td", { colspan: span },
        h("ul", {}, items.map((run) => h("li", { "data-run": run.id },
          h("a", { href: `#/runs/${run.id}`, class: "run-link" }, run.name), " ", badge(run.status),
          h("span", { class: "small muted" }, ` seed ${run.spec.seed} · ${metric} ${num(run.latest_metrics[metric]?.value)}`))))));
  }

  /** The configurations whose curves are drawn: all of them; in a PBT search each member's
   *  latest round with points, whose curve is the member's whole history (the summary follows
   *  the checkpoints it continued), so each member is one line. */
  function charted() {
    const drawn = summary.configurations.filter((c) => c.curve.length);
    if (!isPopulation(sweep)) return drawn;
    const lineage = new Map(sweep.configurations.map((c) => [c.key, c]));
    const latest = new Map();
    for (const c of drawn) {
      const { member, round } = lineage.get(c.key) || {};
      if (!latest.has(member) || round > lineage.get(latest.get(member).key).round) latest.set(member, c);
    }
    return [...latest.values()];
  }

  function drawChart() {
    chart.retitle(isPopulation(sweep)
      ? `${metric}: each member's history, through the checkpoints it continued`
      : `${metric}: each configuration's mean and 95% band`);
    chart.set(charted().map((c) => ({
      key: c.key, color: colors.get(c.key),
      label: `${c.key} ${summary.params.map((p) => `${paramName(p)}=${paramValue(c.params[p])}`).join(" ")}`,
      steps: c.curve.map((p) => p.step), values: c.curve.map((p) => p.mean),
      low: c.curve.map((p) => p.low), high: c.curve.map((p) => p.high),
    })));
  }

  async function loadRuns() {
    const page = await api(`/v1/experiments?sweep_id=${id}&limit=500`);
    runs = new Map(page.items.map((r) => [r.id, r]));
  }

  async function loadSummary() {
    summary = await api(`/v1/sweeps/${id}/summary?metric=${encodeURIComponent(metric)}`);
  }

  async function rereadSummary() {
    try {
      await loadSummary();
      fill(problem);
      drawMetrics(); drawTable(); drawChart();
    } catch (e) {
      fill(problem, `Could not compare by ${metric}: ${e.message}`);
    }
  }

  async function reread() {
    [sweep] = await Promise.all([api(`/v1/sweeps/${id}`), loadRuns(), loadSummary()]);
    drawHeader(); drawMetrics(); drawTable(); drawChart(); drawLineage();
  }

  /** A PBT sweep's lineage tree, above its configurations. */
  function drawLineage() {
    if (isPopulation(sweep)) fill(lineage, lineageCard(sweep, runs));
  }

  await reread();
  let timer = null;
  function poll() {
    clearTimeout(timer);
    if (sweep.status !== "running") return;
    timer = setTimeout(async () => {
      try { await reread(); } catch { /* try again on the next tick */ }
      poll();
    }, REFRESH_MS);
  }
  poll();
  return () => { clearTimeout(timer); chart.destroy(); };
}
