"""MADDPG's actor gradient (Lowe et al., NeurIPS 2017, eq. 6), written once over ``Ops``.

Agent i's deterministic policy gradient is

    grad_theta_i J = E[grad_theta_i mu_i(o_i) grad_{a_i} Q_i(x, a_1, ..., a_N) at a_i = mu_i(o_i)]

with every other action a_j (j != i) taken from the replay buffer, as in the paper and the authors'
code. So agent i's actor moves only through its own critic Q_i and only through its own action:
an opponent's Q (or a team-mate's) never pulls on it, and neither does the way agent i's action
would change what the others' policies output. (The other choice the literature makes, the others'
*current* policies with their gradient stopped, is the reference library's later one; we keep the
paper's: it needs no extra forward pass of the other actors and is what the published results
were obtained with.)

``actor_joint_actions`` builds, for every agent i, the joint action its critic sees in that update:
the buffer's joint action with slot i replaced by agent i's live policy action. The buffer's
actions pass through ``stop_gradient`` and the other agents' live actions are not selected, so no
gradient reaches any actor except through the agent's own slot; the actor loss is then DDPG's
``-masked mean_i Q_i`` over those per-agent joint actions. With parameters shared within a team,
the shared actor's gradient is therefore the sum of each member's own term.

With ``centralised_critic=false`` (independent DDPG learners, the paper's baseline) agent i's
critic Q_i(o_i, a_i) sees only its own observation and action: ``own_actions`` picks slot i of row
i out of those per-agent joint actions, so the actor update is the same code path and the same
gradient rule.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from learners.functional.ops import A, Ops


def own_action_mask(num_agents: int) -> NDArray[np.float32]:
    """(N, N, 1): entry [i, j] is 1 where j == i: the slot of agent i's own action in the joint
    action agent i's critic sees (broadcasts over the batch and the action axis)."""
    return np.eye(num_agents, dtype=np.float32)[..., None]


def actor_joint_actions(ops: Ops[A], policy_actions: A, buffer_actions: A, own: A) -> A:
    """For every agent i, the joint action for Q_i in i's actor update: (B, N, N, action_dim).

    ``policy_actions`` and ``buffer_actions`` are (B, N, action_dim): the live policies' actions
    (with their gradient) and the stored ones, as the critic takes them (one-hot for discrete);
    ``own`` is ``own_action_mask(N)``. Row i holds agent i's policy action in slot i and the
    buffer's action in every other slot; only slot i of row i carries a gradient."""
    live = ops.expand_dims(policy_actions, 1)
    stored = ops.stop_gradient(ops.expand_dims(buffer_actions, 1))
    return ops.where(own > 0.5, live, stored)


def own_actions(ops: Ops[A], joint_actions: A, own: A) -> A:
    """Each agent's own action (B, N, action_dim) out of per-agent joint actions (B, N, N,
    action_dim): slot i of row i, what a decentralised critic Q_i(o_i, a_i) takes."""
    return ops.sum(joint_actions * own, axis=2)
