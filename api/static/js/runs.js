// The runs table: every experiment with its status, progress and latest numbers, refreshed in
// place every two seconds; filters; pick runs to compare. A sweep's run links to its sweep, and
// `#/?sweep_id=<id>` lists one sweep's runs only. Each run shows its tags; clicking one lists the
// runs holding it (`#/?tag=<tag>`, the API's `?tag=`), and the name box searches with `?q=`.

import { age, api, badge, envName, fill, h, num, progressBar, tagLabels } from "./util.js";

const REFRESH_MS = 2000;
const STATUSES = ["pending", "queued", "running", "cancelling", "cancelled", "succeeded", "failed"];

function latest(run, name) {
  const m = run.latest_metrics[name];
  return m ? m.value : null;
}

/** A sweep's run names its sweep (linked) and its configuration there. */
function sweepOf(run, sweepNames) {
  if (!run.sweep_id) return null;
  return h("div", { class: "small" }, h("a", { href: `#/sweeps/${run.sweep_id}`, class: "sweep-link", title: run.sweep_id },
    `sweep ${sweepNames.get(run.sweep_id) ?? run.sweep_id}`), h("span", { class: "muted" }, ` · ${run.sweep_config}`));
}

function row(run, selected, onSelect, sweepNames, tagHref) {
  // The greedy policy's evaluation is what a user compares runs by; training's return (with
  // exploration) only until the first evaluation.
  const evaluated = latest(run, "eval/episode_return");
  const ret = evaluated ?? latest(run, "train/episode_return");
  return h("tr", { "data-run": run.id, "data-status": run.status, "data-step": run.progress.step },
    h("td", {}, h("input", { type: "checkbox", "aria-label": `select ${run.name}`,
                             checked: selected.has(run.id),
                             onchange: (e) => onSelect(run.id, e.target.checked) })),
    h("td", {}, h("a", { href: `#/runs/${run.id}`, class: "run-link" }, run.name), sweepOf(run, sweepNames),
      run.spec.tags?.length ? h("div", {}, tagLabels(run.spec.tags, tagHref)) : null),
    h("td", {}, run.algorithm),
    h("td", {}, run.backend),
    h("td", {}, envName(run.spec)),
    h("td", {}, badge(run.status)),
    h("td", {}, progressBar(run.progress.fraction), " ",
      h("span", { class: "small muted" }, `${Math.round(run.progress.fraction * 100)}%`)),
    h("td", { class: "num", "data-col": "return", title: evaluated === null ? "training return (no evaluation yet)" : "evaluation return" }, num(ret)),
    h("td", { class: "num hide-narrow" }, num(latest(run, "perf/steps_per_second"))),
    h("td", { class: "num hide-narrow", title: run.created_at }, age(run.created_at)));
}

function select(name, label, options, value, onchange) {
  return h("label", { class: "small" }, `${label} `,
    h("select", { name, onchange },
      h("option", { value: "" }, "all"),
      options.map((o) => h("option", { value: o, selected: o === value }, o))));
}

/** The project's sweeps' names by id (the newest 500). */
async function sweepNamesOf() {
  const page = await api("/v1/sweeps?limit=500").catch(() => ({ items: [] }));
  return new Map(page.items.map((s) => [s.id, s.name]));
}

