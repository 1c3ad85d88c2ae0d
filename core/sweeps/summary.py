"""A sweep's summary: which configuration is better, and whether the difference is real.

Per configuration, over its runs that **succeeded** with their whole budget (a failed or cancelled
run, or one a rung of ``early_stopping`` stopped, has no final value; the counts say how many there
are): each run's final value of the metric (its last finite point),
their mean and interquartile mean, each with a 95% bootstrap interval; an aggregate curve (the mean
over the configuration's runs, with a 95% band, on one step grid common to the sweep: every run
that has points counts, finished or not, holding its last value between points); a rank by IQM;
and the probability that the best configuration improves on each other one, P(best > other), with
its interval. A PBT search ranks only its members' latest finished round (``_ranked``), and each
of its configurations' curves is the member's whole history up to that round (``_histories``):
the points of every round it continues, from round 0, each round's from the run that trained it.
``core.sweeps.stats`` says how each is computed. ``to_csv`` writes the table.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from core.enums import ExperimentStatus
from core.models import Experiment, Sweep
from core.sweeps import asha, stats
from core.sweeps.repository import SweepRepository

DEFAULT_METRIC = "eval/episode_return"


@dataclass(frozen=True)
class FinalValues:
    """The finished runs' final values of the metric and their aggregates."""

    values: list[float]
    mean: float
    mean_ci95: stats.Interval
    iqm: float
    iqm_ci95: stats.Interval


@dataclass(frozen=True)
class Improvement:
    """P(best > this configuration) over pairs of their finished runs' final values."""

    best: str
    probability: float
    ci95: stats.Interval


@dataclass
class ConfigSummary:
    """One configuration of the sweep, summarised."""

    key: str
    params: dict[str, Any]
    runs: int
    succeeded: int
    failed: int
    active: int
    experiment_ids: list[str]
    stopped_early: int = 0
    """Its runs that a rung stopped (``succeeded`` short of their budget: no final value)."""
    final: FinalValues | None = None
    rank: int | None = None
    improvement: Improvement | None = None
    curve: list[stats.CurvePoint] = field(default_factory=list)


@dataclass(frozen=True)
class SweepSummary:
    """The whole summary, configurations ranked (those with no finished run last)."""

    sweep_id: str
    metric: str
    configurations: list[ConfigSummary]
    params: list[str]
    """The swept spec paths, in the space's order."""


def summarize(session: Session, sweep: Sweep, metric: str = DEFAULT_METRIC) -> SweepSummary:
    """The sweep's summary for ``metric`` (see the module's docstring)."""
    repo = SweepRepository(session)
    runs = repo.runs(sweep.id)
    series = repo.series([r.id for r in runs], metric)
    curves: dict[str, list[list[tuple[int, float]]]] = {
        str(config["key"]): [
            series[r.id] for r in runs if r.sweep_config == config["key"] and series.get(r.id)
        ]
        for config in sweep.configurations
    }
    if (round_steps := _round_steps(sweep)) is not None:
        histories = _histories(sweep.configurations, round_steps, curves)
        curves = {key: [points] if points else [] for key, points in histories.items()}
    grid = stats.common_grid([[s for s, _ in c] for cs in curves.values() for c in cs])
    configs = []
    early = asha.stopping_of(sweep.spec) is not None
    for config in sweep.configurations:
        mine = [r for r in runs if r.sweep_config == config["key"]]
        # A run a rung stopped (``core.sweeps.asha``) succeeded short of its budget: its last
        # value is not a final one.
        stopped = [r for r in mine if early and _stopped_early(r)]
        done = [
            r
            for r in mine
            if r.status == ExperimentStatus.SUCCEEDED and series.get(r.id) and r not in stopped
        ]
        summary = ConfigSummary(
            key=config["key"],
            params=config["params"],
            runs=len(mine),
            succeeded=sum(r.status == ExperimentStatus.SUCCEEDED for r in mine),
            failed=sum(r.status == ExperimentStatus.FAILED for r in mine),
            active=sum(not r.status.is_terminal for r in mine),
            experiment_ids=[r.id for r in mine],
            stopped_early=len(stopped),
            final=_final([series[r.id][-1][1] for r in done]),
        )
        summary.curve = stats.aggregate_curve(
            [([s for s, _ in c], [v for _, v in c]) for c in curves[summary.key]], grid
        )
        configs.append(summary)
    _rank(_ranked(sweep, configs))
    configs.sort(key=lambda c: (c.rank is None, c.rank or 0, c.key))
    params = list(sweep.spec.get("space", {}).get("grid", {})) + list(
        sweep.spec.get("space", {}).get("random", {})
    )
    return SweepSummary(sweep.id, metric, configs, params)


