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
import math
from typing import Any

from learners.admission.budget import MAX_ENVS, kwarg_ranges
from learners.admission.envs import trains_on
from learners.enums import ActionKind, Backend, EnvSuite
from learners.envs.catalogue import Suite, suites
from learners.envs.suites.mpe import CLASSIC_MPE_ENVS
from learners.registry import AlgorithmEntry, entries
from learners.spec import MAX_VECTOR_ENVS, NO_NUL, EnvSpec, SpecEnvelope

Schema = dict[str, Any]

BEYOND_THE_SCHEMA = (
    "Checked beyond this schema, with a 422 naming the field: rules between two fields of one "
    "algorithm's hyperparameters (e.g. PPO's `minibatches` at most `rollout_length`), `device` "
    "`cuda` with a backend that cannot use a GPU (`mindspore`, installed as its CPU build), and "
    "the per-run limits (agents, episode length, an env's arguments that fit alone but not "
    "together, e.g. more pursuit agents than its grid has room for, and the estimated memory of "
    "the run against the "
    "server's per-run budget), and the server's limits on the checkpoints a run writes "
    "(`total_steps / checkpoint.every_steps`) and keeps (`checkpoint.keep_last`). A "
    "`schedule`'s changes are checked against the rest of the spec: their `at_step` below "
    "`total_steps`, increasing, and a multiple of the steps between two updates; their "
    "`hyperparameters` only the algorithm's mutable ones (`GET /v1/algorithms`), with valid "
    "values."
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
            _env_variant(env_suite, env_id, algo)
            for env_suite in suites()
            if env_suite.name in algo.suites
            for env_id in env_suite.ids()
            if trains_on(algo, env_suite.name, env_id)
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


def _env_variant(env_suite: Suite, env_id: str, algo: AlgorithmEntry) -> Schema:
    env = EnvSpec.model_json_schema()
    kwargs = kwargs_properties(env_suite, env_id)
    kwargs_schema: Schema = {
        "type": "object",
        "properties": kwargs,
        "additionalProperties": False,
        "description": env["properties"]["kwargs"].get("description", ""),
    }
    required = ["suite", "id"]
    flag = env_suite.action_kind_field(env_id)
    if flag is not None and len(algo.action_kinds) == 1:
        continuous = ActionKind.CONTINUOUS in algo.action_kinds
        kwargs[flag] = {"const": continuous}
        if continuous:
            # mpe2's default is discrete: an algorithm that needs continuous actions must say so.
            kwargs_schema["required"] = [flag]
            required.append("kwargs")
    return {
        "type": "object",
        "title": f"{env_suite.name}/{env_id}",
        "properties": {
            "suite": {"const": env_suite.name},
            "id": {"const": env_id},
            "num_envs": {
                **env["properties"]["num_envs"],
                "maximum": _most_copies(env_suite, env_id),
            },
            "kwargs": kwargs_schema,
        },
        "required": required,
        "additionalProperties": False,
    }


def kwargs_properties(env_suite: Suite, env_id: str) -> Schema:
    """The JSON Schema of each constructor argument a spec may set on ``env_id``: its type (from
    its default) and, for a bounded one, its range; the reserved ones left out."""
    kwargs: Schema = {}
    params = env_suite.parameters(env_id)
    for name, param in params.items():
        if name in env_suite.reserved:
            continue
        kwargs[name] = _kwarg_schema(param.default)
        if _json_value(param.default):
            default = param.default
            kwargs[name]["default"] = list(default) if isinstance(default, tuple) else default
    for rule in kwarg_ranges(env_suite.name, env_id):
        bounded: Schema = {"type": "integer", "minimum": rule.low, "maximum": rule.high}
        if params[rule.kwarg].default is None:
            bounded = {"anyOf": [bounded, {"type": "null"}], "default": None}
        else:
            bounded["default"] = params[rule.kwarg].default
        kwargs[rule.kwarg] = {**bounded, "description": f"{rule.low} to {rule.high} {rule.unit}"}
    return kwargs


def _json_value(value: Any) -> bool:
    """Whether ``value`` can stand in a JSON Schema as a default (a finite number, a string, a
    bool or a list of finite numbers)."""
    values = value if isinstance(value, tuple | list) else [value]
    if isinstance(value, str | bool):
        return True
    return bool(values) and all(
        isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in values
    )


def _most_copies(env_suite: Suite, env_id: str) -> int:
    """The most copies a spec may ask for: the vector engine's bound on the scenarios it models
    (the default engine there), the suite's own elsewhere."""
    if env_suite.name == EnvSuite.MPE and env_id in CLASSIC_MPE_ENVS:
        return MAX_VECTOR_ENVS
    return min(MAX_ENVS, env_suite.max_envs)


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
        schema: Schema = {"type": "array", "minItems": len(default), "maxItems": len(default)}
        if all(isinstance(d, int | float) and not isinstance(d, bool) for d in default):
            schema["items"] = {"type": "number"}
        return schema
    if isinstance(default, dict):
        return {"type": "object"}
    return {}
