"""A run's process tree as Linux's ``/proc`` shows it: which processes it holds, how much memory
they keep resident, and killing them all at once.

The tree of a run is its process, every descendant (the env worker processes of
``learners.envs.subproc``) and every member of its process group (the run's process leads its own
group, so a descendant whose parent has died is still found). Where ``/proc`` is missing (macOS),
a tree is only its root and its memory reads as zero: the memory guard is off there.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

_PROC = Path("/proc")
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
MIB = 1 << 20


def _parent_and_group(pid: int) -> tuple[int, int] | None:
    """``(ppid, pgid)`` of a live process, or None when it is gone or unreadable."""
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
    fields = stat.rsplit(")", 1)[1].split()
    return int(fields[1]), int(fields[2])


def tree(root: int) -> list[int]:
    """``root`` and the processes under it (descendants and members of its process group)."""
    if not _PROC.is_dir():
        return [root]
    parents: dict[int, int] = {}
    members = {root}
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        found = _parent_and_group(int(entry.name))
        if found is None:
            continue
        parents[int(entry.name)] = found[0]
        if found[1] == root:
            members.add(int(entry.name))
    for pid in parents:
        ancestor = parents.get(pid)
        while ancestor is not None and ancestor not in members and ancestor > 1:
            ancestor = parents.get(ancestor)
        if ancestor in members:
            members.add(pid)
    return sorted(members)


def resident_bytes(pids: list[int]) -> int:
    """The resident memory of ``pids`` added up (pages shared between them count once per
    process, so the sum errs high, never low); a process that has gone counts zero."""
    total = 0
    for pid in pids:
        try:
            resident_pages = int((_PROC / str(pid) / "statm").read_text().split()[1])
        except (OSError, IndexError, ValueError):
            continue
        total += resident_pages * _PAGE_BYTES
    return total


def kill_tree(root: int) -> None:
    """SIGKILL ``root``'s process group and every process of its tree. Call it before ``root`` is
    reaped: while it exists (a zombie too) its pid, and so its group id, cannot be reused."""
    pids = tree(root)
    # Either may be gone already, or root may not have got as far as leading its own group.
    with contextlib.suppress(OSError):
        os.killpg(root, signal.SIGKILL)
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
