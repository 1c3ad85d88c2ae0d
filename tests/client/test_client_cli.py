"""The ``marlforge`` client verbs against a live service (an API process and a torch worker on
PostgreSQL and Redis): a user's path from ``login`` to ``submit --watch`` to ``download``, and
what a script sees when something is refused (exit codes, the reason on stderr, never the key)."""

from __future__ import annotations

import hashlib
import json
import re
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cli_support import Cli, LiveServer
from e2e_support import marlforge_command, service_env

from client import Client

pytestmark = [
    pytest.mark.slow,
    pytest.mark.e2e,
    pytest.mark.integration,
    pytest.mark.xdist_group("client"),
    pytest.mark.timeout(150),  # the first test starts the service and trains; ~45 s in all
]


def _env(server: LiveServer, key: str | None = None) -> dict[str, str]:
    return {"MARLFORGE_URL": server.url, "MARLFORGE_API_KEY": key or server.key}


@pytest.fixture(scope="module")
def finished(
    live_server: LiveServer,
    tiny_spec: Callable[..., dict[str, Any]],
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[str, subprocess.CompletedProcess[str]]:
    """``marlforge submit spec.json --watch`` of a tiny DDPG run: its id, the finished command."""
    folder = tmp_path_factory.mktemp("submit")
    spec = folder / "spec.json"
    spec.write_text(json.dumps(tiny_spec(total_steps=400)))
    env = service_env({**_env(live_server), "HOME": str(folder)}, drop=["XDG_CONFIG_HOME"])
    done = subprocess.run(
        [*marlforge_command(), "submit", str(spec), "--watch"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.stdout.splitlines()[0] if done.stdout else "", done


def test_submit_watch_follows_the_run_to_success(
    finished: tuple[str, subprocess.CompletedProcess[str]], live_server: LiveServer
) -> None:
    experiment_id, done = finished
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(experiment_id) == 26  # the id alone on the first line: ID=$(marlforge submit ...)
    assert re.search(r"^step 400/400 \(100%\)  eval return -?[0-9]+\.[0-9]$", done.stdout, re.M)
    assert "status: running" in done.stdout and "succeeded: step 400/400" in done.stdout
    assert live_server.key not in done.stdout + done.stderr
    assert live_server.api.get(experiment_id)["status"] == "succeeded"


def test_ls_and_show_print_the_apis_json(
    finished: tuple[str, subprocess.CompletedProcess[str]], live_server: LiveServer, marlforge: Cli
) -> None:
    experiment_id, _ = finished
    listed = marlforge("ls", "--json", "--status", "succeeded", env=_env(live_server))
    assert listed.returncode == 0, listed.stderr
    assert experiment_id in [e["id"] for e in json.loads(listed.stdout)["items"]]
    shown = marlforge("show", experiment_id, "--json", env=_env(live_server))
    assert shown.returncode == 0, shown.stderr
    body = json.loads(shown.stdout)
    assert (body["id"], body["status"]) == (experiment_id, "succeeded")
    assert body["progress"]["step"] == 400
    table = marlforge("ls", env=_env(live_server))
    assert table.stdout.splitlines()[0].split()[:2] == ["ID", "NAME"]
    assert experiment_id in table.stdout
    logs = marlforge("logs", experiment_id, "--json", env=_env(live_server))
    assert logs.returncode == 0 and isinstance(json.loads(logs.stdout), list)


def test_download_writes_the_checkpoint_with_the_listed_sha256(
    finished: tuple[str, subprocess.CompletedProcess[str]],
    live_server: LiveServer,
    marlforge: Cli,
    tmp_path: Path,
) -> None:
    experiment_id, _ = finished
    listing = live_server.api.checkpoints(experiment_id)
    latest = max(listing, key=lambda c: c["step"])
    target = tmp_path / "out" / "policy.safetensors"
    target.parent.mkdir()
    done = marlforge("download", experiment_id, "-o", str(target), "--json", env=_env(live_server))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["id"] == latest["id"]
    assert hashlib.sha256(target.read_bytes()).hexdigest() == latest["sha256"]
    assert [p.name for p in target.parent.iterdir()] == [target.name]  # no partial file left
    oldest = min(listing, key=lambda c: c["step"])
    other = tmp_path / "oldest.safetensors"
    args = ("download", experiment_id, "--checkpoint", oldest["id"], "-o", str(other))
    assert marlforge(*args, env=_env(live_server)).returncode == 0
    assert hashlib.sha256(other.read_bytes()).hexdigest() == oldest["sha256"]


def test_export_writes_the_policy_alone_which_acts_as_the_checkpoint_does(
    finished: tuple[str, subprocess.CompletedProcess[str]],
    live_server: LiveServer,
    marlforge: Cli,
    tmp_path: Path,
) -> None:
    from learners.checkpoint import read, read_manifest
    from learners.envs.factory import make_vec_env
    from learners.policy import load_policy
    from learners.spec import ExperimentSpec

    experiment_id, _ = finished
    latest = max(live_server.api.checkpoints(experiment_id), key=lambda c: c["step"])
    full, policy = tmp_path / "full.safetensors", tmp_path / "policy.safetensors"
    assert (
        marlforge("download", experiment_id, "-o", str(full), env=_env(live_server)).returncode == 0
    )

    done = marlforge("export", experiment_id, "-o", str(policy), "--json", env=_env(live_server))

    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout)
    assert said["id"] == latest["id"] and said["export_bytes"] == policy.stat().st_size
    assert said["export_sha256"] == hashlib.sha256(policy.read_bytes()).hexdigest()
    assert read_manifest(policy).contents == "policy"
    assert sorted(read(policy)[0]) == sorted(n for n in read(full)[0] if n.startswith("actor."))
    env = make_vec_env(ExperimentSpec.model_validate(read_manifest(policy).spec).env, 11)
    observation = env.reset()
    assert (load_policy(policy).act(observation) == load_policy(full).act(observation)).all()
    env.close()
    named = marlforge("export", experiment_id, env=_env(live_server), cwd=tmp_path)
    assert named.returncode == 0, named.stderr
    assert (tmp_path / f"{experiment_id}-step{latest['step']}-policy.safetensors").is_file()
    unknown = marlforge("export", experiment_id, "--checkpoint", "nope", env=_env(live_server))
    assert unknown.returncode == 3


def test_export_as_onnx_and_act_through_the_api_give_the_policys_actions(
    finished: tuple[str, subprocess.CompletedProcess[str]],
    live_server: LiveServer,
    marlforge: Cli,
    tmp_path: Path,
) -> None:
    import onnxruntime

    from learners.checkpoint import read_manifest
    from learners.envs.factory import make_vec_env
    from learners.policy import load_policy
    from learners.spec import ExperimentSpec

    experiment_id, _ = finished
    latest = max(live_server.api.checkpoints(experiment_id), key=lambda c: c["step"])
    full = tmp_path / "full.safetensors"
    assert (
        marlforge("download", experiment_id, "-o", str(full), env=_env(live_server)).returncode == 0
    )

    done = marlforge(
        "export", experiment_id, "--format", "onnx", env=_env(live_server), cwd=tmp_path
    )

    assert done.returncode == 0, done.stderr
    model = tmp_path / f"{experiment_id}-step{latest['step']}-policy.onnx"
    session = onnxruntime.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    env = make_vec_env(ExperimentSpec.model_validate(read_manifest(full).spec).env, 11)
    observation = env.reset()
    feed = {"obs": observation.obs}
    if "action_mask" in [i.name for i in session.get_inputs()]:
        feed["action_mask"] = observation.avail_actions
    actions = session.run(["actions"], feed)[0]
    np.testing.assert_allclose(actions, load_policy(full).act(observation), rtol=0, atol=1e-5)
    env.close()
    # The same policy acting in the API (Client.act): per-agent observations, a batch of one.
    info = env.info
    observations = {
        a: observation.obs[:, j, : info.obs_dims[j]] for j, a in enumerate(info.agent_ids)
    }
    with Client(live_server.url, live_server.key) as client:
        answer = client.act(experiment_id, observations)
    expected = load_policy(full).act(observations)
    assert answer["memory"] is None
    assert sorted(answer["actions"]) == sorted(expected)
    for agent, value in expected.items():
        np.testing.assert_allclose(answer["actions"][agent], value, rtol=0, atol=1e-5)


def _points(server: LiveServer, experiment_id: str) -> list[dict[str, Any]]:
    """The run's metric points with a finite value, as the API serves them."""
    with Client(server.url, server.key) as client:
        return [p for p in client.metric_points(experiment_id) if p["value"] is not None]


def test_export_tensorboard_writes_every_point_tensorboards_reader_reads_back(
    finished: tuple[str, subprocess.CompletedProcess[str]],
    live_server: LiveServer,
    marlforge: Cli,
    tmp_path: Path,
) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    experiment_id, _ = finished
    target = tmp_path / "tb"

    done = marlforge(
        "export", "tensorboard", experiment_id, str(target), "--json", env=_env(live_server)
    )

    assert done.returncode == 0, done.stderr
    (said,) = json.loads(done.stdout)
    points = _points(live_server, experiment_id)
    assert said["points"] == len(points) > 0
    reader = EventAccumulator(str(target / experiment_id), size_guidance={"scalars": 0})
    reader.Reload()
    names = sorted({p["name"] for p in points})
    assert sorted(reader.Tags()["scalars"]) == names and said["metrics"] == len(names)
    for name in names:
        ours = [(p["step"], p["value"]) for p in points if p["name"] == name]
        theirs = [(e.step, e.value) for e in reader.Scalars(name)]
        assert [s for s, _ in theirs] == [s for s, _ in ours], name
        np.testing.assert_allclose([v for _, v in theirs], [v for _, v in ours], rtol=1e-6)
    assert {"marlforge/run", "marlforge/spec"} <= set(reader.Tags()["tensors"])
    unusable = marlforge("export", "tensorboard", env=_env(live_server))
    assert unusable.returncode == 2 and "DIR" in unusable.stderr


def test_export_mlflow_logs_the_run_to_a_real_tracking_server(
    finished: tuple[str, subprocess.CompletedProcess[str]],
    live_server: LiveServer,
    marlforge: Cli,
    tmp_path: Path,
) -> None:
    from mlflow.tracking import MlflowClient

    from tests.mlflow_support import mlflow_server

    experiment_id, _ = finished
    with mlflow_server(tmp_path / "mlflow") as uri:
        args = ("export", "mlflow", experiment_id, "--tracking-uri", uri, "--json")
        done = marlforge(*args, env=_env(live_server))

        assert done.returncode == 0, done.stderr
        (said,) = json.loads(done.stdout)
        mlflow = MlflowClient(tracking_uri=uri)
        run = mlflow.get_run(said["mlflow_run_id"])
        spec = live_server.api.get(experiment_id)["spec"]
        assert run.info.status == "FINISHED" and run.info.run_name == spec["name"]
        assert run.data.tags["marlforge.experiment_id"] == experiment_id
        assert run.data.params["algorithm"] == spec["algorithm"]
        assert run.data.params["total_steps"] == str(spec["total_steps"])
        assert len(run.data.params) == said["params"] > 10
        points = _points(live_server, experiment_id)
        assert said["points"] == len(points)
        for name in {p["name"] for p in points}:
            ours = sorted((p["step"], p["value"]) for p in points if p["name"] == name)
            theirs = sorted(
                (m.step, m.value) for m in mlflow.get_metric_history(run.info.run_id, name)
            )
            assert theirs == ours, name
        (folder,) = mlflow.list_artifacts(run.info.run_id)
        (artifact,) = mlflow.list_artifacts(run.info.run_id, folder.path)
        assert artifact.path == said["artifact"] and artifact.path.endswith("-policy.safetensors")
        local = Path(mlflow.download_artifacts(run.info.run_id, artifact.path, str(tmp_path)))
        from learners.checkpoint import read_manifest

        assert read_manifest(local).contents == "policy"
        missing = marlforge("export", "mlflow", experiment_id, env=_env(live_server))
        assert missing.returncode == 2 and "--tracking-uri" in missing.stderr


def test_a_bad_spec_exits_1_naming_the_field_and_why(
    live_server: LiveServer,
    marlforge: Cli,
    tiny_spec: Callable[..., dict[str, Any]],
    tmp_path: Path,
) -> None:
    spec = tmp_path / "bad.json"
    spec.write_text(json.dumps(tiny_spec(hyperparameters={"tau": 5})))
    done = marlforge("submit", str(spec), env=_env(live_server))
    assert done.returncode == 1
    assert "hyperparameters.tau: Input should be less than or equal to 1" in done.stderr
    assert "invalid_spec" in done.stderr and done.stdout == ""
    not_json = tmp_path / "not.json"
    not_json.write_text("{")
    assert marlforge("submit", str(not_json), env=_env(live_server)).returncode == 2
    assert marlforge("submit", str(tmp_path / "gone.json"), env=_env(live_server)).returncode == 2


def test_refusals_have_their_own_exit_codes_and_never_show_the_key(
    finished: tuple[str, subprocess.CompletedProcess[str]], live_server: LiveServer, marlforge: Cli
) -> None:
    experiment_id, _ = finished
    wrong = "mfk_" + "x" * 43
    refused = marlforge("ls", env=_env(live_server, key=wrong))
    assert refused.returncode == 4
    assert "the server refused the key" in refused.stderr and "marlforge login" in refused.stderr
    assert wrong not in refused.stdout + refused.stderr
    missing = marlforge("show", "01" + "0" * 24, env=_env(live_server))
    assert missing.returncode == 3 and "not_found" in missing.stderr
    conflict = marlforge("cancel", experiment_id, env=_env(live_server))
    assert conflict.returncode == 1 and "conflict" in conflict.stderr
    nothing = marlforge("ls")
    assert nothing.returncode == 4 and "marlforge login" in nothing.stderr
    nowhere = {"MARLFORGE_URL": "http://127.0.0.1:9", "MARLFORGE_API_KEY": wrong}
    unreachable = marlforge("ls", env=nowhere)
    assert unreachable.returncode == 5 and "cannot reach http://127.0.0.1:9" in unreachable.stderr


def test_login_saves_0600_credentials_that_later_verbs_use(
    finished: tuple[str, subprocess.CompletedProcess[str]],
    live_server: LiveServer,
    marlforge: Cli,
    home: Path,
) -> None:
    experiment_id, _ = finished
    refused = marlforge("login", "--url", live_server.url, stdin="mfk_" + "y" * 43 + "\n")
    assert refused.returncode == 4
    credentials = home / ".config" / "marlforge" / "credentials"
    assert not credentials.exists()
    done = marlforge("login", "--url", live_server.url, stdin=live_server.key + "\n")
    assert done.returncode == 0, done.stderr
    assert "project 'default'" in done.stdout and live_server.key not in done.stdout
    assert stat.S_IMODE(credentials.stat().st_mode) == 0o600
    assert json.loads(credentials.read_text()) == {"url": live_server.url, "key": live_server.key}
    shown = marlforge("show", experiment_id, "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["id"] == experiment_id
    xdg = home / "xdg"
    elsewhere = marlforge(
        "login",
        "--url",
        live_server.url,
        "--key",
        live_server.key,
        env={"XDG_CONFIG_HOME": str(xdg)},
    )
    assert elsewhere.returncode == 0, elsewhere.stderr
    assert stat.S_IMODE((xdg / "marlforge" / "credentials").stat().st_mode) == 0o600


def test_the_client_imports_nothing_of_the_server() -> None:
    code = (
        "import sys, client.cli, client.api; "
        "server = {'api', 'core', 'workers', 'learners'}; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & server))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_watch_exits_1_when_the_run_is_cancelled(
    finished: tuple[str, subprocess.CompletedProcess[str]],
    live_server: LiveServer,
    marlforge: Cli,
    tiny_spec: Callable[..., dict[str, Any]],
    tmp_path: Path,
) -> None:
    spec = tmp_path / "long.json"
    spec.write_text(json.dumps(tiny_spec(total_steps=200_000)))
    submitted = marlforge("submit", str(spec), "--json", env=_env(live_server))
    assert submitted.returncode == 0, submitted.stderr
    experiment_id = json.loads(submitted.stdout)["id"]
    live_server.api.wait_until(experiment_id, {"running"}, timeout=60)
    cancelled = marlforge("cancel", experiment_id, env=_env(live_server))
    assert cancelled.returncode == 0 and cancelled.stdout.split() == [experiment_id, "cancelling"]
    watched = marlforge("watch", experiment_id, env=_env(live_server))
    assert watched.returncode == 1
    assert "status: cancelled" in watched.stdout and "the run cancelled" in watched.stderr
    events = marlforge("watch", experiment_id, "--json", env=_env(live_server))
    kinds = [json.loads(line)["kind"] for line in events.stdout.splitlines()]
    assert events.returncode == 1 and kinds[0] == "status" and kinds[-1] == "end"


def test_a_match_is_started_watched_listed_and_refused_from_the_cli(
    live_server: LiveServer, marlforge: Cli, tmp_path: Path
) -> None:
    match = {
        "env": {"suite": "mpe", "id": "simple_tag_v3"},
        "teams": {"adversary": "random", "agent": "random"},
        "episodes": 3,
        "seed": 5,
    }
    (tmp_path / "match.json").write_text(json.dumps(match))
    (tmp_path / "bad.json").write_text(json.dumps({**match, "teams": {"adversary": "random"}}))

    played = marlforge("match", "submit", str(tmp_path / "match.json"), "--watch",
                       env=_env(live_server))  # fmt: skip
    assert played.returncode == 0, played.stdout + played.stderr
    match_id = played.stdout.splitlines()[0]
    listed = marlforge("match", "ls", "--json", env=_env(live_server))
    shown = marlforge("match", "show", match_id, "--json", env=_env(live_server))
    refused = marlforge("match", "submit", str(tmp_path / "bad.json"), env=_env(live_server))

    assert re.search(r"^return +adversary: -?[0-9.]+ \(95% CI ", played.stdout, re.M)
    assert re.search(r"^score +collisions_per_episode = [0-9.]+$", played.stdout, re.M)
    assert match_id in [m["id"] for m in json.loads(listed.stdout)["items"]]
    body = json.loads(shown.stdout)
    assert body["status"] == "succeeded" and body["result"]["episodes"] == 3
    assert body == live_server.api.http.get(f"/v1/matches/{match_id}").json()
    assert refused.returncode == 1
    assert "teams: simple_tag_v3 has the teams adversary, agent" in refused.stderr
    # A played match cannot be cancelled: the API's 409, exit 1 with its reason.
    late = marlforge("match", "cancel", match_id, env=_env(live_server))
    assert late.returncode == 1 and "already succeeded" in late.stderr


EVIL = "evil\x1b[2J\x1b]0;pwned\x07\nFAKE LINE"


def test_a_name_with_terminal_escapes_is_refused_and_a_stored_one_is_printed_escaped(
    live_server: LiveServer,
    marlforge: Cli,
    tiny_spec: Callable[..., dict[str, Any]],
    tmp_path: Path,
    pg_url: str,
) -> None:
    spec = tmp_path / "evil.json"
    spec.write_text(json.dumps(tiny_spec(name=EVIL)))
    refused = marlforge("submit", str(spec), env=_env(live_server))
    assert refused.returncode == 1 and refused.stdout == ""
    assert "name: must be one line of printable text" in refused.stderr
    assert "\x1b" not in refused.stderr

    # A string the server holds that a person wrote (here a run's name, stored as a row from
    # before names were checked): the table and the detail show it escaped, on its own line.
    run = live_server.api.submit(tiny_spec(name="later-renamed", total_steps=200))["id"]
    from sqlalchemy import create_engine, text

    engine = create_engine(pg_url)
    try:
        with engine.begin() as connection:
            connection.execute(
                text("UPDATE experiments SET name = :name WHERE id = :id"),
                {"name": EVIL, "id": run},
            )
    finally:
        engine.dispose()
    for args in (("ls",), ("show", run)):
        shown = marlforge(*args, env=_env(live_server))
        assert shown.returncode == 0, shown.stderr
        assert "\x1b" not in shown.stdout and "\x07" not in shown.stdout
        assert "evil\\x1b[2J" in shown.stdout
        assert not any(line.startswith("FAKE LINE") for line in shown.stdout.splitlines())
