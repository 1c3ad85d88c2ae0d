"""The model-based search's decisions (``core.sweeps.tpe``) on synthetic results: proposals within
the space, reproducible from the trials alone, learning from the results, and the checks of what
goes with a search."""

from __future__ import annotations

import math

import numpy as np

from core.sweeps import tpe
from core.sweeps.tpe import ModelSearch, Trial, TrialState

SPACE = {
    "hyperparameters.learning_rate": {"log_uniform": [1e-5, 1e-1]},
    "hyperparameters.batch_size": {"int_uniform": [16, 256]},
    "hyperparameters.hidden_sizes": {"choice": [[64, 64], [128, 128], [256]]},
    "hyperparameters.tau": {"uniform": [0.001, 0.1]},
}


def test_proposals_stay_in_the_space_with_the_types_it_declares() -> None:
    search = ModelSearch(trials=40, startup_trials=3)
    trials: list[Trial] = []
    for n in range(25):
        params = tpe.propose(SPACE, search, seed=7, trials=trials)
        assert set(params) == set(SPACE)
        lr = params["hyperparameters.learning_rate"]
        assert isinstance(lr, float) and 1e-5 <= lr <= 1e-1
        batch = params["hyperparameters.batch_size"]
        assert isinstance(batch, int) and 16 <= batch <= 256
        assert (
            params["hyperparameters.hidden_sizes"]
            in SPACE["hyperparameters.hidden_sizes"]["choice"]
        )
        assert 0.001 <= params["hyperparameters.tau"] <= 0.1
        state = TrialState.FAILED if n % 7 == 3 else TrialState.COMPLETE
        value = None if state == TrialState.FAILED else -abs(math.log10(lr) + 3)
        trials.append(Trial(params, state, value))


def test_the_next_proposal_is_a_function_of_the_stored_trials_alone() -> None:
    """What an API restart relies on: the same trials give the same next configuration; another
    trial count gives another."""
    search = ModelSearch(trials=10, startup_trials=2)
    trials = [
        Trial({"x": 0.2, "k": "a"}, TrialState.COMPLETE, 1.0),
        Trial({"x": 0.9, "k": "b"}, TrialState.COMPLETE, 0.1),
        Trial({"x": 0.5, "k": "a"}, TrialState.RUNNING),
    ]
    space = {"x": {"uniform": [0, 1]}, "k": {"choice": ["a", "b"]}}
    first = tpe.propose(space, search, seed=3, trials=trials)
    assert tpe.propose(space, search, seed=3, trials=trials) == first
    assert tpe.propose(space, search, seed=3, trials=trials[:2]) != first
    assert tpe.propose(space, search, seed=4, trials=trials) != first


def test_the_search_learns_where_the_results_are_better() -> None:
    """A bowl with its top at x = 0.8: past the random start-up trials, TPE proposes points
    nearer the top than random draws from the same range."""
    space = {"x": {"uniform": [0, 1]}}
    search = ModelSearch(trials=40, startup_trials=5)
    trials: list[Trial] = []
    for _ in range(40):
        x = tpe.propose(space, search, seed=11, trials=trials)["x"]
        trials.append(Trial({"x": x}, TrialState.COMPLETE, -((x - 0.8) ** 2)))
    modelled = [abs(t.params["x"] - 0.8) for t in trials[20:]]
    random = np.abs(np.random.default_rng(11).uniform(0, 1, 20) - 0.8)
    assert np.median(modelled) < 0.5 * np.median(random), (np.median(modelled), random)
    assert max(t.value for t in trials if t.value is not None) > -0.001


def test_what_goes_with_a_search_is_checked() -> None:
    ok = tpe.search_errors(SPACE, {}, num_samples_set=False)
    assert ok == []
    errors = tpe.search_errors({}, {"x": [1, 2]}, num_samples_set=True)
    assert [e.field for e in errors] == ["space.grid", "space.random", "space.num_samples"]


def test_pruned_trials_count_below_finished_ones() -> None:
    """With early stopping, a configuration whose runs a rung stopped is a pruned trial scored at
    its rung. The sampler takes them: a space whose finished trials all sit near x = 0.8 and
    whose pruned ones sit near x = 0.1 draws its next points nearer 0.8."""
    search = ModelSearch(trials=40, startup_trials=2)
    space = {"x": {"uniform": [0, 1]}}
    trials = [Trial({"x": x}, TrialState.COMPLETE, -abs(x - 0.8)) for x in (0.75, 0.85, 0.7)]
    trials += [Trial({"x": x}, TrialState.PRUNED, -5.0, 2000) for x in (0.05, 0.1, 0.15, 0.2)]
    proposed = [tpe.propose(space, search, seed=s, trials=trials)["x"] for s in range(12)]
    assert all(0 <= x <= 1 for x in proposed)
    assert np.median([abs(x - 0.8) for x in proposed]) < np.median([abs(x - 0.1) for x in proposed])


def test_the_reachable_configurations_are_the_corners_of_the_space() -> None:
    corners = tpe.reachable({"a": {"uniform": [0.5, 2.0]}, "b": {"choice": ["x", "y", "z"]}})
    assert len(corners) == 6
    assert {"a": 2.0, "b": "z"} in corners and {"a": 0.5, "b": "x"} in corners
    wide = {f"p{i}": {"int_uniform": [1, 9]} for i in range(10)}  # 2**10 corners: too many
    points = tpe.reachable(wide)
    assert len(points) < tpe.MAX_CROSSED_CORNERS
    assert {f"p{i}": 9 for i in range(10)} in points and {f"p{i}": 1 for i in range(10)} in points
    assert all(set(p) == set(wide) for p in points)
