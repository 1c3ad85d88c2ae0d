"""Sweeps in the dashboard, in a real Chromium against the real service (the API and a torch
worker, as in ``test_dashboard.py``): a refused sweep shows the server's reason beside the JSON
editor; the editor's own example is accepted and opens the sweep's page with its configurations and
its runs waiting, which the runs list filters and the Cancel button stops; a sweep whose runs the
worker has trained shows its configurations ranked, with the IQM, rank and curves of
``GET /v1/sweeps/{id}/summary``. A tiny DDPG sweep (2 learning rates × 3 seeds of 400 steps) is
submitted when the first test starts and trains on the stack's worker meanwhile."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import Any

import pytest
from browser_support import Page
from e2e_support import Api, create_key

pytestmark = [
    pytest.mark.browser, pytest.mark.slow, pytest.mark.e2e, pytest.mark.xdist_group("dashboard")
]  # fmt: skip

SWEPT = "hyperparameters.learning_rate_actor"
TRAINING_BUDGET_S = 180
CANCEL_BUDGET_MS = 90_000


@pytest.fixture(scope="module")
def trained_sweep(service: Api, tiny_spec: Callable[..., dict[str, Any]]) -> str:
    """A sweep of six runs small enough to train in seconds, submitted at once; the test that
    needs it finished waits for it."""
    base = {k: v for k, v in tiny_spec(400, name="browser-sweep").items() if k != "seed"}
    body = {
        "name": "browser sweep",
        "base": base,
        "space": {"grid": {SWEPT: [0.001, 0.0003]}},
        "seeds": 3,
        "max_concurrent": 4,
    }
    response = service.http.post("/v1/sweeps", json=body)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def _shown(text: str) -> float:
    """A number as the dashboard shows it (``num``: three significant digits, ``k`` and ``M``)."""
    scale = {"k": 1e3, "M": 1e6}.get(text[-1:], 1.0)
    return float(text.rstrip("kM")) * scale


def _editor(page: Page) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(page.tab.input_value("textarea[name=sweep-json]"))
    return body


def test_a_refused_sweep_shows_the_reason_beside_the_editor(page: Page, trained_sweep: str) -> None:
    page.open("#/sweeps/new")
    tab = page.tab
    example = _editor(page)
    # A working example: a base spec without a seed, a grid over one setting, three seeds.
    assert "seed" not in example["base"]
    assert list(example["space"]["grid"]) == [SWEPT]
    assert example["seeds"] == 3

    tab.fill("textarea[name=sweep-json]", "{not json")
    tab.click("[data-action=submit]")
    tab.locator("#form-errors").get_by_text("The JSON is not valid").wait_for()

    example["space"]["grid"][SWEPT] = [0.001, -1]
    tab.fill("textarea[name=sweep-json]", json.dumps(example, indent=2))
    tab.click("[data-action=submit]")
    errors = tab.locator("#form-errors")
    errors.get_by_text("value -1 in configuration c1").wait_for()
    assert f"space.grid.{SWEPT}" in errors.inner_text()
    assert "greater than 0" in errors.inner_text()
    assert tab.locator(".field.invalid textarea[name=sweep-json]").count() == 1
    assert re.search(r"#/sweeps/new$", tab.url)
    assert len(page.allow_errors("status of 422")) == 1
    page.screenshot("sweep-new-error")


def test_the_example_sweep_opens_its_page_with_its_runs_waiting(page: Page) -> None:
    page.open("#/sweeps")
    page.tab.click("[data-action=new-sweep]")
    page.tab.wait_for_url(re.compile(r"#/sweeps/new$"))
    tab = page.tab
    example = _editor(page)
    tab.click("[data-action=submit]")
    tab.wait_for_url(re.compile(r"#/sweeps/[0-9A-Z]{26}$"))
    sweep_id = tab.url.rsplit("/", 1)[1]

    tab.locator("h1 .badge[data-status=running]").wait_for()
    assert tab.inner_text("h1").startswith(example["name"])
    rows = tab.locator("#configurations tbody tr[data-config]")
    assert rows.evaluate_all("rs => rs.map(r => r.dataset.config)") == ["c0", "c1"]
    for key, value in zip(("c0", "c1"), example["space"]["grid"][SWEPT], strict=True):
        row = tab.locator(f"#configurations tr[data-config={key}]")
        assert row.locator(f"[data-param='{SWEPT}']").inner_text() == str(value)
        assert row.locator("[data-col=rank]").inner_text() == "–"  # nothing finished
        assert row.locator("[data-col=seeds]").inner_text() == "0/3"
    # Two of six runs may start (max_concurrent 2): the other four wait, pending.
    counts = tab.inner_text("#sweep-counts")
    assert counts.startswith("0/6 succeeded")
    assert "4 pending" in counts
    started = re.findall(r"(\d+) (?:queued|running)", counts)
    assert sum(int(n) for n in started) == 2, counts
    page.screenshot("sweep-launched")

    # Its runs in the runs list: each names the sweep; the pending ones filter out.
    tab.click("[data-action=all-runs]")
    tab.wait_for_url(re.compile(rf"#/\?sweep_id={sweep_id}$"))
    runs = tab.locator("#runs tbody tr[data-run]")
    tab.wait_for_function("() => document.querySelectorAll('#runs tr[data-run]').length === 6")
    assert runs.locator(".sweep-link").all_inner_texts() == [f"sweep {example['name']}"] * 6
    tab.select_option("select[name=status]", "pending")
    tab.wait_for_function("() => document.querySelectorAll('#runs tr[data-run]').length === 4")
    assert set(runs.evaluate_all("rs => rs.map(r => r.dataset.status)")) == {"pending"}
    page.screenshot("runs-of-a-sweep")

    # Back to the sweep: Cancel stops every run that has not ended.
    runs.first.locator(".sweep-link").click()
    tab.wait_for_url(re.compile(rf"#/sweeps/{sweep_id}$"))
    tab.click("[data-action=cancel]")
    tab.locator("h1 .badge[data-status=cancelled]").wait_for(timeout=CANCEL_BUDGET_MS)
    assert "6 cancelled" in tab.inner_text("#sweep-counts")
    assert tab.locator("[data-action=cancel]").count() == 0
    assert tab.locator("[data-action=resume]").count() == 1


def _wait_for_sweep(service: Api, sweep_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + TRAINING_BUDGET_S
    while True:
        sweep: dict[str, Any] = service.http.get(f"/v1/sweeps/{sweep_id}").json()
        if sweep["status"] == "succeeded":
            return sweep
        assert sweep["status"] == "running", f"the sweep ended {sweep['status']}: {sweep['runs']}"
        assert time.monotonic() < deadline, f"the sweep is still running: {sweep['runs']}"
        time.sleep(0.5)


def _check_table(page: Page, summary: dict[str, Any]) -> None:
    """The table shows the summary's ranks, IQMs and P(best > it), the best row marked."""
    for c in summary["configurations"]:
        row = page.tab.locator(f"#configurations tr[data-config={c['key']}]")
        assert row.locator("[data-col=rank]").inner_text() == str(c["rank"])
        assert row.locator("[data-col=seeds]").inner_text() == "3/3"
        iqm = row.locator("[data-col=iqm] .value").inner_text()
        assert _shown(iqm) == pytest.approx(c["final"]["iqm"], rel=0.006, abs=0.006)
        low, high = (
            _shown(v)
            for v in re.findall(r"[^\[\], ]+", row.locator("[data-col=iqm] .ci").inner_text())
        )
        assert (low, high) == pytest.approx(c["final"]["iqm_ci95"], rel=0.006, abs=0.006)
        if c["key"] == summary["best"]:
            assert row.get_attribute("class") == "best"
            assert row.locator("[data-col=improvement]").inner_text() == "best"
        else:
            shown = row.locator("[data-col=improvement] .value").inner_text()
            assert _shown(shown) == pytest.approx(c["improvement"]["probability"], abs=0.006)
    assert page.tab.locator("#configurations tr.best").count() == 1