def _ranked(sweep: Sweep, configs: list[ConfigSummary]) -> list[ConfigSummary]:
    """The configurations ranked against each other: all of them, except in a PBT search, whose
    configurations are its members' rounds: there only the members' latest round with a final
    value is ranked (the population as it stands), the earlier rounds listed unranked."""
    if (sweep.spec.get("search") or {}).get("method") != "pbt":
        return configs
    rounds = {str(c["key"]): int(c.get("round", 0)) for c in sweep.configurations}
    finished = [rounds[c.key] for c in configs if c.final is not None]
    if not finished:
        return configs
    return [c for c in configs if rounds[c.key] == max(finished)]


def _round_steps(sweep: Sweep) -> int | None:
    """A PBT search's steps per round; None for any other sweep."""
    search = sweep.spec.get("search") or {}
    return int(search["round_steps"]) if search.get("method") == "pbt" else None


def _histories(
    configurations: list[Any], round_steps: int, curves: dict[str, list[list[tuple[int, float]]]]
) -> dict[str, list[tuple[int, float]]]:
    """Each PBT configuration's history: the member's points from round 0 to its round, following
    the checkpoints it continues (``continues``: its own last round, or the one it copied). Each
    link gives its own run's points in its round: those after the step it continued from (round
    0: all) up to the step its successor continued from."""
    by_key = {str(c["key"]): c for c in configurations}
    out: dict[str, list[tuple[int, float]]] = {}
    for key in by_key:
        chain = [key]
        while (parent := by_key[chain[-1]].get("continues")) in by_key and len(chain) <= len(
            by_key
        ):
            chain.append(str(parent))
        chain.reverse()
        starts = [int(by_key[k].get("round", 0)) * round_steps for k in chain]
        points: list[tuple[int, float]] = []
        for i, link in enumerate(chain):
            own = curves[link][0] if curves[link] else []
            end = starts[i + 1] if i + 1 < len(chain) else None
            points += [
                (s, v) for s, v in own if (i == 0 or s > starts[i]) and (end is None or s <= end)
            ]
        out[key] = points
    return out


def _stopped_early(run: Experiment) -> bool:
    return run.status == ExperimentStatus.SUCCEEDED and run.step < run.total_steps


def _final(values: list[float]) -> FinalValues | None:
    if not values:
        return None
    return FinalValues(
        values=values,
        mean=float(stats.mean(values)),
        mean_ci95=stats.bootstrap_ci(values, stats.mean),
        iqm=float(stats.iqm(values)),
        iqm_ci95=stats.bootstrap_ci(values, stats.iqm),
    )


def _rank(configs: list[ConfigSummary]) -> None:
    """Rank by IQM (ties by mean, then key), compare the best with each other, and sort."""
    finished = [(c, c.final) for c in configs if c.final is not None]
    finished.sort(key=lambda item: (-item[1].iqm, -item[1].mean, item[0].key))
    for rank, (config, _) in enumerate(finished, start=1):
        config.rank = rank
    if finished:
        best, best_final = finished[0]
        for other, final in finished[1:]:
            other.improvement = Improvement(
                best=best.key,
                probability=stats.probability_of_improvement(best_final.values, final.values),
                ci95=stats.probability_of_improvement_ci(best_final.values, final.values),
            )
    configs.sort(key=lambda c: (c.rank is None, c.rank or 0, c.key))


CSV_COLUMNS = [
    "rank", "config", "runs", "succeeded", "failed", "stopped_early", "mean", "mean_low",
    "mean_high", "iqm", "iqm_low", "iqm_high", "p_best_better", "p_low", "p_high", "final_values",
]  # fmt: skip


def to_csv(summary: SweepSummary) -> str:
    """The ranked table as CSV: one row per configuration, a column per swept parameter."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS[:2] + summary.params + CSV_COLUMNS[2:])
    for c in summary.configurations:
        f, p = c.final, c.improvement
        row: list[Any] = [c.rank or "", c.key]
        row += [_cell(c.params.get(name)) for name in summary.params]
        row += [c.runs, c.succeeded, c.failed, c.stopped_early]
        row += (
            [f.mean, f.mean_ci95.low, f.mean_ci95.high, f.iqm, f.iqm_ci95.low, f.iqm_ci95.high]
            if f
            else [""] * 6
        )
        row += [p.probability, p.ci95.low, p.ci95.high] if p else [""] * 3
        row += [" ".join(repr(v) for v in f.values) if f else ""]
        writer.writerow(row)
    return out.getvalue()


def _cell(value: Any) -> Any:
    return "" if value is None else value
