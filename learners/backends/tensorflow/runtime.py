"""Device choice and seeding for TensorFlow runs.

The project installs ``tensorflow-cpu``; a worker built with GPU TensorFlow gets ``cuda`` for
``auto`` when TensorFlow sees a GPU. The device string is the one every backend uses (``cpu`` or
``cuda``); ``tf_device`` turns it into TensorFlow's name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf


def has_gpu() -> bool:
    """Whether TensorFlow sees a GPU (``learners.backends.resolve_device`` picks it)."""
    return bool(tf.config.list_physical_devices("GPU"))


def no_gpu_reason() -> str:
    return (
        "TensorFlow on this worker sees no GPU "
        f"(tensorflow {tf.__version__}); use 'auto' or 'cpu', or run it on a GPU worker"
    )


def gpu_names() -> list[str]:
    """The GPUs TensorFlow sees, by name (``[]`` with the ``tensorflow-cpu`` build)."""
    details = tf.config.experimental.get_device_details
    found = tf.config.list_physical_devices("GPU")
    return [str(details(gpu).get("device_name", gpu.name)) for gpu in found]


def describe_device(device: str) -> str:
    """``cpu``, or ``cuda:0 (<name>)``: ``tf_device`` places a ``cuda`` run on the first GPU."""
    if not device.startswith("cuda"):
        return device
    names = gpu_names()
    return f"cuda:0 ({names[0]})" if names else "cuda:0"


def tf_device(device: str) -> str:
    """TensorFlow's name for a backend-neutral device string (``cpu``/``cuda``)."""
    return "/GPU:0" if device.startswith("cuda") else "/CPU:0"


def seed(seed: int) -> None:
    """Seed TensorFlow's global generator and make its kernels deterministic: the learners draw
    from NumPy generators, but determinism also fixes the order of float reductions, which the
    parity with the other backends and exact resumption rely on."""
    tf.random.set_seed(seed)
    tf.config.experimental.enable_op_determinism()


def maybe_compile(fn: Callable[..., Any], compiled: bool) -> Callable[..., Any]:
    """``fn`` as a ``tf.function`` graph, or ``fn`` itself to run eagerly.

    AutoGraph is off: the learners' Python control flow depends only on configuration and static
    shapes, never on tensor values, so there is nothing to convert, and converting every function
    it reaches made the first call of a recurrent update several times slower to trace.
    ``reduce_retracing`` lets a second batch shape (the last, shorter minibatch; a rollout with a
    different number of chunks) produce one graph for both instead of a graph per shape.
    """
    if not compiled:
        return fn
    return tf.function(fn, autograph=False, reduce_retracing=True)


def set_threads(threads: int) -> None:
    """Cap TensorFlow's intra-op threads (and run one op at a time). TensorFlow fixes its thread
    pools when it first runs an op, so in a worker process that has already run a TensorFlow job
    the pools stay as they were; the setting is process-wide either way."""
    if tf.config.threading.get_intra_op_parallelism_threads() == threads:
        return
    try:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    except RuntimeError:
        # "cannot be modified after initialization": the pools already exist.
        return