def test_a_finished_sweep_ranks_its_configurations_and_draws_their_curves(
    page: Page,
    service: Api,
    trained_sweep: str,
    open_tab: Callable[[str | None], Page],
    stack_env: dict[str, str],
) -> None:
    _wait_for_sweep(service, trained_sweep)
    summary = service.http.get(f"/v1/sweeps/{trained_sweep}/summary").json()
    assert summary["best"] is not None
    page.open(f"#/sweeps/{trained_sweep}")
    tab = page.tab
    tab.locator("h1 .badge[data-status=succeeded]").wait_for()
    tab.locator("#configurations tr[data-config] [data-col=rank]").first.wait_for()
    assert tab.inner_text("#sweep-counts") == "6/6 succeeded"
    assert tab.input_value("select[name=metric]") == "eval/episode_return"
    _check_table(page, summary)

    # One mean line and one band per configuration with a curve, in the legend too.
    drawn = sum(1 for c in summary["configurations"] if c["curve"])
    assert drawn == 2
    chart = tab.locator("[data-chart=curves]")
    tab.wait_for_function(
        f"() => document.querySelectorAll('[data-chart=curves] svg path.line').length === {drawn}"
    )
    assert chart.locator("svg path.band").count() == drawn
    assert chart.locator(".legend span").count() == drawn
    assert chart.get_attribute("data-points") == str(
        sum(len(c["curve"]) for c in summary["configurations"])
    )
    csv = tab.context.request.get(str(service.http.base_url).rstrip("/") + _csv_href(page))
    assert csv.status == 200 and csv.text().splitlines()[0].startswith("rank,config,")
    page.screenshot("sweep-finished")

    # Another metric: the table and the chart follow it.
    tab.select_option("select[name=metric]", "train/episode_return")
    chart.locator("h2").get_by_text("train/episode_return").wait_for()
    by_train = service.http.get(
        f"/v1/sweeps/{trained_sweep}/summary", params={"metric": "train/episode_return"}
    ).json()
    _check_table(page, by_train)

    # One click from a configuration to its runs, and from a run back to its sweep.
    best = summary["best"]
    tab.click(f"#configurations tr[data-config={best}] [data-action=runs]")
    links = tab.locator(f"tr[data-runs-of={best}] a.run-link")
    assert links.count() == 3
    links.first.click()
    tab.wait_for_url(re.compile(r"#/runs/[0-9A-Z]{26}$"))
    sweep_link = tab.locator("#run-sweep")
    assert sweep_link.inner_text() == "browser sweep"
    sweep_link.click()
    tab.wait_for_url(re.compile(rf"#/sweeps/{trained_sweep}$"))

    page.open("#/sweeps")
    row = tab.locator(f"#sweeps tr[data-sweep='{trained_sweep}']")
    row.wait_for()
    assert row.locator(".badge").inner_text() == "succeeded"
    assert row.locator("[data-col=runs]").inner_text() == "6/6 succeeded"
    page.screenshot("sweeps-table")

    # A viewer reads sweeps but is offered no way to start, cancel or resume one.
    viewer = open_tab(create_key(stack_env, "viewer"))
    viewer.open(f"#/sweeps/{trained_sweep}")
    viewer.tab.locator("#configurations tr.best").wait_for()
    assert viewer.tab.locator("[data-action=cancel], [data-action=resume]").count() == 0
    viewer.open("#/sweeps")
    viewer.tab.locator(f"tr[data-sweep='{trained_sweep}']").wait_for()
    assert viewer.tab.locator("[data-action=new-sweep]").count() == 0


