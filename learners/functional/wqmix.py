"""Weighted QMIX's weights and losses as pure functions over ``Ops`` (Rashid et al., NeurIPS 2020,
"Weighted QMIX: Expanding Monotonic Value Function Factorisation").

WQMIX learns two joint action-values from the same one-step target
y = r + gamma * (1 - terminated) * Q*_target(s', u'), with u' the greedy joint action of the live
QMIX agents (each agent's argmax, which is the argmax of the monotonic Q_tot):

- Q_tot, QMIX's monotonic mixing of per-agent utilities, trained with a *weighted* squared error
  w(s, u) * (Q_tot(s, u) - y)^2 whose weight puts more importance on better joint actions;
- Q*, an unrestricted (feed-forward) mixer of a central agent network's utilities at the taken
  actions, trained with the plain squared error (Q*(s, u) - y)^2.

The two weightings are one algorithm with two configurations:

- OW (optimistic): w = 1 where Q_tot(s, u) < y (the monotonic value under-estimates the target,
  td_error < 0), alpha elsewhere.
- CW (central): w = 1 where u is the greedy joint action u^ of Q_tot, or where y > Q*(s, u^) (the
  target beats the central value of the current greedy joint action), alpha elsewhere.

Both losses are masked means over the transitions, in every backend (the reference's central loss
was a mean in two backends and a sum over the agent-mask sum in the third), and an unknown
weighting is an error, never a silent uniform weight (the reference built the exception object
without raising it): both are reference defect ``wqmix-weighting-and-central-loss``
(docs/reference-defects.md).
"""

from __future__ import annotations

from typing import Generic, Literal, NamedTuple

from learners.functional.losses import masked_mean
from learners.functional.ops import A, Ops

Weighting = Literal["ow", "cw"]


def optimistic_weights(ops: Ops[A], td_error: A, alpha: float) -> A:
    """OW-QMIX: 1 where ``td_error = Q_tot - y < 0``, ``alpha`` elsewhere."""
    return ops.where(td_error < 0.0, 1.0, alpha)


def is_greedy_joint_action(ops: Ops[A], actions: A, greedy_actions: A, agent_mask: A) -> A:
    """1.0 per transition where every live agent took its greedy action, else 0.0.

    ``actions`` and ``greedy_actions`` are integer arrays ``(..., N)``; ``agent_mask`` is
    ``(..., N)`` with 1 for live agents. A dead agent's action does not matter, so it counts as
    greedy.
    """
    matches = ops.as_float(ops.equal(actions, greedy_actions))
    matches = ops.where(agent_mask > 0.5, matches, 1.0)
    return ops.min(matches, axis=-1)


def central_weights(ops: Ops[A], is_greedy: A, target: A, q_central_greedy: A, alpha: float) -> A:
    """CW-QMIX: 1 where the taken joint action is greedy (``is_greedy`` = 1) or the target exceeds
    the central value of the greedy joint action, ``alpha`` elsewhere."""
    important = ops.maximum(ops.as_float(is_greedy > 0.5), ops.as_float(target > q_central_greedy))
    return ops.where(important > 0.5, 1.0, alpha)


def weights_for(
    ops: Ops[A],
    weighting: str,
    *,
    td_error: A,
    is_greedy: A,
    target: A,
    q_central_greedy: A | None,
    alpha: float,
) -> A:
    """The weights of ``weighting`` (``"ow"`` or ``"cw"``), with no gradient; others raise.

    ``q_central_greedy`` (Q*_target(s, u^)) is read by CW only: OW callers may pass ``None`` and
    skip computing it."""
    if weighting == "ow":
        weights = optimistic_weights(ops, td_error, alpha)
    elif weighting == "cw":
        if q_central_greedy is None:
            raise ValueError("CW weighting needs Q*_target(s, u^) (q_central_greedy)")
        weights = central_weights(ops, is_greedy, target, q_central_greedy, alpha)
    else:
        raise ValueError(f"unknown WQMIX weighting {weighting!r}: expected 'ow' or 'cw'")
    return ops.stop_gradient(weights)


class WQMIXLoss(NamedTuple, Generic[A]):
    """Every term of one WQMIX update (scalars); ``loss`` is what is differentiated."""

    loss: A
    loss_qmix: A
    """Weighted squared TD error of the monotonic Q_tot."""
    loss_central: A
    """Squared TD error of the unrestricted central Q*."""
    weight_mean: A
    """Mean weight over unmasked transitions (1.0 means no down-weighting happened)."""


def wqmix_loss(ops: Ops[A], q_tot: A, q_central: A, target: A, weights: A, mask: A) -> WQMIXLoss[A]:
    """loss = E[w * (Q_tot - y)^2] + E[(Q*(s, u) - y)^2], both masked means over transitions.

    ``q_tot``, ``q_central``, ``target``, ``weights`` and ``mask`` share one shape (one entry per
    transition); ``target`` and ``weights`` carry no gradient.
    """
    target = ops.stop_gradient(target)
    td_error = q_tot - target
    central_error = q_central - target
    loss_qmix = masked_mean(ops, ops.stop_gradient(weights) * td_error * td_error, mask)
    loss_central = masked_mean(ops, central_error * central_error, mask)
    return WQMIXLoss(
        loss=loss_qmix + loss_central,
        loss_qmix=loss_qmix,
        loss_central=loss_central,
        weight_mean=masked_mean(ops, weights, mask),
    )
