"""A real divergence that the non-finite-loss tests of the learners and of the worker share."""

from __future__ import annotations

from typing import Any

DIVERGING_PPO: dict[str, Any] = {
    "env": {
        "suite": "mpe",
        "id": "simple_spread_v3",
        "num_envs": 2,
        "kwargs": {"continuous_actions": True},
    },
    "total_steps": 1000,
    "hyperparameters": {
        "hidden_sizes": [32, 32],
        "learning_rate": 1.0,
        "linear_lr_decay": False,
        "entropy_coef": 10.0,
        "max_grad_norm": None,
        "epochs": 10,
        "minibatches": 1,
        "rollout_length": 25,
    },
}
"""IPPO (continuous MPE, seed 3) at step size 1, a large entropy bonus and no gradient clipping:
each Adam step raises the policy's log std by about 1 until the std overflows and the loss of the
tenth update, at step 500, is NaN in every backend. One minibatch per epoch: the step of the NaN
depends on how many gradient steps an update takes."""
