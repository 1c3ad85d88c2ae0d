"""The bodies of ``/v1/sweeps``: a sweep, pages of them, and its summary."""

from __future__ import annotations

import datetime as dt
from typing import Any

from pydantic import BaseModel, Field

from api.schemas.common import Progress
from core.enums import ExperimentStatus
from core.sweeps.service import SweepStatus, SweepView
from core.sweeps.summary import ConfigSummary, SweepSummary

Interval = tuple[float, float]


class ConfigurationOut(BaseModel):
    """One point of the search space."""

    key: str = Field(
        description="Its key within the sweep: `c0`, `c1`...; a PBT member's round `m3.r2`."
    )
    params: dict[str, Any] = Field(description="The value of each swept spec path.")
    refused: str | None = Field(
        default=None,
        description="Why a configuration a search proposed has no runs (they would be refused "
        "as a submission is); null otherwise.",
    )
    member: int | None = Field(
        default=None, description="PBT: the member this round belongs to; null otherwise."
    )
    round: int | None = Field(default=None, description="PBT: the round, from 0; null otherwise.")
    continues: str | None = Field(
        default=None,
        description="PBT: the configuration (a member's earlier round) whose final checkpoint "
        "this round's run continues: the member's own last round, or, when it was exploited, "
        "a top member's; null in round 0. Together they are the population's lineage tree.",
    )
    exploited: bool | None = Field(
        default=None,
        description="PBT: whether the member copied another's checkpoint for this round, its "
        "values explored from that member's; null otherwise.",
    )


class SweepOut(BaseModel):
    """A sweep: what it trains, and where its runs stand."""

    id: str = Field(description="The sweep's id (a ULID: sorts by creation time).")
    name: str
    status: SweepStatus = Field(
        description="`running` while any run is pending, queued, running or cancelling, or a "
        "search has configurations left to propose; then `succeeded` (all did), `failed` (some "
        "failed; the others' results stand) or `cancelled`."
    )
    proposing: bool = Field(
        description="Whether its `search` will propose more configurations (tpe) or rounds "
        "(pbt); false for a grid or random sweep, whose configurations are all listed from the "
        "start."
    )
    runs: dict[str, int] = Field(
        description="How many of its runs are in each status, and `total`."
    )
    progress: Progress = Field(
        description="Its runs' steps together; a PBT search's: the steps its members have "
        "trained out of all their budgets (every round, those to come included)."
    )
    configurations: list[ConfigurationOut]
    seeds: list[int]
    max_concurrent: int = Field(description="At most this many runs queued or running at once.")
    spec: dict[str, Any] = Field(description="The sweep as submitted, defaults filled in.")
    runs_url: str = Field(description="Its runs: `/v1/experiments?sweep_id=...`.")
    summary_url: str
    created_by_key_id: str | None
    created_at: dt.datetime

    @classmethod
    def of(cls, view: SweepView) -> SweepOut:
        sweep, counts = view.sweep, view.counts
        runs = {status.value: counts.by_status.get(status, 0) for status in ExperimentStatus}
        return cls(
            id=sweep.id,
            name=sweep.name,
            status=view.status,
            runs={**runs, "total": counts.total},
            progress=Progress.of(*view.progress),
            configurations=[ConfigurationOut(**c) for c in sweep.configurations],
            seeds=sweep.seeds,
            max_concurrent=sweep.max_concurrent,
            proposing=sweep.proposing,
            spec=sweep.spec,
            runs_url=f"/v1/experiments?sweep_id={sweep.id}",
            summary_url=f"/v1/sweeps/{sweep.id}/summary",
            created_by_key_id=sweep.created_by_key_id,
            created_at=sweep.created_at,
        )


class SweepPage(BaseModel):
    """A page of sweeps, newest first."""

    items: list[SweepOut]
    next_after: str | None = Field(
        description="Pass as `after` to get the next page; null on the last page."
    )


class FinalOut(BaseModel):
    """The final values of a configuration's runs that succeeded, and their aggregates."""

    values: list[float] = Field(description="Each finished run's last value of the metric.")
    mean: float
    mean_ci95: Interval = Field(description="95% percentile-bootstrap interval of the mean.")
    iqm: float = Field(description="Interquartile mean (rliable's `trim_mean(x, 0.25)`).")
    iqm_ci95: Interval = Field(description="95% percentile-bootstrap interval of the IQM.")


class ImprovementOut(BaseModel):
    """How likely the best configuration's run beats a run of this one."""

    best: str = Field(description="The best configuration's key.")
    probability: float = Field(description="P(best > this) + P(equal) / 2 over pairs of runs.")
    ci95: Interval = Field(description="Its 95% bootstrap interval.")


class CurvePointOut(BaseModel):
    """The configuration's mean at one step of the sweep's common grid."""

    step: int
    mean: float
    low: float = Field(description="Lower end of the mean's 95% bootstrap interval.")
    high: float
    runs: int = Field(description="Runs with a value at this step.")


class ConfigSummaryOut(BaseModel):
    """One configuration, summarised."""

    key: str
    params: dict[str, Any]
    rank: int | None = Field(
        description="1 is the best IQM; null without a finished run. A PBT search ranks its "
        "members' latest finished round only (the earlier rounds are null)."
    )
    runs: int
    succeeded: int
    failed: int
    stopped_early: int = Field(
        description="Runs a rung of the sweep's `early_stopping` stopped (`succeeded` short of "
        "their budget; their values are not final ones)."
    )
    active: int = Field(description="Runs not finished yet (pending, queued, running...).")
    experiment_ids: list[str]
    final: FinalOut | None = Field(description="Null until one of its runs has succeeded.")
    improvement: ImprovementOut | None = Field(
        description="P(best > this configuration); null for the best and the unranked."
    )
    curve: list[CurvePointOut]


class SummaryOut(BaseModel):
    """A sweep's configurations, ranked by the IQM of their runs' final values."""

    sweep_id: str
    metric: str
    params: list[str] = Field(description="The swept spec paths.")
    best: str | None = Field(description="The best configuration's key (null: none finished).")
    configurations: list[ConfigSummaryOut]

    @classmethod
    def of(cls, found: SweepSummary) -> SummaryOut:
        """The response for a summary (``core.sweeps.summary.summarize``)."""
        ranked = [c for c in found.configurations if c.rank == 1]
        return cls.model_validate(
            {
                "sweep_id": found.sweep_id,
                "metric": found.metric,
                "params": found.params,
                "best": ranked[0].key if ranked else None,
                "configurations": [_config_out(c) for c in found.configurations],
            }
        )


def _config_out(c: ConfigSummary) -> dict[str, Any]:
    final = c.final
    better = c.improvement
    return {
        **{k: getattr(c, k) for k in ("key", "params", "rank", "runs", "succeeded", "failed")},
        "stopped_early": c.stopped_early,
        "active": c.active,
        "experiment_ids": c.experiment_ids,
        "final": None if final is None else {
            "values": final.values,
            "mean": final.mean,
            "mean_ci95": (final.mean_ci95.low, final.mean_ci95.high),
            "iqm": final.iqm,
            "iqm_ci95": (final.iqm_ci95.low, final.iqm_ci95.high),
        },
        "improvement": None if better is None else {
            "best": better.best,
            "probability": better.probability,
            "ci95": (better.ci95.low, better.ci95.high),
        },
        "curve": [vars(p) for p in c.curve],
    }  # fmt: skip
