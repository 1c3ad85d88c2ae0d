// Launch a sweep: the whole request of POST /v1/sweeps in one JSON editor, prefilled with a
// working example built from the catalogue (DDPG on Pendulum-v1 where it is built, its defaults, a
// grid over one learning rate, three seeds). The server builds and validates every run before it
// stores any; each reason it gives appears beside the editor, and a started sweep opens its page.

import { ApiError, api, fill, formErrors, h } from "./util.js";

// A hyperparameter worth sweeping first, where the algorithm has it.
const SWEPT = ["learning_rate_actor", "learning_rate", "lr"];

/** A sweep the catalogue's algorithm trains as it is: the base is what the new run form would
 *  start from (the env's defaults), the grid tries the default learning rate and a third of it. */
export function example(catalogue) {
  const buildable = catalogue.filter((a) => a.backends.length > 0);
  const algo = buildable.find((a) => a.algorithm === "ddpg") || buildable[0];
  if (!algo) return null;
  const env = algo.environments.find((e) => e.id === "Pendulum-v1") || algo.environments[0];
  const defaults = env.hyperparameter_defaults;
  const key = SWEPT.find((k) => typeof defaults[k] === "number")
    || Object.keys(defaults).find((k) => typeof defaults[k] === "number" && !Number.isInteger(defaults[k]));
  const grid = key
    ? { [`hyperparameters.${key}`]: [defaults[key], Number((defaults[key] / 3).toPrecision(1))] }
    : { total_steps: [10000, 20000] };
  const envDefaults = env.env_defaults || {};
  const name = `${algo.algorithm}-${env.id}`.toLowerCase();
  return {
    name: `${name} ${key || "steps"}`,
    base: {
      name, algorithm: algo.algorithm, backend: algo.backends[0],
      env: { suite: env.suite, id: env.id, num_envs: envDefaults.num_envs ?? 1,
             kwargs: { ...env.env_kwargs, ...(envDefaults.kwargs || {}) } },
      total_steps: 20000,
      evaluation: { every_steps: 5000, episodes: 5 },
      checkpoint: { every_steps: 5000, keep_last: 3 },
    },
    space: { grid },
    seeds: 3,
    max_concurrent: 2,
  };
}

export async function mount(root) {
  const catalogue = await api("/v1/algorithms");
  const editor = h("textarea", { name: "sweep-json", spellcheck: "false", "aria-label": "sweep as JSON" });
  editor.value = JSON.stringify(example(catalogue) || {}, null, 2);
  const errors = h("div", { class: "errors", id: "form-errors", role: "alert" });
  const submit = h("button", { class: "primary", type: "submit", "data-action": "submit" }, "Start sweep");
  const editorField = h("div", { class: "field", "data-field": "sweep" }, errors, editor);
  const form = h("form", { novalidate: true, onsubmit: onSubmit, id: "new-sweep" },
    h("div", { class: "row spread" }, h("h1", {}, "New sweep"), h("a", { href: "#/sweeps" }, "All sweeps")),
    h("div", { class: "grid sweep-form" },
      h("div", { class: "card" }, h("h2", {}, "The sweep as JSON"), editorField),
      h("div", { class: "card small" }, h("h2", {}, "How a sweep is written"),
        h("ul", { class: "help" },
          h("li", {}, h("code", {}, "base"), ": a run's spec as New run sends it, without ", h("code", {}, "seed"), "."),
          h("li", {}, h("code", {}, "space.grid"), ": values per spec path (", h("code", {}, "hyperparameters.gamma"), ", ",
            h("code", {}, "env.num_envs"), ", ", h("code", {}, "total_steps"), "…); every combination is a configuration."),
          h("li", {}, h("code", {}, "space.random"), ": a distribution per path (", h("code", {}, '{"uniform": [0.9, 0.99]}'), ", ",
            h("code", {}, "log_uniform"), ", ", h("code", {}, "int_uniform"), ", ", h("code", {}, "choice"), "), drawn ",
            h("code", {}, "num_samples"), " times from ", h("code", {}, "space.seed"), "."),
          h("li", {}, h("code", {}, "seeds"), ": a count (seeds 0 to n-1) or a list; every configuration is trained with each."),
          h("li", {}, h("code", {}, "max_concurrent"), ": at most this many runs queued or running at once; the others wait ",
            h("i", {}, "pending"), ".")),
        h("p", { class: "muted" }, "Every run is checked before any is stored: one the server would refuse refuses the whole sweep, ",
          "and the reason names the swept value."))),
    h("div", { class: "row" }, submit));
  const problems = formErrors(form, errors, "The sweep was refused:");

  async function onSubmit(event) {
    event.preventDefault();
    problems.clear();
    try {
      JSON.parse(editor.value);
    } catch (e) {
      editorField.classList.add("invalid");
      fill(errors, `The JSON is not valid: ${e.message}`);
      return;
    }
    submit.disabled = true;
    try {
      const created = await api("/v1/sweeps", { method: "POST", body: editor.value });
      location.hash = `#/sweeps/${created.id}`;
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      editorField.classList.add("invalid");
      problems.show(e, false);
    } finally {
      submit.disabled = false;
    }
  }

  fill(root, form);
  return () => {};
}