export async function mount(root, params) {
  const selected = new Set();
  const filters = { status: "", algorithm: "", backend: "", q: "", sweep_id: params.get("sweep_id") || "", tag: params.get("tag") || "" };
  // A tag's link keeps the page's other filter from the address (a sweep's runs with that tag).
  const tagHref = (tag) => {
    const next = new URLSearchParams(params);
    next.set("tag", tag);
    return `#/?${next}`;
  };
  const withoutTag = new URLSearchParams(params);
  withoutTag.delete("tag");
  const [catalogue, names] = await Promise.all([api("/v1/algorithms").catch(() => []), sweepNamesOf()]);
  let sweepNames = names;
  const looked = new Set();
  const algorithms = catalogue.map((a) => a.algorithm);
  const backends = catalogue.length ? catalogue[0].all_backends : [];

  const body = h("tbody");
  const count = h("span", { class: "muted small" });
  const compare = h("button", { class: "primary", disabled: true, "data-action": "compare",
                                onclick: () => { location.hash = `#/compare?ids=${[...selected].join(",")}`; } },
                    "Compare selected");
  const refresh = () => load().catch(showError);
  const onFilter = (key) => (e) => { filters[key] = e.target.value; refresh(); };
  const error = h("div", { class: "errors" });

  fill(root,
    h("div", { class: "row spread" }, h("h1", {}, "Runs"), h("div", { class: "row" }, count, compare)),
    filters.sweep_id && h("div", { class: "card row", id: "sweep-filter" }, "The runs of sweep ",
      h("a", { href: `#/sweeps/${filters.sweep_id}` }, sweepNames.get(filters.sweep_id) ?? filters.sweep_id), " only. ",
      h("a", { href: "#/" }, "Show every run")),
    filters.tag && h("div", { class: "card row", id: "tag-filter" }, "The runs tagged ",
      tagLabels([filters.tag], tagHref), " only. ",
      h("a", { href: `#/${withoutTag.size ? `?${withoutTag}` : ""}`, "data-action": "clear-tag" }, "Show them all")),
    h("div", { class: "card row" },
      select("status", "Status", STATUSES, "", onFilter("status")),
      select("algorithm", "Algorithm", algorithms, "", onFilter("algorithm")),
      select("backend", "Backend", backends, "", onFilter("backend")),
      h("label", { class: "small" }, "Name ",
        h("input", { type: "search", name: "q", placeholder: "search by name",
                     oninput: (e) => { filters.q = e.target.value.trim(); refresh(); } }))),
    error,
    h("div", { class: "card table-wrap" },
      h("table", { id: "runs" },
        h("thead", {}, h("tr", {}, ["", "Name", "Algorithm", "Backend", "Environment", "Status",
          "Progress", "Eval return", "Steps/s", "Age"].map((t, i) =>
            h("th", { class: i >= 8 ? "hide-narrow" : null }, t)))),
        body)));

  function showError(e) { fill(error, `Could not load the runs: ${e.message}`); }

  function onSelect(id, on) {
    if (on) selected.add(id); else selected.delete(id);
    compare.disabled = selected.size < 2;
  }

  // Typing in the name box sends a request per key, and answers can arrive out of order: one older
  // than the answer last drawn is dropped.
  let sent = 0;
  let drawn = 0;
  async function load() {
    const mine = ++sent;
    const query = new URLSearchParams({ limit: "200" });
    for (const key of ["status", "algorithm", "backend", "sweep_id", "tag", "q"]) if (filters[key]) query.set(key, filters[key]);
    const page = await api(`/v1/experiments?${query}`);
    if (mine < drawn) return;
    const runs = page.items;
    // A run of a sweep started after the names were read: read them again (once per sweep).
    const unseen = runs.filter((r) => r.sweep_id && !sweepNames.has(r.sweep_id) && !looked.has(r.sweep_id));
    if (unseen.length) {
      unseen.forEach((r) => looked.add(r.sweep_id));
      sweepNames = await sweepNamesOf();
      if (mine < drawn) return;
    }
    drawn = mine;
    fill(error);
    const filtered = filters.status || filters.algorithm || filters.backend || filters.tag || filters.q;
    const none = filtered ? "No runs match these filters."
      : filters.sweep_id ? "No runs in this sweep." : "No runs yet: start one with New run.";
    fill(body, runs.length ? runs.map((r) => row(r, selected, onSelect, sweepNames, tagHref))
                           : h("tr", {}, h("td", { colspan: 10, class: "muted" }, none)));
    count.textContent = `${runs.length} run${runs.length === 1 ? "" : "s"}`;
  }

  await refresh();
  const timer = setInterval(() => { if (!document.hidden) refresh(); }, REFRESH_MS);
  return () => clearInterval(timer);
}
