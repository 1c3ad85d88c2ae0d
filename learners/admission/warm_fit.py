"""Whether a spec may warm-start from a checkpoint of another run (``spec.init``), decided from
the two specs without building networks (the API calls ``init_fit_errors`` at submission; the
worker checks every tensor when it loads them, ``learners.warm_start``).

A warm start continues on the parent's environment (its kwargs may differ, the copies and the
time limit too) with the same algorithm: the agents, their teams, and the observation, state and
action sizes must agree, and so must the hyperparameters that shape the networks it takes
(``AlgorithmConfig.policy_fields`` for ``what: policy``, ``network_fields`` for ``all``). The
backend may differ: checkpoints are portable.
"""

from __future__ import annotations

from learners.admission.match_fit import seats
from learners.envs.catalogue import env_shape
from learners.spec import ExperimentSpec, FieldError


def _env_errors(parent: ExperimentSpec, spec: ExperimentSpec, of: str) -> list[FieldError]:
    if (parent.env.suite, parent.env.id) != (spec.env.suite, spec.env.id):
        return [
            FieldError(
                "env.id",
                f"must be {parent.env.suite} {parent.env.id}, the env of {of}: a warm start "
                "continues on its env (with other kwargs where the spaces agree)",
            )
        ]
    before, here = seats(parent.env), seats(spec.env)
    differences = [
        f"{name} {a} there, {b} here"
        for name, a, b in (
            ("agents", len(before.teams), len(here.teams)),
            ("teams", before.teams, here.teams),
            ("observation sizes", before.obs_dims, here.obs_dims),
            ("action kind", _kind(before.discrete), _kind(here.discrete)),
            ("action size", before.action_dim, here.action_dim),
        )
        if a != b
    ]
    state_before = env_shape(parent.env.suite, parent.env.id, parent.env.kwargs).state_dim
    state_here = env_shape(spec.env.suite, spec.env.id, spec.env.kwargs).state_dim
    if state_before != state_here:
        differences.append(f"state size {state_before} there, {state_here} here")
    if not differences:
        return []
    return [
        FieldError(
            "env.kwargs",
            f"give an env of other spaces than {of}'s ({'; '.join(differences)}): its networks "
            "would not fit",
        )
    ]


def _kind(discrete: bool) -> str:
    return "discrete" if discrete else "continuous"


def init_fit_errors(parent: ExperimentSpec, spec: ExperimentSpec) -> list[FieldError]:
    """Why ``spec`` cannot warm-start from a checkpoint of a run of ``parent``; ``[]`` when it
    can. Builds at most one throwaway copy of each env (no network); raises what an env's
    constructor raises for kwargs it refuses."""
    if spec.init is None:
        return []
    of = f"experiment {spec.init.experiment_id}"
    if parent.algorithm != spec.algorithm:
        return [
            FieldError(
                "algorithm",
                f"must be {parent.algorithm}, the algorithm of {of} that init starts from",
            )
        ]
    errors = _env_errors(parent, spec, of)
    config, parent_config = spec.config(), parent.config()
    fields = config.policy_fields if spec.init.what == "policy" else config.network_fields
    for name in fields:
        value, wanted = getattr(config, name), getattr(parent_config, name)
        if value != wanted:
            errors.append(
                FieldError(
                    f"hyperparameters.{name}",
                    f"must be {_json(wanted)} as in {of}: the warm start takes its "
                    f"{'policy network' if spec.init.what == 'policy' else 'networks'}",
                )
            )
    return errors


def _json(value: object) -> str:
    if isinstance(value, tuple):
        return "[" + ", ".join(_json(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    return "null" if value is None else repr(value) if isinstance(value, str) else str(value)


def continue_fit_errors(
    parent: ExperimentSpec, spec: ExperimentSpec, step: int
) -> list[FieldError]:
    """Why ``spec`` cannot continue (``init.what: run``) the run of ``parent`` from its
    checkpoint at env step ``step``; ``[]`` when it can. The spec must describe that run up to
    the checkpoint, so that the same spec without ``init`` trains the same weights in one run:
    the same algorithm, env, seed and hyperparameters, and the same schedule before ``step``;
    what it changes from ``step`` on is its own. Builds nothing."""
    if spec.init is None:
        return []
    of = f"experiment {spec.init.experiment_id}"
    why = "a continued run is that run up to the checkpoint"
    errors = []
    for field, mine, theirs in (
        ("algorithm", spec.algorithm, parent.algorithm),
        ("env", spec.env.model_dump(mode="json"), parent.env.model_dump(mode="json")),
        ("seed", spec.seed, parent.seed),
        ("hyperparameters", spec.hyperparameters, parent.hyperparameters),
    ):
        if mine != theirs:
            shown = theirs if field in ("algorithm", "seed") else "as in that run's spec"
            errors.append(FieldError(field, f"must be {shown}, as in {of}: {why}"))
    if parent.init is not None and parent.init.what != "run":
        errors.append(
            FieldError(
                "init.experiment_id",
                f"{of} was warm-started from another run: only a fresh run or a continued one "
                "can be continued (one spec could not describe both starts)",
            )
        )
    before = [c.model_dump(mode="json") for c in spec.schedule if c.at_step < step]
    theirs_before = [c.model_dump(mode="json") for c in parent.schedule if c.at_step < step]
    if before != theirs_before:
        reason = (
            f"the changes before step {step:,} must be those of {of} (its checkpoint was trained "
            "with them); this run's own start at that step or later"
        )
        errors.append(FieldError("schedule", reason))
    if spec.total_steps <= step:
        reason = f"must be above {step:,}, the step of the checkpoint it continues"
        errors.append(FieldError("total_steps", reason))
    return errors