def _csv_href(page: Page) -> str:
    """The CSV link's target: the summary's table, by the metric shown."""
    href = page.tab.get_attribute("[data-action=csv]", "href")
    assert href is not None and href.endswith("/summary.csv?metric=eval%2Fepisode_return")
    return href


def test_a_pbt_sweep_draws_its_lineage_tree(
    page: Page, service: Api, tiny_spec: Callable[..., dict[str, Any]]
) -> None:
    """Two members, two rounds of 200 steps: the worse member of round 0 continues the better
    one's checkpoint. The page draws four nodes, linked to their runs, and one exploit edge from
    the better member's round 0 to the worse member's round 1."""
    base = {k: v for k, v in tiny_spec(400, name="browser-pbt").items() if k != "seed"}
    body = {
        "name": "browser pbt",
        "base": base,
        "space": {"random": {SWEPT: {"log_uniform": [1e-4, 1e-2]}}, "seed": 3},
        "max_concurrent": 2,
        "search": {"method": "pbt", "population": 2, "round_steps": 200},
    }
    created = service.http.post("/v1/sweeps", json=body)
    assert created.status_code == 201, created.text
    sweep = _wait_for_sweep(service, created.json()["id"])
    [copy] = [c for c in sweep["configurations"] if c["exploited"]]
    assert copy["round"] == 1

    page.open(f"#/sweeps/{sweep['id']}")
    tab = page.tab
    tab.locator("h1 .badge[data-status=succeeded]").wait_for()
    tab.wait_for_function("() => document.querySelectorAll('#lineage [data-node]').length === 4")
    assert "pbt: 2 members, round 2 of 2" in tab.inner_text("#sweep-header")
    assert tab.locator("#lineage line.exploit").count() == 1
    assert tab.locator("#lineage line.carry").count() == 1
    # The curves: one line per member, its whole history (the copied member's through the other's
    # round 0), not one per round.
    tab.wait_for_function(
        "() => document.querySelectorAll('[data-chart=curves] svg path.line').length === 2"
    )
    legend = tab.locator("[data-chart=curves] .legend span").all_inner_texts()
    assert sorted(text.split()[0] for text in legend) == ["m0.r1", "m1.r1"], legend
    edge = tab.locator("#lineage line.exploit").get_attribute("data-edge")
    assert edge == f"{copy['continues']}>{copy['key']}"
    runs = service.http.get("/v1/experiments", params={"sweep_id": sweep["id"]}).json()["items"]
    run_of = {r["sweep_config"]: r["id"] for r in runs}
    node = tab.locator(f"#lineage [data-node='{copy['key']}']")
    assert node.get_attribute("href") == f"#/runs/{run_of[copy['key']]}"
    node.hover()
    readout = tab.inner_text("#lineage-readout")
    assert f"copied {copy['continues']}" in readout and "learning_rate_actor=" in readout
    page.screenshot("sweep-pbt-lineage")

    # The copied member's run says whose checkpoint it continued.
    node.click()
    parent = tab.locator("#run-parent")
    parent.wait_for()
    continued = service.http.get(f"/v1/experiments/{run_of[copy['key']]}").json()["parent"]
    assert continued["what"] == "run" and continued["experiment_id"] == run_of[copy["continues"]]
    assert f"continued from its checkpoint {continued['checkpoint_id']}" in (
        tab.locator("#about, .facts").first.inner_text()
    )


