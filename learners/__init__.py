"""MARLForge's reinforcement-learning library: configs, registry, env adapters, buffers, runners and
learners. It imports nothing of the service (web, database, broker); a deep-learning framework is
imported only inside its backend package, and only when a run asks for that backend."""
