"""A PBT search's next round, stored with its runs (``core.sweeps.pbt`` decides it).

The scheduler calls ``next_round`` for a PBT sweep that is still ``proposing``, with its row
locked, before it starts pending runs. While any run of the sweep's last round has not ended,
nothing happens. Once all have, each member's score is its run's evaluation return at the
round's last step (none when the run failed or stopped short), ``pbt.decide`` says which
checkpoint each member continues with which values, and each member's next run is built
(``pbt.continuation``), admitted as a submission is (``Admit``: the deployment's bounds, the
continued checkpoint resolved and the spec checked against its run) and stored ``pending``. A
run that would be refused is stored as its configuration's ``refused`` reason, without a run: the
member scores nothing in that round, and the next round replaces it. The decisions are made from
the rows alone, in one transaction under the sweep's lock, so an API restart or a second API
process makes the same ones, once. A round in which every run failed ends the search.
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy.orm import Session

from core.enums import ExperimentStatus
from core.models import Experiment, Sweep
from core.sweeps import pbt, service
from core.sweeps.proposals import Admit
from core.sweeps.repository import SweepRepository
from core.sweeps.space import Child, Configuration, SweepSpec
from learners.api import SpecError, parse_spec

log = logging.getLogger(__name__)

S = ExperimentStatus


def last_round(sweep: Sweep) -> list[dict[str, Any]]:
    """The configurations of the sweep's last round so far, by member."""
    last = max(int(c.get("round", 0)) for c in sweep.configurations)
    current: list[dict[str, Any]] = [
        c for c in sweep.configurations if int(c.get("round", 0)) == last
    ]
    return sorted(current, key=lambda c: int(c["member"]))


def next_round(session: Session, sweep: Sweep, admit: Admit) -> list[str]:
    """Store the next round's runs when every run of the last one has ended; their ids (staged,
    not committed)."""
    spec = SweepSpec.model_validate(sweep.spec)
    population = spec.population
    if population is None or not sweep.proposing or not sweep.configurations:
        return []
    current = last_round(sweep)
    round_ = int(current[0]["round"])
    repo = SweepRepository(session)
    runs = {r.sweep_config: r for r in repo.runs(sweep.id)}
    mine = [runs[str(c["key"])] for c in current if str(c["key"]) in runs]
    if any(not r.status.is_terminal for r in mine):
        return []
    end = (round_ + 1) * population.round_steps
    series = repo.series([r.id for r in mine], population.metric)
    members = [
        pbt.Member(
            int(c["member"]), dict(c["params"]), _score(runs.get(str(c["key"])), series, end)
        )
        for c in current
    ]
    decisions = pbt.decide(members, population, spec.space.random, spec.space.seed, round_)
    if decisions is None:
        log.warning("sweep %s: every run of pbt round %d failed; the search ends", sweep.id, round_)
        sweep.proposing = False
        return []
    following = round_ + 1
    by_member = {int(c["member"]): c for c in current}
    entries, children = [], []
    for decision in decisions:
        source = by_member[decision.source]
        source_run = runs[str(source["key"])]
        lineage = {
            "member": decision.member,
            "round": following,
            "continues": source["key"],
            "exploited": decision.exploited,
        }
        config = Configuration(pbt.key(decision.member, following), decision.params, lineage)
        entry = config.stored()
        name = f"{sweep.name} m{decision.member} r{following}"
        wanted = pbt.continuation(
            source_run.spec,
            source_run.id,
            decision,
            dict(source["params"]),
            following,
            population,
            name,
        )
        try:
            parsed = admit(session, sweep.project_id, parse_spec(wanted))
        except SpecError as exc:
            entry["refused"] = "; ".join(f"{e.field}: {e.reason}" for e in exc.errors)
        else:
            children.append(Child(config.key, parsed.seed, parsed.model_dump(mode="json")))
        entries.append(entry)
    added = service.add_runs(
        session, sweep, children, f"round {following} of sweep {sweep.id}'s pbt search"
    )
    # A continued run starts at its checkpoint's step, on its step axis.
    for run_id in added:
        run = session.get(Experiment, run_id)
        if run is not None:
            run.step = following * population.round_steps
    # A new list, so that the JSON column is written.
    sweep.configurations = [*sweep.configurations, *entries]
    sweep.proposing = not service.searched_all(sweep)
    return added


def _score(
    run: Experiment | None, series: dict[str, list[tuple[int, float]]], end: int
) -> float | None:
    """A member's score for a round ending at step ``end``: its run's evaluation return there,
    when the run succeeded and evaluated at that step; else None."""
    if run is None or run.status != S.SUCCEEDED or not series.get(run.id):
        return None
    step, value = series[run.id][-1]
    return float(value) if step == end and value is not None else None
