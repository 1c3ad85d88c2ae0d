"""Retention: compaction of old metric points and purging of deleted runs' rows and files
(service, repository)."""
