"""Alembic migrations: the only thing that builds or changes the schema."""
