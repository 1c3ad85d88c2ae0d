"""``marlforge sweep``: many configurations × seeds, over ``/v1/sweeps``: ``sweep submit
SWEEP.json [--watch]``, ``sweep ls``, ``sweep show ID``, ``sweep watch ID``, ``sweep cancel ID``
and ``sweep resume ID``.

A sweep has no event stream: ``watch`` rereads it every two seconds and prints its runs' counts by
status and their steps together (on a terminal one redrawn line; elsewhere a line whenever the
counts change or the progress passes another tenth) until it is no longer ``running``. It exits 0
when the sweep succeeded and 1 when it failed or was cancelled. ``show`` prints the summary's
ranked table: per configuration its swept values, its finished runs, the mean and the IQM of their
final values with the IQM's 95% interval, and P(best > it) with its interval.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from client.api import EVAL_RETURN, Client
from client.text import safe
from client.transport import ApiError, Json

EXIT_OK, EXIT_FAILED = 0, 1
RUN_STATUSES = ("pending", "queued", "running", "cancelling", "succeeded", "failed", "cancelled")
POLL_S = 2.0
MISSED_POLLS = 5
"""Polls in a row that may go unanswered (an API process restarting) before ``watch`` gives up."""


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    read_json: Callable[[str], Json],
    json_flag: Callable[[argparse.ArgumentParser], None],
) -> None:
    """Add ``sweep`` and its verbs to ``marlforge``'s subcommands."""
    sweep = sub.add_parser("sweep", help="train many configurations × seeds and compare them")
    verbs = sweep.add_subparsers(dest="sweep_command", required=True, metavar="VERB")
    submit = verbs.add_parser("submit", help="submit a sweep (a JSON file, as POST /v1/sweeps)")
    submit.add_argument("sweep", metavar="SWEEP.json", help="the sweep file ('-': stdin)")
    submit.add_argument("--watch", action="store_true", help="then watch it and show its table")
    submit.add_argument("--idempotency-key", default=None, help="retry-safe submission key")
    json_flag(submit)
    ls = verbs.add_parser("ls", help="list the project's sweeps, newest first")
    ls.add_argument("--limit", type=int, default=50, help="at most this many (1-500)")
    json_flag(ls)
    show = verbs.add_parser("show", help="the configurations ranked by IQM, with intervals")
    show.add_argument("sweep_id", metavar="ID")
    show.add_argument("--metric", default=EVAL_RETURN, help=f"compare by (default {EVAL_RETURN})")
    show.add_argument("--csv", action="store_true", help="print the server's CSV of the table")
    json_flag(show)
    for name, text in (
        ("watch", "follow a sweep until its runs end (exit 0: all succeeded)"),
        ("cancel", "cancel every run of the sweep that has not ended"),
        ("resume", "resume every cancelled or failed run of the sweep"),
    ):
        verb = verbs.add_parser(name, help=text)
        verb.add_argument("sweep_id", metavar="ID")
        json_flag(verb)
    sweep.set_defaults(read_json=read_json)


def run(client: Client, args: argparse.Namespace) -> int:
    """Run one ``sweep`` verb; its exit code."""
    command = args.sweep_command
    if command == "submit":
        return _submit(client, args)
    if command == "ls":
        page = client.sweeps(limit=args.limit)
        if args.json:
            _print_json(page)
        else:
            _ls_table(page["items"])
        return EXIT_OK
    if command == "show":
        return _show(client, args.sweep_id, args.metric, args.json, args.csv)
    if command == "watch":
        return _ended(_watch(client, args.sweep_id, args.json), args.json)
    change = client.cancel_sweep if command == "cancel" else client.resume_sweep
    changed = change(args.sweep_id)
    if args.json:
        _print_json(changed)
    else:
        print(safe(f"{changed['id']} {changed['status']}: {_counts(changed['runs'])}"), flush=True)
    return EXIT_OK


