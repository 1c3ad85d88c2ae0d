"""benchmarks/stability.py's summary of runs still going: it reads the evaluations that
``EchoHooks`` prints as they land (the printer and the parser are held to each other here), and
compares a group of runs at the evaluations all of them reached."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import stability  # noqa: E402
from learning import EchoHooks  # noqa: E402

from learners.hooks import MetricPoint  # noqa: E402

ARGS = argparse.Namespace(env="simple_spread_v3", env_kwargs=["N=4"])


def _log(
    tmp_path: Path,
    name: str,
    seed: int,
    points: list[MetricPoint],
    capsys: pytest.CaptureFixture[str],
) -> Path:
    hooks = EchoHooks(seed)
    for point in points:
        hooks.metrics([point])
    log = tmp_path / name
    log.write_text("some warning a library printed\n" + capsys.readouterr().out)
    return log


def test_a_partial_run_is_what_its_echoed_evaluations_say(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    points = [
        MetricPoint(1000, 0.0, "learner/entropy", 1.25),
        MetricPoint(200_000, 0.0, "eval/episode_return", -15.25),
        MetricPoint(201_000, 0.0, "learner/entropy", 0.875),
        MetricPoint(400_000, 0.0, "eval/episode_return", -12.5),
    ]
    run = stability.partial_run(_log(tmp_path, "mappo-torch-203.log", 203, points, capsys), ARGS)
    assert run is not None
    assert (run["algorithm"], run["backend"], run["seed"]) == ("mappo", "torch", 203)
    assert run["evals"] == [(200_000, -15.2), (400_000, -12.5)]  # printed to one decimal
    assert run["stats"]["entropy"] == [(200_000, 1.25), (400_000, 0.88)]
    assert run["env_kwargs"] == {"N": 4} and run["partial"] is True
    # The collapse rule reads it as it reads a finished run: entropy 0.88 is above the floor.
    assert stability.collapsed(run, 0.3, -27.9, 100_000) == []
    assert stability.collapsed(run, 1.0, -27.9, 100_000) == ["entropy 0.88 at 400000"]


def test_a_log_without_an_evaluation_is_no_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    points = [MetricPoint(1000, 0.0, "learner/entropy", 1.5)]
    assert (
        stability.partial_run(_log(tmp_path, "ippo-tensorflow-7.log", 7, points, capsys), ARGS)
        is None
    )


def test_common_evaluations_are_the_steps_every_run_reached() -> None:
    group = [
        {"evals": [(200_000, -15.0), (400_000, -13.0), (600_000, -12.0)]},
        {"evals": [(200_000, -14.0), (400_000, -12.0)]},
        {"evals": [(200_000, -16.0), (400_000, -11.0), (600_000, -10.0), (800_000, -9.0)]},
    ]
    assert stability.common_evals(group) == [
        (200_000, [-15.0, -14.0, -16.0]),
        (400_000, [-13.0, -12.0, -11.0]),
    ]


@pytest.mark.parametrize("name", ["parent.log", "sweep-notes.log", "a-b-c.log"])
def test_a_log_not_named_as_a_run_is_no_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    points = [MetricPoint(25_000, 0.0, "eval/episode_return", -20.0)]
    assert stability.partial_run(_log(tmp_path, name, 0, points, capsys), ARGS) is None


@pytest.mark.parametrize("name", ["wqmix-torch-200.log", "maddpg-mindspore-12.log"])
def test_the_run_is_named_by_its_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    seed = int(name.rsplit("-", 1)[1].removesuffix(".log"))
    points = [MetricPoint(25_000, 0.0, "eval/episode_return", -20.0)]
    run = stability.partial_run(_log(tmp_path, name, seed, points, capsys), ARGS)
    assert run is not None and f"{run['algorithm']}-{run['backend']}-{run['seed']}.log" == name


@pytest.mark.parametrize(
    ("name", "kwargs"),
    [
        ("maddpg-torch-200.log", {"N": 4, "continuous_actions": True}),
        ("ddpg-tensorflow-1.log", {"N": 4, "continuous_actions": True}),
        ("wqmix-torch-200.log", {"N": 4}),
    ],
)
def test_a_partial_run_has_the_env_kwargs_its_run_was_built_with(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, kwargs: dict[str, object]
) -> None:
    """The DDPG family trains MPE with continuous actions (``learning.default_spec``), so a cut
    run is compared with random play on continuous actions, as its finished JSON would be."""
    seed = int(name.rsplit("-", 1)[1].removesuffix(".log"))
    points = [MetricPoint(25_000, 0.0, "eval/episode_return", -20.0)]
    run = stability.partial_run(_log(tmp_path, name, seed, points, capsys), ARGS)
    assert run is not None and run["env_kwargs"] == kwargs


def _run(seed: int, evals: list[tuple[int, float]], algorithm: str = "mappo") -> dict[str, object]:
    return {"algorithm": algorithm, "backend": "torch", "seed": seed, "evals": evals}


def test_two_sweeps_are_compared_seed_by_seed_on_the_seeds_and_evaluations_both_have() -> None:
    option = [
        _run(205, [(200_000, -15.0), (400_000, -12.0)]),
        _run(206, [(200_000, -16.0), (400_000, -13.0)]),
        _run(207, [(200_000, -14.0)]),  # still going
        _run(300, [(200_000, -1.0), (400_000, -1.0)]),  # no pair in the other sweep
        _run(205, [(200_000, -20.0)], algorithm="ippo"),  # a group the other sweep lacks
    ]
    default = [
        _run(205, [(200_000, -16.0), (400_000, -12.5)]),
        _run(206, [(200_000, -15.0), (400_000, -14.0)]),
        _run(207, [(200_000, -16.0), (400_000, -11.0)]),
    ]
    compared = stability.paired_comparison(option, default)
    assert list(compared) == [("mappo", "torch")]
    # Seed 207 has reached only 200k in one sweep: every point compares the same three seeds.
    (point,) = compared[("mappo", "torch")]
    assert point.step == 200_000 and point.seeds == [205, 206, 207]
    assert point.differences == pytest.approx([1.0, -1.0, 2.0])
    assert point.mean == pytest.approx(2.0 / 3.0)
    assert point.ahead == 2
    # The interval of a resampled mean of the three differences lies within their range.
    assert -1.0 <= point.low < point.mean < point.high <= 2.0
