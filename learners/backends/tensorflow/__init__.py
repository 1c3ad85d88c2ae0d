"""The TensorFlow backend: ops, networks, a torch-exact Adam, and the learners (imports TensorFlow).

Importing this package quiets TensorFlow's C++ start-up logging before TensorFlow itself is
imported: a worker's log should carry the run's messages, not the CPU feature banner. Nothing
outside ``learners/backends/tensorflow/`` imports TensorFlow, and the registry names these learners
by import path, so the API and torch jobs never load it.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
