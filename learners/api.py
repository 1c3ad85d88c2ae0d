"""The learners' public face: what the service (``api``, ``core``, ``workers``) may use of the
library, in the order of a run's life. Everything else under ``learners`` is internal to it; the
import contracts (``tests/core/test_core_layers.py``) hold the service to this module.

1. Describe a run: the enums, the spec models and their errors, the algorithm catalogue, the
   environments a spec may name.
2. Admit it: ``parse_spec``/``parse_edit``, the env and budget checks, the memory estimate, the
   match-fit and warm-start-fit checks, the published JSON Schema.
3. Run it: ``train`` and its hooks' metric points, ``play_match``, the backends' device lookups.

Importing this module imports no deep-learning framework: a backend's framework is imported only
when a run asks for that backend.
"""

from __future__ import annotations

from learners.admission.budget import (
    Assessment,
    assess,
    env_kwarg_errors,
    kwarg_ranges,
    mpe_agent_steps,
)
from learners.admission.envs import kwarg_errors, trains_on
from learners.admission.match_fit import fit_errors
from learners.admission.memory import MemoryEstimate
from learners.admission.parse import parse_edit, parse_spec
from learners.admission.schedule import iteration_steps, mutable_names, schedule_errors
from learners.admission.schema import kwargs_properties, spec_json_schema
from learners.admission.warm_fit import continue_fit_errors, init_fit_errors
from learners.backends import GPU_BACKENDS, describe_device, gpu_names, resolve_device
from learners.checkpoint import CheckpointError
from learners.enums import ActionKind, Algorithm, Backend, Device, EnvEngine, EnvSuite
from learners.envs.catalogue import env_ids, scenario_teams, suite, suites
from learners.envs.suites.base import EnvEntry, KwargRange, Suite
from learners.envs.suites.installed import (
    ENTRY_POINT_GROUP,
    buildable_suites,
    plugin_errors,
    suite_names,
)
from learners.exports import (
    EnvInputError,
    NumpyPolicy,
    OnnxExport,
    PolicyExport,
    export_onnx,
    export_policy,
)
from learners.hooks import MetricPoint
from learners.matches import MATCH_SCENARIOS, RANDOM, play_match
from learners.registry import AlgorithmEntry, entries
from learners.replay import EXIT_NOT_INSTALLED
from learners.spec import (
    MAX_TAG_LENGTH,
    MAX_TOTAL_STEPS,
    NO_NUL,
    TAG_PATTERN,
    EnvSpec,
    ExperimentSpec,
    FieldError,
    InitSpec,
    Label,
    SpecEdit,
    SpecEnvelope,
    SpecError,
    Text,
    errors_from_validation,
    label_error,
)
from learners.training import train

__all__ = [
    "EXIT_NOT_INSTALLED",
    "CheckpointError",
    "EnvInputError",
    "NumpyPolicy",
    "OnnxExport",
    "PolicyExport",
    "export_onnx",
    "export_policy",
    "GPU_BACKENDS",
    "MAX_TAG_LENGTH",
    "MAX_TOTAL_STEPS",
    "ENTRY_POINT_GROUP",
    "MATCH_SCENARIOS",
    "NO_NUL",
    "RANDOM",
    "TAG_PATTERN",
    "ActionKind",
    "Algorithm",
    "AlgorithmEntry",
    "Assessment",
    "Backend",
    "Device",
    "EnvEngine",
    "EnvEntry",
    "EnvSpec",
    "EnvSuite",
    "ExperimentSpec",
    "FieldError",
    "InitSpec",
    "KwargRange",
    "MemoryEstimate",
    "MetricPoint",
    "SpecEdit",
    "SpecEnvelope",
    "SpecError",
    "Suite",
    "Label",
    "Text",
    "assess",
    "buildable_suites",
    "describe_device",
    "entries",
    "env_ids",
    "env_kwarg_errors",
    "mpe_agent_steps",
    "errors_from_validation",
    "fit_errors",
    "gpu_names",
    "init_fit_errors",
    "continue_fit_errors",
    "iteration_steps",
    "mutable_names",
    "schedule_errors",
    "kwarg_errors",
    "label_error",
    "kwarg_ranges",
    "kwargs_properties",
    "parse_edit",
    "parse_spec",
    "play_match",
    "plugin_errors",
    "resolve_device",
    "scenario_teams",
    "spec_json_schema",
    "suite",
    "suite_names",
    "suites",
    "train",
    "trains_on",
]
