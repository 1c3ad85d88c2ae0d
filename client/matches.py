"""``marlforge match``: one team's policy against another's, over ``/v1/matches``:
``match submit MATCH.json [--watch]``, ``match ls``, ``match show ID``, ``match watch ID``.

A match has no event stream: ``watch`` rereads it every second until it is played, then prints
each team's mean return with its 95% interval and the scenario's score; it exits 0 when the match
succeeded and 1 when it failed (the reason on stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import Any

from client.api import Client
from client.text import safe
from client.transport import Json

EXIT_OK, EXIT_FAILED = 0, 1
STATUSES = ("queued", "running", "succeeded", "failed", "cancelled")
POLL_S = 1.0


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    read_json: Callable[[str], Json],
    json_flag: Callable[[argparse.ArgumentParser], None],
) -> None:
    """Add ``match`` and its verbs to ``marlforge``'s subcommands."""
    match = sub.add_parser("match", help="play one team's policy against another's")
    verbs = match.add_subparsers(dest="match_command", required=True, metavar="VERB")
    submit = verbs.add_parser("submit", help="start a match (a JSON file, as POST /v1/matches)")
    submit.add_argument("match", metavar="MATCH.json", help="the match file ('-': stdin)")
    submit.add_argument("--watch", action="store_true", help="then wait for its result")
    json_flag(submit)
    ls = verbs.add_parser("ls", help="list the project's matches, newest first")
    ls.add_argument("--status", choices=STATUSES, default=None)
    ls.add_argument("--limit", type=int, default=50, help="at most this many (1-500)")
    json_flag(ls)
    verbs_with_an_id = (
        ("show", "show one match"),
        ("watch", "wait for a match's result"),
        ("cancel", "withdraw a queued or playing match"),
    )
    for name, text in verbs_with_an_id:
        verb = verbs.add_parser(name, help=text)
        verb.add_argument("match_id", metavar="ID")
        json_flag(verb)
    match.set_defaults(read_json=read_json)


def run(client: Client, args: argparse.Namespace) -> int:
    """Run one ``match`` verb; its exit code."""
    if args.match_command == "submit":
        created = client.submit_match(args.read_json(args.match))
        if args.json and not args.watch:
            _print_json(created)
        elif not args.json:
            print(safe(created["id"]), flush=True)
            print(f"started {safe(created['name'])!r}: {created['status']}", file=sys.stderr)
        return _watch(client, created["id"], args.json) if args.watch else EXIT_OK
    if args.match_command == "ls":
        page = client.matches(status=args.status, limit=args.limit)
        if args.json:
            _print_json(page)
        else:
            _table(page["items"])
        return EXIT_OK
    if args.match_command == "show":
        return _show(client.match(args.match_id), args.json)
    if args.match_command == "cancel":
        cancelled = client.cancel_match(args.match_id)
        if args.json:
            _print_json(cancelled)
        else:
            print(safe(f"{cancelled['id']} {cancelled['status']}"), flush=True)
        return EXIT_OK
    return _watch(client, args.match_id, args.json)


def _watch(client: Client, match_id: str, as_json: bool) -> int:
    while True:
        match = client.match(match_id)
        if match["status"] not in ("queued", "running"):
            return _show(match, as_json)
        time.sleep(POLL_S)


def _show(match: Json, as_json: bool) -> int:
    ok = match["status"] in ("queued", "running", "succeeded")
    if as_json:
        _print_json(match)
    else:
        lines = [
            ("id", match["id"]),
            ("name", match["name"]),
            ("scenario", f"{match['env']['id']} {json.dumps(match['env']['kwargs'])}"),
            ("status", match["status"]),
        ]
        lines += [("team", f"{team}: {_policy(p)}") for team, p in match["teams"].items()]
        result = match.get("result")
        if result:
            lines.append(("episodes", result["episodes"]))
            for team, score in result["teams"].items():
                low, high = score["ci95"]
                interval = f"95% CI {low:.2f} to {high:.2f}"
                lines.append(("return", f"{team}: {score['mean_return']:.2f} ({interval})"))
            lines += [("score", f"{name} = {v:.3f}") for name, v in result["score"].items()]
        for label, value in lines:
            print(f"{label:<10} {safe(value)}")
    if not ok:
        reason = f"the match {match['status']}: {match.get('status_reason')}"
        print(f"error: {safe(reason)}", file=sys.stderr)
    return EXIT_OK if ok else EXIT_FAILED


def _policy(policy: Any) -> str:
    if policy == "random":
        return "random"
    return f"{policy['algorithm']} run {policy['experiment_id']} at step {policy['step']}"


def _table(items: list[Json]) -> None:
    rows = [("ID", "NAME", "SCENARIO", "STATUS")]
    rows += [(m["id"], m["name"][:40], m["env"]["id"], m["status"]) for m in items]
    shown = [[safe(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in shown) for i in range(len(shown[0]))]
    for row in shown:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2), flush=True)
