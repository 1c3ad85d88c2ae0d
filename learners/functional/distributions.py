"""Action distributions as pure functions over ``Ops``: masked categorical and diagonal Gaussian.

A policy network outputs parameters (logits, or a mean and a log standard deviation); these
functions turn them into log-probabilities and entropies. Sampling happens in the backends (it
needs their random generators), but every number that enters a loss comes from here.
"""

from __future__ import annotations

import math

from learners.functional.ops import A, Ops

# Unavailable actions get this logit instead of -inf: their probability is exactly 0 in float32,
# and p * log p stays 0 * (large negative) = 0 rather than 0 * -inf = NaN in the entropy.
MASKED_LOGIT = -1e9

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def masked_logits(ops: Ops[A], logits: A, avail_actions: A) -> A:
    """``logits`` with unavailable actions (``avail_actions == 0``) pushed to ``MASKED_LOGIT``."""
    return ops.where(avail_actions > 0.5, logits, MASKED_LOGIT)


def categorical_log_prob(ops: Ops[A], logits: A, actions: A, avail_actions: A) -> A:
    """log pi(a | s) for integer ``actions`` (shape ``logits.shape[:-1]``), masking unavailable
    actions out of the normalisation."""
    log_p = ops.log_softmax(masked_logits(ops, logits, avail_actions), -1)
    return ops.gather_last(log_p, actions)


def categorical_entropy(ops: Ops[A], logits: A, avail_actions: A) -> A:
    """H(pi(. | s)) = -sum_a p(a) log p(a) over the available actions."""
    log_p = ops.log_softmax(masked_logits(ops, logits, avail_actions), -1)
    return -ops.sum(ops.exp(log_p) * log_p, axis=-1)


def normal_log_prob(ops: Ops[A], actions: A, mean: A, log_std: A) -> A:
    """log N(a; mean, exp(log_std)^2), summed over the last (action) axis."""
    z = (actions - mean) / ops.exp(log_std)
    return ops.sum(-0.5 * z * z - log_std - _LOG_SQRT_2PI, axis=-1)


def normal_entropy(ops: Ops[A], log_std: A) -> A:
    """Entropy of a diagonal Gaussian, summed over the last (action) axis: sum 0.5 + log(2 pi)/2 +
    log_std. It does not depend on the mean."""
    return ops.sum(log_std + (0.5 + _LOG_SQRT_2PI), axis=-1)
