"""Celery workers: a thin task per job (``tasks``), and the plain Python it calls: a training run
(``runs``) or a match (``matches``), siblings over shared pieces (``outcome``, ``supervisor``)."""
