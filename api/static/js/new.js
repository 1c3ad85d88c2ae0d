// New run: pick algorithm, backend and environment; every field is built from the catalogue
// (GET /v1/algorithms: each hyperparameter's type, default on the chosen env, and description)
// and the spec's own schema (/openapi.json). Edit as a form or as JSON; the server validates, and
// each error it names appears next to its field. Tags (comma-separated) and notes label the run;
// they can be edited later on its page.

import { ApiError, api, explainTags, fill, formErrors, h, parseTags } from "./util.js";

const SUGGESTED_TOTAL_STEPS = 20000;

/** The schema of a property without its `null` option, and whether null is allowed. */
function unwrap(prop, defs) {
  let nullable = false;
  let base = prop;
  if (prop.anyOf) {
    nullable = prop.anyOf.some((p) => p.type === "null");
    base = prop.anyOf.find((p) => p.type !== "null") || {};
  }
  if (base.$ref) base = defs[base.$ref.split("/").pop()] || {};
  return { base, nullable };
}

/** An input for one schema property; `read()` returns its value for the spec. */
function control(path, prop, value, defs) {
  const { base, nullable } = unwrap(prop, defs);
  let input;
  let read;
  if (base.enum) {
    input = h("select", { name: path }, base.enum.map((v) => h("option", { value: v, selected: v === value }, v)));
    read = () => input.value;
  } else if (base.type === "boolean") {
    input = h("input", { type: "checkbox", name: path, checked: Boolean(value) });
    read = () => input.checked;
  } else if (base.type === "integer" || base.type === "number") {
    input = h("input", { type: "number", step: "any", name: path, value: value ?? "",
                         placeholder: nullable ? "null (off)" : "" });
    read = () => (input.value.trim() === "" ? null : Number(input.value));
  } else if (base.type === "array") {
    input = h("input", { type: "text", name: path, value: (value || []).join(", "), placeholder: "comma-separated" });
    read = () => input.value.split(",").map((s) => s.trim()).filter(Boolean)
      .map((s) => (s !== "" && !Number.isNaN(Number(s)) ? Number(s) : s));
  } else {
    input = h("input", { type: "text", name: path, value: value ?? "" });
    read = () => (nullable && input.value === "" ? null : input.value);
  }
  const write = (v) => {
    if (input.type === "checkbox") input.checked = Boolean(v);
    else if (Array.isArray(v)) input.value = v.join(", ");
    else input.value = v ?? "";
  };
  return { input, read, write };
}

function field(path, label, description, ctl) {
  return h("div", { class: "field", "data-field": path },
    h("label", {}, h("span", { class: "label" }, label), " ", ctl.input),
    description ? h("div", { class: "hint" }, description.replace(/``/g, "")) : null,
    h("div", { class: "field-error", role: "alert" }));
}

