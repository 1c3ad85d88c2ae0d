"""Networks that compute every agent at once, with shared, per-team or per-agent parameters
(TensorFlow).

The TensorFlow twin of ``learners.backends.torch.agent_nets``, name for name and equation for
equation: inputs are ``(..., N, features)``; with shared parameters a one-hot agent id is part of
the first layer's input, applied as a per-agent bias broadcast over the input's agent axis,
whatever the batch's real size (never a configured batch size: reference defect
``ids-from-config-batch-size``); with separate parameters every layer holds a kernel per agent,
``(N, in, out)``, applied in one batched contraction; shared within each of several teams
(``TeamSeats``), a kernel per team, ``(T, in, out)``, gathered to the agents, with the agent's place
in its team as its one-hot id. The GRU cell is PyTorch's ``GRUCell`` written out, gates ordered
``r, z, n``, so its weights mean the same thing in both backends.

Canonical names: ``layers.<i>.weight``, ``gru.input.weight``, ``gru.hidden.bias``, ``head.weight``,
and the actor's ``log_std``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from learners.backends.tensorflow.networks import Dense, Param, orthogonal
from learners.envs.teams import TeamSeats


def agent_dense(
    name: str,
    in_features: int,
    out_features: int,
    num_agents: int,
    shared: bool,
    gain: float,
    rng: np.random.Generator,
    trainable: bool = True,
    groups: Sequence[int] | None = None,
) -> Dense:
    """A ``Dense`` for every agent: orthogonal kernels (one, one per team with ``groups`` — each
    agent's team index — or one per agent) scaled by ``gain``, zero biases."""
    if shared and groups is None:
        kernel = orthogonal(rng, in_features, out_features, gain)
        return Dense(name, kernel, np.zeros(out_features, np.float32), trainable=trainable)
    count = num_agents if groups is None else max(groups) + 1
    kernels = np.stack([orthogonal(rng, in_features, out_features, gain) for _ in range(count)])
    bias = np.zeros((count, out_features), np.float32)
    return Dense(name, kernels, bias, per_agent=True, groups=groups, trainable=trainable)


class AgentGRUCell(tf.Module):
    """r = sigmoid(W_ir x + b_ir + W_hr h + b_hr), z = sigmoid(W_iz x + b_iz + W_hz h + b_hz),
    n = tanh(W_in x + b_in + r * (W_hn h + b_hn)), h' = (1 - z) * n + z * h."""

    def __init__(
        self,
        in_features: int,
        hidden_size: int,
        num_agents: int,
        shared: bool,
        rng: np.random.Generator,
        trainable: bool = True,
        groups: Sequence[int] | None = None,
    ) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        size = 3 * hidden_size
        self.input = agent_dense(
            "gru.input", in_features, size, num_agents, shared, 1.0, rng, trainable, groups
        )
        self.hidden = agent_dense(
            "gru.hidden", hidden_size, size, num_agents, shared, 1.0, rng, trainable, groups
        )
        self.params = [*self.input.params, *self.hidden.params]

    def __call__(self, x_gates: tf.Tensor, h: tf.Tensor) -> tf.Tensor:
        """One step; ``x_gates`` is ``self.input(x)`` (precomputed for a whole sequence)."""
        x_r, x_z, x_n = tf.split(x_gates, 3, axis=-1)
        h_r, h_z, h_n = tf.split(self.hidden(h), 3, axis=-1)
        r = tf.sigmoid(x_r + h_r)
        z = tf.sigmoid(x_z + h_z)
        n = tf.tanh(x_n + r * h_n)
        return (1.0 - z) * n + z * h


class AgentMLP(tf.Module):
    """``in -> hidden layers -> out`` for every agent, optionally with a GRU after the first hidden
    layer. Feed-forward: ``net(x)`` with ``x`` ``(..., N, in)``. Recurrent: ``net(x, h)`` with
    ``x`` ``(L, B, N, in)`` (time first) and ``h`` ``(B, N, H)``, returning the outputs of every
    step and the hidden state after the last one."""

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
        trainable: bool = True,
        seats: TeamSeats | None = None,
    ) -> None:
        super().__init__()
        self.num_agents = num_agents
        # Shared with seats: one set of kernels per team (``(T, ...)``), ids within the team.
        self.seats = seats if shared else None
        self.shared = shared and self.seats is None
        self.act = tf.tanh if activation == "tanh" else tf.nn.relu
        groups = None if self.seats is None else self.seats.team
        ids = num_agents if self.shared else 0
        self.place_ids: tf.Tensor | None = None
        if self.seats is not None:
            ids = self.seats.width
            self.place_ids = tf.constant(np.eye(ids, dtype=np.float32)[list(self.seats.place)])
        sizes = [in_features + ids, *hidden_sizes]
        if rnn_hidden_size is not None and len(hidden_sizes) > 1:
            sizes[1] = rnn_hidden_size  # the second hidden layer reads the GRU's state
        hidden_gain = math.sqrt(2.0)

        def dense(name: str, a: int, b: int, gain: float) -> Dense:
            return agent_dense(name, a, b, num_agents, shared, gain, rng, trainable, groups)

        # Built in the torch learner's init order (layers, GRU, head), so a seed means one thing.
        self.layers = [
            dense(f"layers.{i}", a, b, hidden_gain)
            for i, (a, b) in enumerate(zip(sizes[:-1], [*hidden_sizes], strict=True))
        ]
        self.gru: AgentGRUCell | None = None
        last = hidden_sizes[-1]
        if rnn_hidden_size is not None:
            self.gru = AgentGRUCell(
                hidden_sizes[0], rnn_hidden_size, num_agents, shared, rng, trainable, groups
            )
            if len(hidden_sizes) == 1:
                last = rnn_hidden_size
        self.head = dense("head", last, out_features, head_gain)
        self.params: list[Param] = [p for layer in self.layers for p in layer.params]
        if self.gru is not None:
            self.params += self.gru.params
        self.params += self.head.params

    def encode(self, x: tf.Tensor) -> tf.Tensor:
        """The first hidden layer; with shared parameters its input is ``[x, one-hot id]`` (the
        agent's id, or its place in its team when each team has its own kernels)."""
        first = self.layers[0]
        if self.place_ids is not None:
            shape = tf.concat([tf.shape(x)[:-1], tf.shape(self.place_ids)[-1:]], 0)
            return self.act(first(tf.concat([x, tf.broadcast_to(self.place_ids, shape)], -1)))
        if not self.shared:
            return self.act(first(x))
        # [x, e_i] @ K + b = x @ K_x + b + K_id[i]: the id's rows of the kernel are a per-agent
        # bias, added by broadcasting over the agent axis (as the torch network does) instead of
        # building and concatenating one-hots.
        n = self.num_agents
        kernel = first.kernel
        flat = tf.reshape(x, [-1, tf.shape(x)[-1]])
        y = tf.matmul(flat, kernel[:-n]) + first.bias
        y = tf.reshape(y, tf.concat([tf.shape(x)[:-1], tf.shape(kernel)[-1:]], 0))
        return self.act(y + kernel[-n:])

    def recur(
        self, y: tf.Tensor, h: tf.Tensor, starts: tf.Tensor | None = None
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """Run the GRU over ``y`` (L, B, N, H0) from ``h`` (B, N, H). ``starts`` (L, B) is 1 where
        an episode starts at that step: the state is zeroed before it. Returns the states after
        and before every step, (L, B, N, H) each."""
        assert self.gru is not None
        gru = self.gru
        gates = gru.input(y)  # every step's input gates in one batched call
        if starts is None:
            starts = tf.zeros(tf.shape(gates)[:2], gates.dtype)

        def step(carry: tuple[tf.Tensor, tf.Tensor], inputs: tuple[tf.Tensor, tf.Tensor]):
            gate, start = inputs
            before = carry[0] * (1.0 - start)[:, None, None]
            return gru(gate, before), before

        # One symbolic loop whatever the length. Unrolling a known length instead made the
        # default recurrent MAPPO update 4x slower and 6x slower to trace (larger graphs).
        after, before = tf.scan(step, (gates, starts), initializer=(h, h))
        return after, before

    def unroll(self, x: tf.Tensor, h: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """The whole network over a time-first sequence ``x`` (L, B, N, in) from ``h`` (B, N, H),
        with gradients through every step: the outputs (L, B, N, out) and the last state.

        ``recur`` without its episode starts and without the states before each step (a second
        sequence the scan would stack and differentiate through for nothing)."""
        assert self.gru is not None
        gru = self.gru
        after = tf.scan(lambda carry, gate: gru(gate, carry), gru.input(self.encode(x)), h)
        return self.decode(after), after[-1]

    def step(self, x: tf.Tensor, h: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """One step of every copy, ``x`` (E, N, in) from ``h`` (E, N, H): the outputs (E, N, out)
        and the next state, without a scan over a sequence of one."""
        assert self.gru is not None
        h = self.gru(self.gru.input(self.encode(x)), h)
        return self.decode(h), h

    def decode(self, y: tf.Tensor) -> tf.Tensor:
        """The layers after the first (or after the GRU) and the output head."""
        for layer in self.layers[1:]:
            y = self.act(layer(y))
        return self.head(y)

    def __call__(
        self, x: tf.Tensor, h: tf.Tensor | None = None
    ) -> tuple[tf.Tensor, tf.Tensor | None]:
        """Feed-forward: ``x`` (..., N, in). Recurrent: ``x`` (L, B, N, in) from ``h`` (B, N, H);
        returns the outputs and the state after the last step."""
        y = self.encode(x)
        if self.gru is None:
            return self.decode(y), None
        if h is None:
            raise ValueError("a recurrent network needs its hidden state")
        after, _ = self.recur(y, h)
        return self.decode(after), after[-1]
