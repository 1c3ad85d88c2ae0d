"""Compiled and eager execution of the same learner make the same update: the compiled graph is
an optimisation, never a different algorithm. And compiling does not retrace without bound as
batch sizes change (the last, shorter minibatch; rollouts cut into different numbers of chunks).

Backends whose learners can run either way (``set_compiled``) are listed in ``COMPILED``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from parity_assert import ONE_UPDATE, assert_states_close, assert_stats_close, transfer
from parity_cases import Variant, build, data, rollout_buffer, update, variants

from learners.enums import Algorithm, Backend
from learners.registry import built_pairs, entry

COMPILED = (Backend.TENSORFLOW,)


def params() -> list[Any]:
    chosen = []
    for algorithm, backend in built_pairs():
        if backend not in COMPILED:
            continue
        # The first variant, and the recurrent one with minibatches where there is one.
        picked = [variants(algorithm)[0]]
        picked += [v for v in variants(algorithm) if v.name == "discrete-gru-minibatches"]
        chosen += [
            pytest.param(algorithm, backend, v, id=f"{algorithm}-{backend}-{v.name}")
            for v in picked
        ]
    return chosen


@pytest.mark.parametrize(("algorithm", "backend", "variant"), params())
def test_compiled_and_eager_updates_agree(
    algorithm: Algorithm, backend: Backend, variant: Variant, tmp_path: Path
) -> None:
    compiled = build(algorithm, backend, variant)
    eager = entry(algorithm).learner_class(backend)(variant.config, variant.info, "cpu", 0)
    eager.set_compiled(False)
    transfer(compiled, eager, algorithm, backend, tmp_path / "start.safetensors")
    for k in range(2):
        batch = data(algorithm, variant, seed=30 + k)
        want = update(algorithm, eager, batch, k)
        got = update(algorithm, compiled, batch, k)
        assert_stats_close(got, want, ONE_UPDATE, f"update {k}")
    assert_states_close(compiled.state(), eager.state(), ONE_UPDATE, "after two updates")


def _tracings(learner: Any) -> int:
    return int(learner._train_step.experimental_get_tracing_count())


@pytest.mark.parametrize("backend", [b for b in COMPILED if (Algorithm.MADDPG, b) in built_pairs()])
def test_batch_sizes_do_not_retrace_without_bound(backend: Backend) -> None:
    chosen = variants(Algorithm.MADDPG)[0]
    learner = entry(Algorithm.MADDPG).learner_class(backend)(chosen.config, chosen.info, "cpu", 0)
    full = data(Algorithm.MADDPG, chosen, seed=0)
    for size in (7, 3, 5, 6, 2, 7):
        batch = type(full)(
            **{k: np.take(v, np.arange(size), axis=0) for k, v in vars(full).items()}
        )
        update(Algorithm.MADDPG, learner, batch, 0)
    assert _tracings(learner) <= 2  # one per first shape, then one for any batch size


@pytest.mark.parametrize("backend", [b for b in COMPILED if (Algorithm.MAPPO, b) in built_pairs()])
def test_recurrent_rollouts_do_not_retrace_without_bound(backend: Backend) -> None:
    chosen = next(v for v in variants(Algorithm.MAPPO) if v.name == "discrete-gru-minibatches")
    learner = entry(Algorithm.MAPPO).learner_class(backend)(chosen.config, chosen.info, "cpu", 0)
    chunk_counts = set()
    for k in range(6):
        rollout = rollout_buffer(chosen, seed=40 + k, chunks=None)  # each seed's own boundaries
        chunk_counts.add(len(rollout.chunks(chosen.config.chunk_length).env))
        update(Algorithm.MAPPO, learner, rollout, k)
    assert len(chunk_counts) > 2, "the rollouts should differ in their number of chunks"
    assert _tracings(learner) <= 3
