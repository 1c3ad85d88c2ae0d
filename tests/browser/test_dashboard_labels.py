"""Tags, notes and the best checkpoint in the dashboard, in a real Chromium against the real service
(the API and a torch worker, as in ``test_dashboard.py``): a run started from the form with tags
and notes shows them on its page, a bad tag refused next to its field; a member edits the name,
tags and notes there and the API agrees; a tag's label lists the runs holding it and the name box
searches the list; the run's best checkpoint by evaluation return is marked and *Download best*
serves the file the API lists. The tests run in this order and share the run the first one starts.

That run never learns (``learning_starts`` is beyond its budget), so every evaluation plays the
same greedy episodes to the same return, and the best checkpoint is the earliest of equals
(docs/api.md "Checkpoints"): with ``keep_last`` 1 it is kept beside the newest, whatever the
machine's speed."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from browser_support import Page
from e2e_support import Api, create_key

pytestmark = [
    pytest.mark.browser, pytest.mark.slow, pytest.mark.e2e, pytest.mark.xdist_group("dashboard")
]  # fmt: skip

RUNS: dict[str, str] = {}  # what the earlier tests started, for the later ones
TRAINING_BUDGET_S = 180
NOTES = "Never learns: every evaluation plays the same episodes.\nA second line."


def _fill_run_that_never_learns(page: Page) -> None:
    """DDPG on Pendulum for 600 steps, evaluated and checkpointed every 200, one checkpoint kept
    besides the best; no update happens, so all three evaluations return the same."""
    tab = page.tab
    tab.select_option("select[name=algorithm]", "ddpg")
    tab.select_option("select[name=environment]", label="Pendulum-v1 (gymnasium)")
    values = {
        "name": "labelled-ddpg",
        "total_steps": "600",
        "env.num_envs": "1",
        "evaluation.every_steps": "200",
        "evaluation.episodes": "1",
        "checkpoint.every_steps": "200",
        "checkpoint.keep_last": "1",
        "hyperparameters.learning_starts": "100000",
        "hyperparameters.batch_size": "32",
        "hyperparameters.hidden_sizes": "32, 32",
    }
    for name, value in values.items():
        tab.fill(f"[name='{name}']", value)


def _tags(page: Page, scope: str) -> list[str]:
    labels: list[str] = page.tab.locator(f"{scope} .tag").all_inner_texts()
    return labels


def test_a_run_from_the_form_shows_its_tags_and_notes(page: Page) -> None:
    page.open("#/new")
    tab = page.tab
    _fill_run_that_never_learns(page)
    tab.fill("[name=tags]", "baseline, no learning")
    tab.fill("[name=notes]", NOTES)
    # The JSON view sends the tags as a list and the notes as they were typed.
    tab.click("[data-tab=json]")
    spec = json.loads(tab.input_value("textarea[name=spec-json]"))
    assert spec["tags"] == ["baseline", "no learning"] and spec["notes"] == NOTES
    tab.click("[data-tab=form]")
    assert tab.input_value("[name=tags]") == "baseline, no learning"

    tab.click("[data-action=submit]")
    error = tab.locator(".field[data-field=tags] .field-error")
    error.wait_for()
    assert error.inner_text().startswith('"no learning": String should match pattern')
    assert tab.locator(".field.invalid").count() == 1
    assert len(page.allow_errors("status of 422")) == 1
    page.screenshot("new-run-tag-error")

    tab.fill("[name=tags]", "baseline, lr:1e-3, baseline")
    tab.click("[data-action=submit]")
    tab.wait_for_url(re.compile(r"#/runs/[0-9A-Z]{26}$"))
    RUNS["labelled"] = tab.url.rsplit("/", 1)[1]
    tab.locator("#run-tags .tag").first.wait_for()
    assert _tags(page, "#run-tags") == ["baseline", "lr:1e-3"]  # a repeated tag is kept once
    assert tab.inner_text("#run-notes") == NOTES
    page.screenshot("run-tags-notes")


def test_a_member_edits_the_name_tags_and_notes(
    page: Page,
    service: Api,
    open_tab: Callable[[str | None], Page],
    stack_env: dict[str, str],
) -> None:
    run_id = RUNS["labelled"]
    page.open(f"#/runs/{run_id}")
    tab = page.tab
    tab.click("[data-action=edit]")
    form = tab.locator("form#edit-run")
    assert form.locator("[name=name]").input_value() == "labelled-ddpg"
    assert form.locator("[name=tags]").input_value() == "baseline, lr:1e-3"
    assert form.locator("[name=notes]").input_value() == NOTES

    form.locator("[name=tags]").fill("baseline, best policy")
    form.locator("[name=name]").fill("")
    form.locator("[data-action=save]").click()
    tags_error = form.locator(".field[data-field=tags] .field-error")
    tags_error.wait_for()
    assert '"best policy"' in tags_error.inner_text()
    assert (
        "at least 1 character" in form.locator(".field[data-field=name] .field-error").inner_text()
    )
    page.allow_errors("status of 422")
    page.screenshot("run-edit-error")
    assert service.get(run_id)["spec"]["tags"] == ["baseline", "lr:1e-3"]  # nothing changed

    form.locator("[name=name]").fill("labelled-ddpg-reviewed")
    form.locator("[name=tags]").fill("baseline, reviewed")
    form.locator("[name=notes]").fill("Reviewed: the return is flat, as expected.")
    form.locator("[data-action=save]").click()
    form.wait_for(state="detached")
    assert tab.inner_text("#run-name").startswith("labelled-ddpg-reviewed")
    assert _tags(page, "#run-tags") == ["baseline", "reviewed"]
    assert tab.inner_text("#run-notes") == "Reviewed: the return is flat, as expected."
    assert json.loads(tab.inner_text("#spec"))["tags"] == ["baseline", "reviewed"]
    page.screenshot("run-edited")

    stored = service.get(run_id)
    assert stored["name"] == stored["spec"]["name"] == "labelled-ddpg-reviewed"
    assert stored["spec"]["tags"] == ["baseline", "reviewed"]
    assert stored["spec"]["notes"] == "Reviewed: the return is flat, as expected."

    # A viewer reads the labels but is offered no way to change them (the API would answer 403).
    viewer = open_tab(create_key(stack_env, "viewer"))
    viewer.open(f"#/runs/{run_id}")
    viewer.tab.locator("#run-notes").wait_for()
    assert _tags(viewer, "#run-tags") == ["baseline", "reviewed"]
    assert viewer.tab.locator("[data-action=edit]").count() == 0


def test_a_tag_lists_the_runs_holding_it(
    page: Page, service: Api, tiny_spec: Callable[..., dict[str, Any]]
) -> None:
    labelled = RUNS["labelled"]
    other = service.submit(tiny_spec(name="Neighbour-Run", tags=["other"]))["id"]
    service.http.post(f"/v1/experiments/{other}/cancel")  # it only has to be listed
    tab = page.tab
    labelled_row = tab.locator(f"tr[data-run='{labelled}']")
    other_row = tab.locator(f"tr[data-run='{other}']")

    # From the run's page, its tag opens the runs holding it.
    page.open(f"#/runs/{labelled}")
    tab.locator("#run-tags .tag[data-tag=reviewed]").click()
    tab.wait_for_url(re.compile(r"#/\?tag=reviewed$"))
    labelled_row.wait_for()
    assert other_row.count() == 0
    assert "reviewed" in tab.inner_text("#tag-filter")
    assert _tags(page, f"tr[data-run='{labelled}']") == ["baseline", "reviewed"]
    page.screenshot("runs-by-tag")

    # In the list, another run's tag does the same.
    tab.click("[data-action=clear-tag]")
    other_row.locator(".tag[data-tag=other]").click()
    tab.wait_for_url(re.compile(r"#/\?tag=other$"))
    tab.locator("#tag-filter").wait_for()  # the filtered page: its table is filled once, filtered
    other_row.wait_for()
    assert labelled_row.count() == 0
    tab.click("[data-action=clear-tag]")
    labelled_row.wait_for()

    # The name box searches on the server (?q=), ignoring case.
    tab.fill("input[name=q]", "neighbour")
    labelled_row.wait_for(state="detached")
    assert other_row.is_visible()
    tab.fill("input[name=q]", "no such run")
    other_row.wait_for(state="detached")
    assert "No runs match" in tab.inner_text("#runs tbody")


def test_the_best_checkpoint_is_marked_and_downloads(page: Page, service: Api) -> None:
    run_id = RUNS["labelled"]
    service.wait_until(run_id, {"succeeded"}, timeout=TRAINING_BUDGET_S)
    listed = service.checkpoints(run_id)
    (best,) = [c for c in listed if c["best"]]
    newest = listed[-1]
    assert best["id"] != newest["id"] and best["step"] < newest["step"], listed

    page.open(f"#/runs/{run_id}")
    tab = page.tab
    marked = tab.locator("#checkpoints tr[data-best]")
    marked.wait_for()
    assert marked.count() == 1 and marked.get_attribute("data-checkpoint") == best["id"]
    assert marked.locator(".badge.best").inner_text() == "best"
    assert marked.locator("[data-col=eval-return]").inner_text() != "–"
    assert tab.locator(f"#checkpoints tr[data-checkpoint='{newest['id']}'] .badge").count() == 0
    assert f"step {best['step']:,}" in tab.inner_text("#best-checkpoint")
    page.screenshot("run-best-checkpoint")

    link = tab.locator("#best-checkpoint [data-action=download-best]")
    assert link.get_attribute("href") == f"/v1/experiments/{run_id}/checkpoints/best/file"
    with tab.expect_download() as download:
        link.click()
    saved = Path(download.value.path())
    assert saved.stat().st_size == best["size_bytes"]
    assert hashlib.sha256(saved.read_bytes()).hexdigest() == best["sha256"]