def _submit(client: Client, args: argparse.Namespace) -> int:
    created = client.submit_sweep(args.read_json(args.sweep), args.idempotency_key)
    if args.json:
        # With --watch every line is one JSON object: the sweep, its changes, the summary.
        print(json.dumps(created) if args.watch else json.dumps(created, indent=2), flush=True)
    else:
        print(safe(created["id"]), flush=True)
        configs, seeds = len(created["configurations"]), len(created["seeds"])
        search = created["spec"].get("search")
        if search and search.get("method") == "pbt":
            members = int(search["population"])
            rounds = int(created["spec"]["base"]["total_steps"]) // int(search["round_steps"])
            plan = (
                f"a pbt search of {members} members × {rounds} rounds of "
                f"{int(search['round_steps']):,} steps = {members * rounds} runs, each round "
                "decided when the last has ended"
            )
        elif search and search.get("method") != "asha":
            trials = int(search["trials"])
            plan = (
                f"a {search['method']} search of {trials} configurations × {seeds} seeds = "
                f"{trials * seeds} runs, proposed as runs end"
            )
        else:
            plan = f"{configs} configurations × {seeds} seeds = {created['runs']['total']} runs"
        stopping = created["spec"].get("early_stopping") or (
            search if search and search.get("method") == "asha" else None
        )
        if stopping:
            rungs = ", ".join(f"{int(r):,}" for r in stopping["rungs"])
            plan += (
                f", those behind stopping at step {rungs} (successive halving, η = "
                f"{int(stopping.get('reduction_factor', 3))})"
            )
        at_once = f"at most {created['max_concurrent']} at once"
        name = safe(created["name"])
        print(f"submitted {name!r}: {plan}, {at_once}", file=sys.stderr, flush=True)
    if not args.watch:
        return EXIT_OK
    code = _ended(_watch(client, created["id"], args.json), args.json)
    summary = client.sweep_summary(created["id"])
    if args.json:
        print(json.dumps(summary), flush=True)
    else:
        print()
        _summary_table(summary)
    return code


def _watch(client: Client, sweep_id: str, as_json: bool) -> Json:
    """Reread the sweep until it is no longer ``running``; its last state."""
    tty = sys.stdout.isatty() and not as_json
    printed: tuple[Any, ...] | None = None
    missed = 0
    while True:
        try:
            sweep = client.sweep(sweep_id)
            missed = 0
        except ApiError as exc:
            missed += 1
            if exc.status != 0 or missed > MISSED_POLLS:
                raise
            time.sleep(POLL_S)
            continue
        ended = sweep["status"] != "running"
        mark = (sweep["status"], sweep["runs"], int(10 * sweep["progress"]["fraction"]))
        if tty:
            sys.stdout.write(f"\r{safe(_state(sweep))}\x1b[K" + ("\n" if ended else ""))
            sys.stdout.flush()
        elif mark != printed:
            print(json.dumps(sweep) if as_json else safe(_state(sweep)), flush=True)
        printed = mark
        if ended:
            return sweep
        time.sleep(POLL_S)


def _ended(sweep: Json, as_json: bool) -> int:
    if sweep["status"] == "succeeded":
        return EXIT_OK
    if not as_json:
        message = f"the sweep {sweep['status']}: {_counts(sweep['runs'])}"
        print(f"error: {safe(message)}", file=sys.stderr, flush=True)
    return EXIT_FAILED


def _state(sweep: Json) -> str:
    progress = sweep["progress"]
    steps = f"step {progress['step']}/{progress['total_steps']} ({progress['fraction']:.0%})"
    return f"{sweep['status']}: {_counts(sweep['runs'])}  {steps}"


def _counts(runs: dict[str, int]) -> str:
    """``2 running, 1 succeeded, 1 pending (4 runs)``: the statuses that have runs."""
    parts = [f"{runs[s]} {s}" for s in RUN_STATUSES if runs.get(s)]
    return f"{', '.join(parts) or 'no runs'} ({runs['total']} runs)"


