"""Fair dispatch across projects with real processes (``core.dispatch.fair_share``): ``marlforge
api`` and one ``marlforge worker`` on PostgreSQL and Redis, two projects' keys. One project's
backlog, queued first, does not hold the worker while the other project's run waits."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from e2e_support import Api, Stack, create_key

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_one_projects_backlog_does_not_hold_the_worker_from_another_project(
    fresh_stack: Stack, tiny_spec: Callable[..., dict[str, Any]]
) -> None:
    team_a = fresh_stack.api
    team_b = Api(str(team_a.http.base_url), create_key(fresh_stack.env, project="fair-b"))
    try:
        first = team_a.submit(tiny_spec(total_steps=1600, name="a-first"))
        team_a.wait_until(first["id"], {"running"})
        backlog = [team_a.submit(tiny_spec(total_steps=200, name=f"a-{i}")) for i in range(3)]
        other = team_b.submit(tiny_spec(total_steps=200, name="b-only"))
        # While A's first run holds the one worker, B's run, submitted last, is next in line
        # (first in, first out would have put it fourth).
        assert team_b.get(other["id"])["queue_position"] == 1
        assert [team_a.get(r["id"])["queue_position"] for r in backlog] == [2, 3, 4]

        ends = [team_a.wait_until(r["id"], {"succeeded"}) for r in [first, *backlog]]
        ends.append(team_b.wait_until(other["id"], {"succeeded"}))
        started = [run["name"] for run in sorted(ends, key=lambda run: run["started_at"])]
        assert started == ["a-first", "b-only", "a-0", "a-1", "a-2"]
        # Each ran once: the messages left over for runs started by another's are dropped.
        for run in ends:
            assert run["attempts"] == 1, run
    finally:
        team_b.http.close()
