"""A run (an experiment) and what it records: submission and its rules (service), its rows
(repository), checkpoints, events and their stream, warm starts from another run's checkpoint."""
