"""Prometheus gauges of queues, runs and workers (service) over their counting queries
(repository)."""
