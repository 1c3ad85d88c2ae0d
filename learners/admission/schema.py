"""The JSON Schema of a submitted spec, as precise as the checks ``parse_spec`` makes.

``SpecEnvelope``'s own schema says only "an algorithm, a backend, an env, some hyperparameters";
``parse_spec`` then refuses most of what that admits (an algorithm on an env it does not train on,
an unknown constructor argument, a hyperparameter out of range). A client generating requests from
the schema (an SDK, a form, a fuzzer) should not have to learn those rules from 422s, so the API
publishes this instead: one variant per algorithm (``oneOf`` on ``algorithm``), each naming the
backends it is built for, the environments it trains on with the constructor arguments each takes
(typed from the constructor's defaults, ``continuous_actions`` fixed where the algorithm needs one
action kind), and its hyperparameters as its config class describes them.

What no JSON Schema can say stays a 422 and is listed in the schema's description: rules between two
fields (``minibatches`` at most ``rollout_length``, ``cuda`` only on a backend that can use a
GPU...) and the per-run limits of ``learners.admission.budget`` that depend on several fields
(agents counted over two arguments, copies times agents, the memory estimate). Single arguments'
bounds (``N`` at most 32...) are in the schema.
"""

from __future__ import annotations

import copy
import inspect
from typing import Any

from learners.admission.budget import kwarg_ranges
from learners.admission.envs import trains_on
from learners.enums import Backend, EnvSuite
from learners.envs.catalogue import RESERVED_KWARGS, constructor_parameters, env_ids
from learners.registry import ActionKind, AlgorithmEntry, entries
from learners.spec import NO_NUL, EnvSpec, SpecEnvelope

Schema = dict[str, Any]

BEYOND_THE_SCHEMA = (
    "Checked beyond this schema, with a 422 naming the field: rules between two fields of one "
    "algorithm's hyperparameters (e.g. PPO's `minibatches` at most `rollout_length`), `device` "
    "`cuda` with a backend that cannot use a GPU (`mindspore`, installed as its CPU build), and "
    "the per-run limits (agents, episode length, and the estimated memory of the run against the "
    "server's per-run budget)."
)


def spec_json_schema(ref_template: str = "#/components/schemas/{model}") -> tuple[Schema, Schema]:
    """The spec's schema and the definitions it refers to (for ``components.schemas``)."""
    envelope = SpecEnvelope.model_json_schema(ref_template=ref_template)
    definitions: Schema = envelope.pop("$defs", {})
    # The fields every variant shares, with their descriptions (the dashboard's form reads them).
    definitions["SpecEnvelope"] = copy.deepcopy(envelope)
    variants = []
    for algo in entries():
        config = algo.config.model_json_schema(ref_template=ref_template)
        definitions.update(config.pop("$defs", {}))
        variants.append(_variant(envelope, algo, config))
    schema: Schema = {
        "title": envelope.get("title", "SpecEnvelope"),
        "description": f"{envelope.get('description', '')}\n\n{BEYOND_THE_SCHEMA}".strip(),
        "oneOf": variants,
    }
    return schema, definitions


def _variant(envelope: Schema, algo: AlgorithmEntry, config: Schema) -> Schema:
    variant = copy.deepcopy(envelope)
    variant.pop("description", None)
    variant["title"] = f"{algo.algorithm} spec"
    properties = variant["properties"]
    properties["algorithm"] = {"const": algo.algorithm.value, "description": algo.title}
    properties["backend"] = {
        "enum": [b.value for b in Backend if b in algo.backends],
        "description": properties["backend"].get("description", ""),
    }
    properties["env"] = {
        "oneOf": [
            _env_variant(suite, env_id, algo)
            for suite in EnvSuite
            if suite in algo.suites
            for env_id in env_ids(suite)
            if trains_on(algo, suite, env_id)
        ],
        "description": "The environment (one of those this algorithm trains on).",
    }
    config.pop("title", None)
    properties["hyperparameters"] = {
        **config,
        "description": f"{algo.config.__name__}: omitted fields take their (per-environment) "
        "default.",
    }
    variant["additionalProperties"] = False
    return variant


def _env_variant(suite: EnvSuite, env_id: str, algo: AlgorithmEntry) -> Schema:
    env = EnvSpec.model_json_schema()
    kwargs: Schema = {}
    for name, param in constructor_parameters(suite, env_id).items():
        if name not in RESERVED_KWARGS:
            kwargs[name] = _kwarg_schema(param.default)
    for rule in kwarg_ranges(suite, env_id):
        bounded = {"type": "integer", "minimum": rule.low, "maximum": rule.high}
        if constructor_parameters(suite, env_id)[rule.kwarg].default is None:
            bounded = {"anyOf": [bounded, {"type": "null"}]}
        kwargs[rule.kwarg] = {**bounded, "description": f"{rule.low} to {rule.high} {rule.unit}"}
    kwargs_schema: Schema = {
        "type": "object",
        "properties": kwargs,
        "additionalProperties": False,
        "description": env["properties"]["kwargs"].get("description", ""),
    }
    required = ["suite", "id"]
    if suite == EnvSuite.MPE and len(algo.action_kinds) == 1:
        continuous = ActionKind.CONTINUOUS in algo.action_kinds
        kwargs["continuous_actions"] = {"const": continuous}
        if continuous:
            # mpe2's default is discrete: an algorithm that needs continuous actions must say so.
            kwargs_schema["required"] = ["continuous_actions"]
            required.append("kwargs")
    return {
        "type": "object",
        "title": f"{suite}/{env_id}",
        "properties": {
            "suite": {"const": suite.value},
            "id": {"const": env_id},
            "num_envs": env["properties"]["num_envs"],
            "kwargs": kwargs_schema,
        },
        "required": required,
        "additionalProperties": False,
    }


def _kwarg_schema(default: Any) -> Schema:
    """What ``catalogue._type_error`` accepts for a parameter with this default."""
    if default is inspect.Parameter.empty or default is None:
        return {}
    if isinstance(default, bool):
        return {"type": "boolean"}
    if isinstance(default, int):
        return {"type": "integer"}
    if isinstance(default, float):
        return {"type": "number"}
    if isinstance(default, str):
        return {"type": "string", "pattern": NO_NUL}
    if isinstance(default, tuple | list):
        return {"type": "array", "minItems": len(default), "maxItems": len(default)}
    if isinstance(default, dict):
        return {"type": "object"}
    return {}
