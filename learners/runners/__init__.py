"""Training loops: one ``run(ctx)`` per kind of algorithm (off-policy, on-policy)."""
