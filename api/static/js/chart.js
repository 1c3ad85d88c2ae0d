// A small SVG line chart of our own: several series on shared axes, gaps for missing values, a
// hover read-out, live appends, and an optional shaded band around a line (a sweep's mean curve
// and its 95% interval). No charting library: this is all the dashboard needs, it works offline,
// and SVG scales crisply from a phone to a laptop.

import { h, num } from "./util.js";

const SVG = "http://www.w3.org/2000/svg";
export const PALETTE = ["#2f6fde", "#e4572e", "#17a398", "#f3a712", "#8e44ad", "#5c6b7a",
                        "#d81b60", "#2e7d32"];
const MARGIN = { left: 56, right: 14, top: 10, bottom: 26 };
const MAX_LIVE_POINTS = 5000;
const Y_TICKS = 5;

function svg(tag, attrs = {}) {
  const el = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) el.setAttribute(key, String(value));
  return el;
}

/** A round step that cuts [lo, hi] into about `count` parts. */
function tickStep(lo, hi, count) {
  const raw = (hi - lo) / count;
  const magnitude = 10 ** Math.floor(Math.log10(raw));
  const norm = raw / magnitude;
  return (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * magnitude;
}

/** About `count` round tick values covering [lo, hi]. */
export function ticks(lo, hi, count = 5) {
  if (!(hi > lo)) return [lo];
  const step = tickStep(lo, hi, count);
  const out = [];
  for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) out.push(+t.toPrecision(12));
  return out;
}

/** The width of the server's grid (core/metrics/downsample.py Grid.of): the narrowest that puts the
 *  steps in at most (target - 2) / 2 buckets `step // width`, rounded up to a whole number (at
 *  least two) of the coarsest summary range that fits, 4 ** 3 to 4 ** 14 steps. */
function gridWidth(first, last, target) {
  const buckets = Math.floor((target - 2) / 2);
  const least = buckets > 1 ? Math.floor((last - first) / (buckets - 1)) + 1 : last + 1;
  let unit = 1;
  for (let tier = 14; tier >= 3; tier--) {
    if (2 * 4 ** tier <= least) { unit = 4 ** tier; break; }
  }
  return Math.ceil(least / unit) * unit;
}

/** The server's rule (core/metrics/downsample.py min_max): the first and last point, and from each
 *  bucket of the grid its lowest and highest point in step order (the earlier of equal values),
 *  or its first point when it has no finite value. `points` are [step, value] in step order. */
function shrink(points, target) {
  const end = points.length - 1;
  const width = gridWidth(points[0][0], points[end][0], target);
  const kept = new Set([0, end]);
  for (let i = 0; i <= end; ) {
    const start = i, bucket = Math.floor(points[i][0] / width);
    let lo = null, hi = null;
    for (; i <= end && Math.floor(points[i][0] / width) === bucket; i++) {
      const v = points[i][1];
      if (v === null) continue;
      if (lo === null || v < points[lo][1]) lo = i;
      if (hi === null || v > points[hi][1]) hi = i;
    }
    for (const k of lo === null ? [start] : [lo, hi]) kept.add(k);
  }
  return [...kept].sort((a, b) => a - b).map((k) => points[k]);
}

export class LineChart {
  /** @param {{title: string, id?: string}} options */
  constructor({ title, id }) {
    this.series = new Map(); // key -> {label, color, points: [[step, value]], band: [[step, low, high]] | null}
    this.svg = svg("svg", { role: "img", "aria-label": title });
    this.tip = h("div", { class: "tip", hidden: true });
    this.legend = h("div", { class: "legend" });
    this.heading = h("h2", {}, title);
    this.el = h("div", { class: "card chart", "data-chart": id || title, "data-points": 0 },
                this.heading, this.svg, this.tip, this.legend);
    this.svg.addEventListener("mousemove", (e) => this.hover(e));
    this.svg.addEventListener("mouseleave", () => { this.tip.hidden = true; this.cursor?.remove(); });
    this.pending = false;
    this.observer = new ResizeObserver(() => this.schedule());
    this.observer.observe(this.el);
  }

