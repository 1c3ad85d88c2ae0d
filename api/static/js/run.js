// One run: its tags and notes (a member edits them, and the name, through PATCH), live charts fed
// by its event stream, status timeline, checkpoints with downloads and replays (the best by
// evaluation return marked, and downloadable as such), logs, the full spec, cancel and resume; on a
// scenario with several teams, a link that starts a match with this run's policy; a sweep's run
// links to its sweep, a warm-started run to the run it started from.
//
// The charts start from the downsampled series (GET /v1/metrics), whose `event_cursors` say where
// the stream must start so that no point is missed; the stream then appends every new point.

import { LineChart } from "./chart.js";
import { canWrite } from "./session.js";
import {
  ApiError, TERMINAL, api, badge, bytes, competitiveScenarios, envName, explainTags, fill, formErrors, h, num,
  parseTags, progressBar, tagLabels, when,
} from "./util.js";

// A return over every agent, or one team's (`train/episode_return/adversary`: one line per team on
// a scenario with several teams).
const RETURN = /^(train|eval)\/episode_return(\/[^/]+)?$/;

// Which metrics each chart shows: exact names or a prefix test.
const CHARTS = [
  { id: "return", title: "Episode return", match: (n) => RETURN.test(n) },
  { id: "loss", title: "Losses", match: (n) => n.startsWith("learner/loss") },
  { id: "entropy", title: "Entropy", match: (n) => n === "learner/entropy" },
  { id: "lr", title: "Learning rate", match: (n) => n === "learner/learning_rate" },
  { id: "sps", title: "Steps per second", match: (n) => n === "perf/steps_per_second" },
  { id: "length", title: "Episode length", match: (n) => n.endsWith("/episode_length") },
  { id: "other", title: "Other statistics", match: () => true },
];

function chartFor(name) {
  return CHARTS.find((c) => c.match(name)).id;
}

const tagHref = (tag) => `#/?${new URLSearchParams({ tag })}`;

/** One labelled input of the edit form; `formErrors` puts the server's reason under it. */
function editField(path, label, input) {
  return h("div", { class: path === "notes" ? "field wide" : "field", "data-field": path },
    h("label", {}, h("span", { class: "label" }, label), " ", input),
    h("div", { class: "field-error", role: "alert" }));
}

