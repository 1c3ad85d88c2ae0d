"""The API served by plain ``uvicorn --factory api.app:create_app`` (no ``marlforge`` command in
front of it) runs the API's background loops: its reaper takes over a run whose worker was lost,
and its sweep scheduler starts a sweep's pending run once a slot frees up. On a database of its
own (the reaper of a shared one would take other tests' runs) and the session's Redis."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_support import Api, create_key, free_port, service_env

from core.db import make_engine, make_session_factory
from core.enums import ExperimentStatus as S
from core.leases import service as leases
from core.lifecycle import transition
from tests.conftest import migrated_database

pytestmark = [pytest.mark.e2e, pytest.mark.integration]


@pytest.fixture
def served(tmp_path: Path, redis_url: str, queue_prefix: str) -> Iterator[tuple[Api, str]]:
    """``uvicorn --factory api.app:create_app`` on a database of its own; yields a member's
    client and the database's URL."""
    with migrated_database("marlforge_uvicorn") as database_url:
        env = service_env(
            {
                "MARLFORGE_DATABASE_URL": database_url,
                "MARLFORGE_BROKER_URL": redis_url,
                "MARLFORGE_QUEUE_PREFIX": f"{queue_prefix}uvicorn.",
                "MARLFORGE_VAR_DIR": str(tmp_path / "var"),
                "MARLFORGE_ARTIFACTS_DIR": str(tmp_path / "artifacts"),
                "MARLFORGE_REAPER_INTERVAL_S": "0.3",
                "MARLFORGE_SWEEP_INTERVAL_S": "0.3",
            }
        )
        port = free_port()
        log_path = tmp_path / "uvicorn.log"
        with log_path.open("wb") as log:
            command = [sys.executable, "-m", "uvicorn", "--factory", "api.app:create_app"]
            process = subprocess.Popen(
                [*command, "--host", "127.0.0.1", "--port", str(port)],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            api = Api(f"http://127.0.0.1:{port}", create_key(env))
            try:
                api.wait_ready()
                yield api, database_url
            finally:
                api.http.close()
                process.terminate()
                process.wait(timeout=60)


def _poll(read: Callable[[], dict[str, Any]], done: Callable[[dict[str, Any]], bool]) -> Any:
    deadline = time.monotonic() + 30
    while not done(body := read()):
        assert time.monotonic() < deadline, body
        time.sleep(0.2)
    return body


def test_plain_uvicorn_reaps_a_lost_workers_run_and_advances_a_sweep(
    served: tuple[Api, str], tiny_spec: Callable[..., dict[str, Any]]
) -> None:
    api, database_url = served
    engine = make_engine(database_url)
    try:
        # A run claimed by a worker that then vanished: its lease has already lapsed.
        run_id = api.submit(tiny_spec())["id"]
        with make_session_factory(engine)() as session:
            held = leases.hold("vanished-worker", -1.0)
            assert transition(session, run_id, [S.QUEUED], S.RUNNING, None, **held) == S.QUEUED
            session.commit()
        taken_over = _poll(lambda: api.get(run_id), lambda body: body["status"] == "queued")
        assert "worker vanished-worker lost" in taken_over["status_reason"]
        assert taken_over["restarts"] == 1
    finally:
        engine.dispose()

    base = {k: v for k, v in tiny_spec().items() if k != "seed"}
    body = {"name": "uvicorn loops", "base": base, "seeds": 2, "max_concurrent": 1}
    created = api.http.post("/v1/sweeps", json=body)
    assert created.status_code == 201, created.text
    sweep_id = created.json()["id"]
    runs = api.http.get(f"/v1/experiments?sweep_id={sweep_id}").json()["items"]
    by_status = {r["status"]: r["id"] for r in runs}
    assert sorted(r["status"] for r in runs) == ["pending", "queued"]
    # Cancelling the queued run frees the sweep's one slot; nothing but the scheduler's loop
    # starts the pending run.
    assert api.http.post(f"/v1/experiments/{by_status['queued']}/cancel").status_code == 200
    started = _poll(lambda: api.get(by_status["pending"]), lambda body: body["status"] != "pending")
    assert started["status"] == "queued"
