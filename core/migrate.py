"""Run the Alembic migrations from code (``marlforge migrate``, the test suite's conftest).

The script location is the installed ``migrations`` package, so this works from any directory and
without ``alembic.ini``.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection

import migrations


def alembic_config(url: str | None = None, connection: Connection | None = None) -> Config:
    """An Alembic config for ``url`` (or a lent ``connection``); neither means the settings' URL."""
    config = Config()
    # ``__path__`` rather than ``__file__``: it is set for regular and namespace packages alike
    # (an editable install made before ``migrations/__init__.py`` existed sees a namespace).
    config.set_main_option("script_location", str(Path(next(iter(migrations.__path__)))))
    if url is not None:
        # ConfigParser interpolates '%'; URL-encoded passwords contain it.
        config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def upgrade(url: str | None = None, revision: str = "head") -> None:
    """Bring the database at ``url`` up to ``revision``."""
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str | None = None, revision: str = "base") -> None:
    """Take the database at ``url`` down to ``revision``."""
    command.downgrade(alembic_config(url), revision)
