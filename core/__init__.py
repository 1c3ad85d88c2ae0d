"""Shared by the API and the workers: settings, database models, repositories and artifact storage."""
