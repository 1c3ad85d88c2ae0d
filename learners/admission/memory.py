"""An estimate of a run's peak memory, in parts, from its spec and its env's shape.

The parts, each in MiB and each with the spec field that sizes it (what a refusal names):

- the buffer: the replay buffer (DDPG, MADDPG, WQMIX), the episode buffer (recurrent WQMIX) or
  the rollout buffer (MAPPO, IPPO), full (NumPy's zeros are committed as they fill);
- the networks: every trained network's parameters times what its framework keeps of them
  (gradients, Adam's moments, the optimiser step's temporaries, a checkpoint's copy), two copies
  of each target network;
- the update: the batch on the host and as tensors, and the activations a gradient step keeps;
  for PPO also the targets and the value pass over the whole rollout;
- the envs: training and evaluation copies, their step arrays, and env worker processes;
- the runtime: the framework's own.

``learners.allocation`` works out the arrays and parameters; what a framework makes of them is
measured (``BACKENDS``), fitted to the peak RSS of short CPU runs that fill their buffers
(docs/results/2026-11-25-memory-estimate.md has the runs against the estimate).

Not counted: a GPU's memory, and the host memory a CUDA context maps (some hundreds of MiB more
on a worker with a GPU); while a resumed run loads its checkpoint, the checkpoint's copy (buffer
included), which the run lets go of once it is loaded.
"""

from __future__ import annotations

from dataclasses import dataclass

from learners.allocation import F32, plan
from learners.enums import Backend, EnvEngine, EnvSuite
from learners.envs.catalogue import suite
from learners.envs.factory import default_workers
from learners.envs.shapes import EnvShape
from learners.spec import MAX_EVAL_ENVS, ExperimentSpec

MIB = 2**20


@dataclass(frozen=True)
class BackendMemory:
    """What a framework's run takes beyond the arrays ``learners.allocation`` counts."""

    runtime_mib: float
    """Python, NumPy, the env libraries and the framework: the peak RSS of a tiny run."""
    network_copies: float
    """Bytes kept per byte of trained parameters."""
    activation_copies: float
    """Bytes kept per byte of a gradient step's forward pass."""
    value_pass_copies: float
    """Bytes kept per byte of PPO's value pass."""
    value_pass_kept: bool
    """Whether the value pass's memory is still held during the gradient steps (else the peak is
    the larger of the two)."""
    copies_broadcast: bool
    """Whether broadcasting a tensor over the agents copies it."""


# Runtimes: tiny runs (Pendulum, MPE, HalfCheetah; 8-unit networks) peaked at 336-363 MiB with
# PyTorch, 598-623 with TensorFlow, 576-612 with MindSpore, and the Celery worker around a run adds
# ~35. MindSpore's grows with the graphs it compiles: IPPO on 16 agents and WQMIX took 200-340 MiB
# more than their arrays explain. The copies are fitted to the runs in the table above: PyTorch's
# state broadcast is free and its value pass ends before training; TensorFlow values the
# rollout's parts one at a time; MindSpore's memory pool keeps the value pass's memory, and its
# networks take three times PyTorch's.
BACKENDS: dict[Backend, BackendMemory] = {
    Backend.TORCH: BackendMemory(
        runtime_mib=400.0,
        network_copies=7.0,
        activation_copies=2.5,
        value_pass_copies=1.2,
        value_pass_kept=False,
        copies_broadcast=False,
    ),
    Backend.TENSORFLOW: BackendMemory(
        runtime_mib=700.0,
        network_copies=10.0,
        activation_copies=2.0,
        value_pass_copies=0.5,
        value_pass_kept=False,
        copies_broadcast=True,
    ),
    Backend.MINDSPORE: BackendMemory(
        runtime_mib=1000.0,
        network_copies=22.0,
        activation_copies=2.0,
        value_pass_copies=2.5,
        value_pass_kept=True,
        copies_broadcast=True,
    ),
}
# One env copy's memory is its suite's ``copy_mib`` (measured there as RSS growth over stepped
# copies).
VECTOR_COPY_KIB_PER_AGENT_PAIR = 0.5
"""A vector-engine copy: its entities' arrays and the step's pairwise (agent x entity) temporaries,
measured as RSS growth over 4,096 stepped copies of simple_spread (3.4 KiB at 3 agents, 17.9 at
8): this bound is above both. Its copies step in process (no env worker processes)."""
ENV_WORKER_MIB = 90.0
"""A spawned env worker process: Python, NumPy and the env library (72 MiB for MPE, 84 for
MuJoCo, measured), its copies counted apart."""


