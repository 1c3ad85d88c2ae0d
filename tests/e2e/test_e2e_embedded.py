"""``marlforge up`` (what ``make up`` runs): SQLite, the embedded broker and a local worker under
one var folder, no PostgreSQL or Redis. A run trains end to end, Ctrl-C stops everything cleanly
in the middle of a run, and the next ``up`` continues that run from its checkpoint."""

from __future__ import annotations

import hashlib
import os
import signal
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from e2e_support import Api, ServiceProcess, free_port, service_env

pytestmark = [pytest.mark.slow, pytest.mark.e2e]


def _up(var_dir: Path, port: int, log_name: str) -> tuple[ServiceProcess, Api]:
    env = service_env(
        {
            "MARLFORGE_VAR_DIR": str(var_dir),
            "MARLFORGE_POLL_INTERVAL_S": "0.2",
            "MARLFORGE_SHUTDOWN_GRACE_S": "60",
        }
    )
    process = ServiceProcess(["up", "--port", str(port)], env, var_dir.parent / log_name)
    probe = Api(f"http://127.0.0.1:{port}")
    probe.wait_ready(process=process)
    probe.http.close()
    # The first start made the local admin key; every start prints a one-time dashboard URL.
    admin_key = var_dir / "admin.key"
    assert admin_key.stat().st_mode & 0o777 == 0o600
    process.wait_for_output(f"http://127.0.0.1:{port}/#login=mfl_")
    return process, Api(f"http://127.0.0.1:{port}", admin_key.read_text().strip())


def _stop_with_ctrl_c(process: ServiceProcess) -> None:
    children = process.children()
    assert len(children) == 2, process.output()  # the API and the worker

    code = process.stop(signal.SIGINT)

    assert code == 0, process.output()[-4000:]
    assert all(not Path(f"/proc/{pid}").exists() for pid in children)
    assert "api stopped cleanly" in process.output()
    assert "worker stopped cleanly" in process.output()


def test_make_up_runs_an_experiment_and_survives_a_restart(
    tmp_path: Path, tiny_spec: Callable[..., dict[str, Any]]
) -> None:
    var_dir = tmp_path / "var"
    port = free_port()
    first, api = _up(var_dir, port, "up-1.log")
    try:
        # The laptop stack serves the interactive API docs (off by default elsewhere).
        assert api.http.get("/docs").status_code == 200
        created = api.submit(tiny_spec(total_steps=1200))
        api.wait_until(created["id"], {"running"}, min_step=200)
        _stop_with_ctrl_c(first)
    finally:
        first.stop(signal.SIGKILL)
        api.http.close()

    # Everything lives under the var folder: a SQLite database, broker folders, artifacts.
    assert (var_dir / "marlforge.db").is_file()
    assert (var_dir / "broker" / "queue").is_dir()
    with sqlite3.connect(var_dir / "marlforge.db") as db:
        status, reason = db.execute(
            "SELECT status, status_reason FROM experiments WHERE id = ?", (created["id"],)
        ).fetchone()
    assert status == "queued" and "worker shut down" in reason

    second, api = _up(var_dir, port, "up-2.log")
    try:
        done = api.wait_until(created["id"], {"succeeded"})
        assert done["progress"]["step"] == 1200 and done["attempts"] == 2
        latest = api.checkpoints(created["id"])[-1]
        data = api.http.get(
            f"/v1/experiments/{created['id']}/checkpoints/{latest['id']}/file"
        ).content
        assert latest["step"] == 1200
        assert hashlib.sha256(data).hexdigest() == latest["sha256"]
        points = api.all_metrics(created["id"])
        assert len({(p["step"], p["name"]) for p in points}) == len(points)
        _stop_with_ctrl_c(second)
    finally:
        second.stop(signal.SIGKILL)
        api.http.close()


def test_make_up_restarts_a_killed_worker_and_its_run_resumes(
    tmp_path: Path, tiny_spec: Callable[..., dict[str, Any]]
) -> None:
    var_dir = tmp_path / "var"
    port = free_port()
    up, api = _up(var_dir, port, "up.log")
    try:
        created = api.submit(tiny_spec(total_steps=3000))
        lost = api.wait_until(created["id"], {"running"}, min_step=400)["worker"]["id"]
        worker = next(pid for pid in up.children() if b"worker" in _cmdline(pid))
        os.kill(worker, signal.SIGKILL)

        done = api.wait_until(created["id"], {"succeeded"})
        assert up.process.poll() is None  # the local service stayed up
        assert (done["restarts"], done["attempts"]) == (1, 2)
        assert done["worker"]["id"] != lost
        reasons = [
            t["reason"] or ""
            for t in api.http.get(f"/v1/experiments/{created['id']}/timeline").json()["items"]
        ]
        assert any(r.startswith(f"worker {lost} lost at step ") for r in reasons), reasons
        assert "worker exited unexpectedly (code -9); starting it again" in up.output()
        _stop_with_ctrl_c(up)
    finally:
        up.stop(signal.SIGKILL)
        api.http.close()


def _cmdline(pid: int) -> bytes:
    return Path(f"/proc/{pid}/cmdline").read_bytes()
