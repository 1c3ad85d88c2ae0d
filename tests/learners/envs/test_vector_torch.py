"""The vector engine on torch tensors equals the engine on NumPy arrays (which test_vector_mpe.py
holds equal to mpe2): from the same seed, under the same actions, over several whole episodes with
resets of some copies, observations, global states, rewards, ends and world states agree for every
scenario case and both action kinds. CI runs it on torch's CPU device; on a GPU host the same test
runs on ``cuda`` too."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from learners.envs.vector import VectorMPE, WorldState
from tests.learners.envs.test_vector_mpe import CASES, random_actions

torch = pytest.importorskip("torch")

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
COPIES = 5
# float64 on both sides; the only differences are in how each library rounds a reduction or a
# transcendental function (a few ulps), far below mpe2's own 1e-5 bar.
TOL = 1e-9


def host(value: Any) -> np.ndarray:
    if isinstance(value, np.ndarray):
        return value
    return value.detach().cpu().numpy()


def same(actual: Any, expected: np.ndarray, what: str) -> None:
    np.testing.assert_allclose(host(actual), expected, rtol=0, atol=TOL, err_msg=what)


def same_world(a: WorldState, b: WorldState) -> None:
    for name in ("agent_pos", "agent_vel", "landmark_pos", "goal", "steps"):
        same(getattr(a, name), getattr(b, name), name)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("continuous", [False, True], ids=["discrete", "continuous"])
@pytest.mark.parametrize(("env_id", "kwargs"), CASES, ids=str)
def test_torch_steps_equal_numpy(
    env_id: str, kwargs: dict[str, Any], continuous: bool, device: str
) -> None:
    kwargs = {**kwargs, "continuous_actions": continuous}
    reference = VectorMPE(env_id, kwargs, COPIES, seed=7)
    engine = VectorMPE(env_id, kwargs, COPIES, seed=7, device=device)
    rng = np.random.default_rng(3)

    same(engine.reset(), reference.reset(), "reset observations")
    same_world(engine.get_state(), reference.get_state())
    steps = 2 * reference.max_cycles + 3
    for step in range(steps):
        actions = random_actions(rng, reference)
        # The torch engine takes actions as tensors on its device (or as NumPy arrays).
        given = torch.as_tensor(actions, device=device) if step % 2 else actions
        obs, rewards, terminated, truncated = engine.step(given)
        ref_obs, ref_rewards, ref_terminated, ref_truncated = reference.step(actions)
        assert isinstance(obs, torch.Tensor) and obs.device.type == torch.device(device).type
        same(obs, ref_obs, f"observations at step {step}")
        same(engine.state(), reference.state(), f"global state at step {step}")
        same(rewards, ref_rewards, f"rewards at step {step}")
        assert np.array_equal(host(terminated), ref_terminated), step
        assert np.array_equal(host(truncated), ref_truncated), step
        # Restart the ended copies, and one more now and then, by mask as a runner does.
        ended = ref_terminated | ref_truncated
        if step % 7 == 3:
            ended = ended.copy()
            ended[step % COPIES] = True
        if ended.any():
            mask = torch.as_tensor(ended, device=device) if step % 2 else ended
            same(engine.reset(mask), reference.reset(ended), f"reset at step {step}")
    same_world(engine.get_state(), reference.get_state())


@pytest.mark.parametrize("device", DEVICES)
def test_seeded_resets_and_set_state_match_numpy(device: str) -> None:
    kwargs = {"continuous_actions": True}
    reference = VectorMPE("simple_adversary_v3", kwargs, 4, seed=0)
    engine = VectorMPE("simple_adversary_v3", kwargs, 4, seed=99, device=device)

    same(engine.reset(seeds=[1, 2, 3, 4]), reference.reset(seeds=[1, 2, 3, 4]), "seeded reset")
    same_world(engine.get_state(), reference.get_state())

    state = reference.get_state()
    state.agent_vel[:] = 0.3
    same(engine.set_state(state), reference.set_state(state), "set_state")
    same_world(engine.get_state(), state)


def test_a_torch_world_is_float64_on_its_device() -> None:
    engine = VectorMPE("simple_tag_v3", {}, 3, seed=0, device="cpu")
    obs = engine.reset()

    assert obs.dtype == torch.float32 and obs.shape == (3, engine.num_agents, engine.obs_dim)
    state = engine.get_state()
    assert state.agent_pos.dtype == np.float64 and isinstance(state.agent_pos, np.ndarray)
