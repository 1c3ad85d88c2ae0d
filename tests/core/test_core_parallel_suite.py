"""``make test`` runs the suite on several workers (``pytest -n auto --dist loadgroup``); the parity
tests of one learner share a worker, so that its compiled update is built once."""

from __future__ import annotations

import os
import re
from collections import defaultdict
from pathlib import Path

from pytest_run import ROOT, run_pytest

GROUPED = """
import pytest

@pytest.mark.xdist_group("one")
@pytest.mark.parametrize("i", range(6))
def test_grouped(i):
    pass

@pytest.mark.parametrize("i", range(6))
def test_free(i):
    pass
"""

PROBE = """
import pytest

@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items):
    for item in items:
        groups = [m.args[0] for m in item.iter_markers("xdist_group")]
        print("PROBE", item.nodeid, *groups)
"""


def _pytest(args: list[str], cwd: Path = ROOT, env: dict[str, str] | None = None) -> str:
    result = run_pytest(args, cwd, env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


def test_loadgroup_keeps_a_group_on_one_worker(tmp_path: Path) -> None:
    """Guards the pytest pin: with pytest 9.2, xdist's loadgroup silently spreads a group."""
    (tmp_path / "test_groups.py").write_text(GROUPED)
    out = _pytest(["-n", "2", "--dist", "loadgroup", "-v", "test_groups.py"], tmp_path)

    workers: dict[str, set[str]] = defaultdict(set)
    for worker, name in re.findall(r"\[(gw\d+)\] .*?PASSED \S+::(test_\w+)", out):
        workers[name].add(worker)
    assert sum(1 for line in out.splitlines() if "PASSED" in line) == 12, out
    assert len(workers["test_grouped"]) == 1, out


def test_parity_tests_are_grouped_by_learner(tmp_path: Path) -> None:
    (tmp_path / "group_probe.py").write_text(PROBE)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    target = "tests/learners/parity/test_parity_updates.py"
    out = _pytest([target, "--collect-only", "-q", "-p", "group_probe"], env=env)

    groups = {}
    for line in out.splitlines():
        if line.startswith("PROBE "):
            nodeid, *group = line.split()[1:]
            groups[nodeid] = group
    one_case = "[ddpg-mindspore-plain]"
    same_learner = {n: g for n, g in groups.items() if n.endswith(one_case)}
    assert len(same_learner) >= 3, out[-2000:]
    # Every test of that learner in one group, and the group is that learner's alone.
    assert {tuple(g) for g in same_learner.values()} == {("ddpg-mindspore-plain",)}
    assert all(g != ["ddpg-mindspore-plain"] for n, g in groups.items() if n not in same_learner)
