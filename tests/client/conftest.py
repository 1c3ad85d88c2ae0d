"""Fixtures of the client tests: a live service (``marlforge api`` and ``marlforge worker
--backend torch`` as processes on the session's PostgreSQL and Redis, as tests/e2e start them) and
a way to run the ``marlforge`` client verbs against it as a user would."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))

from cli_support import Cli, LiveServer  # noqa: E402
from e2e_support import (  # noqa: E402
    Api,
    ServiceProcess,
    create_key,
    free_port,
    marlforge_command,
    service_env,
)


@pytest.fixture(scope="module")
def live_server(
    tmp_path_factory: pytest.TempPathFactory, pg_url: str, redis_url: str, queue_prefix: str
) -> Iterator[LiveServer]:
    """The API and one torch worker as processes."""
    folder = tmp_path_factory.mktemp("client-stack")
    port = free_port()
    env = service_env(
        {
            "MARLFORGE_DATABASE_URL": pg_url,
            "MARLFORGE_BROKER_URL": redis_url,
            "MARLFORGE_QUEUE_PREFIX": queue_prefix,
            "MARLFORGE_VAR_DIR": str(folder / "var"),
            "MARLFORGE_ARTIFACTS_DIR": str(folder / "artifacts"),
            "MARLFORGE_POLL_INTERVAL_S": "0.2",
        }
    )
    worker = ServiceProcess(["worker", "--backend", "torch"], env, folder / "worker.log")
    server = ServiceProcess(
        ["api", "--host", "127.0.0.1", "--port", str(port)], env, folder / "api.log"
    )
    url = f"http://127.0.0.1:{port}"
    key = create_key(env)
    api = Api(url, key)
    try:
        api.wait_ready(process=server)
        worker.wait_for_output(" ready.")
        yield LiveServer(url, key, api)
    finally:
        api.http.close()
        server.stop()
        worker.stop()
        _forget_queues(redis_url, queue_prefix)


def _forget_queues(redis_url: str, queue_prefix: str) -> None:
    import redis

    connection = redis.Redis.from_url(redis_url)
    for key in connection.scan_iter(match=f"*{queue_prefix}*"):
        connection.delete(key)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """An empty home folder for the user running the CLI."""
    folder = tmp_path / "home"
    folder.mkdir()
    return folder


@pytest.fixture
def marlforge(home: Path) -> Cli:
    """Runs ``marlforge ARGS`` as a user would: ``env`` adds variables (``MARLFORGE_URL``...) to an
    environment with no other ``MARLFORGE_*`` and ``home`` as HOME; ``stdin`` is its input, ``cwd``
    its folder (the test process's by default)."""

    def run(
        *args: str, env: dict[str, str] | None = None, stdin: str = "", cwd: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        variables = service_env({"HOME": str(home), **(env or {})}, drop=["XDG_CONFIG_HOME"])
        return subprocess.run(
            [*marlforge_command(), *args],
            env=variables,
            cwd=cwd,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    return run
