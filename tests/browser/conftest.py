"""Browser tests: Debian's Chromium driven by Playwright against the real service, started like a
deployment starts it (``marlforge api`` and ``marlforge worker --backend torch`` on the session's
PostgreSQL database and Redis, with the end-to-end tests' process helpers). Every page's console is
watched: an error or an uncaught exception fails the test. Screenshots go to
``test-artifacts/browser/``."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# The end-to-end tests' helpers (service processes, API client) live beside them.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
from browser_support import Page  # noqa: E402
from e2e_support import Api, ServiceProcess, create_key, free_port, service_env  # noqa: E402

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture(scope="module")
def stack_env(
    tmp_path_factory: pytest.TempPathFactory, pg_url: str, redis_url: str, queue_prefix: str
) -> dict[str, str]:
    """The environment of the module's service processes (and of ``marlforge keys``)."""
    folder = tmp_path_factory.mktemp("dashboard")
    return service_env(
        {
            "MARLFORGE_DATABASE_URL": pg_url,
            "MARLFORGE_BROKER_URL": redis_url,
            "MARLFORGE_QUEUE_PREFIX": f"{queue_prefix}browser.",
            "MARLFORGE_VAR_DIR": str(folder / "var"),
            "MARLFORGE_ARTIFACTS_DIR": str(folder / "artifacts"),
            "MARLFORGE_POLL_INTERVAL_S": "0.2",
        }
    )


@pytest.fixture(scope="module")
def service(stack_env: dict[str, str], redis_url: str) -> Iterator[Api]:
    """The API and one torch worker as processes; yields a client of the API with a member key
    of project ``default``."""
    env = stack_env
    folder = Path(env["MARLFORGE_VAR_DIR"]).parent
    prefix = env["MARLFORGE_QUEUE_PREFIX"]
    port = free_port()
    worker = ServiceProcess(["worker", "--backend", "torch"], env, folder / "worker.log")
    api = ServiceProcess(
        ["api", "--host", "127.0.0.1", "--port", str(port)], env, folder / "api.log"
    )
    client = Api(f"http://127.0.0.1:{port}", create_key(env))
    try:
        client.wait_ready(process=api)
        worker.wait_for_output(" ready.")
        yield client
    finally:
        client.http.close()
        api.stop()
        worker.stop()
        _forget_queues(redis_url, prefix)


def _forget_queues(redis_url: str, prefix: str) -> None:
    import redis

    connection = redis.Redis.from_url(redis_url)
    for key in connection.scan_iter(match=f"*{prefix}*"):
        connection.delete(key)
    connection.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Debian Chromium (``scripts/install-chromium.sh`` installs it)."""
    from playwright.sync_api import sync_playwright

    executable = shutil.which("chromium")
    if executable is None:
        pytest.fail("chromium is not installed: run ./scripts/install-chromium.sh", pytrace=False)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=executable, headless=True, args=CHROMIUM_FLAGS
        )
        yield browser
        browser.close()


@pytest.fixture
def open_tab(browser: Any, service: Api) -> Iterator[Callable[[str | None], Page]]:
    """Opens fresh laptop-sized tabs, each in its own browser profile, signed in with the given
    key (through ``POST /v1/session``, as the sign-in page does) or signed out (None). The test
    fails if a page logged an error."""
    tabs: list[tuple[Any, Page]] = []
    base_url = str(service.http.base_url).rstrip("/")

    def open_one(key: str | None) -> Page:
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        if key is not None:
            signed_in = context.request.post(f"{base_url}/v1/session", data={"credential": key})
            assert signed_in.status == 200, signed_in.text()
        tab = Page(context.new_page(), base_url)
        tabs.append((context, tab))
        return tab

    yield open_one
    for context, tab in tabs:
        context.close()
        assert tab.errors == [], f"the page logged errors: {tab.errors}"


@pytest.fixture
def page(open_tab: Callable[[str | None], Page], service: Api) -> Page:
    """A tab signed in with the service client's member key."""
    return open_tab(service.key)
