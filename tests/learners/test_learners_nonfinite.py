"""A loss that becomes NaN or infinite fails the run at that step (``NonFiniteLoss``), unless the
spec's ``fail_on_nonfinite_loss`` is off. Both cases are real divergences of real learners, with
values a spec may hold:

- PPO (IPPO, continuous MPE) with step size 1, a large entropy bonus and no gradient clipping: each
  Adam step raises the policy's log std by about 1, so its entropy climbs by about 100 per report
  until the std overflows and the update's loss is NaN, at step 500 (the tenth update) in every
  backend.
- DDPG on HalfCheetah whose forward reward is scaled by 1e30: the squared TD error of rewards
  around 1e29 overflows float32, so the critic's loss is infinite from the first update on, while
  its gradients (about 1e29) stay finite and training goes on when asked to.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from learners.enums import Algorithm, Backend
from learners.hooks import MemoryHooks
from learners.registry import entry
from learners.runners.base import NonFiniteLoss, nonfinite_losses
from learners.spec import ExperimentSpec
from learners.training import train
from tests.divergence_support import DIVERGING_PPO

# The divergences overflow on the way (NumPy's exp of the log std while acting): expected here.
pytestmark = pytest.mark.filterwarnings(
    "ignore:overflow encountered:RuntimeWarning", "ignore:invalid value encountered:RuntimeWarning"
)

OVERFLOWING_DDPG: dict[str, Any] = {
    "env": {
        "suite": "gymnasium",
        "id": "HalfCheetah-v5",
        "num_envs": 2,
        "kwargs": {"forward_reward_weight": 1e30},
    },
    "total_steps": 400,
    "hyperparameters": {"hidden_sizes": [32, 32], "batch_size": 32, "learning_starts": 100},
}


@pytest.mark.parametrize("backend", sorted(entry(Algorithm.IPPO).backends))
def test_a_diverging_ppo_fails_at_the_update_whose_loss_is_nan(
    backend: Backend, make_spec: Callable[..., ExperimentSpec], hooks: MemoryHooks
) -> None:
    spec = make_spec(Algorithm.IPPO, backend, **DIVERGING_PPO)
    assert spec.fail_on_nonfinite_loss, "the guard is on by default"

    with pytest.raises(NonFiniteLoss) as raised:
        train(spec, hooks)

    failure = raised.value
    assert failure.step == 500 and "loss" in failure.losses
    assert all(math.isnan(v) for v in failure.losses.values())
    assert str(failure).startswith("non-finite loss at step 500: learner/loss = nan")
    # The losses on their way to NaN were reported, the last of them (the update before the NaN
    # one, noted since the report at 400) as the run failed; none of them is the NaN.
    losses = hooks.series("learner/loss")
    assert [step for step, _ in losses] == [200, 400, 500]
    assert all(np.isfinite(value) for _, value in losses)
    entropy = [value for _, value in hooks.series("learner/entropy")]
    assert entropy == sorted(entropy) and entropy[-1] > 100
    assert hooks.progress_steps[-1] == 500
    assert [step for step, _ in hooks.checkpoints] == [200, 400], "no checkpoint of NaN weights"


def test_an_overflowing_ddpg_critic_fails_at_its_first_update(
    make_spec: Callable[..., ExperimentSpec], hooks: MemoryHooks
) -> None:
    spec = make_spec(Algorithm.DDPG, Backend.TORCH, **OVERFLOWING_DDPG)

    with pytest.raises(NonFiniteLoss, match=r"^non-finite loss at step 100: ") as raised:
        train(spec, hooks)

    assert raised.value.losses == {"loss_critic": math.inf}
    assert str(raised.value) == "non-finite loss at step 100: learner/loss_critic = inf"


def test_with_the_guard_off_a_non_finite_loss_trains_to_the_end(
    make_spec: Callable[..., ExperimentSpec], hooks: MemoryHooks
) -> None:
    spec = make_spec(
        Algorithm.DDPG, Backend.TORCH, fail_on_nonfinite_loss=False, **OVERFLOWING_DDPG
    )

    train(spec, hooks)

    assert [step for step, _ in hooks.checkpoints] == [200, 400]
    critic = hooks.series("learner/loss_critic")
    assert [step for step, _ in critic] == [200, 400]
    assert all(value == math.inf for _, value in critic), "the guard would have fired"
    assert all(np.isfinite(value) for _, value in hooks.series("learner/loss_actor"))


def test_only_losses_are_checked_and_every_bad_one_is_named() -> None:
    # PPO's stats: an infinite gradient norm or entropy is a figure, not a loss.
    stats = {"loss": math.nan, "loss_value": -math.inf, "loss_policy": 0.5, "grad_norm": math.inf}
    bad = nonfinite_losses(stats)
    assert set(bad) == {"loss", "loss_value"}
    assert str(NonFiniteLoss(7, bad)) == (
        "non-finite loss at step 7: learner/loss = nan, learner/loss_value = -inf"
    )
    assert nonfinite_losses({"loss_actor": 1e30, "entropy": math.nan}) == {}