def test_an_asha_sweep_shows_its_rungs(
    page: Page, service: Api, tiny_spec: Callable[..., dict[str, Any]]
) -> None:
    """ASHA given as the sweep's search: its page shows the configurations and the rungs (not a
    search's trial count), and it can be cancelled like any sweep."""
    base = {k: v for k, v in tiny_spec(600, name="browser-asha").items() if k != "seed"}
    body = {
        "name": "browser asha",
        "base": base,
        "space": {"grid": {SWEPT: [0.001, 0.0003, 0.0001]}},
        "seeds": 1,
        "max_concurrent": 1,
        "search": {"method": "asha", "rungs": [200, 400], "reduction_factor": 2},
    }
    created = service.http.post("/v1/sweeps", json=body)
    assert created.status_code == 201, created.text
    sweep_id = created.json()["id"]
    page.open(f"#/sweeps/{sweep_id}")
    tab = page.tab
    tab.locator("h1 .badge[data-status]").wait_for()  # the header is drawn with the sweep
    header = tab.inner_text("#sweep-header")
    assert "3 configurations × 1 seed, asha rungs at 200, 400" in header, header
    assert "undefined" not in header
    tab.click("[data-action=cancel]")
    tab.locator("h1 .badge[data-status=cancelled]").wait_for(timeout=CANCEL_BUDGET_MS)
