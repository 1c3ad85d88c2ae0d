"""The MindSpore backend: ops, networks, a torch-exact Adam, and the learners (imports MindSpore).

Importing this package quiets MindSpore's C++ logging before MindSpore itself is imported (a
worker's log should carry the run's messages, not the framework's start-up notes). Nothing outside
``learners/backends/mindspore/`` imports MindSpore, and the registry names these learners by import
path, so the API and the other backends' jobs never load it.

Every update, and every forward pass a rollout makes, is compiled (``mindspore.jit``, graph mode):
MindSpore's eager (PyNative) mode pays a dispatch per operator, which dominates small networks.
``docs/results/2026-11-22-mindspore-speed.md`` has the measurements.
"""

from __future__ import annotations

import os
import tempfile

# MindSpore's C++ side logs through glog: 3 = errors only.
os.environ.setdefault("GLOG_v", "3")
# Run compiled graphs on the calling thread. By default a graph call is handed to MindSpore's
# runtime threads and waited for; for graphs this small the hand-offs are most of the cost (a
# two-layer MLP's call: 2.4 ms by default, 0.7 ms this way, on a busy two-core worker), and a
# rollout makes one call per env step.
os.environ.setdefault("MS_DEV_HOST_BLOCKING_RUN", "1")
# A graph that fails to compile leaves a ``rank_0/om/analyze_fail.ir`` report; keep it out of the
# working directory (a worker's or a test's) and in the temporary one.
os.environ.setdefault("MS_OM_PATH", os.path.join(tempfile.gettempdir(), "marlforge-mindspore"))
