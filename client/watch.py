"""``marlforge watch``: a run's progress live, from its event stream (``Client.watch``, which
reconnects with ``Last-Event-ID``), until the stream's ``end``.

On a terminal one line is redrawn: a bar, step/total and the latest evaluation return. Elsewhere
(a log file, a CI job) a line is printed per tenth of the budget and per new evaluation, so the
output stays short. Status changes are printed as they come and warnings and errors of the run's
log go to stderr. The exit code is 0 when the run succeeded, 1 when it failed or was cancelled.
"""

from __future__ import annotations

import json
import sys
from typing import TextIO

from client.api import Client
from client.streams import Event
from client.text import safe

EVAL_RETURN = "eval/episode_return"
BAR_WIDTH = 30


class Watcher:
    """Follows one run and prints what happens to it."""

    def __init__(
        self, client: Client, experiment_id: str, as_json: bool = False, out: TextIO | None = None
    ) -> None:
        self.client = client
        self.experiment_id = experiment_id
        self.as_json = as_json
        self.out = out or sys.stdout
        self.tty = self.out.isatty()
        self.step, self.total = 0, 0
        self.eval_return: float | None = None
        self.status, self.reason = "", ""
        self._printed: tuple[int, float | None] = (-1, None)

    def run(self) -> int:
        """Follow until the run ends; its exit code."""
        for event in self.client.watch(self.experiment_id):
            if self.as_json:
                print(json.dumps({"id": event.id, "kind": event.kind, "data": event.data}))
                self.out.flush()
            self._take(event)
            if event.kind == "end":
                self.status = str(event.data.get("status") or self.status)
        return self._finish()

    def _take(self, event: Event) -> None:
        data = event.data
        if event.kind == "progress":
            self.step, self.total = int(data["step"]), int(data["total_steps"])
        elif event.kind == "metrics":
            for point in data.get("points", []):
                if point["name"] == EVAL_RETURN:
                    self.eval_return = float(point["value"])
        elif event.kind == "status":
            self.status, self.reason = str(data["to"]), str(data.get("reason") or "")
            self._say(f"status: {self.status}" + (f" ({self.reason})" if self.reason else ""))
        elif event.kind == "log" and data.get("level") in ("warning", "error"):
            print(safe(f"{data['level']}: {data['message']}"), file=sys.stderr, flush=True)
        if event.kind in ("progress", "metrics"):
            self._progress()

    def _line(self) -> str:
        fraction = self.step / self.total if self.total else 0.0
        shown = f"{self.eval_return:.1f}" if self.eval_return is not None else "-"
        head = f"step {self.step}/{self.total} ({fraction:.0%})  eval return {shown}"
        if not self.tty:
            return head
        filled = round(BAR_WIDTH * fraction)
        return f"[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {head}"

    def _progress(self) -> None:
        if self.as_json or not self.total:
            return
        if self.tty:
            self.out.write(f"\r{self._line()}\x1b[K")
            self.out.flush()
            return
        tenth = (10 * self.step) // self.total
        if (tenth, self.eval_return) != self._printed:
            self._printed = (tenth, self.eval_return)
            self._say(self._line())

    def _say(self, line: str) -> None:
        if self.as_json:
            return
        self.out.write(("\r\x1b[K" if self.tty else "") + safe(line) + "\n")
        self.out.flush()

    def _finish(self) -> int:
        self._say(f"{self.status}: {self._line().split('] ')[-1]}")
        if self.status == "succeeded":
            return 0
        reason = f": {self.reason}" if self.reason else ""
        print(safe(f"error: the run {self.status}{reason}"), file=sys.stderr, flush=True)
        return 1
