"""Shared by the API and the workers: settings, models, repositories, artifact storage."""
