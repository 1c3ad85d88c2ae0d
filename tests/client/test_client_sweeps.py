"""The ``marlforge sweep`` verbs against a live service (an API process and a torch worker on
PostgreSQL and Redis): a tiny sweep submitted, watched to success and ranked; its JSON, table and
CSV; cancel and resume acting on its runs; an idempotent resubmission; and the refusals' exit
codes (a 422 naming the swept parameter, a sweep that does not exist)."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cli_support import Cli, LiveServer
from e2e_support import marlforge_command, service_env

pytestmark = [
    pytest.mark.slow,
    pytest.mark.e2e,
    pytest.mark.integration,
    pytest.mark.xdist_group("client"),
    # The first test starts the service and trains four tiny runs one after another (the worker
    # runs one at a time): 150 s ran out on a loaded 2-core machine with six runs, where each took
    # 12-35 s from its message to its end. The bound covers the watch command's own 300 s, and
    # guards against a hang, not a slow machine.
    pytest.mark.timeout(360),
]

LR = "hyperparameters.learning_rate_actor"
MISSING = "01" + "0" * 24


def _env(server: LiveServer) -> dict[str, str]:
    return {"MARLFORGE_URL": server.url, "MARLFORGE_API_KEY": server.key}


def _sweep(
    tiny_spec: Callable[..., dict[str, Any]],
    rates: list[Any],
    total_steps: int = 400,
    **changes: Any,
) -> dict[str, Any]:
    base = tiny_spec(total_steps=total_steps)
    del base["seed"]  # the sweep's seeds set it
    return {"name": "tiny lr", "base": base, "space": {"grid": {LR: rates}}, **changes}


def _write(folder: Path, name: str, body: dict[str, Any]) -> str:
    path = folder / name
    path.write_text(json.dumps(body))
    return str(path)


def _run_statuses(server: LiveServer, sweep_id: str) -> list[str]:
    page = server.api.http.get("/v1/experiments", params={"sweep_id": sweep_id}).json()
    return sorted(e["status"] for e in page["items"])


@pytest.fixture(scope="module")
def watched(
    live_server: LiveServer,
    tiny_spec: Callable[..., dict[str, Any]],
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[str, subprocess.CompletedProcess[str]]:
    """``marlforge sweep submit sweep.json --watch`` of 2 configurations × 2 seeds of a tiny DDPG
    run (two seeds are enough for a ranking with intervals): the sweep's id, the finished
    command."""
    folder = tmp_path_factory.mktemp("sweep")
    sweep = _write(folder, "sweep.json", _sweep(tiny_spec, [0.0003, 0.001], seeds=2))
    env = service_env({**_env(live_server), "HOME": str(folder)}, drop=["XDG_CONFIG_HOME"])
    done = subprocess.run(
        [*marlforge_command(), "sweep", "submit", sweep, "--watch"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return done.stdout.splitlines()[0] if done.stdout else "", done


def test_submit_watch_runs_the_sweep_to_success_and_prints_its_ranked_table(
    watched: tuple[str, subprocess.CompletedProcess[str]], live_server: LiveServer
) -> None:
    sweep_id, done = watched
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(sweep_id) == 26  # the id alone on the first line: ID=$(marlforge sweep submit ...)
    assert "2 configurations × 2 seeds = 4 runs, at most 4 at once" in done.stderr
    assert re.search(r"^succeeded: 4 succeeded \(4 runs\)  step 1600/1600 \(100%\)$",
                     done.stdout, re.M)  # fmt: skip
    header = "RANK  KEY  learning_rate_actor  RUNS  MEAN"
    assert any(line.startswith(header) for line in done.stdout.splitlines())
    rows = {line.split()[1]: line.split() for line in done.stdout.splitlines()[-2:]}
    assert sorted(rows) == ["c0", "c1"]
    assert sorted(row[0] for row in rows.values()) == ["1", "2"]
    assert rows["c0"][2:4] == ["0.0003", "2/2"] and rows["c1"][2:4] == ["0.001", "2/2"]
    assert live_server.key not in done.stdout + done.stderr
    assert _run_statuses(live_server, sweep_id) == ["succeeded"] * 4


def test_ls_show_and_csv_print_what_the_api_answers(
    watched: tuple[str, subprocess.CompletedProcess[str]], live_server: LiveServer, marlforge: Cli
) -> None:
    sweep_id, _ = watched
    env = _env(live_server)
    listed = marlforge("sweep", "ls", "--json", env=env)
    shown = marlforge("sweep", "show", sweep_id, "--json", env=env)
    table = marlforge("sweep", "show", sweep_id, env=env)
    csv = marlforge("sweep", "show", sweep_id, "--csv", env=env)
    ls_table = marlforge("sweep", "ls", env=env)
    watch = marlforge("sweep", "watch", sweep_id, env=env)

    assert listed.returncode == 0, listed.stderr
    assert sweep_id in [s["id"] for s in json.loads(listed.stdout)["items"]]
    body = json.loads(shown.stdout)
    http = live_server.api.http
    assert body["sweep"] == http.get(f"/v1/sweeps/{sweep_id}").json()
    assert body["summary"] == http.get(f"/v1/sweeps/{sweep_id}/summary").json()
    assert body["summary"]["best"] in ("c0", "c1")
    assert table.returncode == 0, table.stderr
    assert re.search(rf"^id +{sweep_id}$", table.stdout, re.M)
    assert re.search(r"^status +succeeded: 4 succeeded \(4 runs\)", table.stdout, re.M)
    for key, rate in (("c0", "0.0003"), ("c1", "0.001")):
        assert re.search(rf"^[12] +{key} +{rate} +2/2 +-?[0-9.]+ +-?[0-9.]+ \(", table.stdout, re.M)
    second = r"^2 +c[01] .* [01]\.[0-9]{2} \([01]\.[0-9]{2} to [01]\.[0-9]{2}\)$"
    assert re.search(second, table.stdout, re.M)  # P(best > it) with its interval
    assert csv.returncode == 0 and csv.stdout == http.get(f"/v1/sweeps/{sweep_id}/summary.csv").text
    assert csv.stdout.splitlines()[0].startswith(f"rank,config,{LR},")
    assert ls_table.stdout.splitlines()[0].split()[:3] == ["ID", "NAME", "STATUS"]
    assert sweep_id in ls_table.stdout
    assert watch.returncode == 0 and watch.stdout.startswith("succeeded: 4 succeeded")


def test_a_bad_sweep_exits_1_naming_the_swept_parameter_and_why(
    live_server: LiveServer,
    marlforge: Cli,
    tiny_spec: Callable[..., dict[str, Any]],
    tmp_path: Path,
) -> None:
    bad = _write(tmp_path, "bad.json", _sweep(tiny_spec, [0.001, -1]))
    done = marlforge("sweep", "submit", bad, env=_env(live_server))
    assert done.returncode == 1 and done.stdout == ""
    assert "invalid_sweep" in done.stderr
    assert re.search(rf"^  space\.grid\.{LR}: value -1 in configuration c1: ", done.stderr, re.M)
    (tmp_path / "not.json").write_text("[1]")
    not_an_object = marlforge("sweep", "submit", str(tmp_path / "not.json"), env=_env(live_server))
    assert not_an_object.returncode == 2 and "must be a JSON object" in not_an_object.stderr
    assert marlforge("sweep", "show", "--csv").returncode == 2  # no ID: argparse's usage error


def test_cancel_and_resume_change_the_sweeps_runs(
    watched: tuple[str, subprocess.CompletedProcess[str]],
    live_server: LiveServer,
    marlforge: Cli,
    tiny_spec: Callable[..., dict[str, Any]],
    tmp_path: Path,
) -> None:
    env = _env(live_server)
    body = _sweep(tiny_spec, [0.0003, 0.001], total_steps=200_000, seeds=2, max_concurrent=1)
    submitted = marlforge("sweep", "submit", _write(tmp_path, "long.json", body), env=env)
    assert submitted.returncode == 0, submitted.stderr
    sweep_id = submitted.stdout.splitlines()[0]
    assert _run_statuses(live_server, sweep_id).count("pending") == 3  # one slot: max_concurrent
    pending = marlforge("ls", "--sweep", sweep_id, "--status", "pending", "--json", env=env)
    assert [e["status"] for e in json.loads(pending.stdout)["items"]] == ["pending"] * 3

    cancelled = marlforge("sweep", "cancel", sweep_id, env=env)
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout.startswith(f"{sweep_id} ")
    assert set(_run_statuses(live_server, sweep_id)) <= {"cancelled", "cancelling"}
    runs = live_server.api.http.get("/v1/experiments", params={"sweep_id": sweep_id}).json()
    for run in runs["items"]:
        live_server.api.wait_until(run["id"], {"cancelled"}, timeout=60)
    watch = marlforge("sweep", "watch", sweep_id, env=env)
    assert watch.returncode == 1
    assert "error: the sweep cancelled: 4 cancelled (4 runs)" in watch.stderr

    resumed = marlforge("sweep", "resume", sweep_id, "--json", env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["status"] == "running"
    assert "cancelled" not in _run_statuses(live_server, sweep_id)
    assert marlforge("sweep", "cancel", sweep_id, env=env).returncode == 0  # frees the worker


def test_an_idempotent_resubmission_answers_the_first_sweep(
    live_server: LiveServer,
    marlforge: Cli,
    tiny_spec: Callable[..., dict[str, Any]],
    tmp_path: Path,
) -> None:
    env = _env(live_server)
    once = _write(tmp_path, "once.json", _sweep(tiny_spec, [0.001], seeds=1))
    other = _write(tmp_path, "other.json", _sweep(tiny_spec, [0.0003], seeds=1))
    key = ("--idempotency-key", f"sweep-{tmp_path.name}")
    first = marlforge("sweep", "submit", once, *key, env=env)
    again = marlforge("sweep", "submit", once, *key, env=env)
    changed = marlforge("sweep", "submit", other, *key, env=env)
    assert first.returncode == 0 and again.returncode == 0, first.stderr + again.stderr
    assert again.stdout.splitlines()[0] == first.stdout.splitlines()[0]
    assert changed.returncode == 1 and "idempotency_conflict" in changed.stderr
    assert marlforge("sweep", "cancel", first.stdout.splitlines()[0], env=env).returncode == 0


@pytest.mark.parametrize("verb", ["show", "watch", "cancel", "resume"])
def test_a_sweep_that_does_not_exist_exits_3(
    verb: str, live_server: LiveServer, marlforge: Cli
) -> None:
    done = marlforge("sweep", verb, MISSING, env=_env(live_server))
    assert done.returncode == 3 and "not_found" in done.stderr


def test_a_pbt_sweep_is_submitted_with_its_plan(
    live_server: LiveServer,
    marlforge: Cli,
    tiny_spec: Callable[..., dict[str, Any]],
    tmp_path: Path,
) -> None:
    base = tiny_spec(total_steps=1200)
    del base["seed"]
    body = {
        "name": "tiny pbt",
        "base": base,
        "space": {"random": {LR: {"log_uniform": [1e-4, 1e-2]}}},
        "search": {"method": "pbt", "population": 3, "round_steps": 400},
    }
    env = _env(live_server)
    done = marlforge("sweep", "submit", _write(tmp_path, "pbt.json", body), env=env)
    assert done.returncode == 0, done.stderr
    sweep_id = done.stdout.strip()
    assert "a pbt search of 3 members × 3 rounds of 400 steps = 9 runs" in done.stderr
    sweep = live_server.api.http.get(f"/v1/sweeps/{sweep_id}").json()
    assert [c["key"] for c in sweep["configurations"]] == ["m0.r0", "m1.r0", "m2.r0"]
    assert marlforge("sweep", "cancel", sweep_id, env=env).returncode == 0


def test_an_asha_sweep_is_submitted_with_its_rungs(
    live_server: LiveServer,
    marlforge: Cli,
    tiny_spec: Callable[..., dict[str, Any]],
    tmp_path: Path,
) -> None:
    base = tiny_spec(total_steps=1200)
    del base["seed"]
    body = {
        "name": "tiny asha",
        "base": base,
        "space": {"grid": {LR: [1e-3, 1e-4, 1e-5]}},
        "seeds": 1,
        "search": {"method": "asha", "rungs": [400, 800], "reduction_factor": 2},
    }
    env = _env(live_server)
    done = marlforge("sweep", "submit", _write(tmp_path, "asha.json", body), env=env)
    assert done.returncode == 0, done.stderr
    sweep_id = done.stdout.strip()
    assert (
        "3 configurations × 1 seeds = 3 runs, those behind stopping at step 400, 800 "
        "(successive halving, η = 2), at most 4 at once"
    ) in done.stderr
    sweep = live_server.api.http.get(f"/v1/sweeps/{sweep_id}").json()
    assert sweep["spec"]["search"]["method"] == "asha" and sweep["proposing"] is False
    assert [c["key"] for c in sweep["configurations"]] == ["c0", "c1", "c2"]
    assert marlforge("sweep", "cancel", sweep_id, env=env).returncode == 0