export async function mount(root, params, id) {
  let run;
  try {
    run = await api(`/v1/experiments/${id}`);
  } catch (e) {
    fill(root, h("div", { class: "card errors" }, e instanceof ApiError && e.status === 404 ? `No run ${id}.` : e.message));
    return () => {};
  }
  // A run of a competitive scenario can play a match: offered to keys that may start one.
  const catalogue = canWrite() ? await api("/v1/algorithms").catch(() => []) : [];
  const competitive = competitiveScenarios(catalogue).has(run.spec.env.id);
  const sweep = run.sweep_id ? await api(`/v1/sweeps/${run.sweep_id}`).catch(() => null) : null;
  // A warm-started run links the run it started from (its spec's init, resolved).
  const parent = run.parent ? await api(`/v1/experiments/${run.parent.experiment_id}`).catch(() => null) : null;
  const charts = new Map(CHARTS.map((c) => [c.id, new LineChart({ title: c.title, id: c.id })]));
  const header = h("div", { class: "card" });
  // Not redrawn with the header (which follows the run every few seconds): an open edit form
  // keeps what the user is typing.
  const about = h("div", { class: "card", id: "about" });
  let editing = false;
  const failure = h("div");
  const bestDownload = h("div", { class: "row", id: "best-checkpoint" });
  const spec = h("pre", { id: "spec" });
  const timeline = h("ul", { class: "timeline", id: "timeline" });
  const checkpoints = h("tbody", { id: "checkpoints" });
  const logs = h("div", { class: "logs", id: "logs" });
  const replay = h("div", { class: "replay", id: "replay" });
  const chartGrid = h("div", { class: "grid", id: "charts" });

  fill(root, header, about, failure, chartGrid,
    h("div", { class: "grid" },
      h("div", { class: "card" }, h("h2", {}, "Status timeline"), timeline),
      h("div", { class: "card" }, h("div", { class: "row spread" }, h("h2", {}, "Checkpoints"), bestDownload),
        h("div", { class: "table-wrap" }, h("table", {},
          h("thead", {}, h("tr", {}, ["Step", "Eval return", "Size", "Saved", ""].map((t) => h("th", {}, t)))), checkpoints)),
        replay)),
    h("div", { class: "card" }, h("h2", {}, "Log"), logs),
    h("div", { class: "card" }, h("h2", {}, "Spec"), spec));

  function drawHeader() {
    // A viewer's key may not change a run: it is offered no button (the API would answer 403).
    const canCancel = canWrite() && ["pending", "queued", "running"].includes(run.status);
    const canResume = canWrite() && ["cancelled", "failed"].includes(run.status);
    fill(header,
      h("div", { class: "row spread" },
        h("div", {}, h("h1", { id: "run-name" }, run.name, " ", badge(run.status)),
          h("div", { class: "muted small" }, `${run.id}`),
          h("div", { id: "run-tags" }, tagLabels(run.spec.tags, tagHref))),
        h("div", { class: "row" },
          competitive && h("a", { class: "button", href: `#/matches/new?run=${run.id}`, "data-action": "start-match" }, "Start a match"),
          canCancel && h("button", { class: "danger", "data-action": "cancel", onclick: () => act("cancel") }, "Cancel"),
          canResume && h("button", { class: "primary", "data-action": "resume", onclick: () => act("resume") }, "Resume"))),
      h("div", { class: "facts" },
        run.sweep_id && fact("Sweep", h("span", {},
          h("a", { href: `#/sweeps/${run.sweep_id}`, id: "run-sweep" }, sweep ? sweep.name : run.sweep_id),
          ` · ${run.sweep_config}`)),
        run.parent && fact("Started from", h("span", {},
          h("a", { href: `#/runs/${run.parent.experiment_id}`, id: "run-parent" }, parent ? parent.name : run.parent.experiment_id),
          run.parent.what === "run" ? ` · continued from its checkpoint ${run.parent.checkpoint_id}`
            : ` · ${run.parent.what} of checkpoint ${run.parent.checkpoint_id}`)),
        fact("Algorithm", run.algorithm), fact("Backend", run.backend), fact("Environment", envName(run.spec)),
        fact("Step", `${num(run.progress.step)} / ${num(run.progress.total_steps)}`),
        fact("Return", num(run.latest_metrics["train/episode_return"]?.value)),
        fact("Eval return", num(run.latest_metrics["eval/episode_return"]?.value)),
        fact("Started", when(run.started_at)),
        run.worker && fact("Worker", workerText(run.worker)),
        run.device && fact("Device", h("span", { id: "run-device" }, run.device)),
        fact("Restarts", `${run.restarts} of ${run.max_restarts}`),
        run.queue_position && fact("Queue position", `${run.queue_position}`)),
      silence(),
      // Why a queued run has not started (no GPU worker for a cuda run, a restart's cause).
      run.status === "queued" && run.status_reason &&
        h("div", { class: "muted small", id: "queued-reason", role: "status" }, run.status_reason),
      h("div", { style: "margin-top:.6rem" }, progressBar(run.progress.fraction, true)));
    fill(failure, run.status === "failed" && h("div", { class: "card failure", id: "failure" },
      h("h2", {}, "The run failed"), h("pre", {}, run.status_reason || "no reason recorded")));
  }

  function drawAbout() {
    // The spec holds the name, tags and notes too: an edit changes it.
    const text = JSON.stringify(run.spec, null, 2);
    if (spec.textContent !== text) spec.textContent = text;
    if (editing) return;
    fill(about,
      h("div", { class: "row spread" }, h("h2", {}, "Notes"),
        canWrite() && h("button", { type: "button", "data-action": "edit", onclick: openEditor }, "Edit")),
      run.spec.notes ? h("p", { class: "notes-text", id: "run-notes" }, run.spec.notes)
                     : h("p", { class: "muted small", id: "run-notes" }, "No notes."));
  }

  /** The name, tags and notes as a form; Save sends what changed (PATCH) and shows the result. */
  function openEditor() {
    editing = true;
    const name = h("input", { type: "text", name: "name", value: run.name });
    const tags = h("input", { type: "text", name: "tags", value: (run.spec.tags || []).join(", "), placeholder: "baseline, lr:3e-4" });
    const notes = h("textarea", { name: "notes", class: "notes", rows: 4, value: run.spec.notes || "" });
    const summary = h("div", { class: "errors", role: "alert" });
    const save = h("button", { type: "submit", class: "primary", "data-action": "save" }, "Save");
    const form = h("form", { id: "edit-run", novalidate: true, onsubmit: onSave },
      h("h2", {}, "Edit the name, tags and notes"),
      h("div", { class: "form-grid" }, editField("name", "Name", name),
        editField("tags", "Tags (comma-separated)", tags), editField("notes", "Notes", notes)),
      summary,
      h("div", { class: "row" }, save,
        h("button", { type: "button", "data-action": "close-editor", onclick: closeEditor }, "Discard")));
    const problems = formErrors(form, summary, "The edit was refused:");

    async function onSave(event) {
      event.preventDefault();
      problems.clear();
      const wanted = { name: name.value, tags: parseTags(tags.value), notes: notes.value };
      const current = { name: run.name, tags: run.spec.tags || [], notes: run.spec.notes || "" };
      const changes = Object.fromEntries(Object.entries(wanted)
        .filter(([key, value]) => JSON.stringify(value) !== JSON.stringify(current[key])));
      save.disabled = true;
      try {
        if (Object.keys(changes).length) run = await api(`/v1/experiments/${id}`, { method: "PATCH", body: changes });
        drawHeader();
        closeEditor();
      } catch (e) {
        problems.show(explainTags(e, wanted.tags));
      } finally {
        save.disabled = false;
      }
    }
    fill(about, form);
    name.focus();
  }

  function closeEditor() {
    editing = false;
    drawAbout();
  }

  function fact(label, value) { return h("div", {}, h("b", {}, label), value); }

  function workerText(w) {
    return w.lease === "released" ? w.id : `${w.id} (${w.lease}, heartbeat ${when(w.heartbeat_at)})`;
  }

  // A running run whose worker stopped renewing its lease says so: no event will tell.
  function silence() {
    const w = run.worker;
    if (TERMINAL.has(run.status) || !w || !["silent", "lapsed"].includes(w.lease)) return null;
    const text = w.lease === "silent"
      ? `Worker ${w.id} has gone silent: no heartbeat since ${when(w.heartbeat_at)}. The run is restarted from its latest checkpoint if its lease lapses.`
      : `Worker ${w.id} is lost: its lease lapsed. The run is about to be restarted from its latest checkpoint.`;
    return h("div", { class: "errors", id: "worker-silent", role: "status" }, text);
  }

  async function act(what) {
    try {
      run = await api(`/v1/experiments/${id}/${what}`, { method: "POST" });
      drawHeader();
      drawAbout();
      if (what === "resume") connect(lastEventId);
    } catch (e) {
      header.append(h("div", { class: "errors", role: "alert" }, e.message));
    }
  }

  async function loadTimeline() {
    const body = await api(`/v1/experiments/${id}/timeline`);
    fill(timeline, body.items.map((t) => h("li", {}, badge(t.to_status), " ",
      h("span", { class: "small muted" }, when(t.at)), t.reason ? h("div", { class: "small" }, t.reason) : null)));
  }

  async function loadCheckpoints() {
    const body = await api(`/v1/experiments/${id}/checkpoints`);
    fill(checkpoints, body.items.length ? body.items.slice().reverse().map((c) => {
      const base = `/v1/experiments/${id}/checkpoints/${c.id}`;
      return h("tr", { "data-checkpoint": c.id, "data-best": c.best ? "true" : null, class: c.best ? "best" : null },
        h("td", {}, c.step.toLocaleString(), c.best && h("span", { class: "badge best", title: "the highest evaluation return" }, "best")),
        h("td", { class: "num", "data-col": "eval-return", title: c.eval_return === null ? "no evaluation at this step" : null }, num(c.eval_return)),
        h("td", {}, bytes(c.size_bytes)), h("td", { class: "small" }, when(c.created_at)),
        h("td", {}, h("a", { href: `${base}/file`, download: "" }, "Download"), " · ",
          h("a", { href: "#", "data-action": "replay", onclick: (e) => { e.preventDefault(); showReplay(c, base); } }, "Replay")));
    }) : h("tr", {}, h("td", { colspan: 5, class: "muted" }, "No checkpoint yet.")));
    // The best policy by evaluation return, kept beside the newest (checkpoint.keep_best).
    const best = body.items.find((c) => c.best);
    fill(bestDownload, best && [
      h("span", { class: "small muted" }, `best: step ${best.step.toLocaleString()}, eval return ${num(best.eval_return)}`),
      h("a", { class: "button", href: `/v1/experiments/${id}/checkpoints/best/file`, download: "", "data-action": "download-best" },
        "Download best")]);
  }

  function showReplay(c, base) {
    const img = h("img", { alt: `replay of the checkpoint at step ${c.step}`, src: `${base}/replay.gif` });
    const status = h("div", { class: "small muted" }, `Rendering the evaluation episode at step ${c.step}…`);
    img.addEventListener("load", () => { status.textContent = `Evaluation episode at step ${c.step}`; });
    img.addEventListener("error", () => { status.textContent = "The replay could not be rendered."; });
    fill(replay, status, img);
  }

  function addLog(entry) {
    logs.append(h("div", { class: entry.level }, `[${entry.level}] step ${entry.step ?? "–"}: ${entry.message}`));
    logs.scrollTop = logs.scrollHeight;
  }

  // An off-policy run's first `learning_starts` steps take random actions and learn nothing:
  // their steps/s (many times the real speed) would flatten the chart into its axis.
  const warmup = run.spec.hyperparameters?.learning_starts ?? 0;
  function dropWarmup(series) {
    const keep = series.steps.map((step) => step > warmup);
    series.steps = series.steps.filter((_, i) => keep[i]);
    series.values = series.values.filter((_, i) => keep[i]);
  }

  async function loadSeries() {
    const body = await api(`/v1/metrics?experiment_ids=${id}&max_points=500`);
    const grouped = new Map();
    for (const s of body.series) {
      const chart = chartFor(s.name);
      if (chart === "sps") {
        dropWarmup(s);
        if (!s.steps.length) continue; // all warm-up so far: no empty chart
      }
      if (!grouped.has(chart)) grouped.set(chart, []);
      grouped.get(chart).push({ key: s.name, label: s.name, steps: s.steps, values: s.values });
    }
    for (const [chartId, chart] of charts) chart.set(grouped.get(chartId) || []);
    placeCharts();
    return body.event_cursors[id] || 0;
  }

  function placeCharts() {
    // The return chart is always shown; the others once they have data.
    const shown = [...charts.entries()].filter(([cid, c]) => cid === "return" || c.series.size > 0);
    if (shown.length !== chartGrid.children.length) fill(chartGrid, shown.map(([, c]) => c.el));
  }

  drawHeader();
  drawAbout();
  await Promise.all([loadTimeline(), loadCheckpoints()]);
  // The stream starts after the series' cursor; older log lines come from one page read after it.
  let lastEventId = await loadSeries();
  const logPage = await api(`/v1/experiments/${id}/events?format=json&kinds=log&limit=1000`);
  logPage.items.filter((e) => e.id <= lastEventId).forEach((e) => addLog(e.data));
  let source = null;

  function connect(after) {
    source?.close();
    source = new EventSource(`/v1/experiments/${id}/events?after=${after}`);
    const on = (kind, handle) => source.addEventListener(kind, (e) => {
      lastEventId = Number(e.lastEventId);
      handle(JSON.parse(e.data));
    });
    on("metrics", (data) => {
      for (const p of data.points) {
        const chart = chartFor(p.name);
        if (chart === "sps" && p.step <= warmup) continue;
        charts.get(chart).add(p.name, p.name, p.step, p.value);
      }
      placeCharts();
    });
    on("progress", (data) => {
      run.progress = { ...run.progress, step: data.step, fraction: Math.min(1, data.step / data.total_steps) };
      refreshRun();
    });
    on("status", () => { refreshRun(); loadTimeline(); });
    on("checkpoint", () => loadCheckpoints());
    on("log", (data) => addLog(data));
    on("end", () => { source.close(); refreshRun(); loadTimeline(); loadCheckpoints(); });
  }

  let refreshing = null;
  function refreshRun() {
    // Coalesce bursts of events into one read of the run.
    refreshing ??= setTimeout(async () => {
      refreshing = null;
      run = await api(`/v1/experiments/${id}`);
      drawHeader();
      drawAbout();
    }, 250);
  }

  if (!TERMINAL.has(run.status)) connect(lastEventId);
  // A lost worker sends nothing: reread the run now and then to show its lease going silent.
  const watchLease = setInterval(() => { if (!TERMINAL.has(run.status)) refreshRun(); }, 10000);
  return () => {
    source?.close(); clearTimeout(refreshing); clearInterval(watchLease); charts.forEach((c) => c.destroy());
  };
}
