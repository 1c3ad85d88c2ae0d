"""Celery workers: a thin task per job, and the plain-Python orchestration it calls."""
