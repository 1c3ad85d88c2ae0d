"""Recurrent WQMIX in TensorFlow beyond the parity suite (which holds its numbers to PyTorch's and
the oracle's): the compiled episode update equals the eager one for any episode length and batch
size from one graph, and acting carries, resets and drops the GRU state as the runner expects."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from learners.enums import Algorithm, Backend
from learners.registry import entry

pytest.importorskip("tensorflow")

REPO = Path(__file__).resolve().parents[3]
# The parity suite's cases (small configs, synthetic episodes with padding and dead agents).
sys.path.insert(0, str(REPO / "tests" / "learners" / "parity"))
from parity_assert import ONE_UPDATE, assert_close, assert_states_close  # noqa: E402
from parity_cases import build, data, observation, variants  # noqa: E402

GRU = next(v for v in variants(Algorithm.WQMIX, Backend.TENSORFLOW) if v.name == "ow-gru-shared")


def make(compiled: bool) -> Any:
    """The variant's learner; compiled, the parity suite's (its graph traced once per session)."""
    if compiled:
        return build(Algorithm.WQMIX, Backend.TENSORFLOW, GRU)
    learner = entry(Algorithm.WQMIX).learner_class(Backend.TENSORFLOW)(
        GRU.config, GRU.info, "cpu", 0
    )
    learner.set_compiled(False)
    return learner


def cut(batch: Any, episodes: int, steps: int) -> Any:
    """The first ``episodes`` episodes, cut after ``steps`` steps (T+1 observation indices)."""
    return type(batch)(
        **{
            k: v[:episodes, : steps + 1] if v.shape[1] == batch.filled.shape[1] + 1 else
            v[:episodes, :steps]
            for k, v in vars(batch).items()
        }
    )  # fmt: skip


def test_compiled_episode_update_equals_eager_from_one_graph_for_any_t_and_b() -> None:
    compiled, eager = make(compiled=True), make(compiled=False)
    eager.load_state(compiled.state())
    for k, (episodes, steps) in enumerate([(7, 6), (3, 6), (7, 4), (1, 1)]):
        batch = cut(data(Algorithm.WQMIX, GRU, seed=50 + k), episodes, steps)
        want, got = eager.update(batch).as_dict(), compiled.update(batch).as_dict()
        for name, value in want.items():
            assert_close(got[name], value, ONE_UPDATE, f"update {k} ({episodes}x{steps}) {name}")
    assert_states_close(compiled.state(), eager.state(), ONE_UPDATE, "after four updates")
    assert compiled._episode_step.experimental_get_tracing_count() == 1


def test_acting_carries_resets_and_drops_the_gru_state() -> None:
    learner = make(compiled=True)
    obs = [observation(GRU, seed=60 + k) for k in range(3)]
    memory = learner.initial_memory(GRU.info.num_envs)
    assert np.asarray(memory).shape == (3, GRU.info.num_agents, GRU.config.rnn_hidden_size)
    for o in obs:
        _, memory = learner.explore_step(o, memory)
    assert np.asarray(memory).any()
    # Copy 1's episode ends: only its row goes back to zero.
    reset = np.asarray(learner.reset_memory(memory, np.array([False, True, False])))
    np.testing.assert_array_equal(reset[[0, 2]], np.asarray(memory)[[0, 2]])
    assert not reset[1].any()
    # ``act`` keeps its own memory, from zeros along the same observations to the same state;
    # ``end_episodes`` clears the ended copies' rows.
    start = learner.state()
    for o in obs:
        learner.act(o, explore=False)
    carried = np.asarray(learner._act_memory)
    np.testing.assert_array_equal(carried, np.asarray(memory))
    learner.end_episodes(np.array([True, False, False]))
    assert not np.asarray(learner._act_memory)[0].any()
    np.testing.assert_array_equal(np.asarray(learner._act_memory)[1:], carried[1:])
    learner.end_episodes(np.array([True]))  # another number of copies: forgotten
    assert learner._act_memory is None
    learner.act(obs[0], explore=False)
    learner.load_state(start, policy_only=True)  # a loaded policy starts afresh
    assert learner._act_memory is None
