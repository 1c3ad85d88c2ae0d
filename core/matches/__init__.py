"""Matches between stored policies: submission and its rules (service) and their rows
(repository)."""
