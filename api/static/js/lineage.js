// A PBT sweep's lineage tree (core/sweeps/pbt.py): a column per round, a row per member; each node
// is one member's round (its run, linked), an edge joins it to the round whose checkpoint it
// continued. A member that copied another's checkpoint (exploit) is drawn with a highlighted edge
// from that member's row; its explored values, and every node's, are in its tooltip and read-out.

import { h, num } from "./util.js";

const SVG = "http://www.w3.org/2000/svg";
const DX = 120, DY = 44, LEFT = 70, TOP = 28, R = 9;
const METRIC = "eval/episode_return";

function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) el.setAttribute(key, String(value));
  for (const child of children) if (child) el.append(child);
  return el;
}

/** Whether the sweep is a PBT search (its configurations carry a lineage). */
export function isPopulation(sweep) {
  return sweep.spec.search?.method === "pbt";
}

function valuesText(params) {
  return Object.entries(params)
    .map(([path, value]) => `${path.replace(/^hyperparameters\./, "")}=${typeof value === "number" ? num(value) : JSON.stringify(value)}`)
    .join(", ");
}

/** The tree as an SVG inside a card; `runs` maps a run's id to the run (for links and scores). */
export function lineageCard(sweep, runs) {
  const configs = sweep.configurations.filter((c) => c.member !== null && c.member !== undefined);
  const byKey = new Map(configs.map((c) => [c.key, c]));
  const runOf = new Map([...runs.values()].map((r) => [r.sweep_config, r]));
  const members = Math.max(0, ...configs.map((c) => c.member + 1));
  const rounds = Math.max(0, ...configs.map((c) => c.round + 1));
  const x = (round) => LEFT + round * DX;
  const y = (member) => TOP + member * DY;
  const width = x(Math.max(rounds - 1, 0)) + LEFT, height = y(Math.max(members - 1, 0)) + TOP;
  const readout = h("div", { class: "small muted", id: "lineage-readout" }, "Hover over a member's round for its values.");
  const edges = svg("g", { class: "edges" });
  const nodes = svg("g", { class: "nodes" });
  for (let m = 0; m < members; m += 1) {
    nodes.append(svg("text", { x: 8, y: y(m) + 4, class: "axis" }, document.createTextNode(`m${m}`)));
  }
  for (let r = 0; r < rounds; r += 1) {
    nodes.append(svg("text", { x: x(r) - 12, y: 12, class: "axis" }, document.createTextNode(`round ${r}`)));
  }
  for (const c of configs) {
    const source = c.continues ? byKey.get(c.continues) : null;
    if (source) {
      edges.append(svg("line", {
        x1: x(source.round) + R, y1: y(source.member), x2: x(c.round) - R, y2: y(c.member),
        class: c.exploited ? "exploit" : "carry", "data-edge": `${source.key}>${c.key}`,
      }));
    }
    const run = runOf.get(c.key);
    const score = run?.latest_metrics?.[METRIC]?.value;
    const what = `${c.key}: ${valuesText(c.params)}` + (c.exploited ? ` (copied ${c.continues}, explored)` : "")
      + (score !== undefined ? ` · ${METRIC} ${num(score)}` : "") + (c.refused ? ` · refused: ${c.refused}` : "");
    const circle = svg("circle", { cx: x(c.round), cy: y(c.member), r: R, class: `node ${run?.status ?? "refused"}` },
      svg("title", {}, document.createTextNode(what)));
    const node = svg("a", { href: run ? `#/runs/${run.id}` : "#", "data-node": c.key, "data-status": run?.status ?? "refused" }, circle);
    node.addEventListener("mouseenter", () => { readout.textContent = what; });
    node.addEventListener("focus", () => { readout.textContent = what; });
    nodes.append(node);
    if (score !== undefined) {
      nodes.append(svg("text", { x: x(c.round) + R + 3, y: y(c.member) - R, class: "score" }, document.createTextNode(num(score))));
    }
  }
  return h("div", { class: "card", id: "lineage" },
    h("h2", {}, "Lineage"),
    h("p", { class: "small muted" }, "Each member's rounds, left to right. A highlighted edge is an exploit: after a round, a member ",
      "from the bottom of the population continued a top member's checkpoint, with that member's values perturbed."),
    h("div", { class: "table-wrap" }, svg("svg", { viewBox: `0 0 ${width} ${height}`, width, height, role: "img",
      "aria-label": "the population's lineage" }, edges, nodes)),
    readout);
}