  /** Replace all series: [{key, label, color?, steps, values, low?, high?}]; `low` and `high`
   *  shade a band around the line. */
  set(list) {
    this.series.clear();
    list.forEach((s, i) => this.series.set(s.key, {
      label: s.label, color: s.color || PALETTE[i % PALETTE.length],
      points: s.steps.map((step, k) => [step, s.values[k]]),
      band: s.low && s.high ? s.steps.map((step, k) => [step, s.low[k], s.high[k]]) : null,
    }));
    this.schedule();
  }

  retitle(title) {
    this.heading.textContent = title;
    this.svg.setAttribute("aria-label", title);
  }

  /** Add one point to series `key` (created if new); a point at a known step replaces it. */
  add(key, label, step, value) {
    let s = this.series.get(key);
    if (!s) {
      s = { label, color: PALETTE[this.series.size % PALETTE.length], points: [] };
      this.series.set(key, s);
    }
    const pts = s.points;
    if (!pts.length || pts[pts.length - 1][0] < step) pts.push([step, value]);
    else {
      const at = pts.findIndex((p) => p[0] >= step);
      if (pts[at][0] === step) pts[at] = [step, value];
      else pts.splice(at, 0, [step, value]);
    }
    if (pts.length > MAX_LIVE_POINTS) s.points = shrink(pts, MAX_LIVE_POINTS / 2);
    this.schedule();
  }

  get pointCount() {
    let n = 0;
    for (const s of this.series.values()) n += s.points.length;
    return n;
  }

