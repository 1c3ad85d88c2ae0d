"""``parse_spec``: untrusted JSON in, a frozen ``ExperimentSpec`` with every default filled in out,
or ``SpecError`` listing each bad field by its dotted path (``hyperparameters.tau``,
``env.kwargs.N``) and the reason; ``parse_edit`` likewise for a change of a stored spec's labels.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from learners.admission.envs import engine_errors, suite_errors, validate_env
from learners.admission.schedule import schedule_errors
from learners.backends import GPU_BACKENDS
from learners.enums import Device, EnvEngine, EnvSuite
from learners.registry import AlgorithmEntry, entry
from learners.spec import (
    EDITABLE,
    ExperimentSpec,
    FieldError,
    SpecEdit,
    SpecEnvelope,
    SpecError,
    errors_from_validation,
)


def _integral_floats_as_ints(value: Any) -> Any:
    """``5.0`` as ``5``: JSON has one number type, and JSON Schema's ``integer`` admits 5.0, so a
    client may send either (a float field takes the int as it is)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _integral_floats_as_ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_integral_floats_as_ints(v) for v in value]
    return value


def _nul_errors(value: Any, field: str) -> list[FieldError]:
    """Every string under ``value`` (keys too) holding NUL, which the database cannot store."""
    if isinstance(value, str):
        return (
            [FieldError(field, "must not contain the NUL character (U+0000)")]
            if "\x00" in value
            else []
        )
    if isinstance(value, dict):
        found = []
        for key, item in value.items():
            path = f"{field}.{key}"
            if "\x00" in key:
                found.append(FieldError(field, "a key must not contain the NUL character (U+0000)"))
            found.extend(_nul_errors(item, path))
        return found
    if isinstance(value, list):
        return [e for k, item in enumerate(value) for e in _nul_errors(item, f"{field}.{k}")]
    return []


def _device_errors(envelope: SpecEnvelope) -> list[FieldError]:
    """``cuda`` on a backend that cannot use a GPU (``learners.backends.GPU_BACKENDS``): refused
    here rather than queued for a worker whose runtime would fail it (it has no GPU queue)."""
    if envelope.device != Device.CUDA or envelope.backend in GPU_BACKENDS:
        return []
    able = ", ".join(sorted(GPU_BACKENDS))
    reason = (
        f"the {envelope.backend} backend cannot use a GPU: it is installed as its CPU build, so "
        f"'cuda' is for {able} only; use 'auto' or 'cpu' on {envelope.backend}"
    )
    return [FieldError("device", reason)]


def _with_env_defaults(envelope: SpecEnvelope, algo: AlgorithmEntry) -> SpecEnvelope:
    """The envelope with the algorithm's env defaults (``AlgorithmEntry.env_defaults``) in the
    places the spec left out: ``env.num_envs``, and each ``env.kwargs`` entry not given."""
    defaults = algo.env_defaults_for(envelope.env.suite, envelope.env.id)
    changes: dict[str, Any] = {}
    if "num_envs" in defaults and "num_envs" not in envelope.env.model_fields_set:
        changes["num_envs"] = defaults["num_envs"]
    missing = {k: v for k, v in defaults.get("kwargs", {}).items() if k not in envelope.env.kwargs}
    if missing:
        changes["kwargs"] = {**missing, **envelope.env.kwargs}
    if not changes:
        return envelope
    env = envelope.env.model_copy(update=changes)
    return envelope.model_copy(update={"env": env})


def _with_default_engine(envelope: SpecEnvelope) -> SpecEnvelope:
    """An mpe spec that leaves ``env.engine`` out steps on the vector engine, where it models the
    scenario and kwargs (else mpe2, whose checks then speak). Specs stored before the vector
    engine was the default name mpe2 and keep it."""
    env = envelope.env
    if env.suite != EnvSuite.MPE or "engine" in env.model_fields_set:
        return envelope
    vector = env.model_copy(update={"engine": EnvEngine.VECTOR})
    if engine_errors(vector):
        return envelope
    return envelope.model_copy(update={"env": vector})


def parse_spec(data: Mapping[str, Any]) -> ExperimentSpec:
    """Validate a submitted spec completely, or raise ``SpecError`` naming every bad field."""
    if not isinstance(data, Mapping):
        raise SpecError([FieldError("body", "the spec must be a JSON object")])
    try:
        # Strictly, as JSON: the types the published schema names, with no coercion.
        normalised = _integral_floats_as_ints(dict(data))
        envelope = SpecEnvelope.model_validate_json(json.dumps(normalised), strict=True)
    except ValidationError as exc:
        raise SpecError(errors_from_validation(exc)) from None

    errors: list[FieldError] = []
    try:
        algo = entry(envelope.algorithm)
    except KeyError:
        # In the enum but not in the catalogue yet: no backend is built for it.
        reason = f"{envelope.algorithm} is not built for any backend yet"
        raise SpecError([FieldError("algorithm", reason)]) from None
    if envelope.backend not in algo.backends:
        built = ", ".join(sorted(algo.backends)) or "none"
        errors.append(
            FieldError(
                "backend",
                f"{envelope.algorithm} is not built for the {envelope.backend} backend yet "
                f"(built: {built})",
            )
        )
    errors.extend(_device_errors(envelope))
    envelope = _with_default_engine(_with_env_defaults(envelope, algo))
    errors.extend(suite_errors(envelope.env.suite, algo))
    errors.extend(validate_env(envelope.env.suite, envelope.env.id, envelope.env.kwargs, algo))
    errors.extend(engine_errors(envelope.env))

    hyperparameters: dict[str, Any] = {}
    try:
        cfg = algo.config.resolve(envelope.env.suite, envelope.env.id, envelope.hyperparameters)
        hyperparameters = cfg.model_dump(mode="json")
    except ValidationError as exc:
        errors.extend(errors_from_validation(exc, "hyperparameters"))

    errors.extend(_nul_errors(envelope.env.kwargs, "env.kwargs"))
    if errors:
        raise SpecError(errors)
    spec = ExperimentSpec.model_validate(
        {**envelope.model_dump(mode="json"), "hyperparameters": hyperparameters}
    )
    if errors := schedule_errors(spec):
        raise SpecError(errors)
    return spec


def parse_edit(data: Any) -> dict[str, Any]:
    """The changes an edit asks for (``SpecEdit``'s fields that were given), or ``SpecError``
    naming each field that is bad or may not change."""
    if not isinstance(data, Mapping):
        raise SpecError([FieldError("body", "the edit must be a JSON object")])
    editable = ", ".join(EDITABLE)
    fixed = [
        FieldError(str(k), f"cannot be changed after submission; only {editable} can")
        for k in data
        if k not in EDITABLE
    ]
    if fixed:
        raise SpecError(fixed)
    try:
        edit = SpecEdit.model_validate_json(json.dumps(dict(data)), strict=True)
    except ValidationError as exc:
        raise SpecError(errors_from_validation(exc)) from None
    return edit.model_dump(mode="json", include=edit.model_fields_set)
