"""The learners' shared math, written once over a small array interface (``Ops``).

- ``ops``: the ``Ops`` protocol; ``numpy_ops``: its NumPy implementation, the oracle.
- ``returns``: TD targets (over ``Ops``), GAE and advantage normalisation (host NumPy).
- ``normalizer``: running mean/std value normalisation (host NumPy).
- ``distributions``: masked categorical and diagonal Gaussian log-probs and entropies.
- ``losses``: PPO's clipped surrogate, clipped value loss (Huber or squared), entropy.
- ``gradients``: global-norm gradient clipping.
- ``wqmix``: Weighted QMIX's OW/CW weights and its two losses.

Each backend supplies an ``Ops`` (``learners/backends/<framework>/ops.py``), its networks and the
gradient step; the parity tests hold every backend to the NumPy oracle.
"""
