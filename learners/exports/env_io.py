"""A policy fed what an env returns and answering in the env's own terms, for acting outside the
service (``learners.policy.Policy.act`` takes these as well as its batched ``Observation``):

- observations: a PettingZoo-style dict of per-agent arrays (a value may be a dict with
  ``observation`` and ``action_mask``, as PettingZoo's masked envs give), or an array: ``(N,
  obs_dim)`` for one env (``(obs_dim,)`` for a single-agent one), with a leading batch axis for
  several. The dict's values may carry a leading batch axis too.
- action masks: a dict of per-agent 0/1 arrays, for discrete actions (else every action is
  available).
- actions: discrete ones as ints; continuous ones mapped from the policy's [-1, 1] onto the env's
  bounds as the checkpoint's ``env`` records them (per dimension, the first agent's that has it,
  which every agent shares in the supported envs), and cut to each agent's own size. A dict in, a
  dict out (per agent, over the batch axis when there is one); an array in, an array out.

Only ``EnvInfo``, the spaces of the run's env recorded in every checkpoint, is needed: no env is
built."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

from learners.envs.base import EnvInfo, Observation

EnvActions = dict[str, Any] | NDArray[Any]


class EnvInputError(ValueError):
    """Observations or masks that do not fit the policy's env; the message names the agent."""


def _floats(value: Any, what: str) -> NDArray[np.float32]:
    """``value`` as a float32 array, or an ``EnvInputError`` saying ``what`` is not one (ragged
    lists, strings, objects)."""
    try:
        array: NDArray[np.float32] = np.asarray(value, np.float32)
    except (ValueError, TypeError):
        raise EnvInputError(f"{what}: not an array of numbers of one shape") from None
    if not np.isfinite(array).all():
        raise EnvInputError(f"{what}: holds a value that is not a finite number")
    return array


def _agent_value(value: Any) -> tuple[Any, Any]:
    if isinstance(value, Mapping):
        if "observation" not in value:
            raise EnvInputError("a dict observation needs an 'observation' entry")
        return value["observation"], value.get("action_mask")
    return value, None


def to_observation(
    info: EnvInfo, observations: Any, action_masks: Mapping[str, Any] | None = None
) -> tuple[Observation, bool, bool]:
    """The batched ``Observation`` of ``observations``; whether they had a batch axis, and whether
    they came as a dict."""
    n, width, dims = info.num_agents, info.obs_dim, info.obs_dims
    masks: dict[str, Any] = dict(action_masks or {})
    if isinstance(observations, Mapping):
        unknown = sorted(set(observations) - set(info.agent_ids))
        if unknown:
            raise EnvInputError(f"agents {unknown} are not the env's {list(info.agent_ids)}")
        rows: dict[int, NDArray[np.float32]] = {}
        batched: bool | None = None
        for j, agent in enumerate(info.agent_ids):
            if agent not in observations:
                continue
            value, mask = _agent_value(observations[agent])
            if mask is not None:
                masks.setdefault(agent, mask)
            array = _floats(value, f"agent {agent}: observation")
            has_batch = array.ndim == 2
            if array.ndim not in (1, 2) or array.shape[-1] != dims[j]:
                raise EnvInputError(
                    f"agent {agent}: observation of shape {array.shape}, expected ({dims[j]},) "
                    f"or (batch, {dims[j]})"
                )
            if batched is not None and has_batch != batched:
                raise EnvInputError(f"agent {agent}: some observations have a batch axis, some not")
            batched = has_batch
            rows[j] = array if has_batch else array[None]
        if not rows:
            raise EnvInputError("no agent's observation was given")
        sizes = {r.shape[0] for r in rows.values()}
        if len(sizes) != 1:
            raise EnvInputError(f"the agents' batch sizes differ: {sorted(sizes)}")
        batch = sizes.pop()
        obs = np.zeros((batch, n, width), np.float32)
        agent_mask = np.zeros((batch, n), np.float32)
        for j, row in rows.items():
            obs[:, j, : dims[j]] = row
            agent_mask[:, j] = 1.0
        from_dict = True
    else:
        array = _floats(observations, "observations")
        expected = (n, width) if n > 1 else (width,)
        batched = array.ndim == len(expected) + 1
        if array.shape[int(batched) :] != expected:
            raise EnvInputError(
                f"observations of shape {array.shape}, expected {expected} or (batch, "
                f"{', '.join(map(str, expected))})"
            )
        obs = array if batched else array[None]
        obs = obs.reshape(obs.shape[0], n, width).copy()
        batch = obs.shape[0]
        agent_mask = np.ones((batch, n), np.float32)
        from_dict = False
    obs_mask = np.zeros((batch, n, width), np.float32)
    for j, dim in enumerate(dims):
        obs_mask[:, j, :dim] = 1.0
        obs[:, j, dim:] = 0.0
    return (
        Observation(
            obs=obs,
            obs_mask=obs_mask,
            # The global state is the critic's; acting never reads it.
            state=np.zeros((batch, info.state_dim), np.float32),
            agent_mask=agent_mask,
            avail_actions=_avail(info, masks, batch),
        ),
        bool(batched),
        from_dict,
    )


