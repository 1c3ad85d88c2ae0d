"""Matches in the dashboard, in a real Chromium against the real service (the API and a torch
worker, as in ``test_dashboard.py``): a bad submission shows each field's reason next to it; a
match started from a run's page (its checkpoint against random play) is played by the worker and
its page shows each team's mean return and interval, the scenario's score and the replay; the
matches table lists it. A tiny MADDPG run on simple_tag gives the checkpoint; it trains on the
stack's worker while the first test runs."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from browser_support import Page
from e2e_support import Api, create_key

pytestmark = [
    pytest.mark.browser, pytest.mark.slow, pytest.mark.e2e, pytest.mark.xdist_group("dashboard")
]  # fmt: skip

TAG = {"suite": "mpe", "id": "simple_tag_v3", "kwargs": {"continuous_actions": True}}
PLAY_BUDGET_MS = 90_000
MATCH: dict[str, str] = {}  # the match the second test starts, for the third


@pytest.fixture(scope="module")
def predators(service: Api) -> str:
    """A MADDPG run on simple_tag small enough to train in seconds, submitted at once; the tests
    that need its checkpoint wait for it."""
    created = service.submit(
        {
            "name": "browser-predators",
            "algorithm": "maddpg",
            "backend": "torch",
            "env": {**TAG, "num_envs": 1},
            "total_steps": 300,
            "hyperparameters": {"hidden_sizes": [16], "learning_starts": 100, "batch_size": 32},
            "evaluation": {"every_steps": 300, "episodes": 1},
            "checkpoint": {"every_steps": 150, "keep_last": 2},
        }
    )
    return str(created["id"])


def test_a_bad_match_shows_each_fields_reason(page: Page, predators: str) -> None:
    page.open("#/matches/new")
    tab = page.tab
    tab.select_option("select[name='env.id']", "simple_tag_v3")
    assert tab.locator("[data-team]").evaluate_all("els => els.map(e => e.dataset.team)") == [
        "adversary",
        "agent",
    ]
    tab.fill("[name=episodes]", "0")
    tab.fill("[name=seed]", "-1")
    tab.click("[data-action=submit]")

    seed = tab.locator(".field[data-field=seed] .field-error")
    seed.get_by_text("greater than or equal to 0").wait_for()
    episodes = tab.locator(".field[data-field=episodes] .field-error").inner_text()
    assert "greater than or equal to 1" in episodes
    assert tab.locator(".field.invalid").count() == 2
    assert re.search(r"#/matches/new$", tab.url)
    assert len(page.allow_errors("status of 422")) == 1
    page.screenshot("match-new-error")


def _wait_until(page: Page, condition: str, what: str) -> None:
    try:
        page.tab.wait_for_function(condition, timeout=PLAY_BUDGET_MS)
    except Exception as exc:  # playwright's TimeoutError, with the page's state for the reader
        raise AssertionError(
            f"timed out waiting for {what}:\n{page.tab.inner_text('#app')}"
        ) from exc


def test_a_match_from_a_runs_page_is_played_and_shows_its_result(
    page: Page, service: Api, predators: str
) -> None:
    service.wait_until(predators, {"succeeded"}, timeout=120)
    page.open(f"#/runs/{predators}")
    page.tab.click("[data-action=start-match]")
    page.tab.wait_for_url(re.compile(rf"#/matches/new\?run={predators}$"))
    tab = page.tab

    # Prefilled: the run's scenario and kwargs, its policy in the first team's seat (its latest
    # checkpoint), random play in the other.
    checkpoint = tab.locator("select[name='teams.adversary.checkpoint_id']")
    tab.wait_for_function(
        "() => document.querySelector(\"select[name='teams.adversary.checkpoint_id']\")"
        "?.disabled === false"
    )
    assert tab.input_value("select[name='env.id']") == "simple_tag_v3"
    assert tab.input_value("select[name='teams.adversary.experiment_id']") == predators
    assert tab.input_value("select[name='teams.agent.experiment_id']") == "random"
    assert checkpoint.locator("option").first.inner_text().startswith("latest (step 300")
    assert '"continuous_actions":true' in tab.input_value("[name='env.kwargs']")

    # Discrete actions do not fit the policy: refused, the reason under its team.
    tab.fill("[name='env.kwargs']", '{"continuous_actions": false}')
    tab.click("[data-action=submit]")
    team = tab.locator(".field.invalid[data-field='teams.adversary']")
    team.get_by_text("does not fit the adversary team's seats").wait_for()
    assert len(page.allow_errors("status of 422")) == 1
    tab.fill("[name='env.kwargs']", '{"continuous_actions": true}')
    tab.fill("[name=episodes]", "4")
    tab.fill("[name=seed]", "7")
    tab.fill("[name=name]", "<b>predators</b> vs random")  # shown as text, never as markup
    page.screenshot("match-new")
    tab.click("[data-action=submit]")
    tab.wait_for_url(re.compile(r"#/matches/[0-9A-Z]{26}$"))
    match_id = tab.url.rsplit("/", 1)[1]
    MATCH["id"] = match_id

    # The page follows the match until it is played.
    tab.locator("h1 .badge[data-status=succeeded]").wait_for(timeout=PLAY_BUDGET_MS)
    assert tab.inner_text("h1").startswith("<b>predators</b> vs random")
    assert tab.locator("h1 b").count() == 0
    played = service.http.get(f"/v1/matches/{match_id}").json()
    for team in ("adversary", "agent"):
        row = tab.locator(f"#match-teams tr[data-team={team}]")
        low, high = played["result"]["teams"][team]["ci95"]
        assert row.locator("[data-col=mean]").inner_text() not in {"", "–"}
        assert re.fullmatch(r"\[\S+, \S+\]", row.locator("[data-col=ci]").inner_text())
        assert low <= played["result"]["teams"][team]["mean_return"] <= high
    assert "browser-predators @ step 300" in tab.inner_text("#match-teams tr[data-team=adversary]")
    assert "random" in tab.inner_text("#match-teams tr[data-team=agent]")
    score = tab.locator("#match-score [data-score=collisions_per_episode]")
    assert (
        "collisions per episode" in score.inner_text().lower()
    )  # the labels are styled upper case
    collisions = played["result"]["score"]["collisions_per_episode"]
    assert float(score.inner_text().split()[-1]) == pytest.approx(collisions, rel=0.01, abs=0.01)
    image = tab.locator("#match-replay img")
    image.wait_for()
    _wait_until(
        page,
        "() => { const i = document.querySelector('#match-replay img');"
        " return i && i.complete && i.naturalWidth > 0; }",
        "the match's replay to load",
    )
    page.screenshot("match-played")


def test_the_matches_table_lists_the_match_and_opens_it(
    page: Page, open_tab: Callable[[str | None], Page], stack_env: dict[str, str]
) -> None:
    match_id = MATCH["id"]
    page.open("#/matches")
    row = page.tab.locator(f"tr[data-match='{match_id}']")
    row.wait_for()
    assert row.locator(".badge").inner_text() == "succeeded"
    assert "simple_tag_v3" in row.inner_text()
    assert "browser-predators @ step 300" in row.locator("[data-team=adversary]").inner_text()
    assert "random" in row.locator("[data-team=agent]").inner_text()
    for team in ("adversary", "agent"):
        assert "±" in row.locator(f"[data-result={team}]").inner_text()
    assert "collisions per episode" in row.locator("[data-col=score]").inner_text()
    page.screenshot("matches-table")

    row.locator("a.match-link").click()
    page.tab.wait_for_url(re.compile(rf"#/matches/{match_id}$"))
    page.tab.locator("h1 .badge[data-status=succeeded]").wait_for()

    # A viewer reads matches but is offered no way to start one.
    viewer = open_tab(create_key(stack_env, "viewer"))
    viewer.open("#/matches")
    viewer.tab.locator(f"tr[data-match='{match_id}']").wait_for()
    assert viewer.tab.locator("[data-action=new-match]").count() == 0
    viewer.open("#/matches/new")
    viewer.tab.get_by_text("can read runs, matches and sweeps but not start them").wait_for()
