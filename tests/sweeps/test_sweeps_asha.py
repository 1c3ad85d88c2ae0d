"""Early stopping by asynchronous successive halving (``core.sweeps.asha``): the rung's decision
on synthetic returns, the rungs checked against every run's budget at submission, and the two
spellings (``early_stopping``, ``search`` with ``method: asha``) read alike, by the worker too."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from core.sweeps import space
from core.sweeps.asha import EarlyStopping, decide, stopping_of
from learners.spec import SpecError

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ddpg_pendulum.json"
ASHA = EarlyStopping(rungs=[1000, 3000], reduction_factor=3)


def test_the_first_configuration_at_a_rung_goes_on() -> None:
    rung = decide(ASHA, 1000, "c0", {"c0": [-900.0]})
    assert rung is not None and not rung.stops
    assert (rung.place, rung.scored, rung.keep, rung.index, rung.of) == (1, 1, 1, 1, 2)


def test_a_configuration_behind_the_best_n_over_eta_stops() -> None:
    scores = {"c0": [-300.0], "c1": [-900.0]}
    assert decide(ASHA, 1000, "c1", scores).stops  # type: ignore[union-attr]
    assert not decide(ASHA, 1000, "c0", scores).stops  # type: ignore[union-attr]
    # Six configurations at a rung: the best two (6 // 3) go on, the third stops.
    six = {f"c{k}": [-100.0 * k] for k in range(6)}
    places = {c: decide(ASHA, 3000, c, six) for c in six}
    assert [c for c, r in places.items() if r is not None and not r.stops] == ["c0", "c1"]
    assert places["c2"].place == 3 and places["c2"].keep == 2  # type: ignore[union-attr]


def test_a_configuration_is_scored_by_the_iqm_of_its_seeds() -> None:
    # c1's mean (-340) is below c0's -320, but one bad seed does not decide: its IQM is -200.
    scores = {"c0": [-320.0, -320.0, -320.0, -320.0], "c1": [-1000.0, -200.0, -200.0, 40.0]}
    rung = decide(ASHA, 1000, "c1", scores)
    assert rung is not None and rung.score == pytest.approx(-200.0) and rung.seeds == 4
    assert not rung.stops and rung.place == 1
    assert "IQM of 4 seeds" in rung.reason() and "place 1 of the 2" in rung.describe()


def test_ties_and_non_finite_values() -> None:
    # A tie keeps the configuration being decided; a non-finite return ranks last.
    assert not decide(ASHA, 1000, "c1", {"c0": [-5.0], "c1": [-5.0]}).stops  # type: ignore[union-attr]
    rung = decide(ASHA, 1000, "c1", {"c0": [-5000.0], "c1": [None, -1.0]})
    assert rung is not None and rung.score == -math.inf and rung.stops
    assert decide(ASHA, 2000, "c0", {"c0": [1.0]}) is None  # not a rung


def _sweep(**early: Any) -> dict[str, Any]:
    base: dict[str, Any] = json.loads(EXAMPLE.read_text())
    base.pop("seed")
    base["evaluation"] = {"every_steps": 1000, "episodes": 2}
    return {
        "base": base,
        "space": {"grid": {"total_steps": [4000, 2000]}},
        "seeds": 2,
        "early_stopping": early,
    }


def test_rungs_that_do_not_fit_every_run_are_refused_by_name() -> None:
    sweep = space.parse_sweep(_sweep(rungs=[1000, 3000]))
    with pytest.raises(SpecError) as caught:
        space.expand(sweep)
    fields = {(e.field, e.reason.split(":")[0]) for e in caught.value.errors}
    # 3,000 is past the 2,000-step configuration's budget.
    assert ("early_stopping.rungs", "the last rung (3,000) must be below the runs' total_steps "
            "(2,000)") in fields  # fmt: skip
    sweep = space.parse_sweep(_sweep(rungs=[500]))
    with pytest.raises(SpecError) as caught:
        space.expand(sweep)
    assert caught.value.errors[0].field == "early_stopping.rungs"
    assert "evaluation.every_steps (1,000)" in caught.value.errors[0].reason
    with pytest.raises(SpecError) as caught:
        space.expand(space.parse_sweep(_sweep(rungs=[1000, 1000])))
    assert "increasing" in caught.value.errors[0].reason
    with pytest.raises(SpecError) as caught:
        space.parse_sweep(_sweep(rungs=[1000], method="hyperband"))
    assert caught.value.errors[0].field == "early_stopping.method"
    expansion = space.expand(space.parse_sweep(_sweep(rungs=[1000])))
    assert len(expansion.children) == 4


def _as_search(**early: Any) -> dict[str, Any]:
    sweep = _sweep()
    del sweep["early_stopping"]
    return {**sweep, "search": {"method": "asha", **early}}


def test_asha_as_the_search_is_the_same_early_stopping_over_every_configuration() -> None:
    given = space.parse_sweep(_as_search(rungs=[1000], reduction_factor=2))
    assert given.stopping == EarlyStopping(rungs=[1000], reduction_factor=2)
    assert given.early_stopping is None and not given.proposes
    expansion = space.expand(given)
    # Every configuration and seed stored at submission, as with early_stopping.
    spelled = space.expand(space.parse_sweep(_sweep(rungs=[1000], reduction_factor=2)))
    assert [c.spec for c in expansion.children] == [c.spec for c in spelled.children]
    assert len(expansion.children) == 4 and space.run_count(given) == 4
    # The stored form is read back the same way, whichever the spelling.
    stored = given.model_dump(mode="json")
    assert stopping_of(stored) == stored["search"]
    assert stopping_of(spelled_stored := space.parse_sweep(_sweep(rungs=[1000])).model_dump(
        mode="json"
    )) == spelled_stored["early_stopping"]  # fmt: skip
    assert stopping_of({"search": {"method": "tpe", "trials": 4}}) is None


def test_asha_as_the_search_names_its_own_fields() -> None:
    with pytest.raises(SpecError) as caught:
        space.expand(space.parse_sweep(_as_search(rungs=[1000, 3000])))
    assert {e.field for e in caught.value.errors} == {"search.rungs"}
    with pytest.raises(SpecError) as caught:
        space.parse_sweep(_as_search(rungs=[1000], reduction_factor=1))
    assert [e.field for e in caught.value.errors] == ["search.reduction_factor"]
    both = {**_sweep(rungs=[1000]), "search": {"method": "asha", "rungs": [1000]}}
    with pytest.raises(SpecError) as caught:
        space.parse_sweep(both)
    assert [e.field for e in caught.value.errors] == ["early_stopping"]
    assert "give the rungs once" in caught.value.errors[0].reason
    with pytest.raises(SpecError) as caught:
        space.parse_sweep({**_sweep(rungs=[1000]), "search": {"method": "hyperband"}})
    assert caught.value.errors[0].field == "search.method"
    assert caught.value.errors[0].reason == "must be tpe, pbt or asha"
