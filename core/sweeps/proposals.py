"""A model-based search's next configurations, stored with their runs (``core.sweeps.tpe``).

The scheduler calls ``propose_runs`` for a sweep that is still ``proposing``, with its row locked,
before it starts pending runs: while the runs waiting ``pending`` would not fill the room under
``max_concurrent``, one more configuration is proposed from the trials the database holds, built
into one run per seed (``space.child_spec``), admitted as a submission is (``Admit``: the
deployment's bounds, the warm start's checkpoint) and stored ``pending``. A configuration whose
runs are refused is stored with the reason and no runs, a failed trial the sampler learns from. The
sweep stops proposing at ``search.trials`` configurations.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy.orm import Session

from core.enums import ExperimentStatus
from core.experiments import warm_start
from core.models import Experiment, Sweep
from core.quotas import check_spec_bounds
from core.settings import Settings
from core.sweeps import asha, service, tpe
from core.sweeps.repository import SweepRepository
from core.sweeps.space import Child, Configuration, SweepSpec, child_spec, seeds_of
from learners.api import ExperimentSpec, SpecError, parse_spec

S = ExperimentStatus

Admit = Callable[[Session, str, ExperimentSpec], ExperimentSpec]
"""A proposed run's admission: ``(session, project_id, spec)`` -> the spec to store, or
``SpecError``."""


def admission(settings: Settings) -> Admit:
    """What a proposed run must pass, as a submitted one: the deployment's bounds
    (``core.quotas.check_spec_bounds``) and its warm start resolved (``warm_start.resolve``)."""

    def admit(session: Session, project_id: str, spec: ExperimentSpec) -> ExperimentSpec:
        check_spec_bounds(spec, settings)
        return warm_start.resolve(session, project_id, spec)

    return admit


def propose_runs(session: Session, sweep: Sweep, admit: Admit, room: int) -> list[str]:
    """Propose configurations until the pending runs fill ``room`` or the search has proposed
    all its trials; the new runs' ids (staged, not committed)."""
    spec = SweepSpec.model_validate(sweep.spec)
    search = spec.model_search
    if search is None or not sweep.proposing:
        return []
    repo = SweepRepository(session)
    pending = len(repo.run_ids(sweep.id, [S.PENDING]))
    added: list[str] = []
    while sweep.proposing and pending + len(added) < room:
        params = tpe.propose(spec.space.random, search, spec.space.seed, trials(session, sweep))
        config = Configuration(key=f"c{len(sweep.configurations)}", params=params)
        entry: dict[str, object] = {"key": config.key, "params": params}
        try:
            children = _children(session, sweep, spec, config, admit)
        except SpecError as exc:
            entry["refused"] = "; ".join(f"{e.field}: {e.reason}" for e in exc.errors)
            children = []
        added += service.add_runs(
            session, sweep, children, f"proposed by sweep {sweep.id}'s tpe search"
        )
        # A new list, so that the JSON column is written.
        sweep.configurations = [*sweep.configurations, entry]
        sweep.proposing = len(sweep.configurations) < search.trials
    return added


def _children(
    session: Session, sweep: Sweep, spec: SweepSpec, config: Configuration, admit: Admit
) -> list[Child]:
    children = []
    for seed in seeds_of(spec):
        name = f"{sweep.name} {config.key} s{seed}"
        child = parse_spec(child_spec(spec.base, config, seed, name))
        parsed = admit(session, sweep.project_id, child)
        children.append(Child(config.key, seed, parsed.model_dump(mode="json")))
    return children


def trials(session: Session, sweep: Sweep) -> list[tpe.Trial]:
    """The sweep's configurations so far as trials, in the order proposed: running while any of
    its runs has not ended; else complete with the IQM of the final values of its runs that
    succeeded with their whole budget (the summary's); else pruned when a rung of
    ``early_stopping`` stopped its runs, with the IQM of their values at the highest rung they
    reached; else failed (or its runs were refused)."""
    repo = SweepRepository(session)
    runs = repo.runs(sweep.id)
    metric = (sweep.spec.get("search") or {}).get("metric", "eval/episode_return")
    series = repo.series([r.id for r in runs], metric)
    early = asha.stopping_of(sweep.spec) is not None
    out = []
    for config in sweep.configurations:
        mine: list[Experiment] = [r for r in runs if r.sweep_config == config["key"]]
        done = [r for r in mine if r.status == S.SUCCEEDED and series.get(r.id)]
        # A run a rung stopped succeeded short of its budget (``core.sweeps.asha``), as the
        # summary counts it.
        cut = [r for r in done if early and r.step < r.total_steps]
        finals = [series[r.id][-1][1] for r in done if r not in cut]
        stopped = [series[r.id][-1] for r in cut]
        if any(not r.status.is_terminal for r in mine):
            out.append(tpe.Trial(config["params"], tpe.TrialState.RUNNING))
        elif finals:
            out.append(tpe.Trial(config["params"], tpe.TrialState.COMPLETE, tpe.score(finals)))
        elif stopped:
            rung = max(step for step, _ in stopped)
            value = tpe.score([v for step, v in stopped if step == rung])
            out.append(tpe.Trial(config["params"], tpe.TrialState.PRUNED, value, rung))
        else:
            out.append(tpe.Trial(config["params"], tpe.TrialState.FAILED))
    return out