  schedule() {
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => { this.pending = false; this.render(); });
  }

  destroy() { this.observer.disconnect(); }

  domain() {
    let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
    for (const s of this.series.values()) {
      for (const [x, ...ys] of [...s.points, ...(s.band || [])]) {
        for (const y of ys) {
          if (y === null || !Number.isFinite(y)) continue;
          x0 = Math.min(x0, x); x1 = Math.max(x1, x); y0 = Math.min(y0, y); y1 = Math.max(y1, y);
        }
      }
    }
    if (x0 === Infinity) return null;
    if (x1 === x0) { x0 -= 1; x1 += 1; }
    const pad = (y1 - y0) * 0.05 || Math.abs(y0) * 0.05 || 1;
    // The y range ends on round ticks, so the top and the bottom of the chart carry a label
    // (the eval line near the top is read against one).
    const step = tickStep(y0 - pad, y1 + pad, Y_TICKS);
    return { x0, x1, y0: Math.floor((y0 - pad) / step) * step, y1: Math.ceil((y1 + pad) / step) * step };
  }

  render() {
    const width = Math.max(240, this.svg.clientWidth || 600);
    const height = this.svg.clientHeight || 240;
    this.size = { width, height };
    this.svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
    this.svg.replaceChildren();
    this.el.dataset.points = String(this.pointCount);
    this.legend.replaceChildren(...[...this.series.values()].map(
      (s) => h("span", { style: `--c:${s.color}` }, s.label)));
    const d = this.domain();
    if (!d) {
      this.svg.append(Object.assign(svg("text", { x: width / 2, y: height / 2, "text-anchor": "middle", class: "empty" }),
                                    { textContent: "waiting for data…" }));
      return;
    }
    const sx = (x) => MARGIN.left + ((x - d.x0) / (d.x1 - d.x0)) * (width - MARGIN.left - MARGIN.right);
    const sy = (y) => height - MARGIN.bottom - ((y - d.y0) / (d.y1 - d.y0)) * (height - MARGIN.top - MARGIN.bottom);
    this.scale = { sx, sy, d };
    this.axes(d, sx, sy, width, height);
    // Every band under every line: a line stays readable where another's band covers it.
    for (const s of this.series.values()) if (s.band) this.band(s, sx, sy);
    for (const s of this.series.values()) this.line(s, sx, sy);
  }

  axes(d, sx, sy, width, height) {
    const grid = svg("g", { class: "grid" });
    const axis = svg("g", { class: "axis" });
    for (const t of ticks(d.y0, d.y1, Y_TICKS)) {
      grid.append(svg("line", { x1: MARGIN.left, x2: width - MARGIN.right, y1: sy(t), y2: sy(t) }));
      const label = svg("text", { x: MARGIN.left - 6, y: sy(t) + 4, "text-anchor": "end" });
      label.textContent = num(t);
      axis.append(label);
    }
    // Steps are whole numbers: no tick between two of them.
    for (const t of ticks(d.x0, d.x1, Math.max(2, Math.floor(width / 110))).filter(Number.isInteger)) {
      const label = svg("text", { x: sx(t), y: height - 8, "text-anchor": "middle" });
      label.textContent = num(t);
      axis.append(label);
    }
    this.svg.append(grid, axis);
  }

  line(s, sx, sy) {
    let path = "";
    let pen = false;
    const dots = [];
    s.points.forEach(([x, y], i) => {
      if (y === null || !Number.isFinite(y)) { pen = false; return; }
      path += `${pen ? "L" : "M"}${sx(x).toFixed(1)},${sy(y).toFixed(1)}`;
      const prev = s.points[i - 1], next = s.points[i + 1];
      if (!pen && (!next || next[1] === null) && (!prev || prev[1] === null)) dots.push([x, y]);
      pen = true;
    });
    if (!path) return;
    this.svg.append(svg("path", { d: path, class: "line", fill: "none", stroke: s.color, "stroke-width": 1.6,
                                  "stroke-linejoin": "round", "data-series": s.label }));
    for (const [x, y] of dots) this.svg.append(svg("circle", { cx: sx(x), cy: sy(y), r: 2.5, fill: s.color }));
  }

  /** The shaded band of `s`: one closed shape per run of steps with a finite low and high. */
  band(s, sx, sy) {
    const runs = [[]];
    for (const [x, lo, hi] of s.band) {
      if (Number.isFinite(lo) && Number.isFinite(hi)) runs[runs.length - 1].push([x, lo, hi]);
      else if (runs[runs.length - 1].length) runs.push([]);
    }
    const at = (x, y, i) => `${i ? "L" : "M"}${sx(x).toFixed(1)},${sy(y).toFixed(1)}`;
    const d = runs.filter((r) => r.length).map((r) =>
      r.map(([x, , hi], i) => at(x, hi, i)).join("") + r.slice().reverse().map(([x, lo]) => at(x, lo, 1)).join("") + "Z").join("");
    if (d) this.svg.append(svg("path", { d, class: "band", fill: s.color, "fill-opacity": 0.15, stroke: "none" }));
  }

  hover(event) {
    if (!this.scale) return;
    const box = this.svg.getBoundingClientRect();
    const px = ((event.clientX - box.left) / box.width) * this.size.width;
    const { d } = this.scale;
    const step = d.x0 + ((px - MARGIN.left) / (this.size.width - MARGIN.left - MARGIN.right)) * (d.x1 - d.x0);
    const rows = [];
    for (const s of this.series.values()) {
      let best = null;
      s.points.forEach((p, i) => { if (best === null || Math.abs(p[0] - step) < Math.abs(s.points[best][0] - step)) best = i; });
      if (best === null) continue;
      const [x, y] = s.points[best];
      const band = s.band ? ` [${num(s.band[best][1], 4)}, ${num(s.band[best][2], 4)}]` : "";
      rows.push(h("div", {}, h("span", { style: `color:${s.color}` }, "■ "), `${s.label}: ${num(y, 4)}${band} @ ${num(x, 4)}`));
    }
    this.cursor?.remove();
    this.cursor = svg("line", { x1: px, x2: px, y1: MARGIN.top, y2: this.size.height - MARGIN.bottom, stroke: "#9aa4b2", "stroke-dasharray": "3 3" });
    this.svg.append(this.cursor);
    this.tip.replaceChildren(...rows);
    this.tip.hidden = rows.length === 0;
    this.tip.style.left = `${Math.min(event.clientX - box.left + 12, box.width - 200)}px`;
    this.tip.style.top = `${event.clientY - box.top + 40}px`;
  }
}
