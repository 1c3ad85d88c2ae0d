"""``marlforge workers`` against a live service (an API process and a torch worker on PostgreSQL and
Redis): the worker registers itself when it is ready, and the verb lists it as the API does."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from datetime import datetime
from typing import Any

import pytest
from cli_support import Cli, LiveServer

pytestmark = [
    pytest.mark.slow,
    pytest.mark.e2e,
    pytest.mark.integration,
    pytest.mark.xdist_group("client"),
    pytest.mark.timeout(150),  # starts the API and a worker; trains nothing
]


def _env(server: LiveServer) -> dict[str, str]:
    return {"MARLFORGE_URL": server.url, "MARLFORGE_API_KEY": server.key}


def _registered(marlforge: Cli, server: LiveServer) -> list[dict[str, Any]]:
    """The listed workers once the worker's first beat has written its row (a thread of its own,
    started when its consumer is ready)."""
    deadline = time.monotonic() + 30
    while True:
        done = marlforge("workers", "--json", env=_env(server))
        assert done.returncode == 0, done.stdout + done.stderr
        items: list[dict[str, Any]] = json.loads(done.stdout)["items"]
        if items or time.monotonic() > deadline:
            return items
        time.sleep(0.5)


def test_workers_lists_the_running_worker(live_server: LiveServer, marlforge: Cli) -> None:
    (worker,) = _registered(marlforge, live_server)
    assert worker["hostname"] == socket.gethostname()
    assert (worker["backend"], worker["resource_class"], worker["live"]) == ("torch", "cpu", True)
    # A queue per suite it serves: <prefix>torch.<suite>.
    assert worker["gpus"] == [] and worker["suites"]
    assert [q.rsplit(".", 2)[-2:] for q in worker["queues"]] == [
        ["torch", suite] for suite in worker["suites"]
    ]

    table = marlforge("workers", env=_env(live_server))
    assert table.returncode == 0, table.stderr
    header, row = table.stdout.splitlines()
    assert header.split() == ["ID", "HOST", "BACKEND", "CLASS", "GPUS", "LAST", "SEEN", "STATE"]
    (after,) = _registered(marlforge, live_server)
    *cells, seen, state = row.split()
    assert cells == [worker["id"], worker["hostname"], "torch", "cpu", "-"] and state == "live"
    # The worker beats while the verb runs: the table shows the row's time as the API writes it,
    # one that lies between the listings taken before and after it.
    first, last = (datetime.fromisoformat(w["last_seen_at"]) for w in (worker, after))
    assert seen.endswith("Z") and first <= datetime.fromisoformat(seen) <= last
    assert live_server.key not in table.stdout + table.stderr

    gpu = marlforge("workers", "--resource-class", "gpu", "--live", env=_env(live_server))
    assert gpu.returncode == 0 and gpu.stdout.splitlines()[1:] == []


def test_workers_needs_a_key(live_server: LiveServer, marlforge: Cli) -> None:
    wrong: subprocess.CompletedProcess[str] = marlforge(
        "workers", env={"MARLFORGE_URL": live_server.url, "MARLFORGE_API_KEY": "mfk_" + "x" * 43}
    )
    assert wrong.returncode == 4 and "the server refused the key" in wrong.stderr


def test_envs_lists_every_suite_the_api_declares(live_server: LiveServer, marlforge: Cli) -> None:
    table = marlforge("envs", env=_env(live_server))
    assert table.returncode == 0, table.stderr
    header, *rows = table.stdout.splitlines()
    assert header.split() == ["SUITE", "ID", "AGENTS", "GROUPS", "ACTIONS", "ALGORITHMS"]
    cells = {tuple(row.split()[:2]): row.split()[2:] for row in rows}
    assert cells[("mpe", "simple_speaker_listener_v4")][:2] == ["2", "speaker,listener"]
    assert cells[("gridcoop", "signal_v0")][:3] == ["3", "scout,carrier", "discrete"]
    assert {suite for suite, _ in cells} >= {"gymnasium", "mpe", "sisl", "mamujoco", "lbf", "rware"}

    only = marlforge("envs", "--suite", "lbf", "--json", env=_env(live_server))
    assert only.returncode == 0, only.stderr
    assert [s["suite"] for s in json.loads(only.stdout)["suites"]] == ["lbf"]
    missing = marlforge("envs", "--suite", "meltingpot", env=_env(live_server))
    assert missing.returncode == 3 and "no environment suite 'meltingpot'" in missing.stderr
