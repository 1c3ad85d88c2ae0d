"""A real database outage for fault tests: one database of the test server refuses every
connection and loses those it has, while the server (and every other database on it) runs on."""

from __future__ import annotations

from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url


class Outage:
    """A whole database away, as a restarting or failed-over server is: from the server's own
    admin connection, the database stops accepting connections and every one it has is cut;
    ``end`` lets them in again. The other databases of the server are untouched."""

    def __init__(self, url: str) -> None:
        self.name = make_url(url).database
        self.admin: Engine = create_engine(
            make_url(url).set(database="postgres"), isolation_level="AUTOCOMMIT"
        )

    def start(self) -> None:
        with self.admin.connect() as connection:
            connection.execute(text(f'ALTER DATABASE "{self.name}" ALLOW_CONNECTIONS false'))
            connection.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = :name AND pid <> pg_backend_pid()"
                ),
                {"name": self.name},
            )

    def end(self) -> None:
        with self.admin.connect() as connection:
            connection.execute(text(f'ALTER DATABASE "{self.name}" ALLOW_CONNECTIONS true'))
        self.admin.dispose()
