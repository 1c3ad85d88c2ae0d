"""Networks that compute every agent at once, with shared, per-team or per-agent parameters
(MindSpore).

The MindSpore twin of ``learners.backends.torch.agent_nets``, name for name and equation for
equation: inputs are ``(..., N, features)``; with shared parameters a one-hot agent id, built from
the input's real shape (never from a configured batch size: reference defect
``ids-from-config-batch-size``), is appended to the input; with separate parameters every layer
holds a weight per agent, ``(N, out, in)`` (torch's layout), applied in one batched matrix product;
shared within each of several teams (``TeamSeats``), a weight per team, ``(T, out, in)``, gathered
to the agents, with the agent's place in its team as its one-hot id. The GRU cell is PyTorch's
``GRUCell`` written out, gates ordered ``r, z, n``, so its weights mean the same thing in every
backend. Over a sequence the cell is unrolled step by step in the compiled graph: chunks are short
(``chunk_length``) and fixed in length, and an unrolled graph runs each step with no loop overhead.

Canonical names: ``layers.<i>.weight``, ``gru.input.weight``, ``gru.hidden.bias``, ``head.weight``,
and the actor's ``log_std``. Initial weights are drawn from a NumPy generator in the TensorFlow
backend's order (layers, GRU, head), so one seed means one set of weights in both.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn, ops

from learners.backends.mindspore.networks import orthogonal, parameter
from learners.backends.mindspore.ops import sigmoid64, tanh64
from learners.backends.mindspore.runtime import configure
from learners.envs.teams import TeamSeats

configure()


def agent_ids(x: Tensor, num_agents: int) -> Tensor:
    """One-hot agent ids shaped like ``x`` but with ``num_agents`` features: ``(..., N, N)``."""
    eye = ops.eye(num_agents, num_agents, ms.float32)
    return ops.broadcast_to(eye, x.shape[:-1] + (num_agents,))


class AgentLinear(nn.Cell):
    """``y = x W^T + b`` for every agent; ``W`` is ``(out, in)`` shared, ``(N, out, in)`` per agent,
    or ``(T, out, in)`` one per team when ``groups`` gives each agent's team index.

    Orthogonal weights (one per weight matrix) scaled by ``gain``, zero biases."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        num_agents: int,
        shared: bool,
        gain: float,
        rng: np.random.Generator,
        groups: Sequence[int] | None = None,
    ) -> None:
        super().__init__()
        self.shared = shared and groups is None
        self.grouped = groups is not None
        if self.shared:
            weight = orthogonal(rng, in_features, out_features, gain)
            bias = np.zeros(out_features, np.float32)
        else:
            count = num_agents if groups is None else max(groups) + 1
            weight = np.stack(
                [orthogonal(rng, in_features, out_features, gain) for _ in range(count)]
            )
            bias = np.zeros((count, out_features), np.float32)
        # Each agent's team index when the weights are one per team, (T, out, in).
        self.index = Tensor(np.asarray(tuple(groups or (0,)), np.int32))
        self.weight = parameter(weight, "weight")
        self.bias = parameter(bias, "bias")

    def construct(self, x: Tensor) -> Tensor:
        if self.shared:
            return ops.dense(x, self.weight, self.bias)
        weight, bias = self.weight, self.bias
        if self.grouped:  # each agent meets its team's weights
            weight, bias = ops.gather(weight, self.index, 0), ops.gather(bias, self.index, 0)
        # (..., N, 1, in) @ (N, in, out) -> (..., N, 1, out): each agent meets its own weight.
        y = ops.matmul(ops.expand_dims(x, -2), ops.swapaxes(weight, -1, -2))
        return ops.squeeze(y, -2) + bias


class AgentGRUCell(nn.Cell):
    """r = sigmoid(W_ir x + b_ir + W_hr h + b_hr), z = sigmoid(W_iz x + b_iz + W_hz h + b_hz),
    n = tanh(W_in x + b_in + r * (W_hn h + b_hn)), h' = (1 - z) * n + z * h."""

    def __init__(
        self,
        in_features: int,
        hidden_size: int,
        num_agents: int,
        shared: bool,
        rng: np.random.Generator,
        groups: Sequence[int] | None = None,
    ) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        size = 3 * hidden_size
        self.input = AgentLinear(in_features, size, num_agents, shared, 1.0, rng, groups)
        self.hidden = AgentLinear(hidden_size, size, num_agents, shared, 1.0, rng, groups)

    def construct(self, x_gates: Tensor, h: Tensor) -> Tensor:
        """One step; ``x_gates`` is ``self.input(x)`` (computed for a whole sequence at once)."""
        x_r, x_z, x_n = ops.chunk(x_gates, 3, -1)
        h_r, h_z, h_n = ops.chunk(self.hidden(h), 3, -1)
        r = sigmoid64(x_r + h_r)
        z = sigmoid64(x_z + h_z)
        n = tanh64(x_n + r * h_n)
        return (1.0 - z) * n + z * h