export async function mount(root) {
  const [catalogue, openapi] = await Promise.all([api("/v1/algorithms"), api("/openapi.json")]);
  const schemas = openapi.components.schemas;
  const buildable = catalogue.filter((a) => a.backends.length > 0);
  const general = new Map(); // dotted path -> control
  let hyper = new Map();
  let mode = "form";

  const algorithm = h("select", { name: "algorithm", onchange: () => { chooseBackends(); chooseEnvs(); drawHyper(); } },
    buildable.map((a) => h("option", { value: a.algorithm }, `${a.title} (${a.algorithm})`)));
  const backend = h("select", { name: "backend" });
  const environment = h("select", { name: "environment", onchange: () => drawHyper() });
  const hyperBox = h("div", { class: "form-grid", id: "hyperparameters" });
  const summary = h("p", { class: "small muted" });
  const errors = h("div", { class: "errors", id: "form-errors", role: "alert" });
  const json = h("textarea", { name: "spec-json", spellcheck: "false", "aria-label": "spec as JSON" });
  const formView = h("div", { id: "form-view" });
  const problems = formErrors(formView, errors, "The spec was refused:");
  const jsonView = h("div", { id: "json-view", hidden: true },
    h("p", { class: "small muted" }, "The whole spec as JSON; it is sent as written."), json);
  const submit = h("button", { class: "primary", type: "submit", "data-action": "submit" }, "Start run");
  const tabs = h("div", { class: "tabs" },
    h("button", { type: "button", class: "active", "data-tab": "form", onclick: () => switchTo("form") }, "Form"),
    h("button", { type: "button", "data-tab": "json", onclick: () => switchTo("json") }, "JSON"));

  const current = () => buildable.find((a) => a.algorithm === algorithm.value);
  const currentEnv = () => current().environments[Number(environment.value)];

  function chooseBackends() {
    const a = current();
    fill(backend, a.all_backends.map((b) => h("option", { value: b, disabled: !a.backends.includes(b) },
      a.backends.includes(b) ? b : `${b} (not built)`)));
    backend.value = a.all_backends.find((b) => a.backends.includes(b));
  }

  function chooseEnvs() {
    fill(environment, current().environments.map((e, i) => h("option", { value: i }, `${e.id} (${e.suite})`)));
    summary.textContent = current().summary;
  }

  function drawHyper() {
    const a = current();
    const env = currentEnv();
    const props = a.hyperparameters.properties;
    hyper = new Map(Object.entries(props).map(([key, prop]) =>
      [key, control(`hyperparameters.${key}`, prop, env.hyperparameter_defaults[key], a.hyperparameters.$defs || {})]));
    fill(hyperBox, [...hyper].map(([key, ctl]) => field(`hyperparameters.${key}`, key, props[key].description, ctl)));
    // What a spec that leaves them out would get: the settings the algorithm's tables used.
    const envDefaults = env.env_defaults || {};
    general.get("env.kwargs").write(JSON.stringify({ ...env.env_kwargs, ...(envDefaults.kwargs || {}) }));
    general.get("env.num_envs").write(envDefaults.num_envs ?? envProps.num_envs.default);
    general.get("name").write(`${a.algorithm}-${env.id}`.toLowerCase());
  }

  function generalField(path, label, prop, value) {
    const ctl = control(path, prop, value, schemas);
    general.set(path, ctl);
    return field(path, label, prop.description, ctl);
  }

  const spec = schemas.SpecEnvelope.properties;
  const envProps = schemas.EnvSpec.properties;
  const evalProps = schemas.EvaluationSpec.properties;
  const ckptProps = schemas.CheckpointSpec.properties;
  const kwargs = { input: h("input", { type: "text", name: "env.kwargs" }) };
  kwargs.read = () => JSON.parse(kwargs.input.value || "{}");
  kwargs.write = (v) => { kwargs.input.value = v; };
  general.set("env.kwargs", kwargs);
  // Tags are typed as one line; each stays a string ("1" is a tag, not a number).
  const tags = { input: h("input", { type: "text", name: "tags", placeholder: "baseline, lr:3e-4" }) };
  tags.read = () => parseTags(tags.input.value);
  tags.write = (v) => { tags.input.value = (v || []).join(", "); };
  general.set("tags", tags);
  const notes = { input: h("textarea", { name: "notes", class: "notes", rows: 3, placeholder: "what this run tries" }) };
  notes.read = () => notes.input.value;
  notes.write = (v) => { notes.input.value = v ?? ""; };
  general.set("notes", notes);
  const notesField = field("notes", "Notes", spec.notes.description, notes);
  notesField.classList.add("wide");

  fill(formView,
    h("div", { class: "card" }, h("h2", {}, "What to train"),
      h("div", { class: "form-grid" },
        h("div", { class: "field", "data-field": "algorithm" }, h("label", {}, h("span", { class: "label" }, "Algorithm"), " ", algorithm), h("div", { class: "field-error" })),
        h("div", { class: "field", "data-field": "backend" }, h("label", {}, h("span", { class: "label" }, "Backend"), " ", backend), h("div", { class: "field-error" })),
        h("div", { class: "field", "data-field": "env.id" }, h("label", {}, h("span", { class: "label" }, "Environment"), " ", environment), h("div", { class: "field-error" }))),
      summary,
      h("div", { class: "form-grid" },
        generalField("name", "Name", spec.name, ""),
        field("tags", "Tags (comma-separated)", spec.tags.description, tags),
        generalField("total_steps", "Total steps", spec.total_steps, SUGGESTED_TOTAL_STEPS),
        generalField("seed", "Seed", spec.seed, spec.seed.default),
        generalField("device", "Device", spec.device, spec.device.default),
        generalField("env.num_envs", "Parallel envs", envProps.num_envs, envProps.num_envs.default),
        field("env.kwargs", "Env arguments (JSON)", envProps.kwargs.description, kwargs),
        generalField("evaluation.every_steps", "Evaluate every (steps)", evalProps.every_steps, evalProps.every_steps.default),
        generalField("evaluation.episodes", "Evaluation episodes", evalProps.episodes, evalProps.episodes.default),
        generalField("checkpoint.every_steps", "Checkpoint every (steps)", ckptProps.every_steps, ckptProps.every_steps.default),
        generalField("checkpoint.keep_last", "Checkpoints kept", ckptProps.keep_last, ckptProps.keep_last.default),
        notesField)),
    h("div", { class: "card" }, h("h2", {}, "Hyperparameters"),
      h("p", { class: "small muted" }, "Defaults are the algorithm's for the chosen environment."), hyperBox));

  /** The spec the form describes (throws for unparsable env arguments). */
  function fromForm() {
    const value = (path) => general.get(path).read();
    const env = currentEnv();
    let envKwargs;
    try { envKwargs = value("env.kwargs"); } catch { throw new ApiError(422, { error: {
      message: "env.kwargs: not valid JSON", fields: [{ field: "env.kwargs", reason: "must be a JSON object" }] } }); }
    return {
      name: value("name"), tags: value("tags"), notes: value("notes"),
      algorithm: algorithm.value, backend: backend.value,
      env: { suite: env.suite, id: env.id, num_envs: value("env.num_envs"), kwargs: envKwargs },
      total_steps: value("total_steps"), seed: value("seed"), device: value("device"),
      hyperparameters: Object.fromEntries([...hyper].map(([k, ctl]) => [k, ctl.read()])),
      evaluation: { every_steps: value("evaluation.every_steps"), episodes: value("evaluation.episodes") },
      checkpoint: { every_steps: value("checkpoint.every_steps"), keep_last: value("checkpoint.keep_last") },
    };
  }

  /** Fill the form from a spec (the JSON view's content). */
  function toForm(s) {
    if (buildable.some((a) => a.algorithm === s.algorithm)) { algorithm.value = s.algorithm; chooseBackends(); chooseEnvs(); }
    if (s.backend) backend.value = s.backend;
    const envIndex = current().environments.findIndex((e) => s.env && e.id === s.env.id);
    if (envIndex >= 0) environment.value = String(envIndex);
    drawHyper();
    const flat = { name: s.name, tags: s.tags, notes: s.notes, total_steps: s.total_steps, seed: s.seed, device: s.device,
      "env.num_envs": s.env?.num_envs, "evaluation.every_steps": s.evaluation?.every_steps,
      "evaluation.episodes": s.evaluation?.episodes, "checkpoint.every_steps": s.checkpoint?.every_steps,
      "checkpoint.keep_last": s.checkpoint?.keep_last };
    for (const [path, v] of Object.entries(flat)) if (v !== undefined) general.get(path).write(v);
    if (s.env?.kwargs) kwargs.write(JSON.stringify(s.env.kwargs));
    for (const [k, v] of Object.entries(s.hyperparameters || {})) hyper.get(k)?.write(v);
  }

  function switchTo(next) {
    problems.clear();
    if (next === mode) return;
    try {
      if (next === "json") json.value = JSON.stringify(fromForm(), null, 2);
      else toForm(JSON.parse(json.value));
    } catch (e) {
      fill(errors, e instanceof SyntaxError ? `The JSON is not valid: ${e.message}` : e.message);
      return;
    }
    mode = next;
    formView.hidden = mode !== "form";
    jsonView.hidden = mode !== "json";
    tabs.querySelectorAll("button").forEach((b) => b.classList.toggle("active", b.dataset.tab === mode));
  }

  async function onSubmit(event) {
    event.preventDefault();
    problems.clear();
    submit.disabled = true;
    try {
      const body = mode === "json" ? json.value : fromForm();
      const created = await api("/v1/experiments", { method: "POST", body });
      location.hash = `#/runs/${created.id}`;
    } catch (e) {
      if (mode === "form") explainTags(e, tags.read());
      problems.show(e, mode === "form");
    } finally {
      submit.disabled = false;
    }
  }

  fill(root,
    h("form", { novalidate: true, onsubmit: onSubmit, id: "new-run" },
      h("div", { class: "row spread" }, h("h1", {}, "New run"), tabs),
      errors, formView, jsonView,
      h("div", { class: "row" }, submit)));
  chooseBackends();
  chooseEnvs();
  drawHyper();
  return () => {};
}
