"""Preallocated NumPy storage of experience: replay (off-policy) and rollout (on-policy)."""
