"""The database as the queue of record: which broker queue a run goes to (queue), which queued
run a worker starts first (fair_share), and lost messages sent again (reconcile)."""
