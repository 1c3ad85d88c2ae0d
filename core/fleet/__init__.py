"""The registry of workers: each worker's row, its heartbeat and what it serves (registry,
repository)."""