def _avail(info: EnvInfo, masks: Mapping[str, Any], batch: int) -> NDArray[np.float32]:
    if info.action_kind != "discrete":
        if masks:
            raise EnvInputError("action masks are for discrete actions; this env's are continuous")
        return np.zeros((batch, info.num_agents, 0), np.float32)
    unknown = sorted(set(masks) - set(info.agent_ids))
    if unknown:
        raise EnvInputError(
            f"action masks of agents {unknown}, not the env's {list(info.agent_ids)}"
        )
    sizes = info.action_dims or (info.action_dim,) * info.num_agents
    avail = np.zeros((batch, info.num_agents, info.action_dim), np.float32)
    for j, (agent, size) in enumerate(zip(info.agent_ids, sizes, strict=True)):
        mask = masks.get(agent)
        if mask is None:
            avail[:, j, :size] = 1.0
            continue
        array = _floats(mask, f"agent {agent}: action mask")
        if (
            array.ndim not in (1, 2)
            or array.shape[-1] != size
            or (array.ndim == 2 and array.shape[0] != batch)
        ):
            raise EnvInputError(
                f"agent {agent}: action mask of shape {array.shape}, expected ({size},) or "
                f"({batch}, {size})"
            )
        avail[:, j, :size] = array
        if not (avail[:, j, :size] > 0).any(axis=-1).all():
            raise EnvInputError(f"agent {agent}: its action mask allows no action")
    return avail


def to_env_actions(
    info: EnvInfo, actions: NDArray[Any], batched: bool, as_dict: bool, present: Any = None
) -> EnvActions:
    """The policy's ``actions`` ((B, N) ints or (B, N, action_dim) in [-1, 1]) in the env's terms:
    a dict per agent (those given, ``present``) or an array, without the batch axis unless
    ``batched``."""
    sizes = info.action_dims or (info.action_dim,) * info.num_agents
    if info.action_kind == "discrete":
        mapped: list[Any] = [actions[:, j].astype(np.int64) for j in range(info.num_agents)]
    else:
        assert info.action_low is not None and info.action_high is not None
        half = 0.5 * (info.action_high - info.action_low)
        scaled = np.clip(actions, -1.0, 1.0) * half + (info.action_low + half)
        mapped = [scaled[:, j, : sizes[j]].astype(np.float32) for j in range(info.num_agents)]
    if as_dict:
        wanted = info.agent_ids if present is None else [a for a in info.agent_ids if a in present]
        index = {a: j for j, a in enumerate(info.agent_ids)}
        return {
            agent: (mapped[index[agent]] if batched else _single(mapped[index[agent]][0]))
            for agent in wanted
        }
    if len(set(sizes)) != 1:
        raise EnvInputError(
            "the agents act with actions of different sizes: pass the observations as a dict "
            "to get each agent's action"
        )
    stacked: NDArray[Any] = np.stack(mapped, axis=1)
    if info.num_agents == 1:
        stacked = stacked[:, 0]
    one: NDArray[Any] = stacked[0]
    return stacked if batched else one


def _single(value: NDArray[Any]) -> Any:
    return int(value) if value.ndim == 0 else value
