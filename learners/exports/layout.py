"""The acting network of a checkpoint, written out as data: what a policy-only export's manifest
carries as ``network``, so that a reader can rebuild the policy with NumPy alone (and
``learners.exports.onnx`` compiles it into an ONNX graph). docs/using-results.md#the-layout
describes every field; ``network_layout`` derives it from the run's spec and env, as every
backend's learner builds its networks, and names only tensors the export holds.

The layout is per agent: agent ``i`` takes row ``i`` of the padded observations and applies its
``steps`` in order, then the ``output`` rule turns the result into an action. A step names
tensors by their checkpoint names (PyTorch's layout, ``(out, in)`` weights); ``row`` picks one
slice of a tensor stacked along a leading axis (one per agent, or one per team)."""

from __future__ import annotations

from typing import Any

from learners.algorithms.maddpg import network_layout as maddpg_layout
from learners.algorithms.maddpg import sharing_sets
from learners.algorithms.ppo_learner import seats as ppo_seats
from learners.algorithms.wqmix import agent_seats as wqmix_seats
from learners.checkpoint import CheckpointError, Manifest, env_info_from_json
from learners.enums import Algorithm
from learners.envs.base import EnvInfo
from learners.envs.teams import team_slots
from learners.functional.distributions import MASKED_LOGIT
from learners.registry import entry
from learners.spec import ExperimentSpec

LAYOUT_FORMAT = 1
"""The version of the ``network`` layout (docs/using-results.md#the-layout)."""

Step = dict[str, Any]


def _linear(name: str, row: int | None) -> Step:
    step: Step = {"op": "linear", "weight": f"{name}.weight", "bias": f"{name}.bias"}
    if row is not None:
        step["row"] = row
    return step


def _mlp_steps(prefix: str, hidden: int, *, tanh_output: bool) -> list[Step]:
    """``learners.backends.*.networks.MLP``: Linear layers at the even indices of
    ``<prefix>.layers``, ReLU between them, an optional tanh after the last."""
    steps: list[Step] = []
    for j in range(hidden):
        steps += [_linear(f"{prefix}.layers.{2 * j}", None), {"op": "relu"}]
    steps.append(_linear(f"{prefix}.layers.{2 * hidden}", None))
    if tanh_output:
        steps.append({"op": "tanh"})
    return steps


def _maddpg_agents(manifest: Manifest, info: EnvInfo, config: Any) -> list[list[Step]]:
    """DDPG's one actor, or MADDPG's shared, per-sharing-set (team or group) or per-agent actors
    (``MLP``, ``PerTeamMLP``, ``PerAgentMLP``)."""
    hidden = len(config.hidden_sizes)
    tanh = info.action_kind == "continuous"
    n = info.num_agents
    if manifest.algorithm == Algorithm.DDPG:
        return [_mlp_steps("actor", hidden, tanh_output=True) for _ in range(n)]
    layout = maddpg_layout(config, info)
    if layout == "shared":  # one network; the agent's one-hot id appended to its observation
        return [
            [
                {"op": "one_hot", "index": i, "width": n},
                *_mlp_steps("actor", hidden, tanh_output=tanh),
            ]
            for i in range(n)
        ]
    if layout == "agents":
        return [_mlp_steps(f"actor.agents.{i}", hidden, tanh_output=tanh) for i in range(n)]
    teams = sharing_sets(config, info)
    return [
        [
            {"op": "one_hot", "index": place, "width": len(teams[k])},
            *_mlp_steps(f"actor.teams.{k}", hidden, tanh_output=tanh),
        ]
        for k, place in team_slots(teams)
    ]


