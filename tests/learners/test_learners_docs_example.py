"""The example of docs/using-results.md, "Acting with a policy", run as a user would: its Python
block, in a folder holding the export it names (a MADDPG policy on simple_spread_v3 with
continuous actions), in a fresh interpreter."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from learners import checkpoint
from learners.checkpoint import write
from learners.enums import Algorithm, Backend
from learners.envs.factory import make_vec_env
from learners.exports import export_policy
from learners.registry import entry
from learners.spec import ExperimentSpec
from tests.learners.test_learners_checkpoint import manifest_for

ROOT = Path(__file__).resolve().parents[2]


def _example() -> str:
    text = (ROOT / "docs" / "using-results.md").read_text()
    section = text[text.index("## Acting with a policy") :]
    (code,) = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)[:1]
    return code


def test_the_docs_example_plays_an_exported_policy_for_an_episode(
    make_spec: Callable[..., ExperimentSpec], tmp_path: Path
) -> None:
    code = _example()
    (name,) = re.findall(r'load_policy\("([^"]+)"\)', code)
    spec = make_spec(
        Algorithm.MADDPG,
        env={"suite": "mpe", "id": "simple_spread_v3", "kwargs": {"continuous_actions": True}},
    )
    env = make_vec_env(spec.env, spec.seed)
    learner = entry(spec.algorithm).learner_class(Backend.TORCH)(
        spec.config(), env.info, "cpu", spec.seed
    )
    full = tmp_path / "step-1.safetensors"
    write(full, learner.state(), manifest_for(spec, checkpoint.env_info_to_json(env.info)))
    env.close()
    export_policy(full, tmp_path / name)

    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "played maddpg for one episode"
