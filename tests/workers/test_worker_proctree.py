"""``workers.proctree`` on real processes: a child that leads its own group and starts a grandchild
holding memory, as a run's process starts its env workers."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from workers import proctree

pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads Linux's /proc")

GRANDCHILD_MB = 150
# The child leads a new session (as a run's process does) and starts a grandchild that writes
# GRANDCHILD_MB of memory, then both wait.
_CHILD = f"""
import subprocess, sys, time
grandchild = subprocess.Popen(
    [sys.executable, "-c", "import time; held = b'x' * ({GRANDCHILD_MB} << 20); print('ready', "
     "flush=True); time.sleep(120)"],
)
time.sleep(120)
"""


@pytest.fixture
def family() -> Iterator[subprocess.Popen[bytes]]:
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD], start_new_session=True, stdout=subprocess.PIPE
    )
    assert child.stdout is not None
    assert child.stdout.readline() == b"ready\n"
    yield child
    proctree.kill_tree(child.pid)
    child.wait()


def _alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_tree_holds_the_descendants_and_their_memory(family: subprocess.Popen[bytes]) -> None:
    pids = proctree.tree(family.pid)

    assert pids[0] == family.pid and len(pids) == 2
    assert proctree.resident_bytes(pids) >= GRANDCHILD_MB * proctree.MIB
    assert proctree.resident_bytes([family.pid]) < GRANDCHILD_MB * proctree.MIB


def test_killing_a_tree_kills_the_descendants_too(family: subprocess.Popen[bytes]) -> None:
    pids = proctree.tree(family.pid)

    proctree.kill_tree(family.pid)

    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in pids):
        assert time.monotonic() < deadline, "a process of the tree survived"
        time.sleep(0.05)
