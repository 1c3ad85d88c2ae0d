"""An example environment plugin for MARLForge (docs/environments.md walks through it)."""
