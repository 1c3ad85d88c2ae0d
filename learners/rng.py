"""NumPy random generators whose state fits in a checkpoint tensor.

Every random draw of a run (exploration noise, random warm-up actions, replay sampling) comes from a
``numpy.random.Generator`` over PCG64, seeded from the spec's seed and a stream name, so a resumed
run draws exactly the numbers the uninterrupted run would have. PCG64's state is two 128-bit
integers plus a cached half-word; it is stored as six uint64 words.
"""

from __future__ import annotations

import zlib

import numpy as np
from numpy.typing import NDArray

_MASK64 = (1 << 64) - 1


def _sequence(seed: int, stream: str) -> np.random.SeedSequence:
    return np.random.SeedSequence((seed, zlib.crc32(stream.encode())))


def generator(seed: int, stream: str) -> np.random.Generator:
    """An independent generator for ``stream`` (e.g. ``"exploration"``) of a run seeded ``seed``."""
    return np.random.Generator(np.random.PCG64(_sequence(seed, stream)))


def derive_seed(seed: int, stream: str) -> int:
    """An independent 32-bit seed for ``stream`` of a run seeded ``seed`` (e.g. the eval envs')."""
    return int(_sequence(seed, stream).generate_state(1, np.uint32)[0])


def state_tensor(rng: np.random.Generator) -> NDArray[np.uint64]:
    """``rng``'s full state as a (6,) uint64 array."""
    state = rng.bit_generator.state
    if state["bit_generator"] != "PCG64":
        raise ValueError(f"only PCG64 generators are checkpointed, got {state['bit_generator']}")
    inner, inc = state["state"]["state"], state["state"]["inc"]
    words = [inner >> 64, inner & _MASK64, inc >> 64, inc & _MASK64]
    words += [state["has_uint32"], state["uinteger"]]
    return np.array(words, dtype=np.uint64)


def restore(rng: np.random.Generator, tensor: NDArray[np.uint64]) -> None:
    """Put the state ``state_tensor`` returned back into ``rng``."""
    words = [int(w) for w in np.asarray(tensor, dtype=np.uint64)]
    rng.bit_generator.state = {
        "bit_generator": "PCG64",
        "state": {"state": (words[0] << 64) | words[1], "inc": (words[2] << 64) | words[3]},
        "has_uint32": words[4],
        "uinteger": words[5],
    }
