"""How closely the ONNX export of a policy (``learners.exports.export_onnx``, run by onnxruntime)
gives the learner's own greedy actions, for every algorithm and backend.

For each (algorithm, action kind, backend): a learner at its initial weights on a small config,
its checkpoint exported to ONNX, then ``--steps`` steps of greedy play in ``--envs`` copies of the
env, the memory of recurrent policies fed back: the largest absolute difference of the continuous
actions, and how many discrete actions differ. Prints one table.

    python benchmarks/onnx_agreement.py --steps 200 --envs 8
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import astuple
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import onnxruntime  # noqa: E402

from learners import checkpoint  # noqa: E402
from learners.admission.parse import parse_spec  # noqa: E402
from learners.enums import Algorithm, Backend  # noqa: E402
from learners.envs.base import Observation  # noqa: E402
from learners.envs.factory import make_vec_env  # noqa: E402
from learners.exports import export_onnx  # noqa: E402
from learners.registry import entry  # noqa: E402

SPREAD = "simple_spread_v3"
CASES: list[tuple[str, Algorithm, dict[str, Any], dict[str, Any]]] = [
    ("continuous", Algorithm.DDPG, {"suite": "gymnasium", "id": "Pendulum-v1"}, {}),
    ("discrete", Algorithm.MADDPG, {"suite": "mpe", "id": SPREAD}, {}),
    ("continuous", Algorithm.MADDPG, {"suite": "mpe", "id": SPREAD, "continuous": True}, {}),
    ("discrete", Algorithm.IPPO, {"suite": "mpe", "id": SPREAD}, {}),
    ("continuous", Algorithm.IPPO, {"suite": "mpe", "id": SPREAD, "continuous": True}, {}),
    ("discrete", Algorithm.MAPPO, {"suite": "mpe", "id": SPREAD}, {}),
    ("continuous", Algorithm.MAPPO, {"suite": "mpe", "id": SPREAD, "continuous": True}, {}),
    ("discrete, recurrent", Algorithm.MAPPO, {"suite": "mpe", "id": SPREAD}, {"recurrent": True}),
    ("discrete", Algorithm.WQMIX, {"suite": "mpe", "id": SPREAD}, {}),
    ("discrete, recurrent", Algorithm.WQMIX, {"suite": "mpe", "id": SPREAD}, {"recurrent": True}),
]


def _spec(
    algorithm: Algorithm, backend: Backend, env: dict[str, Any], extra: dict[str, Any], envs: int
) -> Any:
    env = dict(env)
    continuous = env.pop("continuous", False)
    if env["suite"] == "mpe":
        env["kwargs"] = {"continuous_actions": continuous}
    return parse_spec(
        {
            "name": "onnx-agreement",
            "algorithm": algorithm,
            "backend": backend,
            "env": {**env, "num_envs": envs},
            "total_steps": 1000,
            "seed": 7,
            "hyperparameters": extra,
        }
    )


def measure(
    algorithm: Algorithm,
    backend: Backend,
    env: dict[str, Any],
    extra: dict[str, Any],
    steps: int,
    envs: int,
    work: Path,
) -> tuple[float, int, int]:
    """(largest continuous difference, discrete actions that differ, actions compared)."""
    spec = _spec(algorithm, backend, env, extra, envs)
    vec = make_vec_env(spec.env, spec.seed)
    learner = entry(algorithm).learner_class(backend)(spec.config(), vec.info, "cpu", spec.seed)
    source = work / f"{algorithm}-{backend}.safetensors"
    manifest = checkpoint.Manifest(
        algorithm=algorithm,
        backend=backend,
        spec=spec.model_dump(mode="json"),
        env=checkpoint.env_info_to_json(vec.info),
        step=0,
        runner={},
        resumable_on=[backend],
        policy_backends=sorted(entry(algorithm).backends),
    )
    checkpoint.write(source, learner.state(), manifest)
    made = export_onnx(source, work / f"{algorithm}-{backend}.onnx")
    session = onnxruntime.InferenceSession(str(made.path), providers=["CPUExecutionProvider"])
    memory = None
    if "memory" in made.inputs:
        memory = np.zeros((envs, vec.info.num_agents, spec.config().rnn_hidden_size), np.float32)
    worst, differ, compared = 0.0, 0, 0
    observation = vec.reset()
    for _ in range(steps):
        seen = Observation(*(np.array(f) for f in astuple(observation)))
        ours = learner.act(seen, explore=False)
        feed = {"obs": seen.obs.astype(np.float32)}
        if "action_mask" in made.inputs:
            feed["action_mask"] = seen.avail_actions.astype(np.float32)
        if memory is not None:
            feed["memory"] = memory
        out = dict(zip(made.outputs, session.run(None, feed), strict=True))
        memory = out.get("memory_out", memory)
        if out["actions"].dtype == np.int64:
            differ += int((out["actions"] != ours).sum())
        else:
            worst = max(worst, float(np.abs(out["actions"] - ours).max()))
        compared += int(np.asarray(ours).size)
        observation = vec.step(ours)[0]
    vec.close()
    return worst, differ, compared


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--envs", type=int, default=8)
    args = parser.parse_args()
    print(f"{args.steps} steps x {args.envs} envs of greedy play, initial weights, CPU")
    print("| algorithm | actions | backend | max abs difference | discrete actions that differ |")
    print("|---|---|---|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for kind, algorithm, env, extra in CASES:
            for backend in Backend:
                worst, differ, compared = measure(
                    algorithm, backend, env, extra, args.steps, args.envs, Path(tmp)
                )
                continuous = kind == "continuous"
                print(
                    f"| {algorithm} | {kind} | {backend} | "
                    f"{f'{worst:.2e}' if continuous else '-'} | "
                    f"{'-' if continuous else f'{differ} of {compared:,}'} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
