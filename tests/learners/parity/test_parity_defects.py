"""The reference library's known defects (``docs/reference-defects.md``), held off in every
registered backend: each test fails if its defect comes back in any learner, PyTorch included.

Each defect by its name, with the old number the tests' names carry:

- ``critic-on-old-values`` (1), ``mindspore-ppo-loss`` (2), ``per-tensor-clipping`` (3, the loss
  scale), ``value-normaliser`` (4): the PPO stats equal the oracle's and are far from what the
  defective computation gives (``parity_reference.DEFECTS``), so the oracle test would catch them;
- ``per-tensor-clipping`` (3, the clipping): gradients are clipped by one global norm, keeping
  their direction, and not at all when clipping is off, read back from Adam's first moment;
- ``two-clipping-names`` (5): one config name for gradient clipping in every algorithm;
- ``ids-from-config-batch-size`` (6): off-policy learners take batches of any size (the parity
  batches are already smaller than the configured size);
- ``wqmix-weighting-and-central-loss`` (7): WQMIX refuses an unknown weighting in every backend,
  and its central loss is a masked mean;
- ``target-with-gradient`` (8): the critic's gradient is the textbook one (nothing flows into the
  target) and the targets move only by their soft update;
- ``missing-tf-ddpg`` (9): every algorithm has a TensorFlow learner.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest
from parity_assert import (
    ONE_UPDATE,
    STAT_FLOOR,
    applied_gradients,
    assert_close,
    global_norm,
)
from parity_cases import REFERENCE, Variant, build, data, update, variants
from parity_reference import (
    DEFECTS,
    DDPGNets,
    MADDPGNets,
    critic_output_bias_gradient,
    oracle_stats,
)

from learners.algorithms.wqmix import WQMIXConfig
from learners.enums import Algorithm, Backend
from learners.functional.gradients import NORM_EPS
from learners.registry import RunnerKind, built_pairs, entry

# The stat each PPO defect shows up in.
DEFECT_STAT = {
    "critic_on_old_values": "loss_value",
    "half_clip": "clip_fraction",
    "huber_ignored": "loss_value",
    "masked_prediction": "loss_value",
    "policy_loss_per_row": "loss_policy",
    "value_norm_unused": "loss_value",
    "prediction_normalised": "loss_value",
}
PPO = (Algorithm.MAPPO, Algorithm.IPPO)


def pairs(*algorithms: Algorithm) -> list[tuple[Algorithm, Backend]]:
    return [(a, b) for a, b in built_pairs() if a in algorithms]


def variant(algorithm: Algorithm, name: str, **config: Any) -> Variant:
    """The parity variant ``name`` of ``algorithm``, with ``config`` changed (a new variant name,
    so its learners are built for it)."""
    base = next(v for v in variants(algorithm) if v.name == name)
    if not config:
        return base
    suffix = ",".join(f"{k}={v}" for k, v in sorted(config.items()))
    return Variant(f"{name}[{suffix}]", base.config.model_copy(update=config), base.info)


def pair_ids(value: Any) -> str:
    return value.value if isinstance(value, Algorithm | Backend) else str(value)


# Two PPO variants between them discrete and continuous, feed-forward and recurrent, shared and
# separate; the first pair that a backend's parity tests build already (a compiled backend runs a
# subset), so that these tests reuse its compiled learner.
DEFECT_VARIANTS = [
    ("discrete-mlp-shared", "continuous-gru-separate"),
    ("discrete-gru-shared", "continuous-mlp-separate"),
]


def defect_params() -> list[Any]:
    params = []
    for algorithm, backend in pairs(*PPO):
        built = {v.name for v in variants(algorithm, backend)}
        names = next((p for p in DEFECT_VARIANTS if set(p) <= built), None)
        if names is None:
            raise ValueError(f"{algorithm}-{backend}: no pair of DEFECT_VARIANTS in its subset")
        params += [
            pytest.param(algorithm, backend, n, id=f"{n}-{algorithm}-{backend}") for n in names
        ]
    return params


@pytest.mark.parametrize(("algorithm", "backend", "variant_name"), defect_params())
def test_defects_1_to_4_ppo_losses(
    algorithm: Algorithm, backend: Backend, variant_name: str
) -> None:
    chosen = variant(algorithm, variant_name)
    learner = build(algorithm, backend, chosen)
    rollout = data(algorithm, chosen, seed=0)
    untouched = copy.deepcopy(rollout)
    before = learner.state()
    stats = update(algorithm, learner, rollout, 0)
    config, info = chosen.config, chosen.info
    correct = oracle_stats(algorithm, config, info, before, {}, untouched)
    for defect in DEFECTS:
        stat = DEFECT_STAT[defect]
        wrong = oracle_stats(algorithm, config, info, before, {}, untouched, defect)[stat]
        assert_close(stats[stat], correct[stat], ONE_UPDATE, f"{stat}", floor=STAT_FLOOR)
        gap = abs(wrong - correct[stat])
        assert gap > 100 * (ONE_UPDATE * abs(correct[stat]) + STAT_FLOOR), (
            f"{defect}: the defective {stat} ({wrong}) is too close to the correct one "
            f"({correct[stat]}) for this test to tell them apart"
        )


# -- per-tensor-clipping (defect 3): global-norm clipping, and only when it is on ------------------

# Each algorithm's gradient steps in the order an update takes them: the stat reporting the norm,
# and the networks whose gradients share it.
CLIP_GROUPS: dict[Algorithm, list[tuple[str, list[str]]]] = {
    Algorithm.DDPG: [("grad_norm_critic", ["critic"]), ("grad_norm_actor", ["actor"])],
    Algorithm.MADDPG: [("grad_norm_critic", ["critic"]), ("grad_norm_actor", ["actor"])],
    Algorithm.MAPPO: [("grad_norm", ["actor", "critic"])],
    Algorithm.IPPO: [("grad_norm", ["actor", "critic"])],
    Algorithm.WQMIX: [("grad_norm", ["agent", "mixer", "central_agent", "central_mixer"])],
}
CLIP_VARIANT = {
    Algorithm.DDPG: "plain",
    Algorithm.MADDPG: "discrete-separate",
    Algorithm.MAPPO: "continuous-gru-shared",
    Algorithm.IPPO: "discrete-mlp-separate",
    Algorithm.WQMIX: "cw-shared",
}
TINY = 1e-5


def _group(grads: dict[str, Any], nets: list[str]) -> dict[str, Any]:
    return {k: g for k, g in grads.items() if any(k.startswith(f"optim/{n}/") for n in nets)}


def _gradients(algorithm: Algorithm, backend: Backend, chosen: Variant) -> tuple[Any, Any]:
    """The stats and the applied gradients of one update on large rewards."""
    learner = build(algorithm, backend, chosen)
    stats = update(algorithm, learner, data(algorithm, chosen, seed=0, reward_scale=100.0), 0)
    return stats, applied_gradients(learner.state())


@pytest.mark.parametrize(("algorithm", "backend"), pairs(*CLIP_GROUPS), ids=pair_ids)
def test_defect3_clipping_by_global_norm_and_only_when_on(
    algorithm: Algorithm, backend: Backend
) -> None:
    # Squared errors on unnormalised, large returns: gradients far above any default clip norm.
    loose: dict[str, Any] = {"max_grad_norm": None}
    if algorithm in PPO:
        loose.update(value_norm=False, huber_delta=None)
    name = CLIP_VARIANT[algorithm]
    free_stats, free = _gradients(algorithm, backend, variant(algorithm, name, **loose))
    tight = {**loose, "max_grad_norm": TINY}
    tight_stats, clipped = _gradients(algorithm, backend, variant(algorithm, name, **tight))
    norms = {stat: global_norm(_group(free, nets)) for stat, nets in CLIP_GROUPS[algorithm]}
    # The test needs a gradient far above any default clip norm (the reference always clipped).
    assert max(norms.values()) > 10.0, norms
    for i, (stat, nets) in enumerate(CLIP_GROUPS[algorithm]):
        norm = norms[stat]
        # Off: nothing is clipped, however large the norm.
        assert_close(free_stats[stat], norm, ONE_UPDATE, f"{stat} with clipping off")
        # On: the group's gradients are scaled together down to the limit.
        assert tight_stats[stat] > 2 * TINY, f"{stat}: the test needs a gradient above the limit"
        pre_clip = tight_stats[stat]
        factor = TINY / (pre_clip + NORM_EPS)  # torch's clip_grad_norm_ divides by norm + eps
        assert_close(global_norm(_group(clipped, nets)), pre_clip * factor, 1e-4, f"{stat} clipped")
        if i == 0:  # the first step sees the same weights in both runs: compare directions
            # One factor for the whole group keeps every tensor's direction (per-tensor clipping
            # would give each tensor the limit on its own).
            assert_close(tight_stats[stat], norm, ONE_UPDATE, f"{stat} reported before clipping")
            for name, grad in _group(free, nets).items():
                assert_close(clipped[name], grad * factor, 1e-4, f"clipped {name}")


# -- two-clipping-names (defect 5): one name for gradient clipping ---------------------------------


@pytest.mark.parametrize("algorithm", [e for e in Algorithm if e in dict(built_pairs())])
def test_defect5_one_name_for_gradient_clipping(algorithm: Algorithm) -> None:
    fields = set(entry(algorithm).config.model_fields)
    assert "max_grad_norm" in fields
    assert not fields & {"use_grad_clip", "grad_clip_norm", "use_grad_norm"}


# -- ids-from-config-batch-size (defect 6): any batch size -----------------------------------------

OFF_POLICY = [(a, b) for a, b in built_pairs() if entry(a).runner == RunnerKind.OFF_POLICY]


@pytest.mark.parametrize(("algorithm", "backend"), OFF_POLICY, ids=pair_ids)
def test_defect6_any_batch_size(algorithm: Algorithm, backend: Backend) -> None:
    # A variant whose networks take one-hot agent ids (shared parameters), on transitions: the
    # ids are what the reference built from the configured batch size.
    chosen = next(
        v for v in reversed(variants(algorithm))
        if getattr(v.config, "share_parameters", True) and not getattr(v.config, "recurrent", False)
    )  # fmt: skip
    assert chosen.config.batch_size not in (1, 40)
    learner = build(algorithm, backend, chosen)
    for size in (1, 40):
        full = data(algorithm, chosen, seed=size)
        rows = np.arange(size) % full.obs.shape[0]
        batch = type(full)(**{k: np.take(v, rows, axis=0) for k, v in vars(full).items()})
        stats = update(algorithm, learner, batch, 0)
        assert all(np.isfinite(v) for v in stats.values()), (size, stats)


# -- wqmix-weighting-and-central-loss (defect 7): WQMIX's weighting and central loss ---------------


@pytest.mark.parametrize(("algorithm", "backend"), pairs(Algorithm.WQMIX), ids=pair_ids)
def test_defect7_unknown_weighting_raises(algorithm: Algorithm, backend: Backend) -> None:
    base = variants(algorithm)[0]
    # Past validation (as a stored config from an older version might be): the learner itself
    # must refuse, never train with uniform weights.
    config = WQMIXConfig.model_construct(**{**dict(base.config), "weighting": "uniform"})
    learner = entry(algorithm).learner_class(backend)(config, base.info, "cpu", 0)
    with pytest.raises(ValueError, match="weighting"):
        learner.update(data(algorithm, base, seed=0))


@pytest.mark.parametrize(("algorithm", "backend"), pairs(Algorithm.WQMIX), ids=pair_ids)
def test_defect7_central_loss_is_a_masked_mean(algorithm: Algorithm, backend: Backend) -> None:
    chosen = variants(algorithm)[0]
    learner = build(algorithm, backend, chosen)
    batch = data(algorithm, chosen, seed=3)
    before = learner.state()
    stats = update(algorithm, learner, batch, 0)
    args = (algorithm, chosen.config, chosen.info, before, {}, batch)
    correct = oracle_stats(*args)["loss_central"]
    wrong = oracle_stats(*args, defect="central_sum")["loss_central"]
    assert_close(stats["loss_central"], correct, ONE_UPDATE, "loss_central", floor=STAT_FLOOR)
    assert abs(wrong - correct) > 100 * ONE_UPDATE * abs(correct)


# -- target-with-gradient (defect 8): no gradient through the target -------------------------------


@pytest.mark.parametrize(
    ("algorithm", "backend"), pairs(Algorithm.DDPG, Algorithm.MADDPG), ids=pair_ids
)
def test_defect8_critic_gradient_and_soft_targets(algorithm: Algorithm, backend: Backend) -> None:
    name = "plain" if algorithm == Algorithm.DDPG else "continuous-shared"
    chosen = variant(algorithm, name, max_grad_norm=None)
    learner = build(algorithm, backend, chosen)
    batch = data(algorithm, chosen, seed=4)
    before = learner.state()
    update(algorithm, learner, batch, 0)
    after = learner.state()
    last = max(int(k.split(".")[2]) for k in before if k.startswith("critic.layers."))
    bias = f"optim/critic/critic.layers.{last}.bias"
    nets = (DDPGNets if algorithm == Algorithm.DDPG else MADDPGNets)(chosen.config, chosen.info)
    expected = critic_output_bias_gradient(nets, before, batch)
    assert_close(applied_gradients(after)[bias][0], expected, ONE_UPDATE, "critic output bias grad")
    tau = chosen.config.tau
    for key in before:
        if key.startswith(("target_actor.", "target_critic.")):
            live = after[key.removeprefix("target_")]
            moved = before[key] + tau * (live.astype(np.float64) - before[key])
            assert_close(after[key], moved, ONE_UPDATE, f"{key} after its soft update")


# -- missing-tf-ddpg (defect 9): TensorFlow has every learner --------------------------------------


def test_defect9_every_algorithm_has_a_tensorflow_learner() -> None:
    for algo in Algorithm:
        built = entry(algo).backends
        if REFERENCE in built:
            assert Backend.TENSORFLOW in built, f"{algo} has no TensorFlow learner"
