// Matches: the project's matches (one team's policy against another's in a competitive scenario),
// and one match's page with each team's mean return and 95% interval, the scenario's score and the
// replay of one episode. Both reread the API every two seconds while a match is queued or running.

import { canWrite } from "./session.js";
import { ApiError, TERMINAL, age, api, badge, fill, h, num, when } from "./util.js";

const REFRESH_MS = 2000;

/** The project's experiment names by id (one page of the newest 500), for the teams' labels. */
async function experimentNames() {
  const page = await api("/v1/experiments?limit=500").catch(() => ({ items: [] }));
  return new Map(page.items.map((r) => [r.id, r.name]));
}

/** A team's policy: "random", or the run (linked) and the checkpoint's step. */
function policy(choice, names) {
  if (choice === "random") return h("span", { class: "muted" }, "random");
  const name = names.get(choice.experiment_id) ?? choice.algorithm;
  return h("span", {}, h("a", { href: `#/runs/${choice.experiment_id}` }, name),
    ` @ step ${choice.step.toLocaleString()}`,
    h("span", { class: "small muted" }, ` (${choice.algorithm}, ${choice.backend})`));
}

/** "12.3 ± 1.05": the mean and half the width of its 95% interval. */
function meanCi(result) {
  if (!result) return "–";
  const [low, high] = result.ci95;
  return `${num(result.mean_return)} ± ${num((high - low) / 2)}`;
}

/** The match's teams in a stable order (a stored JSON object keeps none): adversary, agent. */
function teamsOf(match) {
  return Object.entries(match.teams).sort(([a], [b]) => a.localeCompare(b));
}

function scoreLines(score) {
  return Object.entries(score || {}).map(([k, v]) => h("div", {}, `${k.replaceAll("_", " ")} ${num(v)}`));
}

function row(match, names) {
  const teams = teamsOf(match);
  return h("tr", { "data-match": match.id, "data-status": match.status },
    h("td", {}, h("a", { href: `#/matches/${match.id}`, class: "match-link" }, match.name)),
    h("td", {}, match.env.id),
    h("td", {}, badge(match.status)),
    h("td", {}, teams.map(([team, choice]) => h("div", { "data-team": team },
      h("b", {}, `${team}: `), policy(choice, names)))),
    h("td", { class: "num" }, teams.map(([team]) => h("div", { "data-result": team },
      meanCi(match.result?.teams[team])))),
    h("td", { class: "small", "data-col": "score" }, match.result ? scoreLines(match.result.score) : "–"),
    h("td", { class: "num hide-narrow", title: match.created_at }, age(match.created_at)));
}

/** The matches table (#/matches). */
export async function mountList(root) {
  const body = h("tbody");
  const error = h("div", { class: "errors" });
  const count = h("span", { class: "muted small" });
  fill(root,
    h("div", { class: "row spread" }, h("h1", {}, "Matches"),
      h("div", { class: "row" }, count,
        canWrite() && h("a", { class: "button primary", href: "#/matches/new", "data-action": "new-match" }, "Start a match"))),
    h("p", { class: "small muted" }, "Each team of a competitive scenario played by a run's checkpoint or by random actions; ",
      "the mean return of each team with its 95% interval over the episodes, and the scenario's own score."),
    error,
    h("div", { class: "card table-wrap" },
      h("table", { id: "matches" },
        h("thead", {}, h("tr", {}, ["Name", "Scenario", "Status", "Teams", "Mean return ± CI", "Score", "Age"]
          .map((t, i) => h("th", { class: i === 6 ? "hide-narrow" : null }, t)))),
        body)));

  let names = await experimentNames();
  async function load() {
    const page = await api("/v1/matches?limit=200");
    // A match names a run this page has not seen yet: reread the names once.
    const unseen = page.items.some((m) => Object.values(m.teams).some((t) => t !== "random" && !names.has(t.experiment_id)));
    if (unseen) names = await experimentNames();
    fill(error);
    fill(body, page.items.length ? page.items.map((m) => row(m, names))
      : h("tr", {}, h("td", { colspan: 7, class: "muted" }, "No matches yet: start one from a run of a competitive scenario.")));
    count.textContent = `${page.items.length} match${page.items.length === 1 ? "" : "es"}`;
  }

  const refresh = () => load().catch((e) => fill(error, `Could not load the matches: ${e.message}`));
  await refresh();
  const timer = setInterval(() => { if (!document.hidden) refresh(); }, REFRESH_MS);
  return () => clearInterval(timer);
}

