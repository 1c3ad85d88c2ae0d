"""Only CW's weights read Q*_target(s, u^): every backend's OW update skips that second pass of the
target central networks (``weights_for`` takes ``None`` for it), CW's computes it, and the TD
target y is the same under both weightings."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from learners.enums import Algorithm, Backend
from learners.registry import entry

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "tests" / "learners" / "parity"))
from parity_cases import data, variants  # noqa: E402


def _targets_torch(learner: Any, batch: Any) -> tuple[Any, Any]:
    torch = pytest.importorskip("torch")
    t = {k: learner._tensor(v) for k, v in vars(batch).items()}
    t["avail"], t["next_avail"] = t["avail_actions"], t["next_avail_actions"]
    greedy = torch.argmax(learner._utilities("agent", t["obs"], t["avail"]), -1)
    return learner._targets(t, greedy)


def _targets_tensorflow(learner: Any, batch: Any) -> tuple[Any, Any]:
    tf = pytest.importorskip("tensorflow")
    b = {k: learner._tensor(v) for k, v in vars(batch).items()}
    greedy = tf.argmax(learner._utilities("agent", b["obs"], b["avail_actions"]), -1)
    return learner._targets(b, greedy)


def _targets_mindspore(learner: Any, batch: Any) -> tuple[Any, Any]:
    pytest.importorskip("mindspore")
    from mindspore import ops

    from learners.backends.mindspore.wqmix import _FIELDS, WQMIXLoss

    loss = WQMIXLoss(learner.nets, learner.config)
    b = tuple(learner._tensor(getattr(batch, name)) for name in _FIELDS)
    nets = learner.nets
    greedy = ops.argmax(nets.utilities(nets.agent, b[0], b[_FIELDS.index("avail_actions")]), -1)
    return loss._targets(b, greedy)


TARGETS = {
    Backend.TORCH: _targets_torch,
    Backend.TENSORFLOW: _targets_tensorflow,
    Backend.MINDSPORE: _targets_mindspore,
}


@pytest.mark.parametrize("backend", list(TARGETS), ids=lambda b: b.value)
def test_only_cw_computes_the_central_value_of_the_greedy_actions(backend: Backend) -> None:
    out = {}
    for name in ("ow-shared", "cw-shared"):
        variant = next(v for v in variants(Algorithm.WQMIX) if v.name == name)
        learner = entry(Algorithm.WQMIX).learner_class(backend)(
            variant.config, variant.info, "cpu", 0
        )
        out[name] = TARGETS[backend](learner, data(Algorithm.WQMIX, variant, seed=0))
    (ow_target, ow_greedy), (cw_target, cw_greedy) = out["ow-shared"], out["cw-shared"]
    assert ow_greedy is None
    cw_greedy = np.asarray(cw_greedy)
    assert cw_greedy.shape == np.asarray(cw_target).shape and np.isfinite(cw_greedy).all()
    # The same seed builds the same networks under both weightings: y does not depend on it.
    np.testing.assert_array_equal(np.asarray(ow_target), np.asarray(cw_target))