def _agent_mlp_agents(
    prefix: str, info: EnvInfo, config: Any, shared: bool, seats: Any
) -> list[list[Step]]:
    """``learners.backends.*.agent_nets.AgentMLP``: ``<prefix>.layers.<j>`` with the activation
    after each, a GRU after the first when recurrent, then ``<prefix>.head``. Shared parameters:
    2-D tensors and the agent's one-hot id appended; per sharing set (team or group): ``(T, ...)``
    tensors, each agent its set's row and a one-hot of its place in the set; per agent:
    ``(N, ...)`` tensors."""
    activation = {"op": getattr(config, "activation", "relu")}
    recurrent = bool(getattr(config, "recurrent", False))
    agents: list[list[Step]] = []
    for i in range(info.num_agents):
        steps: list[Step] = []
        row: int | None
        if seats is not None:
            row = seats.team[i]
            steps.append({"op": "one_hot", "index": seats.place[i], "width": seats.width})
        elif shared:
            row = None
            steps.append({"op": "one_hot", "index": i, "width": info.num_agents})
        else:
            row = i
        steps += [_linear(f"{prefix}.layers.0", row), activation]
        if recurrent:
            steps.append(
                {
                    "op": "gru",
                    "input": _linear(f"{prefix}.gru.input", row),
                    "hidden": _linear(f"{prefix}.gru.hidden", row),
                    "size": config.rnn_hidden_size,
                }
            )
        for j in range(1, len(config.hidden_sizes)):
            steps += [_linear(f"{prefix}.layers.{j}", row), activation]
        steps.append(_linear(f"{prefix}.head", row))
        agents.append(steps)
    return agents


def _output(info: EnvInfo) -> dict[str, Any]:
    sizes = list(info.action_dims or (info.action_dim,) * info.num_agents)
    if info.action_kind == "discrete":
        return {
            "kind": "discrete",
            "actions": info.action_dim,
            "sizes": sizes,
            "masked_value": MASKED_LOGIT,
            "rule": (
                "the output's entries at unavailable actions (mask <= 0.5, and every index at or "
                "beyond the agent's size) are set to masked_value; the action is the index of the "
                "largest entry (the lowest such index on ties)"
            ),
        }
    assert info.action_low is not None and info.action_high is not None
    return {
        "kind": "continuous",
        "actions": info.action_dim,
        "sizes": sizes,
        "low": [float(v) for v in info.action_low],
        "high": [float(v) for v in info.action_high],
        "rule": (
            "a = clip(output, -1, 1); the env's action is low + (a + 1) * (high - low) / 2 per "
            "dimension, its first sizes[i] entries for agent i"
        ),
    }


def network_layout(manifest: Manifest) -> dict[str, Any]:
    """The acting network of the checkpoint whose manifest is ``manifest``, as data."""
    spec = ExperimentSpec.model_validate(manifest.spec)
    info = env_info_from_json(manifest.env)
    config: Any = spec.config()
    if info.action_kind not in ("discrete", "continuous"):
        raise CheckpointError(f"no layout for {info.action_kind} actions")
    algorithm = Algorithm(manifest.algorithm)
    if algorithm in (Algorithm.DDPG, Algorithm.MADDPG):
        agents = _maddpg_agents(manifest, info, config)
    elif algorithm in (Algorithm.IPPO, Algorithm.MAPPO):
        seats = ppo_seats(config, info)
        agents = _agent_mlp_agents("actor", info, config, config.share_parameters, seats)
    else:
        seats = wqmix_seats(config, info)
        agents = _agent_mlp_agents("agent", info, config, config.share_parameters, seats)
    recurrent = any(step["op"] == "gru" for step in agents[0])
    memory: dict[str, Any] | None = None
    if recurrent:
        memory = {
            "name": "memory",
            "shape": ["batch", info.num_agents, config.rnn_hidden_size],
            "initial": 0.0,
            "rule": "zeros at an episode's start; each step's gru writes agent i's row",
        }
    return {
        "format": LAYOUT_FORMAT,
        "network": entry(algorithm).policy_network,
        "input": {
            "name": "obs",
            "shape": ["batch", info.num_agents, info.obs_dim],
            "features": list(info.obs_dims or (info.obs_dim,) * info.num_agents),
            "rule": "agent i's observation in row i, zeros after its first features[i] entries",
        },
        "memory": memory,
        "agents": [
            {"id": agent, "index": i, "steps": steps}
            for i, (agent, steps) in enumerate(zip(info.agent_ids, agents, strict=True))
        ],
        "output": _output(info),
    }


def layout_tensors(layout: dict[str, Any]) -> set[str]:
    """Every tensor name ``layout``'s steps read."""
    names: set[str] = set()
    for agent in layout["agents"]:
        for step in agent["steps"]:
            for linear in (step, step.get("input"), step.get("hidden")):
                if isinstance(linear, dict) and linear.get("op") == "linear":
                    names.update((linear["weight"], linear["bias"]))
    return names
