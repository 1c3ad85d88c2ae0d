// The dashboard's router: one page module per hash route, each returning a cleanup function that
// stops its timers and streams when the page is left.
//   #/            runs table          #/runs/<id>   one run
//   #/compare     compare runs        #/new         new run form
//   #/matches     matches table       #/matches/<id>  one match     #/matches/new  start a match
//   #/sweeps      sweeps table        #/sweeps/<id>   one sweep     #/sweeps/new   launch a sweep
// Signed out, every route shows the sign-in page; `#login=<token>` (the URL `marlforge up` prints)
// signs in with a one-time token and is then taken out of the address bar.

import * as compare from "./compare.js";
import * as newMatch from "./match_new.js";
import * as matches from "./matches.js";
import * as newRun from "./new.js";
import * as run from "./run.js";
import * as runs from "./runs.js";
import * as sweep from "./sweep.js";
import * as newSweep from "./sweep_new.js";
import * as sweeps from "./sweeps.js";
import { canWrite, me, mountSignIn, signIn, signOut, whoami } from "./session.js";
import { fill, h, route } from "./util.js";

const root = document.getElementById("app");
const identity = document.getElementById("identity");
let signInProblem = null;
let cleanup = () => {};
let generation = 0;

function page(path) {
  const match = path.match(/^\/runs\/([0-9A-Z]{26})$/);
  if (match) return { nav: "runs", title: "Run", mount: (r, p) => run.mount(r, p, match[1]) };
  const matchId = path.match(/^\/matches\/([0-9A-Z]{26})$/);
  if (matchId) return { nav: "matches", title: "Match", mount: (r, p) => matches.mountMatch(r, p, matchId[1]) };
  if (path === "/matches") return { nav: "matches", title: "Matches", mount: matches.mountList };
  if (path === "/matches/new") return { nav: "matches", title: "Start a match", mount: newMatch.mount, writes: true };
  const sweepId = path.match(/^\/sweeps\/([0-9A-Z]{26})$/);
  if (sweepId) return { nav: "sweeps", title: "Sweep", mount: (r, p) => sweep.mount(r, p, sweepId[1]) };
  if (path === "/sweeps") return { nav: "sweeps", title: "Sweeps", mount: sweeps.mountList };
  if (path === "/sweeps/new") return { nav: "sweeps", title: "New sweep", mount: newSweep.mount, writes: true };
  if (path === "/compare") return { nav: "compare", title: "Compare", mount: compare.mount };
  if (path === "/new") return { nav: "new", title: "New run", mount: newRun.mount, writes: true };
  if (path === "/" || path === "") return { nav: "runs", title: "Runs", mount: runs.mount };
  return null;
}

async function show() {
  const mine = ++generation;
  cleanup();
  cleanup = () => {};
  drawIdentity();
  if (!me) {
    document.title = "Sign in · MARLForge";
    mountSignIn(root, show, signInProblem);
    signInProblem = null;
    return;
  }
  const { path, params } = route();
  const target = page(path);
  document.querySelectorAll("[data-nav]").forEach((a) => a.classList.toggle("active", target && a.dataset.nav === target.nav));
  if (target && target.writes && !canWrite()) {
    fill(root, h("div", { class: "card" }, `Your key is a ${me.key.role} key: it can read runs, matches and sweeps but not start them. `,
      h("a", { href: "#/" }, "Back to the runs.")));
    return;
  }
  if (!target) {
    fill(root, h("div", { class: "card" }, "No such page. ", h("a", { href: "#/" }, "Back to the runs.")));
    return;
  }
  document.title = `${target.title} · MARLForge`;
  // Each visit draws into its own container, so a slow page that finishes loading after the user
  // has moved on draws nowhere visible.
  const container = h("div", { "data-page": target.nav }, h("p", { class: "muted" }, "Loading…"));
  fill(root, container);
  try {
    const stop = await target.mount(container, params);
    // A newer navigation happened while this page was loading: stop what it started.
    if (mine !== generation) stop();
    else cleanup = stop;
  } catch (e) {
    fill(container, h("div", { class: "card errors" }, `Could not load this page: ${e.message}`));
  }
}

function drawIdentity() {
  document.querySelectorAll("[data-nav=new]").forEach((a) => { a.hidden = !canWrite(); });
  if (!me) { fill(identity); return; }
  fill(identity,
    h("span", { class: "who", "data-role": me.key.role },
      h("b", {}, me.project), ` · ${me.key.name} (${me.key.role})`),
    h("button", { type: "button", id: "sign-out", onclick: leave }, "Sign out"));
}

async function leave() {
  await signOut();
  location.hash = "#/";
  show();
}

async function start() {
  const login = location.hash.match(/^#login=([A-Za-z0-9_-]+)$/);
  if (login) {
    // Out of the address bar and the history at once: the token works only once anyway.
    history.replaceState(null, "", `${location.pathname}#/`);
    try {
      await signIn(login[1]);
    } catch (e) {
      signInProblem = "That sign-in link was already used or has expired; paste a key instead.";
    }
  }
  await whoami();
  window.addEventListener("hashchange", show);
  window.addEventListener("marlforge:signed-out", async () => { await whoami(); show(); });
  show();
}

start();
