"""Networks that compute every agent at once, with shared, per-team or per-agent parameters
(PyTorch).

Inputs are shaped ``(..., N, features)``. With shared parameters one weight serves all agents, and
a one-hot agent id is appended to the input so the agents can still behave differently; it is
applied by broadcasting over the input's agent axis, whatever the batch's real size (never a
configured batch size: reference defect ``ids-from-config-batch-size``). With separate parameters
each layer holds a weight per agent, ``(N, out, in)``, applied with one batched contraction: no
Python loop over agents. Shared within each of several teams (``TeamSeats``), each layer holds a
weight per team, ``(T, out, in)``, each agent meets its team's (gathered to ``(N, out, in)``), and
the one-hot id is the agent's place in its team.

Parameter names and layouts are the checkpoint's canonical ones (PyTorch layout, ``(out, in)``
weights; ``(N, out, in)`` per agent, ``(T, out, in)`` per team): ``layers.<i>.weight``,
``gru.input.weight``, ``head.bias``...
The GRU cell is written out (PyTorch's ``GRUCell`` equations) so that per-agent weights work the
same way as shared ones and other backends can mirror it exactly.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import torch
from torch import nn

from learners.envs.teams import TeamSeats


class AgentLinear(nn.Module):
    """``y = x W^T + b`` for every agent; ``W`` is ``(out, in)`` shared, ``(N, out, in)`` per agent,
    or ``(T, out, in)`` one per team when ``groups`` gives each agent's team index."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        num_agents: int,
        shared: bool,
        groups: Sequence[int] | None = None,
    ) -> None:
        super().__init__()
        self.shared = shared and groups is None
        lead: tuple[int, ...] = () if self.shared else (num_agents,)
        index = None
        if groups is not None:
            lead, index = (max(groups) + 1,), torch.tensor(tuple(groups))
        self.index: torch.Tensor | None
        self.register_buffer("index", index, persistent=False)
        self.weight = nn.Parameter(torch.empty(*lead, out_features, in_features))
        self.bias = nn.Parameter(torch.zeros(*lead, out_features))

    def reset_parameters(self, gain: float, generator: torch.Generator) -> None:
        """Orthogonal weights (per agent) scaled by ``gain``, zero biases."""
        with torch.no_grad():
            for matrix in self.weight.view(-1, *self.weight.shape[-2:]):
                nn.init.orthogonal_(matrix, gain=gain, generator=generator)
            self.bias.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.shared:
            return nn.functional.linear(x, self.weight, self.bias)
        if self.index is not None:  # each agent meets its team's weights
            return (
                torch.einsum("...ni,noi->...no", x, self.weight[self.index]) + self.bias[self.index]
            )
        return torch.einsum("...ni,noi->...no", x, self.weight) + self.bias


