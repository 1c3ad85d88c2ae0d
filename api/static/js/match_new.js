// Start a match: a competitive scenario from the catalogue (GET /v1/algorithms, its `teams`), and
// for each team random play or a checkpoint of one of the project's runs on that scenario (its
// latest by default), the episodes and the seed. The server checks everything; each problem it
// names appears next to its field, as on the new run form. `?run=<id>` (the run page's link) seats
// that run's policy in the first team (`&team=<team>` picks another).

import { ApiError, api, competitiveScenarios, fill, formErrors, h, when } from "./util.js";

const RANDOM = "random";

function field(path, label, input, hint = null) {
  return h("div", { class: "field", "data-field": path },
    h("label", {}, h("span", { class: "label" }, label), " ", input),
    hint ? h("div", { class: "hint" }, hint) : null,
    h("div", { class: "field-error", role: "alert" }));
}

function integer(input) {
  const text = input.value.trim();
  return text === "" ? null : Number(text);
}

export async function mount(root, params) {
  const [catalogue, runsPage] = await Promise.all([api("/v1/algorithms"), api("/v1/experiments?limit=500")]);
  const scenarios = competitiveScenarios(catalogue);
  const runs = runsPage.items;
  const wanted = params.get("run");
  if (wanted && !runs.some((r) => r.id === wanted)) {
    const run = await api(`/v1/experiments/${wanted}`).catch(() => null);
    if (run) runs.push(run);
  }
  if (!scenarios.size) {
    fill(root, h("div", { class: "card" }, "The catalogue has no scenario with several teams to play a match in."));
    return () => {};
  }

  const scenario = h("select", { name: "env.id", onchange: () => drawTeams() },
    [...scenarios.values()].map((s) => h("option", { value: s.id }, `${s.id} (${s.teams.join(" vs ")})`)));
  const kwargs = h("input", { type: "text", name: "env.kwargs", value: "{}", spellcheck: "false" });
  const name = h("input", { type: "text", name: "name", placeholder: "default: the teams' policies" });
  const episodes = h("input", { type: "number", name: "episodes", value: "100", step: "1" });
  const seed = h("input", { type: "number", name: "seed", value: "0", step: "1" });
  const teamsBox = h("div", { class: "grid", id: "teams" });
  const errors = h("div", { class: "errors", id: "form-errors", role: "alert" });
  const problems = formErrors(root, errors, "The match was refused:");
  const submit = h("button", { class: "primary", type: "submit", "data-action": "submit" }, "Start match");
  let seats = new Map(); // team -> {policy, checkpoint}

  function drawTeams() {
    const chosen = scenarios.get(scenario.value);
    const eligible = runs.filter((r) => r.spec.env.id === chosen.id);
    seats = new Map(chosen.teams.map((team) => [team, seat(team, eligible)]));
    fill(teamsBox, [...seats.values()].map((s) => s.el));
  }

  /** One team's choice: random, or a run on the scenario and one of its checkpoints. */
  function seat(team, eligible) {
    const policy = h("select", { name: `teams.${team}.experiment_id`, onchange: () => choose(true) },
      h("option", { value: RANDOM }, "random actions"),
      eligible.map((r) => h("option", { value: r.id }, `${r.name} · ${r.algorithm} · ${r.backend} · ${r.status}`)));
    const checkpoint = h("select", { name: `teams.${team}.checkpoint_id`, disabled: true },
      h("option", { value: "" }, "–"));
    const checkpointField = field(`teams.${team}.checkpoint_id`, "Checkpoint", checkpoint);
    let loading = 0;

    async function choose(fromPerson) {
      const mine = ++loading;
      if (policy.value === RANDOM) {
        fill(checkpoint, h("option", { value: "" }, "–"));
        checkpoint.disabled = true;
        return;
      }
      const run = runs.find((r) => r.id === policy.value);
      // The scenario's arguments must be the ones the policy was trained with (continuous_actions).
      if (fromPerson || kwargs.value === "{}") kwargs.value = JSON.stringify(run.spec.env.kwargs || {});
      fill(checkpoint, h("option", { value: "" }, "loading…"));
      const listed = await api(`/v1/experiments/${run.id}/checkpoints`).catch(() => ({ items: [] }));
      if (mine !== loading) return;
      const items = listed.items.slice().reverse(); // newest first
      fill(checkpoint,
        h("option", { value: "" }, items.length ? `latest (step ${items[0].step.toLocaleString()} now)` : "latest (none yet)"),
        items.map((c) => h("option", { value: c.id }, `step ${c.step.toLocaleString()} · ${when(c.created_at)}`)));
      checkpoint.disabled = items.length === 0;
    }

    const el = h("div", { class: "card field", "data-field": `teams.${team}`, "data-team": team },
      h("h2", {}, `Team ${team}`),
      h("div", { class: "form-grid" },
        field(`teams.${team}.experiment_id`, "Policy", policy,
          eligible.length ? "Random actions, or a run on this scenario." : "No run of this project is on this scenario: random actions only."),
        checkpointField),
      h("div", { class: "field-error", role: "alert" }));
    return { el, policy, checkpoint, choose, read: () => (policy.value === RANDOM ? RANDOM
      : { experiment_id: policy.value, ...(checkpoint.value ? { checkpoint_id: checkpoint.value } : {}) }) };
  }

  function body() {
    let envKwargs;
    try { envKwargs = JSON.parse(kwargs.value || "{}"); } catch {
      throw new ApiError(422, { error: { message: "env.kwargs: not valid JSON",
        fields: [{ field: "env.kwargs", reason: "must be a JSON object" }] } });
    }
    const chosen = scenarios.get(scenario.value);
    return {
      ...(name.value.trim() ? { name: name.value.trim() } : {}),
      env: { suite: chosen.suite, id: chosen.id, kwargs: envKwargs },
      teams: Object.fromEntries([...seats].map(([team, s]) => [team, s.read()])),
      episodes: integer(episodes), seed: integer(seed),
    };
  }

  async function onSubmit(event) {
    event.preventDefault();
    problems.clear();
    submit.disabled = true;
    try {
      const created = await api("/v1/matches", { method: "POST", body: body() });
      location.hash = `#/matches/${created.id}`;
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      problems.show(e);
    } finally {
      submit.disabled = false;
    }
  }

  fill(root,
    h("form", { novalidate: true, onsubmit: onSubmit, id: "new-match" },
      h("div", { class: "row spread" }, h("h1", {}, "Start a match"), h("a", { href: "#/matches" }, "All matches")),
      h("p", { class: "small muted" }, "Seat each team of a competitive scenario with a run's checkpoint or random actions; ",
        "every episode is played with every team's greedy policy, and each team's mean return is reported with its 95% interval."),
      errors,
      h("div", { class: "card" }, h("h2", {}, "Scenario"),
        h("div", { class: "form-grid" },
          field("env.id", "Scenario", scenario),
          field("env.kwargs", "Env arguments (JSON)", kwargs, "As the runs were trained with, e.g. {\"continuous_actions\": true}."),
          field("episodes", "Episodes", episodes, "Whole episodes to play (1 to 1000); the intervals are over them."),
          field("seed", "Seed", seed, "The same match played again gives the same result."),
          field("name", "Name", name))),
      teamsBox,
      h("div", { class: "row" }, submit)));

  // Prefilled from a run's page: its scenario, and its policy in the asked team's seat.
  const prefill = runs.find((r) => r.id === wanted);
  if (prefill && scenarios.has(prefill.spec.env.id)) scenario.value = prefill.spec.env.id;
  drawTeams();
  if (prefill && scenarios.has(prefill.spec.env.id)) {
    const team = seats.has(params.get("team")) ? params.get("team") : [...seats.keys()][0];
    const s = seats.get(team);
    s.policy.value = prefill.id;
    await s.choose(true);
  }
  return () => {};
}