@dataclass(frozen=True)
class MemoryPart:
    """One part of the estimate."""

    name: str
    mib: float
    field: str
    """The spec field that sizes this part: what to lower to shrink it."""


@dataclass(frozen=True)
class MemoryEstimate:
    """A run's estimated peak memory, in parts."""

    parts: tuple[MemoryPart, ...]

    @property
    def total_mib(self) -> float:
        return sum(part.mib for part in self.parts)

    def largest(self) -> MemoryPart:
        return max(self.parts, key=lambda part: part.mib)

    def describe(self) -> str:
        """``replay buffer 11,000 MiB, networks 2 MiB, ...``"""
        return ", ".join(f"{part.name} {part.mib:,.0f} MiB" for part in self.parts)

    def as_dict(self) -> dict[str, float]:
        """Each part's MiB by name, and ``total``."""
        return {**{part.name: part.mib for part in self.parts}, "total": self.total_mib}


def _env_mib(spec: ExperimentSpec, shape: EnvShape, cpus: int) -> float:
    env = spec.env
    copies = env.num_envs + min(spec.evaluation.episodes, MAX_EVAL_ENVS)
    n, d, s = shape.num_agents, shape.obs_dim, shape.state_dim
    vector = env.suite == EnvSuite.MPE and env.engine == EnvEngine.VECTOR
    if vector:
        per_copy = max(4.0, VECTOR_COPY_KIB_PER_AGENT_PAIR * n * n) / 1024
    else:
        per_copy = suite(env.suite).copy_mib(env.id, env.kwargs)
    avail = shape.action_dim if shape.discrete else 0
    # StepBuffers: two sets of obs, final obs, masks and states per copy.
    arrays = copies * F32 * (6 * n * d + 4 * s + 4 * n * avail + 8 * n)
    workers = 0 if vector else default_workers(env.num_envs, cpus)
    return copies * per_copy + arrays / MIB + workers * ENV_WORKER_MIB


def estimate_memory(spec: ExperimentSpec, shape: EnvShape, *, cpus: int) -> MemoryEstimate:
    """The peak memory of ``spec``'s run on an env of ``shape``, on a worker with ``cpus`` cores
    (they decide how many env worker processes it starts)."""
    backend = BACKENDS[spec.backend]
    allocation = plan(
        spec.config(), shape, spec.env.num_envs, copies_broadcast=backend.copies_broadcast
    )
    networks = F32 * (
        backend.network_copies * allocation.live_params + 2 * allocation.target_params
    )
    train = backend.activation_copies * allocation.train_floats
    values = backend.value_pass_copies * allocation.value_floats
    passes = train + values if backend.value_pass_kept else max(train, values)
    update = allocation.host_bytes + F32 * passes
    return MemoryEstimate(
        (
            MemoryPart(
                allocation.buffer_name, allocation.buffer_bytes / MIB, allocation.buffer_field
            ),
            MemoryPart("networks", networks / MIB, "hyperparameters.hidden_sizes"),
            MemoryPart("update", update / MIB, allocation.update_field),
            MemoryPart("envs", _env_mib(spec, shape, cpus), "env.num_envs"),
            MemoryPart("runtime", backend.runtime_mib, "backend"),
        )
    )