class AgentGRUCell(nn.Module):
    """PyTorch's GRU cell equations over agent-batched inputs:
    r = sigmoid(W_ir x + b_ir + W_hr h + b_hr), z = sigmoid(W_iz x + b_iz + W_hz h + b_hz),
    n = tanh(W_in x + b_in + r * (W_hn h + b_hn)), h' = (1 - z) * n + z * h."""

    def __init__(
        self,
        in_features: int,
        hidden_size: int,
        num_agents: int,
        shared: bool,
        groups: Sequence[int] | None = None,
    ) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        self.input = AgentLinear(in_features, 3 * hidden_size, num_agents, shared, groups)
        self.hidden = AgentLinear(hidden_size, 3 * hidden_size, num_agents, shared, groups)

    def reset_parameters(self, generator: torch.Generator) -> None:
        self.input.reset_parameters(1.0, generator)
        self.hidden.reset_parameters(1.0, generator)

    def forward(self, x_gates: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """One step; ``x_gates`` is ``self.input(x)`` (precomputed for a whole sequence)."""
        x_r, x_z, x_n = x_gates.chunk(3, dim=-1)
        h_r, h_z, h_n = self.hidden(h).chunk(3, dim=-1)
        r = torch.sigmoid(x_r + h_r)
        z = torch.sigmoid(x_z + h_z)
        n = torch.tanh(x_n + r * h_n)
        return (1.0 - z) * n + z * h


class AgentMLP(nn.Module):
    """``in -> hidden layers -> out`` for every agent, optionally with a GRU after the first hidden
    layer. Feed-forward: ``forward(x)`` with ``x`` ``(..., N, in)``. Recurrent: ``forward(x, h)``
    with ``x`` ``(L, B, N, in)`` (time first) and ``h`` ``(B, N, H)``, returning the outputs for
    every step and the hidden state after the last one."""

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
        seats: TeamSeats | None = None,
    ) -> None:
        super().__init__()
        self.num_agents = num_agents
        # Shared with seats: one set of weights per team (``(T, ...)``), ids within the team.
        self.seats = seats if shared else None
        self.shared = shared and self.seats is None
        self.act = nn.Tanh() if activation == "tanh" else nn.ReLU()
        groups = None if self.seats is None else self.seats.team
        ids, places = (num_agents if self.shared else 0), None
        if self.seats is not None:
            ids = self.seats.width
            places = torch.eye(ids)[torch.tensor(self.seats.place)]
        self.place_ids: torch.Tensor | None
        self.register_buffer("place_ids", places, persistent=False)
        sizes = [in_features + ids, *hidden_sizes]

        def linear(a: int, b: int) -> AgentLinear:
            return AgentLinear(a, b, num_agents, shared, groups)

        self.layers = nn.ModuleList(
            linear(a, b) for a, b in zip(sizes[:-1], sizes[1:], strict=True)
        )
        self.gru: AgentGRUCell | None = None
        last = hidden_sizes[-1]
        if rnn_hidden_size is not None:
            self.gru = AgentGRUCell(hidden_sizes[0], rnn_hidden_size, num_agents, shared, groups)
            # The GRU replaces nothing: it sits between the first and the second hidden layer.
            if len(hidden_sizes) == 1:
                last = rnn_hidden_size
            else:
                self.layers[1] = linear(rnn_hidden_size, hidden_sizes[1])
        self.head = linear(last, out_features)

    def reset_parameters(self, generator: torch.Generator, head_gain: float) -> None:
        """Orthogonal init (gain sqrt 2 for hidden layers, ``head_gain`` for the output)."""
        for layer in self.layers:
            layer.reset_parameters(math.sqrt(2.0), generator)
        if self.gru is not None:
            self.gru.reset_parameters(generator)
        self.head.reset_parameters(head_gain, generator)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """The first hidden layer; with shared parameters its input is ``[x, one-hot id]`` (the
        agent's id, or its place in its team when each team has its own weights)."""
        first = self.layers[0]
        if self.place_ids is not None:
            places = self.place_ids.expand(*x.shape[:-1], self.place_ids.shape[-1])
            return self.act(first(torch.cat([x, places], -1)))
        if not self.shared:
            return self.act(first(x))
        # W [x, e_i] + b = W_x x + b + W_id[:, i]: the id's columns are a per-agent bias, added
        # by broadcasting over the agent axis instead of building and concatenating one-hots.
        # The bias is made contiguous first: added as a transposed view to an input with a size-1
        # agent axis (MAPPO's shared critic on the state), the sum came out agent-minor, and
        # every later layer, ReLU backward included, ran on that layout at many times the cost.
        n = self.num_agents
        ids = first.weight[:, -n:].t().contiguous()
        return self.act(nn.functional.linear(x, first.weight[:, :-n], first.bias) + ids)

    def recur(
        self, y: torch.Tensor, h: torch.Tensor, starts: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Run the GRU over ``y`` (L, B, N, H0) from ``h`` (B, N, H). ``starts`` (L, B) is 1 where
        an episode starts at that step: the state is zeroed before it. Returns the states after
        and before every step, (L, B, N, H) each."""
        assert self.gru is not None
        gates = self.gru.input(y)  # every step's input gates in one batched call
        before, after = [], []
        for t in range(y.shape[0]):
            if starts is not None:
                h = h * (1.0 - starts[t])[:, None, None]
            before.append(h)
            h = self.gru(gates[t], h)
            after.append(h)
        return torch.stack(after), torch.stack(before)

    def unroll(self, x: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The whole network over a time-first sequence ``x`` (L, B, N, in) from ``h`` (B, N, H),
        with gradients through every step: the outputs (L, B, N, out) and the last state.

        ``recur``'s steps, taken from the input gates with ``unbind`` rather than by indexing: the
        backward pass then stacks the steps' gradients once, where indexing accumulates each into a
        zero tensor of the whole sequence (L full-size fills, a third of a recurrent WQMIX update
        over 26-step episodes)."""
        assert self.gru is not None
        after = []
        for x_gates in self.gru.input(self.encode(x)).unbind(0):
            h = self.gru(x_gates, h)
            after.append(h)
        return self.decode(torch.stack(after)), h

    def decode(self, y: torch.Tensor) -> torch.Tensor:
        """The layers after the first (or after the GRU) and the output head."""
        # islice, not self.layers[1:]: slicing a ModuleList builds a new one on every call.
        for layer in itertools.islice(self.layers, 1, None):
            y = self.act(layer(y))
        return self.head(y)

    def forward(
        self, x: torch.Tensor, h: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Feed-forward: ``x`` (..., N, in). Recurrent: ``x`` (L, B, N, in) from ``h`` (B, N, H);
        returns the outputs and the state after the last step."""
        y = self.encode(x)
        if self.gru is None:
            return self.decode(y), None
        if h is None:
            raise ValueError("a recurrent network needs its hidden state")
        after, _ = self.recur(y, h)
        return self.decode(after), after[-1]
