"""What a person does in the dashboard, in a real Chromium against the real service: a bad
hyperparameter is refused next to its field; a run launched from the form shows up in the table and
its chart gains points while it trains; a checkpoint's replay opens; a running run is cancelled; two
runs are compared. The tests run in this order and share the runs they start."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from browser_support import Page
from e2e_support import Api, create_key

# One story on one stack: later tests use the runs earlier ones started, so under ``pytest -n``
# (``make test``: ``--dist loadgroup``) the whole module runs on one worker, in order.
pytestmark = [
    pytest.mark.browser, pytest.mark.slow, pytest.mark.e2e, pytest.mark.xdist_group("dashboard")
]  # fmt: skip

RUNS: dict[str, str] = {}  # what the earlier tests started, for the later ones
TRAINING_BUDGET_S = 240


def _fill_small_ddpg(page: Page, total_steps: int) -> None:
    """Choose DDPG on Pendulum and set a budget the shared test machine trains in seconds."""
    tab = page.tab
    tab.select_option("select[name=algorithm]", "ddpg")
    tab.select_option("select[name=environment]", label="Pendulum-v1 (gymnasium)")
    values = {
        "name": "browser-ddpg",
        "total_steps": str(total_steps),
        "env.num_envs": "1",
        "evaluation.every_steps": "500",
        "evaluation.episodes": "1",
        "checkpoint.every_steps": "1000",
        "checkpoint.keep_last": "2",
        "hyperparameters.learning_starts": "64",
        "hyperparameters.batch_size": "32",
        "hyperparameters.hidden_sizes": "32, 32",
        "hyperparameters.updates_per_step": "0.25",
    }
    for name, value in values.items():
        tab.fill(f"[name='{name}']", value)


def _points(page: Page, chart: str) -> int:
    return int(page.tab.get_attribute(f"[data-chart='{chart}']", "data-points") or 0)


def _wait_for(condition: Any, what: str, timeout_s: float = TRAINING_BUDGET_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.25)


def test_the_form_starts_from_the_settings_the_tables_used(page: Page) -> None:
    page.open("#/new")
    tab = page.tab
    tab.select_option("select[name=algorithm]", "maddpg")
    tab.select_option("select[name=environment]", label="simple_tag_v3 (mpe)")

    assert tab.input_value("[name='env.num_envs']") == "8"
    assert json.loads(tab.input_value("[name='env.kwargs']")) == {"continuous_actions": True}
    tab.select_option("select[name=algorithm]", "ddpg")
    assert tab.input_value("[name='env.num_envs']") == "1"


def test_the_form_lists_every_suite_and_trains_the_example_plugin(page: Page) -> None:
    page.open("#/new")
    tab = page.tab
    tab.select_option("select[name=algorithm]", "mappo")
    offered = tab.locator("select[name=environment] option").all_inner_texts()
    for label in (
        "simple_speaker_listener_v4 (mpe)",
        "pursuit_v4 (sisl)",
        "HalfCheetah-2x3 (mamujoco)",
        "Foraging-8x8-2p-2f-coop-v3 (lbf)",
        "rware-tiny-2ag-v2 (rware)",
        "signal_v0 (gridcoop)",
    ):
        assert label in offered, (label, offered)
    tab.select_option("select[name=environment]", label="signal_v0 (gridcoop)")
    values = {
        "name": "browser-plugin",
        "total_steps": "128",
        "env.num_envs": "2",
        "evaluation.every_steps": "128",
        "evaluation.episodes": "1",
        "checkpoint.every_steps": "128",
        "hyperparameters.rollout_length": "32",
        "hyperparameters.hidden_sizes": "16, 16",
    }
    for name, value in values.items():
        tab.fill(f"[name='{name}']", value)
    tab.click("[data-action=submit]")
    tab.wait_for_url(re.compile(r"#/runs/[0-9A-Z]{26}$"))
    tab.locator(".badge[data-status=succeeded]").first.wait_for(timeout=TRAINING_BUDGET_S * 1000)


def test_a_bad_hyperparameter_shows_its_error_next_to_the_field(page: Page) -> None:
    page.open("#/new")
    _fill_small_ddpg(page, 3000)
    page.tab.fill("[name='hyperparameters.tau']", "5")
    page.tab.click("[data-action=submit]")

    error = page.tab.locator(".field[data-field='hyperparameters.tau'] .field-error")
    error.wait_for()
    assert "less than or equal to 1" in error.inner_text()
    assert page.tab.locator(".field.invalid").count() == 1
    assert re.search(r"#/new$", page.tab.url)
    page.screenshot("new-run-error")

    # The same spec edited as JSON: the form's values carry over, the error is listed above it.
    page.tab.click("[data-tab=json]")
    spec = json.loads(page.tab.input_value("textarea[name=spec-json]"))
    assert spec["hyperparameters"]["tau"] == 5 and spec["env"]["id"] == "Pendulum-v1"
    page.tab.click("[data-action=submit]")
    listed = page.tab.locator("#form-errors")
    listed.get_by_text("hyperparameters.tau").first.wait_for()
    assert len(page.allow_errors("status of 422")) == 2  # the two refused submissions
    page.screenshot("new-run-json-error")


def test_a_run_from_the_form_trains_live_and_appears_in_the_table(page: Page, service: Api) -> None:
    page.open("#/new")
    _fill_small_ddpg(page, 3000)
    page.screenshot("new-run-form")
    page.tab.click("[data-action=submit]")
    page.tab.wait_for_url(re.compile(r"#/runs/[0-9A-Z]{26}$"))
    run_id = page.tab.url.rsplit("/", 1)[1]
    RUNS["trained"] = run_id

    page.tab.locator("[data-chart=return]").wait_for()
    _wait_for(lambda: _points(page, "return") > 0, "the first points of the return chart")
    first = _points(page, "return")
    _wait_for(lambda: _points(page, "return") > first, "the return chart to gain points")
    page.screenshot("run-training")
    # The page follows the run to its end without a reload.
    page.tab.locator(".badge[data-status=succeeded]").first.wait_for(
        timeout=TRAINING_BUDGET_S * 1000
    )
    assert page.tab.locator("#checkpoints tr[data-checkpoint]").count() >= 1
    page.screenshot("run-finished")
    # A finished run's progress bar fills its card's width, not a third of it.
    bar = page.tab.locator(".card [role=progressbar]").first
    card = page.tab.locator(".card", has=page.tab.locator("[role=progressbar]")).first
    bar_box, card_box = bar.bounding_box(), card.bounding_box()
    fill_box = bar.locator("span").bounding_box()
    assert bar_box is not None and card_box is not None and fill_box is not None
    assert bar_box["width"] > 0.85 * card_box["width"], (bar_box, card_box)
    assert abs(fill_box["width"] - bar_box["width"]) < 1.5
    # The y axis ends on a labelled tick: the chart's top edge (where the eval line sits) has one.
    top = page.tab.locator("[data-chart=return] svg .axis text").evaluate_all(
        "labels => Math.min(...labels.map((t) => Number(t.getAttribute('y'))))"
    )
    assert top <= 16, top

    page.open("#/")
    row = page.tab.locator(f"tr[data-run='{run_id}']")
    row.wait_for()
    assert row.locator(".badge").inner_text() == "succeeded"
    assert row.locator("[data-col=return]").inner_text() != "–"
    # What a user compares runs by: the evaluation's return, not training's.
    assert row.locator("[data-col=return]").get_attribute("title") == "evaluation return"
    assert page.tab.locator("thead").get_by_text("Eval return").count() == 1
    page.screenshot("runs-table")


def test_a_checkpoint_replay_opens(page: Page) -> None:
    run_id = RUNS["trained"]
    page.open(f"#/runs/{run_id}")
    page.tab.locator("#checkpoints [data-action=replay]").first.click()
    image = page.tab.locator("#replay img")
    image.wait_for()
    _wait_for(
        lambda: image.evaluate("img => img.complete && img.naturalWidth > 0"),
        "the replay GIF to load",
        timeout_s=180,
    )
    assert image.evaluate("img => img.naturalWidth") > 50
    page.screenshot("run-replay")


def test_a_running_run_can_be_cancelled(page: Page, service: Api, tiny_spec: Any) -> None:
    created = service.submit(tiny_spec(total_steps=500_000, name="browser-cancel"))
    RUNS["cancelled"] = created["id"]
    service.wait_until(created["id"], {"running"}, min_step=1, timeout=TRAINING_BUDGET_S)
    # The table follows the run without a reload.
    page.open("#/")
    row = page.tab.locator(f"tr[data-run='{created['id']}']")
    row.wait_for()
    shown = int(row.get_attribute("data-step") or 0)
    _wait_for(lambda: int(row.get_attribute("data-step") or 0) > shown, "the table's progress")
    assert row.locator(".badge").inner_text() == "running"
    page.screenshot("runs-table-live")

    page.open(f"#/runs/{created['id']}")
    page.tab.locator("[data-action=cancel]").click()

    page.tab.locator("h1 .badge[data-status=cancelled]").wait_for(timeout=60_000)
    timeline = page.tab.locator("#timeline").inner_text()
    assert "cancel requested" in timeline
    assert page.tab.locator("[data-action=resume]").is_visible()
    page.screenshot("run-cancelled")


def test_a_run_shows_its_device_and_one_that_needs_a_gpu_why_it_waits(
    page: Page, service: Api, tiny_spec: Any
) -> None:
    page.open(f"#/runs/{RUNS['trained']}")
    page.tab.locator("#run-device").wait_for()
    assert page.tab.inner_text("#run-device") == "cpu"  # "auto" on this worker without a GPU

    created = service.submit(tiny_spec(name="browser-cuda", device="cuda"))
    try:
        page.open(f"#/runs/{created['id']}")
        page.tab.locator("#queued-reason").wait_for()
        assert page.tab.inner_text("#queued-reason").startswith(
            "waiting for a GPU worker: no torch worker with a GPU is registered"
        )
        page.screenshot("run-waiting-for-a-gpu")
    finally:
        service.http.post(f"/v1/experiments/{created['id']}/cancel")


def test_a_warm_started_run_links_the_run_it_started_from(
    page: Page, service: Api, tiny_spec: Any
) -> None:
    parent = service.get(RUNS["trained"])
    init = {"experiment_id": parent["id"], "what": "all"}
    created = service.submit(tiny_spec(total_steps=500_000, name="browser-warm", init=init))
    try:
        page.open(f"#/runs/{created['id']}")
        link = page.tab.locator("#run-parent")
        link.wait_for()
        assert link.inner_text() == parent["name"]
        checkpoint = created["parent"]["checkpoint_id"]
        assert (
            f"all of checkpoint {checkpoint}"
            in page.tab.locator("#about, .facts").first.inner_text()
        )
        link.click()
        page.tab.wait_for_url(re.compile(f"#/runs/{parent['id']}$"))
        page.tab.locator("#run-name").wait_for()
        assert page.tab.locator("#run-parent").count() == 0
    finally:
        service.http.post(f"/v1/experiments/{created['id']}/cancel")


def test_two_runs_can_be_compared(page: Page) -> None:
    trained, cancelled = RUNS["trained"], RUNS["cancelled"]
    page.open("#/")
    for run_id in (trained, cancelled):
        page.tab.locator(f"tr[data-run='{run_id}'] input[type=checkbox]").check()
    page.tab.click("[data-action=compare]")
    page.tab.wait_for_url(re.compile(r"#/compare\?ids="))

    chart = page.tab.locator("[data-chart='train/episode_return']")
    chart.wait_for()
    assert chart.locator(".legend span").count() == 2
    differing = page.tab.locator("#hyperparameters tr.differs").evaluate_all(
        "rows => rows.map(r => r.dataset.key)"
    )
    assert {"total_steps", "name"} <= set(differing)
    assert "hyperparameters.gamma" not in differing
    page.screenshot("compare")
    page.tab.set_viewport_size({"width": 390, "height": 844})
    page.open(f"#/runs/{trained}")
    page.tab.locator("[data-chart=return]").wait_for()
    page.screenshot("run-phone")


# Keys, roles and projects, as a person meets them in the dashboard.


def test_signing_in_with_a_key_and_out_again(
    open_tab: Callable[[str | None], Page], service: Api
) -> None:
    page = open_tab(None)
    page.open("#/")
    tab = page.tab
    tab.wait_for_selector("form#signin")
    page.allow_errors("401")  # the dashboard's whoami before signing in

    tab.fill("#key", "mfk_not-a-key")
    tab.click("form#signin button[type=submit]")
    tab.wait_for_selector("#signin-errors:not([hidden])")
    assert "unknown" in tab.inner_text("#signin-errors")
    page.allow_errors("401")

    tab.fill("#key", service.key or "")
    tab.click("form#signin button[type=submit]")
    tab.wait_for_selector("[data-page=runs] table")
    assert "default" in tab.inner_text("#identity") and "(member)" in tab.inner_text("#identity")
    # The cookie is the session's, HttpOnly and SameSite=Strict; the key is nowhere in it.
    (cookie,) = tab.context.cookies()
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert cookie["value"].startswith("mfs_") and service.key not in cookie["value"]
    page.screenshot("signed-in")

    tab.click("#sign-out")
    tab.wait_for_selector("form#signin")
    # The session is over on the server too: the old cookie no longer reads anything.
    status = tab.evaluate("fetch('/v1/experiments').then((r) => r.status)")
    assert status == 401
    page.allow_errors("401")


def test_a_viewer_sees_no_cancel_button_and_is_refused(
    open_tab: Callable[[str | None], Page], service: Api, stack_env: dict[str, str], tiny_spec: Any
) -> None:
    created = service.submit(tiny_spec(total_steps=500_000, name="viewer-sees"))
    try:
        member = open_tab(service.key)
        member.open(f"#/runs/{created['id']}")
        member.tab.wait_for_selector("[data-action=cancel]")

        viewer = open_tab(create_key(stack_env, "viewer"))
        viewer.open(f"#/runs/{created['id']}")
        viewer.tab.wait_for_selector("#spec")
        assert viewer.tab.locator("[data-action=cancel]").count() == 0
        assert viewer.tab.locator("[data-nav=new]").is_hidden()
        refused = viewer.tab.evaluate(
            f"fetch('/v1/experiments/{created['id']}/cancel', {{method: 'POST'}})"
            ".then(async (r) => [r.status, (await r.json()).error.code])"
        )
        assert refused == [403, "forbidden"]
        viewer.allow_errors("403")
        assert service.get(created["id"])["status"] in {"queued", "running"}
    finally:
        service.http.post(f"/v1/experiments/{created['id']}/cancel")


def test_another_projects_run_cannot_be_opened_by_its_url(
    open_tab: Callable[[str | None], Page], service: Api, stack_env: dict[str, str]
) -> None:
    theirs = RUNS["cancelled"]  # a run of project default
    outsider = open_tab(create_key(stack_env, "member", project="elsewhere"))

    outsider.open(f"#/runs/{theirs}")
    outsider.tab.wait_for_selector(".errors")
    assert outsider.tab.inner_text("#app").strip() == f"No run {theirs}."
    outsider.allow_errors("404")
    outsider.open("#/")
    outsider.tab.wait_for_selector("[data-page=runs] table")
    assert theirs not in outsider.tab.content()
    assert "elsewhere" in outsider.tab.inner_text("#identity")


def test_the_one_time_login_link_signs_in_once(
    open_tab: Callable[[str | None], Page], stack_env: dict[str, str]
) -> None:
    # What `make up` prints: a link whose fragment holds a one-time token of the admin key.
    from pathlib import Path

    from sqlalchemy import create_engine
    from sqlalchemy.orm import Session

    from core import auth
    from core.auth.tokens import server_secret
    from core.enums import Role
    from core.settings import Settings

    settings = Settings(var_dir=Path(stack_env["MARLFORGE_VAR_DIR"]))
    engine = create_engine(stack_env["MARLFORGE_DATABASE_URL"])
    with Session(engine) as session:
        project = auth.ensure_project(session, "default")
        key = auth.create_key(session, server_secret(settings), project, Role.ADMIN, "local admin")
        token = auth.create_login_token(session, server_secret(settings), key.key)
        session.commit()
    engine.dispose()

    first = open_tab(None)
    first.open(f"#login={token}")
    first.tab.wait_for_selector("[data-page=runs] table")
    assert "(admin)" in first.tab.inner_text("#identity")
    assert token not in first.tab.url  # taken out of the address bar at once

    again = open_tab(None)
    again.open(f"#login={token}")
    again.tab.wait_for_selector("form#signin")
    assert "already used" in again.tab.inner_text("#signin-errors")
    again.allow_errors("401")


def _worker_tree(stack_env: dict[str, str]) -> list[int]:
    """The processes of the stack's worker (its own and its run's), found by their environment."""
    from workers import proctree

    prefix = f"MARLFORGE_QUEUE_PREFIX={stack_env['MARLFORGE_QUEUE_PREFIX']}".encode()
    for entry in Path("/proc").iterdir():
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0")
            environment = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"worker" in command and prefix in environment:
            return proctree.tree(int(entry.name))
    raise AssertionError("the stack's worker process was not found")


def test_a_run_whose_worker_goes_silent_says_so(
    page: Page, service: Api, tiny_spec: Any, stack_env: dict[str, str]
) -> None:
    created = service.submit(tiny_spec(total_steps=500_000, name="browser-silent"))
    service.wait_until(created["id"], {"running"}, min_step=1, timeout=TRAINING_BUDGET_S)
    page.open(f"#/runs/{created['id']}")
    facts = page.tab.locator(".facts").inner_text().lower()  # the labels are styled upper case
    assert "restarts\n0 of 3" in facts and "(held, heartbeat" in facts

    # The worker and its run freeze (as on a hung or cut-off machine): no more heartbeats.
    frozen = _worker_tree(stack_env)
    for pid in frozen:
        os.kill(pid, signal.SIGSTOP)
    try:
        # Silent after a quarter of the 60 s lease; the page rereads the run every 10 s.
        page.tab.locator("#worker-silent").wait_for(timeout=45_000)
        assert "has gone silent" in page.tab.inner_text("#worker-silent")
        page.screenshot("run-worker-silent")
    finally:
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)
    # Back before its lease lapsed: the same worker goes on, and the warning goes away.
    page.tab.locator("#worker-silent").wait_for(state="detached", timeout=30_000)
    service.http.post(f"/v1/experiments/{created['id']}/cancel")
    assert service.wait_until(created["id"], {"cancelled"}, timeout=120)["restarts"] == 0
