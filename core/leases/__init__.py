"""A running run's lease: renewal, takeover of a lapsed lease by the reaper (service), their SQL
(repository)."""
