"""The bodies of ``POST .../checkpoints/{checkpoint_id}/act`` (``api.routes.inference``)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from api.inference import MAX_BATCH

ACT_SCHEMA_NAME = "ActRequest"


class ActRequest(BaseModel):
    """Observations to act on (the body is read as strict JSON and checked field by field)."""

    # The route refuses any other field (``api.inference.act``): the schema says so.
    model_config = ConfigDict(extra="forbid")

    observations: dict[str, JsonValue] | list[JsonValue] = Field(
        description="What the env returned: an object of per-agent observations (each a list of "
        "numbers, or a list of them for a batch; a value may be an object with `observation` and "
        "`action_mask`, as PettingZoo's masked envs give), or an array `(N, obs_dim)` "
        f"(`(obs_dim,)` for a single-agent env) with an optional leading batch axis. At most "
        f"{MAX_BATCH} observations per agent."
    )
    action_masks: dict[str, JsonValue] | None = Field(
        default=None,
        description="Per agent, 0/1 over its discrete actions (one list, or one per "
        "observation); every action is available when omitted.",
    )
    memory: list[JsonValue] | None = Field(
        default=None,
        description="A recurrent policy's memory `(batch, N, H)`, as the previous answer gave it; "
        "zeros (an episode's start) when omitted.",
    )


class ActResponse(BaseModel):
    """The policy's greedy actions."""

    actions: JsonValue = Field(
        description="In the env's own action space: an object of per-agent actions for an "
        "object of observations (ints for discrete actions, lists of numbers on the env's bounds "
        "for continuous ones; lists of them for a batch), an array for an array."
    )
    memory: list[JsonValue] | None = Field(
        description="A recurrent policy's memory after this step, `(batch, N, H)`: send it with "
        "the next observations of the same episodes. `null` for a feed-forward policy."
    )