class AgentMLP(nn.Cell):
    """``in -> hidden layers -> out`` for every agent, optionally with a GRU after the first hidden
    layer. Feed-forward: ``net(x, h)`` with ``x`` ``(..., N, in)``; ``h`` is passed through
    untouched. Recurrent: ``x`` is ``(L, B, N, in)`` (time first) and ``h`` ``(B, N, H)``; it
    returns the outputs of every step and the hidden state after the last one."""

    def __init__(
        self,
        in_features: int,
        hidden_sizes: tuple[int, ...],
        out_features: int,
        num_agents: int,
        *,
        shared: bool,
        activation: str,
        rnn_hidden_size: int | None,
        rng: np.random.Generator,
        head_gain: float,
        seats: TeamSeats | None = None,
    ) -> None:
        super().__init__()
        self.num_agents = num_agents
        # Shared with seats: one set of weights per team (``(T, ...)``), ids within the team.
        self.seats = seats if shared else None
        self.shared = shared and self.seats is None
        self.tanh = activation == "tanh"
        self.recurrent = rnn_hidden_size is not None
        groups = None if self.seats is None else self.seats.team
        ids, places = (num_agents if self.shared else 0), np.zeros((1, 1), np.float32)
        if self.seats is not None:
            ids = self.seats.width
            places = np.eye(ids, dtype=np.float32)[list(self.seats.place)]
        self.by_team = self.seats is not None
        self.place_ids = Tensor(places)
        sizes = [in_features + ids, *hidden_sizes]
        if rnn_hidden_size is not None and len(hidden_sizes) > 1:
            sizes[1] = rnn_hidden_size  # the second hidden layer reads the GRU's state
        gain = math.sqrt(2.0)
        self.layers = nn.CellList(
            [
                AgentLinear(a, b, num_agents, shared, gain, rng, groups)
                for a, b in zip(sizes[:-1], hidden_sizes, strict=True)
            ]
        )
        last = hidden_sizes[-1]
        if rnn_hidden_size is not None:
            self.gru = AgentGRUCell(
                hidden_sizes[0], rnn_hidden_size, num_agents, shared, rng, groups
            )
            if len(hidden_sizes) == 1:
                last = rnn_hidden_size
        self.head = AgentLinear(last, out_features, num_agents, shared, head_gain, rng, groups)

    def _act(self, x: Tensor) -> Tensor:
        return tanh64(x) if self.tanh else ops.relu(x)

    def _with_ids(self, x: Tensor) -> Tensor:
        if self.by_team:  # the agent's place in its team
            places = ops.broadcast_to(self.place_ids, x.shape[:-1] + self.place_ids.shape[-1:])
            return ops.cat((x, places), -1)
        if not self.shared:
            return x
        return ops.cat((x, agent_ids(x, self.num_agents)), -1)

    def encode(self, x: Tensor) -> Tensor:
        """The first hidden layer (agent ids appended first when parameters are shared)."""
        return self._act(self.layers[0](self._with_ids(x)))

    def gru_step(self, y: Tensor, h: Tensor) -> Tensor:
        """The GRU state after one step of encoded input ``y`` (B, N, H0) from ``h``."""
        return self.gru(self.gru.input(y), h)

    def decode(self, y: Tensor) -> Tensor:
        """The layers after the first (or after the GRU) and the output head."""
        for i in range(1, len(self.layers)):
            y = self._act(self.layers[i](y))
        return self.head(y)

    def unroll(self, x: Tensor, h: Tensor) -> tuple[Tensor, Tensor]:
        """The recurrent network over a whole time-first sequence ``x`` (L, B, N, in) from ``h``
        (B, N, H), with gradients through every step: the outputs (L, B, N, out) and the last
        state. ``construct``'s numbers, with the steps' input gates taken apart by one ``unstack``
        instead of indexing: indexing step t is a strided slice whose gradient is a zero tensor
        of the whole sequence with one step filled in, summed over the L steps, which makes
        a long unroll (recurrent WQMIX's 26-step episodes) twice as slow to run and to compile.
        """
        outputs = []
        for x_gates in ops.unstack(self.gru.input(self.encode(x)), 0):
            h = self.gru(x_gates, h)
            outputs.append(h)
        return self.decode(ops.stack(outputs)), h

    def construct(self, x: Tensor, h: Tensor) -> tuple[Tensor, Tensor]:
        y = self.encode(x)
        if self.recurrent:
            gates = self.gru.input(y)  # every step's input gates in one batched call
            outputs = []
            for t in range(x.shape[0]):
                h = self.gru(gates[t], h)
                outputs.append(h)
            y = ops.stack(outputs)
        return self.decode(y), h
