"""A sweep end to end: ``marlforge api`` (with its sweep scheduler thread) and a torch worker as
processes on PostgreSQL and Redis train a 2-configuration × 3-seed sweep, never more than
``max_concurrent`` runs at once, and the summary's numbers are the runs' own."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from e2e_support import Api

pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.integration]

ACTIVE = ("queued", "running", "cancelling")


def _wait_for_sweep(
    stack: Api, sweep_id: str, max_active: int, timeout: float = 300
) -> dict[str, Any]:
    """Poll the sweep until it is no longer running; at every poll no more than ``max_active``
    of its runs are queued or running."""
    deadline = time.monotonic() + timeout
    seen_active = 0
    while True:
        sweep: dict[str, Any] = stack.http.get(f"/v1/sweeps/{sweep_id}").json()
        active = sum(sweep["runs"][s] for s in ACTIVE)
        assert active <= max_active, sweep["runs"]
        seen_active = max(seen_active, active)
        if sweep["status"] != "running":
            assert seen_active >= 1
            return sweep
        assert time.monotonic() < deadline, f"still running after {timeout} s: {sweep['runs']}"
        time.sleep(0.2)


def test_a_sweep_trains_within_max_concurrent_and_summarises_its_runs(
    stack: Api, tiny_spec: Callable[..., dict[str, Any]]
) -> None:
    base = {k: v for k, v in tiny_spec(total_steps=400).items() if k != "seed"}
    body = {
        "name": "e2e lr",
        "base": base,
        "space": {"grid": {"hyperparameters.learning_rate_actor": [0.001, 0.0003]}},
        "seeds": 3,
        "max_concurrent": 2,
    }
    created = stack.http.post("/v1/sweeps", json=body)
    assert created.status_code == 201, created.text
    sweep_id = created.json()["id"]

    done = _wait_for_sweep(stack, sweep_id, max_active=2)

    assert done["status"] == "succeeded", done["runs"]
    assert done["runs"]["succeeded"] == done["runs"]["total"] == 6
    assert done["progress"]["fraction"] == 1.0
    runs = sorted(
        stack.http.get(f"/v1/experiments?sweep_id={sweep_id}").json()["items"],
        key=lambda r: r["id"],
    )
    for run in runs:
        assert stack.transitions(run["id"]) == [
            (None, "pending"), ("pending", "queued"), ("queued", "running"),
            ("running", "succeeded"),
        ]  # fmt: skip
    # Seed-major: both configurations' first seeds started before any third seed.
    starts = {(r["sweep_config"], r["spec"]["seed"]): r["started_at"] for r in runs}
    assert max(starts[("c0", 0)], starts[("c1", 0)]) < min(starts[("c0", 2)], starts[("c1", 2)])

    summary = stack.http.get(f"/v1/sweeps/{sweep_id}/summary").json()
    assert {c["rank"] for c in summary["configurations"]} == {1, 2}
    for config in summary["configurations"]:
        finals = []
        for run_id in config["experiment_ids"]:
            evals = [p for p in stack.all_metrics(run_id) if p["name"] == "eval/episode_return"]
            finals.append(max(evals, key=lambda p: p["step"])["value"])
        assert sorted(config["final"]["values"]) == pytest.approx(sorted(finals))
        # Three runs: the IQM cuts nothing and is their mean.
        assert config["final"]["iqm"] == pytest.approx(np.mean(finals))
        low, high = config["final"]["iqm_ci95"]
        assert min(finals) <= low <= config["final"]["iqm"] <= high <= max(finals)
        assert config["curve"][-1]["runs"] == 3
    best = summary["configurations"][0]
    assert summary["best"] == best["key"]
    other = summary["configurations"][1]
    assert best["final"]["iqm"] >= other["final"]["iqm"]
    assert 0.0 <= other["improvement"]["probability"] <= 1.0


def test_successive_halving_stops_the_configurations_behind_at_the_rung(
    stack: Api, tiny_spec: Callable[..., dict[str, Any]]
) -> None:
    """Four configurations, one seed each, one at a time (so each reaches the rung after the ones
    before it ended): at the rung (400 of 800 steps) a run goes on only if its evaluation return
    is among the best max(1, n // 2) of the n configurations scored there so far. Spelled as the
    sweep's search (``method: asha``); the worker reads it from the stored sweep as it reads
    ``early_stopping``."""
    base = {k: v for k, v in tiny_spec(total_steps=800).items() if k != "seed"}
    body = {
        "name": "e2e asha",
        "base": base,
        "space": {"grid": {"hyperparameters.learning_rate_actor": [1e-3, 3e-4, 1e-4, 3e-5]}},
        "seeds": [0],
        "max_concurrent": 1,
        "search": {"method": "asha", "rungs": [400], "reduction_factor": 2},
    }
    created = stack.http.post("/v1/sweeps", json=body)
    assert created.status_code == 201, created.text
    sweep_id = created.json()["id"]
    done = _wait_for_sweep(stack, sweep_id, max_active=1)
    assert done["status"] == "succeeded", done["runs"]

    runs = sorted(
        stack.http.get(f"/v1/experiments?sweep_id={sweep_id}").json()["items"],
        key=lambda r: r["started_at"],
    )
    seen: list[float] = []
    stopped = set()
    for run in runs:
        at_rung = [
            p["value"]
            for p in stack.all_metrics(run["id"])
            if p["name"] == "eval/episode_return" and p["step"] == 400
        ]
        assert len(at_rung) == 1, run["id"]
        mine = at_rung[0]
        seen.append(mine)
        place = 1 + sum(v > mine for v in seen[:-1])
        goes_on = place <= max(1, len(seen) // 2)
        detail = stack.get(run["id"])
        assert detail["status"] == "succeeded"
        if goes_on:
            assert detail["progress"]["step"] == 800 and detail["status_reason"] is None
        else:
            stopped.add(run["sweep_config"])
            assert detail["progress"]["step"] == 400, detail
            assert detail["status_reason"].startswith(
                "stopped early by the sweep's successive halving: rung 1 of 1 at step 400: "
                f"configuration {run['sweep_config']} scores"
            ), detail["status_reason"]
            assert f"place {place} of the {len(seen)} configurations" in detail["status_reason"]
            # Its checkpoint at the rung is kept: a stopped run can still be looked at.
            assert stack.checkpoints(run["id"])[-1]["step"] == 400
    assert len(runs) == 4 and runs[0]["sweep_config"] not in stopped
    summary = stack.http.get(f"/v1/sweeps/{sweep_id}/summary").json()
    for config in summary["configurations"]:
        was_stopped = config["key"] in stopped
        assert config["stopped_early"] == int(was_stopped)
        # A run stopped at the rung has no final value: it is not ranked against full budgets.
        assert (config["final"] is None) == was_stopped and (config["rank"] is None) == was_stopped


def test_a_tpe_search_proposes_each_configuration_from_the_runs_before_it(
    stack: Api, tiny_spec: Callable[..., dict[str, Any]]
) -> None:
    """Three trials, one seed, one run at a time: the API's scheduler proposes each configuration
    when the run before it has ended, and the stored trials hold each run's final return."""
    base = {k: v for k, v in tiny_spec(total_steps=400).items() if k != "seed"}
    body = {
        "name": "e2e tpe",
        "base": base,
        "space": {"random": {"hyperparameters.learning_rate_actor": {"log_uniform": [1e-4, 1e-2]}}},
        "seeds": [0],
        "max_concurrent": 1,
        "search": {"method": "tpe", "trials": 3, "startup_trials": 2},
    }
    created = stack.http.post("/v1/sweeps", json=body)
    assert created.status_code == 201, created.text
    assert [c["key"] for c in created.json()["configurations"]] == ["c0"]
    sweep_id = created.json()["id"]
    done = _wait_for_sweep(stack, sweep_id, max_active=1)

    assert done["status"] == "succeeded", done["runs"]
    assert done["proposing"] is False
    assert [c["key"] for c in done["configurations"]] == ["c0", "c1", "c2"]
    runs = sorted(
        stack.http.get(f"/v1/experiments?sweep_id={sweep_id}").json()["items"],
        key=lambda r: r["created_at"],
    )
    assert [r["sweep_config"] for r in runs] == ["c0", "c1", "c2"]
    # Each configuration was proposed only after the run before it had ended.
    for before, after in zip(runs, runs[1:], strict=False):
        ended, proposed = (
            dt.datetime.fromisoformat(before["finished_at"]),
            dt.datetime.fromisoformat(after["created_at"]),
        )
        assert ended <= proposed, (before, after)
    for run, config in zip(runs, done["configurations"], strict=True):
        lr = config["params"]["hyperparameters.learning_rate_actor"]
        assert 1e-4 <= lr <= 1e-2 and run["spec"]["hyperparameters"]["learning_rate_actor"] == lr
    summary = stack.http.get(f"/v1/sweeps/{sweep_id}/summary").json()
    assert sorted(c["key"] for c in summary["configurations"] if c["rank"]) == ["c0", "c1", "c2"]
