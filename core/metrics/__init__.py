"""Metric series: the chart rule (downsample), the stored summaries (tiers, tier_repository),
and the points' SQL (repository, series)."""
