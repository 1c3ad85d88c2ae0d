"""Idempotency keys: a retried submission answers what the first one stored (service,
repository)."""
