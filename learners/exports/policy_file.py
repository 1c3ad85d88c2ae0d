"""The policy-only export of a checkpoint: the acting network's tensors (``actor.*``, or
``agent.*`` for Weighted QMIX's agents; every group's or team's, which share one tensor along a
leading axis) and the checkpoint's manifest marked ``contents: policy``, with no backend to resume
on and no runner counters. The optimiser state, critics, mixers, target networks, random states
and the replay buffer stay behind: a DDPG run on Pendulum exports 270 kB of its 2.6 MB checkpoint
at 10,000 steps (``benchmarks/export_sizes.py``; docs/using-results.md has every algorithm)."""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path

import safetensors

from learners.checkpoint import CheckpointError, read_manifest, write
from learners.exports.layout import network_layout
from learners.registry import entry


@dataclass(frozen=True)
class PolicyExport:
    """What ``export_policy`` wrote."""

    path: Path
    tensors: list[str]
    bytes: int
    source_bytes: int


def policy_tensor_names(algorithm: str, names: list[str]) -> list[str]:
    """Of a checkpoint's tensor ``names``, those of the network that acts, sorted."""
    prefix = f"{entry(algorithm).policy_network}."
    return sorted(n for n in names if n.startswith(prefix))


def export_policy(source: Path | str, target: Path | str) -> PolicyExport:
    """Write the policy-only export of the checkpoint at ``source`` to ``target`` (whole or not at
    all: a temporary file beside it, then a rename). A policy-only file exports as itself."""
    source, target = Path(source), Path(target)
    manifest = read_manifest(source)
    with safetensors.safe_open(str(source), framework="np") as handle:
        names = policy_tensor_names(manifest.algorithm, list(handle.keys()))
        if not names:
            raise CheckpointError(
                f"{source} holds no tensor of the {manifest.algorithm} policy "
                f"({entry(manifest.algorithm).policy_network}.*)"
            )
        tensors = {name: handle.get_tensor(name) for name in names}
    exported = manifest.model_copy(
        update={
            "contents": "policy",
            "resumable_on": [],
            "runner": {},
            "network": network_layout(manifest),
        }
    )
    partial = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
    try:
        write(partial, tensors, exported)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    return PolicyExport(target, names, target.stat().st_size, source.stat().st_size)