/** One match (#/matches/<id>). */
export async function mountMatch(root, params, id) {
  let match;
  try {
    match = await api(`/v1/matches/${id}`);
  } catch (e) {
    fill(root, h("div", { class: "card errors" }, e instanceof ApiError && e.status === 404 ? `No match ${id}.` : e.message));
    return () => {};
  }
  const names = new Map();
  await Promise.all(Object.values(match.teams).filter((t) => t !== "random").map(async (t) => {
    const run = await api(`/v1/experiments/${t.experiment_id}`).catch(() => null);
    if (run) names.set(t.experiment_id, run.name);
  }));

  const header = h("div", { class: "card" });
  const failure = h("div");
  const results = h("tbody", { id: "match-teams" });
  const score = h("div", { class: "facts", id: "match-score" });
  const replay = h("div", { class: "replay", id: "match-replay" });
  fill(root, header, failure,
    h("div", { class: "card" }, h("h2", {}, "Result"),
      h("div", { class: "table-wrap" }, h("table", {},
        h("thead", {}, h("tr", {}, ["Team", "Policy", "Mean return", "95% CI"].map((t) => h("th", {}, t)))), results)),
      h("h2", { style: "margin-top:1rem" }, "Score"), score),
    h("div", { class: "card" }, h("h2", {}, "Replay"), replay));

  let replayShown = false;
  function draw() {
    fill(header,
      h("div", { class: "row spread" },
        h("div", {}, h("h1", {}, match.name, " ", badge(match.status)), h("div", { class: "muted small" }, match.id)),
        h("a", { href: "#/matches" }, "All matches")),
      h("div", { class: "facts" },
        fact("Scenario", match.env.id),
        fact("Env arguments", JSON.stringify(match.env.kwargs)),
        fact("Episodes", String(match.episodes)), fact("Seed", String(match.seed)),
        fact("Created", when(match.created_at)), fact("Started", when(match.started_at)),
        fact("Finished", when(match.finished_at)),
        match.worker_id && fact("Worker", match.worker_id)));
    fill(failure, match.status === "failed" && h("div", { class: "card failure", id: "failure" },
      h("h2", {}, "The match failed"), h("pre", {}, match.status_reason || "no reason recorded")));
    const waiting = match.status === "queued" ? "Waiting for a worker…" : "Being played…";
    fill(results, teamsOf(match).map(([team, choice]) => {
      const r = match.result?.teams[team];
      return h("tr", { "data-team": team },
        h("td", {}, h("b", {}, team)), h("td", {}, policy(choice, names)),
        h("td", { class: "num", "data-col": "mean" }, r ? num(r.mean_return) : "–"),
        h("td", { class: "num", "data-col": "ci" }, r ? `[${num(r.ci95[0])}, ${num(r.ci95[1])}]` : "–"));
    }));
    fill(score, match.result
      ? Object.entries(match.result.score).map(([k, v]) => h("div", { "data-score": k }, h("b", {}, k.replaceAll("_", " ")), num(v)))
      : h("span", { class: "muted" }, TERMINAL.has(match.status) ? "No result." : waiting));
    if (match.replay_url && !replayShown) {
      replayShown = true;
      const status = h("div", { class: "small muted" }, "Loading the replay…");
      const img = h("img", { alt: `replay of one episode of ${match.name}`, src: match.replay_url });
      img.addEventListener("load", () => { status.textContent = `Episode 0 (seed ${match.seed})`; });
      img.addEventListener("error", () => { status.textContent = "The replay could not be loaded."; });
      fill(replay, status, img);
    } else if (!match.replay_url) {
      fill(replay, h("span", { class: "muted" }, TERMINAL.has(match.status) ? "No replay." : waiting));
    }
  }

  function fact(label, value) { return h("div", {}, h("b", {}, label), value); }

  draw();
  let timer = null;
  function poll() {
    if (TERMINAL.has(match.status)) return;
    timer = setTimeout(async () => {
      try { match = await api(`/v1/matches/${id}`); draw(); } catch { /* try again on the next tick */ }
      poll();
    }, REFRESH_MS);
  }
  poll();
  return () => clearTimeout(timer);
}