def _show(client: Client, sweep_id: str, metric: str, as_json: bool, as_csv: bool) -> int:
    if as_csv:
        # One escape per line: the CSV's own line breaks stay, a field's control characters go.
        csv = client.sweep_summary_csv(sweep_id, metric)
        sys.stdout.write("".join(safe(line) + "\n" for line in csv.splitlines()))
        sys.stdout.flush()
        return EXIT_OK
    sweep = client.sweep(sweep_id)
    summary = client.sweep_summary(sweep_id, metric)
    if as_json:
        _print_json({"sweep": sweep, "summary": summary})
        return EXIT_OK
    lines = [
        ("id", sweep["id"]),
        ("name", sweep["name"]),
        ("status", _state(sweep)),
        ("seeds", " ".join(str(s) for s in sweep["seeds"])),
        ("metric", f"{summary['metric']} (best: {summary['best'] or '-'})"),
    ]
    for label, value in lines:
        print(f"{label:<10} {safe(value)}")
    print()
    _summary_table(summary)
    return EXIT_OK


def _summary_table(summary: Json) -> None:
    """The ranked configurations: rank, key, the swept values, runs finished with their whole
    budget (and those a rung stopped), mean, IQM with its 95% interval, and P(best > it) with its
    interval."""
    paths: list[str] = summary["params"]
    header = ("RANK", "KEY", *_short_names(paths), "RUNS", "MEAN", "IQM (95% CI)")
    rows = [(*header, "P(BEST > IT) (95% CI)")]
    for c in summary["configurations"]:
        final, better = c["final"], c["improvement"]
        rank = str(c["rank"]) if c["rank"] is not None else "-"
        values = [_value(c["params"].get(path)) for path in paths]
        # Runs a rung stopped succeeded short of their budget: no final value.
        stopped = c.get("stopped_early", 0)
        runs = f"{c['succeeded'] - stopped}/{c['runs']}" + (
            f" ({stopped} stopped)" if stopped else ""
        )
        mean = _number(final["mean"]) if final else "-"
        iqm = _estimate(final["iqm"], final["iqm_ci95"], _number) if final else "-"
        p = _estimate(better["probability"], better["ci95"], _fraction) if better else "-"
        rows.append((rank, c["key"], *values, runs, mean, iqm, p))
    _print_rows(rows)


def _short_names(paths: list[str]) -> list[str]:
    """Each swept path's last part (``learning_rate_actor``), or the whole path where two share
    it."""
    last = [path.rsplit(".", 1)[-1] for path in paths]
    pairs = zip(last, paths, strict=True)
    return [short if last.count(short) == 1 else path for short, path in pairs]


def _value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _number(value: float) -> str:
    return f"{value:.1f}" if abs(value) >= 100 else f"{value:.3g}"


def _fraction(value: float) -> str:
    return f"{value:.2f}"


def _estimate(value: float, ci95: list[float], form: Callable[[float], str]) -> str:
    """``-812.4 (-900.2 to -700.3)``: a value with its 95% interval."""
    low, high = ci95
    return f"{form(value)} ({form(low)} to {form(high)})"


def _ls_table(items: list[Json]) -> None:
    rows = [("ID", "NAME", "STATUS", "CONFIGS", "SEEDS", "SUCCEEDED", "PROGRESS")]
    for s in items:
        done = f"{s['runs'].get('succeeded', 0)}/{s['runs']['total']}"
        progress = f"{s['progress']['fraction']:.0%}"
        shape = (str(len(s["configurations"])), str(len(s["seeds"])))
        rows.append((s["id"], s["name"][:40], s["status"], *shape, done, progress))
    _print_rows(rows)


def _print_rows(rows: Sequence[tuple[str, ...]]) -> None:
    rows = [tuple(safe(cell) for cell in row) for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2), flush=True)
