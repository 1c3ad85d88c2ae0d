"""Studies: one base spec trained over a search space's configurations × seeds.

- ``space``: the sweep's spec and its expansion into validated experiment specs.
- ``service``: submit, read, cancel and resume a sweep (its runs are ordinary experiments).
- ``scheduler``: start its pending runs under ``max_concurrent``.
- ``stats`` and ``summary``: final values, IQM, bootstrap intervals, probability of improvement,
  aggregate curves; the CSV table.
"""
