"""A training run on this worker, one room per job: ``job`` (claim -> supervise -> outcome),
``held`` (every conditional write the run makes while it holds its lease), ``resume`` (the
checkpoint it continues from) and ``lease`` (the worker renewing its hold while the run trains)."""
